#include "distributed/shard_plan.h"

#include <cmath>
#include <limits>
#include <vector>

#include "base/random.h"
#include "gtest/gtest.h"

namespace cemb::distributed {
namespace {

std::vector<int> Owners(const ShardPlan& plan) { return {plan.owners().begin(), plan.owners().end()}; }

TEST(ShardPlan, EqualTablesAlternateBetweenRanks) {
  const std::vector<TableCost> tables(8, TableCost{.bytes = 1 << 20, .lookups_per_step = 2048});
  absl::StatusOr<ShardPlan> plan = ShardPlan::Create(tables, 2);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(Owners(*plan), (std::vector<int>{0, 1, 0, 1, 0, 1, 0, 1}));
  EXPECT_EQ(plan->bytes_of(0), plan->bytes_of(1));
  EXPECT_DOUBLE_EQ(plan->lookup_share(0), 0.5);
}

TEST(ShardPlan, AHugeColdTableGetsARankOfItsOwnWhileHotTablesShareTheOther) {
  // Table 0: 90% of the bytes, 2% of the lookups; tables 1-5 small and hot.
  // The larger share decides: rank 0 holds table 0 and, as it still has the
  // smaller lookup share, the last hot table; never more bytes.
  const std::vector<TableCost> tables = {{90, 1}, {2, 10}, {2, 10}, {2, 10}, {2, 10}, {2, 10}};
  absl::StatusOr<ShardPlan> plan = ShardPlan::Create(tables, 2);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(Owners(*plan), (std::vector<int>{0, 1, 1, 1, 1, 0}));
  EXPECT_EQ(plan->Describe(0), "rank 0: tables 0,5 (92 B, 22% of lookups)");
  EXPECT_EQ(plan->Describe(1), "rank 1: tables 1,2,3,4 (8 B, 78% of lookups)");
}

TEST(ShardPlan, DescribeSaysTablesBytesAndShareOfLookups) {
  const std::vector<TableCost> tables = {{int64_t{1} << 30, 300}, {int64_t{1} << 29, 100}, {int64_t{1} << 29, 0}};
  const std::vector<int> owners = {0, 1, 0};
  absl::StatusOr<ShardPlan> plan = ShardPlan::FromOwners(tables, owners, 3);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->Describe(0), "rank 0: tables 0,2 (1.50 GiB, 75% of lookups)");
  EXPECT_EQ(plan->Describe(1), "rank 1: table 1 (512.0 MiB, 25% of lookups)");
  EXPECT_EQ(plan->Describe(2), "rank 2: no tables");
  EXPECT_EQ(plan->local_index(2), 1);
  EXPECT_EQ(plan->tables_of(0).size(), 2u);
}

TEST(ShardPlan, MoreRanksThanTablesLeavesRanksWithoutTables) {
  const std::vector<TableCost> tables = {{100, 10}, {50, 5}, {10, 1}};
  absl::StatusOr<ShardPlan> plan = ShardPlan::Create(tables, 5);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(Owners(*plan), (std::vector<int>{0, 1, 2}));
  EXPECT_TRUE(plan->tables_of(3).empty());
  EXPECT_TRUE(plan->tables_of(4).empty());
  EXPECT_EQ(plan->Describe(4), "rank 4: no tables");
}

TEST(ShardPlan, IsAPureFunctionOfItsInputsAndOwnsEveryTableOnce) {
  Xoshiro256pp rng(7);
  std::vector<TableCost> tables(26);
  for (TableCost& t : tables) {
    t.bytes = static_cast<int64_t>(rng.Below(int64_t{1} << 34));
    t.lookups_per_step = static_cast<double>(rng.Below(100000));
  }
  for (int ranks : {1, 2, 3, 4, 16, 40}) {
    absl::StatusOr<ShardPlan> a = ShardPlan::Create(tables, ranks);
    absl::StatusOr<ShardPlan> b = ShardPlan::Create(tables, ranks);
    ASSERT_TRUE(a.ok() && b.ok()) << "seed 7, " << ranks << " ranks";
    EXPECT_EQ(Owners(*a), Owners(*b)) << ranks << " ranks";
    int owned = 0;
    for (int r = 0; r < ranks; ++r) {
      for (int k = 0; k < static_cast<int>(a->tables_of(r).size()); ++k) {
        EXPECT_EQ(a->owner(a->tables_of(r)[k]), r);
        EXPECT_EQ(a->local_index(a->tables_of(r)[k]), k);
        ++owned;
      }
    }
    EXPECT_EQ(owned, 26) << ranks << " ranks";
  }
}

TEST(ShardPlan, ZeroCostTablesAreSpreadToo) {
  const std::vector<TableCost> tables(4);
  absl::StatusOr<ShardPlan> plan = ShardPlan::Create(tables, 2);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->tables_of(0).size() + plan->tables_of(1).size(), 4u);
}

