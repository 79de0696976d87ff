// SsdCore: everything of an SsdTable that does not depend on its element type
// (ssd/ssd_table.h is the API and documents the design). One instance per
// table, behind a pointer so the table is movable. Not API.
#ifndef CEMB_SSD_INTERNAL_SSD_CORE_H_
#define CEMB_SSD_INTERNAL_SSD_CORE_H_

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <deque>
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

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "embedding/memory.h"
#include "ssd/block_file.h"
#include "ssd/block_io.h"
#include "ssd/log_layout.h"

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
  // The log (ssd/log_layout.h): the file holds `file_space` times the
  // table's row blocks plus a reserve of segments; the collector keeps the
  // log within it. At least 1.1.
  double file_space = 1.5;
  // Data bytes of a segment; 0: 1 MiB, less for a small table (tests set it).
  int64_t segment_bytes = 0;
};

// DRAM an ssd table takes besides its slots' row bytes: per slot, and
// whatever its pool (the map, the log's segment states and, when it evicts,
// its write and collector buffers: allocated when first needed, so a table
// whose pool holds every row has none). For model.dram_budget
// (train/dram_budget.cc); docs/ssd.md lists them.
inline constexpr int64_t kSsdSlotMetadataBytes = 33;
int64_t SsdFixedDramBytes(int64_t nvectors, int64_t row_bytes, const SsdOptions& options, bool evicts);

// Counts since the table was made (stats()).
struct SsdStats {
  int64_t prefetch_rows = 0;      // distinct rows per batch asked by Prefetch
  int64_t prefetch_hits = 0;      // of them, resident (or already in flight)
  int64_t fetched_rows = 0;       // rows read from the file (one block read may bring several)
  int64_t lazy_rows = 0;          // rows computed, never read (block never written)
  int64_t sync_fetches = 0;       // rowpointer() of a row not resident
  int64_t evictions = 0;
  int64_t dirty_evictions = 0;    // of them, written back
  int64_t rows_written = 0;       // dirty rows appended to the log (evictions and FlushDirty)
  int64_t fetch_reads = 0;        // block reads for missed rows
  // Of them, reads of a block read for one of the kRereadWindow batches
  // before: what installing every row the next batches need from one read
  // would save at most.
  int64_t fetch_rereads = 0;
  // Missed rows installed from a block read for other rows, in flight or
  // done and still in its buffer: each a read saved.
  int64_t shared_rows = 0;
  int64_t buffer_rows = 0;        // missed rows copied from a segment still in a write buffer
  int64_t segments_written = 0;   // segment writes (whole, or a flush's partial one)
  int64_t gc_segments = 0;        // segments the collector read
  int64_t gc_freed = 0;           // segments freed without a read (every copy dead)
  int64_t gc_rows_moved = 0;      // live rows the collector appended again
  int64_t gc_bytes_read = 0;
  int64_t live_rows = 0;          // rows with a copy in the log (now)
  int64_t file_bytes = 0;         // the file, reserved up front
  int64_t block_bytes = 0;        // the table's read unit
  int64_t io_buffers = 0;         // requests' buffers held for reuse (now), and their bytes
  int64_t io_buffer_bytes = 0;
  absl::Duration waited;          // in WaitResident
  absl::Duration cpu;             // thread CPU time (user + kernel) inside the tier's calls
  IoCounters io;

  double hit_rate() const {
    return prefetch_rows == 0 ? 0.0 : static_cast<double>(prefetch_hits) / static_cast<double>(prefetch_rows);
  }
  // Block bytes read per byte of missed rows read (the collector's reads not counted).
  double read_amplification(int64_t row_bytes) const {
    return fetched_rows == 0 ? 0.0
                             : static_cast<double>(fetch_reads * block_bytes) /
                                   static_cast<double>(fetched_rows * row_bytes);
  }
  // Bytes written to the file (segments, the collector's moves, a flush's
  // partial segments) per byte of dirty rows written back.
  double write_amplification(int64_t row_bytes) const {
    return rows_written == 0 ? 0.0
                             : static_cast<double>(io.bytes_written) / static_cast<double>(rows_written * row_bytes);
  }
  int64_t requests() const { return io.reads + io.writes; }
  // Microseconds of CPU per request.
  double cpu_us_per_request() const {
    return requests() == 0 ? 0.0 : absl::ToDoubleMicroseconds(cpu) / static_cast<double>(requests());
  }
  std::string ToString(int64_t row_bytes) const;
};

