// Helpers shared by the ssd tests: directories for block files, aligned
// buffers, and running a batch of requests to completion.
#ifndef CEMB_TESTS_SSD_TEST_UTIL_H_
#define CEMB_TESTS_SSD_TEST_UTIL_H_

#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <span>
#include <utility>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "ssd/block_file.h"
#include "ssd/block_io.h"

namespace cemb::testing {

// A directory on a disk file system (ext4 here: O_DIRECT works) and one on tmpfs.
inline std::string DiskDir() {
  std::string d = ::testing::TempDir();
  if (!d.empty() && d.back() == '/') d.pop_back();
  return d;
}
inline std::string TmpfsDir() { return "/dev/shm"; }

struct AlignedDeleter {
  void operator()(void* p) const { std::free(p); }
};
using AlignedBytes = std::unique_ptr<unsigned char[], AlignedDeleter>;

inline AlignedBytes AlignedAlloc(size_t bytes) {
  return AlignedBytes(static_cast<unsigned char*>(std::aligned_alloc(kIoAlignment, bytes)));
}

// A BlockIo that hands everything to another: tests override what they change
// (a fault, a kill) and keep the rest.
class ForwardingBlockIo : public BlockIo {
 public:
  explicit ForwardingBlockIo(std::unique_ptr<BlockIo> io) : io_(std::move(io)) {}
  absl::Status Submit(std::span<const BlockRequest> requests) override { return io_->Submit(requests); }
  absl::Status Reap(int64_t min_completions, std::vector<BlockCompletion>* out) override {
    return io_->Reap(min_completions, out);
  }
  absl::Status AwaitCompletion() override { return io_->AwaitCompletion(); }
  bool RegisterBuffer(void* buffer, size_t bytes) override { return io_->RegisterBuffer(buffer, bytes); }
  int64_t in_flight() const override { return io_->in_flight(); }
  int64_t queued() const override { return io_->queued(); }
  const IoCounters& counters() const override { return io_->counters(); }
  const char* name() const override { return io_->name(); }

 protected:
  std::unique_ptr<BlockIo> io_;
};

// Holds completions back while closed, as a slow drive would: Reap hands
// none over and a wait for one (Reap of at least one, AwaitCompletion)
// blocks until Open().
class Gate final : public ForwardingBlockIo {
 public:
  using ForwardingBlockIo::ForwardingBlockIo;
  absl::Status Reap(int64_t min_completions, std::vector<BlockCompletion>* out) override {
    if (min_completions == 0 && closed()) return absl::OkStatus();
    Pass();
    return io_->Reap(min_completions, out);
  }
  absl::Status AwaitCompletion() override {
    Pass();
    return io_->AwaitCompletion();
  }
  void Close() { Set(true); }
  void Open() { Set(false); }
  // Blocks until a thread waits at the closed gate.
  void AwaitWaiter() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return waiters_ > 0; });
  }

 private:
  bool closed() {
    std::lock_guard<std::mutex> lock(mu_);
    return closed_;
  }
  void Set(bool closed) {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = closed;
    cv_.notify_all();
  }
  void Pass() {
    std::unique_lock<std::mutex> lock(mu_);
    ++waiters_;
    cv_.notify_all();
    cv_.wait(lock, [this] { return !closed_; });
    --waiters_;
  }

  std::mutex mu_;
  std::condition_variable cv_;
  bool closed_ = false;
  int waiters_ = 0;
};

// Makes the file's BlockIo a Gate, set in *gate when the table opens it.
inline void WrapInGate(BlockFileOptions& file, Gate** gate) {
  file.wrap_io = [gate](std::unique_ptr<BlockIo> io) -> std::unique_ptr<BlockIo> {
    auto g = std::make_unique<Gate>(std::move(io));
    *gate = g.get();
    return g;
  };
}

// Submits `requests` and reaps until each has completed; completions by tag.
inline std::vector<int64_t> RunAll(BlockIo& io, std::span<const BlockRequest> requests, uint64_t ntags) {
  std::vector<int64_t> result(ntags, 1);  // 1: never completed
  absl::Status s = io.Submit(requests);
  EXPECT_TRUE(s.ok()) << s;
  std::vector<BlockCompletion> done;
  s = io.Reap(io.in_flight(), &done);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(io.in_flight(), 0);
  for (const BlockCompletion& c : done) result.at(c.tag) = c.result;
  return result;
}

}  // namespace cemb::testing

#endif  // CEMB_TESTS_SSD_TEST_UTIL_H_
