// Threads on one SsdTable (std::thread, not OpenMP: libgomp is not
// TSan-aware). CI runs this under ThreadSanitizer (ctest -L tsan).
#include <atomic>
#include <barrier>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <numeric>
#include <optional>
#include <thread>
#include <vector>

#include "base/random.h"
#include "gtest/gtest.h"
#include "ssd/ssd_table.h"
#include "tests/ssd/test_util.h"

namespace cemb {
namespace {

constexpr int kThreads = 6;

float Value(int64_t row, int64_t j) { return static_cast<float>(row * 100 + j); }

SsdOptions Options(int64_t capacity_rows) {
  SsdOptions o;
  o.capacity_bytes = capacity_rows * 64;
  o.file.directory = testing::DiskDir();
  return o;
}

// A log with little room (segments of 64 rows, 1.1x the table), so that the
// collector runs while kernels update pinned rows.
SsdOptions TightLog(int64_t capacity_rows) {
  SsdOptions o = Options(capacity_rows);
  o.segment_bytes = 4096;
  o.file_space = 1.1;
  return o;
}

// Every row written (value row * 100 + j) and on the file, none resident.
void Fill(SsdTable<float, 16>& t) {
  for (int64_t r = 0; r < t.nvectors(); ++r) {
    float* p = t.rowpointer(r, Access::kUpdate);
    for (int64_t j = 0; j < 16; ++j) p[j] = Value(r, j);
  }
  ASSERT_TRUE(t.EvictUnpinned().ok());
  ASSERT_TRUE(t.FlushDirty().ok());  // the segments written: misses read the file
}

TEST(SsdTableStress, ConcurrentMissesOnRowsNotResidentReturnCorrectRows) {
  // The pool holds every row, so nothing is evicted while threads hold
  // pointers; every row starts on the file and each thread asks for all of
  // them, in its own order: the same misses race.
  constexpr int64_t kN = 2048;
  auto t = SsdTable<float, 16>::Create({.name = "stress", .nvectors = kN}, Options(kN));
  ASSERT_TRUE(t.ok()) << t.status();
  Fill(*t);
  std::atomic<int64_t> wrong{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      Xoshiro256pp rng(SplitMix64::Mix(5, static_cast<uint64_t>(i)));
      for (int64_t k = 0; k < kN; ++k) {
        const int64_t r = static_cast<int64_t>(rng.Below(kN));
        const float* p = t->rowpointer(r, Access::kForward);
        for (int64_t j = 0; j < 16; ++j) wrong += p[j] != Value(r, j);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(t->stats().sync_fetches, 0);
  EXPECT_TRUE(t->status().ok()) << t->status();
}

TEST(SsdTableStress, PrefetcherThreadOverlapsKernelThreadsOnPinnedRows) {
  // A prefetcher pins batch k+1 (evicting: the pool holds about three
  // batches; the log collecting: it has room for 1.1x the rows, all
  // written) while workers read and update the rows of batch k; each worker
  // owns the rows r % kThreads == i, as the kernels partition unique rows.
  constexpr int64_t kN = 4096, kBatch = 96, kSteps = 40;
  auto t = SsdTable<float, 16>::Create({.name = "overlap", .nvectors = kN}, TightLog(3 * kBatch));
  ASSERT_TRUE(t.ok()) << t.status();
  Fill(*t);
  std::vector<std::vector<int64_t>> batches(kSteps);
  Xoshiro256pp rng(9);
  for (auto& b : batches) {
    for (int64_t j = 0; j < kBatch; ++j) b.push_back(static_cast<int64_t>(rng.Below(kN)));
  }
  std::vector<int32_t> updates(kN, 0);  // per row: how often element 0 was incremented
  for (const auto& b : batches) {
    std::vector<int64_t> u(b);
    std::sort(u.begin(), u.end());
    u.erase(std::unique(u.begin(), u.end()), u.end());
    for (int64_t r : u) ++updates[r];
  }
  ASSERT_TRUE(t->Prefetch(0, batches[0]).ok());
  std::atomic<int64_t> wrong{0};
  std::barrier sync(kThreads + 1);
  std::vector<std::thread> workers;
  for (int i = 0; i < kThreads; ++i) {
    workers.emplace_back([&, i] {
      for (int64_t k = 0; k < kSteps; ++k) {
        sync.arrive_and_wait();  // batch k is resident
        std::vector<int64_t> mine;
        for (int64_t r : batches[k]) {
          if (r % kThreads == i) mine.push_back(r);
        }
        std::sort(mine.begin(), mine.end());
        mine.erase(std::unique(mine.begin(), mine.end()), mine.end());
        for (int64_t r : mine) {
          float* p = t->rowpointer(r, Access::kUpdate);
          for (int64_t j = 1; j < 16; ++j) wrong += p[j] != Value(r, j);
          p[0] += 1.0f;
        }
        sync.arrive_and_wait();  // step done
      }
    });
  }
  for (int64_t k = 0; k < kSteps; ++k) {
    ASSERT_TRUE(t->WaitResident(k).ok());
    sync.arrive_and_wait();  // the workers run step k ...
    if (k + 1 < kSteps) {
      ASSERT_TRUE(t->Prefetch(k + 1, batches[k + 1]).ok());  // ... while this evicts and reads
    }
    sync.arrive_and_wait();
    ASSERT_TRUE(t->Unpin(k).ok());
  }
  for (std::thread& w : workers) w.join();
  EXPECT_EQ(wrong.load(), 0);
  for (int64_t r = 0; r < kN; ++r) {
    ASSERT_EQ(t->rowpointer(r, Access::kRead)[0], Value(r, 0) + static_cast<float>(updates[r])) << r;
  }
  const SsdStats s = t->stats();
  EXPECT_GT(s.dirty_evictions, 0);
  EXPECT_GT(s.gc_segments, 0) << s.ToString(64);  // the collector ran beside the workers
  EXPECT_GT(s.gc_rows_moved, 0) << s.ToString(64);
}

// A filled table (every row on the file) whose I/O goes through a Gate.
absl::StatusOr<SsdTable<float, 16>> GatedTable(const char* name, testing::Gate** gate, int queue_depth = 256) {
  constexpr int64_t kN = 1024;
  SsdOptions o = Options(kN);
  o.file.queue_depth = queue_depth;
  testing::WrapInGate(o.file, gate);
  absl::StatusOr<SsdTable<float, 16>> t = SsdTable<float, 16>::Create({.name = name, .nvectors = kN}, o);
  if (t.ok()) Fill(*t);
  return t;
}

// What pinned_rows() answers from another thread within 10 s (the table's
// mutex free), or nothing.
std::optional<int64_t> PinnedRowsFromAnotherThread(const SsdTable<float, 16>& t) {
  std::future<int64_t> pinned = std::async(std::launch::async, [&] { return t.pinned_rows(); });
  if (pinned.wait_for(std::chrono::seconds(10)) != std::future_status::ready) return std::nullopt;
  return pinned.get();
}

TEST(SsdTableStress, AStepWaitingForItsReadsLeavesTheTableToThePrefetcher) {
  // The step thread waits for batch 1's reads, which the drive holds back;
  // meanwhile the prefetcher pins batch 2. With the table's mutex held
  // across the wait, Prefetch would wait for the drive too.
  testing::Gate* gate = nullptr;
  auto t = GatedTable("gate", &gate);
  ASSERT_TRUE(t.ok()) << t.status();
  std::vector<int64_t> batch1(64), batch2(32);
  std::iota(batch1.begin(), batch1.end(), 0);   // on the file: reads
  std::iota(batch2.begin(), batch2.end(), 48);  // 16 of batch 1's rows in flight, 16 more reads
  gate->Close();
  ASSERT_TRUE(t->Prefetch(1, batch1).ok());
  std::thread step([&] {
    absl::StatusOr<absl::Duration> waited = t->WaitResident(1);
    EXPECT_TRUE(waited.ok()) << waited.status();
  });
  gate->AwaitWaiter();
  std::future<absl::Status> prefetch = std::async(std::launch::async, [&] { return t->Prefetch(2, batch2); });
  const bool in_time = prefetch.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  gate->Open();
  step.join();
  EXPECT_TRUE(in_time) << "Prefetch of batch 2 waited for batch 1's reads";
  ASSERT_TRUE(prefetch.get().ok());
  ASSERT_TRUE(t->WaitResident(2).ok());
  for (int64_t r = 0; r < 80; ++r) {
    ASSERT_EQ(t->rowpointer(r, Access::kRead)[3], Value(r, 3)) << r;
  }
  ASSERT_TRUE(t->Unpin(1).ok());
  ASSERT_TRUE(t->Unpin(2).ok());
}

TEST(SsdTableStress, APrefetchWaitingForRoomInTheQueueLeavesTheTableFree) {
  // A batch missing 16 blocks through a queue of 4: 12 reads wait for room,
  // handed to the kernel as completions come, which the drive holds back.
  // Meanwhile the table answers other threads (it is not locked across the wait).
  testing::Gate* gate = nullptr;
  auto t = GatedTable("room", &gate, /*queue_depth=*/4);
  ASSERT_TRUE(t.ok()) << t.status();
  std::vector<int64_t> batch;
  for (int64_t b = 0; b < 16; ++b) batch.push_back(b * 64);  // 64 rows to a block: 16 blocks
  gate->Close();
  std::future<absl::Status> prefetch = std::async(std::launch::async, [&] { return t->Prefetch(1, batch); });
  gate->AwaitWaiter();  // waiting for a completion
  const std::optional<int64_t> pinned = PinnedRowsFromAnotherThread(*t);
  gate->Open();
  EXPECT_TRUE(pinned.has_value()) << "the table stayed locked while Prefetch waited for room in the queue";
  EXPECT_EQ(pinned.value_or(-1), 16);
  ASSERT_TRUE(prefetch.get().ok());
  ASSERT_TRUE(t->WaitResident(1).ok());
  for (int64_t r : batch) ASSERT_EQ(t->rowpointer(r, Access::kRead)[5], Value(r, 5)) << r;
  ASSERT_TRUE(t->Unpin(1).ok());
}

TEST(SsdTableStress, AMissWaitingForItsReadLeavesTheTableFree) {
  // rowpointer() of a row on the file, whose read the drive holds back:
  // another thread's call goes on meanwhile.
  testing::Gate* gate = nullptr;
  auto t = GatedTable("miss", &gate);
  ASSERT_TRUE(t.ok()) << t.status();
  gate->Close();
  std::future<float> miss = std::async(std::launch::async, [&] { return t->rowpointer(700, Access::kRead)[3]; });
  gate->AwaitWaiter();  // waiting for the read
  const std::optional<int64_t> pinned = PinnedRowsFromAnotherThread(*t);
  gate->Open();
  EXPECT_TRUE(pinned.has_value()) << "the table stayed locked while a miss waited for its read";
  EXPECT_EQ(pinned.value_or(-1), 1);  // the waiting miss pins its slot
  EXPECT_EQ(miss.get(), Value(700, 3));
  EXPECT_EQ(t->pinned_rows(), 0);
  EXPECT_TRUE(t->status().ok()) << t->status();
}

}  // namespace
}  // namespace cemb
