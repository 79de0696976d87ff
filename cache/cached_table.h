// CachedTable<T, D>: the CachedEmbeddings table (thesis section 5.4). The base
// rows live in a SimpleTable on a slow tier (PMem, CXL memory, a file; DRAM in
// tests); a software cache keeps copies of hot rows in DRAM cache pages, and a
// pointer table says, per row, where its current copy is.
//
// How it works inside (the pointer word's states and the only transitions
// between them, the cache pages): cache/internal/cache_state.h.
//
// Policies (CachePolicy): kDynamic caches on lookup (optionally only rows the
// admission filter has seen `admit_after` times) and makes room by its
// CacheEviction: kFlush (training) flushes the oldest pages between steps when
// the cache is full; kClock (serving) evicts concurrently (below);
// kStatic is filled once by fill() / fill_random() (rows chosen at random or
// from a RowProfiler) and never caches on lookup. The thesis' "simple"
// policy (no cache, no indirection) is a SimpleTable on the slow tier
// (tables/storage.h names every storage kind).
//
// T is a trained table's element (float, bfloat16) or a served format's
// (float16, int8_rowwise: embedding/row_format.h), whose rows are only read:
// a predictor's converted tables on a slow tier, cached in DRAM as stored.
//
// CachedTable<T, D> of a static D derives from CachedTable<T, kDynamic>,
// which holds all of the state and the cache's code; the derived class only
// makes featuresize() a constant. A table of a static size the kernels are
// not specialised for runs on its kDynamic base's kernels.
//
// CacheEviction::kClock, for serving: every thread may read (and update) while
// rows are admitted and evicted; nobody flushes and no thread waits for
// another. Once every page is open, misses take slots from a lock-free free
// list; when it runs low, a background thread per table runs a CLOCK hand
// over the slots (a hit sets the row's kReferenced bit when it finds it
// clear, so a hot row costs one CAS per revolution of the hand; an
// unreferenced row is unpublished), waits until no reader can still hold the
// victims (epoch-based reclamation, cache/epoch.h), writes dirty ones back,
// and only then frees the slots. A reader pays nothing per lookup for this;
// per kernel call (or per request, with the caller's own ReadSection) one
// store to announce itself and one to leave. Why CLOCK: bench/history/cache.md,
// "Eviction for serving".
//
// Lifetime rule: kFlush: a pointer returned by rowpointer() is valid until
// the next flush of this table; flushes happen between steps. kClock: until
// the ReadSection the pointer was obtained in closes (the kernels open one
// per call; code that calls rowpointer() itself opens its own). With
// CacheOptions::check_lifetime (the default in debug builds) a flush while a
// StepScope is open aborts, every flush moves flush_epoch(), and flushed slots
// are poisoned (0xFF bytes: NaN) so a stale pointer reads garbage loudly.
//
// Thread safety: rowpointer() (all Access kinds) may be called from any number
// of threads (kClock: inside a ReadSection); as for every table, an update of
// a row must not overlap another access to the same row (the kernels and the
// ensemble guarantee it), but kClock's evictor may run beside both. The
// flushes, fill*, the setters and reset_stats() need exclusive access (no
// kernel running on this table): call them between steps. stats() may be read
// at any time (the counts of a running step may be partial).
//
// Example:
//   auto t = CachedTable<float, 128>::Create({.name = "t0", .nvectors = 1 << 24,
//                                             .tier = TierOptions::Pmem("/mnt/pmem0")},
//                                            {.lower = CacheSize::Fraction(0.1)});
//   CEMB_RETURN_IF_ERROR(ensemble.add(*t));          // kernels: compiled per ISA by cache/CMakeLists.txt
//   ... ensemble.pooled_lookup(...); ensemble.sgd_update(...);
//   if (t->isfull()) t->flush_dirty();                // between steps
//   std::puts(t->stats().ToString().c_str());
#ifndef CEMB_CACHE_CACHED_TABLE_H_
#define CEMB_CACHE_CACHED_TABLE_H_

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>