// SaveSnapshot / LoadSnapshot (ssd/ssd_table.h; the format is in docs/ssd.md).
struct SnapshotOptions {
  // Gets a line ("emb0: snapshot 12.3 of 40.0 GiB") at most every
  // `progress_every` while rows are copied; never called when empty.
  std::function<void(std::string_view line)> progress;
  absl::Duration progress_every = absl::Seconds(5);
};

// What a snapshot held.
struct SnapshotInfo {
  int64_t rows = 0;          // rows copied (the rest are lazy: the seed makes them)
  uint64_t file_bytes = 0;   // the snapshot's size: header, row ids, rows
  absl::Duration took;
};

namespace ssd_internal {

// The map word of a row:
//   0                     never written, not resident: its initial value
//   slot + 1              resident (slot < kMaxSlots)
//   (slot + 1) | kLoading resident soon: its block read is in flight
//   kOnDisk | d           not resident; its copy is at disk slot d of the log
// A hit is `w - 1 < kMaxSlots`: one load and one compare.
inline constexpr uint32_t kLoading = uint32_t{1} << 31;
inline constexpr uint32_t kOnDisk = uint32_t{1} << 30;
inline constexpr uint32_t kMaxSlots = kOnDisk - 1;
inline constexpr uint32_t kNoLoc = UINT32_MAX;  // a slot's row has no copy in the log
// Slot flags.
inline constexpr uint8_t kReferenced = 1;  // used since the CLOCK hand passed
inline constexpr uint8_t kDirty = 2;       // handed out for an update since written back
inline constexpr uint8_t kChosen = 4;      // picked as a victim by the running eviction

// Adds the thread's CPU time (user + kernel) from construction to destruction to *sum.
class CpuTimer {
 public:
  explicit CpuTimer(absl::Duration* sum);
  ~CpuTimer();
  CpuTimer(const CpuTimer&) = delete;
  CpuTimer& operator=(const CpuTimer&) = delete;

 private:
  absl::Duration* sum_;
  absl::Duration start_;
};

// Writes the initial features of `row` (feature_bytes bytes) to `out`; the
// core zeroes the optimizer state after them.
using InitRowFn = void (*)(uint64_t seed, int64_t nvectors, int64_t row, int64_t featuresize, void* out);

class SsdCore {
 public:
  // A row is `feature_bytes` of features and then, up to `row_bytes`, its
  // optimizer state (zero at first).
  static absl::StatusOr<std::unique_ptr<SsdCore>> Create(std::string name, int64_t nvectors, int64_t featuresize,
                                                         size_t feature_bytes, size_t row_bytes,
                                                         const SsdOptions& options, InitRowFn init_row);
  ~SsdCore();

  absl::Status Prefetch(int64_t batch_id, std::span<const int64_t> rows);
  absl::Status Prefetch(int64_t batch_id, std::span<const int32_t> rows);
  // Prefetch of rows the caller checked and made distinct (an UpdatePlan's):
  // neither is done again.
  absl::Status PrefetchDistinct(int64_t batch_id, std::span<const int64_t> rows);
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
  BlockLayout layout;                     // how rows pack into blocks (log.rows)
  LogLayout log;
  const std::string& name() const { return name_; }
  size_t row_bytes() const { return row_bytes_; }
  const BlockFile& file() const { return file_; }

