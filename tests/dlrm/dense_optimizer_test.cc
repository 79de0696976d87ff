// The dense optimizers: Adagrad against its formula in double precision,
// split Adagrad against fp32 Adagrad bit for bit, and DenseOptimizer's
// accumulators (per parameter, saved and loaded as .npy).
#include "dlrm/dense_optimizer.h"

#include <cmath>
#include <string>
#include <vector>

#include "base/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cemb::dlrm {
namespace {

std::vector<float> Random(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  FillNormal(v, 0.5, seed);
  return v;
}

TEST(DenseOptimizer, AdagradFollowsTorchsFormula) {
  std::vector<float> w = Random(37, 1), s(37, 0.0f);
  std::vector<double> wd(w.begin(), w.end()), sd(37, 0.0);
  for (int step = 0; step < 3; ++step) {
    const std::vector<float> g = Random(37, 10 + step);
    AdagradUpdate(w, s, g, 0.05f, 1e-8f);
    for (size_t i = 0; i < w.size(); ++i) {
      sd[i] += double{g[i]} * g[i];
      wd[i] -= 0.05 * g[i] / (std::sqrt(sd[i]) + 1e-8);
      ASSERT_NEAR(w[i], wd[i], 1e-6) << "step " << step << " element " << i;
      ASSERT_NEAR(s[i], sd[i], 1e-6 * sd[i]);
    }
  }
}

TEST(DenseOptimizer, SplitAdagradEqualsFp32AdagradBitForBit) {
  std::vector<float> w = Random(100, 2), s(100, 0.0f), split_s(100, 0.0f);
  std::vector<uint16_t> hi(100), lo(100);
  for (size_t i = 0; i < w.size(); ++i) SplitFloat(w[i], hi[i], lo[i]);
  for (int step = 0; step < 4; ++step) {
    const std::vector<float> g = Random(100, 20 + step);
    AdagradUpdate(w, s, g, 0.1f, 1e-8f);
    SplitAdagradUpdate(hi, lo, split_s, g, 0.1f, 1e-8f);
  }
  for (size_t i = 0; i < w.size(); ++i) ASSERT_EQ(CombineSplit(hi[i], lo[i]), w[i]) << i;
  EXPECT_EQ(s, split_s);
}

// Parameters' accumulators are separate, updated over chunks of many
// threads' work alike (a parameter longer than one chunk), and round-trip
// through .npy files; SGD keeps none.
TEST(DenseOptimizer, KeepsOneAccumulatorPerWeightAndSavesThem) {
  const std::vector<int64_t> sizes = {70000, 3};
  const std::vector<ParameterInfo> params = {{"0.weight", {700, 100}}, {"0.bias", {3}}};
  DenseOptimizer adagrad({.kind = DenseOptimizerKind::kAdagrad, .adagrad_eps = 1e-8f}, sizes);
  std::vector<float> w = Random(70000, 3), b = Random(3, 4), ref_w = w, ref_s(70000, 0.0f);
  const std::vector<float> gw = Random(70000, 5), gb = Random(3, 6);
  adagrad.Update(0, w, gw, 0.01f);
  adagrad.Update(1, b, gb, 0.01f);
  AdagradUpdate(ref_w, ref_s, gw, 0.01f, 1e-8f);
  EXPECT_EQ(w, ref_w);
  EXPECT_TRUE(std::ranges::equal(adagrad.state(0), ref_s));
  EXPECT_EQ(adagrad.state(1)[2], gb[2] * gb[2]);

  const std::string dir = ::testing::TempDir();
  ASSERT_TRUE(adagrad.SaveNpy(dir, "top_l.", params).ok());
  DenseOptimizer loaded({.kind = DenseOptimizerKind::kAdagrad}, sizes);
  ASSERT_TRUE(loaded.LoadNpy(dir, "top_l.", params).ok());
  EXPECT_TRUE(std::ranges::equal(loaded.state(0), adagrad.state(0)));
  EXPECT_TRUE(std::ranges::equal(loaded.state(1), adagrad.state(1)));
  const absl::Status missing = loaded.LoadNpy(dir, "bot_l.", params);
  EXPECT_THAT(missing.message(), ::testing::HasSubstr("bot_l.0.weight.adagrad.npy")) << missing;

  DenseOptimizer sgd({}, sizes);
  EXPECT_TRUE(sgd.state(0).empty());
  std::vector<float> v = {1.0f, 2.0f, 3.0f};
  sgd.Update(1, v, std::vector<float>{1.0f, 1.0f, 1.0f}, 0.5f);
  EXPECT_EQ(v, (std::vector<float>{0.5f, 1.5f, 2.5f}));
  EXPECT_TRUE(sgd.LoadNpy(dir, "nothing.", params).ok());  // SGD has no files to read
}

}  // namespace
}  // namespace cemb::dlrm
