// recommendation_service: the embedding half of a recommendation service,
// built on the installed CachedEmbeddings package (find_package, then link
// cemb::embedding and cemb::cache; see CMakeLists.txt).
//
// The model: --tables tables of --rows rows x 64 floats on a slow tier (an
// unnamed file in --slow_tier DIR, the temporary directory by default, or
// `--slow_tier dram`), each behind a CachedTable whose DRAM cache holds
// --cache_fraction of its rows. The cache is CacheEviction::kClock with
// admit_after = 2: a row is copied into DRAM on its second miss, and a
// background thread per table evicts with CLOCK while the workers read. No
// thread ever flushes, and no worker waits for another.
//
// The service: a fixed pool of --threads workers (std::thread). A request is
// --batch samples, each with one bag of --bag row indices per table; serving
// it is one pooled lookup (sum) per table into that table's columns of the
// request's output, a batch x (tables * 64) matrix, as the dense part of the
// model would consume it.
//
// The load: closed loop, no queue. Each worker is its own client: it takes a
// request, serves it, and takes the next. The requests replay a trace drawn
// before the clock starts: per table, a stream of Zipf(--alpha) row indices
// (hot rows spread over the table by a permutation of its own), from which a
// request's bags are a window at a random offset. Drawing a request thus
// costs one random number per table, and what is measured is the service.
// A request's latency runs from taking it to its output being complete.
//
// Prints lookups/s, each table's hit rate and cache activity (over the whole
// run, cold start included), and the latency percentiles. Runs for --seconds,
// or until --requests requests were served. A bad flag: a message, exit 2.
//
//   recommendation_service --threads 4 --seconds 10 --rows 2000000 --tables 8 --cache_fraction 0.1
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/random.h"
#include "base/status_macros.h"
#include "cache/cached_table.h"
#include "cache/epoch.h"
#include "embedding/kernels.h"
#include "base/parallel.h"
#include "embedding/table_io.h"

namespace {

constexpr int64_t kDim = 64;
using Table = cemb::CachedTable<float, kDim>;
using Kernels = cemb::TableKernels<Table>;
using Clock = std::chrono::steady_clock;

constexpr char kUsage[] =
    "usage: recommendation_service [--flag value]...\n"
    "  --threads N          worker threads (default 4)\n"
    "  --seconds S          run for S seconds (default 10)\n"
    "  --requests R         or: stop after R requests\n"
    "  --rows N             rows per table (default 2000000)\n"
    "  --tables T           tables (default 8)\n"
    "  --cache_fraction F   DRAM cache per table, a fraction of its rows in (0, 1] (default 0.1)\n"
    "  --bag L              indices per bag (default 32)\n"
    "  --batch B            samples per request, one bag per table each (default 1)\n"
    "  --alpha A            Zipf exponent of the indices (default 1.0)\n"
    "  --slow_tier DIR      directory of the slow tier's files, or 'dram' (default: the temporary directory)\n";

struct Flags {
  int threads = 4;
  double seconds = 10;
  int64_t requests = 0;  // > 0: stop after this many requests instead of after `seconds`
  int64_t rows = 2'000'000;
  int tables = 8;
  double cache_fraction = 0.1;
  int bag = 32;
  int batch = 1;
  double alpha = 1.0;
  std::string slow_tier = std::filesystem::temp_directory_path().string();
};

// `text` as a number that `valid` accepts, else an error naming the flag.
template <typename N, typename Valid>
absl::Status ParseNumber(absl::string_view flag, absl::string_view text, const char* expected, Valid valid, N* out) {
  N v{};
  bool parsed;
  if constexpr (std::is_floating_point_v<N>) {
    parsed = absl::SimpleAtod(text, &v) && std::isfinite(v);
  } else {
    parsed = absl::SimpleAtoi(text, &v);
  }
  if (!parsed || !valid(v)) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": expected ", expected, ", got '", text, "'"));
  }
  *out = v;
  return absl::OkStatus();
}

