// SsdCore's batches, fetches, eviction and the miss path of rowpointer()
// (ssd/internal/ssd_core.h); its log and collector are in ssd_log.cc, its
// snapshots in ssd_snapshot.cc.
#include "ssd/internal/ssd_core.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "ssd/ssd_table.h"

namespace cemb {
namespace ssd_internal {

struct SsdCore::Batch {
  int64_t id = 0;
  uint64_t seq = 0;
  std::vector<uint32_t> slots;  // distinct slots this batch pins
  int64_t pending = 0;          // its fetches still in flight
  absl::Status error;
};

namespace {
std::string Bytes(int64_t b) { return absl::StrFormat("%d bytes (%.1f MiB)", b, static_cast<double>(b) / (1 << 20)); }
}  // namespace

absl::StatusOr<std::unique_ptr<SsdCore>> SsdCore::Create(std::string name, int64_t nvectors, int64_t featuresize,
                                                         size_t feature_bytes, size_t row_bytes,
                                                         const SsdOptions& options, InitRowFn init_row) {
  auto c = std::unique_ptr<SsdCore>(new SsdCore());
  c->stride = static_cast<size_t>(SlotBytes(static_cast<int64_t>(row_bytes)));
  c->capacity = options.capacity_bytes / static_cast<int64_t>(c->stride);
  if (c->capacity < 1) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": an ssd slot pool of ", options.capacity_bytes,
                                                   " bytes holds no row of ", c->stride, " bytes"));
  }
  if (c->capacity >= static_cast<int64_t>(kMaxSlots)) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": an ssd slot pool of more than 2^30 rows"));
  }
  if (options.file_space < 1.1) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": ssd file_space ", options.file_space, " < 1.1 leaves the log collector no room"));
  }
  if (nvectors >= static_cast<int64_t>(LogLayout::kNoRow)) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": an ssd table of 2^32 rows or more"));
  }
  c->name_ = std::move(name);
  c->nvectors_ = nvectors;
  c->featuresize_ = featuresize;
  c->row_bytes_ = row_bytes;
  c->feature_bytes_ = feature_bytes;
  c->seed_ = options.init_seed;
  c->eviction_ = options.eviction;
  c->init_row_ = init_row;
  c->log = LogLayout::For(nvectors, static_cast<int64_t>(row_bytes), options.file_space, kReserveSegments,
                          options.segment_bytes);
  c->layout = c->log.rows;
  if (c->log.disk_slots() >= static_cast<int64_t>(kOnDisk)) {
    return absl::InvalidArgumentError(absl::StrCat(c->name_, ": an ssd log of ", c->log.disk_slots(),
                                                   " row places, more than 2^30 (fewer rows, or a lower file_space)"));
  }

  BlockFileOptions fo = options.file;
  fo.bytes = c->log.file_bytes();
  absl::StatusOr<BlockFile> file = BlockFile::Create(fo);
  if (!file.ok()) return absl::Status(file.status().code(), absl::StrCat(c->name_, ": ", file.status().message()));
  c->file_ = *std::move(file);

  // The map is anonymous memory that reads as zero (never written, not
  // resident): a row never touched costs no DRAM page.
  const size_t map_bytes = static_cast<size_t>(nvectors) * sizeof(uint32_t);
  absl::StatusOr<Region> map = Region::Allocate(TierOptions::Dram(map_bytes >= (size_t{2} << 20)), map_bytes);
  if (!map.ok()) return absl::Status(map.status().code(), absl::StrCat(c->name_, ": ", map.status().message()));
  c->map_region_ = *std::move(map);
  c->map = reinterpret_cast<std::atomic<uint32_t>*>(c->map_region_.data());
  const size_t pool_bytes = static_cast<size_t>(c->capacity) * c->stride;
  absl::StatusOr<Region> pool = Region::Allocate(TierOptions::Dram(pool_bytes >= (size_t{2} << 20)), pool_bytes);
  if (!pool.ok()) return absl::Status(pool.status().code(), absl::StrCat(c->name_, ": ", pool.status().message()));
  c->pool_region_ = *std::move(pool);
  c->pool = c->pool_region_.data();

  const size_t n = static_cast<size_t>(c->capacity);
  c->flags_storage_.reset(new std::atomic<uint8_t>[n]);
  c->flags = c->flags_storage_.get();
  c->slot_row_.reset(new int64_t[n]);
  c->slot_loc_.reset(new uint32_t[n]);
  c->pins_.reset(new int32_t[n]);
  c->pin_mark_.reset(new uint64_t[n]);
  c->loading_op_.reset(new uint32_t[n]);
  c->free_.reserve(n);
  for (size_t s = 0; s < n; ++s) {
    c->flags[s].store(0, std::memory_order_relaxed);
    c->slot_row_[s] = -1;
    c->slot_loc_[s] = kNoLoc;
    c->pins_[s] = 0;
    c->pin_mark_[s] = 0;
    c->free_.push_back(static_cast<uint32_t>(n - 1 - s));  // slot 0 first
  }
  c->read_buffer_room_ = (options.file.queue_depth + kReadChunkBlocks - 1) / kReadChunkBlocks * kReadChunkBlocks;
  c->InitLog();
  c->poison_.reset(new std::byte[c->stride]);
  if (row_bytes % sizeof(float) == 0 && featuresize * static_cast<int64_t>(sizeof(float)) == static_cast<int64_t>(row_bytes)) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (size_t i = 0; i < c->stride / sizeof(float); ++i) std::memcpy(c->poison_.get() + i * sizeof(float), &nan, sizeof nan);
  } else {
    std::memset(c->poison_.get(), 0xFF, c->stride);  // bfloat16 0xFFFF is a NaN
  }
  return c;
}

