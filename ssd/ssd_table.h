// SsdTable<T, D>: an embedding table larger than DRAM. Its rows live in a
// file on an NVMe drive that is a log (ssd/log_layout.h): dirty rows are
// appended in 1 MiB segment writes, missed rows read in 4 KiB blocks, with
// io_uring and O_DIRECT, never mapped; DRAM holds a pool of row slots and a
// map word per row. rowpointer() always returns a DRAM address: a row is
// in DRAM before a kernel touches it. docs/ssd.md is the design.
//
// A training step: Prefetch(k, rows of batch k) finds the rows not resident,
// takes slots for them (evicting unpinned rows), submits one read per
// distinct block (rows of blocks never written are computed, not read: lazy
// initialisation) and pins the batch's rows; WaitResident(k) waits only for
// the reads still in flight; kernels run; Unpin(k) ends the step. Prefetch
// of batch k+1 may come before WaitResident(k): its reads overlap step k.
//
// DRAM: capacity_bytes of slots (row bytes rounded up to 8 each); per slot
// kSsdSlotMetadataBytes (33) of metadata (row, its copy in the log, pins,
// flags, the batch that last pinned it, its read, the free list); per row 4
// bytes, the map (a slot index, "read in flight", "never written", or the
// place of its copy in the log: an array, not a hash table, so a hit costs
// one load; anonymous memory, so rows never touched cost nothing); the
// log's write and collector buffers, about 6 MiB (SsdFixedDramBytes).
//
// Eviction: CLOCK (second chance) over the unpinned slots; rows of a pinned
// batch are never evicted. A dirty victim (handed out for kUpdate since last
// written) is copied into the log's open segment (nothing is read to write
// it); a full segment is written with one request behind the batch's reads.
// A failed segment write keeps its rows in the write buffer (served from
// there) and is reported by the next Prefetch; never lost. A collector
// appends the live rows of mostly dead segments again, so the file stays
// within 1.5x the table's rows (SsdOptions::file_space) plus 8 segments.
//
// Lifetime of a rowpointer() address: for a row of a pinned batch, until
// Unpin of every batch that pins it; for any other row, until the next miss
// of this table (a Prefetch that evicts, or rowpointer() of a row not
// resident, from any thread), which may evict it.
//
// rowpointer() of a row not resident (a user who did not prefetch): a
// synchronous read of its block, submitted under the table's mutex (plus a
// copy of the victim into the log if it is dirty) and waited for with the
// mutex released, its slot pinned: misses of several threads are in flight
// together, but each call reads one row, so a thread that misses k rows
// pays k device latencies (a serving request: SnapshotTable, in
// ssd/snapshot_table.h, reads them in one batch, and those of all the
// tables it touches at once: SnapshotRequest). Correct from any number
// of threads. If it fails (an I/O error, every slot pinned), it returns a
// row of NaNs and status() says why.
//
// Errors: I/O errors come back from Prefetch / WaitResident / FlushDirty as a
// Status naming the table, the file, the operation and the offset
// ("t0: /nvme/(unnamed temporary file): read of 4096 bytes at offset 8192
// failed: Input/output error"); the rows concerned stay where they were (in
// the file, or resident and dirty), so the table stays consistent.
//
// Checkpoints: SaveSnapshot(path) appends the dirty rows and copies the live
// rows of the log, compacted (row ids, then rows), into one file; rows never
// written are not copied (the seed makes them again), nor is the log's
// garbage. A checkpoint costs the rows training has written, not the table.
// LoadSnapshot(path) appends them to a fresh log of a table of the same shape.
//
// Thread safety: rowpointer() from any number of threads (a hit is one
// acquire load and, the first time after the CLOCK hand passed, one relaxed
// fetch_or); as for every table, an update of a row must not overlap another
// access to the same row. Prefetch, WaitResident, Unpin and FlushDirty may
// come from another thread than the kernels' (they take the mutex), but
// FlushDirty needs no kernel running on the table.
//
// Example:
//   auto t = SsdTable<float, 64>::Create({.name = "t0", .nvectors = 1 << 28},
//                                        {.capacity_bytes = 1 << 30, .file = {.directory = "/nvme"}, .init_seed = 7});
//   CEMB_RETURN_IF_ERROR(t->Prefetch(k, rows_of_batch_k));
//   CEMB_ASSIGN_OR_RETURN(absl::Duration waited, t->WaitResident(k));
//   ... kernels over t (compiled per ISA by ssd/CMakeLists.txt) ...;  CEMB_RETURN_IF_ERROR(t->Unpin(k));
#ifndef CEMB_SSD_SSD_TABLE_H_
#define CEMB_SSD_SSD_TABLE_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "embedding/internal/feature_sizes.h"
#include "embedding/simple_table.h"
#include "embedding/table_io.h"
#include "ssd/block_file.h"
#include "ssd/internal/ssd_core.h"

