#include "ssd/ssd_table.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace cemb {

std::string SsdStats::ToString(int64_t row_bytes) const {
  return absl::StrFormat(
      "prefetch rows %d, hit rate %.3f, fetched %d, lazy %d, sync fetches %d, evictions %d (dirty %d), "
      "rows written %d, rmw reads %d, blocks read %d, blocks written %d, read amplification %.1f, "
      "queue depth %.1f, waited %s",
      prefetch_rows, hit_rate(), fetched_rows, lazy_rows, sync_fetches, evictions, dirty_evictions, rows_written,
      rmw_reads, io.blocks_read(), io.blocks_written(), read_amplification(row_bytes), io.average_queue_depth(),
      absl::FormatDuration(waited));
}

namespace ssd_internal {

struct SsdCore::Batch {
  int64_t id = 0;
  uint64_t seq = 0;
  std::vector<uint32_t> slots;  // distinct slots this batch pins
  int64_t pending = 0;          // its fetches still in flight
  absl::Status error;
};

struct SsdCore::Op {
  enum class Kind { kFetch, kRmwRead, kWrite };
  Kind kind = Kind::kFetch;
  int64_t block = 0;
  std::unique_ptr<std::byte, decltype(&std::free)> buffer{nullptr, &std::free};
  int64_t result = 0;
  bool done = false;
  std::vector<std::pair<int64_t, uint32_t>> rows;  // kFetch: (row, slot) to install
  std::vector<uint64_t> batches;                   // kFetch: seqs of the batches waiting
};

namespace {
std::string Bytes(int64_t b) { return absl::StrFormat("%d bytes (%.1f MiB)", b, static_cast<double>(b) / (1 << 20)); }
}  // namespace

absl::StatusOr<std::unique_ptr<SsdCore>> SsdCore::Create(std::string name, int64_t nvectors, int64_t featuresize,
                                                         size_t row_bytes, const SsdOptions& options,
                                                         InitRowFn init_row) {
  auto c = std::unique_ptr<SsdCore>(new SsdCore());
  c->stride = (row_bytes + 7) / 8 * 8;
  c->capacity = options.capacity_bytes / static_cast<int64_t>(c->stride);
  if (c->capacity < 1) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": an ssd slot pool of ", options.capacity_bytes,
                                                   " bytes holds no row of ", c->stride, " bytes"));
  }
  if (c->capacity >= static_cast<int64_t>(kLoading) - 1) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": an ssd slot pool of more than 2^31 rows"));
  }
  c->name_ = std::move(name);
  c->nvectors_ = nvectors;
  c->featuresize_ = featuresize;
  c->row_bytes_ = row_bytes;
  c->seed_ = options.init_seed;
  c->eviction_ = options.eviction;
  c->init_row_ = init_row;
  c->layout = BlockLayout::ForRows(nvectors, static_cast<int64_t>(row_bytes));

  BlockFileOptions fo = options.file;
  fo.bytes = c->layout.file_bytes();
  absl::StatusOr<BlockFile> file = BlockFile::Create(fo);
  if (!file.ok()) return absl::Status(file.status().code(), absl::StrCat(c->name_, ": ", file.status().message()));
  c->file_ = *std::move(file);

  // The map is anonymous memory that reads as zero (not resident): a row
  // never touched costs no DRAM page.
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
  c->pins_.reset(new int32_t[n]);
  c->pin_mark_.reset(new uint64_t[n]);
  c->loading_op_.reset(new uint32_t[n]);
  c->free_.reserve(n);
  for (size_t s = 0; s < n; ++s) {
    c->flags[s].store(0, std::memory_order_relaxed);
    c->slot_row_[s] = -1;
    c->pins_[s] = 0;
    c->pin_mark_[s] = 0;
    c->free_.push_back(static_cast<uint32_t>(n - 1 - s));  // slot 0 first
  }
  c->written_.assign(static_cast<size_t>((c->layout.nblocks + 63) / 64), 0);
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
  // Reads in flight write into op buffers: let them land first.
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
  } else {
    std::memset(out, 0, row_bytes_);
  }
}

