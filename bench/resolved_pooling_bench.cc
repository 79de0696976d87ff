// Pooling a serving request's resolved rows (PooledSumResolved,
// ssd/snapshot_table.h): the embedding kernels over the row addresses
// (`kernels`), against the plain loop it was before (`scalar`, kept here
// verbatim) and the DRAM table's own pooled kernel over the same rows
// (`table`: it finds each row itself, base + row * D).
//
//   build/bench/resolved_pooling_bench --benchmark_min_time=0.5
//
// Shape: a pool of 2^16 resident rows (a SnapshotTable's slots); a request
// is 26 tables' bags of L random rows each, pooled by one call per table as
// a serving request does (DLRM's 26 sparse features). 64 requests are drawn
// before the timed loop and cycled through. One thread.
// Counters: rows/s (rows pooled), GB/s (row bytes read); real_time is per request.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "bench/bench_util.h"
#include "embedding/kernels.h"
#include "embedding/simple_table.h"
#include "ssd/snapshot_table.h"

namespace cemb::bench {
namespace {

constexpr int64_t kPoolRows = int64_t{1} << 16;
constexpr int kTables = 26;
constexpr int kRequests = 64;

enum class Variant { kScalar, kKernels, kTable };

// PooledSumResolved as it was: a plain loop, not the ISA-dispatched kernels.
template <typename T>
void ScalarPooled(std::span<const T* const> rows, std::span<const int64_t> offsets, int64_t featuresize,
                  Pooling pooling, std::span<const float> weights, float* out, int64_t ld) {
  for (size_t b = 0; b + 1 < offsets.size(); ++b) {
    float* o = out + static_cast<int64_t>(b) * ld;
    for (int64_t c = 0; c < featuresize; ++c) o[c] = 0.0f;
    for (int64_t j = offsets[b]; j < offsets[b + 1]; ++j) {
      const T* r = rows[static_cast<size_t>(j)];
      if (weights.empty()) {
        for (int64_t c = 0; c < featuresize; ++c) o[c] += ToFloat(r[c]);
      } else {
        const float w = weights[static_cast<size_t>(j)];
        for (int64_t c = 0; c < featuresize; ++c) o[c] = std::fma(ToFloat(r[c]), w, o[c]);
      }
    }
    if (pooling == Pooling::kMean && offsets[b + 1] > offsets[b]) {
      const float s = 1.0f / static_cast<float>(offsets[b + 1] - offsets[b]);
      for (int64_t c = 0; c < featuresize; ++c) o[c] *= s;
    }
  }
}

// args: D, L.
template <typename T, Variant kVariant>
void BM_PoolRequest(benchmark::State& state) {
  const int64_t d = state.range(0), bag = state.range(1);
  auto table = SimpleTable<T>::Create({.name = "pool", .nvectors = kPoolRows, .featuresize = d});
  if (!table.ok()) {
    state.SkipWithError(table.status().ToString().c_str());
    return;
  }
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  for (int64_t r = 0; r < kPoolRows; ++r) {
    for (int64_t c = 0; c < d; ++c) table->rowpointer(r)[c] = FromFloat<T>(value(rng));
  }
  auto kernels = TableKernels<SimpleTable<T>>::Create(*table);
  if (!kernels.ok()) {
    state.SkipWithError(kernels.status().ToString().c_str());
    return;
  }
  // Per request and table: L row ids and their resolved addresses.
  const int64_t per_request = kTables * bag;
  std::vector<int64_t> ids(static_cast<size_t>(kRequests * per_request));
  std::vector<const T*> rows(ids.size());
  for (size_t j = 0; j < ids.size(); ++j) {
    ids[j] = static_cast<int64_t>(rng() % kPoolRows);
    rows[j] = table->rowpointer(ids[j]);
  }
  const std::vector<int64_t> offsets = {0, bag};
  std::vector<float> out(static_cast<size_t>(kTables * d));
  int request = 0;
  for (auto _ : state) {
    const size_t first = static_cast<size_t>(request * per_request);
    for (int k = 0; k < kTables; ++k) {
      const size_t at = first + static_cast<size_t>(k * bag);
      float* o = out.data() + k * d;
      if constexpr (kVariant == Variant::kScalar) {
        ScalarPooled<T>(std::span<const T* const>(rows.data() + at, static_cast<size_t>(bag)), offsets, d,
                        Pooling::kSum, {}, o, d);
      } else if constexpr (kVariant == Variant::kKernels) {
        PooledSumResolved<T>(std::span<const T* const>(rows.data() + at, static_cast<size_t>(bag)), offsets, d,
                             Pooling::kSum, {}, o, d);
      } else {
        const Bags<int64_t> bags{offsets, std::span<const int64_t>(ids.data() + at, static_cast<size_t>(bag)), {}};
        kernels->pooled_range(kernels->pooled_args(bags, MatrixView{o, 1, d, d}, {}), 0, 1);
      }
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
    request = request + 1 == kRequests ? 0 : request + 1;
  }
  const double pooled = static_cast<double>(state.iterations()) * static_cast<double>(per_request);
  state.counters["rows/s"] = benchmark::Counter(pooled, benchmark::Counter::kIsRate);
  state.counters["GB/s"] =
      benchmark::Counter(pooled * static_cast<double>(d * static_cast<int64_t>(sizeof(T))) / 1e9,
                         benchmark::Counter::kIsRate);
}

void Grid(benchmark::internal::Benchmark* b) {
  for (int64_t d : {64, 128, 24}) {
    for (int64_t bag : {1, 20, 80}) b->Args({d, bag});
  }
  b->ArgNames({"D", "L"})->UseRealTime();
}

BENCHMARK_TEMPLATE(BM_PoolRequest, float, Variant::kScalar)->Apply(Grid);
BENCHMARK_TEMPLATE(BM_PoolRequest, float, Variant::kKernels)->Apply(Grid);
BENCHMARK_TEMPLATE(BM_PoolRequest, float, Variant::kTable)->Apply(Grid);
BENCHMARK_TEMPLATE(BM_PoolRequest, bfloat16, Variant::kScalar)->Apply(Grid);
BENCHMARK_TEMPLATE(BM_PoolRequest, bfloat16, Variant::kKernels)->Apply(Grid);
BENCHMARK_TEMPLATE(BM_PoolRequest, bfloat16, Variant::kTable)->Apply(Grid);

}  // namespace
}  // namespace cemb::bench

int main(int argc, char** argv) {
  cemb::bench::RequireOptimizedBuild(argv[0]);
  benchmark::Initialize(&argc, argv);
  cemb::bench::AddMachineContext();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
