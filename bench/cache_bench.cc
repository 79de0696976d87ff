// The CachedEmbeddings cache sweeps (thesis Figures 5.8
// and 5.9): time, hit rate and slow-tier bytes of lookups and of a
// steady-state training loop, per storage policy.
//
//   build/bench/cache_bench --cemb_grid=small          (default; minutes on 2 cores)
//   build/bench/cache_bench --cemb_grid=sweep          (the full sweep)
//   build/bench/cache_bench --cemb_grid=headline       (item 10: 8 x 1M rows, D=128, L=40, batch 16384)
// Flags: --cemb_rows=N --cemb_tables=N --cemb_batch=N --cemb_threads=N
//        --cemb_slow_dir=DIR (the slow tier: a PMem-file tier there; default $TMPDIR or /tmp)
//
// Storage (the "kind" argument): dram = SimpleTable in DRAM, simple =
// SimpleTable on the slow tier, dynamic, dynamic_k2 (admission after 2
// sightings), static (filled from a profile of the first batches).
//
// Each benchmark first runs warm-up batches (the cache reaches its steady
// state: full, flushed when full), then resets the statistics and times.
// Counters per batch: hit_rate, slow_read_MB, slow_written_MB, flushes; and
// model_optane_ms = slow_read / 30 GB/s + slow_written / 11 GB/s, the time the
// slow-tier traffic alone would take on the thesis' Optane platform (per
// socket figures): a MODEL from counted bytes, not a measurement. This
// machine has no PMem: its "slow tier" is a file in the page cache (DRAM).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "bench/bench_util.h"
#include "cache/row_profiler.h"
#include "embedding/ensemble.h"
#include "embedding/table_io.h"
#include "tables/storage.h"

