#include "ssd/block_io.h"

#include <liburing.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <deque>
#include <utility>

#include "absl/strings/str_cat.h"

namespace cemb {

const char* IoOpName(IoOp op) { return op == IoOp::kRead ? "read" : "write"; }

namespace {

absl::Status RingError(int negative_errno, const char* call) {
  return absl::InternalError(absl::StrCat("io_uring: ", call, " failed: ", std::strerror(-negative_errno)));
}

void Count(IoCounters& c, const BlockRequest& r) {
  if (r.op == IoOp::kRead) {
    ++c.reads;
    c.bytes_read += r.bytes;
  } else {
    ++c.writes;
    c.bytes_written += r.bytes;
  }
}

class UringBlockIo final : public BlockIo {
 public:
  UringBlockIo(int fd, int depth) : fd_(fd), depth_(depth) {}
  ~UringBlockIo() override {
    // The kernel may still write into the caller's buffers: wait for it
    // (the backlog never reached it).
    backlog_.clear();
    std::vector<BlockCompletion> rest;
    (void)Reap(in_ring_, &rest);
    io_uring_queue_exit(&ring_);
    if (event_fd_ >= 0) ::close(event_fd_);
  }

  absl::Status Init() {
    const int err = io_uring_queue_init(static_cast<unsigned>(depth_), &ring_, 0);
    if (err < 0) return RingError(err, "io_uring_queue_init");
    // The kernel adds 1 to the eventfd's count at every completion: a thread
    // waits on it without touching the ring that another one submits to.
    event_fd_ = ::eventfd(0, EFD_CLOEXEC);
    if (event_fd_ < 0) return RingError(-errno, "eventfd");
    if (const int e = io_uring_register_eventfd(&ring_, event_fd_); e < 0) {
      return RingError(e, "io_uring_register_eventfd");
    }
    // The file as the ring's fixed file 0: a request then skips the kernel's
    // lookup and reference count of the descriptor. Where registration is
    // refused the descriptor serves as is.
    if (io_uring_register_files(&ring_, &fd_, 1) == 0) {
      sqe_fd_ = 0;
      sqe_flags_ = IOSQE_FIXED_FILE;
    }
    // A sparse table of fixed buffers that RegisterBuffer fills (none where refused).
    if (io_uring_register_buffers_sparse(&ring_, kMaxRegions) == 0) region_room_ = kMaxRegions;
    return absl::OkStatus();
  }

  bool RegisterBuffer(void* buffer, size_t bytes) override {
    if (regions_.size() >= region_room_) return false;
    iovec v{buffer, bytes};
    const auto index = static_cast<unsigned>(regions_.size());
    // Pins the pages, counted against RLIMIT_MEMLOCK unless CAP_IPC_LOCK.
    if (io_uring_register_buffers_update_tag(&ring_, index, &v, nullptr, 1) != 1) return false;
    const auto begin = reinterpret_cast<uintptr_t>(buffer);
    regions_.push_back({begin, begin + bytes});
    return true;
  }

  absl::Status Submit(std::span<const BlockRequest> requests) override {
    for (const BlockRequest& r : requests) {
      Count(counters_, r);
      backlog_.push_back(r);
    }
    Refill();
    return SubmitQueued();
  }

  absl::Status Reap(int64_t min_completions, std::vector<BlockCompletion>* out) override {
    int64_t wanted = min_completions - static_cast<int64_t>(early_.size());
    out->insert(out->end(), early_.begin(), early_.end());
    early_.clear();
    // Each completion makes room for a request of the backlog: submitted
    // before waiting for more.
    while (true) {
      if (absl::Status s = SubmitQueued(); !s.ok()) return s;
      const size_t before = out->size();
      if (absl::Status s = Collect(wanted, out); !s.ok()) return s;
      wanted -= static_cast<int64_t>(out->size() - before);
      Refill();
      if (wanted <= 0 || in_ring_ == 0) break;  // the ring empty: so is the backlog
    }
    return SubmitQueued();
  }

  absl::Status AwaitCompletion() override {
    uint64_t count;  // completions since the last read: a read takes them all
    while (::read(event_fd_, &count, sizeof count) < 0) {
      if (errno != EINTR) return RingError(-errno, "read of the completion eventfd");
    }
    return absl::OkStatus();
  }

