// The out-of-line members of CachedTable<T, kDynamic> (cache/cached_table.h
// includes this at its end; they are instantiated per element type in
// cache/cached_table.cc).
#ifndef CEMB_CACHE_INTERNAL_CACHED_TABLE_IMPL_H_
#define CEMB_CACHE_INTERNAL_CACHED_TABLE_IMPL_H_

#include "cache/cached_table.h"

namespace cemb {

template <RowElement T>
T* CachedTable<T, kDynamic>::Miss(int64_t row, uint64_t w) const {
  using namespace cache_internal;
  Count(HotCounter::kMisses);
  if (policy_ != CachePolicy::kDynamic) return Address(w);
  if (w & kLocked) {  // another thread is migrating or evicting it: its address is the current copy
    Count(HotCounter::kCasFailures);
    return Address(w);
  }
  if (!CacheHasRoom()) {
    Count(HotCounter::kCapacityRejects);
    if (eviction_ == CacheEviction::kClock) WakeEvictor();
    return Address(w);
  }
  if (!filter_->observe(row)) {
    Count(HotCounter::kAdmissionRejects);
    return Address(w);
  }
  uint64_t expected = w;
  if (!words_[row].compare_exchange_strong(expected, w | kLocked, std::memory_order_acquire,
                                           std::memory_order_acquire)) {
    Count(HotCounter::kCasFailures);
    // Another thread took the row: the address it left is the current copy.
    return Address(expected);
  }
  std::byte* slot = AllocateSlot(row);
  if (slot == nullptr) {
    words_[row].store(w, std::memory_order_release);
    Count(HotCounter::kCapacityRejects);
    return Address(w);
  }
  std::memcpy(slot, Address(w), base_.row_bytes());
  // kClock publishes unreferenced (the hand may take a row never hit again);
  // kFlush ignores the bit, so it is set and hits never write the word.
  const uint64_t published =
      reinterpret_cast<uint64_t>(slot) | kCached | (eviction_ == CacheEviction::kClock ? 0 : kReferenced);
  words_[row].store(published, std::memory_order_release);
  Count(HotCounter::kMigrations);
  return reinterpret_cast<T*>(slot);
}

template <RowElement T>
T* CachedTable<T, kDynamic>::MarkDirty(int64_t row, uint64_t w, bool count) const {
  using namespace cache_internal;
  for (;;) {
    uint64_t dirty = 0;
    if (w & kCached) {
      dirty = w | kDirty;
    } else if ((w & kLocked) && (w & kDirty)) {  // COPYING: wait for the evictor's copy of this row
      CpuRelax();
      w = words_[row].load(std::memory_order_seq_cst);
      continue;
    } else if ((w & kLocked) && w != (BaseWord(row) | kLocked)) {
      dirty = (w & ~kLocked) | kCached | kDirty;  // EVICTING: republished, the eviction is cancelled
    } else {
      // BASE (LOCKED, a migration, would be a lookup of the row beside its update).
      if (count) Count(HotCounter::kBaseUpdates);
      return Address(w);
    }
    if (w == dirty || words_[row].compare_exchange_weak(w, dirty, std::memory_order_seq_cst)) {
      if (count) Count(HotCounter::kUpdateHits);
      return Address(dirty);
    }
  }
}

template <RowElement T>
std::byte* CachedTable<T, kDynamic>::AllocateSlot(int64_t row) const {
  using namespace cache_internal;
  CacheState& s = *state_;
  while (!s.full.load(std::memory_order_relaxed)) {
    Page* page = s.current.load(std::memory_order_acquire);
    if (page != nullptr) {
      const int64_t i = page->next.fetch_add(1, std::memory_order_relaxed);
      if (i < rows_per_page_) {
        page->backedge[i].store(row, std::memory_order_relaxed);
        std::byte* slot = page->rows + static_cast<size_t>(i) * stride_;
        ASAN_UNPOISON_MEMORY_REGION(slot, stride_);  // a recycled page's slot may have been freed by kClock
        return slot;
      }
    }
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.current.load(std::memory_order_relaxed) != page) continue;  // another thread opened one
    if (static_cast<int64_t>(s.pages.size()) >= s.max_pages) {
      s.full.store(true, std::memory_order_relaxed);
      break;
    }
    std::unique_ptr<Page> fresh;
    if (!s.free_pages.empty()) {
      fresh = std::move(s.free_pages.back());
      s.free_pages.pop_back();
    } else {
      absl::StatusOr<std::unique_ptr<Page>> made = NewPage(rows_per_page_, stride_);
      if (!made.ok()) {  // out of DRAM: behave as a full cache
        s.full.store(true, std::memory_order_relaxed);
        break;
      }
      fresh = *std::move(made);
    }
    fresh->next.store(0, std::memory_order_relaxed);
    fresh->ordinal = static_cast<int64_t>(s.pages.size());
    if (eviction_ == CacheEviction::kClock) s.page_table[fresh->ordinal].store(fresh.get(), std::memory_order_release);
    s.current.store(fresh.get(), std::memory_order_release);
    s.pages.push_back(std::move(fresh));
    s.npages.store(static_cast<int64_t>(s.pages.size()), std::memory_order_relaxed);
    ++s.cold.pages_opened;
  }
  if (eviction_ != CacheEviction::kClock) return nullptr;
  int64_t left = 0;
  const int32_t id = s.free_slots.Pop(&left);
  if (id < 0) {
    WakeEvictor();
    return nullptr;
  }
  if (left <= s.low_water.load(std::memory_order_relaxed)) WakeEvictor();
  std::byte* slot = SlotAddress(id);
  ASAN_UNPOISON_MEMORY_REGION(slot, stride_);
  SlotPage(id)->backedge[id % rows_per_page_].store(row, std::memory_order_relaxed);
  return slot;
}

