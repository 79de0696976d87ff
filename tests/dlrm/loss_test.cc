#include "dlrm/loss.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace cemb::dlrm {
namespace {

TEST(BceWithLogits, MatchesTheTextbookFormulaForModerateLogits) {
  const std::vector<float> z = {-3.f, -0.5f, 0.f, 0.25f, 4.f};
  const std::vector<float> y = {0.f, 1.f, 1.f, 0.f, 0.3f};
  std::vector<float> grad(z.size());
  absl::StatusOr<double> loss = BceWithLogits(z, y, grad);
  ASSERT_TRUE(loss.ok());
  double want = 0;
  for (size_t i = 0; i < z.size(); ++i) {
    const double p = 1.0 / (1.0 + std::exp(-static_cast<double>(z[i])));
    want += -(y[i] * std::log(p) + (1 - y[i]) * std::log(1 - p));
    EXPECT_NEAR(grad[i], (p - y[i]) / z.size(), 1e-7) << i;
  }
  EXPECT_NEAR(*loss, want / z.size(), 1e-9);
}

TEST(BceWithLogits, GradientMatchesFiniteDifferences) {
  std::vector<float> z = {-2.f, -0.3f, 0.1f, 1.7f};
  const std::vector<float> y = {1.f, 0.f, 1.f, 0.f};
  std::vector<float> grad(z.size());
  ASSERT_TRUE(BceWithLogits(z, y, grad).ok());
  const float eps = 1e-2f;
  for (size_t i = 0; i < z.size(); ++i) {
    const float saved = z[i];
    z[i] = saved + eps;
    const double plus = *BceWithLogits(z, y, {});
    z[i] = saved - eps;
    const double minus = *BceWithLogits(z, y, {});
    z[i] = saved;
    EXPECT_NEAR(grad[i], (plus - minus) / (2 * eps), 1e-5) << i;
  }
}

TEST(BceWithLogits, ExtremeLogitsStayFinite) {
  const std::vector<float> z = {-1000.f, 1000.f, -1000.f, 1000.f, -100.f};
  const std::vector<float> y = {1.f, 0.f, 0.f, 1.f, 1.f};
  std::vector<float> grad(z.size());
  absl::StatusOr<double> loss = BceWithLogits(z, y, grad);
  ASSERT_TRUE(loss.ok());
  EXPECT_NEAR(*loss, (1000 + 1000 + 0 + 0 + 100) / 5.0, 1e-6);
  EXPECT_FLOAT_EQ(grad[0], -1.f / 5);
  EXPECT_FLOAT_EQ(grad[1], 1.f / 5);
  EXPECT_FLOAT_EQ(grad[2], 0.f);
  EXPECT_FLOAT_EQ(grad[3], 0.f);
  for (float g : grad) EXPECT_TRUE(std::isfinite(g));
}

TEST(BceWithLogits, GradientMayOverwriteTheLogits) {
  std::vector<float> z = {0.f, 2.f};
  const std::vector<float> y = {1.f, 0.f};
  ASSERT_TRUE(BceWithLogits(z, y, z).ok());
  EXPECT_FLOAT_EQ(z[0], (0.5f - 1.f) / 2);
  EXPECT_NEAR(z[1], (1.0 / (1.0 + std::exp(-2.0))) / 2, 1e-7);
}

TEST(BceWithLogits, MismatchedOrEmptyInputsAreErrors) {
  const std::vector<float> z = {0.f, 1.f};
  const std::vector<float> y = {1.f};
  std::vector<float> grad(3);
  EXPECT_EQ(BceWithLogits(z, y, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BceWithLogits(z, z, grad).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BceWithLogits({}, {}, {}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(Sigmoid, IsStableAtBothEnds) {
  const std::vector<float> z = {-1000.f, -20.f, 0.f, 20.f, 1000.f};
  std::vector<float> p(z.size());
  Sigmoid(z, p);
  EXPECT_EQ(p[0], 0.f);
  EXPECT_NEAR(p[1], 2.06e-9, 1e-10);
  EXPECT_EQ(p[2], 0.5f);
  EXPECT_EQ(p[4], 1.f);
}

}  // namespace
}  // namespace cemb::dlrm