  int64_t in_flight() const override {
    return in_ring_ + static_cast<int64_t>(early_.size()) + static_cast<int64_t>(backlog_.size());
  }
  int64_t queued() const override { return static_cast<int64_t>(backlog_.size()); }
  const IoCounters& counters() const override { return counters_; }
  const char* name() const override { return "io_uring"; }

 private:
  // Fixed buffers: few regions (a table registers its read buffers, its
  // write buffers and its collector's), looked up by address.
  static constexpr unsigned kMaxRegions = 16;
  struct Region {
    uintptr_t begin, end;
  };

  // The fixed buffer that holds the request's buffer, or -1.
  int RegionOf(const BlockRequest& r) const {
    const auto p = reinterpret_cast<uintptr_t>(r.buffer);
    for (size_t i = 0; i < regions_.size(); ++i) {
      if (p >= regions_[i].begin && p + r.bytes <= regions_[i].end) return static_cast<int>(i);
    }
    return -1;
  }

  // Moves requests from the backlog into the ring while it has room: at most
  // depth_ in the ring, so the completion queue (2 * depth_) never overflows.
  void Refill() {
    while (!backlog_.empty() && in_ring_ < depth_) {
      const BlockRequest& r = backlog_.front();
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_);  // never null: fewer than depth_ queued
      if (const int region = RegionOf(r); region >= 0) {
        if (r.op == IoOp::kRead) {
          io_uring_prep_read_fixed(sqe, sqe_fd_, r.buffer, r.bytes, r.offset, region);
        } else {
          io_uring_prep_write_fixed(sqe, sqe_fd_, r.buffer, r.bytes, r.offset, region);
        }
        ++counters_.registered;
      } else if (r.op == IoOp::kRead) {
        io_uring_prep_read(sqe, sqe_fd_, r.buffer, r.bytes, r.offset);
      } else {
        io_uring_prep_write(sqe, sqe_fd_, r.buffer, r.bytes, r.offset);
      }
      io_uring_sqe_set_flags(sqe, sqe_flags_);
      io_uring_sqe_set_data64(sqe, r.tag);
      ++in_ring_;
      ++unsubmitted_;
      backlog_.pop_front();
    }
  }

  absl::Status SubmitQueued() {
    while (unsubmitted_ > 0) {
      const int n = io_uring_submit(&ring_);
      if (n == -EINTR) continue;
      if ((n == -EAGAIN || n == -EBUSY) && in_ring_ > unsubmitted_) {  // reap some first
        if (absl::Status s = Collect(1, &early_); !s.ok()) return s;
        continue;
      }
      if (n < 0) return RingError(n, "io_uring_submit");
      unsubmitted_ -= n;
      ++counters_.submissions;
      counters_.depth_sum += in_ring_;
    }
    return absl::OkStatus();
  }

  // Moves completions from the ring to *out: at least `wanted` (capped at
  // what has been submitted), waiting for them, then whatever else is ready.
  absl::Status Collect(int64_t wanted, std::vector<BlockCompletion>* out) {
    wanted = std::min(wanted, in_ring_ - unsubmitted_);
    if (wanted > 0) {
      io_uring_cqe* cqe = nullptr;
      int err;
      while ((err = io_uring_wait_cqe_nr(&ring_, &cqe, static_cast<unsigned>(wanted))) == -EINTR) {
      }
      if (err < 0) return RingError(err, "io_uring_wait_cqe_nr");
    }
    io_uring_cqe* cqes[64];
    unsigned n;
    while ((n = io_uring_peek_batch_cqe(&ring_, cqes, 64)) > 0) {
      for (unsigned i = 0; i < n; ++i) out->push_back({io_uring_cqe_get_data64(cqes[i]), cqes[i]->res});
      io_uring_cq_advance(&ring_, n);
      in_ring_ -= n;
    }
    return absl::OkStatus();
  }

  io_uring ring_{};
  int fd_;
  int sqe_fd_ = fd_;          // what a request names: fd_, or 0 (the fixed file)
  unsigned sqe_flags_ = 0;    // IOSQE_FIXED_FILE with the fixed file
  unsigned region_room_ = 0;  // fixed buffer slots (kMaxRegions, or 0 where refused)
  std::vector<Region> regions_;
  int event_fd_ = -1;
  int depth_;
  int64_t in_ring_ = 0;      // prepared or submitted, completion not yet taken
  int64_t unsubmitted_ = 0;  // prepared, not yet submitted
  std::vector<BlockCompletion> early_;  // taken by SubmitQueued when the kernel wanted room
  std::deque<BlockRequest> backlog_;    // submitted by the user, waiting for room in the ring
  IoCounters counters_;
};

class PosixBlockIo final : public BlockIo {
 public:
  explicit PosixBlockIo(int fd) : fd_(fd) {}

