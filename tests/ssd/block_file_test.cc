#include "ssd/block_file.h"

#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "gtest/gtest.h"
#include "tests/ssd/test_util.h"

namespace cemb {
namespace {

TEST(BlockLayout, PacksRowsWithoutStraddlingBlocks) {
  BlockLayout l = BlockLayout::ForRows(100, 256);  // D=64 float
  EXPECT_EQ(l.rows_per_block, 16);
  EXPECT_EQ(l.block_bytes, 4096);
  EXPECT_EQ(l.nblocks, 7);  // 6 full blocks + 4 rows
  EXPECT_EQ(l.rows_in(6), 4);
  EXPECT_EQ(l.block_of(17), 1);
  EXPECT_EQ(l.offset_in_block(17), 256);

  l = BlockLayout::ForRows(100, 100);  // 40 rows, 96 bytes of padding
  EXPECT_EQ(l.rows_per_block, 40);
  EXPECT_EQ(l.offset_in_block(79), 39 * 100);
  EXPECT_EQ(l.nblocks, 3);

  l = BlockLayout::ForRows(10, 5000);  // a row spans two whole blocks
  EXPECT_EQ(l.rows_per_block, 1);
  EXPECT_EQ(l.block_bytes, 8192);
  EXPECT_EQ(l.file_offset(3), 3 * 8192u);
  EXPECT_EQ(l.file_bytes(), 10 * 8192u);
}

TEST(BlockFile, ReservesTheWholeSizeUpFront) {
  const uint64_t bytes = 64 << 20;
  auto f = BlockFile::Create({.directory = testing::DiskDir(), .bytes = bytes});
  ASSERT_TRUE(f.ok()) << f.status();
  struct stat st {};
  ASSERT_EQ(::fstat(f->fd(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), bytes);
  EXPECT_GE(static_cast<uint64_t>(st.st_blocks) * 512, bytes);  // allocated, not sparse
  EXPECT_NE(f->name().find("(unnamed temporary file)"), std::string::npos);
}

TEST(BlockFile, MoreBytesThanAreFreeIsAnErrorNamingDirectoryAndBytes) {
  struct statvfs fs {};
  ASSERT_EQ(::statvfs(testing::DiskDir().c_str(), &fs), 0);
  const uint64_t bytes = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize + (uint64_t{1} << 40);
  auto f = BlockFile::Create({.directory = testing::DiskDir(), .bytes = bytes});
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(f.status().message().find(testing::DiskDir()), std::string::npos) << f.status();
  EXPECT_NE(f.status().message().find(std::to_string(bytes)), std::string::npos) << f.status();
}

TEST(BlockFile, NamedPathIsCreatedAndKept) {
  const std::string path = testing::DiskDir() + "/block_file_test_" + std::to_string(::getpid());
  {
    auto f = BlockFile::Create({.path = path, .bytes = 1 << 20});
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ(f->name(), path);
  }
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 1 << 20);
  ::unlink(path.c_str());
}

TEST(BlockFile, NeedsADirectoryOrAPathNotBoth) {
  EXPECT_FALSE(BlockFile::Create({.bytes = 4096}).ok());
  EXPECT_FALSE(BlockFile::Create({.directory = "/tmp", .path = "/tmp/x", .bytes = 4096}).ok());
  auto missing = BlockFile::Create({.directory = "/no/such/dir", .bytes = 4096});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/no/such/dir"), std::string::npos) << missing.status();
}

}  // namespace
}  // namespace cemb