template <RowElement T>
void CachedTable<T, kDynamic>::WakeEvictor() const {
  cache_internal::CacheState& s = *state_;
  if (s.wake_pending.load(std::memory_order_relaxed) || s.wake_pending.exchange(true, std::memory_order_acq_rel)) {
    return;
  }
  s.wake.fetch_add(1, std::memory_order_release);
  s.wake.notify_one();
}

template <RowElement T>
void CachedTable<T, kDynamic>::SetBounds(int64_t lower, int64_t slack) {
  cache_internal::CacheState& s = *state_;
  const std::unique_lock<std::mutex> evict_lock = HoldOffEvictor();
  const int64_t max_pages = MaxPages(lower, slack);
  if (eviction_ == CacheEviction::kClock && static_cast<int64_t>(s.pages.size()) > max_pages) {
    FlushPages(max_pages * page_bytes(), /*writeback=*/true);  // fewer pages than are open: the oldest go
  }
  std::lock_guard<std::mutex> lock(s.mu);
  s.lower_bytes = std::max<int64_t>(0, lower);
  s.slack_bytes = std::max<int64_t>(0, slack);
  s.max_pages = max_pages;
  s.full.store(false, std::memory_order_relaxed);  // the next miss finds out
  if (eviction_ == CacheEviction::kClock) RebuildClockState();
}

template <RowElement T>
void CachedTable<T, kDynamic>::DrainPage(cache_internal::Page& page, bool evict, bool writeback) {
  using namespace cache_internal;
  ColdCounters& c = state_->cold;
  const int64_t n = std::min(page.next.load(std::memory_order_relaxed), rows_per_page_);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = page.backedge[i].load(std::memory_order_relaxed);
    if (row < 0) continue;
    std::byte* slot = page.rows + static_cast<size_t>(i) * stride_;
    const uint64_t w = words_[row].load(std::memory_order_relaxed);
    T* base_row = base_.rowpointer(row);
    if (w & kDirty) {
      if (writeback) {
        StreamCopy(base_row, slot, base_.row_bytes());
        state_->written.push_back(row);
        ++c.rows_written_back;
      } else if (evict) {
        ++c.dirty_rows_discarded;
      }
    } else if (evict || writeback) {
      ++c.clean_rows_skipped;
    }
    if (evict) {
      words_[row].store(reinterpret_cast<uint64_t>(base_row), std::memory_order_release);
      page.backedge[i].store(-1, std::memory_order_relaxed);
      ++c.rows_evicted;
    } else if (w & kDirty) {
      words_[row].store(w & ~kDirty, std::memory_order_release);
    }
  }
  if (evict) ASAN_UNPOISON_MEMORY_REGION(page.rows, static_cast<size_t>(n) * stride_);  // kClock's freed slots
  if (evict && check_lifetime_) std::memset(page.rows, 0xFF, static_cast<size_t>(n) * stride_);
}

