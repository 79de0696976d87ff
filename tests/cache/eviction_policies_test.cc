// The policies of the eviction simulator (bench/eviction_policies.h): short
// traces worked by hand, independent naive references on random traces, and
// the ideal cache against every policy on Zipf streams.
#include "bench/eviction_policies.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace cemb::sim {
namespace {

// 'h' for a hit, 'm' for a miss, one per access of `trace`.
template <typename Policy>
std::string Pattern(Policy& policy, const std::vector<uint32_t>& trace) {
  std::string out;
  for (uint32_t row : trace) out += policy.Access(row) ? 'h' : 'm';
  return out;
}

TEST(Lru, EvictsTheLeastRecentlyUsedByHand) {
  Lru lru(/*nrows=*/10, /*capacity=*/3);
  // [1] [2 1] [3 2 1] 1h [1 3 2] 4: evicts 2; 2: evicts 3; 5: evicts 1; 1: evicts 4; 2h; 3: evicts 5.
  EXPECT_EQ(Pattern(lru, {1, 2, 3, 1, 4, 2, 5, 1, 2, 3}), "mmmhmmmmhm");
  EXPECT_EQ(lru.copies(), 8);
}

TEST(Clock, GivesReferencedRowsASecondChanceByHand) {
  // Both rows referenced: the hand clears both bits and comes back to the
  // oldest, 1; LRU would evict 2 (the less recent) and miss it next.
  Clock clock(10, 2);
  EXPECT_EQ(Pattern(clock, {1, 2, 2, 1, 3, 2}), "mmhhmh");
  Lru lru(10, 2);
  EXPECT_EQ(Pattern(lru, {1, 2, 2, 1, 3, 2}), "mmhhmm");
  // An unreferenced row is evicted before a referenced older one.
  Clock second(10, 2);
  EXPECT_EQ(Pattern(second, {1, 2, 1, 3, 1, 2}), "mmhmhm");  // 3 evicts 2, 2 evicts 3 (1 referenced again)
  EXPECT_EQ(second.copies(), 4);
}

TEST(PageFifo, FlushDropsTheOldestPagesHotOrNotByHand) {
  // 3 pages of 2 rows, flushed down to 1 page: 7 finds the cache full, the
  // flush keeps only the newest page {5, 6}, so hot row 1 is dropped.
  PageFifo fifo(10, /*rows_per_page=*/2, /*max_pages=*/3, /*lower_pages=*/1);
  EXPECT_EQ(Pattern(fifo, {1, 2, 3, 4, 5, 6, 1, 7, 1, 6, 5}), "mmmmmmhmmhh");
  EXPECT_EQ(fifo.flushes(), 1);
  EXPECT_EQ(fifo.copies(), 8);
}

TEST(PageFifo, AdmissionCopiesOnTheSecondMiss) {
  PageFifo fifo(10, 2, 3, 1, /*admit_after=*/2, /*sketch_counters=*/4096);
  EXPECT_EQ(Pattern(fifo, {1, 2, 1, 1, 2, 2}), "mmmhmh");
  EXPECT_EQ(fifo.copies(), 2);
}

TEST(ClockAdmit, CopiesOnTheSecondMissAndAgingForgets) {
  ClockAdmit clock(10, 2, /*threshold=*/2, /*sketch_counters=*/4096, /*age_every=*/1000);
  EXPECT_EQ(Pattern(clock, {1, 2, 1, 2, 1, 2}), "mmmmhh");
  EXPECT_EQ(clock.copies(), 2);
  EXPECT_EQ(clock.agings(), 0);
  // Aged after every miss, a single sighting is halved away before the next.
  ClockAdmit forgetful(10, 2, 2, 4096, /*age_every=*/1);
  EXPECT_EQ(Pattern(forgetful, {1, 1, 1}), "mmm");
  EXPECT_EQ(forgetful.copies(), 0);
  EXPECT_EQ(forgetful.agings(), 3);
}

TEST(S3Fifo, GhostHitsGoToMainAndHitRowsSurviveByHand) {
  // Capacity 2: S holds 1, M holds 1, G remembers 1.
  S3Fifo s3(10, 2);
  EXPECT_EQ(Pattern(s3, {1, 2, 3}), "mmm");  // S [1 2]; 3 sends 1 to G: S [2 3]
  EXPECT_EQ(Pattern(s3, {1}), "m");          // 1 is in G: 2 goes to G, 1 to M: S [3] M [1]
  EXPECT_EQ(s3.small_size(), 1);
  EXPECT_EQ(s3.main_size(), 1);
  // 1 and 3 hit; 4: S's 3 was hit, moves to M, M overflows: 1 (hit) is
  // re-queued with its frequency lowered, 3 (cleared on the move) leaves.
  EXPECT_EQ(Pattern(s3, {1, 3, 4, 1}), "hhmh");
  // 3 left M, not S: G does not remember it, so it goes to S and pushes 4
  // to G.
  EXPECT_EQ(Pattern(s3, {3}), "m");
  EXPECT_EQ(s3.small_size(), 1);
  EXPECT_EQ(s3.main_size(), 1);
  // 2 left G when 4 entered it (G holds one), so 2 misses into S too.
  EXPECT_EQ(Pattern(s3, {2}), "m");
  EXPECT_EQ(s3.copies(), 7);
  EXPECT_EQ(Pattern(s3, {4}), "m");  // 4 was pushed out of G by 3 (G holds one)
  EXPECT_EQ(s3.small_size() + s3.main_size(), 2);
}

TEST(S3Fifo, OneHitWondersDoNotDisplaceTheMainQueue) {
  // Capacity 10: rows 0..8 are hit twice so they reach M; then a scan of
  // 100 new rows passes through S and G only and every row of M survives it.
  S3Fifo s3(1000, 10);
  for (uint32_t r = 0; r < 9; ++r) s3.Access(r);
  for (uint32_t r = 0; r < 9; ++r) EXPECT_TRUE(s3.Access(r));
  for (uint32_t r = 100; r < 200; ++r) EXPECT_FALSE(s3.Access(r));
  int survivors = 0;
  for (uint32_t r = 0; r < 9; ++r) survivors += s3.Access(r);
  EXPECT_EQ(survivors, 9);
  Lru lru(1000, 10);  // the same trace wipes LRU
  for (uint32_t r = 0; r < 9; ++r) lru.Access(r);
  for (uint32_t r = 0; r < 9; ++r) lru.Access(r);
  for (uint32_t r = 100; r < 200; ++r) lru.Access(r);
  survivors = 0;
  for (uint32_t r = 0; r < 9; ++r) survivors += lru.Access(r);
  EXPECT_EQ(survivors, 0);
}

// Obviously-correct references: LRU as a vector in recency order, CLOCK as
// FIFO-reinsertion (a deque: a referenced front row is cleared and re-queued).
class NaiveLru {
 public:
  explicit NaiveLru(size_t capacity) : capacity_(capacity) {}
  bool Access(uint32_t row) {
    auto it = std::find(order_.begin(), order_.end(), row);
    const bool hit = it != order_.end();
    if (hit) order_.erase(it);
    else if (order_.size() == capacity_) order_.pop_back();
    order_.insert(order_.begin(), row);
    return hit;
  }

