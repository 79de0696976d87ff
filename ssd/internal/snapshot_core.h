// SnapshotCore: everything of a SnapshotTable that does not depend on its
// element type (ssd/snapshot_table.h is the API, docs/ssd.md "Serving reads"
// the design). One instance per table, behind a pointer so the table is
// movable. Not API.
#ifndef CEMB_SSD_INTERNAL_SNAPSHOT_CORE_H_
#define CEMB_SSD_INTERNAL_SNAPSHOT_CORE_H_

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/file.h"
#include "ssd/block_file.h"
#include "ssd/block_io.h"
#include "ssd/internal/snapshot_format.h"

namespace cemb {

struct SnapshotTableOptions {
  // An ssd snapshot (SsdTable::SaveSnapshot, format 2). Opened once, read
  // only; the path is never used again.
  std::string path;
  // DRAM for resident rows (the features only): capacity_rows() =
  // capacity_bytes / slot_bytes(); at least one slot.
  int64_t capacity_bytes = 0;
  // Entries of each request's io_uring (a request's reads beyond it wait in
  // that ring's backlog).
  int queue_depth = 64;
  DirectIo direct = DirectIo::kAuto;
  // Tests: wraps each ring's backend (a Gate, a FaultInjectingBlockIo); the
  // argument counts the rings made so far (0 for the first).
  std::function<std::unique_ptr<BlockIo>(std::unique_ptr<BlockIo>, int ring)> wrap_io;
};

// Counts since the table was opened (stats()).
struct SnapshotStats {
  int64_t lookups = 0;       // rows asked by Start / Resolve (each index)
  int64_t hits = 0;          // of them, resident without a lock
  int64_t misses = 0;        // distinct rows per request that were not
  int64_t shared = 0;        // of the misses, rows another request was reading: waited for, not read again
  int64_t rows_read = 0;     // rows installed from the file
  int64_t lazy_rows = 0;     // rows installed from the seed (not in the snapshot)
  int64_t reads = 0;         // read requests (each a run of adjacent 4 KiB blocks)
  int64_t failed_reads = 0;
  int64_t evictions = 0;
  int64_t rings = 0;         // io_urings made (one per request in flight at once, at most)
  // The rings' counters, added when a request gives its ring back: exact
  // when no request is in flight.
  IoCounters io;
  double hit_rate() const { return lookups == 0 ? 0.0 : static_cast<double>(hits) / static_cast<double>(lookups); }
};

namespace ssd_internal {
class SnapshotCore;
// An io_uring of a table's pool, lent to one request at a time.
struct SnapshotRing {
  std::unique_ptr<BlockIo> io;
  IoCounters added;  // of its counters, those already in stats
};
}  // namespace ssd_internal

// One request's pins on one table, and the scratch its misses use (kept
// for the next request: a warm SnapshotPins allocates nothing). Give each
// request thread its own. It holds one call (Start .. Finish) at a time,
// and between the two the ring its reads are in flight on. Release() it
// when the request's kernels are done; REQUIRES: released before it is
// destroyed (a pin left behind keeps its slot from eviction for ever).
class SnapshotPins {
 public:
  SnapshotPins() = default;
  SnapshotPins(const SnapshotPins&) = delete;
  SnapshotPins& operator=(const SnapshotPins&) = delete;
  // Slots pinned (a row asked twice is pinned twice).
  int64_t size() const { return static_cast<int64_t>(slots_.size()); }
  // A call started (Start) and not yet finished.
  bool started() const { return phase_ != Phase::kIdle; }

