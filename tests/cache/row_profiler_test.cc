#include "cache/row_profiler.h"

#include <vector>

#include "gtest/gtest.h"

namespace cemb {
namespace {

TEST(RowProfiler, HottestRowsFirstTiesByRow) {
  RowProfiler p(10);
  ASSERT_TRUE(p.observe(std::vector<int32_t>{3, 3, 3, 7, 7, 1, 9}).ok());
  ASSERT_TRUE(p.observe(std::vector<int64_t>{7, 1}).ok());
  EXPECT_EQ(p.batches(), 2);
  EXPECT_EQ(p.count(7), 3u);
  EXPECT_EQ(p.hottest(3), (std::vector<int64_t>{3, 7, 1}));
  EXPECT_EQ(p.hottest(100), (std::vector<int64_t>{3, 7, 1, 9}));  // only rows seen
  EXPECT_TRUE(p.hottest(0).empty());
}

TEST(RowProfiler, FreezeStopsCounting) {
  RowProfiler p(4);
  ASSERT_TRUE(p.observe(std::vector<int32_t>{2}).ok());
  p.freeze();
  ASSERT_TRUE(p.observe(std::vector<int32_t>{3, 3}).ok());
  EXPECT_EQ(p.hottest(4), (std::vector<int64_t>{2}));
}

TEST(RowProfiler, OutOfRangeRowIsRejectedAndNothingCounted) {
  RowProfiler p(4);
  absl::Status s = p.observe(std::vector<int32_t>{1, 4});
  EXPECT_EQ(s.message(), "row profiler: index 1: row 4 >= nvectors 4");
  EXPECT_EQ(p.count(1), 0u);
  EXPECT_FALSE(p.observe(std::vector<int64_t>{-1}).ok());
}

}  // namespace
}  // namespace cemb
