#include "embedding/reindex.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cemb {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(Reindex, HandWrittenPlan) {
  // bag 0: rows 5 3 5; bag 1: (empty); bag 2: rows 3 9
  const std::vector<int32_t> offsets = {0, 3, 3, 5};
  const std::vector<int32_t> indices = {5, 3, 5, 3, 9};
  UpdatePlan plan;
  ASSERT_TRUE(reindex("t", 10, Bags<int32_t>{offsets, indices}, Pooling::kSum, &plan).ok());
  EXPECT_THAT(plan.rows(), ElementsAre(5, 3, 9));  // first-seen order
  EXPECT_THAT(plan.offsets(), ElementsAre(0, 2, 4, 5));
  EXPECT_THAT(plan.sources(), ElementsAre(0, 0, 0, 2, 2));
  EXPECT_THAT(plan.scales(), IsEmpty());
  EXPECT_EQ(plan.noutputs(), 3);
  EXPECT_EQ(plan.noccurrences(), 5);
}

TEST(Reindex, MeanAndWeightsBecomeScales) {
  const std::vector<int64_t> offsets = {0, 2, 3};
  const std::vector<int64_t> indices = {1, 2, 1};
  const std::vector<float> weights = {2.0f, 4.0f, 8.0f};
  UpdatePlan plan;
  ASSERT_TRUE(reindex("t", 3, Bags<int64_t>{offsets, indices, weights}, Pooling::kMean, &plan).ok());
  EXPECT_THAT(plan.rows(), ElementsAre(1, 2));
  EXPECT_THAT(plan.sources(), ElementsAre(0, 1, 0));
  EXPECT_THAT(plan.scales(), ElementsAre(1.0f, 8.0f, 2.0f));  // 2/2, 8/1, 4/2
}

TEST(Reindex, PlanIsReusableAndSlotsAreReset) {
  UpdatePlan plan;
  const std::vector<int32_t> a = {4, 4, 1};
  ASSERT_TRUE(reindex_indices<int32_t>("t", 5, a, &plan).ok());
  EXPECT_THAT(plan.rows(), ElementsAre(4, 1));
  EXPECT_THAT(plan.sources(), ElementsAre(0, 1, 2));
  const std::vector<int32_t> b = {1, 0};
  ASSERT_TRUE(reindex_indices<int32_t>("t", 5, b, &plan).ok());
  EXPECT_THAT(plan.rows(), ElementsAre(1, 0));
  EXPECT_THAT(plan.offsets(), ElementsAre(0, 1, 2));
}

TEST(Reindex, BadIndexLeavesPlanError) {
  UpdatePlan plan;
  const std::vector<int32_t> a = {0, 5};
  EXPECT_EQ(reindex_indices<int32_t>("t", 5, a, &plan).message(), "table t, bag 1, index 0: row 5 >= nvectors 5");
}

}  // namespace
}  // namespace cemb
