// The log of an ssd table (docs/ssd.md, "The log"): dirty rows appended to
// segments in DRAM write buffers, each written with one sequential request
// when full; the collector that reads back mostly dead segments and appends
// their live rows again. Part of SsdCore (ssd/internal/ssd_core.h).
#include <time.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "ssd/internal/ssd_core.h"

namespace cemb::ssd_internal {
namespace {
absl::Duration ThreadCpu() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return absl::DurationFromTimespec(ts);
}
}  // namespace

CpuTimer::CpuTimer(absl::Duration* sum) : sum_(sum), start_(ThreadCpu()) {}
CpuTimer::~CpuTimer() { *sum_ += ThreadCpu() - start_; }

void SsdCore::InitLog() {
  const auto n = static_cast<size_t>(log.nsegments);
  seg_state_.assign(n, Segment::kFree);
  seg_live_.assign(n, 0);
  seg_reads_.assign(n, 0);
  seg_buffer_.assign(n, -1);
  free_segs_.clear();
  for (size_t g = n; g-- > 0;) free_segs_.push_back(static_cast<uint32_t>(g));  // segment 0 first
  if (buffers_.empty()) buffers_.resize(kWriteBuffers);  // their bytes when first opened
  free_buffers_.clear();
  for (int b = kWriteBuffers; b-- > 0;) {
    buffers_[static_cast<size_t>(b)].segment = -1;
    free_buffers_.push_back(b);
  }
  open_ = -1;
  collecting_ = 0;
}

SsdCore::Holder SsdCore::HolderOf(uint32_t row, uint32_t dslot, uint32_t* slot) const {
  const uint32_t w = map[row].load(std::memory_order_relaxed);
  if (w == (kOnDisk | dslot)) return Holder::kInMap;
  if (w == 0 || (w & kOnDisk)) return Holder::kDead;
  *slot = (w & ~kLoading) - 1;
  return slot_loc_[*slot] == dslot ? Holder::kInSlot : Holder::kDead;
}

const std::byte* SsdCore::Buffered(uint32_t dslot) const {
  const int b = seg_buffer_[static_cast<size_t>(log.segment_of(dslot))];
  if (b < 0) return nullptr;
  return buffers_[static_cast<size_t>(b)].data.get() + log.offset_in_segment(dslot % log.segment_rows);
}

absl::StatusOr<uint32_t> SsdCore::Append(int64_t row, const std::byte* bytes, bool for_collector) {
  // Opening a segment may reap, and a reaped collector read may open one itself.
  while (open_ < 0) CEMB_RETURN_IF_ERROR(OpenSegment(for_collector));
  SegmentBuffer& b = buffers_[static_cast<size_t>(open_)];
  const int64_t i = b.filled++;
  std::memcpy(b.data.get() + log.offset_in_segment(i), bytes, row_bytes_);
  reinterpret_cast<uint32_t*>(b.data.get())[i] = static_cast<uint32_t>(row);
  ++seg_live_[static_cast<size_t>(b.segment)];
  const auto d = static_cast<uint32_t>(b.segment * log.segment_rows + i);
  if (b.filled == log.segment_rows) {  // sealed: written whole, behind the reads
    seg_state_[static_cast<size_t>(b.segment)] = Segment::kBuffered;
    QueueSegmentWrite(open_);
    open_ = -1;
  }
  return d;
}

void SsdCore::Release(uint32_t dslot) {
  const auto g = static_cast<size_t>(log.segment_of(dslot));
  if (--seg_live_[g] == 0 && seg_state_[g] == Segment::kOnDisk && seg_reads_[g] == 0) {
    FreeSegment(static_cast<int64_t>(g));  // every copy dead: free without a read
    ++stats_.gc_freed;
  }
}

void SsdCore::FreeSegment(int64_t seg) {
  const auto g = static_cast<size_t>(seg);
  // Blocks of it still in fetch buffers are of copies now dead: the segment
  // will be written again.
  if (!block_ops_.empty()) {
    const uint64_t begin = log.segment_offset(seg), end = begin + static_cast<uint64_t>(log.segment_bytes);
    for (auto it = block_ops_.begin(); it != block_ops_.end();) {
      if (it->first >= begin && it->first < end) {
        block_ops_.erase(it++);
      } else {
        ++it;
      }
    }
  }
  seg_state_[g] = Segment::kFree;
  seg_buffer_[g] = -1;
  free_segs_.push_back(static_cast<uint32_t>(seg));
}

void SsdCore::EndSegmentRead(int64_t seg) {
  const auto g = static_cast<size_t>(seg);
  if (--seg_reads_[g] > 0) return;
  if (seg_state_[g] == Segment::kDraining || (seg_state_[g] == Segment::kOnDisk && seg_live_[g] == 0)) {
    FreeSegment(seg);
  }
}

