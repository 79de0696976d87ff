#include "embedding/reindex.h"

#include <map>
#include <random>
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

// Both ways of numbering rows (the slot array for tables up to 8 rows per
// hash entry, the hash table above) against a std::map reference, on random
// bags with repeats, for table sizes on either side of the switch and a plan
// reused across them (and back), with batches of changing size.
TEST(Reindex, SlotArrayAndHashTableGiveTheReferencePlan) {
  std::mt19937_64 rng(11);
  UpdatePlan plan;  // reused on purpose
  for (int64_t nvectors : {int64_t{50}, int64_t{4096}, int64_t{40000}, int64_t{1} << 30, int64_t{300}}) {
    for (int64_t nbags : {1, 7, 1000, 333}) {
      SCOPED_TRACE(::testing::Message() << "nvectors " << nvectors << " bags " << nbags);
      std::vector<int64_t> offsets = {0}, indices;
      // A hot set of 20 rows makes repeats likely even in a huge table.
      for (int64_t b = 0; b < nbags; ++b) {
        const int64_t len = static_cast<int64_t>(rng() % 5);
        for (int64_t k = 0; k < len; ++k) {
          const int64_t r = static_cast<int64_t>(rng() % 3 == 0 ? rng() % 20 : rng() % nvectors);
          indices.push_back(std::min(r, nvectors - 1));
        }
        offsets.push_back(static_cast<int64_t>(indices.size()));
      }
      ASSERT_TRUE(reindex("t", nvectors, Bags<int64_t>{offsets, indices}, Pooling::kSum, &plan).ok());

      std::vector<int64_t> rows;
      std::map<int64_t, std::vector<int32_t>> sources;  // row -> bags, in bag order
      for (int64_t b = 0; b < nbags; ++b) {
        for (int64_t p = offsets[b]; p < offsets[b + 1]; ++p) {
          if (!sources.contains(indices[p])) rows.push_back(indices[p]);
          sources[indices[p]].push_back(static_cast<int32_t>(b));
        }
      }
      ASSERT_THAT(plan.rows(), ::testing::ElementsAreArray(rows));
      ASSERT_EQ(plan.offsets().size(), rows.size() + 1);
      EXPECT_EQ(plan.nvectors(), nvectors);
      for (size_t u = 0; u < rows.size(); ++u) {
        const std::span<const int32_t> got = plan.sources().subspan(plan.offsets()[u], plan.offsets()[u + 1] - plan.offsets()[u]);
        EXPECT_THAT(std::vector<int32_t>(got.begin(), got.end()), ::testing::ElementsAreArray(sources[rows[u]]))
            << "row " << rows[u];
      }
    }
  }
}

}  // namespace
}  // namespace cemb