namespace cemb {

template <StorageType T, int64_t D = kDynamic>
class SsdTable {
 public:
  using value_type = T;
  static constexpr int64_t kFeatureSize = D;
  static_assert(D == kDynamic || D > 0);

  // Creates the file (fallocate'd: no space is an error now, naming the
  // directory and the bytes) and an empty slot pool; no row is read or
  // written. Rows read as their initial values (ssd.init_seed) or zeros.
  // table.tier is not used: slots are DRAM, rows are in ssd.file.
  [[nodiscard]] static absl::StatusOr<SsdTable> Create(const TableOptions& table, const SsdOptions& ssd);

  SsdTable(SsdTable&&) noexcept = default;
  SsdTable& operator=(SsdTable&&) noexcept = default;

  // --- the rowpointer interface ------------------------------------------

  [[gnu::always_inline]] constexpr int64_t featuresize() const {
    if constexpr (D != kDynamic) {
      return D;
    } else {
      return featuresize_;
    }
  }
  [[gnu::always_inline]] int64_t nvectors() const { return nvectors_; }
  const std::string& name() const { return core_->name(); }

  // A DRAM address of `row`, always. kForward marks the row used (CLOCK),
  // kUpdate used and dirty, kWrite dirty (it will be written back);
  // kRead has no side effect on a resident row;
  // kPrefetch never fetches (a row not resident gives the pool's first slot,
  // a harmless prefetch address).
  [[gnu::always_inline]] T* rowpointer(int64_t row, Access kind = Access::kForward) const {
    const uint32_t s = map_[row].load(std::memory_order_acquire) - 1;
    if (s < ssd_internal::kMaxSlots) [[likely]] {
      if (kind != Access::kRead && kind != Access::kPrefetch) {
        const uint8_t want = kind == Access::kUpdate ? ssd_internal::kReferenced | ssd_internal::kDirty
                             : kind == Access::kWrite ? ssd_internal::kDirty
                                                      : ssd_internal::kReferenced;
        if ((flags_[s].load(std::memory_order_relaxed) & want) != want) {
          flags_[s].fetch_or(want, std::memory_order_relaxed);
        }
      }
      return reinterpret_cast<T*>(pool_ + static_cast<size_t>(s) * stride_);
    }
    if (kind == Access::kPrefetch) return reinterpret_cast<T*>(pool_);
    return Miss(row, kind == Access::kUpdate || kind == Access::kWrite);
  }

  // --- a training step ---------------------------------------------------

