// SampleTraffic (train/dram_budget.h): the lookups of the first samples of
// the training data, per table, hottest first.
#include "train/dram_budget.h"

#include <vector>

#include "gtest/gtest.h"
#include "tests/data/test_util.h"

namespace cemb::train {
namespace {

TEST(DramBudget, SampleTrafficCountsEachTablesLookupsHottestFirst) {
  data::testing::TempDir dir;
  const data::DatasetSpec spec{.num_dense = 1, .table_sizes = {10, 10}, .hotness = {2, 2}};
  auto w = data::DatasetWriter::Create(dir.File("d.bin"), spec);
  ASSERT_TRUE(w.ok()) << w.status();
  const float dense[1] = {0};
  // Table 0: row 3 in every sample twice, row i % 5 once; table 1: row 7.
  for (int i = 0; i < 20; ++i) {
    const int32_t idx[4] = {3, i % 5 == 3 ? 4 : i % 5, 7, 7};
    ASSERT_TRUE((*w)->Append(0, dense, idx).ok());
  }
  ASSERT_TRUE((*w)->Finish().ok());
  absl::StatusOr<std::unique_ptr<data::Dataset>> d = data::Dataset::Open(dir.File("d.bin"));
  ASSERT_TRUE(d.ok()) << d.status();
  TableTraffic all = SampleTraffic(**d, 1000);
  EXPECT_EQ(all.samples, 20u);
  // Row 3: 20; rows 0, 1, 2: 4 each; row 4: 8 (its own 4 and row 3's turn).
  EXPECT_EQ(all.counts[0], (std::vector<uint32_t>{20, 8, 4, 4, 4}));
  EXPECT_EQ(all.counts[1], (std::vector<uint32_t>{40}));
  TableTraffic first = SampleTraffic(**d, 5, {false, true});
  EXPECT_EQ(first.samples, 5u);
  EXPECT_TRUE(first.counts[0].empty());
  EXPECT_EQ(first.counts[1], (std::vector<uint32_t>{10}));
}

}  // namespace
}  // namespace cemb::train
