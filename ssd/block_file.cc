#include "ssd/block_file.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace cemb {

BlockLayout BlockLayout::ForRows(int64_t nvectors, int64_t row_bytes) {
  BlockLayout l;
  l.nvectors = nvectors;
  l.row_bytes = row_bytes;
  if (row_bytes <= kBlockBytes) {
    l.rows_per_block = kBlockBytes / row_bytes;
    l.block_bytes = kBlockBytes;
  } else {
    l.rows_per_block = 1;
    l.block_bytes = (row_bytes + kBlockBytes - 1) / kBlockBytes * kBlockBytes;
  }
  l.nblocks = (nvectors + l.rows_per_block - 1) / l.rows_per_block;
  return l;
}

namespace {

std::string Gib(uint64_t bytes) { return absl::StrFormat("%.2f GiB", static_cast<double>(bytes) / (1 << 30)); }

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// Opens the file; -errno on failure. `name` is set for messages.
int OpenFile(const BlockFileOptions& o, const std::string& dir, bool direct, std::string* name) {
  const int flags = O_RDWR | O_CLOEXEC | (direct ? O_DIRECT : 0);
  if (direct && o.simulate_no_direct) return -EINVAL;
  if (!o.path.empty()) {
    *name = o.path;
    const int fd = ::open(o.path.c_str(), flags | O_CREAT | O_TRUNC, 0644);
    return fd >= 0 ? fd : -errno;
  }
  *name = dir + "/(unnamed temporary file)";
  int fd = ::open(dir.c_str(), flags | O_TMPFILE, 0600);
  if (fd >= 0) return fd;
  if (errno != EOPNOTSUPP && errno != EISDIR) return -errno;
  // No O_TMPFILE on this file system: a named file, unlinked at once.
  std::string tmpl = dir + "/cemb-ssd-XXXXXX";
  fd = ::mkostemp(tmpl.data(), flags & ~O_RDWR);
  if (fd < 0) return -errno;
  ::unlink(tmpl.c_str());
  return fd;
}

}  // namespace

absl::StatusOr<BlockFile> BlockFile::Create(const BlockFileOptions& o) {
  if (o.directory.empty() == o.path.empty()) {
    return absl::InvalidArgumentError("an ssd block file needs a directory or a path, and not both");
  }
  if (o.bytes == 0) return absl::InvalidArgumentError("an ssd block file of 0 bytes");
  const std::string dir = o.path.empty() ? o.directory : DirectoryOf(o.path);
  struct statvfs fs {};
  if (::statvfs(dir.c_str(), &fs) != 0) return base::ErrnoStatus(errno, dir, "statvfs");
  // Checked before fallocate, which on some file systems fills the disk
  // before it gives up.
  const uint64_t available = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
  if (o.bytes > available) {
    return absl::ResourceExhaustedError(absl::StrCat(dir, ": cannot reserve ", o.bytes, " bytes (", Gib(o.bytes),
                                                     ") for an ssd table's rows: ", available, " bytes (",
                                                     Gib(available), ") are free"));
  }

  BlockFile f;
  f.directory_ = dir;
  f.size_ = o.bytes;
  bool direct = o.direct == DirectIo::kAuto;
  int fd = OpenFile(o, dir, direct, &f.name_);
  if (fd == -EINVAL && direct) {
    std::fprintf(stderr,
                 "cemb: warning: %s does not support O_DIRECT; ssd table rows there use buffered pread/pwrite "
                 "(the page cache keeps copies of them)\n",
                 dir.c_str());
    direct = false;
    fd = OpenFile(o, dir, direct, &f.name_);
  }
  if (fd < 0) return base::ErrnoStatus(-fd, f.name_, "open");
  f.file_ = base::File::Adopt(fd);
  f.direct_ = direct;

  if (::fallocate(fd, 0, 0, static_cast<off_t>(o.bytes)) != 0) {
    const int err = errno;
    if (err == ENOSPC) {
      return absl::ResourceExhaustedError(absl::StrCat(dir, ": cannot reserve ", o.bytes, " bytes (", Gib(o.bytes),
                                                       ") for an ssd table's rows: no space left on the device"));
    }
    if (err != EOPNOTSUPP) return base::ErrnoStatus(err, f.name_, "fallocate");
    // A file system without fallocate: a sparse file, with no reservation.
    std::fprintf(stderr, "cemb: warning: %s cannot reserve space (no fallocate); a full disk shows up during training\n",
                 dir.c_str());
    if (::ftruncate(fd, static_cast<off_t>(o.bytes)) != 0) return base::ErrnoStatus(errno, f.name_, "ftruncate");
  }

  if (direct) {
    absl::StatusOr<std::unique_ptr<BlockIo>> ring = NewUringBlockIo(fd, o.queue_depth);
    if (ring.ok()) {
      f.io_ = *std::move(ring);
    } else {
      std::fprintf(stderr, "cemb: warning: %s; ssd table rows in %s use pread/pwrite at queue depth 1\n",
                   std::string(ring.status().message()).c_str(), dir.c_str());
    }
  }
  if (f.io_ == nullptr) f.io_ = NewPosixBlockIo(fd);
  if (o.wrap_io) f.io_ = o.wrap_io(std::move(f.io_));
  return f;
}

}  // namespace cemb