SsdCore::~SsdCore() {
  // Requests in flight write into op and segment buffers: let them land first.
  std::lock_guard<std::mutex> lock(mu_);
  if (file_.fd() >= 0) {
    while (file_.io().in_flight() > 0) {
      if (!ReapSome().ok()) break;
    }
  }
}

void SsdCore::InitRow(int64_t row, std::byte* out) const {
  if (seed_.has_value()) {
    init_row_(*seed_, nvectors_, row, featuresize_, out);
    if (row_bytes_ > feature_bytes_) std::memset(out + feature_bytes_, 0, row_bytes_ - feature_bytes_);
  } else {
    std::memset(out, 0, row_bytes_);
  }
}

absl::Status SsdCore::IoError(IoOp op, uint64_t offset, int64_t bytes, int64_t result) const {
  const std::string what =
      absl::StrCat(name_, ": ", file_.name(), ": ", IoOpName(op), " of ", bytes, " bytes at offset ", offset);
  if (result >= 0) return absl::DataLossError(absl::StrCat(what, " transferred only ", result, " bytes"));
  const int err = static_cast<int>(-result);
  const std::string msg = absl::StrCat(what, " failed: ", std::strerror(err));
  return err == ENOSPC ? absl::ResourceExhaustedError(msg) : absl::DataLossError(msg);
}

// --- I/O ops ------------------------------------------------------------------

uint32_t SsdCore::NewOp(OpKind kind, uint64_t offset, int64_t bytes) {
  // Collector reads keep their segment-sized buffers among themselves (at
  // most kMaxCollecting): reused for a block read, an op would keep its
  // segment buffer, and over a long run every op would grow one. The others
  // are reused oldest first, so a block read stays in its buffer for as long
  // as the pool allows.
  uint32_t id;
  if (kind == OpKind::kCollect && !free_collect_ops_.empty()) {
    id = free_collect_ops_.back();
    free_collect_ops_.pop_back();
  } else if (kind != OpKind::kCollect && !free_ops_.empty()) {
    id = free_ops_.front();
    free_ops_.pop_front();
    ForgetBlock(id);
  } else {
    id = static_cast<uint32_t>(ops_.size());
    ops_.emplace_back();
  }
  Op& o = ops_[id];
  o.kind = kind;
  o.offset = offset;
  o.bytes = bytes;
  o.segment = static_cast<int64_t>(offset / static_cast<uint64_t>(log.segment_bytes));
  o.buffer_index = -1;
  o.done = false;
  o.rows.clear();
  o.batches.clear();
  if (kind != OpKind::kWrite && o.buffer_bytes < static_cast<size_t>(bytes)) {
    o.buffer = kind == OpKind::kFetch ? NewReadBuffer() : NewIoBuffer(static_cast<size_t>(bytes));
    o.buffer_bytes = static_cast<size_t>(bytes);
  }
  return id;
}

namespace {
void KeepBuffer(void*) noexcept {}  // the deleter of a buffer carved from a chunk
}  // namespace

SsdCore::IoBuffer SsdCore::NewIoBuffer(size_t bytes) {
  IoBuffer b(static_cast<std::byte*>(std::aligned_alloc(kIoAlignment, bytes)), &std::free);
  (void)file_.io().RegisterBuffer(b.get(), bytes);  // refused: requests pin its pages each time
  return b;
}

SsdCore::IoBuffer SsdCore::NewReadBuffer() {
  const auto block = static_cast<size_t>(log.rows.block_bytes);
  if (read_buffers_ == read_buffer_room_) {  // not registered: the ring's few regions are for chunks
    return IoBuffer(static_cast<std::byte*>(std::aligned_alloc(kIoAlignment, block)), &std::free);
  }
  if (read_buffers_ % kReadChunkBlocks == 0) read_chunks_.push_back(NewIoBuffer(kReadChunkBlocks * block));
  std::byte* b = read_chunks_.back().get() + static_cast<size_t>(read_buffers_++ % kReadChunkBlocks) * block;
  return IoBuffer(b, &KeepBuffer);
}