absl::Status SsdCore::IoError(IoOp op, int64_t block, int64_t result) const {
  const std::string what = absl::StrCat(name_, ": ", file_.name(), ": ", IoOpName(op), " of ", layout.block_bytes,
                                        " bytes at offset ", layout.file_offset(block));
  if (result >= 0) return absl::DataLossError(absl::StrCat(what, " transferred only ", result, " bytes"));
  const int err = static_cast<int>(-result);
  const std::string msg = absl::StrCat(what, " failed: ", std::strerror(err));
  return err == ENOSPC ? absl::ResourceExhaustedError(msg) : absl::DataLossError(msg);
}

// --- I/O ops ------------------------------------------------------------------

uint32_t SsdCore::NewOp(IoOp op, int64_t block) {
  uint32_t id;
  if (!free_ops_.empty()) {
    id = free_ops_.back();
    free_ops_.pop_back();
  } else {
    id = static_cast<uint32_t>(ops_.size());
    ops_.emplace_back();
    ops_.back().buffer.reset(static_cast<std::byte*>(
        std::aligned_alloc(kIoAlignment, static_cast<size_t>(layout.block_bytes))));
  }
  Op& o = ops_[id];
  o.kind = op == IoOp::kWrite ? Op::Kind::kWrite : Op::Kind::kFetch;
  o.block = block;
  o.result = 0;
  o.done = false;
  o.rows.clear();
  o.batches.clear();
  requests_.push_back({op, layout.file_offset(block), o.buffer.get(), static_cast<uint32_t>(layout.block_bytes), id});
  return id;
}

void SsdCore::ReleaseOp(uint32_t id) { free_ops_.push_back(id); }

absl::Status SsdCore::Submit() {
  absl::Status s = file_.io().Submit(requests_);
  if (!s.ok()) {
    // The ring failed (not one request): the requests not handed over
    // complete as errors, so every waiter finds out.
    for (const BlockRequest& r : requests_) {
      if (!ops_[r.tag].done) Complete({r.tag, -EIO});
    }
    s = absl::Status(s.code(), absl::StrCat(name_, ": ", file_.name(), ": ", s.message()));
  }
  requests_.clear();
  return s;
}

absl::Status SsdCore::ReapSome() {
  done_.clear();
  if (absl::Status s = file_.io().Reap(1, &done_); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(name_, ": ", file_.name(), ": ", s.message()));
  }
  for (const BlockCompletion& c : done_) Complete(c);
  return absl::OkStatus();
}

