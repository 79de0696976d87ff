#include "train/metrics.h"

#include <cmath>
#include <vector>

#include "base/random.h"
#include "gtest/gtest.h"

namespace cemb::train {
namespace {

// The definition: over all (positive, negative) pairs, 1 when the positive
// scores higher, 1/2 on a tie.
double BruteForceAuc(const std::vector<float>& s, const std::vector<float>& y) {
  double wins = 0, pairs = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (y[i] < 0.5f) continue;
    for (size_t j = 0; j < s.size(); ++j) {
      if (y[j] > 0.5f) continue;
      wins += s[i] > s[j] ? 1.0 : s[i] == s[j] ? 0.5 : 0.0;
      pairs += 1;
    }
  }
  return wins / pairs;
}

TEST(Metrics, AucEqualsPairCountingWithManyTies) {
  for (uint64_t seed : {1, 2, 3, 4, 5}) {
    Xoshiro256pp rng(seed);
    const size_t n = 50 + rng.Below(500);
    std::vector<float> s(n), y(n);
    for (size_t i = 0; i < n; ++i) {
      y[i] = rng.Uniform() < 0.3 ? 1.0f : 0.0f;
      // Few distinct scores, so ties are everywhere; correlated with y.
      s[i] = static_cast<float>(rng.Below(seed == 1 ? 3 : 20)) / 20.0f + 0.1f * y[i];
    }
    EXPECT_NEAR(RocAuc(s, y), BruteForceAuc(s, y), 1e-12) << "seed " << seed << " n " << n;
  }
}

TEST(Metrics, AucBoundaryCases) {
  EXPECT_DOUBLE_EQ(RocAuc(std::vector<float>{0.1f, 0.2f, 0.8f, 0.9f}, std::vector<float>{0, 0, 1, 1}), 1.0);
  EXPECT_DOUBLE_EQ(RocAuc(std::vector<float>{0.9f, 0.8f, 0.2f, 0.1f}, std::vector<float>{0, 0, 1, 1}), 0.0);
  EXPECT_DOUBLE_EQ(RocAuc(std::vector<float>{0.5f, 0.5f, 0.5f, 0.5f}, std::vector<float>{0, 1, 0, 1}), 0.5);
  // Hand-computed: positives at 0.4 and 0.6; negatives 0.4, 0.2. Pairs:
  // (0.4 vs 0.4) 0.5, (0.4 vs 0.2) 1, (0.6 vs 0.4) 1, (0.6 vs 0.2) 1 -> 3.5 / 4.
  EXPECT_DOUBLE_EQ(RocAuc(std::vector<float>{0.4f, 0.6f, 0.4f, 0.2f}, std::vector<float>{1, 1, 0, 0}), 0.875);
  EXPECT_TRUE(std::isnan(RocAuc(std::vector<float>{0.1f, 0.2f}, std::vector<float>{1, 1})));
  EXPECT_TRUE(std::isnan(RocAuc(std::vector<float>{}, std::vector<float>{})));
  EXPECT_TRUE(std::isnan(RocAuc(std::vector<float>{NAN, 0.2f}, std::vector<float>{1, 0})));
}

TEST(Metrics, LogLossAndAccuracyByHand) {
  const std::vector<float> p{0.9f, 0.2f, 0.6f, 0.4f};
  const std::vector<float> y{1, 0, 0, 1};
  const double expected = -(std::log(0.9f) + std::log(1 - 0.2f) + std::log(1 - 0.6f) + std::log(0.4f)) / 4;
  EXPECT_NEAR(LogLoss(p, y), expected, 1e-7);
  EXPECT_DOUBLE_EQ(Accuracy(p, y), 0.5);
  // A confident wrong answer costs 100 (the clamp), not infinity.
  EXPECT_DOUBLE_EQ(LogLoss(std::vector<float>{0.0f}, std::vector<float>{1}), 100.0);
  EXPECT_DOUBLE_EQ(LogLoss(std::vector<float>{1.0f}, std::vector<float>{1}), 0.0);
}

TEST(Metrics, BinaryMetricsAccumulatesBatches) {
  BinaryMetrics m;
  m.Add(std::vector<float>{0.9f, 0.2f}, std::vector<float>{1, 0});
  m.Add(std::vector<float>{0.6f, 0.4f}, std::vector<float>{0, 1});
  const MetricsResult r = m.Compute();
  EXPECT_EQ(r.samples, 4);
  EXPECT_EQ(r.positives, 2);
  EXPECT_DOUBLE_EQ(r.accuracy, 0.5);
  EXPECT_DOUBLE_EQ(r.auc, BruteForceAuc({0.9f, 0.2f, 0.6f, 0.4f}, {1, 0, 0, 1}));
}

}  // namespace
}  // namespace cemb::train
