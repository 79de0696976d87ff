// The fused ReLU-backward + bias-gradient pass (dlrm/internal/bias_grad.h):
// both kernel builds against a double reference, every width class (narrow,
// a block, a block and a tail, wide), with and without the ReLU, in place and
// out of place, every supported type combination (fp32, bf16, and fp32
// gradients stored as bf16), and the row-chunked split of narrow layers.
#include "dlrm/internal/bias_grad.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "base/random.h"
#include "dlrm/dense_optimizer.h"
#include "gtest/gtest.h"

namespace cemb::dlrm::internal {
namespace {

// Every build of the block this binary has and this CPU runs (forced ISAs:
// each must match the reference, not only the one chosen here).
std::vector<BiasGradBlockFn> BlocksOfThisCpu() {
  std::vector<BiasGradBlockFn> blocks;
  for (Isa isa : {Isa::kGeneric, Isa::kAvx2, Isa::kAvx512}) {
    if (absl::StatusOr<BiasGradBlockFn> block = BiasGradBlockFor(isa); block.ok()) blocks.push_back(*block);
  }
  return blocks;
}

using T = BiasGradType;

// Types of (g_in, y, g_out); without the ReLU only g_in counts.
struct Case {
  T g_in, y, g_out;
  bool relu;
  bool in_place;
  int64_t n, out;
  int threads;
};

const char* TypeName(T t) { return t == T::kBf16 ? "bf16" : "fp32"; }

std::string Name(const Case& c) {
  std::string types = TypeName(c.g_in);
  if (c.relu) types = types + "_" + TypeName(c.y) + "_" + TypeName(c.g_out);
  return types + (c.relu ? (c.in_place ? "_relu_in_place" : "_relu") : "_sums") + "_n" + std::to_string(c.n) +
         "_out" + std::to_string(c.out) + "_t" + std::to_string(c.threads);
}

class BiasGradTest : public ::testing::TestWithParam<Case> {};

TEST_P(BiasGradTest, MatchesReferenceInBothBuilds) {
  const Case& c = GetParam();
  const size_t elems = static_cast<size_t>(c.n * c.out);
  // Gradients and layer outputs; about a third of the outputs are ReLU
  // zeros, some of them -0 (which must mask like 0).
  Xoshiro256pp rng(7);
  std::vector<float> g(elems), y(elems);
  for (size_t i = 0; i < elems; ++i) {
    g[i] = static_cast<float>(rng.Uniform() * 2 - 1);
    const double u = rng.Uniform();
    y[i] = u < 0.3 ? (u < 0.1 ? -0.0f : 0.0f) : static_cast<float>(u);
  }
  std::vector<uint16_t> g16(elems), y16(elems);
  for (size_t i = 0; i < elems; ++i) {
    g16[i] = FloatToBf16(g[i]);
    y16[i] = FloatToBf16(y[i]);
    // The reference sees what the kernel sees.
    if (c.g_in == T::kBf16) g[i] = Bf16ToFloat(g16[i]);
    if (c.y == T::kBf16) y[i] = Bf16ToFloat(y16[i]);
  }
  // The sums add the unrounded masked values; g_out holds them rounded to
  // nearest even when it is bf16.
  std::vector<double> want_db(c.out, 0.0);
  std::vector<float> want_g(elems);
  for (int64_t r = 0; r < c.n; ++r) {
    for (int64_t k = 0; k < c.out; ++k) {
      const size_t i = static_cast<size_t>(r * c.out + k);
      const float v = !c.relu || y[i] > 0 ? g[i] : 0.f;
      want_g[i] = c.g_out == T::kBf16 ? Bf16ToFloat(FloatToBf16(v)) : v;
      want_db[k] += v;
    }
  }

  for (BiasGradBlockFn block : BlocksOfThisCpu()) {
    std::vector<float> gf = g, out_f(elems, 123.f);
    std::vector<uint16_t> gh = g16, out_h(elems, 0x4242);
    BiasGradArgs a;
    a.g_in_type = c.g_in;
    a.n = c.n;
    a.out = c.out;
    a.g_in = c.g_in == T::kBf16 ? static_cast<const void*>(gh.data()) : gf.data();
    if (c.relu) {
      a.y_type = c.y;
      a.g_out_type = c.g_out;
      a.y = c.y == T::kBf16 ? static_cast<const void*>(y16.data()) : y.data();
      a.g_out = c.in_place ? const_cast<void*>(a.g_in) : c.g_out == T::kBf16 ? static_cast<void*>(out_h.data())
                                                                             : out_f.data();
    }
    std::vector<float> scratch(static_cast<size_t>(BiasGradScratchFloats(c.threads, c.out)), NAN);
    std::vector<float> db(c.out + 1, NAN);
    BiasGrad(block, a, c.threads, scratch.data(), db.data());
    for (int64_t k = 0; k < c.out; ++k) {
      ASSERT_NEAR(db[k], want_db[k], 1e-4 * (1 + std::sqrt(static_cast<double>(c.n)))) << "column " << k;
    }
    EXPECT_TRUE(std::isnan(db[c.out])) << "wrote past the last column";
    if (!c.relu) continue;
    for (size_t i = 0; i < elems; ++i) {
      const float got = c.g_out == T::kBf16 ? Bf16ToFloat((c.in_place ? gh : out_h)[i])
                                            : (c.in_place ? gf : out_f)[i];
      ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want_g[i])) << "element " << i;
    }
    if (!c.in_place) {  // the input is left as it was
      for (size_t i = 0; i < elems; ++i) {
        ASSERT_EQ(c.g_in == T::kBf16 ? Bf16ToFloat(gh[i]) : gf[i], g[i]) << "element " << i;
      }
    }
  }
}

