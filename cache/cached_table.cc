#include "cache/cached_table.h"

#include <cstdio>
#include <cstdlib>
#include <numeric>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "absl/strings/str_format.h"
#include "base/random.h"

namespace cemb {

CacheStats CacheStats::operator-(const CacheStats& b) const {
  CacheStats d = *this;
  for (int c = 0; c < cache_internal::kHotCounters; ++c) d.hot[c] -= b.hot[c];
  d.cold.pages_opened -= b.cold.pages_opened;
  d.cold.pages_flushed -= b.cold.pages_flushed;
  d.cold.flushes -= b.cold.flushes;
  d.cold.syncs -= b.cold.syncs;
  d.cold.rows_evicted -= b.cold.rows_evicted;
  d.cold.rows_written_back -= b.cold.rows_written_back;
  d.cold.clean_rows_skipped -= b.cold.clean_rows_skipped;
  d.cold.dirty_rows_discarded -= b.cold.dirty_rows_discarded;
  d.cold.rows_filled -= b.cold.rows_filled;
  d.cold.eviction_rounds -= b.cold.eviction_rounds;
  return d;
}

std::string CacheStats::ToString() const {
  return absl::StrFormat(
      "lookups=%d hits=%d (%.1f%%) misses=%d migrations=%d cas_failures=%d admission_rejects=%d "
      "capacity_rejects=%d update_hits=%d base_updates=%d pages_opened=%d pages_flushed=%d flushes=%d "
      "eviction_rounds=%d "
      "rows_evicted=%d rows_written_back=%d clean_rows_skipped=%d dirty_rows_discarded=%d rows_filled=%d "
      "slow_read=%d slow_written=%d saved_by_dirty_bits=%d cached_rows=%d used_bytes=%d cachelower=%d "
      "cacheslack=%d",
      lookups(), hits(), 100.0 * hit_rate(), misses(), migrations(), cas_failures(), admission_rejects(),
      capacity_rejects(), update_hits(), base_updates(), cold.pages_opened, cold.pages_flushed, cold.flushes,
      cold.eviction_rounds,
      cold.rows_evicted, cold.rows_written_back, cold.clean_rows_skipped, cold.dirty_rows_discarded,
      cold.rows_filled, slow_bytes_read(), slow_bytes_written(), bytes_saved_by_dirty_bits(), cached_rows,
      used_bytes, cachelower, cacheslack);
}

namespace cache_internal {

namespace {
std::atomic<bool> g_stat_shard_taken[kSharedStatShard];

// Gives the thread's shard back when the thread exits; the next owner's
// claim (acquire) sees this thread's last counts.
struct StatShardReleaser {
  uint32_t shard = kSharedStatShard;
  ~StatShardReleaser() {
    if (shard == kSharedStatShard) return;
    tls_stat_shard = kSharedStatShard;  // counts from later thread-exit code go to the shared shard
    g_stat_shard_taken[shard].store(false, std::memory_order_release);
  }
};
}  // namespace

uint32_t AssignStatShard() {
  for (uint32_t i = 0; i < kSharedStatShard; ++i) {
    bool expected = false;
    if (g_stat_shard_taken[i].compare_exchange_strong(expected, true, std::memory_order_acquire)) {
      static thread_local StatShardReleaser releaser;
      releaser.shard = i;
      return i;
    }
  }
  return kSharedStatShard;
}

absl::StatusOr<std::unique_ptr<Page>> NewPage(int64_t rows, size_t stride) {
  const size_t bytes = static_cast<size_t>(rows) * stride;
  absl::StatusOr<Region> memory = Region::Allocate(TierOptions::DramFor(bytes), bytes);
  if (!memory.ok()) return memory.status();
  auto page = std::make_unique<Page>();
  page->memory = *std::move(memory);
  page->rows = page->memory.data();
  page->backedge = std::make_unique<std::atomic<int64_t>[]>(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) page->backedge[i].store(-1, std::memory_order_relaxed);
  return page;
}

void FreeSlots::Reset(int64_t capacity) {
  next_ = std::make_unique<std::atomic<int32_t>[]>(static_cast<size_t>(std::max<int64_t>(1, capacity)));
  head_.store(Pack(-1, 0), std::memory_order_relaxed);
  size_.store(0, std::memory_order_relaxed);
}

void StreamCopy(void* dst, const void* src, size_t bytes) {
#if defined(__SSE2__)
  const auto d = reinterpret_cast<uintptr_t>(dst);
  if (d % 16 == 0 && bytes % 16 == 0) {
    auto* out = static_cast<__m128i*>(dst);
    const auto* in = static_cast<const __m128i*>(src);
    for (size_t i = 0; i < bytes / 16; ++i) _mm_stream_si128(out + i, _mm_loadu_si128(in + i));
    return;
  }
  if (d % 4 == 0 && bytes % 4 == 0) {
    auto* out = static_cast<int*>(dst);
    const auto* in = static_cast<const int*>(src);
    for (size_t i = 0; i < bytes / 4; ++i) {
      int v;
      std::memcpy(&v, in + i, 4);
      _mm_stream_si32(out + i, v);
    }
    return;
  }
#endif
  std::memcpy(dst, src, bytes);
}

void StoreFence() {
#if defined(__SSE2__)
  _mm_sfence();
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

void LifetimeViolation(const std::string& table, const char* what, int64_t scopes) {
  std::fprintf(stderr,
               "cemb: cached table %s: %s (open step scopes: %lld). A pointer from rowpointer() is valid "
               "only until the next flush; flush between steps.\n",
               table.c_str(), what, static_cast<long long>(scopes));
  std::abort();
}

std::vector<int64_t> RandomDistinctRows(int64_t nvectors, int64_t count, uint64_t seed) {
  count = std::clamp<int64_t>(count, 0, nvectors);
  Xoshiro256pp rng(seed);
  std::vector<int64_t> rows;
  if (count * 2 >= nvectors) {  // partial Fisher-Yates over all rows
    rows.resize(static_cast<size_t>(nvectors));
    std::iota(rows.begin(), rows.end(), int64_t{0});
    for (int64_t i = 0; i < count; ++i) {
      const int64_t j = i + static_cast<int64_t>(rng.Below(static_cast<uint64_t>(nvectors - i)));
      std::swap(rows[i], rows[j]);
    }
    rows.resize(static_cast<size_t>(count));
    return rows;
  }
  // Few rows of many: rejection against a bitmap.
  std::vector<bool> taken(static_cast<size_t>(nvectors));
  rows.reserve(static_cast<size_t>(count));
  while (static_cast<int64_t>(rows.size()) < count) {
    const auto r = static_cast<int64_t>(rng.Below(static_cast<uint64_t>(nvectors)));
    if (!taken[r]) {
      taken[r] = true;
      rows.push_back(r);
    }
  }
  return rows;
}

}  // namespace cache_internal

}  // namespace cemb

template class ::cemb::CachedTable<float, ::cemb::kDynamic>;
template class ::cemb::CachedTable<::cemb::bfloat16, ::cemb::kDynamic>;
// Served rows (read only: a predictor's converted tables on a slow tier).
template class ::cemb::CachedTable<::cemb::float16, ::cemb::kDynamic>;
template class ::cemb::CachedTable<::cemb::int8_rowwise, ::cemb::kDynamic>;
