// The table contract suite (tests/embedding/table_contract.h) for one storage
// kind made by MakeStoredTable, chosen at compile time by CEMB_CONTRACT_POLICY
// (this file is built into one test binary per kind; tests/tables/CMakeLists.txt):
//   0 simple   SimpleTable on the slow tier (a PMem file tier), made by MakeStoredTable
//   1 static   CachedTable, policy kStatic, filled with random rows before initialisation
//   2 dynamic  CachedTable, policy kDynamic, cache of 20% + 10% in small pages
//   3 dynamic  ... with the admission filter (admit on the second miss)
//   4 clock    CachedTable, policy kDynamic, CacheEviction::kClock (evicts concurrently), 5% + 1%:
//              the evictor runs during the tests
//   5 ssd      SsdTable, rows in a log file in $TMPDIR, a DRAM pool of a quarter of them: the
//              tests reach every other row through its synchronous miss path
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"
#include "tables/storage.h"
#include "tests/embedding/table_contract.h"

#ifndef CEMB_CONTRACT_POLICY
#error "define CEMB_CONTRACT_POLICY"
#endif

namespace cemb {

#if CEMB_CONTRACT_POLICY == 0
template <typename T, int64_t D>
struct testing::TableFactory<SimpleTable<T, D>> {
  static std::unique_ptr<SimpleTable<T, D>> Make(int64_t nvectors, int64_t d, const std::string& name) {
    const char* dir = std::getenv("TMPDIR");
    StorageConfig config{.kind = StorageKind::kSimple, .slow_tier = TierOptions::Pmem(dir != nullptr ? dir : "/tmp")};
    auto t = MakeStoredTable<T, D>({.name = name, .nvectors = nvectors, .featuresize = d}, config);
    EXPECT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(std::get<0>(*t).region().kind(), TierKind::kPmem);
    return std::make_unique<SimpleTable<T, D>>(std::get<0>(*std::move(t)));
  }
};
namespace testing {
using Tables = ::testing::Types<SimpleTable<float, 16>, SimpleTable<float, kDynamic>, SimpleTable<bfloat16, 64>>;
INSTANTIATE_TYPED_TEST_SUITE_P(SimplePolicy, TableContract, Tables);
}  // namespace testing
#elif CEMB_CONTRACT_POLICY == 5
template <typename T, int64_t D>
struct testing::TableFactory<SsdTable<T, D>> {
  static std::unique_ptr<SsdTable<T, D>> Make(int64_t nvectors, int64_t d, const std::string& name) {
    const char* dir = std::getenv("TMPDIR");
    StorageConfig config{.kind = StorageKind::kSsd};
    config.ssd.file.directory = dir != nullptr ? dir : "/tmp";
    config.ssd.capacity_bytes = nvectors / 4 * SlotBytes(d * static_cast<int64_t>(sizeof(T)));
    auto t = MakeStoredTable<T, D>({.name = name, .nvectors = nvectors, .featuresize = d}, config);
    EXPECT_TRUE(t.ok()) << t.status();
    return std::make_unique<SsdTable<T, D>>(std::get<2>(*std::move(t)));
  }
};
namespace testing {
using Tables = ::testing::Types<SsdTable<float, 16>, SsdTable<float, 128>, SsdTable<float, kDynamic>,
                                SsdTable<bfloat16, 64>, SsdTable<bfloat16, kDynamic>>;
INSTANTIATE_TYPED_TEST_SUITE_P(SsdStorage, TableContract, Tables);
}  // namespace testing
#else
template <typename T, int64_t D>
struct testing::TableFactory<CachedTable<T, D>> {
  static std::unique_ptr<CachedTable<T, D>> Make(int64_t nvectors, int64_t d, const std::string& name) {
    StorageConfig config{.kind = CEMB_CONTRACT_POLICY == 1 ? StorageKind::kStatic : StorageKind::kDynamic,
                         .slow_tier = TierOptions::Dram(false),
                         .cache = {.eviction = CEMB_CONTRACT_POLICY == 4 ? CacheEviction::kClock : CacheEviction::kFlush,
                                   .lower = CacheSize::Fraction(CEMB_CONTRACT_POLICY == 4 ? 0.05 : 0.2),
                                   .slack = CacheSize::Fraction(CEMB_CONTRACT_POLICY == 4 ? 0.01 : 0.1),
                                   .rows_per_page = 16,
                                   .admit_after = CEMB_CONTRACT_POLICY == 3 ? 2 : 0}};
    auto t = MakeStoredTable<T, D>({.name = name, .nvectors = nvectors, .featuresize = d}, config);
    EXPECT_TRUE(t.ok()) << t.status();
    auto table = std::make_unique<CachedTable<T, D>>(std::get<1>(*std::move(t)));
    if (CEMB_CONTRACT_POLICY == 1) {
      auto filled = table->fill_random(17);
      EXPECT_TRUE(filled.ok());
      EXPECT_GT(*filled, 0);
      EXPECT_EQ(*filled, table->capacity_rows());
    }
    return table;
  }
};
namespace testing {
using Tables = ::testing::Types<CachedTable<float, 16>, CachedTable<float, 128>, CachedTable<float, kDynamic>,
                                CachedTable<bfloat16, 64>, CachedTable<bfloat16, kDynamic>>;
#if CEMB_CONTRACT_POLICY == 1
INSTANTIATE_TYPED_TEST_SUITE_P(StaticPolicy, TableContract, Tables);
#elif CEMB_CONTRACT_POLICY == 2
INSTANTIATE_TYPED_TEST_SUITE_P(DynamicPolicy, TableContract, Tables);
#elif CEMB_CONTRACT_POLICY == 3
INSTANTIATE_TYPED_TEST_SUITE_P(DynamicAdmitAfter2, TableContract, Tables);
#else
INSTANTIATE_TYPED_TEST_SUITE_P(DynamicClock, TableContract, Tables);
#endif
}  // namespace testing
#endif

}  // namespace cemb