TEST(ShardPlan, RefusesBadInput) {
  const std::vector<TableCost> good = {{10, 1}, {10, 1}};
  EXPECT_EQ(ShardPlan::Create(good, 0).status().code(), absl::StatusCode::kInvalidArgument);
  const std::vector<TableCost> negative = {{-1, 1}};
  EXPECT_EQ(ShardPlan::Create(negative, 2).status().code(), absl::StatusCode::kInvalidArgument);
  const std::vector<TableCost> nan = {{1, std::numeric_limits<double>::quiet_NaN()}};
  EXPECT_EQ(ShardPlan::Create(nan, 2).status().code(), absl::StatusCode::kInvalidArgument);
  const std::vector<int> outside = {0, 2};
  absl::StatusOr<ShardPlan> plan = ShardPlan::FromOwners(good, outside, 2);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(plan.status().message(), "ShardPlan: table 1 owned by rank 2 of 2");
  const std::vector<int> short_owners = {0};
  EXPECT_EQ(ShardPlan::FromOwners(good, short_owners, 2).status().code(), absl::StatusCode::kInvalidArgument);
}

// A table's cost: its rows' bytes (state included), the lookups.
TEST(ShardPlan, TableCostsCountRowsStateAndLookups) {
  const std::vector<uint64_t> rows = {1000, 10};
  const std::vector<uint32_t> hotness = {3, 1};
  const std::vector<TableCost> fp32 = TableCosts(rows, 16 * 4, 2048, hotness);
  ASSERT_EQ(fp32.size(), 2u);
  EXPECT_EQ(fp32[0].bytes, 1000 * 16 * 4);
  EXPECT_EQ(fp32[1].bytes, 10 * 16 * 4);
  EXPECT_EQ(fp32[0].lookups_per_step, 3 * 2048.0);
  EXPECT_EQ(fp32[1].lookups_per_step, 2048.0);
  const std::vector<TableCost> bf16 = TableCosts(rows, 16 * 2 + 4, 1, hotness);
  EXPECT_EQ(bf16[0].bytes, 1000 * 16 * 2 + 1000 * 4);
}

// The sizes every rank's model must run: each global batch's largest and
// smallest slice; a batch smaller than the ranks is refused, naming it.
TEST(ShardPlan, LocalBatchSizesAreEverySliceAnyRankRuns) {
  const std::vector<int64_t> global = {10, 7};
  absl::StatusOr<std::vector<int64_t>> sizes = LocalBatchSizes(global, 3);
  ASSERT_TRUE(sizes.ok()) << sizes.status();
  EXPECT_EQ(*sizes, (std::vector<int64_t>{2, 3, 4}));  // 10: 4, 3, 3; 7: 3, 2, 2
  const std::vector<int64_t> one = {10};
  EXPECT_EQ(*LocalBatchSizes(one, 1), (std::vector<int64_t>{10}));
  const std::vector<int64_t> small = {8, 2};
  absl::StatusOr<std::vector<int64_t>> refused = LocalBatchSizes(small, 3);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(), "a batch of 2 samples cannot be split over 3 ranks: every rank needs a sample");
}

}  // namespace
}  // namespace cemb::distributed