void SsdCore::ForgetBlock(uint32_t op) {
  const Op& o = ops_[op];
  if (o.kind != OpKind::kFetch) return;
  if (auto it = block_ops_.find(o.offset); it != block_ops_.end() && it->second == op) block_ops_.erase(it);
}

void SsdCore::ReleaseOp(uint32_t id) {
  if (ops_[id].kind == OpKind::kCollect) {
    free_collect_ops_.push_back(id);
  } else {
    free_ops_.push_back(id);
  }
}

absl::Status SsdCore::Submit() {
  absl::Status s;
  if (!requests_.empty()) s = file_.io().Submit(requests_);
  if (s.ok() && !writes_.empty()) s = file_.io().Submit(writes_);
  if (!s.ok()) {
    // The ring failed (not one request): the requests not handed over
    // complete as errors, so every waiter finds out.
    for (const auto* list : {&requests_, &writes_}) {
      for (const BlockRequest& r : *list) {
        if (!ops_[r.tag].done) Complete({r.tag, -EIO});
      }
    }
    s = absl::Status(s.code(), absl::StrCat(name_, ": ", file_.name(), ": ", s.message()));
  }
  requests_.clear();
  writes_.clear();
  return s;
}

absl::Status SsdCore::ReapReady() { return Reap(0); }
absl::Status SsdCore::ReapSome() { return Reap(1); }

absl::Status SsdCore::Reap(int64_t at_least) {
  if (!requests_.empty() || !writes_.empty()) CEMB_RETURN_IF_ERROR(Submit());
  // Completing a collector read appends, and appending may reap again: the
  // inner call applies the completions the outer one has not reached yet
  // (a write the inner call waits for may be among them), so they wait in
  // one queue, not in each call's own list.
  if (reaped_.empty() || at_least == 0) {
    scratch_.clear();
    if (absl::Status s = file_.io().Reap(at_least, &scratch_); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(name_, ": ", file_.name(), ": ", s.message()));
    }
    reaped_.insert(reaped_.end(), scratch_.begin(), scratch_.end());
  }
  while (!reaped_.empty()) {
    const BlockCompletion c = reaped_.front();
    reaped_.pop_front();
    Complete(c);
  }
  return absl::OkStatus();
}

void SsdCore::Complete(const BlockCompletion& c) {
  Op& o = ops_[c.tag];
  o.done = true;
  const bool ok = c.result == o.bytes;
  switch (o.kind) {
    case OpKind::kWrite:
      CompleteWrite(o, ok ? absl::OkStatus() : IoError(IoOp::kWrite, o.offset, o.bytes, c.result));
      break;
    case OpKind::kCollect:
      CompleteCollect(static_cast<uint32_t>(c.tag),
                      ok ? absl::OkStatus() : IoError(IoOp::kRead, o.offset, o.bytes, c.result));
      break;
    case OpKind::kFetch:
      CompleteFetch(o, ok ? absl::OkStatus() : IoError(IoOp::kRead, o.offset, o.bytes, c.result));
      break;
  }
  ReleaseOp(static_cast<uint32_t>(c.tag));
}

void SsdCore::CompleteFetch(Op& o, const absl::Status& error) {
  if (error.ok()) {
    for (auto [row, s, offset] : o.rows) {
      std::memcpy(Slot(s), o.buffer.get() + offset, row_bytes_);
      map[row].store(s + 1, std::memory_order_release);
    }
    stats_.fetched_rows += static_cast<int64_t>(o.rows.size());
  } else {
    // The rows stay where they were: in the log, not resident. Their slots
    // are freed when the batches pinning them are unpinned.
    last_read_error_ = error;
    ForgetBlock(static_cast<uint32_t>(&o - ops_.data()));
    for (auto [row, s, offset] : o.rows) {
      map[row].store(kOnDisk | slot_loc_[s], std::memory_order_release);
      slot_row_[s] = -1;
      slot_loc_[s] = kNoLoc;
      flags[s].store(0, std::memory_order_relaxed);
      if (pins_[s] == 0) free_.push_back(s);
    }
  }
  for (uint64_t seq : o.batches) {
    for (Batch& b : batches_) {
      if (b.seq != seq) continue;
      --b.pending;
      if (!error.ok() && b.error.ok()) b.error = error;
    }
  }
  EndSegmentRead(o.segment);
}

// --- a missed row ---------------------------------------------------------------