absl::Status ParseFlags(int argc, char** argv, Flags* f) {
  bool seconds_given = false;
  for (int i = 1; i < argc; i += 2) {
    const absl::string_view flag = argv[i];
    if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat(flag, ": missing its value"));
    const absl::string_view v = argv[i + 1];
    auto positive = [](auto x) { return x > 0; };
    if (flag == "--threads") {
      CEMB_RETURN_IF_ERROR(ParseNumber(flag, v, "an integer in [1, 256]", [](int x) { return x >= 1 && x <= 256; },
                                       &f->threads));
    } else if (flag == "--seconds") {
      seconds_given = true;
      CEMB_RETURN_IF_ERROR(ParseNumber(flag, v, "a number of seconds > 0", positive, &f->seconds));
    } else if (flag == "--requests") {
      CEMB_RETURN_IF_ERROR(ParseNumber(flag, v, "an integer > 0", positive, &f->requests));
    } else if (flag == "--rows") {
      CEMB_RETURN_IF_ERROR(ParseNumber(flag, v, "an integer in [1, 2^31)",
                                       [](int64_t x) { return x >= 1 && x <= INT32_MAX; }, &f->rows));
    } else if (flag == "--tables") {
      CEMB_RETURN_IF_ERROR(ParseNumber(flag, v, "an integer in [1, 1024]", [](int x) { return x >= 1 && x <= 1024; },
                                       &f->tables));
    } else if (flag == "--cache_fraction") {
      CEMB_RETURN_IF_ERROR(ParseNumber(flag, v, "a fraction of the rows in (0, 1]",
                                       [](double x) { return x > 0 && x <= 1; }, &f->cache_fraction));
    } else if (flag == "--bag") {
      CEMB_RETURN_IF_ERROR(ParseNumber(flag, v, "an integer in [1, 4096]", [](int x) { return x >= 1 && x <= 4096; },
                                       &f->bag));
    } else if (flag == "--batch") {
      CEMB_RETURN_IF_ERROR(ParseNumber(flag, v, "an integer in [1, 4096]", [](int x) { return x >= 1 && x <= 4096; },
                                       &f->batch));
    } else if (flag == "--alpha") {
      CEMB_RETURN_IF_ERROR(ParseNumber(flag, v, "an exponent > 0", positive, &f->alpha));
    } else if (flag == "--slow_tier") {
      if (v.empty()) return absl::InvalidArgumentError("--slow_tier: expected a directory or 'dram', got ''");
      f->slow_tier = std::string(v);
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag '", flag, "'"));
    }
  }
  if (seconds_given && f->requests > 0) {
    return absl::InvalidArgumentError("--seconds and --requests: give one of them, not both");
  }
  return absl::OkStatus();
}

// The embedding tables of the model and their kernels, planned once.
struct Model {
  std::vector<Table> tables;
  std::vector<Kernels> kernels;  // kernels[t] points at tables[t]: the vector never grows after they are made
};

absl::StatusOr<std::unique_ptr<Model>> LoadModel(const Flags& f) {
  auto model = std::make_unique<Model>();
  const cemb::TierOptions tier =
      f.slow_tier == "dram" ? cemb::TierOptions::Dram() : cemb::TierOptions::Pmem(f.slow_tier);
  for (int t = 0; t < f.tables; ++t) {
    CEMB_ASSIGN_OR_RETURN(Table table,
                          Table::Create({.name = absl::StrCat("t", t), .nvectors = f.rows, .tier = tier},
                                        {.eviction = cemb::CacheEviction::kClock,
                                         .lower = cemb::CacheSize::Fraction(f.cache_fraction),
                                         .slack = cemb::CacheSize::Bytes(0),
                                         .admit_after = 2}));
    cemb::InitUniform(table, /*seed=*/t);  // a real service loads its trained rows: cemb::LoadRows(table, path)
    model->tables.push_back(std::move(table));
  }
  for (const Table& table : model->tables) {
    CEMB_ASSIGN_OR_RETURN(Kernels kernels, Kernels::Create(table));
    model->kernels.push_back(std::move(kernels));
  }
  return model;
}

