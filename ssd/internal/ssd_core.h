// SsdCore: everything of an SsdTable that does not depend on its element type
// (ssd/ssd_table.h is the API and documents the design). One instance per
// table, behind a pointer so the table is movable. Not API.
#ifndef CEMB_SSD_INTERNAL_SSD_CORE_H_
#define CEMB_SSD_INTERNAL_SSD_CORE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "embedding/memory.h"
#include "ssd/block_file.h"
#include "ssd/block_io.h"

namespace cemb {

// Which unpinned row a full slot pool gives up.
enum class Eviction {
  kClock,  // second chance: a row used since the hand last passed is skipped once
  kFifo,   // the oldest row, used or not (for comparison)
};

struct SsdOptions {
  // DRAM for resident rows (the slot pool): capacity_rows() = bytes / slot_bytes().
  int64_t capacity_bytes = 0;
  // Where the rows file lives: `directory` or `path`, queue depth, O_DIRECT
  // policy, test hooks. `bytes` is set by the table.
  BlockFileOptions file;
  // Rows never written read as InitRowUniform(*init_seed, nvectors, row)
  // (embedding/table_io.h), computed when first needed; without a seed, as zeros.
  std::optional<uint64_t> init_seed;
  Eviction eviction = Eviction::kClock;
};

// Counts since the table was made (stats()).
struct SsdStats {
  int64_t prefetch_rows = 0;      // distinct rows per batch asked by Prefetch
  int64_t prefetch_hits = 0;      // of them, resident (or already in flight)
  int64_t fetched_rows = 0;       // rows read from the file (one block read may bring several)
  int64_t lazy_rows = 0;          // rows computed, never read (block never written)
  int64_t sync_fetches = 0;       // rowpointer() of a row not resident
  int64_t evictions = 0;
  int64_t dirty_evictions = 0;    // of them, written back
  int64_t rows_written = 0;       // dirty rows written back (evictions and FlushDirty)
  int64_t rmw_reads = 0;          // blocks read to patch a partial write
  absl::Duration waited;          // in WaitResident
  IoCounters io;

  double hit_rate() const {
    return prefetch_rows == 0 ? 0.0 : static_cast<double>(prefetch_hits) / static_cast<double>(prefetch_rows);
  }
  // Bytes read from the file per byte of rows fetched.
  double read_amplification(int64_t row_bytes) const {
    return fetched_rows == 0 ? 0.0
                             : static_cast<double>(io.bytes_read) / static_cast<double>(fetched_rows * row_bytes);
  }
  std::string ToString(int64_t row_bytes) const;
};

// SaveSnapshot / LoadSnapshot (ssd/ssd_table.h; the format is in docs/ssd.md).
struct SnapshotOptions {
  // Gets a line ("emb0: snapshot 12.3 of 40.0 GiB") at most every
  // `progress_every` while blocks are copied; never called when empty.
  std::function<void(std::string_view line)> progress;
  absl::Duration progress_every = absl::Seconds(5);
  // Tests: copy through the table's BlockIo (pread/pwrite or io_uring), as
  // where the kernel refuses copy_file_range, without asking the kernel.
  bool force_block_io = false;
};

// What a snapshot held and how it was copied.
struct SnapshotInfo {
  int64_t written_blocks = 0;   // blocks copied (the rest are lazy: the seed makes them)
  uint64_t file_bytes = 0;      // the snapshot's size: header and bitmap (4 KiB-aligned) + the blocks
  bool copy_file_range = false; // false: through the BlockIo (forced, or the kernel refused)
  absl::Duration took;
};

namespace ssd_internal {

// Residency map word of a row: 0 = not resident, slot + 1 = resident,
// (slot + 1) | kLoading = its block read is in flight.
inline constexpr uint32_t kLoading = uint32_t{1} << 31;
// Slot flags.
inline constexpr uint8_t kReferenced = 1;  // used since the CLOCK hand passed
inline constexpr uint8_t kDirty = 2;       // handed out for an update since written back
inline constexpr uint8_t kChosen = 4;      // picked as a victim by the running eviction

// Writes the initial value of `row` (row_bytes bytes) to `out`.
using InitRowFn = void (*)(uint64_t seed, int64_t nvectors, int64_t row, int64_t featuresize, void* out);

class SsdCore {
 public:
  static absl::StatusOr<std::unique_ptr<SsdCore>> Create(std::string name, int64_t nvectors, int64_t featuresize,
                                                         size_t row_bytes, const SsdOptions& options,
                                                         InitRowFn init_row);
  ~SsdCore();

  absl::Status Prefetch(int64_t batch_id, std::span<const int64_t> rows);
  absl::Status Prefetch(int64_t batch_id, std::span<const int32_t> rows);
  absl::StatusOr<absl::Duration> WaitResident(int64_t batch_id);
  absl::Status Unpin(int64_t batch_id);
  absl::Status FlushDirty();
  absl::Status EvictUnpinned();
  absl::StatusOr<SnapshotInfo> SaveSnapshot(const std::string& path, const SnapshotOptions& options);
  absl::StatusOr<SnapshotInfo> LoadSnapshot(const std::string& path, const SnapshotOptions& options);
  // The miss path of rowpointer(): a DRAM address for `row`, whatever it takes.
  std::byte* Fetch(int64_t row, bool for_update);

  SsdStats stats() const;
  absl::Status status() const;
  int64_t pinned_rows() const;

