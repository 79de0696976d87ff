// serve_bench: the embedding lookups of a recommendation service.
// Per storage and thread count: lookups/s, its ratio to the DRAM
// table at the same thread count, and the latency of requests: p50, p99,
// p99.9 and the slowest one (the stall a reader would see if anything made
// it wait: a flush, a lock, an eviction round).
//
// Storages, one at a time (built, measured at every thread count, freed):
//   dram     SimpleTable<float, D> in DRAM: the reference.
//   full     CachedTable, CacheEviction::kClock, lower = 100% (slack 5%: the
//            cache is whole pages, and 100% of the rows rounds down to fewer
//            pages than the rows need), every row cached by one pass before
//            the clock starts: the cost of the indirection alone, hit rate 1.
//   clock10  CachedTable, kClock, lower = --cache_fraction (10%), slack 0,
//            admit_after = 2 (the serving setting), with eviction running;
//            first --warmup_seconds of the same load at the most threads,
//            then measured. Beside its hit rate, the ideal: the share of the
//            lookups that the hottest capacity_rows() rows receive under
//            Zipf(alpha), computed from the distribution (no cache can do
//            better without knowing the future).
// The cached tables' slow tier is DRAM by default (what the cache costs, not
// a device's latency), or a file in --slow_tier DIR.
//
// A request is a ranking request: --batch candidates (32), each a sample with
// one bag of --bag indices (40) per table, so tables x batch x bag lookups
// (8 x 32 x 40 = 10,240), pooled (sum) into a batch x (tables * D) matrix.
// Load: each thread is a closed-loop client of its own (no queue): it takes
// a request, serves it, takes the next. The requests replay, at random
// offsets, traces of Zipf(alpha) row indices drawn before the clock starts
// (per table, hot rows spread by a permutation of its own; --alpha 0:
// uniform), so taking a request costs one random number per table. Latency
// runs from taking a request to its output being complete.
//
//   build/bench/serve_bench                                  (8 x 500k rows, D=64; threads 1, 2, all cores)
//   build/bench/serve_bench --rows 1000000 --dim 128 --threads 1,4,16 --seconds 10
//   build/bench/serve_bench --pairs 10 --seconds 1 --threads 1,2    (the hit path, paired: below)
// Flags: --tables --rows --dim (64|128) --batch --bag --alpha --cache_fraction
// --seconds (per measurement) --warmup_seconds --threads (a list)
// --storages (a list of dram,full,clock10) --slow_tier (dram or a directory)
// --pairs N (dram and full side by side with `indirect`, measured in N
// rounds in rotating order: the ratios within each round and their medians,
// the figures for a machine whose speed drifts between minutes; below).
// Memory: one storage's tables at a time: rows x tables x D x 4 bytes, twice
// for `full` (--pairs: all three at once, four times), plus 4 bytes per
// trace entry (at most 8 x rows per table).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <latch>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/human.h"
#include "base/random.h"
#include "bench/bench_util.h"
#include "bench/indirect_table.h"
#include "cache/cached_table.h"
#include "cache/epoch.h"
#include "embedding/kernels.h"
#include "embedding/table_io.h"

namespace cemb::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Flags {
  int tables = 8;
  int64_t rows = 500'000;
  int dim = 64;
  int batch = 32;
  int bag = 40;
  double alpha = 1.0;
  double cache_fraction = 0.1;
  double seconds = 5;
  double warmup_seconds = 2;
  std::vector<int> threads;  // default: 1, 2, hardware_concurrency()
  std::vector<std::string> storages = {"dram", "full", "clock10"};
  std::string slow_tier = "dram";
  int pairs = 0;  // > 0: the rounds of dram, full and indirect instead of the table
};

absl::Status BadFlag(absl::string_view flag, absl::string_view expected, absl::string_view got) {
  return absl::InvalidArgumentError(absl::StrCat(flag, ": expected ", expected, ", got '", got, "'"));
}