namespace cemb::bench {
namespace {

struct Flags {
  std::string grid = "small";
  int64_t rows = 0, tables = 0, batch = 0;
  int threads = 0;
  std::string slow_dir;
} g_flags;

enum Kind { kDram, kSimple, kDynamic, kDynamicK2, kStatic };
const char* KindName(int k) {
  static const char* names[] = {"dram", "simple", "dynamic", "dynamic_k2", "static"};
  return names[k];
}

struct Shape {
  int kind, lower_pct, dist, L, D, train;
  int64_t rows, tables, batch;
  int threads;
};

template <int64_t D>
void RunShape(benchmark::State& state, const Shape& s) {
  using Stored = StoredTable<float, D>;
  StorageConfig config;
  config.kind = s.kind == kDram ? StorageKind::kDram
              : s.kind == kSimple ? StorageKind::kSimple
              : s.kind == kStatic ? StorageKind::kStatic : StorageKind::kDynamic;
  TierOptions slow = TierOptions::Pmem(g_flags.slow_dir);
  config.slow_tier = slow;
  config.cache.lower = CacheSize::Fraction(s.lower_pct / 100.0);
  config.cache.slack = s.lower_pct >= 100 ? CacheSize::Bytes(0) : CacheSize::Fraction(0.05);
  config.cache.admit_after = s.kind == kDynamicK2 ? 2 : 0;
  std::vector<std::unique_ptr<Stored>> tables;
  Ensemble ensemble({.threads = s.threads});
  for (int64_t t = 0; t < s.tables; ++t) {
    auto made = MakeStoredTable<float, D>({.name = "t" + std::to_string(t), .nvectors = s.rows}, config);
    if (!made.ok()) {
      state.SkipWithError(std::string(made.status().message()).c_str());
      return;
    }
    tables.push_back(std::make_unique<Stored>(*std::move(made)));
    std::visit([&](auto& tab) { InitUniform(tab, 1 + t); }, *tables.back());
    if (absl::Status st = std::visit([&](auto& tab) { return ensemble.add(tab); }, *tables.back()); !st.ok()) {
      state.SkipWithError(std::string(st.message()).c_str());
      return;
    }
  }
  // A pool of batches per table, cycled. It holds at least twice as many
  // indices as the table has rows, so that a small batch (L=1) does not
  // cycle through a working set the cache holds whole.
  const int64_t n = s.batch * s.L;
  const int kPool = static_cast<int>(std::clamp<int64_t>((2 * s.rows + n - 1) / n, 8, 4096));
  std::vector<std::vector<std::vector<int32_t>>> idx(kPool, std::vector<std::vector<int32_t>>(s.tables));
  std::vector<int32_t> offsets(s.batch + 1);
  for (int64_t b = 0; b <= s.batch; ++b) offsets[b] = static_cast<int32_t>(b * s.L);
  ZipfSampler zipf(s.rows, 1.0);
  for (int p = 0; p < kPool; ++p) {
    for (int64_t t = 0; t < s.tables; ++t) {
      idx[p][t].resize(n);
      if (s.dist == 0) {
        FillUniform<int32_t>(idx[p][t], s.rows, SplitMix64::Mix(p, t));
      } else {
        FillZipf<int32_t>(idx[p][t], zipf, LfsrScrambler(s.rows, 7 + t), SplitMix64::Mix(p, t));
      }
    }
  }
  std::vector<float> out(s.batch * s.tables * D), grad(s.batch * s.tables * D, 1e-3f);
  std::vector<Bags<int32_t>> bags(s.tables);
  std::vector<MatrixView> views(s.tables);
  std::vector<ConstMatrixView> grads(s.tables);
  for (int64_t t = 0; t < s.tables; ++t) {
    views[t] = MatrixView{out.data(), s.batch, s.tables * D, s.tables * D}.slice(t * D, D);
    grads[t] = ConstMatrixView(grad.data() + t * D, s.batch, D, s.tables * D);
  }
  auto cached = [&](int64_t t) { return std::get_if<CachedTable<float, D>>(tables[t].get()); };
  if (s.kind == kStatic) {  // profile the first batches, then fill with the hottest rows
    for (int64_t t = 0; t < s.tables; ++t) {
      RowProfiler profile(s.rows);
      for (int p = 0; p < kPool; ++p) (void)profile.observe(idx[p][t]);
      (void)cached(t)->fill(profile.hottest(cached(t)->capacity_rows()));
    }
  }
  int flushes = 0;
  auto step = [&](int p) {
    for (int64_t t = 0; t < s.tables; ++t) bags[t] = Bags<int32_t>{offsets, idx[p][t]};
    if (!ensemble.pooled_lookup<int32_t>(bags, views).ok()) std::abort();
    if (s.train) {
      if (!ensemble.reindex<int32_t>(bags, Pooling::kSum).ok()) std::abort();
      if (!ensemble.sgd_update(grads, {.learning_rate = 0.01f}).ok()) std::abort();
    }
    for (int64_t t = 0; t < s.tables; ++t) {
      if (auto* c = cached(t); c != nullptr && c->isfull()) {
        c->flush_dirty();
        ++flushes;
      }
    }
  };
  for (int w = 0; w < std::max(3 * 8, kPool); ++w) step(w % kPool);  // warm-up to the steady state
  for (int64_t t = 0; t < s.tables; ++t) {
    if (auto* c = cached(t)) c->reset_stats();
  }
  flushes = 0;
  int p = 0;
  for (auto _ : state) step(p++ % kPool);
  CacheStats total;
  bool any = false;
  for (int64_t t = 0; t < s.tables; ++t) {
    if (auto* c = cached(t)) {
      const CacheStats st = c->stats();
      for (int k = 0; k < cache_internal::kHotCounters; ++k) total.hot[k] += st.hot[k];
      total.cold.rows_written_back += st.cold.rows_written_back;
      total.cold.rows_filled += st.cold.rows_filled;
      total.row_bytes = st.row_bytes;
      any = true;
    }
  }
  const double iters = static_cast<double>(state.iterations());
  const double row_bytes = D * sizeof(float);
  double read = 0, written = 0;
  if (any) {
    read = static_cast<double>(total.slow_bytes_read());
    written = static_cast<double>(total.slow_bytes_written());
    state.counters["hit_rate"] = total.hit_rate();
  } else if (s.kind == kSimple) {  // every row read (and each updated row read + written) on the slow tier
    read = iters * static_cast<double>(n * s.tables) * row_bytes;
    state.counters["hit_rate"] = 0;
  }
  state.counters["slow_read_MB"] = read / iters / 1e6;
  state.counters["slow_written_MB"] = written / iters / 1e6;
  state.counters["flushes"] = flushes / iters;
  state.counters["model_optane_ms"] = (read / iters / 30e9 + written / iters / 11e9) * 1e3;
  state.counters["rows/s"] = benchmark::Counter(static_cast<double>(n * s.tables), benchmark::Counter::kIsIterationInvariantRate);
}

void Run(benchmark::State& state, Shape s) {
  switch (s.D) {
    case 16: RunShape<16>(state, s); break;
    case 128: RunShape<128>(state, s); break;
    default: RunShape<256>(state, s); break;
  }
}

void Register(const Shape& s) {
  const std::string name = std::string(s.train ? "train/" : "lookup/") + KindName(s.kind) +
                           "/lower:" + std::to_string(s.lower_pct) + "/" + (s.dist == 0 ? "uniform" : "zipf") +
                           "/L:" + std::to_string(s.L) + "/D:" + std::to_string(s.D) +
                           "/tables:" + std::to_string(s.tables) + "/rows:" + std::to_string(s.rows) +
                           "/batch:" + std::to_string(s.batch) + "/threads:" + std::to_string(s.threads);
  benchmark::RegisterBenchmark(name.c_str(), [s](benchmark::State& st) { Run(st, s); })
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
}

void RegisterGrid() {
  const bool headline = g_flags.grid == "headline";
  const bool sweep = g_flags.grid == "sweep";
  const int64_t rows = g_flags.rows > 0 ? g_flags.rows : headline ? 1'000'000 : sweep ? 1'000'000 : 200'000;
  const int64_t tables = g_flags.tables > 0 ? g_flags.tables : headline ? 8 : 4;
  const int64_t batch = g_flags.batch > 0 ? g_flags.batch : headline ? 16384 : 2048;
  const int threads = g_flags.threads > 0 ? g_flags.threads : 2;
  auto shape = [&](int kind, int lower, int dist, int L, int D, int train) {
    return Shape{kind, lower, dist, L, D, train, rows, tables, batch, threads};
  };
  if (headline) {
    // Item 10: the indirection with every row cached, and the Zipf hit rate at 10%.
    Register(shape(kDram, 0, 0, 40, 128, 0));
    Register(shape(kDynamic, 100, 0, 40, 128, 0));
    Register(shape(kDynamic, 10, 1, 40, 128, 0));
    Register(shape(kDynamicK2, 10, 1, 40, 128, 0));
    return;
  }
  const std::vector<int> lowers = sweep ? std::vector<int>{10, 25, 50, 75, 100} : std::vector<int>{10, 50, 100};
  const std::vector<int> ds = sweep ? std::vector<int>{16, 256} : std::vector<int>{128};
  const std::vector<int> ls = sweep ? std::vector<int>{1, 40} : std::vector<int>{40};
  for (int D : ds) {
    for (int L : ls) {
      for (int dist : {0, 1}) {
        Register(shape(kDram, 0, dist, L, D, 0));
        Register(shape(kSimple, 0, dist, L, D, 0));
        for (int lower : lowers) {
          Register(shape(kDynamic, lower, dist, L, D, 0));
          Register(shape(kDynamicK2, lower, dist, L, D, 0));
        }
      }
    }
  }
  // The steady-state training loop per policy (lookup, reindex, sgd, flush_dirty when full).
  for (int dist : {0, 1}) {
    Register(shape(kDram, 0, dist, 40, 128, 1));
    Register(shape(kSimple, 0, dist, 40, 128, 1));
    for (int kind : {kDynamic, kDynamicK2, kStatic}) Register(shape(kind, 10, dist, 40, 128, 1));
  }
}

}  // namespace
}  // namespace cemb::bench