absl::Status SsdCore::OpenSegment(bool for_collector) {
  // The collector may take the last free segments; appends of evicted rows
  // leave it kCollectorReserve, collecting first if need be.
  if (!for_collector && static_cast<int64_t>(free_segs_.size()) <= kCollectorReserve) {
    CEMB_RETURN_IF_ERROR(Collect(/*until_free=*/true));
  }
  // A write buffer: wait for a write in flight; segments whose write failed
  // are written again once, then the failure is the caller's.
  bool retried = false;
  while (free_buffers_.empty() && open_ < 0) {
    if (!AnyWriteInFlight()) {
      if (retried) return background_error_.ok() ? absl::InternalError(absl::StrCat(name_, ": no ssd write buffer"))
                                                 : background_error_;
      RetryFailedWrites();
      retried = true;
    }
    CEMB_RETURN_IF_ERROR(ReapSome());
  }
  if (open_ >= 0) return absl::OkStatus();
  if (free_segs_.empty()) {
    int64_t live = 0;
    for (uint32_t l : seg_live_) live += l;
    return absl::InternalError(absl::StrCat(name_, ": the ssd log has no free segment (", live, " live rows in ",
                                            log.disk_slots(), " places of ", log.nsegments, " segments)"));
  }
  const int b = free_buffers_.back();
  free_buffers_.pop_back();
  const uint32_t g = free_segs_.back();
  free_segs_.pop_back();
  SegmentBuffer& sb = buffers_[static_cast<size_t>(b)];
  if (sb.data == nullptr) sb.data = NewIoBuffer(static_cast<size_t>(log.segment_bytes));
  sb.segment = g;
  sb.filled = sb.durable = sb.writing = 0;
  sb.failed = false;
  std::memset(sb.data.get(), 0xFF, static_cast<size_t>(log.id_bytes));  // every id kNoRow
  seg_state_[g] = Segment::kOpen;
  seg_buffer_[g] = b;
  open_ = b;
  return absl::OkStatus();
}

void SsdCore::QueueSegmentWrite(int buffer) {
  SegmentBuffer& b = buffers_[static_cast<size_t>(buffer)];
  const int64_t blocks = (b.filled + log.rows.rows_per_block - 1) / log.rows.rows_per_block;
  const int64_t bytes = log.id_bytes + blocks * log.rows.block_bytes;
  const uint32_t id = NewOp(OpKind::kWrite, log.segment_offset(b.segment), bytes);
  ops_[id].buffer_index = buffer;
  b.writing = b.filled;
  b.failed = false;
  ++stats_.segments_written;
  writes_.push_back({IoOp::kWrite, log.segment_offset(b.segment), b.data.get(), static_cast<uint32_t>(bytes), id});
}

bool SsdCore::AnyWriteInFlight() const {
  return std::any_of(buffers_.begin(), buffers_.end(), [](const SegmentBuffer& b) { return b.writing > 0; });
}

void SsdCore::RetryFailedWrites() {
  for (size_t i = 0; i < buffers_.size(); ++i) {
    if (buffers_[i].failed && buffers_[i].writing == 0) QueueSegmentWrite(static_cast<int>(i));
  }
}

void SsdCore::CompleteWrite(Op& o, const absl::Status& error) {
  const int buffer = o.buffer_index;
  SegmentBuffer& b = buffers_[static_cast<size_t>(buffer)];
  const int64_t covered = std::exchange(b.writing, 0);
  if (!error.ok()) {
    b.failed = true;
    if (background_error_.ok()) background_error_ = error;
    return;
  }
  b.durable = std::max(b.durable, covered);
  const auto g = static_cast<size_t>(b.segment);
  if (seg_state_[g] != Segment::kBuffered) return;  // a flush's write of the open segment
  seg_state_[g] = Segment::kOnDisk;
  seg_buffer_[g] = -1;
  b.segment = -1;
  free_buffers_.push_back(buffer);
  if (seg_live_[g] == 0 && seg_reads_[g] == 0) FreeSegment(static_cast<int64_t>(g));
}