absl::Status ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; i += 2) {
    const absl::string_view flag = argv[i];
    if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat(flag, ": missing its value"));
    const absl::string_view v = argv[i + 1];
    auto integer = [&](auto* out, int64_t lo, int64_t hi) {
      int64_t x = 0;
      if (!absl::SimpleAtoi(v, &x) || x < lo || x > hi) {
        return BadFlag(flag, absl::StrCat("an integer in [", lo, ", ", hi, "]"), v);
      }
      *out = static_cast<std::remove_pointer_t<decltype(out)>>(x);
      return absl::OkStatus();
    };
    auto real = [&](double* out, double lo, bool lo_open, double hi) {
      double x = 0;
      if (!absl::SimpleAtod(v, &x) || !(lo_open ? x > lo : x >= lo) || !(x <= hi)) {
        return BadFlag(flag, absl::StrCat("a number in ", lo_open ? "(" : "[", lo, ", ", hi, "]"), v);
      }
      *out = x;
      return absl::OkStatus();
    };
    absl::Status s;
    if (flag == "--tables") s = integer(&f->tables, 1, 1024);
    else if (flag == "--rows") s = integer(&f->rows, 1, INT32_MAX);
    else if (flag == "--dim") s = v == "64" || v == "128" ? integer(&f->dim, 64, 128) : BadFlag(flag, "64 or 128", v);
    else if (flag == "--batch") s = integer(&f->batch, 1, 65536);
    else if (flag == "--bag") s = integer(&f->bag, 1, 4096);
    else if (flag == "--alpha") s = real(&f->alpha, 0, false, 10);
    else if (flag == "--cache_fraction") s = real(&f->cache_fraction, 0, true, 1);
    else if (flag == "--seconds") s = real(&f->seconds, 0, true, 3600);
    else if (flag == "--warmup_seconds") s = real(&f->warmup_seconds, 0, false, 3600);
    else if (flag == "--slow_tier") f->slow_tier = std::string(v);
    else if (flag == "--pairs") s = integer(&f->pairs, 0, 1000);
    else if (flag == "--threads") {
      f->threads.clear();
      for (absl::string_view part : absl::StrSplit(v, ',')) {
        int n = 0;
        if (!absl::SimpleAtoi(part, &n) || n < 1 || n > 1000) {
          return BadFlag(flag, "a list of thread counts in [1, 1000] such as 1,2,16", v);
        }
        f->threads.push_back(n);
      }
    } else if (flag == "--storages") {
      f->storages.clear();
      for (absl::string_view part : absl::StrSplit(v, ',')) {
        if (part != "dram" && part != "full" && part != "clock10") {
          return BadFlag(flag, "a list of dram, full, clock10", v);
        }
        f->storages.emplace_back(part);
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag '", flag, "'"));
    }
    if (!s.ok()) return s;
  }
  if (f->threads.empty()) {
    f->threads = {1, 2, static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))};
    std::sort(f->threads.begin(), f->threads.end());
    f->threads.erase(std::unique(f->threads.begin(), f->threads.end()), f->threads.end());
  }
  return absl::OkStatus();
}

// The share of Zipf(alpha) lookups over `rows` rows that the `capacity`
// hottest receive (alpha 0: uniform).
double IdealHitRate(int64_t rows, double alpha, int64_t capacity) {
  double top = 0.0, all = 0.0;
  for (int64_t k = 1; k <= rows; ++k) {
    const double p = std::pow(static_cast<double>(k), -alpha);
    all += p;
    if (k <= capacity) top += p;
  }
  return top / all;
}

using Traces = std::vector<std::vector<int32_t>>;

Traces DrawTraces(const Flags& f) {
  const int64_t per_request = int64_t{f.batch} * f.bag;
  const int64_t length = std::max(per_request, std::min<int64_t>(int64_t{1} << 23, 8 * f.rows));
  Traces traces(static_cast<size_t>(f.tables), std::vector<int32_t>(static_cast<size_t>(length)));
  const ZipfSampler zipf(static_cast<uint64_t>(f.rows), f.alpha > 0 ? f.alpha : 1.0);
  parallel_for(f.tables, 0, [&](int64_t t) {
    const uint64_t seed = SplitMix64::Mix(5, static_cast<uint64_t>(t));
    if (f.alpha > 0) {
      FillZipf(std::span<int32_t>(traces[t]), zipf, LfsrScrambler(static_cast<uint64_t>(f.rows), seed), seed);
    } else {
      FillUniform(std::span<int32_t>(traces[t]), f.rows, seed);
    }
  });
  return traces;
}