#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/enum_names.h"
#include "cache/admission.h"
#include "cache/cache_stats.h"
#include "cache/epoch.h"
#include "cache/internal/cache_state.h"
#include "embedding/internal/feature_sizes.h"
#include "embedding/memory.h"
#include "embedding/simple_table.h"

namespace cemb {

// What the cache holds (the header comment above says how each works).
enum class CachePolicy { kStatic, kDynamic };

inline constexpr EnumName<CachePolicy> kCachePolicyNames[] = {{CachePolicy::kStatic, "static"},
                                                              {CachePolicy::kDynamic, "dynamic"}};
inline const char* CachePolicyName(CachePolicy policy) { return NameOf(kCachePolicyNames, policy); }
inline absl::StatusOr<CachePolicy> ParseCachePolicy(std::string_view name) {
  return ParseName(kCachePolicyNames, name, "cache policy");
}

// How a dynamic cache makes room (header comment). (The ssd tier has its own
// ssd::Eviction: which unpinned row its slot pool gives up.)
enum class CacheEviction {
  kFlush,  // page FIFO, flushed between steps by the owner (training)
  kClock,  // CLOCK by a background thread while any thread reads (serving)
};
inline constexpr EnumName<CacheEviction> kCacheEvictionNames[] = {{CacheEviction::kFlush, "flush"},
                                                                  {CacheEviction::kClock, "clock"}};
inline const char* CacheEvictionName(CacheEviction eviction) { return NameOf(kCacheEvictionNames, eviction); }
inline absl::StatusOr<CacheEviction> ParseCacheEviction(std::string_view name) {
  return ParseName(kCacheEvictionNames, name, "cache eviction");
}

// A cache size: bytes, or a fraction of the table's bytes. What a table's
// cache may hold is CacheOptions::lower + CacheOptions::slack: a "10% cache"
// (lower = Fraction(0.1)) with the default slack of 5% grows to 15% of the
// table before it is full, and a flush brings it back to 10%.
struct CacheSize {
  int64_t bytes = -1;     // used when >= 0
  double fraction = 0.0;  // of nvectors * row bytes, when bytes < 0

  static CacheSize Bytes(int64_t b) { return {b, 0.0}; }
  // REQUIRES: 0 < f <= 1 (checked by Validate(); no cache at all is Bytes(0)).
  static CacheSize Fraction(double f) { return {-1, f}; }
  int64_t Resolve(int64_t table_bytes) const {
    return bytes >= 0 ? bytes : static_cast<int64_t>(fraction * static_cast<double>(table_bytes));
  }
  // OK for Bytes(b >= 0) and Fraction(f) with f in (0, 1]; otherwise
  // InvalidArgument naming `what` ("t0: cache lower").
  [[nodiscard]] absl::Status Validate(absl::string_view what) const {
    if (bytes >= 0) return absl::OkStatus();
    if (bytes != -1) return absl::InvalidArgumentError(absl::StrCat(what, ": ", bytes, " bytes; expected >= 0"));
    if (!(fraction > 0.0 && fraction <= 1.0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": fraction ", fraction, " of the table is not in (0, 1] (no cache at all is CacheSize::Bytes(0))"));
    }
    return absl::OkStatus();
  }
};

#ifdef NDEBUG
inline constexpr bool kCacheDebugChecks = false;
#else
inline constexpr bool kCacheDebugChecks = true;
#endif

struct CacheOptions {
  CachePolicy policy = CachePolicy::kDynamic;
  // kDynamic only.
  CacheEviction eviction = CacheEviction::kFlush;
  // kClock: a thread of the table's own evicts when free slots run low;
  // false: the owner calls evict() (a maintenance thread of its own, tests).
  bool evictor_thread = true;
  // Flushes bring the cache down to at most `lower`; it may grow to
  // `lower + slack` (whole pages) before isfull().
  CacheSize lower = CacheSize::Fraction(0.25);
  CacheSize slack = CacheSize::Fraction(0.05);
  // Slots per cache page; 0: about 2 MiB pages, but at least 8 pages in the
  // cache and at least 16 rows per page; a cache of 1 to 127 rows (lower +
  // slack when created) has pages of an eighth of them, at least one row
  // (a 30% cache of a 24-row table holds its 7 rows, not 0).
  int64_t rows_per_page = 0;
  // kDynamic: cache a row on its admit_after-th miss (0 or 1: on the first).
  int admit_after = 0;
  // Counters per row of the admission sketch; 0: nvectors / 4, clamped to
  // [4096, 4M].
  int64_t sketch_counters = 0;
  // The lifetime checks of the header comment (StepScope, poisoning).
  bool check_lifetime = kCacheDebugChecks;
};