void SsdCore::Complete(const BlockCompletion& c) {
  Op& o = ops_[c.tag];
  o.result = c.result;
  o.done = true;
  if (o.kind != Op::Kind::kFetch) return;  // the writer waits for it and releases it
  const bool ok = c.result == layout.block_bytes;
  absl::Status error;
  if (ok) {
    for (auto [row, s] : o.rows) {
      std::memcpy(Slot(s), o.buffer.get() + layout.offset_in_block(row), row_bytes_);
      map[row].store(s + 1, std::memory_order_release);
    }
    stats_.fetched_rows += static_cast<int64_t>(o.rows.size());
  } else {
    // The rows stay where they were: in the file, not resident. Their slots
    // are freed when the batches pinning them are unpinned.
    error = IoError(IoOp::kRead, o.block, c.result);
    last_read_error_ = error;
    for (auto [row, s] : o.rows) {
      map[row].store(0, std::memory_order_release);
      slot_row_[s] = -1;
      flags[s].store(0, std::memory_order_relaxed);
      if (pins_[s] == 0) free_.push_back(s);
    }
  }
  for (uint64_t seq : o.batches) {
    for (Batch& b : batches_) {
      if (b.seq != seq) continue;
      --b.pending;
      if (!ok && b.error.ok()) b.error = error;
    }
  }
  ReleaseOp(static_cast<uint32_t>(c.tag));
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

absl::Status SsdCore::Prefetch(int64_t batch_id, std::span<const int64_t> rows) { return PrefetchImpl(batch_id, rows); }
absl::Status SsdCore::Prefetch(int64_t batch_id, std::span<const int32_t> rows) { return PrefetchImpl(batch_id, rows); }

template <typename Index>
absl::Status SsdCore::PrefetchImpl(int64_t batch_id, std::span<const Index> rows) {
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] < 0 || rows[i] >= nvectors_) {
      return absl::InvalidArgumentError(absl::StrCat("table ", name_, ", prefetch of batch ", batch_id, ", index ", i,
                                                     ": row ", rows[i], rows[i] < 0 ? " < 0" : " >= ", nvectors_));
    }
  }
  std::unique_lock<std::mutex> lock = Lock();
  if (!broken_.ok()) return broken_;
  if (FindBatch(batch_id) != nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(name_, ": batch ", batch_id, " is already pinned"));
  }
  batches_.emplace_back();
  Batch& b = batches_.back();
  b.id = batch_id;
  b.seq = ++seq_;

  // Rows already resident or in flight: pin them.
  missing_.clear();
  for (Index r : rows) {
    const int64_t row = r;
    const uint32_t w = map[row].load(std::memory_order_relaxed);
    if (w == 0) {
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
  std::sort(missing_.begin(), missing_.end());
  missing_.erase(std::unique(missing_.begin(), missing_.end()), missing_.end());
  const int64_t need = static_cast<int64_t>(missing_.size());
  stats_.prefetch_rows += need;

  // Slots for the missing rows, evicting unpinned rows when the pool is full.
  if (need > static_cast<int64_t>(free_.size())) {
    victims_.clear();
    FindVictims(need - static_cast<int64_t>(free_.size()));
    if (static_cast<int64_t>(victims_.size() + free_.size()) < need) {
      for (uint32_t s : victims_) flags[s].fetch_and(static_cast<uint8_t>(~kChosen), std::memory_order_relaxed);
      const int64_t pinned = pinned_slots_ + need;
      UnpinSlots(b);
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
  }
  Batch& batch = *FindBatch(batch_id);  // Evict does not touch batches_, but be plain about it

  // Install: rows of never-written blocks are computed now; every other
  // block is read once, whatever number of its rows are missing.
  for (size_t i = 0; i < missing_.size();) {
    const int64_t block = layout.block_of(missing_[i]);
    size_t j = i;
    while (j < missing_.size() && layout.block_of(missing_[j]) == block) ++j;
    const bool read = Written(block);
    uint32_t op = 0;
    if (read) {
      op = NewOp(IoOp::kRead, block);
      ops_[op].batches.push_back(batch.seq);
      ++batch.pending;
    }
    for (size_t k = i; k < j; ++k) {
      const int64_t row = missing_[k];
      const uint32_t s = free_.back();
      free_.pop_back();
      slot_row_[s] = row;
      pins_[s] = 1;
      ++pinned_slots_;
      pin_mark_[s] = batch.seq;
      batch.slots.push_back(s);
      flags[s].store(kReferenced, std::memory_order_relaxed);
      if (read) {
        loading_op_[s] = op;
        ops_[op].rows.emplace_back(row, s);
        map[row].store((s + 1) | kLoading, std::memory_order_relaxed);
      } else {
        InitRow(row, Slot(s));
        map[row].store(s + 1, std::memory_order_release);
        ++stats_.lazy_rows;
      }
    }
    i = j;
  }
  return Submit();
}

absl::StatusOr<absl::Duration> SsdCore::WaitResident(int64_t batch_id) {
  std::unique_lock<std::mutex> lock = Lock();
  if (FindBatch(batch_id) == nullptr) {
    return absl::NotFoundError(absl::StrCat(name_, ": WaitResident of batch ", batch_id, ", which is not pinned"));
  }
  const absl::Time start = absl::Now();
  while (FindBatch(batch_id)->pending > 0) {
    if (absl::Status s = ReapSome(); !s.ok()) return s;
  }
  const absl::Duration waited = absl::Now() - start;
  stats_.waited += waited;
  const Batch& b = *FindBatch(batch_id);
  if (!b.error.ok()) return b.error;
  return waited;
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

// --- eviction and write-back ----------------------------------------------------

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
  std::vector<std::pair<int64_t, uint32_t>> dirty;
  std::vector<bool> was_dirty(victims_.size());
  for (size_t i = 0; i < victims_.size(); ++i) {
    const uint32_t s = victims_[i];
    was_dirty[i] = flags[s].load(std::memory_order_relaxed) & kDirty;
    if (was_dirty[i]) dirty.emplace_back(slot_row_[s], s);
  }
  std::vector<int64_t> failed;
  absl::Status status;
  if (!dirty.empty()) status = WriteBack(dirty, /*include_pinned=*/false, &failed);
  for (size_t i = 0; i < victims_.size(); ++i) {
    const uint32_t s = victims_[i];
    flags[s].fetch_and(static_cast<uint8_t>(~kChosen), std::memory_order_relaxed);
    const int64_t row = slot_row_[s];
    if (std::binary_search(failed.begin(), failed.end(), layout.block_of(row))) continue;  // stays, dirty
    if (was_dirty[i]) ++stats_.dirty_evictions;
    map[row].store(0, std::memory_order_release);
    slot_row_[s] = -1;
    flags[s].store(0, std::memory_order_relaxed);
    free_.push_back(s);
    ++stats_.evictions;
  }
  victims_.clear();
  return status;
}

absl::Status SsdCore::WriteBack(std::vector<std::pair<int64_t, uint32_t>>& rows, bool include_pinned,
                                std::vector<int64_t>* failed) {
  std::sort(rows.begin(), rows.end());
  absl::Status first_error;
  // Blocks in chunks, so the buffers of one chunk bound the memory.
  constexpr size_t kChunkBlocks = 256;
  struct BlockWrite {
    int64_t block;
    size_t begin, end;  // its rows in `rows`
    uint32_t op;        // the write; its buffer is the block's image
    int64_t rmw = -1;   // the read of the old block, if any
    size_t also_begin = 0, also_end = 0;  // its other dirty rows the image holds, in `also`
  };
  std::vector<BlockWrite> chunk;
  // Dirty rows that are not targets but go out with their block (they are
  // clean once it is written, so their own eviction writes nothing).
  std::vector<uint32_t> also;
  size_t i = 0;
  while (i < rows.size()) {
    chunk.clear();
    also.clear();
    while (i < rows.size() && chunk.size() < kChunkBlocks) {
      const int64_t block = layout.block_of(rows[i].first);
      size_t j = i;
      while (j < rows.size() && layout.block_of(rows[j].first) == block) ++j;
      chunk.push_back({block, i, j, 0, -1});
      i = j;
    }
    // Which rows of each block can come from DRAM: the rows written, and
    // other resident rows that are ready (and, during a step, unpinned: a
    // pinned row may be being updated by a kernel right now).
    auto from_slot = [&](int64_t row) -> int64_t {
      const uint32_t w = map[row].load(std::memory_order_acquire);
      if (w == 0 || (w & kLoading)) return -1;
      const uint32_t s = w - 1;
      if (!include_pinned && pins_[s] > 0) return -1;
      return s;
    };
    for (BlockWrite& bw : chunk) {
      bw.op = NewOp(IoOp::kWrite, bw.block);
      requests_.pop_back();  // submitted after the image is made
      bool complete = true;
      const int64_t first = layout.first_row(bw.block);
      for (int64_t r = first; r < first + layout.rows_in(bw.block) && complete; ++r) {
        const bool target = std::binary_search(rows.begin() + static_cast<ptrdiff_t>(bw.begin),
                                               rows.begin() + static_cast<ptrdiff_t>(bw.end), std::pair<int64_t, uint32_t>(r, 0),
                                               [](const auto& a, const auto& b) { return a.first < b.first; });
        if (!target && from_slot(r) < 0) complete = false;
      }
      if (!complete && Written(bw.block)) {
        bw.rmw = NewOp(IoOp::kRead, bw.block);
        ops_[static_cast<uint32_t>(bw.rmw)].kind = Op::Kind::kRmwRead;
        ++stats_.rmw_reads;
      }
    }
    if (absl::Status s = Submit(); !s.ok() && first_error.ok()) first_error = s;
    auto all_done = [&](bool writes) {
      for (const BlockWrite& bw : chunk) {
        const int64_t op = writes ? bw.op : bw.rmw;
        if (op >= 0 && !ops_[static_cast<uint32_t>(op)].done) return false;
      }
      return true;
    };
    while (!all_done(false)) {
      if (absl::Status s = ReapSome(); !s.ok()) return s;
    }
    // The images: the old block (read), or initial values for a block never
    // written, then every row DRAM has.
    for (BlockWrite& bw : chunk) {
      Op& w = ops_[bw.op];
      std::byte* image = w.buffer.get();
      const int64_t first = layout.first_row(bw.block);
      if (bw.rmw >= 0) {
        Op& r = ops_[static_cast<uint32_t>(bw.rmw)];
        if (r.result != layout.block_bytes) {
          if (first_error.ok()) first_error = IoError(IoOp::kRead, bw.block, r.result);
          failed->push_back(bw.block);
          ReleaseOp(static_cast<uint32_t>(bw.rmw));
          ReleaseOp(bw.op);
          bw.op = UINT32_MAX;
          continue;
        }
        std::memcpy(image, r.buffer.get(), static_cast<size_t>(layout.block_bytes));
        ReleaseOp(static_cast<uint32_t>(bw.rmw));
      } else {
        std::memset(image, 0, static_cast<size_t>(layout.block_bytes));
        if (!Written(bw.block)) {
          for (int64_t r = first; r < first + layout.rows_in(bw.block); ++r) InitRow(r, image + layout.offset_in_block(r));
        }
      }
      bw.also_begin = also.size();
      for (int64_t r = first; r < first + layout.rows_in(bw.block); ++r) {
        const int64_t s = from_slot(r);
        if (s < 0) continue;
        std::memcpy(image + layout.offset_in_block(r), Slot(static_cast<uint32_t>(s)), row_bytes_);
        if (flags[s].load(std::memory_order_relaxed) & kDirty) also.push_back(static_cast<uint32_t>(s));
      }
      bw.also_end = also.size();
      for (size_t k = bw.begin; k < bw.end; ++k) {  // the targets, pinned or not
        std::memcpy(image + layout.offset_in_block(rows[k].first), Slot(rows[k].second), row_bytes_);
      }
      requests_.push_back({IoOp::kWrite, layout.file_offset(bw.block), image, static_cast<uint32_t>(layout.block_bytes),
                           bw.op});
    }
    if (absl::Status s = Submit(); !s.ok() && first_error.ok()) first_error = s;
    for (const BlockWrite& bw : chunk) {
      if (bw.op == UINT32_MAX) continue;
      while (!ops_[bw.op].done) {
        if (absl::Status s = ReapSome(); !s.ok()) return s;
      }
      const int64_t result = ops_[bw.op].result;
      ReleaseOp(bw.op);
      if (result != layout.block_bytes) {
        if (first_error.ok()) first_error = IoError(IoOp::kWrite, bw.block, result);
        failed->push_back(bw.block);
        continue;
      }
      written_[bw.block >> 6] |= uint64_t{1} << (bw.block & 63);
      auto clean = [&](uint32_t slot) {
        flags[slot].fetch_and(static_cast<uint8_t>(~kDirty), std::memory_order_relaxed);
        ++stats_.rows_written;
      };
      for (size_t k = bw.begin; k < bw.end; ++k) clean(rows[k].second);
      // A target is in `also` too when it was resident and ready: once is enough.
      for (size_t k = bw.also_begin; k < bw.also_end; ++k) {
        if (flags[also[k]].load(std::memory_order_relaxed) & kDirty) clean(also[k]);
      }
    }
  }
  std::sort(failed->begin(), failed->end());
  return first_error;
}

absl::Status SsdCore::FlushDirty() {
  std::unique_lock<std::mutex> lock = Lock();
  return FlushDirtyLocked();
}

absl::Status SsdCore::FlushDirtyLocked() {
  std::vector<std::pair<int64_t, uint32_t>> dirty;
  for (int64_t s = 0; s < capacity; ++s) {
    const int64_t row = slot_row_[s];
    if (row >= 0 && (flags[s].load(std::memory_order_relaxed) & kDirty)) dirty.emplace_back(row, static_cast<uint32_t>(s));
  }
  std::vector<int64_t> failed;
  return WriteBack(dirty, /*include_pinned=*/true, &failed);
}

absl::Status SsdCore::DrainIo() {
  while (file_.io().in_flight() > 0) {
    if (absl::Status s = ReapSome(); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status SsdCore::EvictUnpinned() {
  std::unique_lock<std::mutex> lock = Lock();
  victims_.clear();
  for (int64_t s = 0; s < capacity; ++s) {
    const int64_t row = slot_row_[s];
    if (row < 0 || pins_[s] > 0 || (map[row].load(std::memory_order_relaxed) & kLoading)) continue;
    flags[s].fetch_or(kChosen, std::memory_order_relaxed);
    victims_.push_back(static_cast<uint32_t>(s));
  }
  return Evict();
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
  const uint8_t touch = for_update ? kReferenced | kDirty : kReferenced;
  if (!broken_.ok()) return poison_.get();  // status() says why
  uint32_t w = map[row].load(std::memory_order_acquire);
  if (w == 0) {
    absl::Status error;
    std::optional<uint32_t> slot = TakeSlot(&error);
    if (!slot.has_value()) {
      if (status_.ok()) status_ = error;
      return poison_.get();
    }
    const uint32_t s = *slot;
    ++stats_.sync_fetches;
    slot_row_[s] = row;
    flags[s].store(0, std::memory_order_relaxed);
    const int64_t block = layout.block_of(row);
    if (!Written(block)) {
      InitRow(row, Slot(s));
      map[row].store(s + 1, std::memory_order_release);
      ++stats_.lazy_rows;
    } else {
      const uint32_t op = NewOp(IoOp::kRead, block);
      ops_[op].rows.emplace_back(row, s);
      loading_op_[s] = op;
      map[row].store((s + 1) | kLoading, std::memory_order_relaxed);
      if (absl::Status st = Submit(); !st.ok() && status_.ok()) status_ = st;
    }
    w = map[row].load(std::memory_order_acquire);
  }
  // In flight (ours, or a prefetch's): wait for it.
  while (w & kLoading) {
    if (absl::Status st = ReapSome(); !st.ok()) {
      if (status_.ok()) status_ = st;
      return poison_.get();
    }
    w = map[row].load(std::memory_order_acquire);
  }
  if (w == 0) {  // the read failed
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

#define CEMB_SSD_INSTANTIATE(...) template class __VA_ARGS__;
CEMB_FOR_EACH_SSD_TABLE(CEMB_SSD_INSTANTIATE)
#undef CEMB_SSD_INSTANTIATE