template <RowElement T>
void CachedTable<T, kDynamic>::PersistWritten(std::vector<int64_t>& rows) {
  if (rows.empty()) return;
  cache_internal::StoreFence();
  if (base_.region().persistent()) {
    // Persist runs of rows, merging neighbours closer than a 4 KiB page.
    std::sort(rows.begin(), rows.end());
    const int64_t gap = std::max<int64_t>(1, 4096 / static_cast<int64_t>(base_.row_bytes()));
    size_t i = 0;
    while (i < rows.size()) {
      size_t j = i + 1;
      while (j < rows.size() && rows[j] - rows[j - 1] <= gap) ++j;
      base_.persist_rows(rows[i], rows[j - 1] + 1);
      i = j;
    }
  }
  rows.clear();
}

template <RowElement T>
void CachedTable<T, kDynamic>::Flush(int64_t target_bytes, bool writeback) {
  const std::unique_lock<std::mutex> evict_lock = HoldOffEvictor();
  FlushPages(target_bytes, writeback);
}

template <RowElement T>
void CachedTable<T, kDynamic>::FlushPages(int64_t target_bytes, bool writeback) {
  using namespace cache_internal;
  CacheState& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (check_lifetime_ && s.open_scopes.load(std::memory_order_relaxed) != 0) {
    LifetimeViolation(name(), "flush while a step holds row pointers", s.open_scopes.load());
  }
  s.flushing.store(true, std::memory_order_relaxed);
  s.epoch.fetch_add(1, std::memory_order_relaxed);
  ++s.cold.flushes;
  while (!s.pages.empty() && static_cast<int64_t>(s.pages.size()) * page_bytes() > target_bytes) {
    std::unique_ptr<Page> page = std::move(s.pages.front());
    s.pages.pop_front();
    DrainPage(*page, /*evict=*/true, writeback);
    if (s.current.load(std::memory_order_relaxed) == page.get()) s.current.store(nullptr, std::memory_order_relaxed);
    page->next.store(0, std::memory_order_relaxed);
    ++s.cold.pages_flushed;
    if (static_cast<int64_t>(s.pages.size() + s.free_pages.size()) < s.max_pages) {
      s.free_pages.push_back(std::move(page));
    }
  }
  s.npages.store(static_cast<int64_t>(s.pages.size()), std::memory_order_relaxed);
  if (static_cast<int64_t>(s.pages.size()) < s.max_pages) s.full.store(false, std::memory_order_relaxed);
  PersistWritten(s.written);
  filter_->age();
  if (eviction_ == CacheEviction::kClock) RebuildClockState();
  s.flushing.store(false, std::memory_order_relaxed);
}

template <RowElement T>
void CachedTable<T, kDynamic>::Writeback() {
  cache_internal::CacheState& s = *state_;
  const std::unique_lock<std::mutex> evict_lock = HoldOffEvictor();
  std::lock_guard<std::mutex> lock(s.mu);
  ++s.cold.syncs;
  for (auto& page : s.pages) DrainPage(*page, /*evict=*/false, /*writeback=*/true);
  PersistWritten(s.written);
}

// --- kClock ---------------------------------------------------------------------

template <RowElement T>
void CachedTable<T, kDynamic>::RebuildClockState() {
  using namespace cache_internal;
  CacheState& s = *state_;
  const int64_t table_pages = std::max<int64_t>(s.max_pages, static_cast<int64_t>(s.pages.size()));
  s.page_table = std::make_unique<std::atomic<Page*>[]>(static_cast<size_t>(std::max<int64_t>(1, table_pages)));
  s.free_slots.Reset(table_pages * rows_per_page_);
  int64_t ordinal = 0;
  for (auto& page : s.pages) {
    page->ordinal = ordinal++;
    s.page_table[page->ordinal].store(page.get(), std::memory_order_relaxed);
    const int64_t n = std::min(page->next.load(std::memory_order_relaxed), rows_per_page_);
    for (int64_t i = 0; i < n; ++i) {
      if (page->backedge[i].load(std::memory_order_relaxed) < 0) {
        s.free_slots.Push(static_cast<int32_t>(page->ordinal * rows_per_page_ + i));
      }
    }
  }
  const int64_t capacity = s.max_pages * rows_per_page_;
  // Free slots kept in reserve: 1.5-3% of a large cache (rounds of many
  // victims share their grace periods), at most 6-12% of a small one.
  s.low_water.store(std::max<int64_t>(std::min<int64_t>(8, capacity / 16), capacity / 64), std::memory_order_relaxed);
  s.high_water.store(std::max<int64_t>(std::min<int64_t>(16, capacity / 8), capacity / 32),
                     std::memory_order_relaxed);
  s.hand = 0;
}

