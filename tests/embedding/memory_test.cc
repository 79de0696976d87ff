#include "embedding/memory.h"

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>

#include "absl/status/status.h"
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

// A fresh directory of its own, removed with everything in it.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = TempDir() + "/cemb_memory_test_XXXXXX";
    EXPECT_NE(mkdtemp(pattern.data()), nullptr);
    path_ = pattern;
  }
  ~ScratchDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }
  bool empty() const { return std::filesystem::is_empty(path_); }

 private:
  std::string path_;
};

bool AllZero(const Region& r) {
  for (size_t i = 0; i < r.size(); ++i) {
    if (r.data()[i] != std::byte{0}) return false;
  }
  return true;
}

TEST(Region, PmemFileKeepsItsContentsWhenReopened) {
  ScratchDir dir;
  const std::string path = dir.File("t0.rows");
  {
    TierOptions tier = TierOptions::PmemFile(path, FileMode::kCreate);
    tier.durable = true;
    auto region = Region::Allocate(tier, 1 << 20);
    ASSERT_TRUE(region.ok()) << region.status();
    EXPECT_TRUE(region->persistent());
    EXPECT_EQ(region->kind(), TierKind::kPmem);
    EXPECT_TRUE(AllZero(*region));
    std::memcpy(region->data() + 4096, "rows", 4);
    region->persist(region->data() + 4096, 4);
  }
  EXPECT_TRUE(std::filesystem::exists(path)) << "a named file stays for the next run";
  {
    TierOptions tier = TierOptions::PmemFile(path, FileMode::kReopen);
    tier.remove_on_close = true;
    auto region = Region::Allocate(tier, 1 << 20);
    ASSERT_TRUE(region.ok()) << region.status();
    EXPECT_EQ(std::memcmp(region->data() + 4096, "rows", 4), 0);
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(Region, PmemFileCreateOrReopenMakesTheFileOnceThenKeepsIt) {
  ScratchDir dir;
  const TierOptions tier = TierOptions::PmemFile(dir.File("t1.rows"), FileMode::kCreateOrReopen);
  EXPECT_EQ(TierName(tier), "pmem-file:" + dir.File("t1.rows"));
  {
    auto region = Region::Allocate(tier, 8192);
    ASSERT_TRUE(region.ok()) << region.status();
    EXPECT_TRUE(AllZero(*region));
    region->data()[100] = std::byte{9};
  }
  auto region = Region::Allocate(tier, 8192);
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_EQ(region->data()[100], std::byte{9});
}

TEST(Region, PmemFileModesRefuseTheWrongStartingState) {
  ScratchDir dir;
  const std::string path = dir.File("t2.rows");
  auto missing = Region::Allocate(TierOptions::PmemFile(path, FileMode::kReopen), 4096);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound) << missing.status();
  EXPECT_NE(missing.status().message().find(path), std::string::npos) << missing.status();
  EXPECT_TRUE(dir.empty()) << "kReopen never makes a file";

  ASSERT_TRUE(Region::Allocate(TierOptions::PmemFile(path, FileMode::kCreate), 4096).ok());
  auto again = Region::Allocate(TierOptions::PmemFile(path, FileMode::kCreate), 4096);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists) << again.status();

  auto no_dir = Region::Allocate(TierOptions::PmemFile(dir.File("typo/t2.rows"), FileMode::kCreate), 4096);
  ASSERT_FALSE(no_dir.ok());
  EXPECT_EQ(no_dir.status().code(), absl::StatusCode::kNotFound) << no_dir.status();
}

TEST(Region, PmemFileThatCannotBeSizedIsNotLeftBehind) {
  ScratchDir dir;
  auto region = Region::Allocate(TierOptions::PmemFile(dir.File("huge.rows"), FileMode::kCreate), size_t{1} << 60);
  ASSERT_FALSE(region.ok());
  EXPECT_TRUE(dir.empty()) << "the file kCreate made is removed when the allocation fails";
}

TEST(Region, PmemFileIsWorkingMemoryUnlessDurable) {
  // /tmp is not DAX: persist() would be an msync, so it is skipped.
  auto region = Region::Allocate(TierOptions::Pmem(TempDir()), 1 << 20);
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_EQ(region->kind(), TierKind::kPmem);
  EXPECT_FALSE(region->persistent());
}

TEST(Region, PmemDirectoryMakesAnUnnamedFileThatReadsAsZeroAndLeavesNothing) {
  ScratchDir dir;
  EXPECT_EQ(TierName(TierOptions::Pmem(dir.path())), "pmem:" + dir.path());
  for (int run = 0; run < 2; ++run) {
    auto region = Region::Allocate(TierOptions::Pmem(dir.path()), 1 << 20);
    ASSERT_TRUE(region.ok()) << region.status();
    EXPECT_TRUE(AllZero(*region)) << "run " << run << " sees the rows of an earlier run";
    std::memset(region->data(), 0x5a, region->size());
    region->persist(region->data(), region->size());
    EXPECT_TRUE(dir.empty()) << "the temporary file has no name";
  }
  EXPECT_TRUE(dir.empty());
}

TEST(Region, PmemMissingDirectoryIsNotFoundAndMakesNoFile) {
  // A mistyped directory under an existing parent: once, this silently made
  // a named file there, and the next run mapped its old rows back in.
  ScratchDir dir;
  const std::string typo = dir.File("slow-teir");
  for (int run = 0; run < 2; ++run) {
    auto region = Region::Allocate(TierOptions::Pmem(typo), 1 << 20);
    ASSERT_FALSE(region.ok());
    EXPECT_EQ(region.status().code(), absl::StatusCode::kNotFound) << region.status();
    EXPECT_NE(region.status().message().find(typo), std::string::npos) << region.status();
    EXPECT_FALSE(std::filesystem::exists(typo));
  }
  auto deep = Region::Allocate(TierOptions::Pmem("/nonexistent/dir/table"), 1 << 20);
  ASSERT_FALSE(deep.ok());
  EXPECT_EQ(deep.status().code(), absl::StatusCode::kNotFound) << deep.status();
  EXPECT_NE(deep.status().message().find("/nonexistent/dir/table"), std::string::npos) << deep.status();
}

TEST(Region, PmemOfARegularFileIsFailedPreconditionAndLeavesItAlone) {
  ScratchDir dir;
  const std::string path = dir.File("old.rows");
  ASSERT_TRUE(Region::Allocate(TierOptions::PmemFile(path, FileMode::kCreate), 4096).ok());
  auto region = Region::Allocate(TierOptions::Pmem(path), 1 << 20);
  ASSERT_FALSE(region.ok());
  EXPECT_EQ(region.status().code(), absl::StatusCode::kFailedPrecondition) << region.status();
  EXPECT_NE(region.status().message().find("PmemFile"), std::string::npos) << region.status();
  EXPECT_EQ(std::filesystem::file_size(path), 4096u);
}

TEST(Region, PmemNoSpaceIsAnError) {
  // No file system here holds an exabyte.
  auto region = Region::Allocate(TierOptions::Pmem(TempDir()), size_t{1} << 60);
  ASSERT_FALSE(region.ok());
  EXPECT_NE(region.status().message().find("bytes"), std::string::npos) << region.status();
}

}  // namespace
}  // namespace cemb
