// LogLayout: where an ssd table's rows live in its file, which is a log of
// segments (docs/ssd.md, "The log").
//
// The file is `nsegments` segments of `segment_bytes`. A segment is
//
//   [ row ids: segment_rows x uint32, zero-padded to a multiple of 4 KiB ]
//   [ data: data_blocks blocks, rows packed as BlockLayout packs them    ]
//
// A disk slot d is a row-sized place in the data of segment d / segment_rows;
// the id area says which row slot i of a segment was written for (kNoRow:
// none), so the garbage collector tells live copies from dead ones with the
// segment's own read. Disk slots number at most 2^30 (the residency map's
// encoding, ssd/internal/ssd_core.h).
//
// Size: data for `space` times the table's row blocks, plus `reserve`
// segments (the write buffers and the collector's room), so the file is at
// most space x the table's row bytes + reserve segments, whatever training
// does; it is reserved with fallocate when the table is made.
#ifndef CEMB_SSD_LOG_LAYOUT_H_
#define CEMB_SSD_LOG_LAYOUT_H_

#include <algorithm>
#include <cstdint>

#include "ssd/block_file.h"

namespace cemb {

struct LogLayout {
  static constexpr uint32_t kNoRow = UINT32_MAX;  // an id slot never written
  // Segments of at most this many data bytes (one sequential write each).
  static constexpr int64_t kMaxSegmentDataBytes = int64_t{1} << 20;

  BlockLayout rows;           // how rows pack into blocks (rows_per_block, block_bytes)
  int64_t data_blocks = 0;    // per segment
  int64_t segment_rows = 0;   // disk slots per segment
  int64_t id_bytes = 0;       // the id area, a multiple of 4 KiB
  int64_t segment_bytes = 0;  // id_bytes + data_blocks * block_bytes
  int64_t nsegments = 0;

  // REQUIRES: nvectors > 0, row_bytes > 0, space >= 1, reserve >= 1.
  // segment_data_bytes = 0: 1 MiB, or less for a small table (about 1/32 of
  // its row blocks, at least one block), so that small tables have segments
  // to collect too.
  static LogLayout For(int64_t nvectors, int64_t row_bytes, double space, int64_t reserve,
                       int64_t segment_data_bytes = 0) {
    LogLayout l;
    l.rows = BlockLayout::ForRows(nvectors, row_bytes);
    const int64_t most = segment_data_bytes > 0 ? segment_data_bytes : kMaxSegmentDataBytes;
    int64_t blocks = std::max<int64_t>(1, most / l.rows.block_bytes);
    if (segment_data_bytes <= 0) blocks = std::min(blocks, std::max<int64_t>(1, l.rows.nblocks / 32));
    l.data_blocks = blocks;
    l.segment_rows = blocks * l.rows.rows_per_block;
    l.id_bytes = (l.segment_rows * 4 + kBlockBytes - 1) / kBlockBytes * kBlockBytes;
    l.segment_bytes = l.id_bytes + blocks * l.rows.block_bytes;
    const auto data = static_cast<int64_t>(space * static_cast<double>(l.rows.nblocks) + 0.999999);
    l.nsegments = (data + blocks - 1) / blocks + reserve;
    return l;
  }

  int64_t disk_slots() const { return nsegments * segment_rows; }
  uint64_t file_bytes() const { return static_cast<uint64_t>(nsegments * segment_bytes); }
  int64_t segment_of(int64_t dslot) const { return dslot / segment_rows; }
  uint64_t segment_offset(int64_t segment) const { return static_cast<uint64_t>(segment * segment_bytes); }
  // Byte of slot i (0 <= i < segment_rows) in its segment's image.
  int64_t offset_in_segment(int64_t i) const {
    return id_bytes + i / rows.rows_per_block * rows.block_bytes + i % rows.rows_per_block * rows.row_bytes;
  }
  // The file offset of the block that holds disk slot d, and d's byte in it.
  uint64_t block_offset(int64_t dslot) const {
    const int64_t i = dslot % segment_rows;
    return segment_offset(segment_of(dslot)) +
           static_cast<uint64_t>(id_bytes + i / rows.rows_per_block * rows.block_bytes);
  }
  int64_t offset_in_block(int64_t dslot) const { return dslot % segment_rows % rows.rows_per_block * rows.row_bytes; }
};

}  // namespace cemb

#endif  // CEMB_SSD_LOG_LAYOUT_H_