// The DRAM a cached table costs, for model.dram_budget (tables/dram_budget.cc):
// per cached row, its slot (SlotBytes of its row) and the slot's backedge;
// whatever it caches, one pointer word per row of the table.
inline constexpr int64_t kCacheSlotMetadataBytes = sizeof(std::atomic<int64_t>);
constexpr int64_t CacheFixedDramBytes(int64_t nvectors) {
  return nvectors * static_cast<int64_t>(sizeof(std::atomic<uint64_t>));
}


template <RowElement T, int64_t D = kDynamic>
class CachedTable;

// The run-time feature size, and all of the cache. Every CachedTable<T, D>
// of a static D derives from it (below).
template <RowElement T>
class CachedTable<T, kDynamic> {
 public:
  using value_type = T;
  static constexpr int64_t kFeatureSize = kDynamic;

  // Creates the base table on table.tier (rows read as zero) and an empty
  // cache. Errors: bad shapes, a
  // cache size that fails CacheSize::Validate(), a row size that is not a
  // multiple of 4 bytes (bfloat16 with odd D), tier errors.
  [[nodiscard]] static absl::StatusOr<CachedTable> Create(const TableOptions& table, const CacheOptions& cache = {}) {
    return CreateOver<SimpleTable<T, kDynamic>>(table, cache);
  }

  // A move stops the source's evictor thread and starts the destination's.
  CachedTable(CachedTable&& o) noexcept
      : base_((o.StopEvictor(), std::move(o.base_))),
        policy_(o.policy_),
        eviction_(o.eviction_),
        evictor_thread_(o.evictor_thread_),
        check_lifetime_(o.check_lifetime_),
        stride_(o.stride_),
        rows_per_page_(o.rows_per_page_),
        words_region_(std::move(o.words_region_)),
        words_(o.words_),
        state_(std::move(o.state_)),
        shards_(std::move(o.shards_)),
        filter_(std::move(o.filter_)) {
    StartEvictor();
  }
  CachedTable& operator=(CachedTable&& o) noexcept {
    if (this == &o) return *this;
    StopEvictor();
    o.StopEvictor();
    base_ = std::move(o.base_);
    policy_ = o.policy_;
    eviction_ = o.eviction_;
    evictor_thread_ = o.evictor_thread_;
    check_lifetime_ = o.check_lifetime_;
    stride_ = o.stride_;
    rows_per_page_ = o.rows_per_page_;
    words_region_ = std::move(o.words_region_);
    words_ = o.words_;
    state_ = std::move(o.state_);
    shards_ = std::move(o.shards_);
    filter_ = std::move(o.filter_);
    StartEvictor();
    return *this;
  }
  ~CachedTable() { StopEvictor(); }

  // --- the rowpointer interface ------------------------------------------

  [[gnu::always_inline]] int64_t featuresize() const { return base_.featuresize(); }
  [[gnu::always_inline]] int64_t nvectors() const { return base_.nvectors(); }
  const std::string& name() const { return base_.name(); }

  [[gnu::always_inline]] T* rowpointer(int64_t row, Access kind = Access::kForward) const {
    if (kind == Access::kForward) return access_and_cache(row);
    if (kind == Access::kUpdate) return access_for_update(row);
    if (kind == Access::kWrite) return access_for_write(row);
    return access(row);
  }