 private:
  size_t capacity_;
  std::vector<uint32_t> order_;  // most recent first
};

class NaiveClock {
 public:
  explicit NaiveClock(size_t capacity) : capacity_(capacity) {}
  bool Access(uint32_t row) {
    for (auto& [r, referenced] : queue_) {
      if (r == row) return referenced = true;
    }
    while (queue_.size() == capacity_) {
      auto [r, referenced] = queue_.front();
      queue_.pop_front();
      if (referenced) queue_.push_back({r, false});
    }
    queue_.push_back({row, false});
    return false;
  }

 private:
  size_t capacity_;
  std::deque<std::pair<uint32_t, bool>> queue_;
};

TEST(LruAndClock, MatchNaiveReferencesOnRandomTraces) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Xoshiro256pp rng(seed);
    const int64_t nrows = 4 + static_cast<int64_t>(rng.Below(60)), capacity = 1 + static_cast<int64_t>(rng.Below(16));
    Lru lru(nrows, capacity);
    Clock clock(nrows, capacity);
    NaiveLru naive_lru(static_cast<size_t>(capacity));
    NaiveClock naive_clock(static_cast<size_t>(capacity));
    for (int i = 0; i < 2000; ++i) {
      const uint32_t row = static_cast<uint32_t>(rng.Below(static_cast<uint64_t>(nrows)));
      ASSERT_EQ(lru.Access(row), naive_lru.Access(row)) << "access " << i << ", row " << row;
      ASSERT_EQ(clock.Access(row), naive_clock.Access(row)) << "access " << i << ", row " << row;
    }
  }
}

