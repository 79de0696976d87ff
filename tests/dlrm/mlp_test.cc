#include "dlrm/mlp.h"

#include <gmock/gmock.h>
#include <omp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <new>
#include <filesystem>
#include <string>
#include <vector>

#include "base/random.h"
#include "dlrm/loss.h"
#include "dlrm/precision.h"
#include "dlrm/dense_optimizer.h"

// Counts the C++ allocations of this test binary, to check that a training
// step makes none (oneDNN's own buffers are planned: a user scratchpad).
static std::atomic<int64_t> g_allocations{0};
void* operator new(size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace cemb::dlrm {
namespace {

using ::testing::HasSubstr;

// oneDNN has no bf16 matmul below AVX-512 (dlrm/precision.h): the bf16 tests
// skip there, saying why, instead of failing on a CPU that cannot run them.
bool NoBf16Matmul() { return DetectMatmulCpu().bf16_matmul.empty(); }
#define SKIP_WITHOUT_BF16_MATMUL() \
  if (NoBf16Matmul()) GTEST_SKIP() << "oneDNN has no bf16 matmul on " << DetectMatmulCpu().isa

constexpr uint64_t kSeed = 20261122;

std::vector<float> RandomVector(size_t n, uint64_t seed, double lo = -1, double hi = 1) {
  Xoshiro256pp rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(lo + (hi - lo) * rng.Uniform());
  return v;
}

// The obviously-correct reference: y = act(x W^T + b) layer by layer, in double.
std::vector<double> ReferenceForward(const Mlp& mlp, const std::vector<float>& x, int64_t batch) {
  std::vector<double> cur(x.begin(), x.end());
  const auto& sizes = mlp.options().sizes;
  for (int l = 0; l < mlp.num_layers(); ++l) {
    const int64_t in = sizes[l], out = sizes[l + 1];
    std::vector<float> w(in * out), b(out);
    EXPECT_TRUE(mlp.GetWeight(l, w).ok());
    EXPECT_TRUE(mlp.GetBias(l, b).ok());
    std::vector<double> next(batch * out);
    const bool last = l + 1 == mlp.num_layers();
    const Activation act = last ? mlp.options().last_activation : Activation::kRelu;
    for (int64_t n = 0; n < batch; ++n) {
      for (int64_t o = 0; o < out; ++o) {
        double s = b[o];
        for (int64_t i = 0; i < in; ++i) s += cur[n * in + i] * w[o * in + i];
        if (act == Activation::kRelu) s = std::max(s, 0.0);
        if (act == Activation::kSigmoid) s = 1.0 / (1.0 + std::exp(-s));
        next[n * out + o] = s;
      }
    }
    cur = std::move(next);
  }
  return cur;
}

MlpOptions SmallOptions(Activation last, Precision p = Precision::kFp32) {
  MlpOptions o;
  o.sizes = {6, 9, 5, 3};
  o.last_activation = last;
  o.precision = p;
  o.max_batch = 4;
  o.batch_sizes = {3};
  o.compute_input_grad = true;
  o.seed = kSeed;
  return o;
}

// Loss = sum(y * r): its gradient w.r.t. y is r.
double WeightedSum(std::span<const float> y, const std::vector<float>& r) {
  double s = 0;
  for (size_t i = 0; i < y.size(); ++i) s += static_cast<double>(y[i]) * r[i];
  return s;
}

class MlpActivationTest : public ::testing::TestWithParam<Activation> {};

TEST_P(MlpActivationTest, ForwardMatchesReference) {
  absl::StatusOr<Mlp> mlp = Mlp::Create(SmallOptions(GetParam()));
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  for (int64_t batch : {4, 3}) {
    const std::vector<float> x = RandomVector(batch * 6, kSeed + batch);
    absl::StatusOr<std::span<const float>> y = mlp->Forward(batch, x.data());
    ASSERT_TRUE(y.ok()) << y.status();
    ASSERT_EQ(y->size(), static_cast<size_t>(batch * 3));
    const std::vector<double> want = ReferenceForward(*mlp, x, batch);
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR((*y)[i], want[i], 1e-5) << "batch " << batch << " i " << i;
  }
}

TEST_P(MlpActivationTest, GradientsMatchFiniteDifferences) {
  absl::StatusOr<Mlp> mlp = Mlp::Create(SmallOptions(GetParam()));
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  const int64_t batch = 4;
  std::vector<float> x = RandomVector(batch * 6, kSeed + 1);
  const std::vector<float> r = RandomVector(batch * 3, kSeed + 2);
  ASSERT_TRUE(mlp->Forward(batch, x.data()).ok());
  std::vector<float> dx(batch * 6, -7.f);
  ASSERT_TRUE(mlp->Backward(batch, r.data(), dx.data()).ok());

  auto loss = [&]() {
    absl::StatusOr<std::span<const float>> y = mlp->Forward(batch, x.data());
    EXPECT_TRUE(y.ok());
    return WeightedSum(*y, r);
  };
  const double eps = 1e-3;
  auto check = [&](double analytic, double plus, double minus, const std::string& what) {
    const double fd = (plus - minus) / (2 * eps);
    EXPECT_NEAR(analytic, fd, 2e-3 + 1e-2 * std::abs(fd)) << what << " (seed " << kSeed << ")";
  };
  for (int l = 0; l < mlp->num_layers(); ++l) {
    const std::vector<float> dw(mlp->weight_grad(l).begin(), mlp->weight_grad(l).end());
    const std::vector<float> db(mlp->bias_grad(l).begin(), mlp->bias_grad(l).end());
    std::vector<float> w(dw.size()), b(db.size());
    ASSERT_TRUE(mlp->GetWeight(l, w).ok());
    ASSERT_TRUE(mlp->GetBias(l, b).ok());
    for (size_t i = 0; i < w.size(); ++i) {
      std::vector<float> p = w;
      p[i] = w[i] + eps;
      ASSERT_TRUE(mlp->SetWeight(l, p).ok());
      const double plus = loss();
      p[i] = w[i] - eps;
      ASSERT_TRUE(mlp->SetWeight(l, p).ok());
      const double minus = loss();
      check(dw[i], plus, minus, "layer " + std::to_string(l) + " weight " + std::to_string(i));
    }
    ASSERT_TRUE(mlp->SetWeight(l, w).ok());
    for (size_t i = 0; i < b.size(); ++i) {
      std::vector<float> p = b;
      p[i] = b[i] + eps;
      ASSERT_TRUE(mlp->SetBias(l, p).ok());
      const double plus = loss();
      p[i] = b[i] - eps;
      ASSERT_TRUE(mlp->SetBias(l, p).ok());
      const double minus = loss();
      check(db[i], plus, minus, "layer " + std::to_string(l) + " bias " + std::to_string(i));
    }
    ASSERT_TRUE(mlp->SetBias(l, b).ok());
  }
  for (size_t i = 0; i < x.size(); ++i) {
    const float saved = x[i];
    x[i] = saved + eps;
    const double plus = loss();
    x[i] = saved - eps;
    const double minus = loss();
    x[i] = saved;
    check(dx[i], plus, minus, "input " + std::to_string(i));
  }
}

INSTANTIATE_TEST_SUITE_P(Activations, MlpActivationTest,
                         ::testing::Values(Activation::kNone, Activation::kRelu, Activation::kSigmoid));

TEST(Mlp, DiffOutputIsNotModified) {
  absl::StatusOr<Mlp> mlp = Mlp::Create(SmallOptions(Activation::kSigmoid));
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  const std::vector<float> x = RandomVector(4 * 6, kSeed);
  const std::vector<float> r = RandomVector(4 * 3, kSeed + 1);
  std::vector<float> r_copy = r;
  std::vector<float> dx(4 * 6);
  ASSERT_TRUE(mlp->Forward(4, x.data()).ok());
  ASSERT_TRUE(mlp->Backward(4, r_copy.data(), dx.data()).ok());
  EXPECT_EQ(r_copy, r);
}

TEST(Mlp, BetweenLayersRunsAfterEachLayerButTheLastAndChangesNothing) {
  absl::StatusOr<Mlp> plain = Mlp::Create(SmallOptions(Activation::kSigmoid));
  absl::StatusOr<Mlp> hooked = Mlp::Create(SmallOptions(Activation::kSigmoid));
  ASSERT_TRUE(plain.ok() && hooked.ok());
  const std::vector<float> x = RandomVector(4 * 6, kSeed);
  const std::vector<float> dy = RandomVector(4 * 3, kSeed + 1);
  std::vector<float> dx_plain(4 * 6), dx_hooked(4 * 6);
  int calls = 0;
  const auto count = [&calls] {
    ++calls;
    return absl::OkStatus();
  };
  absl::StatusOr<std::span<const float>> y_plain = plain->Forward(4, x.data());
  ASSERT_TRUE(y_plain.ok());
  const std::vector<float> y(y_plain->begin(), y_plain->end());
  absl::StatusOr<std::span<const float>> y_hooked = hooked->Forward(4, x.data(), count);
  ASSERT_TRUE(y_hooked.ok());
  EXPECT_EQ(calls, 2);  // three layers
  EXPECT_EQ(std::vector<float>(y_hooked->begin(), y_hooked->end()), y);
  ASSERT_TRUE(plain->Backward(4, dy.data(), dx_plain.data()).ok());
  ASSERT_TRUE(hooked->Backward(4, dy.data(), dx_hooked.data(), count).ok());
  EXPECT_EQ(calls, 4);
  EXPECT_EQ(dx_hooked, dx_plain);
  for (int l = 0; l < 3; ++l) {
    EXPECT_TRUE(std::ranges::equal(hooked->weight_grad(l), plain->weight_grad(l))) << l;
    EXPECT_TRUE(std::ranges::equal(hooked->bias_grad(l), plain->bias_grad(l))) << l;
  }
  // Its error ends the pass.
  const auto fail = [] { return absl::UnavailableError("peer gone"); };
  EXPECT_EQ(hooked->Forward(4, x.data(), fail).status().code(), absl::StatusCode::kUnavailable);
  ASSERT_TRUE(hooked->Forward(4, x.data()).ok());
  EXPECT_EQ(hooked->Backward(4, dy.data(), dx_hooked.data(), fail).code(), absl::StatusCode::kUnavailable);
}

TEST(Mlp, SmallerPlannedBatchMatchesFullBatchRows) {
  absl::StatusOr<Mlp> mlp = Mlp::Create(SmallOptions(Activation::kNone));
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  const std::vector<float> x = RandomVector(4 * 6, kSeed);
  absl::StatusOr<std::span<const float>> full = mlp->Forward(4, x.data());
  ASSERT_TRUE(full.ok());
  const std::vector<float> y4(full->begin(), full->end());
  absl::StatusOr<std::span<const float>> part = mlp->Forward(3, x.data());
  ASSERT_TRUE(part.ok());
  for (size_t i = 0; i < part->size(); ++i) EXPECT_FLOAT_EQ((*part)[i], y4[i]);
}

TEST(Mlp, UnplannedBatchIsRejected) {
  absl::StatusOr<Mlp> mlp = Mlp::Create(SmallOptions(Activation::kNone));
  ASSERT_TRUE(mlp.ok());
  const std::vector<float> x(4 * 6);
  absl::StatusOr<std::span<const float>> y = mlp->Forward(2, x.data());
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(y.status().message(), HasSubstr("batch 2 was not planned"));
}

TEST(Mlp, BackwardNeedsAMatchingForward) {
  absl::StatusOr<Mlp> mlp = Mlp::Create(SmallOptions(Activation::kNone));
  ASSERT_TRUE(mlp.ok());
  std::vector<float> x(4 * 6), dy(4 * 3), dx(4 * 6);
  EXPECT_EQ(mlp->Backward(4, dy.data(), dx.data()).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(mlp->Forward(4, x.data()).ok());
  EXPECT_EQ(mlp->Backward(3, dy.data(), dx.data()).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(mlp->Backward(4, dy.data(), nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(mlp->Backward(4, dy.data(), dx.data()).ok());
}

TEST(Mlp, BadOptionsAreRejected) {
  MlpOptions o = SmallOptions(Activation::kNone);
  o.sizes = {4};
  EXPECT_EQ(Mlp::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = SmallOptions(Activation::kNone);
  o.sizes = {4, 0, 2};
  EXPECT_EQ(Mlp::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = SmallOptions(Activation::kNone);
  o.max_batch = 0;
  EXPECT_EQ(Mlp::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = SmallOptions(Activation::kNone);
  o.batch_sizes = {5};
  EXPECT_THAT(Mlp::Create(o).status().message(), HasSubstr("outside [1, max_batch = 4]"));
}

TEST(Mlp, ParametersHavePyTorchNamesAndShapes) {
  absl::StatusOr<Mlp> mlp = Mlp::Create(SmallOptions(Activation::kNone));
  ASSERT_TRUE(mlp.ok());
  const std::vector<ParameterInfo> params = mlp->Parameters();
  ASSERT_EQ(params.size(), 6u);
  EXPECT_EQ(params[0].name, "0.weight");
  EXPECT_EQ(params[0].shape, (std::vector<int64_t>{9, 6}));
  EXPECT_EQ(params[1].name, "0.bias");
  EXPECT_EQ(params[1].shape, (std::vector<int64_t>{9}));
  EXPECT_EQ(params[4].name, "4.weight");
  EXPECT_EQ(params[4].shape, (std::vector<int64_t>{3, 5}));
  std::vector<float> wrong(7);
  EXPECT_EQ(mlp->SetWeight(0, wrong).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(mlp->SetBias(3, wrong).code(), absl::StatusCode::kOutOfRange);
}

// bf16 ---------------------------------------------------------------------

// Copies every parameter of `from` into `to`.
void CopyParameters(const Mlp& from, Mlp& to) {
  for (int l = 0; l < from.num_layers(); ++l) {
    std::vector<float> w(from.weight_grad(l).size()), b(from.bias_grad(l).size());
    ASSERT_TRUE(from.GetWeight(l, w).ok());
    ASSERT_TRUE(from.GetBias(l, b).ok());
    ASSERT_TRUE(to.SetWeight(l, w).ok());
    ASSERT_TRUE(to.SetBias(l, b).ok());
  }
}

MlpOptions WideOptions(Precision p) {
  MlpOptions o;
  o.sizes = {64, 128, 64, 8};
  o.max_batch = 32;
  o.precision = p;
  o.compute_input_grad = true;
  o.seed = kSeed;
  return o;
}

double RelErr(std::span<const float> got, std::span<const float> ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (got[i] - ref[i]) * static_cast<double>(got[i] - ref[i]);
    den += ref[i] * static_cast<double>(ref[i]);
  }
  return std::sqrt(num / den);
}

// bf16 keeps 8 significant bits (relative rounding error 2^-9); errors grow
// through the layers, and more in the gradients, where a ReLU whose input is
// near 0 can switch between fp32 and bf16. Hence: tight bounds for one layer,
// looser ones through three.
void ExpectBf16CloseToFp32(const std::vector<int64_t>& sizes, double fwd_tol, double grad_tol) {
  MlpOptions o = WideOptions(Precision::kFp32);
  o.sizes = sizes;
  absl::StatusOr<Mlp> f32 = Mlp::Create(o);
  o.precision = Precision::kBf16;
  absl::StatusOr<Mlp> b16 = Mlp::Create(o);
  ASSERT_TRUE(f32.ok()) << f32.status();
  ASSERT_TRUE(b16.ok()) << b16.status();
  CopyParameters(*f32, *b16);
  const int64_t in = sizes.front(), out = sizes.back();
  const std::vector<float> x = RandomVector(32 * in, kSeed);
  const std::vector<float> dy = RandomVector(32 * out, kSeed + 1);
  absl::StatusOr<std::span<const float>> y32 = f32->Forward(32, x.data());
  ASSERT_TRUE(y32.ok());
  const std::vector<float> want(y32->begin(), y32->end());
  absl::StatusOr<std::span<const float>> y16 = b16->Forward(32, x.data());
  ASSERT_TRUE(y16.ok()) << y16.status();
  EXPECT_LT(RelErr(*y16, want), fwd_tol);

  std::vector<float> dx32(32 * in), dx16(32 * in);
  ASSERT_TRUE(f32->Backward(32, dy.data(), dx32.data()).ok());
  ASSERT_TRUE(b16->Backward(32, dy.data(), dx16.data()).ok());
  EXPECT_LT(RelErr(dx16, dx32), grad_tol);
  for (int l = 0; l < f32->num_layers(); ++l) {
    EXPECT_LT(RelErr(b16->weight_grad(l), f32->weight_grad(l)), grad_tol) << "layer " << l;
    EXPECT_LT(RelErr(b16->bias_grad(l), f32->bias_grad(l)), grad_tol) << "layer " << l;
  }
}

TEST(MlpBf16, OneLayerIsCloseToFp32) {
  SKIP_WITHOUT_BF16_MATMUL();
  ExpectBf16CloseToFp32({64, 8}, 0.01, 0.01); }
TEST(MlpBf16, ThreeLayersAreCloseToFp32) {
  SKIP_WITHOUT_BF16_MATMUL();
  ExpectBf16CloseToFp32({64, 128, 64, 8}, 0.02, 0.08); }

TEST(MlpBf16, SetThenGetWeightIsExact) {
  SKIP_WITHOUT_BF16_MATMUL();
  absl::StatusOr<Mlp> mlp = Mlp::Create(WideOptions(Precision::kBf16));
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  const std::vector<float> w = RandomVector(128 * 64, kSeed);
  ASSERT_TRUE(mlp->SetWeight(0, w).ok());
  std::vector<float> got(w.size());
  ASSERT_TRUE(mlp->GetWeight(0, got).ok());
  EXPECT_EQ(got, w);
}

TEST(MlpBf16, SplitSgdStepEqualsFp32UpdateBitForBit) {
  SKIP_WITHOUT_BF16_MATMUL();
  absl::StatusOr<Mlp> mlp = Mlp::Create(WideOptions(Precision::kBf16));
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  const std::vector<float> x = RandomVector(32 * 64, kSeed);
  const std::vector<float> dy = RandomVector(32 * 8, kSeed + 1);
  std::vector<float> dx(32 * 64);
  const float lr = 0.37f;
  for (int step = 0; step < 3; ++step) {
    ASSERT_TRUE(mlp->Forward(32, x.data()).ok());
    ASSERT_TRUE(mlp->Backward(32, dy.data(), dx.data()).ok());
    std::vector<std::vector<float>> want;
    for (int l = 0; l < mlp->num_layers(); ++l) {
      std::vector<float> w(mlp->weight_grad(l).size());
      ASSERT_TRUE(mlp->GetWeight(l, w).ok());
      for (size_t i = 0; i < w.size(); ++i) w[i] = w[i] - lr * mlp->weight_grad(l)[i];
      want.push_back(std::move(w));
    }
    mlp->Update(lr);
    for (int l = 0; l < mlp->num_layers(); ++l) {
      std::vector<float> got(want[l].size());
      ASSERT_TRUE(mlp->GetWeight(l, got).ok());
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[l][i]))
            << "step " << step << " layer " << l << " i " << i;
      }
    }
  }
}

// w rounded to bf16 by its upper half: ties away from zero (as SplitFloat).
uint16_t RoundedUpperHalf(float w) {
  const double f = w;
  const uint32_t bits = std::bit_cast<uint32_t>(w);
  const float down = std::bit_cast<float>(bits & 0xffff0000u);  // toward zero
  const float up = std::bit_cast<float>((bits & 0xffff0000u) + 0x10000u);  // away from zero
  return static_cast<uint16_t>(std::abs(f - up) <= std::abs(f - down) ? (bits >> 16) + 1 : bits >> 16);
}

TEST(SplitSgd, KernelEqualsFp32UpdateBitForBit) {
  const size_t n = 1000;
  std::vector<float> w = RandomVector(n, kSeed, -3, 3);
  // Include values whose low half carries into the high half and signs flip.
  w[0] = 1.0f;
  w[1] = -0.0f;
  w[2] = std::bit_cast<float>(0x3f80ffffu);
  w[3] = std::bit_cast<float>(0x3f7fffffu);  // rounds up across the exponent: hi = 0x3f80 (1.0)
  w[4] = std::bit_cast<float>(0xbf808000u);  // a tie, rounded away from zero
  const std::vector<float> g = RandomVector(n, kSeed + 1, -10, 10);
  std::vector<uint16_t> hi(n), lo(n);
  for (size_t i = 0; i < n; ++i) SplitFloat(w[i], hi[i], lo[i]);
  for (int step = 0; step < 5; ++step) {
    SgdUpdate(w, g, 0.01f);
    SplitSgdUpdate(hi, lo, g, 0.01f);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(CombineSplit(hi[i], lo[i])), std::bit_cast<uint32_t>(w[i]))
          << "step " << step << " i " << i;
      ASSERT_EQ(hi[i], RoundedUpperHalf(w[i])) << "step " << step << " i " << i;  // hi is w rounded to bf16
    }
  }
}

TEST(SplitSgd, SplitRoundsToNearestAndCombinesExactly) {
  for (uint32_t bits : {0x3f800000u, 0x3f807fffu, 0x3f808000u, 0x3f80ffffu, 0x3f7fffffu, 0xbf7fffffu, 0x00008000u,
                        0x80000001u, 0x7f7fffffu, 0x7f800000u, 0xff800000u}) {
    uint16_t hi, lo;
    SplitFloat(std::bit_cast<float>(bits), hi, lo);
    EXPECT_EQ(std::bit_cast<uint32_t>(CombineSplit(hi, lo)), bits) << std::hex << bits;
    EXPECT_EQ(lo, bits & 0xffffu) << std::hex << bits;
    EXPECT_EQ(hi, (bits >> 16) + ((bits >> 15) & 1)) << std::hex << bits;
  }
  uint16_t hi, lo;
  SplitFloat(std::bit_cast<float>(0x3f7fffffu), hi, lo);
  EXPECT_EQ(Bf16ToFloat(hi), 1.0f);  // not 0.99609375, the truncation
  // A NaN stays a NaN of its sign (its payload would carry into the sign bit).
  for (uint32_t nan : {0x7fffffffu, 0x7fc00000u, 0xffff8000u}) {
    SplitFloat(std::bit_cast<float>(nan), hi, lo);
    EXPECT_TRUE(std::isnan(Bf16ToFloat(hi))) << std::hex << nan;
    EXPECT_TRUE(std::isnan(CombineSplit(hi, lo))) << std::hex << nan;
    EXPECT_EQ(std::signbit(CombineSplit(hi, lo)), (nan >> 31) != 0) << std::hex << nan;
  }
}

TEST(Bf16, RoundToNearestEven) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBf16(std::bit_cast<float>(0x3f808000u)), 0x3f80);  // tie, even stays
  EXPECT_EQ(FloatToBf16(std::bit_cast<float>(0x3f818000u)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(FloatToBf16(std::bit_cast<float>(0x3f808001u)), 0x3f81);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::nanf("")))));
  EXPECT_EQ(Bf16ToFloat(0x4040), 3.0f);
}

// Save / load -----------------------------------------------------------------

TEST(Mlp, SaveNpyThenLoadNpyRestoresParameters) {
  const std::string dir = ::testing::TempDir() + "/mlp_npy_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  for (Precision p : {Precision::kFp32, Precision::kBf16}) {
    if (p == Precision::kBf16 && NoBf16Matmul()) continue;  // see SKIP_WITHOUT_BF16_MATMUL
    MlpOptions o = WideOptions(p);
    absl::StatusOr<Mlp> a = Mlp::Create(o);
    o.seed = kSeed + 1;
    absl::StatusOr<Mlp> b = Mlp::Create(o);
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_TRUE(a->SaveNpy(dir, "bot_l.").ok());
    EXPECT_TRUE(std::filesystem::exists(dir + "/bot_l.0.weight.npy"));
    EXPECT_TRUE(std::filesystem::exists(dir + "/bot_l.4.bias.npy"));
    ASSERT_TRUE(b->LoadNpy(dir, "bot_l.").ok());
    for (int l = 0; l < a->num_layers(); ++l) {
      std::vector<float> wa(a->weight_grad(l).size()), wb(wa.size());
      ASSERT_TRUE(a->GetWeight(l, wa).ok());
      ASSERT_TRUE(b->GetWeight(l, wb).ok());
      EXPECT_EQ(wa, wb);
    }
    // A model of another shape refuses the files and names the bad one.
    MlpOptions other = WideOptions(p);
    other.sizes = {64, 100, 64, 8};
    absl::StatusOr<Mlp> c = Mlp::Create(other);
    ASSERT_TRUE(c.ok());
    const absl::Status st = c->LoadNpy(dir, "bot_l.");
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(st.message(), HasSubstr("bot_l.0.weight.npy: shape (128, 64) where (100, 64)"));
    EXPECT_EQ(c->LoadNpy(dir, "missing.").code(), absl::StatusCode::kNotFound);
  }
  std::filesystem::remove_all(dir);
}