  // The current copy of `row`, caching it first when the policy admits it.
  // Hit: one load, two bit tests, one increment of this thread's own counter
  // (a plain store); a CAS when the CLOCK hand cleared kReferenced.
  // The loads of a pointer word are seq_cst (a plain load on x86): a
  // ReadSection's announcement is ordered before them (cache/epoch.h).
  [[gnu::always_inline]] T* access_and_cache(int64_t row) const {
    DebugCheckAccess();
    Count(cache_internal::HotCounter::kLookups);
    return Lookup(row);
  }

  // What access_and_cache gives for rows[0 .. n), into out[0 .. n), counted
  // once: the kernels resolve a block of rows ahead of summing them. Also
  // prefetches the words of rows[n .. n + ahead) (the caller's next block).
  // A block of hits that are all referenced (a warm cache) takes one pass
  // without branches: per row a load, a mask and a store; the others then go
  // through Lookup, as if looked up a moment later.
  template <typename Index>
  [[gnu::always_inline]] void access_and_cache(const Index* rows, int64_t n, const T** out,
                                               int64_t ahead = 0) const {
    using cache_internal::kCached;
    using cache_internal::kReferenced;
    DebugCheckAccess();
    Count(cache_internal::HotCounter::kLookups, static_cast<uint64_t>(n));
    const std::atomic<uint64_t>* words = words_;  // a local: the stores to out[] may not alias it
    uint64_t all = kCached | kReferenced;
    const int64_t both = std::min(n, ahead);
    for (int64_t k = 0; k < both; ++k) {
      __builtin_prefetch(&words[rows[n + k]], 0, 3);
      const uint64_t w = words[rows[k]].load(std::memory_order_seq_cst);
      all &= w;
      out[k] = Address(w);
    }
    for (int64_t k = both; k < n; ++k) {
      const uint64_t w = words[rows[k]].load(std::memory_order_seq_cst);
      all &= w;
      out[k] = Address(w);
    }
    if ((all & (kCached | kReferenced)) == (kCached | kReferenced)) [[likely]] return;
    for (int64_t k = 0; k < n; ++k) {
      const uint64_t w = words[rows[k]].load(std::memory_order_seq_cst);
      if ((w & (kCached | kReferenced)) != (kCached | kReferenced)) out[k] = Lookup(rows[k]);
    }
  }

  // The current copy of `row`, marked dirty when it is cached; counted as a
  // write to the slow tier when it is not.
  [[gnu::always_inline]] T* access_for_update(int64_t row) const {
    DebugCheckAccess();
    const uint64_t w = words_[row].load(std::memory_order_seq_cst);
    if ((w & (cache_internal::kCached | cache_internal::kDirty)) ==
        (cache_internal::kCached | cache_internal::kDirty)) [[likely]] {
      Count(cache_internal::HotCounter::kUpdateHits);
      return Address(w);
    }
    return MarkDirty(row, w, /*count=*/true);
  }

  // The current copy of `row` for a write outside training (InitUniform,
  // LoadRows, restoring a row), between steps: marked dirty when it is cached,
  // so a flush writes it back; counted nowhere, so the statistics describe
  // training only.
  T* access_for_write(int64_t row) const {
    DebugCheckAccess();
    const uint64_t w = words_[row].load(std::memory_order_seq_cst);
    if ((w & (cache_internal::kCached | cache_internal::kDirty)) ==
        (cache_internal::kCached | cache_internal::kDirty)) {
      return Address(w);
    }
    return MarkDirty(row, w, /*count=*/false);
  }

  // The current address of `row`: no side effect, no counting (prefetch hints,
  // reads outside the kernels; kClock: inside a ReadSection, except for hints).
  [[gnu::always_inline]] T* access(int64_t row) const {
    return Address(words_[row].load(std::memory_order_seq_cst));
  }

  // The address of row's pointer word (the kernels prefetch it ahead of the row).
  [[gnu::always_inline]] const void* indirection_address(int64_t row) const { return &words_[row]; }

  // What the kernels hold while they run on this table: a ReadSection for
  // kClock (pointers stay valid until it closes), nothing for kFlush.
  ReadSection read_scope() const { return ReadSection(eviction_ == CacheEviction::kClock); }

  // --- cache control (between steps) ---------------------------------------