absl::Status SsdCore::Collect(bool until_free) {
  for (;;) {
    while (collecting_ < kMaxCollecting &&
           static_cast<int64_t>(free_segs_.size()) + collecting_ < kCollectorLowWater) {
      // Greedy: the segment on disk with the fewest live copies.
      int64_t best = -1;
      for (size_t g = 0; g < seg_live_.size(); ++g) {
        if (seg_state_[g] != Segment::kOnDisk || seg_reads_[g] > 0) continue;
        if (best < 0 || seg_live_[g] < seg_live_[static_cast<size_t>(best)]) best = static_cast<int64_t>(g);
      }
      if (best < 0 || seg_live_[static_cast<size_t>(best)] >= log.segment_rows) break;  // nothing to gain
      if (seg_live_[static_cast<size_t>(best)] == 0) {
        FreeSegment(best);
        ++stats_.gc_freed;
        continue;
      }
      const uint32_t id = NewOp(OpKind::kCollect, log.segment_offset(best), log.segment_bytes);
      seg_state_[static_cast<size_t>(best)] = Segment::kCollecting;
      ++collecting_;
      ++stats_.gc_segments;
      stats_.gc_bytes_read += log.segment_bytes;
      writes_.push_back(
          {IoOp::kRead, ops_[id].offset, ops_[id].buffer.get(), static_cast<uint32_t>(log.segment_bytes), id});
    }
    if (!until_free || static_cast<int64_t>(free_segs_.size()) > kCollectorReserve) return absl::OkStatus();
    if (collecting_ == 0) {
      if (!background_error_.ok()) return background_error_;
      int64_t live = 0;
      for (uint32_t l : seg_live_) live += l;
      return absl::InternalError(absl::StrCat(name_, ": the ssd log is full (", live, " live rows in ",
                                              log.disk_slots(), " places)"));
    }
    CEMB_RETURN_IF_ERROR(ReapSome());
  }
}

void SsdCore::CompleteCollect(uint32_t op, const absl::Status& error) {
  // Appending may reap and add ops (ops_ may move): keep what is needed, not the Op.
  const int64_t g = ops_[op].segment;
  const std::byte* image = ops_[op].buffer.get();
  --collecting_;
  if (!error.ok()) {
    seg_state_[static_cast<size_t>(g)] = Segment::kOnDisk;  // its rows stay there
    if (background_error_.ok()) background_error_ = error;
    return;
  }
  const auto* ids = reinterpret_cast<const uint32_t*>(image);
  for (int64_t i = 0; i < log.segment_rows; ++i) {
    const uint32_t row = ids[i];
    if (row == LogLayout::kNoRow || row >= nvectors_) continue;
    const auto d = static_cast<uint32_t>(g * log.segment_rows + i);
    uint32_t slot = 0;
    const Holder holder = HolderOf(row, d, &slot);
    if (holder == Holder::kDead) continue;
    const bool in_map = holder == Holder::kInMap;
    if (!in_map && (flags[slot].load(std::memory_order_relaxed) & kDirty)) {
      slot_loc_[slot] = kNoLoc;  // a newer value will be appended: drop this one
      Release(d);
      continue;
    }
    absl::StatusOr<uint32_t> nd = Append(row, image + log.offset_in_segment(i), /*for_collector=*/true);
    if (!nd.ok()) {  // the rest stay in this segment, which stays on disk
      if (background_error_.ok()) background_error_ = nd.status();
      seg_state_[static_cast<size_t>(g)] = Segment::kOnDisk;
      return;
    }
    if (in_map) {
      map[row].store(kOnDisk | *nd, std::memory_order_release);
    } else {
      slot_loc_[slot] = *nd;
    }
    Release(d);
    ++stats_.gc_rows_moved;
  }
  const auto gi = static_cast<size_t>(g);
  if (seg_reads_[gi] > 0) {
    seg_state_[gi] = Segment::kDraining;
  } else {
    FreeSegment(g);
  }
}

absl::Status SsdCore::FlushLog() {
  if (open_ >= 0) {
    SegmentBuffer& b = buffers_[static_cast<size_t>(open_)];
    if (b.filled > b.durable || b.failed) QueueSegmentWrite(open_);
  }
  RetryFailedWrites();
  CEMB_RETURN_IF_ERROR(Submit());
  while (AnyWriteInFlight()) {
    CEMB_RETURN_IF_ERROR(ReapSome());
  }
  if (std::any_of(buffers_.begin(), buffers_.end(), [](const SegmentBuffer& b) { return b.failed; })) {
    return std::exchange(background_error_, absl::OkStatus());
  }
  return absl::OkStatus();
}

void SsdCore::Reset() {
  for (int64_t row = 0; row < nvectors_; ++row) {
    if (map[row].load(std::memory_order_relaxed) != 0) map[row].store(0, std::memory_order_release);
  }
  free_.clear();
  for (int64_t s = capacity - 1; s >= 0; --s) {
    slot_row_[s] = -1;
    slot_loc_[s] = kNoLoc;
    flags[s].store(0, std::memory_order_relaxed);
    free_.push_back(static_cast<uint32_t>(s));  // slot 0 first
  }
  hand_ = 0;
  recent_blocks_.clear();
  recent_reads_.clear();
  block_ops_.clear();
  InitLog();
  background_error_ = absl::OkStatus();
}

}  // namespace cemb::ssd_internal
