// CriteoReader: a streaming, multi-threaded reader of a Criteo TSV file.
//
// The reader reads the file in chunks of `chunk_bytes` (cut at line ends),
// parses up to `2 * threads` chunks at a time in parallel, and hands the rows
// out in file order, one block per chunk. Memory is bounded by about
// 2 * threads * (chunk_bytes + chunk_bytes / 240 * sizeof(CriteoRow)) however
// large the file is.
//
// Bad lines (see ParseCriteoLine) either stop the reader with an error that
// names the file, the line and the byte offset (BadLines::kFail, the default),
// or are skipped and counted, the first few with their messages
// (BadLines::kSkip).
//
// Thread safety: a reader is used by one thread; it runs its own worker
// threads (OpenMP) inside Next().
//
//   CEMB_ASSIGN_OR_RETURN(auto reader, CriteoReader::Open(path, {}));
//   while (true) {
//     CEMB_ASSIGN_OR_RETURN(const RowBlock* block, reader->Next());
//     if (block == nullptr) break;  // end of file
//     for (const CriteoRow& row : block->rows) Use(row);
//   }
#ifndef CEMB_DATA_CRITEO_READER_H_
#define CEMB_DATA_CRITEO_READER_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/criteo.h"

namespace cemb::data {

// What to do with a line that does not parse.
enum class BadLines {
  kFail,  // stop with an error naming file, line and byte offset
  kSkip,  // skip it, count it, keep the first messages for a summary
};

struct CriteoReaderOptions {
  int threads = 0;                      // parsing threads; 0 = all hardware threads
  size_t chunk_bytes = size_t{4} << 20;  // REQUIRES: >= 2 * max_line_bytes
  size_t max_line_bytes = kDefaultMaxLineBytes;
  BadLines bad_lines = BadLines::kFail;
  size_t max_reported_bad_lines = 10;  // messages kept under kSkip
};

// A run of consecutive good rows in file order.
struct RowBlock {
  std::span<const CriteoRow> rows;
  std::span<const uint64_t> lines;  // the 1-based line number of each row
  uint64_t end_offset = 0;          // byte offset just past the block's last line
};

class CriteoReader {
 public:
  // Opens `path`. Returns NotFound / PermissionDenied when it cannot be read,
  // InvalidArgument for bad options.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<CriteoReader>> Open(
      const std::string& path, const CriteoReaderOptions& options);
  ~CriteoReader();
  CriteoReader(const CriteoReader&) = delete;
  CriteoReader& operator=(const CriteoReader&) = delete;

  // The next block in file order, or nullptr at the end of the file. Under
  // BadLines::kFail the first bad line gives InvalidArgument
  // "<path>:<line> (byte <offset>): <what>", and the reader stays failed.
  // NOTE: the block is valid until the next call.
  [[nodiscard]] absl::StatusOr<const RowBlock*> Next();

  const std::string& path() const { return path_; }
  uint64_t file_bytes() const { return file_bytes_; }
  // Bytes of the file covered by the blocks returned so far.
  uint64_t bytes_done() const { return bytes_done_; }
  // Lines seen in the blocks returned so far, good and bad.
  uint64_t lines() const { return lines_done_; }
  // Lines skipped under BadLines::kSkip, and the first messages about them.
  uint64_t bad_lines() const { return bad_lines_; }
  const std::vector<std::string>& bad_line_messages() const { return bad_messages_; }

 private:
  struct Chunk;
  CriteoReader(std::string path, int fd, uint64_t file_bytes, const CriteoReaderOptions& options);
  absl::Status FillChunks();  // reads and parses the next batch of chunks
  absl::Status ReadChunk(Chunk& chunk, bool& got);
  void ParseChunk(Chunk& chunk) const;

  std::string path_;
  int fd_;
  uint64_t file_bytes_;
  CriteoReaderOptions options_;
  std::vector<std::unique_ptr<Chunk>> chunks_;
  size_t num_filled_ = 0;  // chunks_[0, num_filled_) hold parsed data
  size_t next_chunk_ = 0;  // the next one Next() hands out
  std::string carry_;      // a partial line read past the last chunk's end
  bool discarding_ = false;  // dropping the rest of an over-long line
  bool eof_ = false;
  uint64_t read_offset_ = 0;  // file offset of carry_'s first byte
  uint64_t bytes_done_ = 0;
  uint64_t lines_done_ = 0;
  uint64_t bad_lines_ = 0;
  std::vector<std::string> bad_messages_;
  absl::Status failed_;
  RowBlock block_;
};

// Counts the lines of a file (a last line without '\n' counts) at memory
// bandwidth; the preprocessor uses it to place the Kaggle split.
[[nodiscard]] absl::StatusOr<uint64_t> CountLines(const std::string& path);

}  // namespace cemb::data

#endif  // CEMB_DATA_CRITEO_READER_H_