  // Pins the distinct rows of `rows` for batch `batch_id` and starts reading
  // those not resident. Errors: a row out of range, a batch already pinned,
  // too few slots for the rows pinned at once (ResourceExhausted, saying how
  // many bytes they need), a failed write-back of a victim. On error nothing
  // of this batch stays pinned.
  [[nodiscard]] absl::Status Prefetch(int64_t batch_id, std::span<const int64_t> rows);
  [[nodiscard]] absl::Status Prefetch(int64_t batch_id, std::span<const int32_t> rows);
  // Prefetch of rows the caller has checked against nvectors() and made
  // distinct (an UpdatePlan's rows(), embedding/reindex.h): neither is done
  // again. REQUIRES: every row in [0, nvectors()), none twice.
  [[nodiscard]] absl::Status PrefetchDistinct(int64_t batch_id, std::span<const int64_t> rows);
  // Waits for the batch's reads still in flight; returns the time waited.
  // A failed read is an error here (the batch stays pinned: Unpin it).
  [[nodiscard]] absl::StatusOr<absl::Duration> WaitResident(int64_t batch_id);
  // The step is done with the batch's rows.
  [[nodiscard]] absl::Status Unpin(int64_t batch_id);
  // Appends every dirty row to the log, writes the open segment and waits
  // for every segment write, and marks the rows clean; they stay resident.
  // Before a checkpoint. REQUIRES: no kernel running.
  [[nodiscard]] absl::Status FlushDirty();
  // Appends the dirty unpinned rows to the log and drops every unpinned row
  // (tests; a smaller DRAM share).
  // REQUIRES: no kernel running on unpinned rows.
  [[nodiscard]] absl::Status EvictUnpinned();

  // --- snapshots (checkpoints) ------------------------------------------------

  // Appends every dirty row to the log, then writes `path` (through
  // "<path>.tmp", fsync'd, renamed): a header (nvectors, row bytes, seed,
  // rows), the row ids, and the rows that have a copy in the log, each once
  // (docs/ssd.md, format 2). Pinned batches may stay pinned. Errors name the
  // table, the file and the operation; on an error `path` is left as it was
  // (the .tmp is removed) and the table holds the same values.
  // REQUIRES: no kernel running on the table. NOTE: reads each segment that
  // holds a live row once; the rows stay resident.
  [[nodiscard]] absl::StatusOr<SnapshotInfo> SaveSnapshot(const std::string& path,
                                                          const SnapshotOptions& options = {});
  // Replaces every row by the snapshot's: resident rows are dropped without
  // write-back, the snapshot's rows are appended to an empty log, the others
  // become lazy, computed from the snapshot's init seed, which the table
  // takes (a snapshot of another seed loads as the table it was taken of).
  // A snapshot of another shape (nvectors, row bytes) is InvalidArgument
  // naming the field, a short or corrupt one DataLoss naming the offset;
  // both leave the table as it was (the whole file is checked first). A
  // failure while copying leaves the table refusing use (status(),
  // Prefetch, SaveSnapshot return the error) until a LoadSnapshot succeeds.
  // REQUIRES: no row pinned (FailedPrecondition), no kernel running.
  [[nodiscard]] absl::StatusOr<SnapshotInfo> LoadSnapshot(const std::string& path,
                                                          const SnapshotOptions& options = {});

  // --- inspection ----------------------------------------------------------

  SsdStats stats() const { return core_->stats(); }
  // A failed LoadSnapshot's error (the rows are undefined), else the first
  // failure of rowpointer()'s synchronous fetch, if any.
  absl::Status status() const { return core_->status(); }
  int64_t capacity_rows() const { return core_->capacity; }
  size_t slot_bytes() const { return stride_; }
  // A row's bytes: its features and its optimizer state (in a slot, the
  // log, a snapshot alike).
  size_t row_bytes() const { return core_->row_bytes(); }
  int64_t state_floats() const { return state_floats_; }
  const BlockLayout& layout() const { return core_->layout; }
  const LogLayout& log_layout() const { return core_->log; }
  const BlockFile& file() const { return core_->file(); }
  int64_t pinned_rows() const { return core_->pinned_rows(); }
  bool is_resident(int64_t row) const {
    return map_[row].load(std::memory_order_acquire) - 1 < ssd_internal::kMaxSlots;
  }
  bool is_dirty(int64_t row) const {
    return is_resident(row) && (flags_[map_[row].load(std::memory_order_acquire) - 1].load() & ssd_internal::kDirty);
  }

 private:
  explicit SsdTable(std::unique_ptr<ssd_internal::SsdCore> core, int64_t featuresize, int64_t state_floats)
      : core_(std::move(core)),
        map_(core_->map),
        flags_(core_->flags),
        pool_(core_->pool),
        stride_(core_->stride),
        nvectors_(core_->layout.nvectors),
        featuresize_(featuresize),
        state_floats_(state_floats) {}