  CachePolicy policy() const { return policy_; }
  CacheEviction eviction() const { return eviction_; }
  int64_t cachelower() const { return state_->lower_bytes; }
  int64_t cacheslack() const { return state_->slack_bytes; }
  // Errors: a size that fails CacheSize::Validate() (the bounds are unchanged).
  [[nodiscard]] absl::Status set_cachelower(CacheSize size) {
    if (absl::Status s = size.Validate(absl::StrCat(name(), ": cache lower")); !s.ok()) return s;
    SetBounds(size.Resolve(table_bytes()), state_->slack_bytes);
    return absl::OkStatus();
  }
  [[nodiscard]] absl::Status set_cacheslack(CacheSize size) {
    if (absl::Status s = size.Validate(absl::StrCat(name(), ": cache slack")); !s.ok()) return s;
    SetBounds(state_->lower_bytes, size.Resolve(table_bytes()));
    return absl::OkStatus();
  }
  int64_t rows_per_page() const { return rows_per_page_; }
  int64_t page_bytes() const { return rows_per_page_ * static_cast<int64_t>(stride_); }
  // Bytes of the pages in use (whole pages).
  int64_t used_bytes() const { return state_->npages.load(std::memory_order_relaxed) * page_bytes(); }
  // Rows the cache can hold at cachelower + cacheslack.
  int64_t capacity_rows() const { return state_->max_pages * rows_per_page_; }
  // kDynamic with kFlush: no further page can be opened (the cache reached
  // cachelower + cacheslack): time to flush. Always false for kStatic and for
  // kClock (which is never flushed to make room).
  bool isfull() const {
    return policy_ == CachePolicy::kDynamic && eviction_ == CacheEviction::kFlush &&
           state_->npages.load(std::memory_order_relaxed) >= state_->max_pages;
  }

  // Drops the oldest pages until used_bytes() <= cachelower(), restoring each
  // row's pointer to its base row. flush_clean does not write back: the cached
  // copies' updates are lost (counted as dirty_rows_discarded); use it for
  // tables that are only read. flush_dirty writes the dirty rows back with
  // non-temporal stores and persists them on a persistent tier; clean rows are
  // never written back.
  void flush_clean() { Flush(state_->lower_bytes, /*writeback=*/false); }
  void flush_dirty() { Flush(state_->lower_bytes, /*writeback=*/true); }
  // Empties the cache (writing back dirty rows).
  void flush_all() { Flush(0, /*writeback=*/true); }
  // kClock: one eviction round now, in this thread (not inside a
  // ReadSection; it waits for readers), when free slots are below the low
  // water mark; returns the slots it freed. Any thread, any time; for
  // tables made with evictor_thread = false, or to evict ahead of a burst.
  int64_t evict() { return eviction_ == CacheEviction::kClock && NeedsEviction() ? EvictRound() : 0; }
  // Writes every dirty cached row back (and persists it), keeping the cache:
  // before a checkpoint of the base, or for the static policy.
  void sync() { Writeback(); }

  // kStatic: caches `rows` (duplicates and already-cached rows skipped) until
  // the cache holds capacity_rows(); returns the number of rows cached.
  // Errors: a row out of range (nothing is cached then).
  [[nodiscard]] absl::StatusOr<int64_t> fill(std::span<const int64_t> rows);
  // kStatic: fills the cache with capacity_rows() distinct rows drawn at random.
  [[nodiscard]] absl::StatusOr<int64_t> fill_random(uint64_t seed);

  // --- inspection ------------------------------------------------------------

  CacheStats stats() const;
  void reset_stats();
  // True when `p` points into a cache page (tests, debugging: linear in pages).
  bool in_cache(const void* p) const;
  bool is_cached(int64_t row) const { return words_[row].load(std::memory_order_acquire) & cache_internal::kCached; }
  bool is_dirty(int64_t row) const { return words_[row].load(std::memory_order_acquire) & cache_internal::kDirty; }
  int64_t cached_rows() const;
  const SimpleTable<T, kDynamic>& base() const { return base_; }
  size_t row_bytes() const { return base_.row_bytes(); }
  int64_t state_floats() const { return base_.state_floats(); }
  const AdmissionFilter& admission() const { return *filter_; }