// Serves one request: bags[t] pooled into table t's 64 columns of `out`.
// One ReadSection around the whole request: the row pointers of every table
// stay valid until it closes (the kernels would open one per call on their
// own; one per request announces this thread once instead of per table).
absl::Status Serve(const Model& model, std::span<const cemb::Bags<int32_t>> bags, cemb::MatrixView out) {
  cemb::ReadSection section;
  for (size_t t = 0; t < model.kernels.size(); ++t) {
    CEMB_RETURN_IF_ERROR(model.kernels[t].pooled_lookup(bags[t], out.slice(static_cast<int64_t>(t) * kDim, kDim)));
  }
  return absl::OkStatus();
}

// Per table, `length` Zipf(alpha) row indices, the hot rows spread over the
// table by a permutation seeded with the table's number.
std::vector<std::vector<int32_t>> DrawTraces(const Flags& f, int64_t length) {
  std::vector<std::vector<int32_t>> traces(static_cast<size_t>(f.tables));
  const cemb::ZipfSampler zipf(static_cast<uint64_t>(f.rows), f.alpha);
  cemb::parallel_for(f.tables, 0, [&](int64_t t) {
    const cemb::LfsrScrambler spread(static_cast<uint64_t>(f.rows), static_cast<uint64_t>(t));
    cemb::Xoshiro256pp rng(cemb::SplitMix64::Mix(7, static_cast<uint64_t>(t)));
    traces[t].resize(static_cast<size_t>(length));
    for (int32_t& row : traces[t]) row = static_cast<int32_t>(spread(zipf(rng)));
  });
  return traces;
}

struct Worker {
  std::vector<float> latency_us;  // one per request served
  absl::Status status;
};

// One worker's closed loop: take a request (a window of each table's trace),
// serve it, record its latency; until `stop`, or until `issued` reaches
// f.requests when that is given.
void Work(const Model& model, const std::vector<std::vector<int32_t>>& traces, const Flags& f, int id,
          std::atomic<int64_t>& issued, std::atomic<bool>& stop, Worker* me) {
  const int64_t per_table = int64_t{f.batch} * f.bag;
  std::vector<int32_t> offsets(static_cast<size_t>(f.batch) + 1);
  for (int b = 0; b <= f.batch; ++b) offsets[b] = b * f.bag;
  std::vector<cemb::Bags<int32_t>> bags(static_cast<size_t>(f.tables));
  std::vector<float> output(static_cast<size_t>(f.batch * f.tables * kDim));
  const cemb::MatrixView out{output.data(), f.batch, f.tables * kDim, f.tables * kDim};
  cemb::Xoshiro256pp rng(cemb::SplitMix64::Mix(11, static_cast<uint64_t>(id)));
  for (;;) {
    if (f.requests > 0 ? issued.fetch_add(1, std::memory_order_relaxed) >= f.requests
                       : stop.load(std::memory_order_relaxed)) {
      break;
    }
    for (int t = 0; t < f.tables; ++t) {
      const std::vector<int32_t>& trace = traces[t];
      const uint64_t start = rng.Below(trace.size() - static_cast<uint64_t>(per_table) + 1);
      bags[t] = {offsets, std::span<const int32_t>(trace).subspan(start, static_cast<size_t>(per_table))};
    }
    const Clock::time_point begin = Clock::now();
    if (absl::Status s = Serve(model, bags, out); !s.ok()) {
      me->status = s;
      stop.store(true);
      return;
    }
    me->latency_us.push_back(std::chrono::duration<float, std::micro>(Clock::now() - begin).count());
  }
}

