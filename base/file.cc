#include "base/file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace cemb::base {

absl::Status ErrnoStatus(int err, const std::string& path, const char* what) {
  return absl::Status(absl::ErrnoToStatusCode(err),
                      absl::StrCat(path, ": cannot ", what, ": ", std::strerror(err)));
}

// ---------------------------------------------------------------- File

File::File(File&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), size_(std::exchange(other.size_, 0)) {}

File& File::operator=(File&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

File::~File() {
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<File> File::OpenForReading(const std::string& path) {
  File f;
  f.fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd_ < 0) return ErrnoStatus(errno, path, "open");
  struct stat st;
  if (::fstat(f.fd_, &st) != 0) return ErrnoStatus(errno, path, "stat");
  if (S_ISDIR(st.st_mode)) return ErrnoStatus(EISDIR, path, "open");
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": not a regular file"));
  }
  f.size_ = static_cast<uint64_t>(st.st_size);
  return f;
}

absl::StatusOr<File> File::Create(const std::string& path) {
  File f;
  f.fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (f.fd_ < 0) return ErrnoStatus(errno, path, "create");
  return f;
}

File File::Adopt(int fd) {
  File f;
  f.fd_ = fd;
  return f;
}

int File::Release() {
  size_ = 0;
  return std::exchange(fd_, -1);
}

absl::Status File::Close(const std::string& path) {
  if (fd_ < 0) return absl::OkStatus();
  if (::close(std::exchange(fd_, -1)) != 0) return ErrnoStatus(errno, path, "close");
  return absl::OkStatus();
}

// ---------------------------------------------------------------- reads and writes

namespace {

// read() at the current offset, or pread() at `offset` when it is >= 0,
// until n bytes are read or the file ends.
absl::StatusOr<size_t> ReadLoop(int fd, const std::string& path, void* buf, size_t n, int64_t offset) {
  size_t done = 0;
  auto* p = static_cast<char*>(buf);
  while (done < n) {
    const ssize_t r = offset < 0 ? ::read(fd, p + done, n - done)
                                 : ::pread(fd, p + done, n - done, static_cast<off_t>(offset) + static_cast<off_t>(done));
    if (r < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, path, "read");
    }
    if (r == 0) break;
    done += static_cast<size_t>(r);
  }
  return done;
}

