// The ssd snapshot file (format 2; docs/ssd.md has the table), in one place
// for its writer and its two readers: SsdCore::SaveSnapshot / LoadSnapshot
// (ssd/ssd_snapshot.cc) and SnapshotTable, which serves it in place
// (ssd/snapshot_table.cc). Not API.
#ifndef CEMB_SSD_INTERNAL_SNAPSHOT_FORMAT_H_
#define CEMB_SSD_INTERNAL_SNAPSHOT_FORMAT_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "embedding/row_format.h"
#include "ssd/block_file.h"

namespace cemb::ssd_internal {

inline constexpr char kSnapshotMagic[8] = {'C', 'E', 'M', 'B', 'S', 'S', 'D', 'S'};
// 1: the written blocks of a block-addressed table file in row order (no
// longer read); 2: the log's live rows, compacted.
inline constexpr uint32_t kSnapshotVersion = 2;

// The first bytes of a snapshot, in the machine's byte order (little-endian
// on x86-64 and AArch64), zero-padded to 4 KiB; then `rows` row ids
// (uint32) from ids_offset; then the rows, row_bytes each, from data_offset
// (4 KiB-aligned), in the order of the ids (SnapshotRows: where each lies).
// row_format 0: a trained table's rows (its features and optimizer state,
// SsdCore::SaveSnapshot); otherwise a RowFormat code (embedding/
// row_format.h): rows converted for serving (WriteServedSnapshot), features
// only.
struct SnapshotHeader {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;  // sizeof(SnapshotHeader)
  int64_t nvectors;
  int64_t row_bytes;
  uint64_t seed;
  uint32_t has_seed;  // 0: rows never written read as zeros
  uint32_t row_format;  // 0: trained rows; else the RowFormat of rows converted for serving
  int64_t rows;       // rows in the snapshot; every other row is its initial value
  uint64_t ids_offset;
  uint64_t data_offset;
};
static_assert(sizeof(SnapshotHeader) == 72);

inline constexpr uint64_t kSnapshotIdsOffset = kBlockBytes;
inline uint64_t SnapshotDataOffset(int64_t rows) {
  return (kSnapshotIdsOffset + static_cast<uint64_t>(rows) * sizeof(uint32_t) + kBlockBytes - 1) / kBlockBytes *
         kBlockBytes;
}

// Where a snapshot's rows lie. A converted snapshot's (row_format != 0) are
// packed whole into 4 KiB blocks, floor(4096 / row_bytes) to a block, the
// last block padded to its end: no row crosses a block, so a row costs one
// 4 KiB read. A trained table's rows follow each other.
struct SnapshotRows {
  uint64_t data_offset = 0;
  uint64_t row_bytes = 0;
  uint64_t per_block = 0;  // rows a block; 0: contiguous
  uint64_t offset(uint64_t pos) const {
    return per_block == 0 ? data_offset + pos * row_bytes
                          : data_offset + pos / per_block * kBlockBytes + pos % per_block * row_bytes;
  }
  uint64_t end(uint64_t rows) const {
    return per_block == 0 ? data_offset + rows * row_bytes
                          : data_offset + (rows + per_block - 1) / per_block * kBlockBytes;
  }
};
inline SnapshotRows SnapshotRowsOf(uint32_t row_format, uint64_t data_offset, uint64_t row_bytes) {
  return {data_offset, row_bytes, row_format == 0 ? 0 : kBlockBytes / row_bytes};
}

// Checks a snapshot's header against the table that reads it and the file's
// size. `where` is "<table>: <path>: ". `h` may be only its first 16 bytes
// (magic, version) when `size` is shorter than the header. `row_format`:
// what the reader reads: 0, trained rows only (training's loader); a
// RowFormat code, rows converted to it, or (fp32, bf16) trained rows of
// that type.
inline absl::Status CheckSnapshotHeader(const SnapshotHeader& h, uint64_t size, const std::string& where,
                                        int64_t nvectors, int64_t row_bytes, uint32_t row_format) {
  auto truncated = [&](const std::string& what, uint64_t end) {
    return absl::DataLossError(absl::StrCat(where, "truncated ssd snapshot: it ends at offset ", size,
                                            ", before the end of its ", what, " at offset ", end));
  };
  if (size < 16) return truncated("header", sizeof h);
  if (std::memcmp(h.magic, kSnapshotMagic, sizeof kSnapshotMagic) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, "not an ssd table snapshot (no CEMBSSDS magic)"));
  }
  if (h.version != kSnapshotVersion || h.header_bytes != sizeof h) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, "ssd snapshot format version ", h.version, ", this build reads version ", kSnapshotVersion,
        h.version == 1 ? " (version 1 was written before the ssd log: resume it with that build, or export the "
                         "tables with it and import them here)"
                       : ""));
  }
  if (size < sizeof h) return truncated("header", sizeof h);
  auto differs = [&](const char* field, int64_t theirs, int64_t ours) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "the snapshot's ", field, " is ", theirs, ", the table's is ", ours));
  };
  const bool trained_ok = row_format == 0 || row_format == static_cast<uint32_t>(RowFormat::kFp32) ||
                          row_format == static_cast<uint32_t>(RowFormat::kBf16);
  if (h.row_format != row_format && !(h.row_format == 0 && trained_ok)) {
    auto what = [](uint32_t f) {
      return f == 0 ? std::string("trained rows") : absl::StrCat("rows converted for serving (format ", f, ")");
    };
    return absl::InvalidArgumentError(absl::StrCat(where, "the snapshot holds ", what(h.row_format),
                                                   ", the table reads ", what(row_format)));
  }
  if (h.nvectors != nvectors) return differs("nvectors", h.nvectors, nvectors);
  if (h.row_bytes != row_bytes) return differs("row_bytes", h.row_bytes, row_bytes);
  if (h.rows < 0 || h.rows > nvectors || h.ids_offset != kSnapshotIdsOffset ||
      h.data_offset != SnapshotDataOffset(h.rows) || (h.row_format != 0 && (h.row_bytes <= 0 || h.row_bytes > 4096))) {
    return absl::DataLossError(absl::StrCat(where, "corrupt ssd snapshot: ", h.rows, " rows, ids at offset ",
                                            h.ids_offset, ", rows at offset ", h.data_offset));
  }
  if (h.row_format != 0 && h.rows != nvectors) {
    return absl::DataLossError(absl::StrCat(where, "corrupt served snapshot: ", h.rows, " of ", nvectors,
                                            " rows (a snapshot converted for serving holds every row)"));
  }
  const uint64_t end =
      SnapshotRowsOf(h.row_format, h.data_offset, static_cast<uint64_t>(row_bytes)).end(static_cast<uint64_t>(h.rows));
  if (size < end) return truncated(absl::StrCat(h.rows, " rows"), end);
  if (size > end) {
    return absl::DataLossError(absl::StrCat(where, "corrupt ssd snapshot: ", size - end,
                                            " bytes after its last row (offset ", end, ")"));
  }
  return absl::OkStatus();
}