 private:
  friend class ssd_internal::SnapshotCore;
  // Of the call in progress: kReading, its reads may be in flight (its
  // loads not installed); kWaiting, its loads installed, the rows other
  // requests load not yet waited for.
  enum class Phase : uint8_t { kIdle, kReading, kWaiting };
  struct Miss {
    uint32_t row;
    uint32_t position;  // in the request
  };
  struct Load {
    uint32_t row;
    uint32_t slot;
    uint32_t index;  // in rows_
    uint64_t begin;  // the row's features in the file: [begin, begin + feature bytes); kLazy: not in the file
    bool ok;
  };
  struct Run {  // one read: adjacent blocks
    uint64_t first_block;
    uint32_t blocks;
    size_t buffer_offset;
    int64_t result;  // bytes read, or -errno
  };
  Phase phase_ = Phase::kIdle;
  size_t first_pin_ = 0;  // slots_[first_pin_, ...) are the call's
  absl::Status error_;    // the call's first failure (a read, the ring), for Finish
  std::vector<uint32_t> slots_;
  std::vector<Miss> misses_;
  std::vector<uint32_t> rows_;  // the distinct missed rows, in order
  std::vector<const std::byte*> addresses_;  // of rows_, once resolved
  std::vector<uint32_t> pending_, next_;     // indices into rows_ still to resolve
  std::vector<Load> loads_;     // rows this request reads or computes
  std::vector<Load> waits_;     // rows another request is loading, pinned, not yet waited for
  std::vector<uint64_t> blocks_;
  std::vector<Run> runs_;
  std::vector<BlockRequest> requests_;
  std::vector<BlockCompletion> done_;
  std::unique_ptr<std::byte, decltype(&std::free)> buffer_{nullptr, &std::free};
  size_t buffer_bytes_ = 0;
  // Borrowed from the table while the call's reads are in flight. After
  // buffer_, so that it goes first (waiting for the reads into buffer_).
  std::unique_ptr<ssd_internal::SnapshotRing> ring_;
};

namespace ssd_internal {

// Writes the initial features of `row` (feature_bytes bytes) to `out`;
// null for a snapshot converted for serving, which holds every row.
using SnapshotInitFn = void (*)(uint64_t seed, int64_t nvectors, int64_t row, int64_t featuresize, void* out);

class SnapshotCore {
 public:
  static absl::StatusOr<std::unique_ptr<SnapshotCore>> Open(std::string name, int64_t nvectors,
                                                            int64_t featuresize, size_t feature_bytes,
                                                            size_t row_bytes, uint32_t row_format,
                                                            const SnapshotTableOptions& options,
                                                            SnapshotInitFn init_row);
  ~SnapshotCore();

  // A call in two halves (ssd/snapshot_table.h has the contracts):
  // Start pins the hits, claims the misses and submits their reads, never
  // waiting; Install reaps the call's reads and installs its rows, waiting
  // only for the device; Finish installs (if not yet), then waits for the
  // rows other requests load. out[i] = the DRAM address of rows[i]'s
  // features, for hits at Start, for the rest at Finish.
  template <typename Index>
  absl::Status Start(std::span<const Index> rows, SnapshotPins* pins, const std::byte** out);
  void Install(SnapshotPins* pins);
  absl::Status Finish(SnapshotPins* pins, const std::byte** out);
  // Ends a started call without waiting for other requests: installs its
  // reads (other requests may be waiting for them) and unpins every row of
  // the call. No-op when no call is started.
  void Abandon(SnapshotPins* pins);
  template <typename Index>
  absl::Status Resolve(std::span<const Index> rows, SnapshotPins* pins, const std::byte** out) {
    if (absl::Status s = Start(rows, pins, out); !s.ok()) return s;
    return Finish(pins, out);
  }
  // Unpins every row of *pins (abandoning a call still started).
  void Release(SnapshotPins* pins);

  SnapshotStats stats() const;
  const std::string& name() const { return name_; }
  const std::string& path() const { return path_; }
  int64_t nvectors() const { return nvectors_; }
  int64_t capacity() const { return capacity_; }
  size_t stride() const { return stride_; }
  int64_t snapshot_rows() const { return snapshot_rows_; }
  bool direct() const { return direct_; }
  int fd() const { return file_.fd(); }
  bool is_resident(int64_t row) const { return state_[row].load(std::memory_order_acquire) - 1 < kLoading; }

