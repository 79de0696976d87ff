// The file behind an ssd table: rows packed into 4 KiB blocks, read and
// written through a BlockIo, never mapped.
//
// Layout (BlockLayout): for rows of at most 4096 bytes, rows_per_block =
// 4096 / row_bytes and a row never straddles two blocks (the tail of a block
// that rows do not fill is padding); a row of more than 4096 bytes spans
// ceil(row_bytes / 4096) whole blocks of its own. Row r is in block
// r / rows_per_block, at byte (r % rows_per_block) * row_bytes of it.
//
// What a miss costs: a row is read with its whole block, so one 4 KiB read
// per missed row whose neighbours are cold: 4096 / row_bytes times the row's
// bytes (16x for a 256-byte row, D=64 float; 32x for D=64 bfloat16). Misses
// of rows that share a block cost one read together.
//
// BlockFile: where the blocks live. Made in a directory (an unnamed O_TMPFILE
// file that vanishes with the BlockFile; mkstemp + unlink where the file
// system has no O_TMPFILE) or at a path the user names on purpose (created or
// truncated; kept). The whole size is reserved up front with fallocate, so a
// full disk is an error at creation, naming the directory and the bytes.
// The file is opened with O_DIRECT and driven by io_uring; where the file
// system refuses O_DIRECT (EINVAL) it is opened buffered and driven with
// pread/pwrite, and one warning line naming the directory goes to stderr; the
// same where io_uring is unavailable (ENOSYS, EPERM).
//
// Ownership: owns the descriptor and the BlockIo. Movable, not copyable.
// Thread safety: none (the ssd table uses it under its mutex).
//
// Example:
//   BlockLayout layout = BlockLayout::ForRows(1 << 20, 256);
//   CEMB_ASSIGN_OR_RETURN(BlockFile f, BlockFile::Create({.directory = "/nvme", .bytes = layout.file_bytes()}));
//   CEMB_RETURN_IF_ERROR(f.io().Submit(requests));
#ifndef CEMB_SSD_BLOCK_FILE_H_
#define CEMB_SSD_BLOCK_FILE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "base/file.h"
#include "ssd/block_io.h"

namespace cemb {

inline constexpr uint32_t kBlockBytes = 4096;

struct BlockLayout {
  int64_t nvectors = 0;
  int64_t row_bytes = 0;
  int64_t rows_per_block = 0;  // 1 for rows of more than kBlockBytes
  int64_t block_bytes = 0;     // kBlockBytes, or row_bytes rounded up to it
  int64_t nblocks = 0;

  // REQUIRES: nvectors > 0, row_bytes > 0.
  static BlockLayout ForRows(int64_t nvectors, int64_t row_bytes);

  int64_t block_of(int64_t row) const { return row / rows_per_block; }
  int64_t first_row(int64_t block) const { return block * rows_per_block; }
  // Rows of `block` (the last block may hold fewer).
  int64_t rows_in(int64_t block) const { return std::min(rows_per_block, nvectors - first_row(block)); }
  int64_t offset_in_block(int64_t row) const { return (row % rows_per_block) * row_bytes; }
  uint64_t file_offset(int64_t block) const { return static_cast<uint64_t>(block * block_bytes); }
  uint64_t file_bytes() const { return static_cast<uint64_t>(nblocks * block_bytes); }
};

// O_DIRECT where the file system allows it (kAuto), or never (kOff: the page
// cache keeps copies of the rows; for a file system known to lack it).
enum class DirectIo { kAuto, kOff };

struct BlockFileOptions {
  // Exactly one: a directory for an unnamed temporary file, or a file path.
  std::string directory;
  std::string path;
  uint64_t bytes = 0;  // reserved with fallocate; > 0
  int queue_depth = 256;
  DirectIo direct = DirectIo::kAuto;
  // Tests: wraps the backend (a FaultInjectingBlockIo).
  std::function<std::unique_ptr<BlockIo>(std::unique_ptr<BlockIo>)> wrap_io;
  // Tests: behave as if the file system refused O_DIRECT with EINVAL, to
  // exercise the fallback and its warning on a file system that has it.
  bool simulate_no_direct = false;
};

class BlockFile {
 public:
  // Errors: both or neither of directory and path, a missing directory,
  // fewer free bytes than asked ("<dir>: cannot reserve N bytes (x GiB) for
  // the table's rows: ... available", ResourceExhausted), open/fallocate errors.
  [[nodiscard]] static absl::StatusOr<BlockFile> Create(const BlockFileOptions& options);

  BlockFile() = default;  // no file (fd() < 0) until one is moved in
  BlockFile(BlockFile&&) noexcept = default;
  BlockFile& operator=(BlockFile&&) noexcept = default;

  BlockIo& io() const { return *io_; }
  // For messages: the path, or "<directory>/(unnamed temporary file)".
  const std::string& name() const { return name_; }
  const std::string& directory() const { return directory_; }
  uint64_t size() const { return size_; }
  bool direct() const { return direct_; }
  int fd() const { return file_.fd(); }

 private:
  base::File file_;
  std::unique_ptr<BlockIo> io_;
  std::string name_, directory_;
  uint64_t size_ = 0;
  bool direct_ = false;
};

}  // namespace cemb

#endif  // CEMB_SSD_BLOCK_FILE_H_