bool SsdCore::StartFill(int64_t row, uint32_t w, uint32_t s) {
  slot_row_[s] = row;
  if (w == 0) {
    InitRow(row, Slot(s));
    slot_loc_[s] = kNoLoc;
    map[row].store(s + 1, std::memory_order_release);
    ++stats_.lazy_rows;
    return false;
  }
  const uint32_t d = w & ~kOnDisk;
  slot_loc_[s] = d;
  if (const std::byte* p = Buffered(d); p != nullptr) {
    std::memcpy(Slot(s), p, row_bytes_);
    map[row].store(s + 1, std::memory_order_release);
    ++stats_.buffer_rows;
    return false;
  }
  const uint64_t block = log.block_offset(d);
  if (auto it = block_ops_.find(block); it != block_ops_.end() && ops_[it->second].done) {
    std::memcpy(Slot(s), ops_[it->second].buffer.get() + log.offset_in_block(d), row_bytes_);
    map[row].store(s + 1, std::memory_order_release);
    ++stats_.fetched_rows;
    ++stats_.shared_rows;
    return false;
  }
  reads_.emplace_back(block, s);
  map[row].store((s + 1) | kLoading, std::memory_order_relaxed);
  return true;
}

void SsdCore::QueueFetchReads(uint64_t batch_seq, int64_t* pending) {
  std::sort(reads_.begin(), reads_.end());
  for (size_t i = 0; i < reads_.size();) {
    const uint64_t offset = reads_[i].first;
    // StartFill copied the rows of blocks already read: an entry left is a read in flight.
    const auto in_flight = block_ops_.find(offset);
    const bool join = in_flight != block_ops_.end();
    const uint32_t id = join ? in_flight->second : NewOp(OpKind::kFetch, offset, log.rows.block_bytes);
    Op& o = ops_[id];
    const size_t first = i;
    for (; i < reads_.size() && reads_[i].first == offset; ++i) {
      const uint32_t s = reads_[i].second;
      o.rows.push_back({slot_row_[s], s, static_cast<uint32_t>(log.offset_in_block(slot_loc_[s]))});
      loading_op_[s] = id;
    }
    if (pending != nullptr && std::find(o.batches.begin(), o.batches.end(), batch_seq) == o.batches.end()) {
      o.batches.push_back(batch_seq);
      ++*pending;
    }
    if (join) {
      stats_.shared_rows += static_cast<int64_t>(i - first);
      continue;
    }
    block_ops_.emplace(offset, id);
    ++seg_reads_[static_cast<size_t>(o.segment)];
    ++stats_.fetch_reads;
    if (pending != nullptr) CountReread(offset, batch_seq);
    requests_.push_back({IoOp::kRead, offset, o.buffer.get(), static_cast<uint32_t>(o.bytes), id});
  }
  reads_.clear();
}

void SsdCore::CountReread(uint64_t offset, uint64_t seq) {
  while (!recent_reads_.empty() && recent_reads_.front().first + kRereadWindow < seq) {
    const auto [old_seq, old_offset] = recent_reads_.front();
    recent_reads_.pop_front();
    if (auto it = recent_blocks_.find(old_offset); it != recent_blocks_.end() && it->second == old_seq) {
      recent_blocks_.erase(it);
    }
  }
  auto [it, inserted] = recent_blocks_.try_emplace(offset, seq);
  if (!inserted && it->second != seq) ++stats_.fetch_rereads;
  it->second = seq;
  recent_reads_.push_back({seq, offset});
}

// --- batches ------------------------------------------------------------------

SsdCore::Batch* SsdCore::FindBatch(int64_t id) {
  for (Batch& b : batches_) {
    if (b.id == id) return &b;
  }
  return nullptr;
}

void SsdCore::UnpinSlots(Batch& b) {
  for (uint32_t s : b.slots) {
    if (--pins_[s] == 0) {
      --pinned_slots_;
      if (slot_row_[s] < 0) free_.push_back(s);  // its fetch failed
    }
  }
  b.slots.clear();
}

void SsdCore::RemoveBatch(int64_t id) {
  for (size_t i = 0; i < batches_.size(); ++i) {
    if (batches_[i].id == id) {
      std::swap(batches_[i], batches_.back());
      batches_.pop_back();
      return;
    }
  }
}

template <typename Index>
absl::Status SsdCore::CheckRows(int64_t batch_id, std::span<const Index> rows) const {
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] < 0 || rows[i] >= nvectors_) {
      return absl::InvalidArgumentError(absl::StrCat("table ", name_, ", prefetch of batch ", batch_id, ", index ", i,
                                                     ": row ", rows[i], rows[i] < 0 ? " < 0" : " >= ", nvectors_));
    }
  }
  return absl::OkStatus();
}

