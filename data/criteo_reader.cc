#include "data/criteo_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "base/parallel.h"
#include "base/status_macros.h"

namespace cemb::data {

struct CriteoReader::Chunk {
  std::string text;     // whole lines; the file's last line may lack its '\n'
  uint64_t offset = 0;  // file offset of text[0]
  bool overlong = false;  // text is the head of one line longer than a chunk

  // Parse results.
  std::vector<CriteoRow> rows;
  std::vector<uint64_t> lines;  // per row: 0-based line index within the chunk
  uint64_t num_lines = 0;
  struct Bad {
    uint64_t line;    // 0-based within the chunk
    uint64_t offset;  // file offset of the line
    std::string message;
  };
  std::vector<Bad> bad;  // the first few bad lines
  uint64_t num_bad = 0;
};

CriteoReader::CriteoReader(std::string path, int fd, uint64_t file_bytes,
                           const CriteoReaderOptions& options)
    : path_(std::move(path)), fd_(fd), file_bytes_(file_bytes), options_(options) {
  const size_t n = 2 * static_cast<size_t>(options_.threads);
  for (size_t i = 0; i < n; ++i) chunks_.push_back(std::make_unique<Chunk>());
}

CriteoReader::~CriteoReader() {
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<std::unique_ptr<CriteoReader>> CriteoReader::Open(
    const std::string& path, const CriteoReaderOptions& options) {
  CriteoReaderOptions o = options;
  if (o.threads < 0) return absl::InvalidArgumentError("CriteoReader: threads < 0");
  if (o.threads == 0) o.threads = DefaultThreads();
  if (o.max_line_bytes == 0 || o.chunk_bytes < 2 * o.max_line_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("CriteoReader: chunk_bytes (", o.chunk_bytes,
                     ") must be at least twice max_line_bytes (", o.max_line_bytes, ")"));
  }
  CEMB_ASSIGN_OR_RETURN(base::File file, base::File::OpenForReading(path));
  ::posix_fadvise(file.fd(), 0, 0, POSIX_FADV_SEQUENTIAL);
  const uint64_t size = file.size();
  return std::unique_ptr<CriteoReader>(new CriteoReader(path, file.Release(), size, o));
}

absl::Status CriteoReader::ReadChunk(Chunk& chunk, bool& got) {
  got = false;
  chunk.overlong = false;
  // Drop the rest of an over-long line, through its '\n'.
  while (discarding_ && carry_.empty() && !eof_) {
    char buf[1 << 16];
    CEMB_ASSIGN_OR_RETURN(size_t n, base::ReadSome(fd_, path_, buf, sizeof buf));
    read_offset_ += n;
    if (n == 0) {
      eof_ = true;
      break;
    }
    const char* nl = static_cast<const char*>(std::memchr(buf, '\n', n));
    if (nl != nullptr) {
      discarding_ = false;
      carry_.assign(nl + 1, static_cast<size_t>(buf + n - (nl + 1)));
    }
  }
  discarding_ = false;
  chunk.offset = read_offset_ - carry_.size();
  chunk.text.swap(carry_);
  carry_.clear();
  const size_t want = options_.chunk_bytes;
  while (chunk.text.size() < want && !eof_) {
    const size_t have = chunk.text.size();
    chunk.text.resize(want);
    CEMB_ASSIGN_OR_RETURN(size_t n, base::ReadSome(fd_, path_, chunk.text.data() + have, want - have));
    chunk.text.resize(have + n);
    read_offset_ += n;
    if (n == 0) eof_ = true;
  }
  if (chunk.text.empty()) return absl::OkStatus();
  got = true;
  const size_t last_nl = chunk.text.rfind('\n');
  if (last_nl != std::string::npos) {
    carry_.assign(chunk.text, last_nl + 1);
    chunk.text.resize(last_nl + 1);
  } else if (!eof_) {
    chunk.overlong = true;  // a whole chunk without a line end
    discarding_ = true;
  }
  return absl::OkStatus();
}

void CriteoReader::ParseChunk(Chunk& chunk) const {
  chunk.rows.clear();
  chunk.lines.clear();
  chunk.bad.clear();
  chunk.num_bad = 0;
  chunk.num_lines = 0;
  const size_t max_bad = options_.bad_lines == BadLines::kFail ? 1 : options_.max_reported_bad_lines;
  auto record_bad = [&](uint64_t line, size_t at, std::string message) {
    ++chunk.num_bad;
    if (chunk.bad.size() < max_bad) chunk.bad.push_back({line, chunk.offset + at, std::move(message)});
  };
  if (chunk.overlong) {
    chunk.num_lines = 1;
    record_bad(0, 0, absl::StrCat("line is longer than the limit of ", options_.max_line_bytes,
                                  " bytes"));
    return;
  }
  const char* const base = chunk.text.data();
  const size_t size = chunk.text.size();
  size_t start = 0;
  uint64_t line = 0;
  while (start < size) {
    const char* nl = static_cast<const char*>(std::memchr(base + start, '\n', size - start));
    const size_t stop = nl ? static_cast<size_t>(nl - base) : size;
    chunk.rows.emplace_back();
    absl::Status s = ParseCriteoLine(std::string_view(base + start, stop - start), chunk.rows.back(),
                                     options_.max_line_bytes);
    if (s.ok()) {
      chunk.lines.push_back(line);
    } else {
      chunk.rows.pop_back();
      record_bad(line, start, std::string(s.message()));
      if (options_.bad_lines == BadLines::kFail) {
        chunk.num_lines = line + 1;
        return;
      }
    }
    ++line;
    start = stop + 1;
  }
  chunk.num_lines = line;
}

absl::Status CriteoReader::FillChunks() {
  num_filled_ = 0;
  next_chunk_ = 0;
  for (auto& chunk : chunks_) {
    bool got = false;
    CEMB_RETURN_IF_ERROR(ReadChunk(*chunk, got));
    if (!got) break;
    ++num_filled_;
  }
  parallel_for(static_cast<int64_t>(num_filled_), options_.threads, [&](int64_t i) { ParseChunk(*chunks_[i]); });
  return absl::OkStatus();
}

absl::StatusOr<const RowBlock*> CriteoReader::Next() {
  if (!failed_.ok()) return failed_;
  if (next_chunk_ == num_filled_) {
    absl::Status s = FillChunks();
    if (!s.ok()) {
      failed_ = s;
      return s;
    }
    if (num_filled_ == 0) return nullptr;
  }
  Chunk& c = *chunks_[next_chunk_++];
  const uint64_t first_line = lines_done_ + 1;
  if (!c.bad.empty()) {
    if (options_.bad_lines == BadLines::kFail) {
      const Chunk::Bad& b = c.bad.front();
      failed_ = absl::InvalidArgumentError(
          absl::StrCat(path_, ":", first_line + b.line, " (byte ", b.offset, "): ", b.message));
      return failed_;
    }
    for (const Chunk::Bad& b : c.bad) {
      if (bad_messages_.size() >= options_.max_reported_bad_lines) break;
      bad_messages_.push_back(
          absl::StrCat(path_, ":", first_line + b.line, " (byte ", b.offset, "): ", b.message));
    }
  }
  bad_lines_ += c.num_bad;
  lines_done_ += c.num_lines;
  for (uint64_t& l : c.lines) l += first_line;
  bytes_done_ = c.offset + c.text.size();  // an over-long line: its head only
  block_.rows = c.rows;
  block_.lines = c.lines;
  block_.end_offset = bytes_done_;
  return &block_;
}

absl::StatusOr<uint64_t> CountLines(const std::string& path) {
  CEMB_ASSIGN_OR_RETURN(base::File file, base::File::OpenForReading(path));
  ::posix_fadvise(file.fd(), 0, 0, POSIX_FADV_SEQUENTIAL);
  std::vector<char> buf(size_t{1} << 20);
  uint64_t lines = 0;
  char last = '\n';
  while (true) {
    CEMB_ASSIGN_OR_RETURN(size_t n, base::ReadSome(file.fd(), path, buf.data(), buf.size()));
    if (n == 0) break;
    lines += static_cast<uint64_t>(std::count(buf.data(), buf.data() + n, '\n'));
    last = buf[n - 1];
  }
  return lines + (last != '\n' ? 1 : 0);
}

}  // namespace cemb::data
