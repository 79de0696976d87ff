#include "base/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cemb::base {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

class FileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "/cemb_file_test_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  static void Put(const std::string& path, const std::string& content) {
    std::ofstream out(path, std::ios::binary);
    out << content;
    ASSERT_TRUE(out.good()) << path;
  }
  static std::string Get(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::string dir_;
};

TEST_F(FileTest, ErrnoStatusNamesThePathAndTheCallAndMapsTheCode) {
  const absl::Status s = ErrnoStatus(ENOENT, "/x/y", "open");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "/x/y: cannot open: No such file or directory");
  EXPECT_EQ(ErrnoStatus(EACCES, "p", "create").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ErrnoStatus(EPERM, "p", "open").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ErrnoStatus(EISDIR, "p", "open").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ErrnoStatus(ENOTDIR, "p", "open").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ErrnoStatus(EEXIST, "p", "create").code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(ErrnoStatus(ENOSPC, "p", "write").code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrnoStatus(EIO, "p", "read").code(), absl::StatusCode::kUnknown);
}

TEST_F(FileTest, OpenForReadingAMissingFileIsNotFoundNamingThePath) {
  const std::string path = Path("missing.bin");
  absl::StatusOr<File> f = File::OpenForReading(path);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(f.status().message(), HasSubstr(path + ": cannot open"));
}

TEST_F(FileTest, OpenForReadingInAMissingDirectoryIsNotFoundNamingThePath) {
  const std::string path = Path("no-such-dir/f");
  absl::StatusOr<File> f = File::OpenForReading(path);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(f.status().message(), path + ": cannot open: No such file or directory");
}

