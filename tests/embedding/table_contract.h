// The typed contract suite a table behind the rowpointer interface passes:
// its shape, lookups that see the updates, seeded initialisation, save/load
// (and a bad rows file leaving the table untouched), every kernel against
// the double-precision reference, long weighted mean bags, and an index out
// of range refused with nothing written.
//
// Instantiated by tests/embedding/simple_table_test.cc (SimpleTable) and by
// tests/tables/contract_test.cc (MakeStoredTable's simple table on a PMem
// file, its cached tables: static, dynamic, dynamic with admission, and
// CLOCK eviction, and its ssd table; one test binary each).
//
// To run it on a table type, specialise TableFactory and instantiate:
//   template <> struct cemb::testing::TableFactory<MyTable> {
//     static std::unique_ptr<MyTable> Make(int64_t nvectors, int64_t d, const std::string& name);
//   };
//   INSTANTIATE_TYPED_TEST_SUITE_P(MyTable, TableContract, ::testing::Types<MyTable>);
#ifndef CEMB_TESTS_EMBEDDING_TABLE_CONTRACT_H_
#define CEMB_TESTS_EMBEDDING_TABLE_CONTRACT_H_

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "embedding/kernels.h"
#include "embedding/reindex.h"
#include "embedding/table_io.h"
#include "gtest/gtest.h"
#include "tests/embedding/reference.h"
#include "tests/embedding/test_util.h"

namespace cemb::testing {

template <typename Table>
struct TableFactory;

template <typename Table>
class TableContract : public ::testing::Test {
 protected:
  static constexpr int64_t kRows = 1000;
  static int64_t FeatureSize() { return Table::kFeatureSize == kDynamic ? 24 : Table::kFeatureSize; }
  std::unique_ptr<Table> Make(uint64_t seed = 1) {
    auto table = TableFactory<Table>::Make(kRows, FeatureSize(), "contract");
    InitUniform(*table, seed);
    return table;
  }
  static std::string TempPath(const std::string& name) {
    const char* dir = std::getenv("TMPDIR");
    return std::string(dir != nullptr ? dir : "/tmp") + "/cemb_contract_" + std::to_string(getpid()) + "_" + name;
  }
};
TYPED_TEST_SUITE_P(TableContract);

TYPED_TEST_P(TableContract, ReportsItsShape) {
  auto table = this->Make();
  EXPECT_EQ(table->nvectors(), this->kRows);
  EXPECT_EQ(table->featuresize(), this->FeatureSize());
  if constexpr (TypeParam::kFeatureSize != kDynamic) {
    // featuresize() of a static table is a compile-time constant.
    static_assert(TypeParam::kFeatureSize > 0);
    EXPECT_EQ(table->featuresize(), TypeParam::kFeatureSize);
  }
  EXPECT_FALSE(table->name().empty());
}

TYPED_TEST_P(TableContract, WritesThroughUpdateAreSeenByLookups) {
  auto table = this->Make();
  [[maybe_unused]] const auto scope = ReadScopeOf(*table);
  // Exact in bfloat16 too.
  auto Value = [](int64_t r, int64_t c) { return static_cast<float>(r % 7) * 0.25f + static_cast<float>(c % 5); };
  using T = typename TypeParam::value_type;
  for (int64_t r : {int64_t{0}, int64_t{1}, this->kRows / 2, this->kRows - 1}) {
    T* row = table->rowpointer(r, Access::kUpdate);
    for (int64_t c = 0; c < table->featuresize(); ++c) row[c] = T(Value(r, c));
  }
  for (int64_t r : {int64_t{0}, int64_t{1}, this->kRows / 2, this->kRows - 1}) {
    const T* fwd = table->rowpointer(r, Access::kForward);
    const T* upd = table->rowpointer(r, Access::kUpdate);
    for (int64_t c = 0; c < table->featuresize(); ++c) {
      ASSERT_EQ(ToFloat(fwd[c]), Value(r, c));
      ASSERT_EQ(ToFloat(upd[c]), Value(r, c));
    }
  }
}

TYPED_TEST_P(TableContract, InitUniformIsSeededAndBounded) {
  auto a = this->Make(7), b = this->Make(7), c = this->Make(8);
  const reference::Rows ra = reference::Snapshot(*a), rb = reference::Snapshot(*b), rc = reference::Snapshot(*c);
  EXPECT_EQ(ra.v, rb.v);
  EXPECT_NE(ra.v, rc.v);
  const double bound = std::sqrt(1.0 / this->kRows) * (1 + 1.0 / 128);  // bfloat16 rounding
  double sum = 0;
  for (double x : ra.v) {
    ASSERT_LE(std::abs(x), bound);
    sum += x;
  }
  EXPECT_LT(std::abs(sum / ra.v.size()), bound / 10);  // centred
}

TYPED_TEST_P(TableContract, SaveLoadRoundTrip) {
  auto a = this->Make(3), b = this->Make(4);
  const std::string path = this->TempPath("roundtrip");
  ASSERT_TRUE(SaveRows(*a, path).ok());
  ASSERT_TRUE(LoadRows(*b, path).ok());
  EXPECT_EQ(reference::Snapshot(*a).v, reference::Snapshot(*b).v);
  std::filesystem::remove(path);
}

TYPED_TEST_P(TableContract, BadRowsFileLeavesTableUntouched) {
  auto a = this->Make(3), b = this->Make(4);
  const std::string path = this->TempPath("bad");
  ASSERT_TRUE(SaveRows(*a, path).ok());
  const reference::Rows before = reference::Snapshot(*b);
  // Truncated.
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 5);
  absl::Status s = LoadRows(*b, path);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("truncated"), std::string::npos) << s;
  // Corrupt: same size, one byte flipped in the last row.
  ASSERT_TRUE(SaveRows(*a, path).ok());
  {
    FILE* f = std::fopen(path.c_str(), "r+b");
    std::fseek(f, -3, SEEK_END);
    const int byte = std::fgetc(f);
    std::fseek(f, -3, SEEK_END);
    std::fputc(byte ^ 0x40, f);
    std::fclose(f);
  }
  s = LoadRows(*b, path);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("checksum"), std::string::npos) << s;
  EXPECT_FALSE(LoadRows(*b, path + ".missing").ok());
  EXPECT_EQ(reference::Snapshot(*b).v, before.v);
  std::filesystem::remove(path);
}

