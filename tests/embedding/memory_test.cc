#include "embedding/memory.h"

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>

#include "gtest/gtest.h"

namespace cemb {
namespace {

std::string TempDir() {
  const char* dir = std::getenv("TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

TEST(Region, DramIsZeroedAndAligned) {
  for (bool huge : {true, false}) {
    auto region = Region::Allocate(TierOptions::Dram(huge), 3 << 20);
    ASSERT_TRUE(region.ok()) << region.status();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(region->data()) % (huge ? (2 << 20) : 64), 0u);
    EXPECT_EQ(region->size(), size_t{3} << 20);
    EXPECT_FALSE(region->persistent());
    EXPECT_EQ(region->data()[0], std::byte{0});
    EXPECT_EQ(region->data()[region->size() - 1], std::byte{0});
    std::memset(region->data(), 0xab, region->size());
    region->persist(region->data(), 64);  // a no-op on DRAM
  }
}

TEST(Region, ZeroSizeIsAnError) {
  EXPECT_FALSE(Region::Allocate(TierOptions::Dram(), 0).ok());
}

TEST(Region, PmemFileHoldsDataAcrossMappings) {
  const std::string path = TempDir() + "/cemb_region_" + std::to_string(getpid());
  {
    TierOptions tier = TierOptions::Pmem(path);
    tier.durable = true;
    auto region = Region::Allocate(tier, 1 << 20);
    ASSERT_TRUE(region.ok()) << region.status();
    EXPECT_TRUE(region->persistent());
    EXPECT_EQ(region->kind(), TierKind::kPmem);
    std::memcpy(region->data() + 4096, "rows", 4);
    region->persist(region->data() + 4096, 4);
  }
  {
    TierOptions tier = TierOptions::Pmem(path);
    tier.remove_on_close = true;
    auto region = Region::Allocate(tier, 1 << 20);
    ASSERT_TRUE(region.ok()) << region.status();
    EXPECT_EQ(std::memcmp(region->data() + 4096, "rows", 4), 0);
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(Region, PmemFileIsWorkingMemoryUnlessDurable) {
  // /tmp is not DAX: persist() would be an msync, so it is skipped.
  auto region = Region::Allocate(TierOptions::Pmem(TempDir()), 1 << 20);
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_EQ(region->kind(), TierKind::kPmem);
  EXPECT_FALSE(region->persistent());
}

TEST(Region, PmemDirectoryMakesAnUnnamedFile) {
  auto region = Region::Allocate(TierOptions::Pmem(TempDir()), 1 << 20);
  ASSERT_TRUE(region.ok()) << region.status();
  region->data()[123] = std::byte{7};
  region->persist(region->data() + 123, 1);
}

TEST(Region, PmemMissingDirectoryIsAClearError) {
  auto region = Region::Allocate(TierOptions::Pmem("/nonexistent/dir/table"), 1 << 20);
  ASSERT_FALSE(region.ok());
  EXPECT_NE(region.status().message().find("/nonexistent/dir/table"), std::string::npos)
      << region.status();
}

TEST(Region, PmemNoSpaceIsAnError) {
  // No file system here holds an exabyte.
  auto region = Region::Allocate(TierOptions::Pmem(TempDir()), size_t{1} << 60);
  ASSERT_FALSE(region.ok());
  EXPECT_NE(region.status().message().find("bytes"), std::string::npos) << region.status();
}

}  // namespace
}  // namespace cemb