// Our side of a step allocates nothing. oneDNN 2.6 itself builds a small
// std::unordered_map of the arguments inside every dnnl_primitive_execute
// (its exec_ctx_t), which we cannot avoid: so the check is that Update
// allocates nothing and that Forward + Backward allocate the same, small
// amount every step after the first (no plan is created, nothing grows).
TEST(Mlp, StepsAllocateOnlyOneDnnsPerExecuteBookkeeping) {
  for (Precision p : {Precision::kFp32, Precision::kBf16}) {
    if (p == Precision::kBf16 && NoBf16Matmul()) continue;  // see SKIP_WITHOUT_BF16_MATMUL
    MlpOptions o = WideOptions(p);
    o.last_activation = Activation::kSigmoid;
    absl::StatusOr<Mlp> mlp = Mlp::Create(o);
    ASSERT_TRUE(mlp.ok()) << mlp.status();
    const std::vector<float> x = RandomVector(32 * 64, kSeed);
    const std::vector<float> dy = RandomVector(32 * 8, kSeed + 1);
    std::vector<float> dx(32 * 64);
    std::vector<int64_t> counts;
    for (int step = 0; step < 4; ++step) {
      const int64_t before = g_allocations.load();
      const bool ok = mlp->Forward(32, x.data()).ok() && mlp->Backward(32, dy.data(), dx.data()).ok();
      const int64_t after = g_allocations.load();
      mlp->Update(0.1f);
      EXPECT_EQ(g_allocations.load(), after) << "Update allocated";
      ASSERT_TRUE(ok);
      counts.push_back(after - before);
    }
    EXPECT_EQ(counts[1], counts[2]);
    EXPECT_EQ(counts[2], counts[3]);
    // 3 layers: at most 14 primitives per step, a handful of nodes each.
    EXPECT_LT(counts[3], 14 * 12);
  }
}

