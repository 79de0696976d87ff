// Batched asynchronous I/O of aligned blocks at byte offsets of one file.
//
// A BlockIo takes many requests at once (Submit) and hands their completions
// back later (Reap), each with the caller's tag and its own result: the bytes
// transferred or -errno. A request's error never fails the others; Submit and
// Reap themselves fail only when the ring does (a Status naming the call).
//
// Backends:
//   NewUringBlockIo       io_uring, at most queue_depth requests in the
//                         kernel; Submit never waits: the rest wait in a
//                         backlog, submitted as Reap makes room; with an O_DIRECT
//                         file descriptor the reads and writes bypass the page
//                         cache. The file is the ring's fixed file, and buffers
//                         the user registers are its fixed buffers.
//   NewPosixBlockIo       pread/pwrite, each request completed inside Submit:
//                         the fallback where O_DIRECT or io_uring is unavailable.
//   FaultInjectingBlockIo wraps another backend and fails chosen requests (the
//                         k-th read or write with an errno, or a short read): tests.
//
// Ownership: a backend does not own the file descriptor; its user keeps it
// open for the backend's lifetime. Buffers belong to the caller and must stay
// valid until their completion has been reaped.
// Thread safety: one user at a time (the ssd table calls it under its mutex),
// except AwaitCompletion, which one other thread may call meanwhile: the user
// releases its lock across the wait for a completion.
//
// Example:
//   CEMB_ASSIGN_OR_RETURN(std::unique_ptr<BlockIo> io, NewUringBlockIo(fd, 64));
//   CEMB_RETURN_IF_ERROR(io->Submit(requests));          // many reads and writes
//   std::vector<BlockCompletion> done;
//   CEMB_RETURN_IF_ERROR(io->Reap(io->in_flight(), &done));  // wait for all of them
//   for (const BlockCompletion& c : done) if (c.result < 0) ... strerror(-c.result)
#ifndef CEMB_SSD_BLOCK_IO_H_
#define CEMB_SSD_BLOCK_IO_H_

#include <cerrno>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cemb {

// Offsets, sizes and buffer addresses of requests are multiples of this
// (what O_DIRECT asks of a 4Kn drive, and enough for a 512e one).
inline constexpr uint32_t kIoAlignment = 4096;

enum class IoOp : uint8_t { kRead, kWrite };
const char* IoOpName(IoOp op);  // "read", "write"

struct BlockRequest {
  IoOp op = IoOp::kRead;
  uint64_t offset = 0;      // bytes from the start of the file
  void* buffer = nullptr;   // `bytes` bytes, kIoAlignment-aligned
  uint32_t bytes = 0;
  uint64_t tag = 0;         // the caller's; comes back with the completion
};

struct BlockCompletion {
  uint64_t tag = 0;
  int64_t result = 0;  // bytes transferred (fewer than asked: a short read), or -errno
};

// What a backend did, since it was made. Requests are counted when they are
// submitted; the queue depth is the number in flight right after each
// submission to the device (always 1 for the pread/pwrite backend).
struct IoCounters {
  int64_t reads = 0, writes = 0;                // requests
  int64_t bytes_read = 0, bytes_written = 0;
  int64_t submissions = 0;
  int64_t depth_sum = 0;
  int64_t registered = 0;  // requests whose buffer is registered (RegisterBuffer)

  int64_t blocks_read() const { return bytes_read / kIoAlignment; }
  int64_t blocks_written() const { return bytes_written / kIoAlignment; }
  double average_queue_depth() const {
    return submissions == 0 ? 0.0 : static_cast<double>(depth_sum) / static_cast<double>(submissions);
  }
};

class BlockIo {
 public:
  virtual ~BlockIo() = default;

