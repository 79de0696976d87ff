#include "embedding/table_io.h"

#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "base/checksum.h"
#include "base/file.h"
#include "base/status_macros.h"

namespace cemb::table_io_internal {
namespace {

constexpr char kMagic[8] = {'C', 'E', 'M', 'B', 'R', 'O', 'W', 'S'};
constexpr uint32_t kVersion = 1;

size_t ElementBytes(ElementType t) { return t == ElementType::kFloat ? 4 : 2; }
uint64_t RowBytes(ElementType t, int64_t featuresize, int64_t state_floats) {
  return static_cast<uint64_t>(featuresize) * ElementBytes(t) + static_cast<uint64_t>(state_floats) * sizeof(float);
}

}  // namespace

struct RowsWriter::State {
  base::AtomicFile file;  // removes the .tmp unless committed
  RowsHeader header{};
  Checksum64 checksum;
  uint64_t written = 0, expected = 0;
};

absl::StatusOr<RowsWriter> RowsWriter::Open(const std::string& path, ElementType type, int64_t nvectors,
                                            int64_t featuresize, int64_t state_floats) {
  CEMB_ASSIGN_OR_RETURN(base::AtomicFile file, base::AtomicFile::Create(path));
  RowsWriter w;
  w.state_ = std::make_unique<State>(State{.file = std::move(file)});
  State& s = *w.state_;
  std::memcpy(s.header.magic, kMagic, 8);
  s.header.version = kVersion;
  s.header.type = type;
  s.header.nvectors = nvectors;
  s.header.featuresize = featuresize;
  s.header.state_floats = state_floats;
  s.expected = static_cast<uint64_t>(nvectors) * RowBytes(type, featuresize, state_floats);
  // A placeholder; the header is written last, once the checksum is known.
  CEMB_RETURN_IF_ERROR(s.file.Append(&s.header, sizeof(RowsHeader)));
  return w;
}

RowsWriter::RowsWriter(RowsWriter&&) noexcept = default;
RowsWriter::~RowsWriter() = default;

absl::Status RowsWriter::Append(const void* data, size_t bytes) {
  state_->checksum.Update(data, bytes);
  state_->written += bytes;
  return state_->file.Append(data, bytes);
}

absl::Status RowsWriter::Commit() {
  State& s = *state_;
  if (s.written != s.expected) {
    return absl::InternalError(absl::StrCat("rows file '", s.file.path(), "': ", s.written,
                                            " bytes written, ", s.expected, " expected"));
  }
  s.header.checksum = s.checksum.Digest();
  CEMB_RETURN_IF_ERROR(s.file.WriteAt(&s.header, sizeof(s.header), 0));
  return s.file.Commit();
}

struct RowsReader::State {
  std::string path;
  base::File file;
  RowsHeader header{};
};

absl::StatusOr<RowsReader> RowsReader::Open(const std::string& path, const std::string& table_name,
                                            int64_t nvectors, int64_t featuresize, int64_t state_floats) {
  RowsReader r;
  r.state_ = std::make_unique<State>();
  State& s = *r.state_;
  s.path = path;
  auto error = [&](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat(table_name, ": rows file '", path, "': ", parts...));
  };
  absl::StatusOr<base::File> file = base::File::OpenForReading(path);
  if (!file.ok()) {
    // "<table>: rows file <path>: cannot open: <strerror>"
    return absl::Status(file.status().code(), absl::StrCat(table_name, ": rows file ", file.status().message()));
  }
  s.file = *std::move(file);
  const uint64_t size = s.file.size();
  absl::Status got = base::ReadExactly(s.file.fd(), path, &s.header, sizeof(s.header));
  if (absl::IsOutOfRange(got)) return error("truncated: ", size, " bytes, shorter than the 64-byte header");
  CEMB_RETURN_IF_ERROR(got);
  if (std::memcmp(s.header.magic, kMagic, 8) != 0) return error("not a rows file (bad magic)");
  if (s.header.version != kVersion) return error("version ", s.header.version, ", expected ", kVersion);
  if (s.header.type != ElementType::kFloat && s.header.type != ElementType::kBfloat16) {
    return error("unknown element type ", static_cast<uint32_t>(s.header.type));
  }
  if (s.header.nvectors != nvectors || s.header.featuresize != featuresize) {
    return error("holds ", s.header.nvectors, " rows of ", s.header.featuresize,
                 " elements, the table has ", nvectors, " rows of ", featuresize);
  }
  if (s.header.state_floats != state_floats) {
    return error("holds ", s.header.state_floats, " optimizer-state values per row, the table keeps ", state_floats,
                 " (element-wise AdaGrad keeps one per element, other optimizers none with the rows)");
  }
  const uint64_t payload = static_cast<uint64_t>(nvectors) * RowBytes(s.header.type, featuresize, state_floats);
  const uint64_t expected = sizeof(RowsHeader) + payload;
  if (size != expected) {
    return error(size < expected ? "truncated: " : "too long: ", size, " bytes, ", expected, " expected");
  }
  // Verify the checksum before anything is written into the table.
  Checksum64 checksum;
  std::vector<char> buffer(size_t{4} << 20);
  for (uint64_t left = payload; left > 0;) {
    const size_t n = std::min<uint64_t>(left, buffer.size());
    got = base::ReadExactly(s.file.fd(), path, buffer.data(), n);
    if (absl::IsOutOfRange(got)) return error("truncated while reading");
    CEMB_RETURN_IF_ERROR(got);
    checksum.Update(buffer.data(), n);
    left -= n;
  }
  if (checksum.Digest() != s.header.checksum) return error("checksum mismatch: the file is corrupt");
  if (lseek(s.file.fd(), sizeof(RowsHeader), SEEK_SET) < 0) return base::ErrnoStatus(errno, path, "seek");
  return r;
}

RowsReader::RowsReader(RowsReader&&) noexcept = default;
RowsReader::~RowsReader() = default;

ElementType RowsReader::type() const { return state_->header.type; }

absl::Status RowsReader::Read(void* data, size_t bytes) {
  const absl::Status got = base::ReadExactly(state_->file.fd(), state_->path, data, bytes);
  if (absl::IsOutOfRange(got)) {
    return absl::DataLossError(absl::StrCat("rows file '", state_->path, "' shrank while reading"));
  }
  return got;
}

}  // namespace cemb::table_io_internal