// End to end -----------------------------------------------------------------

// A linearly separable problem: label = [w* . x > 0]. An MLP trained by SGD on
// the fused sigmoid + cross-entropy must drive the loss well down.
double TrainSeparable(Precision p) {
  // A tiny MLP gains nothing from threads, and on a loaded machine every
  // OpenMP barrier of 300 steps can wait for a descheduled thread: run it on
  // one (oneDNN reads the OpenMP setting at each execution).
  struct OneThread {
    int saved = omp_get_max_threads();
    OneThread() { omp_set_num_threads(1); }
    ~OneThread() { omp_set_num_threads(saved); }
  } one_thread;
  const int64_t batch = 64, in = 8;
  MlpOptions o;
  o.sizes = {in, 16, 1};
  o.max_batch = batch;
  o.precision = p;
  o.seed = kSeed;
  absl::StatusOr<Mlp> mlp = Mlp::Create(o);
  EXPECT_TRUE(mlp.ok()) << mlp.status();
  if (!mlp.ok()) return 1e9;
  const std::vector<float> w_star = RandomVector(in, kSeed + 100);
  Xoshiro256pp rng(kSeed + 200);
  std::vector<float> x(batch * in), labels(batch), grad(batch);
  double first = 0, last = 0;
  for (int step = 0; step < 300; ++step) {
    for (int64_t n = 0; n < batch; ++n) {
      double dot = 0;
      for (int64_t i = 0; i < in; ++i) {
        x[n * in + i] = static_cast<float>(2 * rng.Uniform() - 1);
        dot += x[n * in + i] * w_star[i];
      }
      labels[n] = dot > 0 ? 1.f : 0.f;
    }
    absl::StatusOr<std::span<const float>> logits = mlp->Forward(batch, x.data());
    EXPECT_TRUE(logits.ok());
    absl::StatusOr<double> loss = BceWithLogits(*logits, labels, grad);
    EXPECT_TRUE(loss.ok());
    if (step < 10) first += *loss / 10;
    if (step >= 290) last += *loss / 10;
    EXPECT_TRUE(mlp->Backward(batch, grad.data(), nullptr).ok());
    mlp->Update(0.5f);
  }
  EXPECT_LT(last, 0.5 * first) << "first " << first << " last " << last << " seed " << kSeed;
  return last;
}

TEST(MlpTraining, SgdDrivesTheLossDownFp32) { EXPECT_LT(TrainSeparable(Precision::kFp32), 0.25); }
TEST(MlpTraining, SgdDrivesTheLossDownBf16) {
  SKIP_WITHOUT_BF16_MATMUL();
  EXPECT_LT(TrainSeparable(Precision::kBf16), 0.25);
}

}  // namespace
}  // namespace cemb::dlrm