// Checks the row ids of a snapshot chunk by chunk: each in range, none twice.
class SnapshotIdCheck {
 public:
  SnapshotIdCheck(std::string where, int64_t nvectors, uint64_t ids_offset)
      : where_(std::move(where)),
        nvectors_(nvectors),
        ids_offset_(ids_offset),
        seen_(static_cast<size_t>((nvectors + 63) / 64)) {}
  // ids[i] is the snapshot's id number first + i.
  absl::Status Add(const uint32_t* ids, int64_t n, int64_t first) {
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t row = ids[i];
      const bool bad = row >= nvectors_ || ((seen_[row >> 6] >> (row & 63)) & 1);
      if (bad) {
        return absl::DataLossError(absl::StrCat(where_, "corrupt ssd snapshot: row id ", row, " at offset ",
                                                ids_offset_ + static_cast<uint64_t>(first + i) * 4,
                                                row >= nvectors_ ? " is out of range" : " appears twice"));
      }
      seen_[row >> 6] |= uint64_t{1} << (row & 63);
    }
    return absl::OkStatus();
  }

 private:
  std::string where_;
  int64_t nvectors_;
  uint64_t ids_offset_;
  std::vector<uint64_t> seen_;
};

}  // namespace cemb::ssd_internal

#endif  // CEMB_SSD_INTERNAL_SNAPSHOT_FORMAT_H_