  absl::Status Submit(std::span<const BlockRequest> requests) override {
    for (const BlockRequest& r : requests) {
      Count(counters_, r);
      ++counters_.submissions;
      ++counters_.depth_sum;
      done_.push_back({r.tag, Transfer(r)});
    }
    return absl::OkStatus();
  }

  absl::Status Reap(int64_t, std::vector<BlockCompletion>* out) override {
    out->insert(out->end(), done_.begin(), done_.end());
    done_.clear();
    return absl::OkStatus();
  }
  // Every request completes inside Submit.
  absl::Status AwaitCompletion() override { return absl::OkStatus(); }

  int64_t in_flight() const override { return static_cast<int64_t>(done_.size()); }
  const IoCounters& counters() const override { return counters_; }
  const char* name() const override { return "pread/pwrite"; }

 private:
  // Bytes transferred (short only at the end of the file), or -errno.
  int64_t Transfer(const BlockRequest& r) const {
    auto* p = static_cast<char*>(r.buffer);
    uint64_t done = 0;
    while (done < r.bytes) {
      const ssize_t n = r.op == IoOp::kRead ? ::pread(fd_, p + done, r.bytes - done, r.offset + done)
                                            : ::pwrite(fd_, p + done, r.bytes - done, r.offset + done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return -errno;
      if (n == 0) break;
      done += static_cast<uint64_t>(n);
    }
    return static_cast<int64_t>(done);
  }

  int fd_;
  std::vector<BlockCompletion> done_;
  IoCounters counters_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<BlockIo>> NewUringBlockIo(int fd, int queue_depth) {
  if (queue_depth <= 0) return absl::InvalidArgumentError(absl::StrCat("io_uring queue depth ", queue_depth, " <= 0"));
  auto io = std::make_unique<UringBlockIo>(fd, queue_depth);
  if (absl::Status s = io->Init(); !s.ok()) return s;
  return std::unique_ptr<BlockIo>(std::move(io));
}

std::unique_ptr<BlockIo> NewPosixBlockIo(int fd) { return std::make_unique<PosixBlockIo>(fd); }

FaultInjectingBlockIo::FaultInjectingBlockIo(std::unique_ptr<BlockIo> inner, std::vector<IoFault> faults)
    : inner_(std::move(inner)), faults_(std::move(faults)) {}

const IoFault* FaultInjectingBlockIo::Match(IoOp op) {
  const int64_t n = ++seen_[static_cast<int>(op)];
  for (const IoFault& f : faults_) {
    if (f.op == op && f.nth == n) return &f;
  }
  return nullptr;
}

absl::Status FaultInjectingBlockIo::Submit(std::span<const BlockRequest> requests) {
  forward_.clear();
  for (const BlockRequest& r : requests) {
    const IoFault* f = Match(r.op);
    if (f == nullptr) {
      forward_.push_back(r);
      continue;
    }
    ++fired_;
    if (f->kind == IoFault::Kind::kShortRead && r.op == IoOp::kRead) {
      short_tags_.insert(r.tag);
      forward_.push_back(r);
    } else {
      failed_.push_back({r.tag, -f->error});
    }
  }
  return inner_->Submit(forward_);
}

absl::Status FaultInjectingBlockIo::Reap(int64_t min_completions, std::vector<BlockCompletion>* out) {
  const int64_t failed = static_cast<int64_t>(failed_.size());
  out->insert(out->end(), failed_.begin(), failed_.end());
  failed_.clear();
  const size_t first = out->size();
  if (absl::Status s = inner_->Reap(min_completions - failed, out); !s.ok()) return s;
  for (size_t i = first; i < out->size(); ++i) {
    BlockCompletion& c = (*out)[i];
    if (short_tags_.erase(c.tag) > 0 && c.result > 0) c.result /= 2;
  }
  return absl::OkStatus();
}

}  // namespace cemb
