// CacheStats: what a CachedTable did, for users to read, print and plot.
//
// Hot-path events (lookups, misses, migrations, ...) are counted in relaxed
// atomics sharded by thread: each live thread owns a 64-byte shard of its own
// (claimed on its first count, released when it exits) and increments it
// with a plain load and store, no locked instruction, so a lookup costs no
// shared cache line and no fence. Beyond kStatShards - 1 live threads the
// rest share the last shard with atomic increments (still exact). Flush-time
// events are plain counters under the table's mutex. stats() sums the shards.
//
// Bytes moved to and from the slow tier are derived from the events:
//   read  = (misses + base_updates + rows_filled) * row_bytes
//           (a miss reads the base row, to use it or to copy it into DRAM;
//            an update of a row that is not cached reads and writes the base)
//   written = (base_updates + rows_written_back) * row_bytes
//   saved_by_dirty_bits = clean_rows_skipped * row_bytes (evicted or synced
//           clean rows that a write-everything-back cache would have written)
//
// Thread safety: StatShards::add from any thread; CacheStats is a value.
#ifndef CEMB_CACHE_CACHE_STATS_H_
#define CEMB_CACHE_CACHE_STATS_H_

#include <atomic>
#include <cstdint>
#include <string>

namespace cemb {
namespace cache_internal {

enum class HotCounter : int {
  kLookups,           // rowpointer(kForward)
  kMisses,            // ... that found the row not cached
  kMigrations,        // ... and copied it into the cache
  kCasFailures,       // ... but another thread owned the row (base row used)
  kAdmissionRejects,  // ... but the admission filter had not seen it often enough
  kCapacityRejects,   // ... but the cache was at cachelower + cacheslack
  kUpdateHits,        // rowpointer(kUpdate) of a cached row (marked dirty)
  kBaseUpdates,       // rowpointer(kUpdate) of a row not cached (slow-tier write)
  kCount
};
inline constexpr int kHotCounters = static_cast<int>(HotCounter::kCount);

// Flush-time and page counters (under the table mutex).
struct ColdCounters {
  uint64_t pages_opened = 0;
  uint64_t pages_flushed = 0;
  uint64_t flushes = 0;
  uint64_t syncs = 0;
  uint64_t rows_evicted = 0;
  uint64_t rows_written_back = 0;
  uint64_t clean_rows_skipped = 0;    // not written back thanks to the dirty bits
  uint64_t dirty_rows_discarded = 0;  // flush_clean of a dirty row
  uint64_t rows_filled = 0;           // static policy fill()
  uint64_t eviction_rounds = 0;       // kClock: rounds of the evictor thread
};

}  // namespace cache_internal

struct CacheStats {
  uint64_t hot[cache_internal::kHotCounters] = {};
  cache_internal::ColdCounters cold;
  size_t row_bytes = 0;
  int64_t cached_rows = 0, used_bytes = 0, cachelower = 0, cacheslack = 0;

  uint64_t get(cache_internal::HotCounter c) const { return hot[static_cast<int>(c)]; }
  uint64_t lookups() const { return get(cache_internal::HotCounter::kLookups); }
  uint64_t misses() const { return get(cache_internal::HotCounter::kMisses); }
  uint64_t hits() const { return lookups() - misses(); }
  uint64_t migrations() const { return get(cache_internal::HotCounter::kMigrations); }
  uint64_t cas_failures() const { return get(cache_internal::HotCounter::kCasFailures); }
  uint64_t admission_rejects() const { return get(cache_internal::HotCounter::kAdmissionRejects); }
  uint64_t capacity_rejects() const { return get(cache_internal::HotCounter::kCapacityRejects); }
  uint64_t update_hits() const { return get(cache_internal::HotCounter::kUpdateHits); }
  uint64_t base_updates() const { return get(cache_internal::HotCounter::kBaseUpdates); }
  uint64_t pages_opened() const { return cold.pages_opened; }
  uint64_t pages_flushed() const { return cold.pages_flushed; }
  uint64_t flushes() const { return cold.flushes; }
  uint64_t eviction_rounds() const { return cold.eviction_rounds; }
  uint64_t rows_evicted() const { return cold.rows_evicted; }
  uint64_t rows_written_back() const { return cold.rows_written_back; }
  uint64_t clean_rows_skipped() const { return cold.clean_rows_skipped; }
  uint64_t dirty_rows_discarded() const { return cold.dirty_rows_discarded; }
  double hit_rate() const { return lookups() == 0 ? 0.0 : static_cast<double>(hits()) / static_cast<double>(lookups()); }
  uint64_t slow_bytes_read() const { return (misses() + base_updates() + cold.rows_filled) * row_bytes; }
  uint64_t slow_bytes_written() const { return (base_updates() + cold.rows_written_back) * row_bytes; }
  uint64_t bytes_saved_by_dirty_bits() const { return cold.clean_rows_skipped * row_bytes; }

  // The difference of two snapshots (counters only; sizes from *this).
  CacheStats operator-(const CacheStats& before) const;
  // One line: "lookups=... hits=... (97.1%) misses=... migrations=... ...".
  std::string ToString() const;
};

namespace cache_internal {

inline constexpr int kStatShards = 64;
inline constexpr uint32_t kSharedStatShard = kStatShards - 1;

// This thread's shard: UINT32_MAX until its first count, then its own
// shard's index, or kSharedStatShard when every other shard is taken.
inline thread_local uint32_t tls_stat_shard = UINT32_MAX;
// Claims a free shard for this thread (released when it exits).
uint32_t AssignStatShard();
[[gnu::always_inline]] inline uint32_t ThisThreadStatShard() {
  uint32_t s = tls_stat_shard;
  if (s == UINT32_MAX) [[unlikely]] s = tls_stat_shard = AssignStatShard();
  return s;
}

class StatShards {
 public:
  [[gnu::always_inline]] void add(HotCounter c, uint64_t n) {
    const uint32_t shard = ThisThreadStatShard();
    std::atomic<uint64_t>& v = shards_[shard].v[static_cast<int>(c)];
    if (shard != kSharedStatShard) [[likely]] {
      v.store(v.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);  // only this thread writes it
    } else {
      v.fetch_add(n, std::memory_order_relaxed);
    }
  }
  void sum_into(CacheStats& st) const {
    for (const Shard& s : shards_) {
      for (int c = 0; c < kHotCounters; ++c) st.hot[c] += s.v[c].load(std::memory_order_relaxed);
    }
  }
  void reset() {
    for (Shard& s : shards_) {
      for (auto& v : s.v) v.store(0, std::memory_order_relaxed);
    }
  }

 private:
  struct alignas(64) Shard {
    std::atomic<uint64_t> v[kHotCounters] = {};
  };
  Shard shards_[kStatShards];
};

}  // namespace cache_internal
}  // namespace cemb

#endif  // CEMB_CACHE_CACHE_STATS_H_