absl::Status Exactly(const std::string& path, absl::StatusOr<size_t> got, size_t n) {
  if (!got.ok()) return got.status();
  if (*got < n) {
    return absl::OutOfRangeError(absl::StrCat(path, ": unexpected end of file after ", *got, " of ", n, " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<size_t> ReadSome(int fd, const std::string& path, void* buf, size_t n) {
  return ReadLoop(fd, path, buf, n, -1);
}

absl::StatusOr<size_t> ReadSomeAt(int fd, const std::string& path, void* buf, size_t n, uint64_t offset) {
  return ReadLoop(fd, path, buf, n, static_cast<int64_t>(offset));
}

absl::Status ReadExactly(int fd, const std::string& path, void* buf, size_t n) {
  return Exactly(path, ReadSome(fd, path, buf, n), n);
}

absl::Status ReadExactlyAt(int fd, const std::string& path, void* buf, size_t n, uint64_t offset) {
  return Exactly(path, ReadSomeAt(fd, path, buf, n, offset), n);
}

namespace {

// write() at the current offset, or pwrite() at `offset` when it is >= 0,
// until all n bytes are written.
absl::Status WriteLoop(int fd, const std::string& path, const void* buf, size_t n, int64_t offset) {
  const auto* p = static_cast<const char*>(buf);
  while (n > 0) {
    const ssize_t w = offset < 0 ? ::write(fd, p, n) : ::pwrite(fd, p, n, static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, path, "write");
    }
    p += w;
    if (offset >= 0) offset += w;
    n -= static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteAll(int fd, const std::string& path, const void* buf, size_t n) {
  return WriteLoop(fd, path, buf, n, -1);
}

absl::Status WriteAllAt(int fd, const std::string& path, const void* buf, size_t n,
                        uint64_t offset) {
  return WriteLoop(fd, path, buf, n, static_cast<int64_t>(offset));
}

absl::Status FsyncPath(const std::string& path) {
  // O_RDONLY opens directories as well as files; fsync needs no write access.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, path, "open for fsync");
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return ErrnoStatus(err, path, "fsync");
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  CEMB_ASSIGN_OR_RETURN(const File f, File::OpenForReading(path));
  // The size at opening is a hint: read until the end, whatever it is now.
  std::string contents(f.size() + 1, '\0');
  size_t have = 0;
  while (true) {
    if (have == contents.size()) contents.resize(2 * contents.size());
    CEMB_ASSIGN_OR_RETURN(const size_t n, ReadSome(f.fd(), path, contents.data() + have, contents.size() - have));
    if (n == 0) break;
    have += n;
  }
  contents.resize(have);
  return contents;
}

// ---------------------------------------------------------------- AtomicFile

AtomicFile::AtomicFile(AtomicFile&& other) noexcept
    : file_(std::move(other.file_)),
      path_(std::move(other.path_)),
      tmp_path_(std::move(other.tmp_path_)),
      pending_(std::exchange(other.pending_, false)) {}

AtomicFile& AtomicFile::operator=(AtomicFile&& other) noexcept {
  if (this != &other) {
    Abandon();
    file_ = std::move(other.file_);
    path_ = std::move(other.path_);
    tmp_path_ = std::move(other.tmp_path_);
    pending_ = std::exchange(other.pending_, false);
  }
  return *this;
}

AtomicFile::~AtomicFile() { Abandon(); }

void AtomicFile::Abandon() {
  (void)file_.Close(tmp_path_);
  if (pending_) ::unlink(tmp_path_.c_str());
  pending_ = false;
}

absl::StatusOr<AtomicFile> AtomicFile::Create(const std::string& path) {
  AtomicFile a;
  a.path_ = path;
  a.tmp_path_ = path + ".tmp";
  CEMB_ASSIGN_OR_RETURN(a.file_, File::Create(a.tmp_path_));
  a.pending_ = true;
  return a;
}

absl::Status AtomicFile::Append(const void* data, size_t n) {
  return WriteAll(file_.fd(), tmp_path_, data, n);
}

absl::Status AtomicFile::WriteAt(const void* data, size_t n, uint64_t offset) {
  return WriteAllAt(file_.fd(), tmp_path_, data, n, offset);
}

absl::Status AtomicFile::Commit(Durability durability) {
  if (!pending_) {
    return absl::FailedPreconditionError(absl::StrCat(path_, ": committed twice or after a failure"));
  }
  const bool synced = durability == Durability::kSynced;
  absl::Status s;
  if (synced && ::fsync(file_.fd()) != 0) s = ErrnoStatus(errno, tmp_path_, "fsync");
  if (s.ok()) s = file_.Close(tmp_path_);
  if (s.ok() && std::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    s = ErrnoStatus(errno, path_, "rename the finished file to");
  }
  if (!s.ok()) {
    Abandon();
    return s;
  }
  pending_ = false;
  if (!synced) return absl::OkStatus();
  std::string dir = std::filesystem::path(path_).parent_path().string();
  return FsyncPath(dir.empty() ? "." : dir);
}

absl::Status WriteFileAtomically(const std::string& path, std::string_view contents) {
  CEMB_ASSIGN_OR_RETURN(AtomicFile f, AtomicFile::Create(path));
  CEMB_RETURN_IF_ERROR(f.Append(contents.data(), contents.size()));
  return f.Commit();
}

// ---------------------------------------------------------------- MappedFile

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(const_cast<unsigned char*>(data_), size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<unsigned char*>(data_), size_);
}

absl::StatusOr<MappedFile> MappedFile::Open(const std::string& path) {
  CEMB_ASSIGN_OR_RETURN(const File file, File::OpenForReading(path));
  MappedFile m;
  if (file.size() == 0) return m;  // nothing to map; data() stays null
  void* p = ::mmap(nullptr, file.size(), PROT_READ, MAP_SHARED, file.fd(), 0);
  if (p == MAP_FAILED) return ErrnoStatus(errno, path, "mmap");
  m.data_ = static_cast<const unsigned char*>(p);
  m.size_ = file.size();
  return m;
}

}  // namespace cemb::base
