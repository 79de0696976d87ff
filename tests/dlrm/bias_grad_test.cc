// The fused ReLU-backward + bias-gradient pass (dlrm/internal/bias_grad.h):
// both kernel builds against a double reference, every width class (narrow,
// a block, a block and a tail, wide), with and without the ReLU, in place and
// out of place, fp32 and bf16, and the row-chunked split of narrow layers.
#include "dlrm/internal/bias_grad.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "base/random.h"
#include "dlrm/sgd.h"
#include "gtest/gtest.h"

namespace cemb::dlrm::internal {
namespace {

struct Case {
  bool bf16;
  bool relu;
  bool in_place;
  int64_t n, out;
  int threads;
};

std::string Name(const Case& c) {
  return std::string(c.bf16 ? "bf16" : "fp32") + (c.relu ? (c.in_place ? "_relu_in_place" : "_relu") : "_sums") +
         "_n" + std::to_string(c.n) + "_out" + std::to_string(c.out) + "_t" + std::to_string(c.threads);
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
    uint16_t lo;
    SplitFloat(g[i], g16[i], lo);
    SplitFloat(y[i], y16[i], lo);
    g[i] = c.bf16 ? Bf16ToFloat(g16[i]) : g[i];  // the reference sees what the kernel sees
  }
  std::vector<double> want_db(c.out, 0.0);
  std::vector<float> want_g(elems);
  for (int64_t r = 0; r < c.n; ++r) {
    for (int64_t k = 0; k < c.out; ++k) {
      const size_t i = static_cast<size_t>(r * c.out + k);
      const float v = !c.relu || (c.bf16 ? Bf16ToFloat(y16[i]) : y[i]) > 0 ? g[i] : 0.f;
      want_g[i] = v;
      want_db[k] += v;
    }
  }

  for (BiasGradBlockFn block : {BiasGradBlockGeneric, BiasGradBlockForThisCpu()}) {
    std::vector<float> gf = g, out_f(elems, 123.f);
    std::vector<uint16_t> gh = g16, out_h(elems, 0x4242);
    BiasGradArgs a;
    a.bf16 = c.bf16;
    a.n = c.n;
    a.out = c.out;
    a.g_in = c.bf16 ? static_cast<const void*>(gh.data()) : gf.data();
    if (c.relu) {
      a.y = c.bf16 ? static_cast<const void*>(y16.data()) : y.data();
      a.g_out = c.in_place ? const_cast<void*>(a.g_in) : c.bf16 ? static_cast<void*>(out_h.data()) : out_f.data();
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
      const float got = c.bf16 ? Bf16ToFloat((c.in_place ? gh : out_h)[i]) : (c.in_place ? gf : out_f)[i];
      ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want_g[i])) << "element " << i;
    }
    if (!c.in_place) {  // the input is left as it was
      for (size_t i = 0; i < elems; ++i) {
        ASSERT_EQ(c.bf16 ? Bf16ToFloat(gh[i]) : gf[i], g[i]) << "element " << i;
      }
    }
  }
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (bool bf16 : {false, true}) {
    for (int variant = 0; variant < 3; ++variant) {
      for (int64_t out : {1, 16, 63, 64, 65, 367, 512}) {
        for (int threads : {1, 2, 3}) {
          cases.push_back({bf16, variant > 0, variant == 2, out == 1 ? 2048 : 301, out, threads});
        }
      }
    }
  }
  // Narrow and tall: split into row chunks across the threads.
  cases.push_back({false, true, true, 4096, 16, 4});
  cases.push_back({true, true, true, 4096, 64, 4});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(All, BiasGradTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return Name(info.param); });

}  // namespace
}  // namespace cemb::dlrm::internal
