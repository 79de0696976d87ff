// File helpers for data/ (not API): an owned file descriptor, reads and
// writes that retry on EINTR and name the file in their errors, and a
// read-only memory mapping.
#ifndef CEMB_DATA_INTERNAL_FILE_H_
#define CEMB_DATA_INTERNAL_FILE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cemb::data::internal {

// The status for a failed system call on `path`, from errno.
absl::Status ErrnoStatus(int err, const std::string& path, const char* what);

// An owned file descriptor.
class File {
 public:
  File() = default;
  File(File&& other) noexcept : fd_(other.fd_), size_(other.size_) { other.fd_ = -1; }
  File& operator=(File&& other) noexcept;
  ~File();

  // A regular file, opened read-only; size() is its size at opening.
  [[nodiscard]] static absl::StatusOr<File> OpenForReading(const std::string& path);
  // Created or truncated, write-only.
  [[nodiscard]] static absl::StatusOr<File> Create(const std::string& path);

  int fd() const { return fd_; }
  uint64_t size() const { return size_; }
  int Release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  [[nodiscard]] absl::Status Close(const std::string& path);

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
};

// Reads up to n bytes (fewer only at the end of the file; 0 = end).
[[nodiscard]] absl::StatusOr<size_t> ReadSome(int fd, const std::string& path, void* buf, size_t n);
// Writes all n bytes at the current offset, or at `offset` (pwrite).
[[nodiscard]] absl::Status WriteAll(int fd, const std::string& path, const void* buf, size_t n);
[[nodiscard]] absl::Status WriteAllAt(int fd, const std::string& path, const void* buf, size_t n,
                                      uint64_t offset);

// A read-only, shared mapping of a whole file.
class MappedFile {
 public:
  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  ~MappedFile();
  [[nodiscard]] static absl::StatusOr<MappedFile> Open(const std::string& path);

  const unsigned char* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  const unsigned char* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace cemb::data::internal

#endif  // CEMB_DATA_INTERNAL_FILE_H_