 private:
  struct Batch;
  using IoBuffer = std::unique_ptr<std::byte, decltype(&std::free)>;
  enum class OpKind : uint8_t { kFetch, kWrite, kCollect };
  // A request in flight: a block read for missed rows, a segment write, a collector read.
  struct Op {
    OpKind kind = OpKind::kFetch;
    uint64_t offset = 0;
    int64_t bytes = 0;
    int64_t segment = 0;
    int buffer_index = -1;  // kWrite: the segment buffer written
    IoBuffer buffer{nullptr, &std::free};  // kFetch (NewReadBuffer), kCollect
    size_t buffer_bytes = 0;
    bool done = false;
    // kFetch: the rows to install, with their byte in the block (taken when
    // the read is queued: the collector may move a loading row's copy meanwhile).
    struct Fill {
      int64_t row;
      uint32_t slot;
      uint32_t offset;
    };
    std::vector<Fill> rows;
    std::vector<uint64_t> batches;                   // kFetch: seqs of the batches waiting
  };
  // A segment in DRAM: open (taking rows), or sealed and not yet on disk.
  struct SegmentBuffer {
    IoBuffer data{nullptr, &std::free};  // segment_bytes
    int64_t segment = -1;
    int64_t filled = 0;   // slots appended
    int64_t durable = 0;  // slots a successful write has covered
    int64_t writing = 0;  // slots the write in flight covers (0: none in flight)
    bool failed = false;  // its last write failed: the rows are only here
  };
  // Segment write buffers (each segment_bytes of DRAM).
  static constexpr int kWriteBuffers = 4;
  // Free segments only the collector may open (its moves need room).
  static constexpr int64_t kCollectorReserve = 1;
  // The collector reads while fewer segments than this are free (counting
  // those its reads in flight will free), at most kMaxCollecting at once.
  static constexpr int64_t kCollectorLowWater = 4;
  static constexpr int kMaxCollecting = 2;
  // Segments beyond file_space x the table's blocks: the write buffers, the
  // collector's reserve and its segments in flight.
  static constexpr int64_t kReserveSegments = kWriteBuffers + kCollectorLowWater;
  static constexpr uint64_t kRereadWindow = 4;  // batches, for SsdStats::fetch_rereads
  static constexpr int64_t kReadChunkBlocks = 64;
  friend int64_t cemb::SsdFixedDramBytes(int64_t, int64_t, const SsdOptions&, bool);
  enum class Segment : uint8_t {
    kFree,
    kOpen,        // taking rows, in a write buffer
    kBuffered,    // full (or flushed), its write in flight or failed: still in its buffer
    kOnDisk,
    kCollecting,  // the collector's read in flight
    kDraining,    // collected, waiting for fetch reads still in flight from it
  };
  SsdCore() = default;

  // InvalidArgument naming the batch, index and row of a row out of range.
  template <typename Index>
  absl::Status CheckRows(int64_t batch_id, std::span<const Index> rows) const;
  // Prefetch, in the steps below (distinct: rows are distinct already).
  template <typename Index>
  absl::Status PrefetchImpl(int64_t batch_id, std::span<const Index> rows, bool distinct);
  // A new pinned batch (errors: the table broken, a background error to
  // report, the id already pinned).
  absl::StatusOr<Batch*> BeginBatch(int64_t batch_id);
  template <typename Index>
  void PinResident(Batch& b, std::span<const Index> rows);
  absl::Status ReserveSlots(int64_t batch_id, int64_t need);
  void InstallMissing(Batch& batch);
  absl::Status SubmitReads(std::unique_lock<std::mutex>& lock, Batch& batch);
  Batch* FindBatch(int64_t id);
  void UnpinSlots(Batch& b);
  void RemoveBatch(int64_t id);
  std::byte* Slot(uint32_t s) const { return pool + static_cast<size_t>(s) * stride; }
  void InitRow(int64_t row, std::byte* out) const;
  // Makes slot s hold `row` whose map word is `w` (0 or kOnDisk | d): computes
  // it, copies it from a write buffer or from a block read before, or adds
  // it to a block read in `reads_` (returns true then: the caller submits
  // the reads).
  bool StartFill(int64_t row, uint32_t w, uint32_t s);
  // Turns the block reads StartFill gathered (sorted by block) into
  // requests; a block whose read is in flight is not read again: its rows
  // join that read.
  void QueueFetchReads(uint64_t batch_seq, int64_t* pending);

  // CLOCK: appends up to k unpinned, resident victims to victims_ (marked kChosen).
  void FindVictims(int64_t k);
  // Appends the dirty victims to the log and frees every victim (a failed
  // append leaves the rest resident).
  absl::Status Evict();
  // A free slot (evicting one if needed), or nullopt when every slot is pinned.
  std::optional<uint32_t> TakeSlot(absl::Status* error);
  void FreeSlot(uint32_t s);

