// Many std::threads on one CachedTable at once (not OpenMP: GCC's libgomp is
// not TSan-aware): readers look up and cache overlapping rows through the
// pooled-lookup kernels while updaters look up and update their own disjoint
// rows. With CacheEviction::kFlush the main thread flushes between rounds;
// with kClock nobody flushes: the table's evictor thread evicts (and writes
// back) while they run, in a cache small enough that it runs all the time.
// Run under ThreadSanitizer (label cache_tsan) and AddressSanitizer in CI
// (kClock poisons freed slots for ASan, and with 0xFF bytes). Bounded in
// iterations, never in time.
//
// Checks: no torn, stale or reclaimed row (every pooled sum of the read-only
// rows is exact), no lost update (every updated row ends at its initial
// value plus its count of increments, in the cache and, after the last
// flush, in the base).
#include <atomic>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "base/random.h"
#include "cache/cached_table.h"
#include "embedding/kernels.h"
#include "gtest/gtest.h"

namespace cemb {
namespace {

constexpr int64_t kRows = 4096;
constexpr int64_t kReadRows = 2048;  // rows [0, 2048) are read, never updated
constexpr int64_t kD = 32;
constexpr int kReaders = 4, kUpdaters = 3, kRounds = 6;
constexpr int kIterations = 300;  // per thread and round
using Table = CachedTable<float, kD>;

// Read-only row r holds r in every column (exact in float, and so are sums of
// a few of them).
float ReadValue(int64_t r) { return static_cast<float>(r); }

void RunStress(CacheEviction eviction, int admit_after, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed << " admit_after " << admit_after << " eviction "
                                    << CacheEvictionName(eviction));
  const bool clock = eviction == CacheEviction::kClock;
  // kClock: 256 slots for 2560 rows the threads touch, so the evictor never
  // rests. The test is the evictor (evictor_thread = false): a thread of its
  // own calls evict() beside the readers and updaters, and every row it
  // evicts is counted.
  auto table = Table::Create({.name = "stress", .nvectors = kRows, .tier = TierOptions::Dram(false)},
                             {.eviction = eviction, .evictor_thread = false,
                              .lower = CacheSize::Fraction(clock ? 0.05 : 0.15),
                              .slack = CacheSize::Fraction(clock ? 0.0125 : 0.1),
                              .rows_per_page = 16, .admit_after = admit_after, .check_lifetime = true});
  ASSERT_TRUE(table.ok()) << table.status();
  for (int64_t r = 0; r < kRows; ++r) {
    [[maybe_unused]] const auto scope = ReadScopeOf(*table);
    float* row = table->rowpointer(r, Access::kUpdate);
    for (int64_t c = 0; c < kD; ++c) row[c] = r < kReadRows ? ReadValue(r) : 0.0f;
  }
  auto kernels = TableKernels<Table>::Create(*table);
  ASSERT_TRUE(kernels.ok());
  std::vector<int64_t> increments(kRows, 0);  // per updated row; each updater owns its rows
  std::atomic<int64_t> bad_sums{0};
  std::atomic<int64_t> evicted{0};  // kClock: what evict() returned

