#include "embedding/table_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "base/checksum.h"

namespace cemb::table_io_internal {
namespace {

constexpr char kMagic[8] = {'C', 'E', 'M', 'B', 'R', 'O', 'W', 'S'};
constexpr uint32_t kVersion = 1;

size_t ElementBytes(ElementType t) { return t == ElementType::kFloat ? 4 : 2; }

absl::Status Errno(const std::string& what, const std::string& path) {
  return absl::InternalError(absl::StrCat(what, " '", path, "': ", std::strerror(errno)));
}

absl::Status WriteAll(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return Errno("write", path);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

// Reads exactly n bytes; false at a premature end of file.
absl::StatusOr<bool> ReadAll(int fd, void* data, size_t n, const std::string& path) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t r = read(fd, p, n);
    if (r < 0) {
      if (errno == EINTR) continue;
      return Errno("read", path);
    }
    if (r == 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

}  // namespace

struct RowsWriter::State {
  ~State() {
    if (fd >= 0) {
      close(fd);
      unlink(tmp_path.c_str());
    }
  }
  std::string path, tmp_path;
  int fd = -1;
  RowsHeader header{};
  Checksum64 checksum;
  uint64_t written = 0, expected = 0;
};

absl::StatusOr<RowsWriter> RowsWriter::Open(const std::string& path, ElementType type,
                                            int64_t nvectors, int64_t featuresize) {
  RowsWriter w;
  w.state_ = std::make_unique<State>();
  State& s = *w.state_;
  s.path = path;
  s.tmp_path = path + ".tmp";
  s.fd = open(s.tmp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (s.fd < 0) return Errno("cannot create", s.tmp_path);
  std::memcpy(s.header.magic, kMagic, 8);
  s.header.version = kVersion;
  s.header.type = type;
  s.header.nvectors = nvectors;
  s.header.featuresize = featuresize;
  s.expected = static_cast<uint64_t>(nvectors) * featuresize * ElementBytes(type);
  // The header is written last, once the checksum is known.
  if (lseek(s.fd, sizeof(RowsHeader), SEEK_SET) < 0) return Errno("seek", s.tmp_path);
  return w;
}

RowsWriter::RowsWriter(RowsWriter&&) noexcept = default;
RowsWriter::~RowsWriter() = default;

absl::Status RowsWriter::Append(const void* data, size_t bytes) {
  state_->checksum.Update(data, bytes);
  state_->written += bytes;
  return WriteAll(state_->fd, data, bytes, state_->tmp_path);
}

absl::Status RowsWriter::Commit() {
  State& s = *state_;
  if (s.written != s.expected) {
    return absl::InternalError(absl::StrCat("rows file '", s.path, "': ", s.written,
                                            " bytes written, ", s.expected, " expected"));
  }
  s.header.checksum = s.checksum.Digest();
  if (lseek(s.fd, 0, SEEK_SET) < 0) return Errno("seek", s.tmp_path);
  if (absl::Status st = WriteAll(s.fd, &s.header, sizeof(s.header), s.tmp_path); !st.ok()) return st;
  if (fsync(s.fd) != 0) return Errno("fsync", s.tmp_path);
  if (close(s.fd) != 0) {
    s.fd = -1;
    return Errno("close", s.tmp_path);
  }
  s.fd = -1;
  if (std::rename(s.tmp_path.c_str(), s.path.c_str()) != 0) return Errno("rename to", s.path);
  return absl::OkStatus();
}

struct RowsReader::State {
  ~State() {
    if (fd >= 0) close(fd);
  }
  std::string path;
  int fd = -1;
  RowsHeader header{};
};

absl::StatusOr<RowsReader> RowsReader::Open(const std::string& path, const std::string& table_name,
                                            int64_t nvectors, int64_t featuresize) {
  RowsReader r;
  r.state_ = std::make_unique<State>();
  State& s = *r.state_;
  s.path = path;
  auto error = [&](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat(table_name, ": rows file '", path, "': ", parts...));
  };
  s.fd = open(path.c_str(), O_RDONLY);
  if (s.fd < 0) {
    return absl::NotFoundError(absl::StrCat(table_name, ": cannot open rows file '", path,
                                            "': ", std::strerror(errno)));
  }
  struct stat st {};
  if (fstat(s.fd, &st) != 0) return Errno("stat", path);
  absl::StatusOr<bool> got = ReadAll(s.fd, &s.header, sizeof(s.header), path);
  if (!got.ok()) return got.status();
  if (!*got) return error("truncated: ", st.st_size, " bytes, shorter than the 64-byte header");
  if (std::memcmp(s.header.magic, kMagic, 8) != 0) return error("not a rows file (bad magic)");
  if (s.header.version != kVersion) return error("version ", s.header.version, ", expected ", kVersion);
  if (s.header.type != ElementType::kFloat && s.header.type != ElementType::kBfloat16) {
    return error("unknown element type ", static_cast<uint32_t>(s.header.type));
  }
  if (s.header.nvectors != nvectors || s.header.featuresize != featuresize) {
    return error("holds ", s.header.nvectors, " rows of ", s.header.featuresize,
                 " elements, the table has ", nvectors, " rows of ", featuresize);
  }
  const uint64_t payload = static_cast<uint64_t>(nvectors) * featuresize * ElementBytes(s.header.type);
  const uint64_t expected = sizeof(RowsHeader) + payload;
  if (static_cast<uint64_t>(st.st_size) != expected) {
    return error(static_cast<uint64_t>(st.st_size) < expected ? "truncated: " : "too long: ",
                 st.st_size, " bytes, ", expected, " expected");
  }
  // Verify the checksum before anything is written into the table.
  Checksum64 checksum;
  std::vector<char> buffer(size_t{4} << 20);
  for (uint64_t left = payload; left > 0;) {
    const size_t n = std::min<uint64_t>(left, buffer.size());
    got = ReadAll(s.fd, buffer.data(), n, path);
    if (!got.ok()) return got.status();
    if (!*got) return error("truncated while reading");
    checksum.Update(buffer.data(), n);
    left -= n;
  }
  if (checksum.Digest() != s.header.checksum) return error("checksum mismatch: the file is corrupt");
  if (lseek(s.fd, sizeof(RowsHeader), SEEK_SET) < 0) return Errno("seek", path);
  return r;
}

RowsReader::RowsReader(RowsReader&&) noexcept = default;
RowsReader::~RowsReader() = default;

ElementType RowsReader::type() const { return state_->header.type; }

absl::Status RowsReader::Read(void* data, size_t bytes) {
  absl::StatusOr<bool> got = ReadAll(state_->fd, data, bytes, state_->path);
  if (!got.ok()) return got.status();
  if (!*got) return absl::DataLossError(absl::StrCat("rows file '", state_->path, "' shrank while reading"));
  return absl::OkStatus();
}

}  // namespace cemb::table_io_internal