  // Hands `requests` to the device, in order, without waiting for any
  // (those beyond the queue's room are submitted by later Reaps).
  // REQUIRES: the alignment of kIoAlignment; distinct tags among the
  // requests in flight.
  [[nodiscard]] virtual absl::Status Submit(std::span<const BlockRequest> requests) = 0;
  // Appends to *out at least min(min_completions, in_flight()) completions,
  // waiting for them, plus any others already finished.
  [[nodiscard]] virtual absl::Status Reap(int64_t min_completions, std::vector<BlockCompletion>* out) = 0;
  // Blocks until a completion may have arrived since the previous
  // AwaitCompletion returned (it may also return when none has: the caller
  // reaps and looks again). The one call a second thread may make while the
  // user submits and reaps. REQUIRES: a request in flight, or it may block
  // for ever; one caller at a time.
  [[nodiscard]] virtual absl::Status AwaitCompletion() = 0;
  // Registers [buffer, buffer + bytes) with the kernel once: a request whose
  // buffer lies inside it then skips the pinning of its pages that each
  // request pays otherwise (io_uring's fixed buffers). Returns false where
  // the backend cannot (too many regions, RLIMIT_MEMLOCK, no io_uring):
  // such requests then go as any other. REQUIRES: the region stays
  // allocated for the backend's life; kIoAlignment-aligned.
  virtual bool RegisterBuffer(void* /*buffer*/, size_t /*bytes*/) { return false; }
  // Submitted and not yet reaped.
  virtual int64_t in_flight() const = 0;
  // Of them, those waiting for room in the queue, not yet given to the
  // kernel: a Reap (after a completion) hands them over.
  virtual int64_t queued() const { return 0; }
  virtual const IoCounters& counters() const = 0;
  // "io_uring", "pread/pwrite".
  virtual const char* name() const = 0;
};

// io_uring with `queue_depth` (> 0) entries. Errors: io_uring_queue_init's
// (ENOSYS or EPERM where io_uring is disabled, ENOMEM past RLIMIT_MEMLOCK).
[[nodiscard]] absl::StatusOr<std::unique_ptr<BlockIo>> NewUringBlockIo(int fd, int queue_depth);
std::unique_ptr<BlockIo> NewPosixBlockIo(int fd);

// A fault a test plants: the `nth` request (1-based, counted per op over the
// wrapper's life) of kind `op` fails with `error`, or (kShortRead, reads
// only) reaches the device but completes with half its bytes.
struct IoFault {
  enum class Kind { kError, kShortRead };
  IoOp op = IoOp::kRead;
  int64_t nth = 1;
  Kind kind = Kind::kError;
  int error = EIO;
};

class FaultInjectingBlockIo final : public BlockIo {
 public:
  FaultInjectingBlockIo(std::unique_ptr<BlockIo> inner, std::vector<IoFault> faults);

  [[nodiscard]] absl::Status Submit(std::span<const BlockRequest> requests) override;
  [[nodiscard]] absl::Status Reap(int64_t min_completions, std::vector<BlockCompletion>* out) override;
  // The inner backend's: the failed requests are ready to reap at once.
  [[nodiscard]] absl::Status AwaitCompletion() override { return inner_->AwaitCompletion(); }
  bool RegisterBuffer(void* buffer, size_t bytes) override { return inner_->RegisterBuffer(buffer, bytes); }
  int64_t in_flight() const override { return inner_->in_flight() + static_cast<int64_t>(failed_.size()); }
  int64_t queued() const override { return inner_->queued(); }
  // The inner backend's: a failed request never reached the device.
  const IoCounters& counters() const override { return inner_->counters(); }
  const char* name() const override { return inner_->name(); }
  // Faults that have fired so far.
  int64_t fired() const { return fired_; }

 private:
  const IoFault* Match(IoOp op);

  std::unique_ptr<BlockIo> inner_;
  std::vector<IoFault> faults_;
  int64_t seen_[2] = {0, 0};  // requests per op
  int64_t fired_ = 0;
  std::vector<BlockCompletion> failed_;        // completed by the wrapper, not yet reaped
  absl::flat_hash_set<uint64_t> short_tags_;   // forwarded reads to report short
  std::vector<BlockRequest> forward_;          // scratch
};

}  // namespace cemb

#endif  // CEMB_SSD_BLOCK_IO_H_
