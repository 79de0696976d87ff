// Many std::threads on one CachedTable at once (not OpenMP: GCC's libgomp is
// not TSan-aware): readers look up and cache overlapping rows through the
// pooled-lookup kernels while updaters look up and update their own disjoint
// rows; the main thread flushes between rounds. Run under ThreadSanitizer in
// CI (label tsan). Bounded in iterations, never in time.
//
// Checks: no torn row (every pooled sum of the read-only rows is exact), no
// lost update (every updated row ends at its initial value plus its count of
// increments, in the cache and, after the last flush, in the base).
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

void RunStress(int admit_after, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed << " admit_after " << admit_after);
  auto table = Table::Create({.name = "stress", .nvectors = kRows, .tier = TierOptions::Dram(false)},
                             {.lower = CacheSize::Fraction(0.15), .slack = CacheSize::Fraction(0.1),
                              .rows_per_page = 16, .admit_after = admit_after, .check_lifetime = true});
  ASSERT_TRUE(table.ok()) << table.status();
  for (int64_t r = 0; r < kRows; ++r) {
    float* row = table->rowpointer(r, Access::kUpdate);
    for (int64_t c = 0; c < kD; ++c) row[c] = r < kReadRows ? ReadValue(r) : 0.0f;
  }
  auto kernels = TableKernels<Table>::Create(*table);
  ASSERT_TRUE(kernels.ok());
  std::vector<int64_t> increments(kRows, 0);  // per updated row; each updater owns its rows
  std::atomic<int64_t> bad_sums{0};

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
          table->rowpointer(row, Access::kForward);  // a lookup caches it (maybe)
          float* p = table->rowpointer(row, Access::kUpdate);
          for (int64_t c = 0; c < kD; ++c) p[c] += 1.0f;
          ++increments[row];
        }
      });
    }
    for (auto& th : threads) th.join();
    { auto done = std::move(step); }
    ASSERT_EQ(bad_sums.load(), 0) << "torn or wrong row read in round " << round;
    for (int64_t r = kReadRows; r < kRows; ++r) {
      const float* p = table->rowpointer(r, Access::kPrefetch);
      for (int64_t c = 0; c < kD; ++c) {
        ASSERT_EQ(p[c], static_cast<float>(increments[r])) << "lost update of row " << r << " in round " << round;
      }
    }
    if (table->isfull() || round % 2 == 1) table->flush_dirty();
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
  EXPECT_GT(s.flushes(), 1u);
  EXPECT_GT(s.rows_written_back(), 0u);
  EXPECT_GT(s.clean_rows_skipped(), 0u);  // read-only rows are never written back
}

TEST(CachedTableStress, ConcurrentCachingAndUpdatesLoseNothing) { RunStress(/*admit_after=*/0, 1); }

TEST(CachedTableStress, ConcurrentCachingWithAdmissionFilter) { RunStress(/*admit_after=*/2, 2); }

}  // namespace
}  // namespace cemb
