#include "ssd/block_io.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "ssd/block_file.h"
#include "tests/ssd/test_util.h"

namespace cemb {
namespace {

using testing::AlignedAlloc;
using testing::RunAll;

constexpr int64_t kBlocks = 200;

// Writes kBlocks blocks (block b filled with byte b * 7 + 1) in one batch,
// then reads them back in reverse order in another, through `io`.
void RoundTrip(BlockIo& io) {
  auto out = AlignedAlloc(kBlocks * kBlockBytes);
  auto in = AlignedAlloc(kBlocks * kBlockBytes);
  std::vector<BlockRequest> writes, reads;
  for (int64_t b = 0; b < kBlocks; ++b) {
    std::memset(out.get() + b * kBlockBytes, static_cast<int>(b * 7 + 1), kBlockBytes);
    writes.push_back({IoOp::kWrite, static_cast<uint64_t>(b) * kBlockBytes, out.get() + b * kBlockBytes, kBlockBytes,
                      static_cast<uint64_t>(b)});
  }
  for (int64_t b = kBlocks - 1; b >= 0; --b) {
    reads.push_back({IoOp::kRead, static_cast<uint64_t>(b) * kBlockBytes, in.get() + b * kBlockBytes, kBlockBytes,
                     static_cast<uint64_t>(b)});
  }
  for (int64_t r : RunAll(io, writes, kBlocks)) ASSERT_EQ(r, kBlockBytes);
  for (int64_t r : RunAll(io, reads, kBlocks)) ASSERT_EQ(r, kBlockBytes);
  EXPECT_EQ(std::memcmp(out.get(), in.get(), kBlocks * kBlockBytes), 0);
  const IoCounters& c = io.counters();
  EXPECT_EQ(c.reads, kBlocks);
  EXPECT_EQ(c.writes, kBlocks);
  EXPECT_EQ(c.blocks_read(), kBlocks);
  EXPECT_EQ(c.bytes_written, kBlocks * kBlockBytes);
}

TEST(BlockIo, UringRoundTripWithODirectOnDisk) {
  auto file = BlockFile::Create({.directory = testing::DiskDir(), .bytes = kBlocks * kBlockBytes, .queue_depth = 16});
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE(file->direct());
  EXPECT_STREQ(file->io().name(), "io_uring");
  RoundTrip(file->io());
  // 200 requests through a ring of 16: batches of up to 16 in flight.
  const double depth = file->io().counters().average_queue_depth();
  EXPECT_GT(depth, 1.0);
  EXPECT_LE(depth, 16.0);
}

TEST(BlockIo, UringRoundTripThroughRegisteredBuffers) {
  auto file = BlockFile::Create({.directory = testing::DiskDir(), .bytes = kBlocks * kBlockBytes, .queue_depth = 16});
  ASSERT_TRUE(file.ok()) << file.status();
  // Two regions: one holds the writes' buffers, one the second half of the
  // reads'; the first half of the reads go through buffers not registered.
  auto out = AlignedAlloc(kBlocks * kBlockBytes);
  auto in = AlignedAlloc(kBlocks * kBlockBytes);
  const int64_t half = kBlocks / 2 * kBlockBytes;
  if (!file->io().RegisterBuffer(out.get(), kBlocks * kBlockBytes) ||
      !file->io().RegisterBuffer(in.get() + half, kBlocks * kBlockBytes - half)) {
    GTEST_SKIP() << "io_uring refused to register buffers (RLIMIT_MEMLOCK?)";
  }
  std::vector<BlockRequest> writes, reads;
  for (int64_t b = 0; b < kBlocks; ++b) {
    std::memset(out.get() + b * kBlockBytes, static_cast<int>(b * 5 + 3), kBlockBytes);
    writes.push_back({IoOp::kWrite, static_cast<uint64_t>(b) * kBlockBytes, out.get() + b * kBlockBytes, kBlockBytes,
                      static_cast<uint64_t>(b)});
    reads.push_back({IoOp::kRead, static_cast<uint64_t>(b) * kBlockBytes, in.get() + b * kBlockBytes, kBlockBytes,
                     static_cast<uint64_t>(b)});
  }
  for (int64_t r : RunAll(file->io(), writes, kBlocks)) ASSERT_EQ(r, kBlockBytes);
  for (int64_t r : RunAll(file->io(), reads, kBlocks)) ASSERT_EQ(r, kBlockBytes);
  EXPECT_EQ(std::memcmp(out.get(), in.get(), kBlocks * kBlockBytes), 0);
  EXPECT_EQ(file->io().counters().registered, kBlocks + kBlocks / 2);
  // A request that straddles the registered region's start goes as any other.
  const BlockRequest straddle{IoOp::kRead, 0, in.get() + half - kBlockBytes, 2 * kBlockBytes, 0};
  EXPECT_EQ(RunAll(file->io(), {&straddle, 1}, 1)[0], 2 * kBlockBytes);
  EXPECT_EQ(std::memcmp(out.get(), in.get() + half - kBlockBytes, 2 * kBlockBytes), 0);
  EXPECT_EQ(file->io().counters().registered, kBlocks + kBlocks / 2);
}

TEST(BlockIo, UringSubmitNeverWaitsForTheDevice) {
  // A pipe as the file: a read completes only when bytes are written to it.
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  absl::StatusOr<std::unique_ptr<BlockIo>> io = NewUringBlockIo(pipe_fds[0], 2);
  ASSERT_TRUE(io.ok()) << io.status();
  auto in = AlignedAlloc(4 * kBlockBytes);
  std::vector<BlockRequest> reads;
  for (uint64_t i = 0; i < 4; ++i) reads.push_back({IoOp::kRead, 0, in.get() + i * kBlockBytes, kBlockBytes, i});
  // Four reads through a ring of two: Submit returns with the two that do
  // not fit still waiting, not after the device made room.
  // The submitting thread lives until the reads are reaped: io_uring
  // cancels a thread's pending pipe reads when it exits.
  std::promise<absl::Status> returned;
  std::promise<void> reaped;
  std::thread submitter([&] {
    returned.set_value((*io)->Submit(reads));
    reaped.get_future().wait();
  });
  std::future<absl::Status> submitted = returned.get_future();
  const bool in_time = submitted.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  std::vector<char> bytes(4 * kBlockBytes, 'x');
  ASSERT_EQ(::write(pipe_fds[1], bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  EXPECT_TRUE(submitted.get().ok());
  EXPECT_TRUE(in_time) << "Submit waited for the device to make room";
  std::vector<BlockCompletion> done;
  EXPECT_TRUE((*io)->Reap(4, &done).ok());
  reaped.set_value();
  submitter.join();
  ASSERT_EQ(done.size(), 4u);
  for (const BlockCompletion& c : done) EXPECT_EQ(c.result, kBlockBytes) << c.tag;
  EXPECT_EQ((*io)->in_flight(), 0);
  io->reset();
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
}

TEST(BlockIo, PosixRoundTripAtDepthOne) {
  auto file = BlockFile::Create({.directory = testing::DiskDir(), .bytes = kBlocks * kBlockBytes});
  ASSERT_TRUE(file.ok()) << file.status();
  std::unique_ptr<BlockIo> io = NewPosixBlockIo(file->fd());
  RoundTrip(*io);
  auto buffer = AlignedAlloc(kBlockBytes);
  EXPECT_FALSE(io->RegisterBuffer(buffer.get(), kBlockBytes));
  EXPECT_EQ(io->counters().average_queue_depth(), 1.0);
}

TEST(BlockIo, TmpfsWithoutODirectFallsBackToBufferedWithAWarning) {
  ::testing::internal::CaptureStderr();
  auto file = BlockFile::Create({.directory = testing::TmpfsDir(), .bytes = kBlocks * kBlockBytes,
                                 .simulate_no_direct = true});
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_FALSE(file->direct());
  EXPECT_STREQ(file->io().name(), "pread/pwrite");
  EXPECT_NE(err.find("warning: /dev/shm does not support O_DIRECT"), std::string::npos) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  RoundTrip(file->io());
}

TEST(BlockIo, TmpfsRoundTripWhateverTheKernelSays) {
  // tmpfs accepts O_DIRECT since Linux 6.6 and refuses it (EINVAL) before:
  // either way the file works.
  auto file = BlockFile::Create({.directory = testing::TmpfsDir(), .bytes = kBlocks * kBlockBytes});
  ASSERT_TRUE(file.ok()) << file.status();
  RoundTrip(file->io());
}

class FaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto file = BlockFile::Create({.directory = testing::DiskDir(), .bytes = 8 * kBlockBytes});
    ASSERT_TRUE(file.ok()) << file.status();
    file_ = std::make_unique<BlockFile>(*std::move(file));
    buffer_ = AlignedAlloc(8 * kBlockBytes);
    std::memset(buffer_.get(), 0x5a, 8 * kBlockBytes);
  }
  std::vector<BlockRequest> Requests(IoOp op) {
    std::vector<BlockRequest> r;
    for (uint64_t b = 0; b < 8; ++b) r.push_back({op, b * kBlockBytes, buffer_.get() + b * kBlockBytes, kBlockBytes, b});
    return r;
  }
  std::unique_ptr<BlockFile> file_;
  testing::AlignedBytes buffer_;
};

TEST_F(FaultTest, FailsTheKthReadWithEioAndOnlyIt) {
  FaultInjectingBlockIo io(NewUringBlockIo(file_->fd(), 4).value(), {{.op = IoOp::kRead, .nth = 3, .error = EIO}});
  for (int64_t r : RunAll(io, Requests(IoOp::kWrite), 8)) EXPECT_EQ(r, kBlockBytes);
  std::vector<int64_t> reads = RunAll(io, Requests(IoOp::kRead), 8);
  for (uint64_t b = 0; b < 8; ++b) EXPECT_EQ(reads[b], b == 2 ? -EIO : int64_t{kBlockBytes}) << "block " << b;
  EXPECT_EQ(io.fired(), 1);
  EXPECT_EQ(io.counters().reads, 7);  // the failed one never reached the device
}

TEST_F(FaultTest, FailsTheKthWriteWithEnospc) {
  FaultInjectingBlockIo io(NewUringBlockIo(file_->fd(), 4).value(), {{.op = IoOp::kWrite, .nth = 1, .error = ENOSPC}});
  std::vector<int64_t> writes = RunAll(io, Requests(IoOp::kWrite), 8);
  for (uint64_t b = 0; b < 8; ++b) EXPECT_EQ(writes[b], b == 0 ? -ENOSPC : int64_t{kBlockBytes}) << "block " << b;
  EXPECT_EQ(io.fired(), 1);
}

TEST_F(FaultTest, ShortReadCompletesWithHalfTheBytes) {
  FaultInjectingBlockIo io(NewPosixBlockIo(file_->fd()),
                           {{.op = IoOp::kRead, .nth = 8, .kind = IoFault::Kind::kShortRead}});
  std::vector<int64_t> reads = RunAll(io, Requests(IoOp::kRead), 8);
  for (uint64_t b = 0; b < 8; ++b) EXPECT_EQ(reads[b], b == 7 ? kBlockBytes / 2 : kBlockBytes) << "block " << b;
}

}  // namespace
}  // namespace cemb