// The q-quantile of sorted `v` (the smallest value with at least q of v at or below it).
float Quantile(const std::vector<float>& v, double q) {
  const auto rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

int Run(const Flags& f) {
  absl::StatusOr<std::unique_ptr<Model>> model = LoadModel(f);
  if (!model.ok()) {
    std::fprintf(stderr, "recommendation_service: %s\n", model.status().ToString().c_str());
    return 1;
  }
  const Table& first = (*model)->tables[0];
  std::printf("model: %d tables x %lld rows x %lld floats on %s, each with a CLOCK cache of %lld rows (%.3g%%) "
              "that admits a row on its 2nd miss\n",
              f.tables, static_cast<long long>(f.rows), static_cast<long long>(kDim),
              f.slow_tier == "dram" ? "DRAM" : absl::StrCat("a file in ", f.slow_tier).c_str(),
              static_cast<long long>(first.capacity_rows()), 100.0 * f.cache_fraction);
  std::printf("load: %d workers, closed loop; a request = %d sample(s) x 1 bag of %d Zipf(%.2f) indices per table\n",
              f.threads, f.batch, f.bag, f.alpha);

  const int64_t per_table = int64_t{f.batch} * f.bag;
  const std::vector<std::vector<int32_t>> traces =
      DrawTraces(f, std::max(per_table, std::min<int64_t>(int64_t{1} << 22, 8 * f.rows)));
  std::vector<Worker> workers(static_cast<size_t>(f.threads));
  std::atomic<int64_t> issued{0};
  std::atomic<bool> stop{false};
  const Clock::time_point start = Clock::now();
  std::vector<std::thread> pool;
  for (int i = 0; i < f.threads; ++i) {
    pool.emplace_back(Work, std::cref(**model), std::cref(traces), std::cref(f), i, std::ref(issued), std::ref(stop),
                      &workers[i]);
  }
  if (f.requests == 0) {
    while (!stop.load() && Clock::now() - start < std::chrono::duration<double>(f.seconds)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    stop.store(true);
  }
  for (std::thread& t : pool) t.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();

  std::vector<float> latency;
  for (const Worker& w : workers) {
    if (!w.status.ok()) {
      std::fprintf(stderr, "recommendation_service: %s\n", w.status.ToString().c_str());
      return 1;
    }
    latency.insert(latency.end(), w.latency_us.begin(), w.latency_us.end());
  }
  if (latency.empty()) {
    std::fprintf(stderr, "recommendation_service: no request was served\n");
    return 1;
  }
  std::sort(latency.begin(), latency.end());
  const auto requests = static_cast<double>(latency.size());
  const double lookups = requests * static_cast<double>(per_table * f.tables);
  std::printf("served %zu requests, %.0f lookups in %.3f s: %.4g lookups/s, %.4g requests/s\n", latency.size(),
              lookups, elapsed, lookups / elapsed, requests / elapsed);
  for (const Table& table : (*model)->tables) {
    const cemb::CacheStats s = table.stats();
    std::printf("%s: hit rate %.3f, lookups %llu, migrations %llu, rows evicted %llu in %llu eviction rounds, "
                "flushes %llu\n",
                table.name().c_str(), s.hit_rate(), static_cast<unsigned long long>(s.lookups()),
                static_cast<unsigned long long>(s.migrations()), static_cast<unsigned long long>(s.rows_evicted()),
                static_cast<unsigned long long>(s.eviction_rounds()), static_cast<unsigned long long>(s.flushes()));
  }
  std::printf("latency (us): p50 %.1f  p99 %.1f  p99.9 %.1f  max %.1f\n", Quantile(latency, 0.5),
              Quantile(latency, 0.99), Quantile(latency, 0.999), latency.back());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && (absl::string_view(argv[1]) == "--help" || absl::string_view(argv[1]) == "-h")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  Flags flags;
  if (absl::Status s = ParseFlags(argc, argv, &flags); !s.ok()) {
    std::fprintf(stderr, "recommendation_service: %s\n%s", std::string(s.message()).c_str(), kUsage);
    return 2;
  }
  return Run(flags);
}