  for (int round = 0; round < kRounds; ++round) {
    std::vector<std::thread> threads;
    auto step = table->begin_step();
    for (int t = 0; t < kReaders; ++t) {
      threads.emplace_back([&, t] {
        Xoshiro256pp rng(SplitMix64::Mix(seed, round * 100 + t));
        constexpr int kBags = 4, kLen = 5;
        std::vector<int32_t> offsets(kBags + 1), indices(kBags * kLen);
        std::vector<float> out(kBags * kD);
        for (int b = 0; b <= kBags; ++b) offsets[b] = b * kLen;
        for (int it = 0; it < kIterations; ++it) {
          // Overlapping rows: most draws from a small hot set every reader shares.
          for (auto& x : indices) x = static_cast<int32_t>(rng.Below(4) == 0 ? rng.Below(512) : rng.Below(64));
          const MatrixView view{out.data(), kBags, kD, kD};
          kernels->pooled_range(kernels->pooled_args(Bags<int32_t>{offsets, indices}, view, {}), 0, kBags);
          for (int b = 0; b < kBags; ++b) {
            float expected = 0;
            for (int j = 0; j < kLen; ++j) expected += ReadValue(indices[b * kLen + j]);
            for (int64_t c = 0; c < kD; ++c) {
              if (out[b * kD + c] != expected) bad_sums.fetch_add(1, std::memory_order_relaxed);
            }
          }
        }
      });
    }
    for (int t = 0; t < kUpdaters; ++t) {
      threads.emplace_back([&, t] {
        Xoshiro256pp rng(SplitMix64::Mix(seed, round * 100 + 50 + t));
        const int64_t mine = (kRows - kReadRows) / kUpdaters;
        for (int it = 0; it < kIterations; ++it) {
          // Updater t owns rows kReadRows + t, + t + kUpdaters, ...: a few hot ones, so rows recur.
          const int64_t k = rng.Below(3) == 0 ? rng.Below(mine) : rng.Below(8);
          const int64_t row = kReadRows + t + k * kUpdaters;
          [[maybe_unused]] const auto scope = ReadScopeOf(*table);  // kClock: a ReadSection
          table->rowpointer(row, Access::kForward);  // a lookup caches it (maybe)
          float* p = table->rowpointer(row, Access::kUpdate);
          for (int64_t c = 0; c < kD; ++c) p[c] += 1.0f;
          ++increments[row];
        }
      });
    }
    std::atomic<bool> round_done{false};
    std::thread evictor;
    if (clock) {
      evictor = std::thread([&] {
        while (!round_done.load(std::memory_order_acquire)) {
          evicted.fetch_add(table->evict(), std::memory_order_relaxed);
          std::this_thread::yield();
        }
      });
    }
    for (auto& th : threads) th.join();
    round_done.store(true, std::memory_order_release);
    if (evictor.joinable()) evictor.join();
    { auto done = std::move(step); }
    ASSERT_EQ(bad_sums.load(), 0) << "torn or wrong row read in round " << round;
    [[maybe_unused]] const auto scope = ReadScopeOf(*table);  // kClock: the evictor may still run
    for (int64_t r = kReadRows; r < kRows; ++r) {
      const float* p = table->rowpointer(r, Access::kPrefetch);
      for (int64_t c = 0; c < kD; ++c) {
        ASSERT_EQ(p[c], static_cast<float>(increments[r])) << "lost update of row " << r << " in round " << round;
      }
    }
    if (!clock && (table->isfull() || round % 2 == 1)) table->flush_dirty();
  }
  if (clock) {
    EXPECT_EQ(table->stats().flushes(), 0u) << "kClock made room without a flush";
    // However the threads were scheduled: every row looked up twice (the
    // admission filter admits on the second miss) fills the 256 slots
    // (misses beyond them are not cached), and one round of eviction frees some.
    for (int pass = 0; pass < 2; ++pass) {
      for (int64_t r = 0; r < kRows; ++r) {
        [[maybe_unused]] const auto scope = ReadScopeOf(*table);
        table->rowpointer(r, Access::kForward);
      }
    }
    const int64_t freed = table->evict();
    EXPECT_GT(freed, 0) << "a full cache evicts";
    evicted += freed;
    EXPECT_EQ(table->stats().rows_evicted(), static_cast<uint64_t>(evicted.load())) << "every eviction counted";
    EXPECT_GE(table->stats().eviction_rounds(), 1u);
  }
  table->flush_all();
  for (int64_t r = 0; r < kRows; ++r) {
    const float expected = r < kReadRows ? ReadValue(r) : static_cast<float>(increments[r]);
    for (int64_t c = 0; c < kD; ++c) ASSERT_EQ(table->base().rowpointer(r)[c], expected) << "base row " << r;
  }
  const CacheStats s = table->stats();
  std::printf("%s\n", s.ToString().c_str());
  EXPECT_GT(s.migrations(), 0u);
  EXPECT_GT(s.hits(), 0u);
  EXPECT_GT(s.flushes(), clock ? 0u : 1u);  // kClock: only the final flush_all
  // kClock: when its evictor lags, misses are not cached and updates go to
  // the base rows; every update of a cached row is written back.
  if (!clock || s.update_hits() > 0) {
    EXPECT_GT(s.rows_written_back(), 0u);
  }
  EXPECT_GT(s.clean_rows_skipped(), 0u);  // read-only rows are never written back
}

TEST(CachedTableStress, ConcurrentCachingAndUpdatesLoseNothing) {
  RunStress(CacheEviction::kFlush, /*admit_after=*/0, 1);
}

TEST(CachedTableStress, ConcurrentCachingWithAdmissionFilter) {
  RunStress(CacheEviction::kFlush, /*admit_after=*/2, 2);
}

TEST(CachedTableStress, ClockEvictsWhileThreadsReadAndUpdate) {
  RunStress(CacheEviction::kClock, /*admit_after=*/0, 3);
}

TEST(CachedTableStress, ClockWithAdmissionEvictsWhileThreadsReadAndUpdate) {
  RunStress(CacheEviction::kClock, /*admit_after=*/2, 4);
}

// Rows of a served format (int8 row-wise: D bytes, then the scale and bias)
// cached as stored, read only, by threads that resolve a bag's rows at once
// (access_and_cache of a block, as the predictor does for a converted
// table) inside one ReadSection, while a thread of the test evicts by CLOCK:
// every row a reader resolves holds its own bytes until the section closes.
TEST(CachedTableStress, ClockEvictsServedRowsWhileThreadsResolveThem) {
  constexpr int64_t kServedD = 64, kRowBytes = kServedD + 8;
  auto table = CachedTable<int8_rowwise>::Create(
      {.name = "served", .nvectors = kRows, .featuresize = kServedD, .tier = TierOptions::Dram(false)},
      {.eviction = CacheEviction::kClock, .evictor_thread = false, .lower = CacheSize::Fraction(0.05),
       .slack = CacheSize::Fraction(0.0125), .rows_per_page = 16, .check_lifetime = true});
  ASSERT_TRUE(table.ok()) << table.status();
  // Row r: byte c is (r + c) mod 251, then its row number as the "scale".
  auto byte_of = [](int64_t r, int64_t c) { return static_cast<uint8_t>((r + c) % 251); };
  for (int64_t r = 0; r < kRows; ++r) {
    [[maybe_unused]] const auto scope = ReadScopeOf(*table);
    auto* row = reinterpret_cast<uint8_t*>(table->rowpointer(r, Access::kWrite));
    for (int64_t c = 0; c < kServedD; ++c) row[c] = byte_of(r, c);
    const float scale = static_cast<float>(r), bias = 0;
    std::memcpy(row + kServedD, &scale, 4);
    std::memcpy(row + kServedD + 4, &bias, 4);
  }
  std::atomic<int64_t> bad_rows{0}, evicted{0};
  std::atomic<bool> done{false};
  std::thread evictor([&] {
    while (!done.load(std::memory_order_acquire)) {
      evicted.fetch_add(table->evict(), std::memory_order_relaxed);
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> readers;
  for (int t = 0; t < kReaders; ++t) {
    readers.emplace_back([&, t] {
      Xoshiro256pp rng(SplitMix64::Mix(5, t));
      std::vector<int32_t> rows(24);
      std::vector<const int8_rowwise*> resolved(rows.size());
      for (int it = 0; it < kRounds * kIterations; ++it) {
        for (auto& x : rows) x = static_cast<int32_t>(rng.Below(4) == 0 ? rng.Below(kRows) : rng.Below(256));
        [[maybe_unused]] const auto scope = ReadScopeOf(*table);
        table->access_and_cache(rows.data(), static_cast<int64_t>(rows.size()), resolved.data());
        for (size_t i = 0; i < rows.size(); ++i) {
          const auto* got = reinterpret_cast<const uint8_t*>(resolved[i]);
          float scale;
          std::memcpy(&scale, got + kServedD, 4);
          bool ok = scale == static_cast<float>(rows[i]);
          for (int64_t c = 0; c < kServedD; ++c) ok = ok && got[c] == byte_of(rows[i], c);
          if (!ok) bad_rows.fetch_add(1, std::memory_order_relaxed);
        }
      }
    });
  }
  for (auto& th : readers) th.join();
  done.store(true, std::memory_order_release);
  evictor.join();
  EXPECT_EQ(bad_rows.load(), 0) << "a resolved row changed under its reader";
  EXPECT_GT(evicted.load(), 0);
  EXPECT_EQ(table->stats().cold.rows_written_back, 0u);  // read only: nothing to write back
  EXPECT_EQ(sizeof(int8_rowwise) * kRowBytes, table->row_bytes());
}

}  // namespace
}  // namespace cemb