  // --- the log (ssd_log.cc) ---
  // Appends `bytes` (row_bytes) as row `row`'s newest copy; returns its disk
  // slot. The old copy, if any, is the caller's to Release. Seals the open
  // segment when it fills (its write is queued in requests_).
  absl::StatusOr<uint32_t> Append(int64_t row, const std::byte* bytes, bool for_collector = false);
  void Release(uint32_t dslot);        // a copy became garbage
  absl::Status OpenSegment(bool for_collector);
  void QueueSegmentWrite(int buffer);  // the buffer's filled part (whole blocks)
  void FreeSegment(int64_t seg);
  // Starts collector reads while free segments run low (a bounded number in
  // flight); with `until_free`, waits until more than the collector's reserve is free.
  absl::Status Collect(bool until_free);
  void InitLog();                  // every segment free, every buffer free
  void RetryFailedWrites();        // queues the writes of buffers whose last write failed
  bool AnyWriteInFlight() const;
  void EndSegmentRead(int64_t seg);  // a fetch read of the segment completed
  void CompleteFetch(Op& o, const absl::Status& error);
  void CompleteWrite(Op& o, const absl::Status& error);
  void CompleteCollect(uint32_t op, const absl::Status& error);
  // Writes the open segment's rows so far and waits for every segment write;
  // resubmits failed ones once. The first failure.
  absl::Status FlushLog();
  // Who holds row's copy at disk slot d: the row's map word (kInMap), the
  // slot of the row, resident or loading (kInSlot, *slot set), or nobody
  // (kDead: a newer copy is elsewhere, or none is needed).
  enum class Holder : uint8_t { kDead, kInMap, kInSlot };
  Holder HolderOf(uint32_t row, uint32_t dslot, uint32_t* slot) const;
  // Where the newest copy of a row is in a buffer, or nullptr.
  const std::byte* Buffered(uint32_t dslot) const;

  uint32_t NewOp(OpKind kind, uint64_t offset, int64_t bytes);
  // An I/O buffer of `bytes`, registered with the BlockIo where it allows
  // (the kernel then does not pin its pages at each request).
  IoBuffer NewIoBuffer(size_t bytes);
  // A block-sized read buffer: carved from registered chunks of
  // kReadChunkBlocks while fewer than the queue depth are carved, else one
  // of its own, not registered.
  IoBuffer NewReadBuffer();
  void ForgetBlock(uint32_t op);  // drops block_ops_'s entry for the op, if any
  void ReleaseOp(uint32_t id);
  // Submits requests_ (reads first, then writes_) to the BlockIo.
  absl::Status Submit();
  // Reaps at least one completion (when any is in flight) and applies them.
  absl::Status ReapSome();
  // Applies the completions already there, without waiting.
  absl::Status ReapReady();
  absl::Status Reap(int64_t at_least);
  // Waits with mu_ released (`lock` holds it before and after) until a
  // completion may have arrived; the caller reaps and looks again. One
  // thread waits on the BlockIo, the others for it on io_done_.
  absl::Status AwaitIo(std::unique_lock<std::mutex>& lock);
  // Applies completions, and waits for more with mu_ released (AwaitIo),
  // until done() holds: the one way a caller waits for the drive.
  template <typename Done>
  absl::Status AwaitUntil(std::unique_lock<std::mutex>& lock, Done done);
  void Complete(const BlockCompletion& c);
  // Counts a fetch read of the block at `offset` for batch `seq` in
  // stats_.fetch_rereads if one of the kRereadWindow batches before read it.
  void CountReread(uint64_t offset, uint64_t seq);
  absl::Status IoError(IoOp op, uint64_t offset, int64_t bytes, int64_t result) const;
  absl::Status FlushDirtyLocked();
  // Reaps every request in flight, so the snapshot's own requests have the BlockIo alone.
  absl::Status DrainIo();
  // One request (snapshots, the load), waited for: DrainIo ran first.
  absl::Status SyncIo(IoOp op, uint64_t offset, std::byte* buffer, int64_t bytes);
  // Forgets every row: all lazy, the log empty, no row resident. REQUIRES: none pinned, no I/O in flight.
  void Reset();

  std::string name_;
  int64_t nvectors_ = 0, featuresize_ = 0;
  size_t row_bytes_ = 0;
  size_t feature_bytes_ = 0;  // the features of a row; the state follows
  std::optional<uint64_t> seed_;
  Eviction eviction_ = Eviction::kClock;
  InitRowFn init_row_ = nullptr;