TEST_F(FileTest, OpenForReadingADirectoryIsFailedPrecondition) {
  absl::StatusOr<File> f = File::OpenForReading(dir_);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(f.status().message(), dir_ + ": cannot open: Is a directory");
  EXPECT_EQ(ReadWholeFile(dir_).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(MappedFile::Open(dir_).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(FileTest, CreateOnADirectoryIsFailedPrecondition) {
  absl::StatusOr<File> f = File::Create(dir_);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(f.status().message(), HasSubstr(dir_ + ": cannot create"));
}

TEST_F(FileTest, AnUnreadableFileIsPermissionDenied) {
  // root reads whatever the mode says; the mapping itself is tested above.
  if (::geteuid() == 0) GTEST_SKIP() << "running as root: permissions are not enforced";
  const std::string path = Path("secret");
  Put(path, "x");
  ASSERT_EQ(::chmod(path.c_str(), 0), 0);
  absl::StatusOr<File> f = File::OpenForReading(path);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(f.status().message(), HasSubstr(path + ": cannot open"));
}

TEST_F(FileTest, CreateInAMissingDirectoryNamesThePath) {
  const std::string path = Path("no/such/dir/f");
  absl::StatusOr<File> f = File::Create(path);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(f.status().message(), HasSubstr(path + ": cannot create"));
}

TEST_F(FileTest, WriteAllThenReadSomeAndReadExactlyRoundTrip) {
  const std::string path = Path("a.bin");
  {
    absl::StatusOr<File> f = File::Create(path);
    ASSERT_TRUE(f.ok()) << f.status();
    ASSERT_TRUE(WriteAll(f->fd(), path, "hello world", 11).ok());
    ASSERT_TRUE(WriteAllAt(f->fd(), path, "J", 1, 0).ok());  // pwrite: offset unchanged
    ASSERT_TRUE(WriteAll(f->fd(), path, "!", 1).ok());
    ASSERT_TRUE(f->Close(path).ok());
    EXPECT_FALSE(f->is_open());
  }
  absl::StatusOr<File> f = File::OpenForReading(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->size(), 12u);
  char buf[8] = {};
  ASSERT_TRUE(ReadExactly(f->fd(), path, buf, 5).ok());
  EXPECT_EQ(std::string(buf, 5), "Jello");
  absl::StatusOr<size_t> n = ReadSome(f->fd(), path, buf, sizeof buf);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(std::string(buf, *n), " world!");  // fewer than asked: the end of the file
  n = ReadSome(f->fd(), path, buf, sizeof buf);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0u);
}

TEST_F(FileTest, ReadExactlyAtAPrematureEndIsOutOfRange) {
  const std::string path = Path("short.bin");
  Put(path, "abc");
  absl::StatusOr<File> f = File::OpenForReading(path);
  ASSERT_TRUE(f.ok()) << f.status();
  char buf[8];
  const absl::Status s = ReadExactly(f->fd(), path, buf, sizeof buf);
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(s.message(), path + ": unexpected end of file after 3 of 8 bytes");
}

TEST_F(FileTest, AReadErrorIsNotOutOfRange) {
  const std::string path = Path("w.bin");
  absl::StatusOr<File> f = File::Create(path);  // write-only: read() fails with EBADF
  ASSERT_TRUE(f.ok()) << f.status();
  char buf[4];
  const absl::Status s = ReadExactly(f->fd(), path, buf, sizeof buf);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(s.message(), HasSubstr(path + ": cannot read"));
}

TEST_F(FileTest, AtomicWriteReplacesTheContentAndLeavesNoTmp) {
  const std::string path = Path("LATEST");
  Put(path, "old content, longer than the new one\n");
  ASSERT_TRUE(WriteFileAtomically(path, "new\n").ok());
  EXPECT_EQ(Get(path), "new\n");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  ASSERT_TRUE(WriteFileAtomically(Path("fresh"), "").ok());  // a new, empty file
  EXPECT_TRUE(fs::exists(Path("fresh")));
  EXPECT_EQ(fs::file_size(Path("fresh")), 0u);
  EXPECT_FALSE(fs::exists(Path("fresh.tmp")));
}

TEST_F(FileTest, AtomicWriteIntoAMissingDirectoryNamesTheTmp) {
  const std::string path = Path("nope/x.npy");
  const absl::Status s = WriteFileAtomically(path, "data");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr(path + ".tmp: cannot create"));
}

TEST_F(FileTest, AtomicFileIsInvisibleUntilCommitAndWritesAtOffsets) {
  const std::string path = Path("rows");
  Put(path, "previous");
  {
    absl::StatusOr<AtomicFile> f = AtomicFile::Create(path);
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ(f->tmp_path(), path + ".tmp");
    ASSERT_TRUE(f->Append("----payload", 11).ok());
    ASSERT_TRUE(f->WriteAt("HEAD", 4, 0).ok());  // a header written last
    EXPECT_EQ(Get(path), "previous");
    EXPECT_TRUE(fs::exists(path + ".tmp"));
    ASSERT_TRUE(f->Commit().ok());
    EXPECT_EQ(f->Commit().code(), absl::StatusCode::kFailedPrecondition);
  }
  EXPECT_EQ(Get(path), "HEADpayload");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST_F(FileTest, AtomicFileDroppedWithoutCommitRemovesTheTmpAndKeepsTheOldFile) {
  const std::string path = Path("rows");
  Put(path, "previous");
  {
    absl::StatusOr<AtomicFile> f = AtomicFile::Create(path);
    ASSERT_TRUE(f.ok()) << f.status();
    ASSERT_TRUE(f->Append("half", 4).ok());
    AtomicFile moved = *std::move(f);  // ownership of the .tmp moves with it
  }
  EXPECT_EQ(Get(path), "previous");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST_F(FileTest, FsyncPathTakesFilesAndDirectoriesAndNamesAMissingPath) {
  Put(Path("f"), "x");
  EXPECT_TRUE(FsyncPath(Path("f")).ok());
  EXPECT_TRUE(FsyncPath(dir_).ok());
  const absl::Status s = FsyncPath(Path("gone"));
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr(Path("gone") + ": cannot open for fsync"));
}

TEST_F(FileTest, ReadWholeFileReadsEveryByteOrNamesTheMissingFile) {
  std::string content(100'003, '\0');
  for (size_t i = 0; i < content.size(); ++i) content[i] = static_cast<char>(i * 7);
  Put(Path("big"), content);
  absl::StatusOr<std::string> got = ReadWholeFile(Path("big"));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, content);
  Put(Path("empty"), "");
  got = ReadWholeFile(Path("empty"));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "");
  got = ReadWholeFile(Path("missing"));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(got.status().message(), HasSubstr(Path("missing") + ": cannot open"));
}

TEST_F(FileTest, MappedFileMapsTheBytes) {
  Put(Path("m"), "mapped bytes");
  absl::StatusOr<MappedFile> m = MappedFile::Open(Path("m"));
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->size(), 12u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(m->data()), m->size()), "mapped bytes");
  MappedFile moved = *std::move(m);
  EXPECT_EQ(moved.size(), 12u);
  EXPECT_EQ(m->data(), nullptr);
}

TEST_F(FileTest, MappedFileOfAnEmptyFileIsEmpty) {
  Put(Path("empty"), "");
  absl::StatusOr<MappedFile> m = MappedFile::Open(Path("empty"));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->size(), 0u);
  EXPECT_EQ(m->data(), nullptr);
}

TEST_F(FileTest, MappedFileOfAMissingFileIsNotFoundNamingThePath) {
  absl::StatusOr<MappedFile> m = MappedFile::Open(Path("missing"));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(m.status().message(), HasSubstr(Path("missing") + ": cannot open"));
}

}  // namespace
}  // namespace cemb::base
