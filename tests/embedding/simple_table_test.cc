#include "embedding/simple_table.h"

#include <unistd.h>

#include "absl/strings/match.h"

#include "gtest/gtest.h"
#include "tests/embedding/table_contract.h"

namespace cemb {

template <typename T, int64_t D>
struct testing::TableFactory<SimpleTable<T, D>> {
  static std::unique_ptr<SimpleTable<T, D>> Make(int64_t nvectors, int64_t d, const std::string& name) {
    auto t = SimpleTable<T, D>::Create({.name = name, .nvectors = nvectors, .featuresize = d});
    EXPECT_TRUE(t.ok()) << t.status();
    return std::make_unique<SimpleTable<T, D>>(*std::move(t));
  }
};

namespace testing {
using SimpleTables = ::testing::Types<SimpleTable<float, 16>, SimpleTable<float, 128>, SimpleTable<float, kDynamic>,
                                      SimpleTable<bfloat16, 64>, SimpleTable<bfloat16, kDynamic>>;
INSTANTIATE_TYPED_TEST_SUITE_P(Simple, TableContract, SimpleTables);
}  // namespace testing

namespace {

TEST(SimpleTable, CreateRejectsBadShapes) {
  EXPECT_FALSE((SimpleTable<float, kDynamic>::Create({.nvectors = 10, .featuresize = 0}).ok()));
  EXPECT_FALSE((SimpleTable<float, 16>::Create({.nvectors = 0}).ok()));
  absl::Status s = SimpleTable<float, 16>::Create({.name = "t3", .nvectors = 10, .featuresize = 32}).status();
  EXPECT_EQ(s.message(), "t3: featuresize 32 given to a table of static size 16");
}

TEST(SimpleTable, RowsAreContiguous) {
  auto t = SimpleTable<float, kDynamic>::Create({.nvectors = 10, .featuresize = 7});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->rowpointer(3) - t->rowpointer(0), 21);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t->rowpointer(0)) % 64, 0u);
}

TEST(SimpleTable, LivesOnPmemFile) {
  const char* dir = std::getenv("TMPDIR");
  const std::string path = std::string(dir ? dir : "/tmp") + "/cemb_pmem_table_" + std::to_string(getpid());
  TierOptions tier = TierOptions::PmemFile(path, FileMode::kCreate);
  tier.remove_on_close = true;
  auto t = SimpleTable<float, 64>::Create({.name = "p", .nvectors = 5000, .tier = tier});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->region().kind(), TierKind::kPmem);
  InitUniform(*t, 1);
  auto dram = SimpleTable<float, 64>::Create({.name = "d", .nvectors = 5000});
  InitUniform(*dram, 1);
  EXPECT_EQ(reference::Snapshot(*t).v, reference::Snapshot(*dram).v);
}

TEST(SimpleTable, PmemErrorNamesTheTable) {
  auto t = SimpleTable<float, 64>::Create({.name = "big", .nvectors = 10, .tier = TierOptions::Pmem("/no/such/dir/x")});
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(absl::StartsWith(t.status().message(), "big: pmem: /no/such/dir/x: cannot open")) << t.status();
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace cemb