  // Takes mu_ (every non-const member does it this way) and applies the
  // Unpins that came while another thread held it.
  std::unique_lock<std::mutex> Lock();
  void ApplyPendingUnpins();                 // REQUIRES: mu_ held
  absl::Status UnpinBatch(int64_t batch_id);  // REQUIRES: mu_ held

  // Unpin of a batch while mu_ is held (the prefetcher in a long Prefetch
  // waits under it): the batch id waits here and is unpinned by the next
  // Lock(), so a step's end never waits for the disk.
  std::mutex unpin_mu_;
  std::vector<int64_t> pending_unpins_;  // guarded by unpin_mu_

  mutable std::mutex mu_;  // everything below, and every I/O
  Region map_region_, pool_region_;
  std::unique_ptr<std::atomic<uint8_t>[]> flags_storage_;
  std::unique_ptr<int64_t[]> slot_row_;       // slot -> row, -1 = none
  std::unique_ptr<uint32_t[]> slot_loc_;      // slot -> disk slot of its row's copy in the log, kNoLoc = none
  std::unique_ptr<int32_t[]> pins_;           // batches pinning the slot
  std::unique_ptr<uint64_t[]> pin_mark_;      // seq of the last batch that pinned it
  std::unique_ptr<uint32_t[]> loading_op_;    // the fetch op of a loading slot
  std::vector<uint32_t> free_;
  int64_t hand_ = 0;
  int64_t pinned_slots_ = 0;
  BlockFile file_;
  std::vector<Batch> batches_;
  uint64_t seq_ = 0;
  std::vector<Op> ops_;
  // Block reads and segment writes, oldest first: a fetch op's buffer keeps
  // its block until the op is reused (block_ops_).
  std::deque<uint32_t> free_ops_;
  std::vector<uint32_t> free_collect_ops_;    // collector reads (a segment-sized buffer each)
  std::vector<BlockRequest> requests_;        // reads to submit
  std::vector<BlockRequest> writes_;          // writes and collector reads to submit after them
  std::deque<BlockCompletion> reaped_;        // reaped, not yet applied (Reap)
  std::vector<BlockCompletion> scratch_;
  std::vector<uint32_t> victims_;             // scratch
  std::vector<int64_t> missing_;                        // scratch
  std::vector<uint32_t> words_;                         // scratch: the map words of a batch's rows
  absl::flat_hash_map<uint64_t, uint64_t> recent_blocks_;       // block offset -> seq of its last batch read
  std::deque<std::pair<uint64_t, uint64_t>> recent_reads_;      // (seq, block offset), oldest first
  std::vector<std::pair<uint64_t, uint32_t>> reads_;    // scratch: (block offset, slot) of StartFill's reads
  // Block offset -> the fetch op whose buffer holds that block: its read in
  // flight (a miss in it joins the read) or done (a miss in it is copied
  // from the buffer). An entry goes when the op is reused, its read fails or
  // its segment is freed.
  absl::flat_hash_map<uint64_t, uint32_t> block_ops_;
  std::vector<IoBuffer> read_chunks_;         // NewReadBuffer's
  int64_t read_buffers_ = 0;                  // carved from them
  int64_t read_buffer_room_ = 0;              // the queue depth in whole chunks
  std::unique_ptr<std::byte[]> poison_;       // NaN row returned after a failed fetch
  absl::Status status_;                       // first failure of a fetch in rowpointer()
  absl::Status broken_;                       // a LoadSnapshot failed part way: rows undefined, refuses use
  absl::Status last_read_error_;
  absl::Status background_error_;             // a segment write or collector read failed since the last report

  // The log: per segment its state, live copies and fetch reads in flight.
  std::vector<Segment> seg_state_;
  std::vector<uint32_t> seg_live_;
  std::vector<uint32_t> seg_reads_;
  std::vector<int32_t> seg_buffer_;           // its write buffer while kOpen or kBuffered, else -1
  std::vector<uint32_t> free_segs_;
  std::vector<SegmentBuffer> buffers_;
  std::vector<int> free_buffers_;
  int open_ = -1;                             // the open segment's buffer
  bool awaiting_io_ = false;                  // a thread is in AwaitIo's BlockIo::AwaitCompletion
  std::condition_variable io_done_;           // it has returned
  int collecting_ = 0;                        // collector reads in flight
  SsdStats stats_;
};

}  // namespace ssd_internal
}  // namespace cemb

#endif  // CEMB_SSD_INTERNAL_SSD_CORE_H_