template <RowElement T>
void CachedTable<T, kDynamic>::StartEvictor() {
  if (eviction_ != CacheEviction::kClock || !evictor_thread_ || state_ == nullptr) return;
  state_->stop.store(false, std::memory_order_relaxed);
  state_->evictor = std::thread([this] { EvictorLoop(); });
}

template <RowElement T>
void CachedTable<T, kDynamic>::StopEvictor() {
  if (state_ == nullptr || !state_->evictor.joinable()) return;
  state_->stop.store(true, std::memory_order_release);
  state_->wake.fetch_add(1, std::memory_order_release);
  state_->wake.notify_all();
  state_->evictor.join();
}

template <RowElement T>
void CachedTable<T, kDynamic>::EvictorLoop() {
  cache_internal::CacheState& s = *state_;
  for (;;) {
    const uint32_t seen = s.wake.load(std::memory_order_acquire);
    if (s.stop.load(std::memory_order_acquire)) return;
    s.wake_pending.store(false, std::memory_order_release);
    if (NeedsEviction() && EvictRound() > 0) continue;
    s.wake.wait(seen, std::memory_order_acquire);
  }
}

// One round: the hand unpublishes unreferenced rows until high_water slots
// would be free (at most two revolutions: the first may only clear bits),
// then grace periods, write-back of the dirty ones, and the slots go free.
template <RowElement T>
int64_t CachedTable<T, kDynamic>::EvictRound() {
  using namespace cache_internal;
  CacheState& s = *state_;
  std::lock_guard<std::mutex> evict_lock(s.evict_mu);
  const int64_t nslots = s.npages.load(std::memory_order_acquire) * rows_per_page_;
  const int64_t want = s.high_water.load(std::memory_order_relaxed) - s.free_slots.size();
  if (nslots == 0 || want <= 0) return 0;
  std::vector<int32_t> clean, dirty, freed;
  for (int64_t step = 0; step < 2 * nslots && static_cast<int64_t>(clean.size() + dirty.size()) < want; ++step) {
    const int64_t id = s.hand;
    s.hand = s.hand + 1 == nslots ? 0 : s.hand + 1;
    Page* page = SlotPage(id);
    const int64_t i = id % rows_per_page_;
    const int64_t row = page->backedge[i].load(std::memory_order_relaxed);
    if (row < 0) continue;
    std::byte* slot = page->rows + static_cast<size_t>(i) * stride_;
    uint64_t w = words_[row].load(std::memory_order_seq_cst);
    if (!(w & kCached) || Address(w) != reinterpret_cast<T*>(slot)) continue;  // being migrated
    if (w & kReferenced) {
      words_[row].compare_exchange_strong(w, w & ~kReferenced, std::memory_order_relaxed);
      continue;
    }
    if (!(w & kDirty)) {
      if (words_[row].compare_exchange_strong(w, BaseWord(row), std::memory_order_seq_cst)) {
        clean.push_back(static_cast<int32_t>(id));
      }
    } else if (words_[row].compare_exchange_strong(w, (w & ~kTagMask) | kLocked, std::memory_order_seq_cst)) {
      dirty.push_back(static_cast<int32_t>(id));
    }
  }
  if (clean.empty() && dirty.empty()) return 0;
  WaitForReaders();  // nobody holds a clean victim; every update of a dirty one is done
  freed = std::move(clean);
  std::vector<int64_t> written;
  const size_t nclean = freed.size();
  for (int32_t id : dirty) {
    std::byte* slot = SlotAddress(id);
    const int64_t row = SlotPage(id)->backedge[id % rows_per_page_].load(std::memory_order_relaxed);
    uint64_t evicting = reinterpret_cast<uint64_t>(slot) | kLocked;
    if (!words_[row].compare_exchange_strong(evicting, evicting | kDirty, std::memory_order_seq_cst)) {
      continue;  // an updater took it back (DIRTY again): it stays cached
    }
    // COPYING: updates of the row wait for this copy; lookups read the slot.
    StreamCopy(base_.rowpointer(row), slot, base_.row_bytes());
    StoreFence();
    words_[row].store(BaseWord(row), std::memory_order_seq_cst);
    freed.push_back(id);
    written.push_back(row);
  }
  if (!written.empty()) WaitForReaders();  // nobody still reads the evicting slots
  PersistWritten(written);
  for (int32_t id : freed) {
    Page* page = SlotPage(id);
    page->backedge[id % rows_per_page_].store(-1, std::memory_order_relaxed);
    std::byte* slot = SlotAddress(id);
    if (check_lifetime_) std::memset(slot, 0xFF, stride_);
    ASAN_POISON_MEMORY_REGION(slot, stride_);
    s.free_slots.Push(id);
  }
  // The admission counts halve every `capacity` misses (bench/history/cache.md,
  // "Eviction for serving": counting admissions instead would stop the aging
  // when the filter rejects most rows).
  CacheStats counts;
  shards_->sum_into(counts);
  if (counts.misses() - s.misses_at_aging >= static_cast<uint64_t>(s.max_pages * rows_per_page_)) {
    filter_->age();
    s.misses_at_aging = counts.misses();
  }
  std::lock_guard<std::mutex> lock(s.mu);
  ++s.cold.eviction_rounds;
  s.cold.rows_evicted += freed.size();
  s.cold.clean_rows_skipped += nclean;
  s.cold.rows_written_back += freed.size() - nclean;
  return static_cast<int64_t>(freed.size());
}