  // The lifetime rule, checked: flushes move the epoch; with check_lifetime a
  // flush while a StepScope is open aborts with a message.
  uint64_t flush_epoch() const { return state_->epoch.load(std::memory_order_relaxed); }
  class StepScope {
   public:
    explicit StepScope(const CachedTable& t) : t_(&t), epoch_(t.flush_epoch()) {
      t_->state_->open_scopes.fetch_add(1, std::memory_order_relaxed);
    }
    ~StepScope() {
      if (t_ != nullptr) t_->state_->open_scopes.fetch_sub(1, std::memory_order_relaxed);
    }
    StepScope(StepScope&& o) noexcept : t_(std::exchange(o.t_, nullptr)), epoch_(o.epoch_) {}
    StepScope(const StepScope&) = delete;
    StepScope& operator=(const StepScope&) = delete;
    // True while the pointers this step obtained are still valid.
    bool valid() const { return t_->flush_epoch() == epoch_; }

   private:
    const CachedTable* t_;
    uint64_t epoch_;
  };
  // Open for the duration of a step (kernels running on the table).
  StepScope begin_step() const { return StepScope(*this); }

  // Makes the base rows [begin, end) durable (table_io's PersistRows). Cached
  // copies are persisted when they are written back.
  void persist_rows(int64_t begin, int64_t end) const { base_.persist_rows(begin, end); }

 protected:
  // Create() with the base rows made by Base::Create: SimpleTable<T, D>
  // checks a static D.
  template <typename Base>
  static absl::StatusOr<CachedTable> CreateOver(const TableOptions& table, const CacheOptions& cache) {
    if (absl::Status s = cache.lower.Validate(absl::StrCat(table.name, ": cache lower")); !s.ok()) return s;
    if (absl::Status s = cache.slack.Validate(absl::StrCat(table.name, ": cache slack")); !s.ok()) return s;
    if (cache.eviction == CacheEviction::kClock && cache.policy != CachePolicy::kDynamic) {
      return absl::InvalidArgumentError(
          absl::StrCat(table.name, ": clock eviction needs the dynamic policy, not ", CachePolicyName(cache.policy)));
    }
    absl::StatusOr<Base> base = Base::Create(table);
    if (!base.ok()) return base.status();
    if (base->row_bytes() % 4 != 0) {
      return absl::InvalidArgumentError(absl::StrCat(table.name, ": a cached table needs rows of a multiple of 4 bytes, not ",
                                                     base->row_bytes()));
    }
    // The pointer words in DRAM, on huge pages when they fill one (as DRAM
    // tables are): on 4 KiB pages every lookup of a large table missed the TLB.
    const auto words_bytes = static_cast<size_t>(CacheFixedDramBytes(base->nvectors()));
    absl::StatusOr<Region> words = Region::Allocate(TierOptions::DramFor(words_bytes), words_bytes);
    if (!words.ok()) {
      return absl::ResourceExhaustedError(
          absl::StrCat(table.name, ": pointer words (", words_bytes, " bytes): ", words.status().message()));
    }
    return CachedTable(*std::move(base), *std::move(words), cache);
  }

 private:
  using HotCounter = cache_internal::HotCounter;