 private:
  // A row's state word: 0 not resident; slot + 1 resident; kLoading |
  // (slot + 1) a request is reading or computing it into that slot.
  static constexpr uint32_t kLoading = uint32_t{1} << 31;
  // In a slot's pin count: the slot is being taken by an eviction.
  static constexpr uint32_t kClaimed = uint32_t{1} << 31;
  static constexpr uint32_t kNoRow = UINT32_MAX;
  static constexpr uint64_t kLazy = UINT64_MAX;

  SnapshotCore() = default;
  std::byte* Slot(uint32_t s) const { return pool_.get() + static_cast<size_t>(s) * stride_; }
  // The hit path: pins row's slot if it is resident; no lock.
  const std::byte* TryHit(uint32_t row, SnapshotPins* pins);
  // Under mu_, for the rows pins->pending_: pins the resident ones, pins and
  // lists in waits_ those another request is loading, takes a slot and marks
  // loading the others (loads_). ResourceExhausted when a slot is missing:
  // then nothing of this round stays claimed or pinned.
  absl::Status Claim(SnapshotPins* pins);
  // Under mu_: a slot for a new row, claimed (pin count kClaimed), or nullopt
  // when every slot is pinned.
  std::optional<uint32_t> TakeSlot();
  // Submits the reads of pins->loads_ (one per run of adjacent blocks) on a
  // ring it borrows into pins->ring_, then computes the rows not in the
  // snapshot. Never waits; a failure is kept in pins->error_.
  void SubmitLoads(SnapshotPins* pins);
  // Waits for the rows of pins->waits_: pinned in slots_ when resident,
  // else (their loader failed) unpinned and listed in next_.
  void AwaitShared(SnapshotPins* pins);
  // Unpins the rows of waits_ (not waited for) and those of the call.
  void UnpinCall(SnapshotPins* pins);
  void ReturnRing(std::unique_ptr<SnapshotRing> ring, bool healthy);
  std::unique_ptr<SnapshotRing> BorrowRing();
  absl::Status ReadError(uint64_t offset, uint64_t bytes, int64_t result) const;

  std::string name_, path_;
  base::File file_;
  bool direct_ = false;
  int64_t nvectors_ = 0, featuresize_ = 0;
  size_t feature_bytes_ = 0, row_bytes_ = 0, stride_ = 0;
  int64_t capacity_ = 0;
  int64_t snapshot_rows_ = 0;
  SnapshotRows rows_;  // where the snapshot's rows lie
  std::optional<uint64_t> seed_;
  SnapshotInitFn init_row_ = nullptr;
  SnapshotTableOptions options_;

  std::vector<uint32_t> position_;                    // per row: its index in the snapshot, or kNoRow
  std::unique_ptr<std::atomic<uint32_t>[]> state_;    // per row
  std::unique_ptr<std::atomic<uint32_t>[]> pins_;     // per slot: requests holding it (| kClaimed)
  std::unique_ptr<std::atomic<uint8_t>[]> referenced_;  // per slot: CLOCK's second chance
  std::unique_ptr<std::byte, decltype(&std::free)> pool_{nullptr, &std::free};

  // mu_ guards the misses' bookkeeping: slot_row_, the CLOCK hand, the
  // transitions of state words from and to kLoading, and evictions. Never
  // held across I/O. Hits do not take it.
  mutable std::mutex mu_;
  std::condition_variable loaded_;  // a load ended (its rows resident, or back to not resident)
  std::vector<uint32_t> slot_row_;  // per slot: its row, or kNoRow (free)
  int64_t hand_ = 0;
  int64_t unused_ = 0;  // slots [unused_, capacity_) never handed out

  mutable std::mutex rings_mu_;  // the free rings, and stats_.io
  std::vector<std::unique_ptr<SnapshotRing>> free_rings_;
  int rings_made_ = 0;
  IoCounters io_;

  std::atomic<int64_t> lookups_{0}, hits_{0}, misses_{0}, shared_{0}, rows_read_{0}, lazy_rows_{0}, reads_{0},
      failed_reads_{0}, evictions_{0};
};

}  // namespace ssd_internal
}  // namespace cemb

#endif  // CEMB_SSD_INTERNAL_SNAPSHOT_CORE_H_