absl::Status SsdCore::Prefetch(int64_t batch_id, std::span<const int64_t> rows) {
  CEMB_RETURN_IF_ERROR(CheckRows(batch_id, rows));
  return PrefetchImpl(batch_id, rows, /*distinct=*/false);
}
absl::Status SsdCore::Prefetch(int64_t batch_id, std::span<const int32_t> rows) {
  CEMB_RETURN_IF_ERROR(CheckRows(batch_id, rows));
  return PrefetchImpl(batch_id, rows, /*distinct=*/false);
}
absl::Status SsdCore::PrefetchDistinct(int64_t batch_id, std::span<const int64_t> rows) {
  return PrefetchImpl(batch_id, rows, /*distinct=*/true);
}

// Pin, reserve, install, submit: each its own function below.
template <typename Index>
absl::Status SsdCore::PrefetchImpl(int64_t batch_id, std::span<const Index> rows, bool distinct) {
  std::unique_lock<std::mutex> lock = Lock();
  CpuTimer cpu(&stats_.cpu);
  CEMB_ASSIGN_OR_RETURN(Batch * b, BeginBatch(batch_id));
  PinResident(*b, rows);
  std::sort(missing_.begin(), missing_.end());  // installed in row order
  if (!distinct) missing_.erase(std::unique(missing_.begin(), missing_.end()), missing_.end());
  stats_.prefetch_rows += static_cast<int64_t>(missing_.size());
  CEMB_RETURN_IF_ERROR(ReserveSlots(batch_id, static_cast<int64_t>(missing_.size())));
  Batch& batch = *FindBatch(batch_id);  // eviction may complete other batches' reads: look it up again
  InstallMissing(batch);
  return SubmitReads(lock, batch);
}

absl::StatusOr<SsdCore::Batch*> SsdCore::BeginBatch(int64_t batch_id) {
  if (!broken_.ok()) return broken_;
  CEMB_RETURN_IF_ERROR(ReapReady());  // writes and collector reads done since the last call
  // A segment write or a collector read that failed since the last call:
  // reported once, here (its rows are still in DRAM: nothing is lost).
  if (!background_error_.ok()) return std::exchange(background_error_, absl::OkStatus());
  if (FindBatch(batch_id) != nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(name_, ": batch ", batch_id, " is already pinned"));
  }
  batches_.emplace_back();
  Batch& b = batches_.back();
  b.id = batch_id;
  b.seq = ++seq_;
  return &b;
}

// Rows already resident or in flight: pinned (a row twice in `rows` once).
// The others go to missing_. The map words, then the slots' pin counts and
// flags, are loaded kAhead rows ahead: a batch's rows are scattered, and
// each of those loads would otherwise wait for memory.
template <typename Index>
void SsdCore::PinResident(Batch& b, std::span<const Index> rows) {
  constexpr size_t kAhead = 16;
  words_.resize(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    if (i + kAhead < rows.size()) __builtin_prefetch(&map[rows[i + kAhead]]);
    words_[i] = map[rows[i]].load(std::memory_order_relaxed);
  }
  missing_.clear();
  for (size_t i = 0; i < rows.size(); ++i) {
    if (i + kAhead < rows.size()) {
      const uint32_t ahead = words_[i + kAhead];
      if (ahead != 0 && !(ahead & kOnDisk)) {
        const uint32_t s = (ahead & ~kLoading) - 1;
        __builtin_prefetch(&pin_mark_[s], 1);
        __builtin_prefetch(&pins_[s], 1);
        __builtin_prefetch(&flags[s], 1);
      }
    }
    const int64_t row = rows[i];
    const uint32_t w = words_[i];
    if (w == 0 || (w & kOnDisk)) {
      missing_.push_back(row);
      continue;
    }
    const uint32_t s = (w & ~kLoading) - 1;
    if (pin_mark_[s] == b.seq) continue;
    pin_mark_[s] = b.seq;
    if (pins_[s]++ == 0) ++pinned_slots_;
    b.slots.push_back(s);
    ++stats_.prefetch_rows;
    ++stats_.prefetch_hits;
    flags[s].fetch_or(kReferenced, std::memory_order_relaxed);
    if (w & kLoading) {
      ops_[loading_op_[s]].batches.push_back(b.seq);
      ++b.pending;
    }
  }
}