struct Measurement {
  double seconds = 0.0;
  std::vector<float> latency_us;  // sorted, one per request
  double cpu_share = 0.0;         // of `threads` CPUs the process had
};

// `threads` closed-loop clients serving requests on `kernels` for `seconds`.
template <typename Kernels>
Measurement Measure(const std::vector<Kernels>& kernels, const Traces& traces, const Flags& f, int threads,
                    double seconds) {
  const int64_t per_table = int64_t{f.batch} * f.bag;
  const int64_t dim = f.dim;
  std::vector<std::vector<float>> latency(static_cast<size_t>(threads));
  std::atomic<bool> stop{false};
  std::latch ready(threads + 1);
  auto client = [&](int id) {
    std::vector<int32_t> offsets(static_cast<size_t>(f.batch) + 1);
    for (int b = 0; b <= f.batch; ++b) offsets[b] = b * f.bag;
    std::vector<float> output(static_cast<size_t>(f.batch * f.tables * dim));
    const MatrixView out{output.data(), f.batch, f.tables * dim, f.tables * dim};
    Xoshiro256pp rng(SplitMix64::Mix(13, static_cast<uint64_t>(id)));
    std::vector<float>& mine = latency[id];
    mine.reserve(1 << 16);
    ready.arrive_and_wait();
    while (!stop.load(std::memory_order_relaxed)) {
      const Clock::time_point begin = Clock::now();
      {
        [[maybe_unused]] const auto scope = ReadScopeOf(kernels[0].table());  // one ReadSection per request
        for (int t = 0; t < f.tables; ++t) {
          const std::vector<int32_t>& trace = traces[t];
          const uint64_t start = rng.Below(trace.size() - static_cast<uint64_t>(per_table) + 1);
          const Bags<int32_t> bags{offsets, std::span<const int32_t>(trace).subspan(start, per_table)};
          const absl::Status s = kernels[t].pooled_lookup(bags, out.slice(t * dim, dim));
          if (!s.ok()) {
            std::fprintf(stderr, "serve_bench: %s\n", s.ToString().c_str());
            std::exit(1);
          }
        }
      }
      mine.push_back(std::chrono::duration<float, std::micro>(Clock::now() - begin).count());
    }
  };
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) pool.emplace_back(client, i);
  ready.arrive_and_wait();
  const CpuClock cpu0 = CpuClock::Now();
  const Clock::time_point start = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop.store(true);
  for (std::thread& t : pool) t.join();
  Measurement m;
  m.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  m.cpu_share = CpuClock::Now().Share(cpu0, threads);
  for (const std::vector<float>& v : latency) m.latency_us.insert(m.latency_us.end(), v.begin(), v.end());
  std::sort(m.latency_us.begin(), m.latency_us.end());
  return m;
}