TYPED_TEST_P(TableContract, KernelsMatchReference) {
  auto table = this->Make(5);
  const int64_t d = table->featuresize();
  auto kernels = TableKernels<TypeParam>::Create(*table);
  ASSERT_TRUE(kernels.ok()) << kernels.status();
  const auto bags = MakeBags<int32_t>(64, 0, 40, this->kRows, 9);
  reference::Rows rows = reference::Snapshot(*table);
  const std::vector<double> expected = reference::Pooled<int32_t>(rows, bags.offsets, bags.indices, {}, Pooling::kSum);
  PaddedMatrix out(64, d);
  ASSERT_TRUE(kernels->pooled_lookup(bags.bags(false), out.view()).ok());
  for (int64_t b = 0; b < 64; ++b) {
    for (int64_t c = 0; c < d; ++c) ASSERT_NEAR(out.at(b, c), expected[b * d + c], 1e-5);
  }
  EXPECT_TRUE(out.SentinelsIntact());

  std::vector<float> grad(64 * d, 0.25f);
  UpdatePlan plan;
  ASSERT_TRUE(reindex(table->name(), table->nvectors(), bags.bags(false), Pooling::kSum, &plan).ok());
  ASSERT_TRUE(kernels->sgd_update(plan, ConstMatrixView(grad.data(), 64, d, d), {.learning_rate = 0.5f}).ok());
  reference::ApplySgd(rows, reference::TableGradient<int32_t>(d, bags.offsets, bags.indices, {}, Pooling::kSum,
                                                             grad.data(), d),
                      0.5);
  const reference::Rows got = reference::Snapshot(*table);
  for (size_t i = 0; i < got.v.size(); ++i) ASSERT_NEAR(got.v[i], rows.v[i], std::abs(rows.v[i]) / 128 + 1e-5);
}

// Long bags (past a cached table's resolve span of 320 rows), weighted, mean
// pooled, beside short and empty ones.
TYPED_TEST_P(TableContract, LongWeightedMeanBagsMatchReference) {
  auto table = this->Make(7);
  const int64_t d = table->featuresize();
  auto kernels = TableKernels<TypeParam>::Create(*table);
  ASSERT_TRUE(kernels.ok()) << kernels.status();
  const auto bags = MakeBags<int64_t>(12, 0, 1200, this->kRows, 11);
  const reference::Rows rows = reference::Snapshot(*table);
  const std::vector<double> expected =
      reference::Pooled<int64_t>(rows, bags.offsets, bags.indices, bags.weights, Pooling::kMean);
  PaddedMatrix out(12, d);
  ASSERT_TRUE(kernels->pooled_lookup(bags.bags(true), out.view(), {.pooling = Pooling::kMean}).ok());
  for (int64_t b = 0; b < 12; ++b) {
    for (int64_t c = 0; c < d; ++c) ASSERT_NEAR(out.at(b, c), expected[b * d + c], 1e-4) << "bag " << b;
  }
  EXPECT_TRUE(out.SentinelsIntact());
}

TYPED_TEST_P(TableContract, OutOfRangeIndexIsRejectedAndNothingIsWritten) {
  auto table = this->Make(6);
  const int64_t d = table->featuresize();
  auto kernels = TableKernels<TypeParam>::Create(*table);
  ASSERT_TRUE(kernels.ok());
  const std::vector<int64_t> offsets = {0, 2, 4};
  const std::vector<int64_t> indices = {0, 1, 5, this->kRows};
  PaddedMatrix out(2, d);
  absl::Status s = kernels->pooled_lookup(Bags<int64_t>{offsets, indices}, out.view());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "table contract, bag 1, index 1: row 1000 >= nvectors 1000");
  for (float x : out.data) ASSERT_EQ(x, kSentinel);
}

REGISTER_TYPED_TEST_SUITE_P(TableContract, ReportsItsShape, WritesThroughUpdateAreSeenByLookups,
                            InitUniformIsSeededAndBounded, SaveLoadRoundTrip, BadRowsFileLeavesTableUntouched,
                            KernelsMatchReference, LongWeightedMeanBagsMatchReference,
                            OutOfRangeIndexIsRejectedAndNothingIsWritten);

}  // namespace cemb::testing

#endif  // CEMB_TESTS_EMBEDDING_TABLE_CONTRACT_H_
