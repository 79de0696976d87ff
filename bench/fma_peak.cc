// The machine's fp32 limit for the MLPs: the multiply-adds per second its
// cores retire with the widest vectors they have (AVX-512, else AVX2 + FMA),
// every thread running independent chains of fused multiply-adds in
// registers (no memory traffic). An MLP at batch B can at best reach this;
// bench/run_serve.sh prints it beside the predictor's samples/s so that a
// model's GFLOP/s can be read as a share of it.
//
//   build/bench/fma_peak [--threads N] [--seconds S]
//
// Prints one line: "fma peak: G GFLOP/s fp32 (ISA, N threads, ...)". GFLOP/s
// counts 2 flops per multiply-add.
#include <immintrin.h>
#include <omp.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace {

// Twelve independent chains: more than an FMA's latency (4 cycles) times the
// FMA ports (2) keeps every port busy.
constexpr int kChains = 12;
constexpr int64_t kInner = 1 << 16;

// Each runs `rounds` x kInner x kChains vector multiply-adds and returns a
// value that depends on all of them (the loop cannot be dropped).
__attribute__((target("avx512f"))) float Run512(int64_t rounds) {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(0.001f * static_cast<float>(c));
  const __m512 m = _mm512_set1_ps(0.9999999f), a = _mm512_set1_ps(1e-7f);  // converges to ~1: no denormals
  for (int64_t r = 0; r < rounds; ++r) {
    for (int64_t i = 0; i < kInner; ++i) {
#pragma GCC unroll 12
      for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], m, a);
    }
  }
  for (int c = 1; c < kChains; ++c) acc[0] = _mm512_add_ps(acc[0], acc[c]);
  alignas(64) float f[16];
  _mm512_store_ps(f, acc[0]);
  float sum = 0;
  for (float x : f) sum += x;
  return sum;
}

__attribute__((target("avx2,fma"))) float Run256(int64_t rounds) {
  __m256 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(0.001f * static_cast<float>(c));
  const __m256 m = _mm256_set1_ps(0.9999999f), a = _mm256_set1_ps(1e-7f);
  for (int64_t r = 0; r < rounds; ++r) {
    for (int64_t i = 0; i < kInner; ++i) {
#pragma GCC unroll 12
      for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], m, a);
    }
  }
  for (int c = 1; c < kChains; ++c) acc[0] = _mm256_add_ps(acc[0], acc[c]);
  alignas(32) float f[8];
  _mm256_store_ps(f, acc[0]);
  float sum = 0;
  for (float x : f) sum += x;
  return sum;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = omp_get_num_procs();
  double seconds = 2.0;
  bool ok = true;
  for (int i = 1; i < argc; i += 2) {
    const std::string_view k = argv[i];
    ok = i + 1 < argc && (k == "--threads" || k == "--seconds");
    if (!ok) break;
    if (k == "--threads") {
      threads = std::atoi(argv[i + 1]);
    } else {
      seconds = std::atof(argv[i + 1]);
    }
  }
  if (!ok || threads < 1 || !(seconds > 0)) {
    std::fprintf(stderr, "usage: fma_peak [--threads N >= 1] [--seconds S > 0]\n");
    return 2;
  }
  const bool avx512 = __builtin_cpu_supports("avx512f");
  if (!avx512 && !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) {
    std::fprintf(stderr, "fma_peak: neither AVX-512 nor AVX2 + FMA on this CPU\n");
    return 1;
  }
  const int lanes = avx512 ? 16 : 8;
  auto run = [&](int64_t rounds) { return avx512 ? Run512(rounds) : Run256(rounds); };
  using Clock = std::chrono::steady_clock;
  // Rounds for about `seconds` on one thread, from a short calibration.
  const Clock::time_point t0 = Clock::now();
  volatile float sink = run(16);
  const double per_round = std::chrono::duration<double>(Clock::now() - t0).count() / 16;
  const auto rounds = static_cast<int64_t>(seconds / per_round) + 1;

  int ran = 0;  // the threads the team had (OMP_THREAD_LIMIT or OMP_DYNAMIC may give fewer)
  float sum = 0;
  const Clock::time_point start = Clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : sum)
  {
#pragma omp single nowait
    ran = omp_get_num_threads();
    sum += run(rounds);
  }
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  sink = sink + sum;
  threads = ran;
  const double flops = 2.0 * lanes * kChains * static_cast<double>(kInner) * static_cast<double>(rounds) * threads;
  std::printf("fma peak: %.1f GFLOP/s fp32 (%s, %d threads, %.2f s; %.1f GFLOP/s a thread)\n", flops / wall * 1e-9,
              avx512 ? "AVX-512" : "AVX2 + FMA", threads, wall, flops / wall * 1e-9 / threads);
  return 0;
}