  [[gnu::noinline]] T* Miss(int64_t row, bool for_update) const;
  static void InitRow(uint64_t seed, int64_t nvectors, int64_t row, int64_t featuresize, void* out) {
    InitRowUniform(seed, nvectors, row, std::span<T>(static_cast<T*>(out), static_cast<size_t>(featuresize)));
  }

  std::unique_ptr<ssd_internal::SsdCore> core_;
  std::atomic<uint32_t>* map_;
  std::atomic<uint8_t>* flags_;
  std::byte* pool_;
  size_t stride_;
  int64_t nvectors_;
  int64_t featuresize_;
  int64_t state_floats_;
};

// --- implementation ----------------------------------------------------------

template <StorageType T, int64_t D>
absl::StatusOr<SsdTable<T, D>> SsdTable<T, D>::Create(const TableOptions& table, const SsdOptions& ssd) {
  absl::StatusOr<TableOptions> shape = CheckedShape<T, D>(table);
  if (!shape.ok()) return shape.status();
  const int64_t d = shape->featuresize;
  const size_t feature_bytes = static_cast<size_t>(d) * sizeof(T);
  absl::StatusOr<std::unique_ptr<ssd_internal::SsdCore>> core = ssd_internal::SsdCore::Create(
      table.name, table.nvectors, d, feature_bytes, feature_bytes + static_cast<size_t>(table.state_floats) * 4, ssd,
      &SsdTable::InitRow);
  if (!core.ok()) return core.status();
  return SsdTable(*std::move(core), d, table.state_floats);
}

template <StorageType T, int64_t D>
absl::Status SsdTable<T, D>::Prefetch(int64_t batch_id, std::span<const int64_t> rows) {
  return core_->Prefetch(batch_id, rows);
}
template <StorageType T, int64_t D>
absl::Status SsdTable<T, D>::Prefetch(int64_t batch_id, std::span<const int32_t> rows) {
  return core_->Prefetch(batch_id, rows);
}
template <StorageType T, int64_t D>
absl::Status SsdTable<T, D>::PrefetchDistinct(int64_t batch_id, std::span<const int64_t> rows) {
  return core_->PrefetchDistinct(batch_id, rows);
}
template <StorageType T, int64_t D>
absl::StatusOr<absl::Duration> SsdTable<T, D>::WaitResident(int64_t batch_id) {
  return core_->WaitResident(batch_id);
}
template <StorageType T, int64_t D>
absl::Status SsdTable<T, D>::Unpin(int64_t batch_id) {
  return core_->Unpin(batch_id);
}
template <StorageType T, int64_t D>
absl::Status SsdTable<T, D>::FlushDirty() {
  return core_->FlushDirty();
}
template <StorageType T, int64_t D>
absl::Status SsdTable<T, D>::EvictUnpinned() {
  return core_->EvictUnpinned();
}
template <StorageType T, int64_t D>
absl::StatusOr<SnapshotInfo> SsdTable<T, D>::SaveSnapshot(const std::string& path, const SnapshotOptions& options) {
  return core_->SaveSnapshot(path, options);
}
template <StorageType T, int64_t D>
absl::StatusOr<SnapshotInfo> SsdTable<T, D>::LoadSnapshot(const std::string& path, const SnapshotOptions& options) {
  return core_->LoadSnapshot(path, options);
}
template <StorageType T, int64_t D>
T* SsdTable<T, D>::Miss(int64_t row, bool for_update) const {
  return reinterpret_cast<T*>(core_->Fetch(row, for_update));
}

}  // namespace cemb

// The out-of-line members of every SsdTable type are instantiated once, in
// ssd_table.cc (compiled without -m flags): no ISA translation unit emits a
// copy the linker could pick for another path.
#define CEMB_SSD_EXTERN_TEMPLATE(...) extern template class __VA_ARGS__;
CEMB_FOR_EACH_TABLE_TYPE(CEMB_SSD_EXTERN_TEMPLATE, ::cemb::SsdTable)
#undef CEMB_SSD_EXTERN_TEMPLATE

#endif  // CEMB_SSD_SSD_TABLE_H_