// A bf16 g_out rounds to nearest even, by hand: 1 + 2^-8 is a tie (stays at
// 1), 1 + 3 * 2^-8 a tie that rounds up to 1 + 2^-6, and the bias sums the
// unrounded values.
TEST(BiasGrad, Fp32GradientIsRoundedToNearestEvenIntoBf16) {
  const float g[2] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f};
  const float y[2] = {1.0f, 1.0f};
  uint16_t out[2] = {0, 0};
  BiasGradArgs a{.g_in = g, .g_out = out, .y = y, .g_out_type = T::kBf16, .n = 2, .out = 1};
  float db = NAN, scratch[64];
  BiasGrad(BiasGradBlockGeneric, a, 1, scratch, &db);
  EXPECT_EQ(out[0], 0x3f80);
  EXPECT_EQ(out[1], 0x3f82);
  EXPECT_EQ(db, 2.0f + 4 * 0x1p-8f);
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  // With the ReLU: the supported type triples, out of place and (where the
  // types agree) in place; without: fp32 and bf16 sums.
  const Case relu_types[] = {{T::kFp32, T::kFp32, T::kFp32}, {T::kBf16, T::kBf16, T::kBf16},
                             {T::kFp32, T::kBf16, T::kBf16}, {T::kFp32, T::kFp32, T::kBf16}};
  for (int64_t out : {1, 16, 63, 64, 65, 367, 512}) {
    for (int threads : {1, 2, 3}) {
      const int64_t n = out == 1 ? 2048 : 301;
      for (T in : {T::kFp32, T::kBf16}) cases.push_back({in, in, in, false, false, n, out, threads});
      for (const Case& t : relu_types) {
        cases.push_back({t.g_in, t.y, t.g_out, true, false, n, out, threads});
        if (t.g_in == t.g_out) cases.push_back({t.g_in, t.y, t.g_out, true, true, n, out, threads});
      }
    }
  }
  // Narrow and tall: split into row chunks across the threads.
  cases.push_back({T::kFp32, T::kFp32, T::kFp32, true, true, 4096, 16, 4});
  cases.push_back({T::kBf16, T::kBf16, T::kBf16, true, true, 4096, 64, 4});
  cases.push_back({T::kFp32, T::kBf16, T::kBf16, true, false, 4096, 64, 4});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(All, BiasGradTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return Name(info.param); });

}  // namespace
}  // namespace cemb::dlrm::internal