template <RowElement T>
absl::StatusOr<int64_t> CachedTable<T, kDynamic>::fill(std::span<const int64_t> rows) {
  using namespace cache_internal;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] < 0 || rows[i] >= nvectors()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name(), ": fill row ", i, ": row ", rows[i], " >= nvectors ", nvectors()));
    }
  }
  int64_t filled = 0;
  for (int64_t row : rows) {
    const uint64_t w = words_[row].load(std::memory_order_relaxed);
    if (w & kCached) continue;
    std::byte* slot = AllocateSlot(row);
    if (slot == nullptr) break;
    std::memcpy(slot, Address(w), base_.row_bytes());
    words_[row].store(reinterpret_cast<uint64_t>(slot) | kCached | kReferenced, std::memory_order_release);
    ++filled;
  }
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->cold.rows_filled += static_cast<uint64_t>(filled);
  return filled;
}

template <RowElement T>
absl::StatusOr<int64_t> CachedTable<T, kDynamic>::fill_random(uint64_t seed) {
  return fill(cache_internal::RandomDistinctRows(nvectors(), capacity_rows(), seed));
}

template <RowElement T>
CacheStats CachedTable<T, kDynamic>::stats() const {
  CacheStats st;
  shards_->sum_into(st);
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    st.cold = state_->cold;
  }
  st.row_bytes = base_.row_bytes();
  st.cached_rows = cached_rows();
  st.used_bytes = used_bytes();
  st.cachelower = cachelower();
  st.cacheslack = cacheslack();
  return st;
}

template <RowElement T>
void CachedTable<T, kDynamic>::reset_stats() {
  shards_->reset();
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->cold = {};
}

template <RowElement T>
bool CachedTable<T, kDynamic>::in_cache(const void* p) const {
  const auto* b = static_cast<const std::byte*>(p);
  std::lock_guard<std::mutex> lock(state_->mu);
  for (const auto& page : state_->pages) {
    if (b >= page->rows && b < page->rows + static_cast<size_t>(page_bytes())) return true;
  }
  return false;
}

template <RowElement T>
int64_t CachedTable<T, kDynamic>::cached_rows() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  int64_t n = 0;
  for (const auto& page : state_->pages) n += std::min(page->next.load(std::memory_order_relaxed), rows_per_page_);
  return eviction_ == CacheEviction::kClock ? n - state_->free_slots.size() : n;
}

}  // namespace cemb

#endif  // CEMB_CACHE_INTERNAL_CACHED_TABLE_IMPL_H_
