// Boundary cases of the API-boundary validation, with hand-written messages.
#include "embedding/validate.h"

#include <vector>

#include "embedding/kernels.h"
#include "gtest/gtest.h"
#include "tests/embedding/test_util.h"

namespace cemb {
namespace {

using B = Bags<int32_t>;

absl::Status Check(std::vector<int32_t> offsets, std::vector<int32_t> indices, std::vector<float> weights = {}) {
  return validate_bags("t7", 100, B{offsets, indices, weights});
}

TEST(ValidateBags, AcceptsEmptyBagsAndZeroBatch) {
  EXPECT_TRUE(Check({0}, {}).ok());                 // zero bags
  EXPECT_TRUE(Check({0, 0, 0}, {}).ok());           // two empty bags
  EXPECT_TRUE(Check({0, 0, 2, 2}, {99, 0}).ok());   // last row, first row
  EXPECT_TRUE(Check({0, 3}, {5, 5, 5}).ok());       // duplicates in a bag
}

TEST(ValidateBags, IndexEqualToNvectorsNamesTableBagPositionAndRow) {
  EXPECT_EQ(Check({0, 1, 4}, {1, 2, 3, 100}).message(), "table t7, bag 1, index 2: row 100 >= nvectors 100");
  EXPECT_EQ(Check({0, 1, 4}, {1, 2, 3, 100}).code(), absl::StatusCode::kOutOfRange);
}

TEST(ValidateBags, NegativeIndex) {
  EXPECT_EQ(Check({0, 2}, {0, -1}).message(), "table t7, bag 0, index 1: row -1 is negative");
}

TEST(ValidateBags, OffsetsMustBeWellFormed) {
  EXPECT_EQ(Check({}, {}).message(), "table t7: offsets is empty (need nbags + 1 entries)");
  EXPECT_EQ(Check({1, 2}, {0, 0}).message(), "table t7: offsets[0] is 1, not 0");
  EXPECT_EQ(Check({0, 2, 1, 3}, {0, 0, 0}).message(), "table t7, bag 1: offsets decrease (2 then 1)");
  EXPECT_EQ(Check({0, 2, 5}, {0, 0, 0}).message(), "table t7: offsets end at 5 but there are 3 indices");
  EXPECT_EQ(Check({0, 1}, {0}, {1.0f, 2.0f}).message(), "table t7: 2 weights for 1 indices");
}

TEST(ValidateIndices, NonReducingLookupNamesTheOutput) {
  const std::vector<int64_t> indices = {0, 99, 100};
  EXPECT_EQ(validate_indices<int64_t>("t1", 100, indices).message(), "table t1, bag 2, index 0: row 100 >= nvectors 100");
}

TEST(ValidateMatrix, OutputTooSmall) {
  std::vector<float> buf(10 * 16);
  EXPECT_TRUE(validate_matrix("t", "output", 16, 10, ConstMatrixView(buf.data(), 10, 16, 16)).ok());
  EXPECT_EQ(validate_matrix("t", "output", 16, 11, ConstMatrixView(buf.data(), 10, 16, 16)).message(),
            "table t: output is 10 x 16 (ld 16), need at least 11 x 16");
  EXPECT_FALSE(validate_matrix("t", "output", 17, 10, ConstMatrixView(buf.data(), 10, 16, 16)).ok());
  EXPECT_TRUE(validate_matrix("t", "output", 16, 0, ConstMatrixView()).ok());  // zero batch
}

TEST(Kernels, ZeroBatchAndEmptyBagsGiveZeroRows) {
  auto table = testing::MakeTable<SimpleTable<float, 16>>(10, 16, 1);
  for (Isa isa : testing::AvailableIsas()) {
    auto k = TableKernels<SimpleTable<float, 16>>::Create(table, {.isa = isa});
    ASSERT_TRUE(k.ok());
    const std::vector<int32_t> none = {0};
    EXPECT_TRUE(k->pooled_lookup(B{none, {}}, MatrixView{}).ok());
    const std::vector<int32_t> offsets = {0, 0, 0};
    testing::PaddedMatrix out(2, 16);
    ASSERT_TRUE(k->pooled_lookup(B{offsets, {}}, out.view(), {.pooling = Pooling::kMean}).ok());
    for (int64_t c = 0; c < 16; ++c) EXPECT_EQ(out.at(1, c), 0.0f);
    EXPECT_TRUE(out.SentinelsIntact());
  }
}

TEST(Kernels, UnavailableIsaIsAnErrorNotADowngrade) {
  auto table = testing::MakeTable<SimpleTable<float, 16>>(10, 16, 1);
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    auto k = TableKernels<SimpleTable<float, 16>>::Create(table, {.isa = isa});
    EXPECT_EQ(k.ok(), IsaAvailable(isa));
  }
}

}  // namespace
}  // namespace cemb
