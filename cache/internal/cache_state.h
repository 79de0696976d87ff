// The inside of CachedTable (cache/cached_table.h): the pointer word's
// states and transitions, the cache pages, kClock's free list, and the state
// the hot path does not touch: the cache's own code, not its users'.
//
// Pointer word (one std::atomic<uint64_t> per row): the address of the row's
// current copy, with two low tag bits (row addresses are 4-byte aligned) and
// two high ones (no user-space address reaches bit 57):
//   bit 0  kCached      the address is a cache slot in DRAM
//   bit 1  kLocked      a thread owns the row: migrating it into the cache
//                       (base address) or evicting it (slot address)
//   bit 62 kDirty       (cached only) the cached copy was handed out for update
//   bit 61 kReferenced  (cached only) looked up since the CLOCK hand passed
// States and the only transitions:
//   BASE     = base address              (not cached)
//   LOCKED   = base address | kLocked    (being migrated by the owning thread)
//   CACHED   = slot address | kCached [| kReferenced]
//   DIRTY    = CACHED | kDirty
//   EVICTING = slot address | kLocked    (kClock: unpublished, grace period running)
//   COPYING  = EVICTING | kDirty         (kClock: being written back)
//   BASE   -> LOCKED   CAS by access_and_cache (a miss the policy admits); a
//                      failed CAS (another thread owns it) returns the base
//                      row and never waits
//   LOCKED -> CACHED   release store by the owner after the copy and backedge
//   LOCKED -> BASE     release store by the owner when no slot can be had
//   CACHED -> DIRTY    CAS by access_for_update (rowpointer kUpdate)
//   CACHED -> CACHED|kReferenced   CAS by a hit that finds the bit clear
//   CACHED/DIRTY -> BASE   flush (DIRTY: the slot is written back first)
//   CACHED -> BASE     kClock evictor: a clean row the hand found unreferenced
//   DIRTY  -> EVICTING kClock evictor: a dirty one; after a grace period
//                      (no update of the slot is still running)
//   EVICTING -> COPYING  CAS by the evictor, which writes the slot back, then
//   COPYING  -> BASE   store by the evictor; or
//   EVICTING -> DIRTY  CAS by an updater (the eviction is cancelled). An
//                      updater that finds COPYING spins until BASE: the copy
//                      of one row, during which the evictor waits for nothing.
//   BASE   -> CACHED   fill() of the static policy (between steps)
//
// Cache pages: DRAM regions of rows_per_page slots, an atomic bump pointer
// that hands out slots, and a backedge array (slot -> row it holds, -1 =
// empty). Pages are kept oldest first; a table-level mutex is taken only to
// open a new page, which happens only while the cache is below cachelower +
// cacheslack. Flushed pages are recycled, so a steady state allocates nothing.
//
#ifndef CEMB_CACHE_INTERNAL_CACHE_STATE_H_
#define CEMB_CACHE_INTERNAL_CACHE_STATE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#include <sanitizer/asan_interface.h>
#endif
#endif
#ifndef ASAN_POISON_MEMORY_REGION
#define ASAN_POISON_MEMORY_REGION(addr, size) ((void)(addr), (void)(size))
#define ASAN_UNPOISON_MEMORY_REGION(addr, size) ((void)(addr), (void)(size))
#endif

#include "absl/status/statusor.h"
#include "cache/cache_stats.h"
#include "embedding/memory.h"

namespace cemb {

namespace cache_internal {

inline constexpr uint64_t kCached = 1;
inline constexpr uint64_t kLocked = 2;
inline constexpr uint64_t kReferenced = uint64_t{1} << 61;
inline constexpr uint64_t kDirty = uint64_t{1} << 62;
inline constexpr uint64_t kTagMask = kCached | kLocked | kReferenced | kDirty;

// One DRAM cache page.
struct Page {
  Region memory;
  std::byte* rows = nullptr;                           // rows_per_page slots of `stride` bytes
  std::unique_ptr<std::atomic<int64_t>[]> backedge;    // slot -> row, -1 = empty
  int64_t ordinal = 0;                                 // kClock: its slots' ids start at ordinal * rows_per_page
  alignas(64) std::atomic<int64_t> next{0};            // bump pointer (may run past the end)

