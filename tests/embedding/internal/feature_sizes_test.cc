// The one list of specialised feature sizes and everything derived from it:
// the compiled SimpleTable types, the run-time switch, and the kernel type a
// table of an unlisted static size runs on.
#include "embedding/internal/feature_sizes.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "embedding/kernels.h"
#include "gtest/gtest.h"
#include "tests/embedding/test_util.h"

namespace cemb {
namespace {

struct TableType {
  bool is_float;
  int64_t featuresize;
  bool operator==(const TableType&) const = default;
};

// {float, bfloat16} x ({kDynamic} + the listed sizes), in list order.
std::vector<TableType> ExpectedTypes() {
  std::vector<TableType> types;
  for (bool is_float : {true, false}) {
    types.push_back({is_float, kDynamic});
    for (int64_t d : internal::kFeatureSizes) types.push_back({is_float, d});
  }
  return types;
}

TEST(FeatureSizes, ListIsIncreasingAndPositive) {
  EXPECT_TRUE(std::is_sorted(internal::kFeatureSizes.begin(), internal::kFeatureSizes.end()));
  EXPECT_GT(internal::kFeatureSizes.front(), 0);
  EXPECT_EQ(std::adjacent_find(internal::kFeatureSizes.begin(), internal::kFeatureSizes.end()),
            internal::kFeatureSizes.end());
}

TEST(FeatureSizes, CompiledSimpleTableTypesFollowTheList) {
  std::vector<TableType> compiled;
#define CEMB_RECORD(...) \
  compiled.push_back({std::is_same_v<__VA_ARGS__::value_type, float>, __VA_ARGS__::kFeatureSize});
  CEMB_FOR_EACH_TABLE_TYPE(CEMB_RECORD, ::cemb::SimpleTable)
#undef CEMB_RECORD
  EXPECT_EQ(compiled, ExpectedTypes());
}

TEST(FeatureSizes, StringNamesTheList) {
  std::string listed;
  for (int64_t d : internal::kFeatureSizes) absl::StrAppend(&listed, " ", d);
  EXPECT_EQ(std::string(CEMB_FEATURE_SIZES_STRING), listed);
}

TEST(FeatureSizes, WithFeatureSizeMakesListedSizesStatic) {
  const auto static_size = [](int64_t d) {
    return internal::WithFeatureSize(d, []<int64_t kD>() { return kD; });
  };
  for (int64_t d : internal::kFeatureSizes) {
    EXPECT_TRUE(internal::IsSpecialisedFeatureSize(d));
    EXPECT_EQ(static_size(d), d);
  }
  for (int64_t d : {int64_t{0}, int64_t{1}, int64_t{24}, int64_t{100}, int64_t{1024}}) {
    EXPECT_FALSE(internal::IsSpecialisedFeatureSize(d)) << d;
    EXPECT_EQ(static_size(d), kDynamic) << d;
  }
}

// A listed static size has kernels of its own; any other runs on the
// kDynamic base's (which is what makes SimpleTable<float, 100> link).
static_assert(std::is_same_v<internal::KernelTable<SimpleTable<float, 128>>, SimpleTable<float, 128>>);
static_assert(std::is_same_v<internal::KernelTable<SimpleTable<float, kDynamic>>, SimpleTable<float, kDynamic>>);
static_assert(std::is_same_v<internal::KernelTable<SimpleTable<float, 100>>, SimpleTable<float, kDynamic>>);
static_assert(std::is_same_v<internal::KernelTable<SimpleTable<bfloat16, 100>>, SimpleTable<bfloat16, kDynamic>>);

template <typename Table>
void ExpectSpecialised(int64_t d) {
  const Table table = testing::MakeTable<Table>(4, d, 1);
  for (Isa isa : testing::AvailableIsas()) {
    auto kernels = TableKernels<Table>::Create(table, {.isa = isa});
    ASSERT_TRUE(kernels.ok()) << kernels.status();
    EXPECT_EQ(kernels->specialised_size(), isa == Isa::kGeneric ? 0 : d) << kernels->description();
  }
}

TEST(FeatureSizes, EveryListedSizeHasSpecialisedKernels) {
#define CEMB_EXPECT_SPECIALISED(D)                \
  ExpectSpecialised<SimpleTable<float, D>>(D);    \
  ExpectSpecialised<SimpleTable<bfloat16, D>>(D); \
  ExpectSpecialised<SimpleTable<float, kDynamic>>(D);
  CEMB_FOR_EACH_FEATURE_SIZE(CEMB_EXPECT_SPECIALISED)
#undef CEMB_EXPECT_SPECIALISED
}

}  // namespace
}  // namespace cemb