float Quantile(const std::vector<float>& sorted, double q) {
  if (sorted.empty()) return 0.0f;
  const auto rank = static_cast<size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

// What one row of the table says beside the timings.
struct CacheColumns {
  double hit_rate = -1.0;  // < 0: not a cache
  double ideal = -1.0;     // < 0: not computed
  double copied = 0.0;     // migrations per lookup
  uint64_t evicted = 0;
};

// "-" for a negative v, else v formatted.
std::string Cell(double v, const char* format) {
  if (v < 0) return "-";
  char text[32];
  std::snprintf(text, sizeof text, format, v);
  return text;
}

void PrintRow(const std::string& storage, int threads, const Flags& f, const Measurement& m, double dram_rate,
              const CacheColumns& c) {
  const double requests = static_cast<double>(m.latency_us.size());
  const double rate = requests * f.tables * f.batch * f.bag / m.seconds;
  std::printf("| %s | %d | %.3g | %s | %.0f | %.1f | %.1f | %.1f | %.1f | %s | %s | %s | %s | %.2f |\n",
              storage.c_str(), threads, rate, Cell(dram_rate > 0 ? rate / dram_rate : -1, "%.2fx").c_str(),
              requests / m.seconds, Quantile(m.latency_us, 0.5), Quantile(m.latency_us, 0.99),
              Quantile(m.latency_us, 0.999), m.latency_us.empty() ? 0.0f : m.latency_us.back(),
              Cell(c.hit_rate, "%.4f").c_str(), Cell(c.ideal, "%.4f").c_str(),
              c.hit_rate < 0 ? "-" : absl::StrFormat("%.2f%%", 100 * c.copied).c_str(),
              c.hit_rate < 0 ? "-" : absl::StrCat(c.evicted).c_str(), m.cpu_share);
}

template <typename Table>
std::vector<TableKernels<Table>> MakeKernels(const std::vector<Table>& tables) {
  std::vector<TableKernels<Table>> kernels;
  for (const Table& t : tables) {
    absl::StatusOr<TableKernels<Table>> k = TableKernels<Table>::Create(t);
    if (!k.ok()) {
      std::fprintf(stderr, "serve_bench: %s\n", k.status().ToString().c_str());
      std::exit(1);
    }
    kernels.push_back(std::move(*k));
  }
  return kernels;
}

template <typename Table>
void CheckOk(const absl::StatusOr<Table>& t) {
  if (!t.ok()) {
    std::fprintf(stderr, "serve_bench: %s\n", t.status().ToString().c_str());
    std::exit(1);
  }
}

// --tables tables of --rows rows in DRAM, each filled as InitUniform does
// with its own seed (a SimpleTable, or bench/indirect_table.h's IndirectTable).
template <typename Table>
std::vector<Table> MakeDramTables(const Flags& f) {
  std::vector<Table> tables;
  for (int t = 0; t < f.tables; ++t) {
    absl::StatusOr<Table> table = Table::Create({.name = absl::StrCat("t", t), .nvectors = f.rows});
    CheckOk(table);
    InitUniform(*table, static_cast<uint64_t>(t));
    tables.push_back(std::move(*table));
  }
  return tables;
}

template <int64_t D>
void RunDram(const Flags& f, const Traces& traces, std::vector<double>* dram_rates) {
  const auto tables = MakeDramTables<SimpleTable<float, D>>(f);
  const auto kernels = MakeKernels(tables);
  for (size_t i = 0; i < f.threads.size(); ++i) {
    const Measurement m = Measure(kernels, traces, f, f.threads[i], f.seconds);
    (*dram_rates)[i] = static_cast<double>(m.latency_us.size()) * f.tables * f.batch * f.bag / m.seconds;
    PrintRow("dram", f.threads[i], f, m, -1.0, {});
  }
}

// The cached tables of `full` (every row cached by one pass) or clock10.
template <int64_t D>
std::vector<CachedTable<float, D>> MakeCachedTables(const Flags& f, bool full) {
  using Table = CachedTable<float, D>;
  const TierOptions tier = f.slow_tier == "dram" ? TierOptions::Dram() : TierOptions::Pmem(f.slow_tier);
  const CacheOptions options =
      full ? CacheOptions{.eviction = CacheEviction::kClock, .lower = CacheSize::Fraction(1.0),
                          .slack = CacheSize::Fraction(0.05)}
           : CacheOptions{.eviction = CacheEviction::kClock, .lower = CacheSize::Fraction(f.cache_fraction),
                          .slack = CacheSize::Bytes(0), .admit_after = 2};
  std::vector<Table> tables;
  for (int t = 0; t < f.tables; ++t) {
    absl::StatusOr<Table> table = Table::Create({.name = absl::StrCat("t", t), .nvectors = f.rows, .tier = tier},
                                                options);
    CheckOk(table);
    InitUniform(*table, static_cast<uint64_t>(t));
    tables.push_back(std::move(*table));
  }
  if (full) {  // every row cached by one pass
    parallel_for(f.tables, 0, [&](int64_t t) {
      const ReadSection section;
      for (int64_t r = 0; r < f.rows; ++r) (void)tables[t].rowpointer(r);
    });
    for (const Table& t : tables) {
      if (t.cached_rows() != f.rows) {
        std::fprintf(stderr, "serve_bench: %s: %lld of %lld rows cached after the warm-up pass\n", t.name().c_str(),
                     static_cast<long long>(t.cached_rows()), static_cast<long long>(f.rows));
        std::exit(1);
      }
    }
  }
  return tables;
}

template <int64_t D>
void RunCached(const Flags& f, const Traces& traces, bool full, const std::vector<double>& dram_rates) {
  const auto tables = MakeCachedTables<D>(f, full);
  const auto kernels = MakeKernels(tables);
  const std::string name = full ? "full" : "clock10";
  if (!full && f.warmup_seconds > 0) {
    (void)Measure(kernels, traces, f, f.threads.back(), f.warmup_seconds);
  }
  const double ideal = full ? 1.0 : IdealHitRate(f.rows, f.alpha, tables[0].capacity_rows());
  for (size_t i = 0; i < f.threads.size(); ++i) {
    std::vector<CacheStats> before;
    for (const auto& t : tables) before.push_back(t.stats());
    const Measurement m = Measure(kernels, traces, f, f.threads[i], f.seconds);
    uint64_t lookups = 0, hits = 0, migrations = 0, evicted = 0;
    for (size_t t = 0; t < tables.size(); ++t) {
      const CacheStats d = tables[t].stats() - before[t];
      lookups += d.lookups();
      hits += d.hits();
      migrations += d.migrations();
      evicted += d.rows_evicted();
    }
    const double n = std::max<double>(1.0, static_cast<double>(lookups));
    PrintRow(name, f.threads[i], f, m, dram_rates[i],
             {.hit_rate = static_cast<double>(hits) / n, .ideal = ideal,
              .copied = static_cast<double>(migrations) / n, .evicted = evicted});
  }
}

double LookupRate(const Measurement& m, const Flags& f) {
  return static_cast<double>(m.latency_us.size()) * f.tables * f.batch * f.bag / m.seconds;
}

// --pairs N: the hit path's cost, robust to a machine whose speed drifts.
// Three storages live side by side: the DRAM table, the fully cached table,
// and `indirect`, the same rows in DRAM read through a plain array of one
// pointer per row (bench/indirect_table.h): no tags, no counting, no
// reclamation, read by the same resolve-ahead kernels: what one pointer per
// row costs by itself (the extra cache line per lookup), taken in the same
// run. full / indirect near 1 says the cache's protocol costs nothing beyond
// its pointer word; indirect / dram is the price of the word. Each round
// measures the three for --seconds in rotating order, so a drift lands on
// all of them; the figures are medians over rounds. `full / dram in lines`
// counts cache lines instead of lookups: a DRAM row is D * 4 / 64 lines, a
// cached one a line more (its word); near 1 says the cached table reads
// memory at the DRAM table's own line rate, so what is left of the gap is
// the word's line itself. It holds where rows and words come from memory
// (uniform indices over tables far beyond the CPU caches); under Zipf the
// hot rows come from the CPU caches and it overstates.
template <int64_t D>
int RunPairs(const Flags& f, const Traces& traces) {
  const auto dram_tables = MakeDramTables<SimpleTable<float, D>>(f);
  const auto dram = MakeKernels(dram_tables);
  const auto full_tables = MakeCachedTables<D>(f, /*full=*/true);
  const auto full = MakeKernels(full_tables);
  const auto indirect_tables = MakeDramTables<IndirectTable<float, D, true>>(f);
  const auto indirect = MakeKernels(indirect_tables);
  std::printf("\n%d rounds of dram, full and indirect, %.2f s each; lookups/s (best of the rounds) and ratios "
              "(median over rounds)\n\n",
              f.pairs, f.seconds);
  std::printf("| threads | dram | full | indirect | full / dram | indirect / dram | full / indirect | full / dram in "
              "lines | rounds full within 1.15x of dram |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  constexpr double kRowLines = D * sizeof(float) / 64.0;
  constexpr double kLinesRatio = (kRowLines + 1) / kRowLines;  // a cached row's lines per DRAM row's
  for (int threads : f.threads) {
    enum { kDram, kFull, kIndirect, kStorages };
    double best[kStorages] = {};
    std::vector<double> full_dram, indirect_dram, full_indirect;
    for (int p = 0; p < f.pairs; ++p) {
      double rate[kStorages];
      for (int k = 0; k < kStorages; ++k) {
        const int which = (k + p) % kStorages;
        const Measurement m = which == kDram   ? Measure(dram, traces, f, threads, f.seconds)
                              : which == kFull ? Measure(full, traces, f, threads, f.seconds)
                                               : Measure(indirect, traces, f, threads, f.seconds);
        rate[which] = LookupRate(m, f);
        best[which] = std::max(best[which], rate[which]);
      }
      full_dram.push_back(rate[kFull] / rate[kDram]);
      indirect_dram.push_back(rate[kIndirect] / rate[kDram]);
      full_indirect.push_back(rate[kFull] / rate[kIndirect]);
    }
    const auto within = std::count_if(full_dram.begin(), full_dram.end(), [](double r) { return r >= 1 / 1.15; });
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    std::printf("| %d | %.3g | %.3g | %.3g | %.2fx | %.2fx | %.2fx | %.2fx | %lld of %d |\n", threads, best[kDram],
                best[kFull], best[kIndirect], median(full_dram), median(indirect_dram), median(full_indirect),
                median(full_dram) * kLinesRatio, static_cast<long long>(within), f.pairs);
  }
  return 0;
}

template <int64_t D>
int Run(const Flags& f) {
  std::printf("serve_bench: %s; %u hardware threads; kernels %s\n", ReadFileField("/proc/cpuinfo", "model name").c_str(),
              std::thread::hardware_concurrency(), [] {
                absl::StatusOr<Isa> isa = ResolveIsa(Isa::kAuto);
                return isa.ok() ? IsaName(*isa) : std::string("unknown");
              }().c_str());
  const int64_t capacity_guess = static_cast<int64_t>(f.cache_fraction * static_cast<double>(f.rows));
  std::printf("tables: %d x %lld rows x D=%d float (%s each); cached tables' slow tier: %s\n", f.tables,
              static_cast<long long>(f.rows), f.dim, HumanBytes(static_cast<double>(f.rows) * f.dim * 4).c_str(),
              f.slow_tier == "dram" ? "DRAM" : absl::StrCat("a file in ", f.slow_tier).c_str());
  std::printf("request: %d samples x 1 bag of %d indices per table = %lld lookups, %s indices; "
              "closed-loop clients; %.1f s per row of the table%s\n",
              f.batch, f.bag, static_cast<long long>(int64_t{f.tables} * f.batch * f.bag),
              f.alpha > 0 ? absl::StrFormat("Zipf(%.2f)", f.alpha).c_str() : "uniform", f.seconds,
              absl::StrFormat(", clock10 warmed %.1f s (%.3g%% cache, about %lld rows per table)", f.warmup_seconds,
                              100 * f.cache_fraction, static_cast<long long>(capacity_guess))
                  .c_str());
  const Traces traces = DrawTraces(f);
  if (f.pairs > 0) return RunPairs<D>(f, traces);
  std::printf("\n| storage | threads | lookups/s | vs dram | requests/s | p50 us | p99 us | p99.9 us | stall (max) us "
              "| hit rate | ideal | copied | rows evicted | cpu share |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  std::vector<double> dram_rates(f.threads.size(), -1.0);
  for (const std::string& storage : f.storages) {
    if (storage == "dram") RunDram<D>(f, traces, &dram_rates);
    else RunCached<D>(f, traces, storage == "full", dram_rates);
  }
  return 0;
}

}  // namespace
}  // namespace cemb::bench

int main(int argc, char** argv) {
  cemb::bench::RequireOptimizedBuild("serve_bench");
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  cemb::bench::Flags flags;
  if (absl::Status s = cemb::bench::ParseFlags(argc, argv, &flags); !s.ok()) {
    std::fprintf(stderr, "serve_bench: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  return flags.dim == 64 ? cemb::bench::Run<64>(flags) : cemb::bench::Run<128>(flags);
}
