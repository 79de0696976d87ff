// The DLRM's dense layers: time per training step of the bottom and top MLPs
// (Forward + Backward + Update) for the Kaggle model and the model of
// dlrm_s_benchmark.sh, in fp32 and bf16, and of the dot interaction (forward,
// backward; hand-written kernels, generic and AVX-512, against a oneDNN
// batched matmul that computes the full X X^T), and of DLRM-DCNv2's cross
// network.
//
//   build-dlrm/bench/mlp_bench --benchmark_min_time=1
//
// Counters: items/s = samples/s; GFLOP/s counts 2 flops per multiply-add of
// the three GEMMs of each layer (forward, backward data where computed,
// backward weights). Refuses to run a debug build.
#include <array>
#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/random.h"
#include "dlrm/cross_network.h"
#include "dlrm/interaction.h"
#include "dlrm/mlp.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace cemb::dlrm {
namespace {

constexpr int64_t kBatch = 2048;

// The machine is shared: with --benchmark_repetitions=N, the minimum over the
// repetitions is the figure least disturbed by other processes; and every
// benchmark reports min_ms, its fastest single iteration.
double Min(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

// Times single iterations; the fastest is reported as the counter min_ms.
class IterationTimer {
 public:
  void Start() { t0_ = std::chrono::steady_clock::now(); }
  void Stop() {
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count();
    min_ms_ = std::min(min_ms_, ms);
  }
  void Report(benchmark::State& state) const { state.counters["min_ms"] = min_ms_; }

 private:
  std::chrono::steady_clock::time_point t0_;
  double min_ms_ = 1e30;
};

struct Model {
  const char* name;
  std::vector<int64_t> sizes;
  bool input_grad;  // the top MLP feeds the interaction's backward
};

// Kaggle (dlrm_s_pytorch --arch-mlp-bot=13-512-256-64-16 --arch-mlp-top=512-256-1,
// 26 tables, D = 16, dot): the top input is 16 + 27 * 26 / 2 = 367.
// dlrm_s_benchmark.sh (--arch-mlp-bot=512-512-64 --arch-mlp-top=1024-1024-1024-1,
// 8 tables, D = 64, dot): dlrm_s_pytorch prepends the interaction width,
// 64 + 9 * 8 / 2 = 100, to the top MLP.
const Model kModels[] = {
    {"kaggle_bottom", {13, 512, 256, 64, 16}, false},
    {"kaggle_top", {367, 512, 256, 1}, true},
    {"benchmark_bottom", {512, 512, 64}, false},
    {"benchmark_top", {100, 1024, 1024, 1024, 1}, true},
};

std::vector<float> RandomVector(size_t n, uint64_t seed) {
  Xoshiro256pp rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(2 * rng.Uniform() - 1);
  return v;
}

void BM_MlpStep(benchmark::State& state) {
  const Model& model = kModels[state.range(0)];
  const Precision precision = state.range(1) ? Precision::kBf16 : Precision::kFp32;
  MlpOptions o;
  o.sizes = model.sizes;
  o.max_batch = kBatch;
  o.precision = precision;
  o.compute_input_grad = model.input_grad;
  absl::StatusOr<Mlp> mlp = Mlp::Create(o);
  if (!mlp.ok()) {
    state.SkipWithError(mlp.status().ToString().c_str());
    return;
  }
  const std::vector<float> x = RandomVector(kBatch * model.sizes.front(), 1);
  const std::vector<float> dy = RandomVector(kBatch * model.sizes.back(), 2);
  std::vector<float> dx(model.input_grad ? kBatch * model.sizes.front() : 0);
  IterationTimer timer;
  for (auto _ : state) {
    timer.Start();
    absl::StatusOr<std::span<const float>> y = mlp->Forward(kBatch, x.data());
    absl::Status st = y.status();
    if (st.ok()) st = mlp->Backward(kBatch, dy.data(), model.input_grad ? dx.data() : nullptr);
    if (!st.ok()) {
      state.SkipWithError(st.ToString().c_str());
      return;
    }
    mlp->Update(1e-6f);
    timer.Stop();
    benchmark::DoNotOptimize(dx.data());
  }
  timer.Report(state);
  double macs = 0;
  for (size_t l = 0; l + 1 < model.sizes.size(); ++l) {
    const double layer = static_cast<double>(model.sizes[l]) * model.sizes[l + 1] * kBatch;
    macs += (l == 0 && !model.input_grad) ? 2 * layer : 3 * layer;
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
  state.counters["GFLOP/s"] = benchmark::Counter(2 * macs * 1e-9 * state.iterations(), benchmark::Counter::kIsRate);
  state.SetLabel(absl::StrCat(model.name, " ", absl::StrJoin(model.sizes, "-"),
                              precision == Precision::kBf16 ? " bf16 " : " fp32 ",
                              mlp->ImplementationNames().front()));
}
BENCHMARK(BM_MlpStep)
    ->ArgNames({"model", "bf16"})
    ->ArgsProduct({{0, 1, 2, 3}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->ComputeStatistics("min", Min)
    ->UseRealTime();

// DLRM-DCNv2's cross network (MLPerf Training's shape: the dense arch's 128
// beside 26 tables x 128 = 3456 wide, 3 layers of rank 512), one training
// step (Forward + Backward + Update), fp32 or bf16. Args: batch, bf16.
// GFLOP/s counts the six GEMMs of n x d x r of each layer (two forward,
// four backward).
void BM_CrossNetworkStep(benchmark::State& state) {
  const int64_t n = state.range(0), d = 3456, r = 512;
  const Precision precision = state.range(1) ? Precision::kBf16 : Precision::kFp32;
  constexpr int kLayers = 3;
  absl::StatusOr<CrossNetwork> dcn =
      CrossNetwork::Create({.width = d, .layers = kLayers, .rank = r, .max_batch = n, .precision = precision});
  if (!dcn.ok()) {
    state.SkipWithError(dcn.status().ToString().c_str());
    return;
  }
  const std::vector<float> x = RandomVector(n * d, 1);
  const std::vector<float> dy = RandomVector(n * d, 2);
  std::vector<float> dx(n * d);
  IterationTimer timer;
  for (auto _ : state) {
    timer.Start();
    absl::Status st = dcn->Forward(n, x.data()).status();
    if (st.ok()) st = dcn->Backward(n, dy.data(), dx.data());
    if (!st.ok()) {
      state.SkipWithError(st.ToString().c_str());
      return;
    }
    dcn->Update(1e-9f);
    timer.Stop();
    benchmark::DoNotOptimize(dx.data());
  }
  timer.Report(state);
  const double macs = 6.0 * static_cast<double>(n) * d * r * kLayers;
  state.SetItemsProcessed(state.iterations() * n);
  state.counters["GFLOP/s"] = benchmark::Counter(2 * macs * 1e-9 * state.iterations(), benchmark::Counter::kIsRate);
  state.SetLabel(absl::StrCat("d ", d, ", rank ", r, ", ", kLayers, " layers, ", PrecisionName(precision)));
}
BENCHMARK(BM_CrossNetworkStep)
    ->ArgNames({"batch", "bf16"})
    ->ArgsProduct({{512, 4096}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->ComputeStatistics("min", Min)
    ->UseRealTime();

// Dot interaction, hand-written kernels. Args: T, D, isa (0 generic,
// 1 AVX2, 2 AVX-512), direction (0 forward, 1 backward).
void BM_Interaction(benchmark::State& state) {
  const int64_t T = state.range(0), D = state.range(1);
  const bool backward = state.range(3) != 0;
  absl::StatusOr<Interaction> inter = Interaction::Create(
      {.num_sparse = T, .dim = D,
       .isa = std::array{Isa::kGeneric, Isa::kAvx2, Isa::kAvx512}[state.range(2)]});
  if (!inter.ok()) {
    state.SkipWithError(inter.status().ToString().c_str());
    return;
  }
  const int64_t W = inter->output_width();
  // One [batch x (T+1)*D] input matrix, as the trainer lays it out.
  const std::vector<float> input = RandomVector(kBatch * (T + 1) * D, 3);
  std::vector<float> out(kBatch * W);
  const std::vector<float> d_out = RandomVector(kBatch * W, 4);
  std::vector<float> d_input(kBatch * (T + 1) * D);
  const int64_t ld = (T + 1) * D;
  IterationTimer timer;
  for (auto _ : state) {
    timer.Start();
    absl::Status st =
        backward ? inter->Backward({input.data(), kBatch, D, ld}, {input.data() + D, kBatch, T * D, ld},
                                   {d_out.data(), kBatch, W, W}, {d_input.data(), kBatch, D, ld},
                                   {d_input.data() + D, kBatch, T * D, ld})
                 : inter->Forward({input.data(), kBatch, D, ld}, {input.data() + D, kBatch, T * D, ld},
                                  {out.data(), kBatch, W, W});
    timer.Stop();
    if (!st.ok()) {
      state.SkipWithError(st.ToString().c_str());
      return;
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::DoNotOptimize(d_input.data());
  }
  timer.Report(state);
  state.SetItemsProcessed(state.iterations() * kBatch);
  const double bytes = static_cast<double>(kBatch) * (backward ? 2 * ld + W : ld + W) * 4;
  state.SetBytesProcessed(static_cast<int64_t>(bytes * state.iterations()));
  state.SetLabel(absl::StrCat(backward ? "backward" : "forward", " ", IsaName(inter->isa()),
                              " threads=", inter->options().threads > 0 ? inter->options().threads
                                                                         : omp_get_max_threads()));
}
BENCHMARK(BM_Interaction)
    ->ArgNames({"T", "D", "isa", "bwd"})
    ->ArgsProduct({{26}, {16}, {0, 1, 2}, {0, 1}})
    ->ArgsProduct({{8}, {64}, {0, 1, 2}, {0, 1}})
    ->Unit(benchmark::kMicrosecond)
    ->ComputeStatistics("min", Min)
    ->UseRealTime();

// The alternative: oneDNN batched matmul Z[b] = X[b] X[b]^T over the same
// [batch x F x D] input (the weights are the input seen transposed through
// strides), computing the full F x F product (twice the needed pairs) and not
// yet extracting the triangle: a lower bound on that approach's forward.
void BM_InteractionOnednnBatchedMatmul(benchmark::State& state) {
  const int64_t T = state.range(0), D = state.range(1), F = T + 1;
  using dnnl::memory;
  try {
    dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    dnnl::stream stream(engine);
    memory::desc src({kBatch, F, D}, memory::data_type::f32, memory::dims{F * D, D, 1});
    memory::desc wei({kBatch, D, F}, memory::data_type::f32, memory::dims{F * D, 1, D});
    memory::desc dst({kBatch, F, F}, memory::data_type::f32, memory::dims{F * F, F, 1});
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, wei, dst), engine);
    std::vector<float> input = RandomVector(kBatch * F * D, 3), z(kBatch * F * F);
    memory m_src(src, engine, input.data()), m_wei(wei, engine, input.data()), m_dst(dst, engine, z.data());
    dnnl::matmul mm(pd);
    std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, m_src}, {DNNL_ARG_WEIGHTS, m_wei}, {DNNL_ARG_DST, m_dst}};
    IterationTimer timer;
    for (auto _ : state) {
      timer.Start();
      mm.execute(stream, args);
      stream.wait();
      timer.Stop();
      benchmark::DoNotOptimize(z.data());
    }
    timer.Report(state);
    state.SetItemsProcessed(state.iterations() * kBatch);
    state.SetLabel(absl::StrCat("forward full XX^T ", pd.impl_info_str()));
  } catch (const dnnl::error& e) {
    state.SkipWithError(e.what());
  }
}
BENCHMARK(BM_InteractionOnednnBatchedMatmul)
    ->ArgNames({"T", "D"})
    ->Args({26, 16})
    ->Args({8, 64})
    ->Unit(benchmark::kMicrosecond)
    ->ComputeStatistics("min", Min)
    ->UseRealTime();

}  // namespace
}  // namespace cemb::dlrm

int main(int argc, char** argv) {
#ifndef NDEBUG
  std::fprintf(stderr,
               "mlp_bench: this is a debug build (NDEBUG is not defined); its timings mean nothing. "
               "Build with -DCMAKE_BUILD_TYPE=Release.\n");
  return 1;
#endif
  benchmark::AddCustomContext("omp_threads", std::to_string(omp_get_max_threads()));
  benchmark::AddCustomContext("onednn", absl::StrCat(dnnl::version()->major, ".", dnnl::version()->minor, ".",
                                                     dnnl::version()->patch));
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