TEST(MakeStream, IdealMatchesTheZipfMassAndShiftingLoadsRows) {
  const int64_t n = 20000, lookups = 400000;
  const std::vector<int64_t> caps = {200, 1000, 4000};
  const Stream s = MakeStream({.nrows = n, .lookups = lookups, .warmup = 0, .alpha = 1.0, .seed = 7}, caps);
  double total = 0;
  for (int64_t k = 1; k <= n; ++k) total += 1.0 / static_cast<double>(k);
  for (size_t j = 0; j < caps.size(); ++j) {
    double mass = 0;
    for (int64_t k = 1; k <= caps[j]; ++k) mass += 1.0 / static_cast<double>(k);
    EXPECT_NEAR(static_cast<double>(s.ideal_hits[j]) / lookups, mass / total, 0.005) << "capacity " << caps[j];
    EXPECT_EQ(s.ideal_copies[j], 0);
  }
  // The ranks are scattered: the hottest row is not row 0 for this seed.
  std::vector<int64_t> count(n, 0);
  for (uint32_t r : s.rows) ++count[r];
  EXPECT_NE(std::max_element(count.begin(), count.end()) - count.begin(), 0);

  const Stream moving = MakeStream(
      {.nrows = n, .lookups = lookups, .warmup = 0, .alpha = 1.0, .shift_every = 40000, .shift_fraction = 0.1, .seed = 7},
      caps);
  for (size_t j = 0; j < caps.size(); ++j) {
    // 9 re-draws, each moving about 10% of the hot ranks to rows that were cold.
    EXPECT_GT(moving.ideal_copies[j], 9 * caps[j] / 20) << "capacity " << caps[j];
    EXPECT_LT(moving.ideal_copies[j], 9 * caps[j] / 5) << "capacity " << caps[j];
  }
}

TEST(Ideal, BeatsEveryPolicyOnZipfStreams) {
  const int64_t n = 50000, warmup = 100000;
  const std::vector<int64_t> caps = {512, 2560, 5120};
  for (double alpha : {0.9, 1.2}) {
    for (int64_t shift_every : {int64_t{0}, int64_t{100000}}) {
      SCOPED_TRACE("alpha " + std::to_string(alpha) + ", shift every " + std::to_string(shift_every));
      const Stream s = MakeStream({.nrows = n,
                                   .lookups = warmup + 400000,
                                   .warmup = warmup,
                                   .alpha = alpha,
                                   .shift_every = shift_every,
                                   .shift_fraction = 0.1,
                                   .seed = 3},
                                  caps);
      for (size_t j = 0; j < caps.size(); ++j) {
        const int64_t c = caps[j], ideal = s.ideal_hits[j];
        PageFifo fifo(n, 512, c / 512, c / 512 - std::max<int64_t>(1, c / 512 / 3));
        Clock clock(n, c);
        ClockAdmit admit(n, c, 2, 1 << 14, c);
        S3Fifo s3(n, c);
        Lru lru(n, c);
        EXPECT_GT(ideal, Replay(fifo, s.rows, warmup).hits) << "page_fifo, capacity " << c;
        EXPECT_GT(ideal, Replay(clock, s.rows, warmup).hits) << "clock, capacity " << c;
        EXPECT_GT(ideal, Replay(admit, s.rows, warmup).hits) << "clock_k2, capacity " << c;
        EXPECT_GT(ideal, Replay(s3, s.rows, warmup).hits) << "s3fifo, capacity " << c;
        EXPECT_GT(ideal, Replay(lru, s.rows, warmup).hits) << "lru, capacity " << c;
      }
    }
  }
}

}  // namespace
}  // namespace cemb::sim