  Page() = default;
  Page(const Page&) = delete;
  Page& operator=(const Page&) = delete;
  // kClock poisons freed slots for AddressSanitizer: the memory goes back unpoisoned.
  ~Page() { ASAN_UNPOISON_MEMORY_REGION(rows, memory.size()); }
};

// kClock's lock-free stack of free slot ids (a Treiber stack whose head
// carries a tag against ABA). Slot ids are < 2^31.
class FreeSlots {
 public:
  void Reset(int64_t capacity);  // empty, for ids [0, capacity); exclusive access
  void Push(int32_t id) {
    uint64_t head = head_.load(std::memory_order_relaxed);
    for (;;) {
      next_[id].store(static_cast<int32_t>(head & 0xFFFFFFFFu), std::memory_order_relaxed);
      if (head_.compare_exchange_weak(head, Pack(id, Tag(head) + 1), std::memory_order_release,
                                      std::memory_order_relaxed)) {
        break;
      }
    }
    size_.fetch_add(1, std::memory_order_relaxed);
  }
  // A free id, or -1; `left` is set to the ids left after this pop.
  int32_t Pop(int64_t* left) {
    uint64_t head = head_.load(std::memory_order_acquire);
    for (;;) {
      const auto id = static_cast<int32_t>(head & 0xFFFFFFFFu);
      if (id < 0) return -1;
      const int32_t next = next_[id].load(std::memory_order_relaxed);
      if (head_.compare_exchange_weak(head, Pack(next, Tag(head) + 1), std::memory_order_acquire,
                                      std::memory_order_acquire)) {
        *left = size_.fetch_sub(1, std::memory_order_relaxed) - 1;
        return id;
      }
    }
  }
  int64_t size() const { return size_.load(std::memory_order_relaxed); }

 private:
  static uint64_t Pack(int32_t id, uint32_t tag) {
    return (uint64_t{tag} << 32) | static_cast<uint32_t>(id);
  }
  static uint32_t Tag(uint64_t head) { return static_cast<uint32_t>(head >> 32); }
  alignas(64) std::atomic<uint64_t> head_{Pack(-1, 0)};
  std::atomic<int64_t> size_{0};
  std::unique_ptr<std::atomic<int32_t>[]> next_;
};

// A page of `rows` slots of `stride` bytes, 64-byte aligned, backedges empty.
absl::StatusOr<std::unique_ptr<Page>> NewPage(int64_t rows, size_t stride);
// dst <- src with non-temporal stores where alignment allows; the caller
// fences with StoreFence() after a batch.
void StreamCopy(void* dst, const void* src, size_t bytes);
void StoreFence();
// A spin-wait hint (PAUSE on x86).
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}
[[noreturn]] void LifetimeViolation(const std::string& table, const char* what, int64_t scopes);
// `count` distinct rows of [0, nvectors) in random order (all rows when count >= nvectors).
std::vector<int64_t> RandomDistinctRows(int64_t nvectors, int64_t count, uint64_t seed);

// Everything the hot path does not touch, behind one pointer (so the table
// is movable).
struct CacheState {
  std::mutex mu;  // guards opening pages; flushes take it too
  std::deque<std::unique_ptr<Page>> pages;      // in use, oldest first
  std::vector<std::unique_ptr<Page>> free_pages;  // flushed, for reuse
  std::atomic<Page*> current{nullptr};          // the page slots come from
  std::atomic<int64_t> npages{0};               // pages.size()
  std::atomic<bool> full{false};                // no slot and no new page: skip the CAS
  int64_t max_pages = 0;
  int64_t lower_bytes = 0, slack_bytes = 0;
  std::atomic<int64_t> open_scopes{0};
  std::atomic<bool> flushing{false};
  std::atomic<uint64_t> epoch{0};
  ColdCounters cold;                            // under mu
  std::vector<int64_t> written;                 // flush scratch

  // kClock only.
  std::unique_ptr<std::atomic<Page*>[]> page_table;  // ordinal -> page, max_pages entries
  FreeSlots free_slots;
  std::atomic<int64_t> low_water{0}, high_water{0};  // free slots: evict below low, up to high
  std::atomic<bool> wake_pending{false};              // a wake-up is on its way to the evictor
  std::atomic<uint32_t> wake{0};                      // the evictor waits on it (C++20 atomic wait)
  std::atomic<bool> stop{false};
  std::mutex evict_mu;                                // one eviction round, or a flush, at a time
  int64_t hand = 0;                                   // the CLOCK hand (slot id), under evict_mu
  uint64_t misses_at_aging = 0;                       // under evict_mu
  std::thread evictor;
};

}  // namespace cache_internal

}  // namespace cemb

#endif  // CEMB_CACHE_INTERNAL_CACHE_STATE_H_
