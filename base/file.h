// POSIX file helpers shared by every layer: an owned file descriptor, reads
// and writes that retry on EINTR, an atomic whole-file write, fsync of a
// file or directory, and a read-only memory mapping. Every error is a Status
// that names the file and the call that failed, e.g.
// "/data/train.bin: cannot open: No such file or directory" (NotFound).
//
//   CEMB_ASSIGN_OR_RETURN(base::File f, base::File::OpenForReading(path));
//   CEMB_RETURN_IF_ERROR(base::ReadExactly(f.fd(), path, &header, sizeof header));
//
//   CEMB_ASSIGN_OR_RETURN(base::AtomicFile out, base::AtomicFile::Create(path));
//   CEMB_RETURN_IF_ERROR(out.Append(data, n));   // any number of times
//   CEMB_RETURN_IF_ERROR(out.Commit());          // path now holds all of it, durably
//
// Thread safety: the free functions are thread-safe; File, AtomicFile and
// MappedFile are movable values, one user at a time (MappedFile's bytes may
// be read from any number of threads).
#ifndef CEMB_BASE_FILE_H_
#define CEMB_BASE_FILE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cemb::base {

// "<path>: cannot <what>: <strerror(err)>", with the code that matches err
// (absl::ErrnoToStatusCode, the one errno mapping of the project): NotFound
// (ENOENT: a missing file or directory), PermissionDenied (EACCES, EPERM,
// EROFS), FailedPrecondition (EISDIR, ENOTDIR), AlreadyExists (EEXIST),
// ResourceExhausted (ENOSPC, EDQUOT, EMFILE), Unknown for EIO and the rest.
absl::Status ErrnoStatus(int err, const std::string& path, const char* what);

// An owned file descriptor, closed by the destructor.
class File {
 public:
  File() = default;
  File(File&& other) noexcept;
  File& operator=(File&& other) noexcept;
  ~File();

  // A regular file, opened read-only; size() is its size at opening.
  // A directory is FailedPrecondition ("<path>: cannot open: Is a directory"),
  // and so is a device or FIFO ("<path>: not a regular file").
  [[nodiscard]] static absl::StatusOr<File> OpenForReading(const std::string& path);
  // Created or truncated (mode 0644), write-only. The directory must exist
  // (NotFound otherwise); a path that is a directory is FailedPrecondition.
  [[nodiscard]] static absl::StatusOr<File> Create(const std::string& path);
  // Takes ownership of an open descriptor (opened with flags these helpers
  // do not offer: O_DIRECT, O_TMPFILE). size() is 0.
  static File Adopt(int fd);

  bool is_open() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  uint64_t size() const { return size_; }
  // Gives up ownership: the caller closes the returned descriptor.
  int Release();
  // Closes now, reporting an error of close() (which the destructor cannot).
  [[nodiscard]] absl::Status Close(const std::string& path);

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
};

// Reads up to n bytes at the current offset, or at `offset` (pread); fewer
// only at the end of the file (0 = at the end).
[[nodiscard]] absl::StatusOr<size_t> ReadSome(int fd, const std::string& path, void* buf, size_t n);
[[nodiscard]] absl::StatusOr<size_t> ReadSomeAt(int fd, const std::string& path, void* buf, size_t n,
                                                uint64_t offset);
// Reads exactly n bytes, at the current offset or at `offset`. A file that
// ends first is OutOfRange ("<path>: unexpected end of file after k of n
// bytes") and nothing else is, so a caller can replace it with its own
// "truncated" message.
[[nodiscard]] absl::Status ReadExactly(int fd, const std::string& path, void* buf, size_t n);
[[nodiscard]] absl::Status ReadExactlyAt(int fd, const std::string& path, void* buf, size_t n, uint64_t offset);
// Writes all n bytes at the current offset, or at `offset` (pwrite).
[[nodiscard]] absl::Status WriteAll(int fd, const std::string& path, const void* buf, size_t n);
[[nodiscard]] absl::Status WriteAllAt(int fd, const std::string& path, const void* buf, size_t n,
                                      uint64_t offset);

// fsync of a file or a directory (after a rename, fsync the directory).
[[nodiscard]] absl::Status FsyncPath(const std::string& path);

// The whole content of a regular file.
[[nodiscard]] absl::StatusOr<std::string> ReadWholeFile(const std::string& path);

// A file that appears at `path` whole or not at all: the bytes go to
// "<path>.tmp"; Commit() fsyncs and closes it, renames it onto `path` and
// fsyncs the directory. A crash leaves either the old `path` or the new one.
// NOTE: an AtomicFile destroyed without a successful Commit() removes the
// .tmp and leaves `path` as it was.
class AtomicFile {
 public:
  AtomicFile(AtomicFile&& other) noexcept;
  AtomicFile& operator=(AtomicFile&& other) noexcept;
  ~AtomicFile();

  // Creates (or truncates) "<path>.tmp", write-only.
  [[nodiscard]] static absl::StatusOr<AtomicFile> Create(const std::string& path);

  const std::string& path() const { return path_; }
  const std::string& tmp_path() const { return tmp_path_; }
  // The .tmp's descriptor, for calls these helpers do not offer
  // (copy_file_range); -1 after Commit().
  int fd() const { return file_.fd(); }

  // WriteAll / WriteAllAt on the .tmp; errors name the .tmp.
  [[nodiscard]] absl::Status Append(const void* data, size_t n);
  [[nodiscard]] absl::Status WriteAt(const void* data, size_t n, uint64_t offset);

  // kSynced: the file reaches the disk before the rename and the rename
  // after it, so a crash leaves the old or the whole new file. kUnsynced:
  // only close and rename, for large files that can be made again and check
  // themselves when opened (datasets), which need not wait for gigabytes of
  // write-back.
  enum class Durability { kSynced, kUnsynced };

  // [fsync], close, rename onto path(), [fsync of path()'s directory]. On an
  // error before the rename the .tmp is removed and path() is untouched.
  // REQUIRES: called at most once.
  [[nodiscard]] absl::Status Commit(Durability durability = Durability::kSynced);

 private:
  AtomicFile() = default;
  void Abandon();  // closes and removes the .tmp, if there is one

  File file_;
  std::string path_, tmp_path_;
  bool pending_ = false;  // the .tmp exists and is ours
};

// Writes `contents` to `path` through an AtomicFile: for small files (an
// .npy array, a LATEST pointer).
[[nodiscard]] absl::Status WriteFileAtomically(const std::string& path, std::string_view contents);

// A read-only, shared mapping of a whole regular file. An empty file maps
// to data() == nullptr, size() == 0.
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

}  // namespace cemb::base

#endif  // CEMB_BASE_FILE_H_