// Free slots for `need` rows, evicting unpinned rows when the pool is full
// (dirty victims are appended to the log: a copy into a write buffer). When
// the pool cannot hold them, the batch is unpinned and forgotten.
absl::Status SsdCore::ReserveSlots(int64_t batch_id, int64_t need) {
  if (need <= static_cast<int64_t>(free_.size())) return absl::OkStatus();
  victims_.clear();
  FindVictims(need - static_cast<int64_t>(free_.size()));
  if (static_cast<int64_t>(victims_.size() + free_.size()) < need) {
    for (uint32_t s : victims_) flags[s].fetch_and(static_cast<uint8_t>(~kChosen), std::memory_order_relaxed);
    const int64_t pinned = pinned_slots_ + need;
    UnpinSlots(*FindBatch(batch_id));
    RemoveBatch(batch_id);
    return absl::ResourceExhaustedError(absl::StrCat(
        name_, ": batch ", batch_id, " and the ", batches_.size(), " batches still pinned need ", pinned,
        " rows in DRAM at once, ", Bytes(pinned * static_cast<int64_t>(stride)), "; the slot pool holds ", capacity,
        " rows, ", Bytes(capacity * static_cast<int64_t>(stride))));
  }
  if (absl::Status s = Evict(); !s.ok()) {
    UnpinSlots(*FindBatch(batch_id));
    RemoveBatch(batch_id);
    return s;
  }
  return absl::OkStatus();
}

// The missing rows into reserved slots, pinned by the batch: rows never
// written are computed, rows of a segment still in a write buffer copied;
// the others wait for a block read (StartFill). Their map words are read
// now: the eviction may have let the collector move them.
void SsdCore::InstallMissing(Batch& batch) {
  for (const int64_t row : missing_) {
    const uint32_t s = free_.back();
    free_.pop_back();
    pins_[s] = 1;
    ++pinned_slots_;
    pin_mark_[s] = batch.seq;
    batch.slots.push_back(s);
    flags[s].store(kReferenced, std::memory_order_relaxed);
    StartFill(row, map[row].load(std::memory_order_relaxed), s);
  }
}

// The batch's reads, one request per distinct block, go first; then the
// sealed segments' writes and collector reads queued behind them. Requests
// beyond the queue's room wait in the BlockIo: this thread hands them to the
// kernel as completions make room, waiting with mu_ released (the step's
// WaitResident and Unpin go on meanwhile).
absl::Status SsdCore::SubmitReads(std::unique_lock<std::mutex>& lock, Batch& batch) {
  QueueFetchReads(batch.seq, &batch.pending);
  absl::Status collected = Collect(/*until_free=*/false);
  absl::Status submitted = Submit();
  if (submitted.ok()) submitted = AwaitUntil(lock, [this] { return file_.io().queued() == 0; });
  return submitted.ok() ? collected : submitted;
}

absl::StatusOr<absl::Duration> SsdCore::WaitResident(int64_t batch_id) {
  std::unique_lock<std::mutex> lock = Lock();
  CpuTimer cpu(&stats_.cpu);
  if (FindBatch(batch_id) == nullptr) {
    return absl::NotFoundError(absl::StrCat(name_, ": WaitResident of batch ", batch_id, ", which is not pinned"));
  }
  const absl::Time start = absl::Now();
  // The reads are waited for with mu_ released: the prefetcher installs the
  // next batches meanwhile.
  CEMB_RETURN_IF_ERROR(AwaitUntil(lock, [&] {
    const Batch* b = FindBatch(batch_id);
    return b == nullptr || b->pending == 0;
  }));
  if (FindBatch(batch_id) == nullptr) {  // another thread unpinned it meanwhile
    return absl::NotFoundError(absl::StrCat(name_, ": batch ", batch_id, " was unpinned while WaitResident waited"));
  }
  const absl::Duration waited = absl::Now() - start;
  stats_.waited += waited;
  const Batch& b = *FindBatch(batch_id);
  if (!b.error.ok()) return b.error;
  return waited;
}

template <typename Done>
absl::Status SsdCore::AwaitUntil(std::unique_lock<std::mutex>& lock, Done done) {
  while (!done()) {
    CEMB_RETURN_IF_ERROR(ReapReady());
    if (done()) break;
    CEMB_RETURN_IF_ERROR(AwaitIo(lock));
  }
  return absl::OkStatus();
}

absl::Status SsdCore::AwaitIo(std::unique_lock<std::mutex>& lock) {
  if (awaiting_io_) {
    io_done_.wait(lock);
    return absl::OkStatus();
  }
  if (file_.io().in_flight() == 0) {
    return absl::InternalError(absl::StrCat(name_, ": waits for a read that is not in flight"));
  }
  awaiting_io_ = true;
  lock.unlock();
  absl::Status s = file_.io().AwaitCompletion();
  lock.lock();
  awaiting_io_ = false;
  io_done_.notify_all();
  if (!s.ok()) return absl::Status(s.code(), absl::StrCat(name_, ": ", file_.name(), ": ", s.message()));
  return absl::OkStatus();
}