int main(int argc, char** argv) {
  using cemb::bench::g_flags;
  cemb::bench::RequireOptimizedBuild(argv[0]);
  const char* tmp = std::getenv("TMPDIR");
  g_flags.slow_dir = tmp != nullptr ? tmp : "/tmp";
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* key) -> const char* {
      const size_t k = std::strlen(key);
      return a.rfind(key, 0) == 0 ? argv[i] + k : nullptr;
    };
    if (const char* v = value("--cemb_grid=")) g_flags.grid = v;
    else if (const char* v = value("--cemb_rows=")) g_flags.rows = std::atoll(v);
    else if (const char* v = value("--cemb_tables=")) g_flags.tables = std::atoll(v);
    else if (const char* v = value("--cemb_batch=")) g_flags.batch = std::atoll(v);
    else if (const char* v = value("--cemb_threads=")) g_flags.threads = std::atoi(v);
    else if (const char* v = value("--cemb_slow_dir=")) g_flags.slow_dir = v;
    else rest.push_back(argv[i]);
  }
  int n = static_cast<int>(rest.size());
  benchmark::Initialize(&n, rest.data());
  cemb::bench::AddMachineContext();
  benchmark::AddCustomContext("slow_tier", "pmem-file:" + g_flags.slow_dir);
  cemb::bench::RegisterGrid();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