  // `words`: DRAM for nvectors pointer words.
  CachedTable(SimpleTable<T, kDynamic> base, Region words, const CacheOptions& o)
      : base_(std::move(base)),
        policy_(o.policy),
        eviction_(o.eviction),
        evictor_thread_(o.evictor_thread),
        check_lifetime_(o.check_lifetime),
        stride_(static_cast<size_t>(SlotBytes(static_cast<int64_t>(base_.row_bytes())))),
        words_region_(std::move(words)),
        words_(reinterpret_cast<std::atomic<uint64_t>*>(words_region_.data())),
        state_(std::make_unique<cache_internal::CacheState>()),
        shards_(std::make_unique<cache_internal::StatShards>()) {
    for (int64_t r = 0; r < base_.nvectors(); ++r) {
      new (&words_[r]) std::atomic<uint64_t>(reinterpret_cast<uint64_t>(base_.rowpointer(r)));
    }
    const int64_t lower = o.lower.Resolve(table_bytes()), slack = o.slack.Resolve(table_bytes());
    rows_per_page_ = o.rows_per_page;
    if (rows_per_page_ <= 0) {
      const int64_t capacity = std::max<int64_t>(0, lower + slack) / static_cast<int64_t>(stride_);
      const int64_t least = capacity == 0 ? 16 : std::clamp<int64_t>(capacity / 8, 1, 16);
      rows_per_page_ = std::max(least, std::min<int64_t>((int64_t{2} << 20) / stride_, capacity / 8));
    }
    int64_t counters = o.sketch_counters > 0 ? o.sketch_counters
                                            : std::clamp<int64_t>(base_.nvectors() / 4, 4096, int64_t{4} << 20);
    filter_ = std::make_unique<AdmissionFilter>(o.policy == CachePolicy::kDynamic ? o.admit_after : 0, counters);
    SetBounds(lower, slack);
    StartEvictor();
  }

  int64_t table_bytes() const { return base_.nvectors() * static_cast<int64_t>(base_.row_bytes()); }
  [[gnu::always_inline]] static T* Address(uint64_t w) { return reinterpret_cast<T*>(w & ~cache_internal::kTagMask); }
  [[gnu::always_inline]] void Count(HotCounter c, uint64_t n = 1) const { shards_->add(c, n); }
  [[gnu::always_inline]] void DebugCheckAccess() const {
    if constexpr (kCacheDebugChecks) {
      if (state_->flushing.load(std::memory_order_relaxed)) {
        cache_internal::LifetimeViolation(name(), "rowpointer() during a flush", 0);
      }
      if (check_lifetime_ && eviction_ == CacheEviction::kClock && !InReadSection()) {
        cache_internal::LifetimeViolation(name(), "rowpointer() of a clock-evicted table outside a ReadSection", 0);
      }
    }
  }
  uint64_t BaseWord(int64_t row) const { return reinterpret_cast<uint64_t>(base_.rowpointer(row)); }

  // access_and_cache less the counting. Hit: one load, two bit tests (a CAS
  // when the CLOCK hand cleared kReferenced).
  [[gnu::always_inline]] T* Lookup(int64_t row) const {
    uint64_t w = words_[row].load(std::memory_order_seq_cst);
    if (w & cache_internal::kCached) [[likely]] {
      if (!(w & cache_internal::kReferenced)) [[unlikely]] {
        words_[row].compare_exchange_strong(w, w | cache_internal::kReferenced, std::memory_order_relaxed);
      }
      return Address(w);
    }
    return Miss(row, w);
  }

  // The miss path of access_and_cache: admission, ownership, copy, publish.
  [[gnu::noinline]] T* Miss(int64_t row, uint64_t w) const;
  // access_for_update/_for_write of a row that is not cached and dirty:
  // marks a cached row dirty, cancels an eviction in flight (header comment);
  // counts an update hit or base update when `count`.
  [[gnu::noinline]] T* MarkDirty(int64_t row, uint64_t w, bool count) const;
  // A free slot for `row` (its backedge written), or nullptr when the cache
  // is at cachelower + cacheslack (kClock: and no slot is free).
  std::byte* AllocateSlot(int64_t row) const;
  bool CacheHasRoom() const {
    return !state_->full.load(std::memory_order_relaxed) ||
           (eviction_ == CacheEviction::kClock && state_->free_slots.size() > 0);
  }
  void WakeEvictor() const;
  // kClock: every page is open and free slots are at or below the low-water mark.
  bool NeedsEviction() const {
    return state_->full.load(std::memory_order_relaxed) &&
           state_->free_slots.size() <= state_->low_water.load(std::memory_order_relaxed);
  }
  // kClock: holds off eviction rounds (flushes, setters, sync); kFlush: nothing.
  std::unique_lock<std::mutex> HoldOffEvictor() {
    return eviction_ == CacheEviction::kClock ? std::unique_lock<std::mutex>(state_->evict_mu)
                                              : std::unique_lock<std::mutex>();
  }
  // Pages the bounds allow: kFlush whole pages within them; kClock rounds up,
  // so that a cache of 100% holds every row.
  int64_t MaxPages(int64_t lower, int64_t slack) const {
    const int64_t round_up = eviction_ == CacheEviction::kClock ? page_bytes() - 1 : 0;
    return (std::max<int64_t>(0, lower) + std::max<int64_t>(0, slack) + round_up) / page_bytes();
  }
  void SetBounds(int64_t lower, int64_t slack);
  void Flush(int64_t target_bytes, bool writeback);
  // Flush() without taking evict_mu (the caller holds it, or kFlush).
  void FlushPages(int64_t target_bytes, bool writeback);
  void Writeback();
  // Evicts or writes back every slot of `page`.
  void DrainPage(cache_internal::Page& page, bool evict, bool writeback);
  void PersistWritten(std::vector<int64_t>& rows);