std::unique_lock<std::mutex> SsdCore::Lock() {
  std::unique_lock<std::mutex> lock(mu_);
  ApplyPendingUnpins();
  return lock;
}

void SsdCore::ApplyPendingUnpins() {
  std::vector<int64_t> pending;
  {
    std::lock_guard<std::mutex> g(unpin_mu_);
    pending.swap(pending_unpins_);
  }
  for (int64_t id : pending) {
    // A caller's error that Unpin could not report: status() keeps it.
    if (absl::Status s = UnpinBatch(id); !s.ok() && status_.ok()) status_ = s;
  }
}

absl::Status SsdCore::UnpinBatch(int64_t batch_id) {
  Batch* b = FindBatch(batch_id);
  if (b == nullptr) return absl::NotFoundError(absl::StrCat(name_, ": Unpin of batch ", batch_id, ", which is not pinned"));
  UnpinSlots(*b);
  RemoveBatch(batch_id);
  return absl::OkStatus();
}

absl::Status SsdCore::Unpin(int64_t batch_id) {
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) {
    std::lock_guard<std::mutex> g(unpin_mu_);
    pending_unpins_.push_back(batch_id);
    return absl::OkStatus();
  }
  ApplyPendingUnpins();
  return UnpinBatch(batch_id);
}

// --- eviction ----------------------------------------------------------------

void SsdCore::FindVictims(int64_t k) {
  // Two sweeps: the first may only clear reference bits.
  for (int64_t step = 0; step <= 2 * capacity && static_cast<int64_t>(victims_.size()) < k; ++step) {
    const uint32_t s = static_cast<uint32_t>(hand_);
    hand_ = hand_ + 1 == capacity ? 0 : hand_ + 1;
    const int64_t row = slot_row_[s];
    if (row < 0 || pins_[s] > 0) continue;
    if (map[row].load(std::memory_order_relaxed) & kLoading) continue;
    const uint8_t f = flags[s].load(std::memory_order_relaxed);
    if (f & kChosen) continue;
    if (eviction_ == Eviction::kClock && (f & kReferenced)) {
      flags[s].fetch_and(static_cast<uint8_t>(~kReferenced), std::memory_order_relaxed);
      continue;
    }
    flags[s].fetch_or(kChosen, std::memory_order_relaxed);
    victims_.push_back(s);
  }
}

absl::Status SsdCore::Evict() {
  absl::Status status;
  size_t i = 0;
  for (; i < victims_.size(); ++i) {
    const uint32_t s = victims_[i];
    const int64_t row = slot_row_[s];
    const bool dirty = flags[s].load(std::memory_order_relaxed) & kDirty;
    if (dirty) {
      absl::StatusOr<uint32_t> d = Append(row, Slot(s));
      if (!d.ok()) {
        status = d.status();
        break;
      }
      // Read after the append: a collector read completed meanwhile may have dropped the old copy.
      if (slot_loc_[s] != kNoLoc) Release(slot_loc_[s]);
      slot_loc_[s] = *d;
      ++stats_.rows_written;
      ++stats_.dirty_evictions;
    }
    map[row].store(slot_loc_[s] == kNoLoc ? 0 : kOnDisk | slot_loc_[s], std::memory_order_release);
    FreeSlot(s);
    ++stats_.evictions;
  }
  for (; i < victims_.size(); ++i) {  // not evicted: they stay, dirty
    flags[victims_[i]].fetch_and(static_cast<uint8_t>(~kChosen), std::memory_order_relaxed);
  }
  victims_.clear();
  return status;
}

void SsdCore::FreeSlot(uint32_t s) {
  slot_row_[s] = -1;
  slot_loc_[s] = kNoLoc;
  flags[s].store(0, std::memory_order_relaxed);
  free_.push_back(s);
}

absl::Status SsdCore::FlushDirty() {
  std::unique_lock<std::mutex> lock = Lock();
  CpuTimer cpu(&stats_.cpu);
  return FlushDirtyLocked();
}

absl::Status SsdCore::FlushDirtyLocked() {
  for (int64_t i = 0; i < capacity; ++i) {
    const auto s = static_cast<uint32_t>(i);
    const int64_t row = slot_row_[s];
    if (row < 0 || !(flags[s].load(std::memory_order_relaxed) & kDirty)) continue;
    if (map[row].load(std::memory_order_relaxed) & kLoading) continue;  // not filled yet: cannot be dirty
    CEMB_ASSIGN_OR_RETURN(const uint32_t d, Append(row, Slot(s)));
    if (slot_loc_[s] != kNoLoc) Release(slot_loc_[s]);
    slot_loc_[s] = d;
    flags[s].fetch_and(static_cast<uint8_t>(~kDirty), std::memory_order_relaxed);
    ++stats_.rows_written;
  }
  return FlushLog();
}

