// The check of a batch's bags (CheckBags: validate_bags, embedding/validate.h)
// on one thread: what a batch costs before a kernel reads a row (the layer
// checks each batch once; a Python batch is checked twice, in its
// conversion and by its layer).
//
//   build/bench/validate_bench --benchmark_min_time=1
//
// Shapes: the Kaggle model's (26 tables x 2048 bags of 1 value) and
// bench-ssd's with 20 values a bag (8 x 2048 x 20).
// Counters: values checked a second (offsets and indices) and the bytes of
// the arrays read a second; the time is a batch's.
#include <cstdint>
#include <string>
#include <vector>

#include "base/random.h"
#include "benchmark/benchmark.h"
#include "embedding/validate.h"

namespace {

void BM_CheckBags(benchmark::State& state) {
  const int tables = static_cast<int>(state.range(0));
  const int per_bag = static_cast<int>(state.range(1));
  constexpr int kBags = 2048;
  constexpr int64_t kRows = 1'000'000;
  std::vector<std::vector<int32_t>> offsets(tables), indices(tables);
  cemb::Xoshiro256pp rng(1);
  for (int t = 0; t < tables; ++t) {
    for (int b = 0; b <= kBags; ++b) offsets[t].push_back(b * per_bag);
    for (int i = 0; i < kBags * per_bag; ++i) indices[t].push_back(static_cast<int32_t>(rng.Below(kRows)));
  }
  const std::string name = "emb";
  for (auto _ : state) {
    for (int t = 0; t < tables; ++t) {
      auto checked = cemb::CheckBags<int32_t>(name, kRows, cemb::Bags<int32_t>{offsets[t], indices[t]});
      if (!checked.ok()) state.SkipWithError("a bag did not pass");
      benchmark::DoNotOptimize(checked);
    }
  }
  const double values = static_cast<double>(tables) * kBags * (per_bag + 1);  // offsets and indices
  state.counters["values/s"] = benchmark::Counter(values, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["bytes/s"] = benchmark::Counter(values * sizeof(int32_t), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_CheckBags)->Args({26, 1})->Args({8, 20})->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