  // Read by the table's inline hot path.
  std::atomic<uint32_t>* map = nullptr;   // nvectors words
  std::atomic<uint8_t>* flags = nullptr;  // per slot
  std::byte* pool = nullptr;              // capacity slots of `stride` bytes
  size_t stride = 0;
  int64_t capacity = 0;
  BlockLayout layout;
  const std::string& name() const { return name_; }
  const BlockFile& file() const { return file_; }

 private:
  struct Batch;
  struct Op;
  SsdCore() = default;

  template <typename Index>
  absl::Status PrefetchImpl(int64_t batch_id, std::span<const Index> rows);
  Batch* FindBatch(int64_t id);
  void UnpinSlots(Batch& b);
  void RemoveBatch(int64_t id);
  std::byte* Slot(uint32_t s) const { return pool + static_cast<size_t>(s) * stride; }
  bool Written(int64_t block) const { return (written_[block >> 6] >> (block & 63)) & 1; }
  void InitRow(int64_t row, std::byte* out) const;

  // CLOCK: appends up to k unpinned, resident victims to victims_ (marked kChosen).
  void FindVictims(int64_t k);
  // Writes back the dirty victims and frees every victim whose row is safe.
  absl::Status Evict();
  // Writes `rows` (dirty, resident) back in whole blocks; the block's other
  // rows come from their slots (ready; unpinned unless include_pinned), else
  // from the file (a read-modify-write) or their initial values. Rows of a
  // block whose write failed stay dirty; *failed gets their blocks.
  absl::Status WriteBack(std::vector<std::pair<int64_t, uint32_t>>& rows, bool include_pinned,
                         std::vector<int64_t>* failed);
  // A free slot (evicting one if needed), or nullopt when every slot is pinned.
  std::optional<uint32_t> TakeSlot(absl::Status* error);

  uint32_t NewOp(IoOp op, int64_t block);
  void ReleaseOp(uint32_t id);
  absl::Status Submit();
  // Reaps at least one completion (when any is in flight) and applies them.
  absl::Status ReapSome();
  void Complete(const BlockCompletion& c);
  absl::Status IoError(IoOp op, int64_t block, int64_t result) const;
  absl::Status FlushDirtyLocked();
  // Reaps every request in flight (reads of batches unpinned before their
  // WaitResident), so the snapshot's own requests have the BlockIo alone.
  absl::Status DrainIo();

  // ssd_snapshot.cc: copies the blocks set in `bitmap`, in block order, between
  // the rows file and the snapshot's descriptor (whose blocks start at
  // data_offset): with copy_file_range, else through the BlockIo.
  enum class CopyTo { kSnapshot, kRows };
  absl::Status CopyBlocks(CopyTo to, int snapshot_fd, const std::string& snapshot_name,
                          const std::vector<uint64_t>& bitmap, uint64_t data_offset, const SnapshotOptions& options,
                          SnapshotInfo* info);
  // `count` blocks from `first` on, read into or written from `buffer` (contiguous) with one
  // batch of BlockIo requests; the first failure names the table, file, operation and offset.
  absl::Status BlockIoBatch(IoOp op, int64_t first, int64_t count, std::byte* buffer);

  std::string name_;
  int64_t nvectors_ = 0, featuresize_ = 0;
  size_t row_bytes_ = 0;
  std::optional<uint64_t> seed_;
  Eviction eviction_ = Eviction::kClock;
  InitRowFn init_row_ = nullptr;

  // Takes mu_ (every non-const member does it this way) and applies the
  // Unpins that came while another thread held it.
  std::unique_lock<std::mutex> Lock();
  void ApplyPendingUnpins();                 // REQUIRES: mu_ held
  absl::Status UnpinBatch(int64_t batch_id);  // REQUIRES: mu_ held

  // Unpin of a batch while mu_ is held (the prefetcher in a long Prefetch
  // waits for its write-back under it): the batch id waits here and is
  // unpinned by the next Lock(), so a step's end never waits for the disk.
  std::mutex unpin_mu_;
  std::vector<int64_t> pending_unpins_;  // guarded by unpin_mu_

  mutable std::mutex mu_;  // everything below, and every I/O
  Region map_region_, pool_region_;
  std::unique_ptr<std::atomic<uint8_t>[]> flags_storage_;
  std::unique_ptr<int64_t[]> slot_row_;       // slot -> row, -1 = none
  std::unique_ptr<int32_t[]> pins_;           // batches pinning the slot
  std::unique_ptr<uint64_t[]> pin_mark_;      // seq of the last batch that pinned it
  std::unique_ptr<uint32_t[]> loading_op_;    // the fetch op of a loading slot
  std::vector<uint32_t> free_;
  int64_t hand_ = 0;
  int64_t pinned_slots_ = 0;
  std::vector<uint64_t> written_;             // per block: ever written to the file
  BlockFile file_;
  std::vector<Batch> batches_;
  uint64_t seq_ = 0;
  std::vector<Op> ops_;
  std::vector<uint32_t> free_ops_;
  std::vector<BlockRequest> requests_;        // to submit
  std::vector<BlockCompletion> done_;         // scratch
  std::vector<uint32_t> victims_;             // scratch
  std::vector<int64_t> missing_;              // scratch
  std::unique_ptr<std::byte[]> poison_;       // NaN row returned after a failed fetch
  absl::Status status_;                       // first failure of a fetch in rowpointer()
  absl::Status broken_;                       // a LoadSnapshot failed part way: rows undefined, refuses use
  absl::Status last_read_error_;
  SsdStats stats_;
};

}  // namespace ssd_internal
}  // namespace cemb

#endif  // CEMB_SSD_INTERNAL_SSD_CORE_H_
