// base/parallel.h: every item runs exactly once, for any thread count, on
// several threads when asked, and on the calling thread when nested.
#include "base/parallel.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace cemb {
namespace {

TEST(ParallelFor, RunsEveryItemExactlyOnce) {
  for (int threads : {0, 1, 2, 3, 8}) {
    for (int64_t n : {0, 1, 2, 7, 1000}) {
      std::vector<std::atomic<int>> runs(static_cast<size_t>(n));
      parallel_for(n, threads, [&](int64_t i) { runs[static_cast<size_t>(i)].fetch_add(1); });
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(runs[static_cast<size_t>(i)].load(), 1) << "item " << i << " of " << n << ", threads " << threads;
      }
    }
  }
}

TEST(ParallelFor, NegativeCountRunsNothing) {
  int runs = 0;
  parallel_for(-3, 2, [&](int64_t) { ++runs; });
  EXPECT_EQ(runs, 0);
}

// Two items that wait for each other both see the other arrive only if they
// run on two threads at once (the wait gives up after 60 s, so that a
// regression fails instead of hanging).
TEST(ParallelFor, TwoThreadsRunItemsConcurrently) {
  std::atomic<int> arrived{0};
  std::atomic<int> saw_both{0};
  std::mutex m;
  std::set<int> thread_ids;
  parallel_for(2, 2, [&](int64_t) {
    {
      std::lock_guard<std::mutex> lock(m);
      thread_ids.insert(omp_get_thread_num());
    }
    arrived.fetch_add(1);
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (arrived.load() < 2 && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
    if (arrived.load() == 2) saw_both.fetch_add(1);
  });
  EXPECT_EQ(saw_both.load(), 2);
  EXPECT_EQ(thread_ids.size(), 2u);
}

TEST(ParallelFor, NestedCallsRunOnTheCallingThread) {
  std::atomic<int> inner_outside_caller{0};
  parallel_for(4, 2, [&](int64_t) {
    const int outer = omp_get_thread_num();
    parallel_for(8, 2, [&](int64_t) {
      if (omp_get_thread_num() != outer) inner_outside_caller.fetch_add(1);
    });
  });
  EXPECT_EQ(inner_outside_caller.load(), 0);
}

// parallel_for_ranges cuts [0, n) into ranges of `chunk` (the last shorter)
// that cover every element once, in any order, on several threads.
TEST(ParallelForRanges, CoversEveryElementOnceInChunks) {
  for (const auto& [n, chunk] : {std::pair<int64_t, int64_t>{0, 4}, {1, 4}, {4, 4}, {10, 4}, {1000, 7}, {5, 100}}) {
    SCOPED_TRACE(testing::Message() << "n " << n << ", chunk " << chunk);
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    std::mutex mu;
    std::set<std::pair<int64_t, int64_t>> ranges;
    parallel_for_ranges(n, chunk, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
      std::lock_guard<std::mutex> lock(mu);
      ranges.emplace(b, e);
    });
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "element " << i;
    ASSERT_EQ(static_cast<int64_t>(ranges.size()), (n + chunk - 1) / chunk);
    int64_t next = 0;
    for (const auto& [b, e] : ranges) {  // sorted by begin: consecutive, each chunk long but the last
      EXPECT_EQ(b, next);
      EXPECT_EQ(e, std::min(n, b + chunk));
      next = e;
    }
  }
}

// DefaultThreads is OpenMP's setting for the caller (OMP_NUM_THREADS, or
// omp_set_num_threads), never below 1.
TEST(ParallelFor, DefaultThreadsFollowsOpenMpsSetting) {
  const int saved = omp_get_max_threads();
  for (int n : {1, 3, 7}) {
    omp_set_num_threads(n);
    EXPECT_EQ(DefaultThreads(), n);
    std::set<int> seen;
    std::mutex mu;
    parallel_for(64, 0, [&](int64_t) {
      std::lock_guard<std::mutex> lock(mu);
      seen.insert(omp_get_thread_num());
    });
    EXPECT_LE(seen.size(), static_cast<size_t>(n)) << "threads <= 0 runs on DefaultThreads()";
  }
  omp_set_num_threads(saved);
}

}  // namespace
}  // namespace cemb