  // kClock: the evictor thread, its rounds, and the free list's rebuild after
  // a flush or new bounds (under evict_mu and mu, exclusive access).
  void StartEvictor();
  void StopEvictor();
  void EvictorLoop();
  // Returns the slots it freed.
  int64_t EvictRound();
  void RebuildClockState();
  cache_internal::Page* SlotPage(int64_t id) const {
    return state_->page_table[id / rows_per_page_].load(std::memory_order_acquire);
  }
  std::byte* SlotAddress(int64_t id) const {
    return SlotPage(id)->rows + static_cast<size_t>(id % rows_per_page_) * stride_;
  }

  SimpleTable<T, kDynamic> base_;
  CachePolicy policy_;
  CacheEviction eviction_;
  bool evictor_thread_;
  bool check_lifetime_;
  size_t stride_;  // slot size: row bytes rounded up to 8
  int64_t rows_per_page_ = 0;
  Region words_region_;  // huge pages when large: a word lookup must not miss the TLB more than a row lookup
  std::atomic<uint64_t>* words_;
  std::unique_ptr<cache_internal::CacheState> state_;
  std::unique_ptr<cache_internal::StatShards> shards_;
  std::unique_ptr<AdmissionFilter> filter_;
};

// A static feature size: the same table, with featuresize() a compile-time
// constant the kernels specialise on. It adds no state to its kDynamic base.
template <RowElement T, int64_t D>
class CachedTable : public CachedTable<T, kDynamic> {
  using Dynamic = CachedTable<T, kDynamic>;

 public:
  using value_type = T;
  using dynamic_type = Dynamic;  // the base: this table with a run-time size
  static constexpr int64_t kFeatureSize = D;

  [[nodiscard]] static absl::StatusOr<CachedTable> Create(const TableOptions& table, const CacheOptions& cache = {}) {
    absl::StatusOr<Dynamic> t = Dynamic::template CreateOver<SimpleTable<T, D>>(table, cache);
    if (!t.ok()) return t.status();
    return CachedTable(*std::move(t));
  }

  CachedTable(CachedTable&&) noexcept = default;
  CachedTable& operator=(CachedTable&&) noexcept = default;

  [[gnu::always_inline]] constexpr int64_t featuresize() const { return D; }

 private:
  explicit CachedTable(Dynamic table) : Dynamic(std::move(table)) {}
};

}  // namespace cemb

#include "cache/internal/cached_table_impl.h"  // IWYU pragma: export

// The out-of-line members are all the kDynamic base's: instantiated once per
// storage type, in cached_table.cc.
extern template class ::cemb::CachedTable<float, ::cemb::kDynamic>;
extern template class ::cemb::CachedTable<::cemb::bfloat16, ::cemb::kDynamic>;
extern template class ::cemb::CachedTable<::cemb::float16, ::cemb::kDynamic>;
extern template class ::cemb::CachedTable<::cemb::int8_rowwise, ::cemb::kDynamic>;

#endif  // CEMB_CACHE_CACHED_TABLE_H_