absl::Status SsdCore::DrainIo() {
  CEMB_RETURN_IF_ERROR(Submit());
  while (file_.io().in_flight() > 0) {
    if (absl::Status s = ReapSome(); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status SsdCore::EvictUnpinned() {
  std::unique_lock<std::mutex> lock = Lock();
  CpuTimer cpu(&stats_.cpu);
  victims_.clear();
  for (int64_t s = 0; s < capacity; ++s) {
    const int64_t row = slot_row_[s];
    if (row < 0 || pins_[s] > 0 || (map[row].load(std::memory_order_relaxed) & kLoading)) continue;
    flags[s].fetch_or(kChosen, std::memory_order_relaxed);
    victims_.push_back(static_cast<uint32_t>(s));
  }
  CEMB_RETURN_IF_ERROR(Evict());
  absl::Status collected = Collect(/*until_free=*/false);
  absl::Status submitted = Submit();
  return submitted.ok() ? collected : submitted;
}

// --- the miss path of rowpointer() -----------------------------------------------

std::optional<uint32_t> SsdCore::TakeSlot(absl::Status* error) {
  if (free_.empty()) {
    victims_.clear();
    FindVictims(1);
    if (victims_.empty()) {
      *error = absl::ResourceExhaustedError(absl::StrCat(name_, ": rowpointer() of a row not resident while all ",
                                                         capacity, " slots are pinned"));
      return std::nullopt;
    }
    if (absl::Status s = Evict(); !s.ok()) {
      *error = s;
      if (free_.empty()) return std::nullopt;
    }
  }
  const uint32_t s = free_.back();
  free_.pop_back();
  return s;
}

std::byte* SsdCore::Fetch(int64_t row, bool for_update) {
  std::unique_lock<std::mutex> lock = Lock();
  CpuTimer cpu(&stats_.cpu);
  const uint8_t touch = for_update ? kReferenced | kDirty : kReferenced;
  if (!broken_.ok()) return poison_.get();  // status() says why
  uint32_t w = map[row].load(std::memory_order_acquire);
  if (w == 0 || (w & kOnDisk)) {
    absl::Status error;
    std::optional<uint32_t> slot = TakeSlot(&error);
    if (!slot.has_value()) {
      if (status_.ok()) status_ = error;
      return poison_.get();
    }
    const uint32_t s = *slot;
    ++stats_.sync_fetches;
    flags[s].store(0, std::memory_order_relaxed);
    // Read the word again: the eviction may have let the collector move the row.
    if (StartFill(row, map[row].load(std::memory_order_relaxed), s)) QueueFetchReads(0, nullptr);
    absl::Status st = Collect(/*until_free=*/false);
    st.Update(Submit());
    if (!st.ok() && status_.ok()) status_ = st;
    w = map[row].load(std::memory_order_acquire);
  }
  // In flight (ours, or a prefetch's): wait for it with mu_ released (other
  // threads' misses, the prefetcher and the step go on meanwhile), its slot
  // pinned so that no eviction takes it.
  if (w & kLoading) {
    const uint32_t s = (w & ~kLoading) - 1;
    if (pins_[s]++ == 0) ++pinned_slots_;
    const absl::Status st =
        AwaitUntil(lock, [&] { return (map[row].load(std::memory_order_acquire) & kLoading) == 0; });
    if (--pins_[s] == 0) {
      --pinned_slots_;
      if (slot_row_[s] < 0) free_.push_back(s);  // its read failed
    }
    if (!st.ok()) {
      if (status_.ok()) status_ = st;
      return poison_.get();
    }
    w = map[row].load(std::memory_order_acquire);
  }
  if (w - 1 >= kMaxSlots) {  // the read failed: the row is still in the log
    if (status_.ok()) status_ = last_read_error_;
    return poison_.get();
  }
  flags[w - 1].fetch_or(touch, std::memory_order_relaxed);
  return Slot(w - 1);
}

// --- inspection ---------------------------------------------------------------------

SsdStats SsdCore::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  SsdStats s = stats_;
  s.io = file_.io().counters();
  s.live_rows = 0;
  for (uint32_t live : seg_live_) s.live_rows += live;
  s.file_bytes = static_cast<int64_t>(log.file_bytes());
  s.block_bytes = log.rows.block_bytes;
  s.io_buffers = static_cast<int64_t>(ops_.size());
  s.io_buffer_bytes = 0;
  for (const Op& o : ops_) s.io_buffer_bytes += static_cast<int64_t>(o.buffer_bytes);
  return s;
}

absl::Status SsdCore::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return broken_.ok() ? status_ : broken_;
}

int64_t SsdCore::pinned_rows() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pinned_slots_;
}

}  // namespace ssd_internal
}  // namespace cemb
