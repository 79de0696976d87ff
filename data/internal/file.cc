#include "data/internal/file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace cemb::data::internal {

absl::Status ErrnoStatus(int err, const std::string& path, const char* what) {
  std::string message = absl::StrCat(path, ": cannot ", what, ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    case ENOSPC:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::UnknownError(message);
  }
}

File& File::operator=(File&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = other.size_;
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
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
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

absl::Status File::Close(const std::string& path) {
  if (fd_ < 0) return absl::OkStatus();
  const int rc = ::close(std::exchange(fd_, -1));
  if (rc != 0) return ErrnoStatus(errno, path, "close");
  return absl::OkStatus();
}

absl::StatusOr<size_t> ReadSome(int fd, const std::string& path, void* buf, size_t n) {
  size_t done = 0;
  auto* p = static_cast<char*>(buf);
  while (done < n) {
    const ssize_t r = ::read(fd, p + done, n - done);
    if (r < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, path, "read");
    }
    if (r == 0) break;
    done += static_cast<size_t>(r);
  }
  return done;
}

absl::Status WriteAll(int fd, const std::string& path, const void* buf, size_t n) {
  const auto* p = static_cast<const char*>(buf);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, path, "write");
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

absl::Status WriteAllAt(int fd, const std::string& path, const void* buf, size_t n,
                        uint64_t offset) {
  const auto* p = static_cast<const char*>(buf);
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, path, "write");
    }
    p += w;
    offset += static_cast<uint64_t>(w);
    n -= static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

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
  auto file = File::OpenForReading(path);
  if (!file.ok()) return file.status();
  MappedFile m;
  m.size_ = file->size();
  if (m.size_ == 0) return m;  // nothing to map; data() stays null
  void* p = ::mmap(nullptr, m.size_, PROT_READ, MAP_SHARED, file->fd(), 0);
  if (p == MAP_FAILED) {
    m.size_ = 0;
    return ErrnoStatus(errno, path, "mmap");
  }
  m.data_ = static_cast<const unsigned char*>(p);
  return m;
}

}  // namespace cemb::data::internal
