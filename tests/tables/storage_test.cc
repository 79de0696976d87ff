#include "tables/storage.h"

#include <cstdlib>
#include <filesystem>
#include <string>

#include "gtest/gtest.h"

namespace cemb {
namespace {

TEST(Storage, ParsesEveryKindAndRejectsOthers) {
  for (auto k : {StorageKind::kDram, StorageKind::kSimple, StorageKind::kStatic, StorageKind::kDynamic,
                 StorageKind::kSsd}) {
    auto parsed = ParseStorageKind(StorageKindName(k));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, k);
  }
  auto bad = ParseStorageKind("lru");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "unknown table storage 'lru' (expected one of dram, simple, static, dynamic, ssd)");
  auto policy = ParseCachePolicy("static");
  ASSERT_TRUE(policy.ok());
  EXPECT_EQ(*policy, CachePolicy::kStatic);
  EXPECT_FALSE(ParseCachePolicy("Dynamic").ok());
}

TEST(Storage, MakesTheTableTheConfigNames) {
  const char* dir = std::getenv("TMPDIR");
  const TierOptions slow = TierOptions::Pmem(dir != nullptr ? dir : "/tmp");
  const TableOptions opts{.name = "t", .nvectors = 100};
  auto dram = MakeStoredTable<float, 16>(opts, {.kind = StorageKind::kDram, .slow_tier = slow});
  ASSERT_TRUE(dram.ok());
  EXPECT_EQ(std::get<0>(*dram).region().kind(), TierKind::kDram);
  auto simple = MakeStoredTable<float, 16>(opts, {.kind = StorageKind::kSimple, .slow_tier = slow});
  ASSERT_TRUE(simple.ok()) << simple.status();
  EXPECT_EQ(std::get<0>(*simple).region().kind(), TierKind::kPmem);
  auto st = MakeStoredTable<float, 16>(opts, {.kind = StorageKind::kStatic, .slow_tier = slow});
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(std::get<1>(*st).policy(), CachePolicy::kStatic);
  EXPECT_EQ(std::get<1>(*st).base().region().kind(), TierKind::kPmem);
  auto dy = MakeStoredTable<float, 16>(
      opts, {.kind = StorageKind::kDynamic, .slow_tier = slow, .cache = {.lower = CacheSize::Fraction(0.5)}});
  ASSERT_TRUE(dy.ok());
  EXPECT_EQ(std::get<1>(*dy).policy(), CachePolicy::kDynamic);
  EXPECT_EQ(std::get<1>(*dy).cachelower(), 100 * 64 / 2);
  StorageConfig ssd_config{.kind = StorageKind::kSsd};
  ssd_config.ssd.capacity_bytes = 10 * 64;
  ssd_config.ssd.file.directory = slow.path;
  auto ssd = MakeStoredTable<float, 16>(opts, ssd_config);
  ASSERT_TRUE(ssd.ok()) << ssd.status();
  EXPECT_EQ(std::get<2>(*ssd).capacity_rows(), 10);
  EXPECT_EQ(std::get<2>(*ssd).nvectors(), 100);
}

TEST(Storage, ASlowTierDirectoryThatDoesNotExistIsNotFoundForEveryKind) {
  const char* tmp = std::getenv("TMPDIR");
  const std::string typo = std::string(tmp != nullptr ? tmp : "/tmp") + "/cemb-no-such-slow-tier-dir";
  const TableOptions opts{.name = "t", .nvectors = 100};
  for (auto kind : {StorageKind::kSimple, StorageKind::kStatic, StorageKind::kDynamic}) {
    auto t = MakeStoredTable<float, 16>(opts, {.kind = kind, .slow_tier = TierOptions::Pmem(typo)});
    ASSERT_FALSE(t.ok()) << StorageKindName(kind);
    EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound) << t.status();
    EXPECT_NE(t.status().message().find(typo), std::string::npos) << t.status();
    EXPECT_FALSE(std::filesystem::exists(typo));
  }
}

}  // namespace
}  // namespace cemb
