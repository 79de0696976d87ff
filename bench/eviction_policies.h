// Eviction policies and row-lookup streams for the trace-driven simulator
// bench/eviction_sim.cc: which eviction should a serving
// cache use? Models, not caches: they hold row ids only (no row data, no
// threads), in flat arrays indexed by row, so a simulated lookup is a few
// loads and the whole grid runs in about a minute.
//
// Every policy holds at most `capacity` of the rows [0, nrows). Access(row)
// returns true on a hit; on a miss the policy may copy the row in, and
// copies() counts those copies (each one is a slow-tier read and a DRAM
// write in a real cache).
//
//   PageFifo    the dynamic CachedTable of today: rows are appended into
//               pages; when `max_pages` pages are full, the oldest pages are
//               dropped until `lower_pages` remain. An optional admission
//               filter copies a row only on its threshold-th miss, aged at
//               every flush (as CachedTable does).
//   Clock       second chance: one reference bit per slot, set by a hit; the
//               hand clears set bits and evicts the first clear one. A new
//               row starts with its bit clear.
//   ClockAdmit  Clock that copies a row only on its threshold-th miss
//               (cache/admission.h), the filter aged every `age_every` misses.
//   S3Fifo      Yang et al., SOSP 2023: small FIFO (10%), main FIFO (90%),
//               ghost FIFO of row ids (as many as main), 2-bit frequency.
//   Lru         exact LRU: a doubly linked list over the rows.
//
// MakeStream() draws a Zipf stream whose ranks are scattered over the rows by
// a random permutation, optionally re-drawn in part as it goes ("shifting"),
// and counts the ideal cache's hits alongside.
//
// Thread safety: none; one object per thread.
//
// Example:
//   const std::vector<int64_t> capacities = {100};
//   sim::Stream s = sim::MakeStream({.nrows = 1000, .lookups = 100000, .alpha = 1.0}, capacities);
//   sim::Clock clock(1000, capacities[0]);
//   sim::Result r = sim::Replay(clock, s.rows, /*warmup=*/0);
//   // r.hits < s.ideal_hits[0] (in expectation); r.copies == r.lookups - r.hits
#ifndef CEMB_BENCH_EVICTION_POLICIES_H_
#define CEMB_BENCH_EVICTION_POLICIES_H_

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

#include "base/random.h"
#include "cache/admission.h"

namespace cemb::sim {

inline constexpr uint32_t kNone = ~uint32_t{0};

// A FIFO of row ids in a ring of `capacity` entries.
// REQUIRES: Push() only while size() < capacity; Pop() only while size() > 0.
class RowFifo {
 public:
  explicit RowFifo(int64_t capacity) : ring_(static_cast<size_t>(std::max<int64_t>(capacity, 1))) {}
  int64_t size() const { return size_; }
  void Push(uint32_t row) {
    int64_t at = head_ + size_;
    if (at >= static_cast<int64_t>(ring_.size())) at -= static_cast<int64_t>(ring_.size());
    ring_[at] = row;
    ++size_;
  }
  uint32_t Pop() {
    const uint32_t row = ring_[head_];
    if (++head_ == static_cast<int64_t>(ring_.size())) head_ = 0;
    --size_;
    return row;
  }

 private:
  std::vector<uint32_t> ring_;
  int64_t head_ = 0, size_ = 0;
};

// REQUIRES: 0 <= lower_pages < max_pages; rows_per_page > 0. A threshold of
// 0 or 1 copies every missed row.
class PageFifo {
 public:
  PageFifo(int64_t nrows, int64_t rows_per_page, int64_t max_pages, int64_t lower_pages, int admit_after = 0,
           int64_t sketch_counters = 4096)
      : cached_(nrows, 0),
        fifo_(rows_per_page * max_pages),
        max_rows_(rows_per_page * max_pages),
        lower_rows_(rows_per_page * lower_pages),
        filter_(admit_after, sketch_counters) {}

  bool Access(uint32_t row) {
    if (cached_[row]) return true;
    if (!filter_.observe(row)) return false;
    if (fifo_.size() == max_rows_) Flush();
    cached_[row] = 1;
    fifo_.Push(row);  // rows fill pages in order, so the oldest rows are the oldest pages
    ++copies_;
    return false;
  }
  int64_t copies() const { return copies_; }
  int64_t flushes() const { return flushes_; }

 private:
  void Flush() {
    while (fifo_.size() > lower_rows_) cached_[fifo_.Pop()] = 0;
    filter_.age();
    ++flushes_;
  }

  std::vector<uint8_t> cached_;
  RowFifo fifo_;
  int64_t max_rows_, lower_rows_;
  AdmissionFilter filter_;
  int64_t copies_ = 0, flushes_ = 0;
};

// REQUIRES: capacity >= 1.
class Clock {
 public:
  Clock(int64_t nrows, int64_t capacity) : slot_of_(nrows, kNone), row_(capacity), ref_(capacity, 0) {}

  bool Access(uint32_t row) {
    if (Hit(row)) return true;
    Insert(row);
    return false;
  }
  // Sets the row's reference bit if it is cached (a concurrent reader would
  // store it only when clear).
  bool Hit(uint32_t row) {
    const uint32_t s = slot_of_[row];
    if (s == kNone) return false;
    ref_[s] = 1;
    return true;
  }
  // REQUIRES: `row` is not cached.
  void Insert(uint32_t row) {
    uint32_t s;
    if (used_ < static_cast<int64_t>(row_.size())) {
      s = static_cast<uint32_t>(used_++);
    } else {
      while (ref_[hand_]) {
        ref_[hand_] = 0;
        Advance();
      }
      s = static_cast<uint32_t>(hand_);
      slot_of_[row_[s]] = kNone;
      Advance();
    }
    row_[s] = row;
    ref_[s] = 0;
    slot_of_[row] = s;
    ++copies_;
  }
  int64_t copies() const { return copies_; }

 private:
  void Advance() {
    if (++hand_ == static_cast<int64_t>(row_.size())) hand_ = 0;
  }

  std::vector<uint32_t> slot_of_;  // per row: its slot, or kNone
  std::vector<uint32_t> row_;      // per slot
  std::vector<uint8_t> ref_;       // per slot
  int64_t used_ = 0, hand_ = 0;
  int64_t copies_ = 0;
};

// REQUIRES: capacity >= 1, age_every >= 1.
class ClockAdmit {
 public:
  ClockAdmit(int64_t nrows, int64_t capacity, int threshold, int64_t sketch_counters, int64_t age_every)
      : clock_(nrows, capacity), filter_(threshold, sketch_counters), age_every_(age_every) {}

  bool Access(uint32_t row) {
    if (clock_.Hit(row)) return true;
    if (filter_.observe(row)) clock_.Insert(row);
    if (++misses_ % age_every_ == 0) {
      filter_.age();
      ++agings_;
    }
    return false;
  }
  int64_t copies() const { return clock_.copies(); }
  int64_t agings() const { return agings_; }

 private:
  Clock clock_;
  AdmissionFilter filter_;
  int64_t age_every_, misses_ = 0, agings_ = 0;
};

// S3-FIFO as in the authors' libCacheSim (S3FIFOv0): a missed row goes to the
// small FIFO S, or to the main FIFO M when the ghost G remembers it. A hit
// raises the row's frequency (capped at 3). Eviction takes from S while S
// holds at least 10% of the capacity, else from M. S's oldest row moves to M
// (frequency cleared) if it was hit while in S, else it leaves for G. M's
// oldest row is re-queued with its frequency lowered by one while non-zero,
// else evicted. G remembers the last |M capacity| rows that left S.
// REQUIRES: capacity >= 1.
class S3Fifo {
 public:
  S3Fifo(int64_t nrows, int64_t capacity)
      : capacity_(capacity),
        small_capacity_(std::max<int64_t>(1, capacity / 10)),
        main_capacity_(capacity - small_capacity_),
        small_(capacity + 1),
        main_(capacity + 1),
        where_(nrows, kOut),
        freq_(nrows, 0),
        ghost_stamp_(nrows, 0) {}

  bool Access(uint32_t row) {
    if (where_[row] != kOut) {
      if (freq_[row] < 3) ++freq_[row];
      return true;
    }
    const bool ghost = InGhost(row);  // asked before the eviction that makes room adds to G
    ghost_stamp_[row] = 0;
    while (small_.size() + main_.size() >= capacity_) Evict();
    if (ghost) {
      main_.Push(row);
      where_[row] = kMain;
    } else {
      small_.Push(row);
      where_[row] = kSmall;
    }
    freq_[row] = 0;
    ++copies_;
    return false;
  }
  int64_t copies() const { return copies_; }
  int64_t small_size() const { return small_.size(); }
  int64_t main_size() const { return main_.size(); }

 private:
  enum Where : uint8_t { kOut, kSmall, kMain };

  bool InGhost(uint32_t row) const {
    return ghost_stamp_[row] != 0 && ghost_clock_ - ghost_stamp_[row] < main_capacity_;
  }
  void Evict() {
    if (small_.size() >= small_capacity_ || main_.size() == 0) {
      EvictSmall();
    } else {
      EvictMain();
    }
  }
  // Frees one slot, or empties S into M (then the caller evicts again).
  void EvictSmall() {
    while (small_.size() > 0) {
      const uint32_t t = small_.Pop();
      if (freq_[t] > 0) {
        freq_[t] = 0;
        main_.Push(t);
        where_[t] = kMain;
        if (main_.size() > main_capacity_) return EvictMain();
      } else {
        where_[t] = kOut;
        ghost_stamp_[t] = ++ghost_clock_;
        return;
      }
    }
  }
  void EvictMain() {
    while (main_.size() > 0) {
      const uint32_t t = main_.Pop();
      if (freq_[t] > 0) {
        --freq_[t];
        main_.Push(t);
      } else {
        where_[t] = kOut;
        return;
      }
    }
  }

  int64_t capacity_, small_capacity_, main_capacity_;
  RowFifo small_, main_;
  std::vector<uint8_t> where_, freq_;
  std::vector<int64_t> ghost_stamp_;  // per row: when it entered G (ghost_clock_), 0: never
  int64_t ghost_clock_ = 0;
  int64_t copies_ = 0;
};

// REQUIRES: capacity >= 1.
class Lru {
 public:
  Lru(int64_t nrows, int64_t capacity)
      : capacity_(capacity), prev_(nrows + 1, kNone), next_(nrows + 1, kNone), head_(static_cast<uint32_t>(nrows)) {
    prev_[head_] = next_[head_] = head_;  // the sentinel: next_ is the most recent, prev_ the least
  }

  bool Access(uint32_t row) {
    if (prev_[row] != kNone) {
      Unlink(row);
      PushFront(row);
      return true;
    }
    if (size_ == capacity_) {
      const uint32_t victim = prev_[head_];
      Unlink(victim);
      prev_[victim] = kNone;
      --size_;
    }
    PushFront(row);
    ++size_;
    ++copies_;
    return false;
  }
  int64_t copies() const { return copies_; }

 private:
  void Unlink(uint32_t row) {
    next_[prev_[row]] = next_[row];
    prev_[next_[row]] = prev_[row];
  }
  void PushFront(uint32_t row) {
    prev_[row] = head_;
    next_[row] = next_[head_];
    prev_[next_[head_]] = row;
    next_[head_] = row;
  }

  int64_t capacity_, size_ = 0;
  std::vector<uint32_t> prev_, next_;  // per row, and the sentinel head_; prev_ == kNone: not cached
  uint32_t head_;
  int64_t copies_ = 0;
};

// Counts after the first `warmup` lookups.
struct Result {
  int64_t lookups = 0, hits = 0, copies = 0;
};

template <typename Policy>
Result Replay(Policy& policy, std::span<const uint32_t> rows, int64_t warmup) {
  const int64_t start = std::min<int64_t>(warmup, static_cast<int64_t>(rows.size()));
  for (int64_t i = 0; i < start; ++i) policy.Access(rows[i]);
  const int64_t copies_before = policy.copies();
  Result r;
  for (int64_t i = start; i < static_cast<int64_t>(rows.size()); ++i) r.hits += policy.Access(rows[i]);
  r.lookups = static_cast<int64_t>(rows.size()) - start;
  r.copies = policy.copies() - copies_before;
  return r;
}

struct StreamOptions {
  int64_t nrows = 0;
  int64_t lookups = 0;  // in all, the warm-up included
  int64_t warmup = 0;   // not counted in ideal_hits, ideal_copies
  double alpha = 1.0;
  int64_t shift_every = 0;    // re-draw part of the permutation every this many lookups; 0: never
  double shift_fraction = 0;  // of the ranks whose rows are re-drawn (shuffled among themselves)
  uint64_t seed = 1;
};

// rows[i] = permutation[rank], rank ~ Zipf(alpha). The ideal cache of c rows
// holds the c hottest rows of the current permutation (ranks < c): for a
// shifting stream it is an oracle per phase that reloads for free at each
// re-draw. ideal_hits[j] counts its hits for capacities[j]; ideal_copies[j]
// the rows it loads at the re-draws (0 for a static stream: preloaded).
struct Stream {
  std::vector<uint32_t> rows;
  std::vector<int64_t> ideal_hits, ideal_copies;
};

inline Stream MakeStream(const StreamOptions& o, std::span<const int64_t> capacities) {
  const size_t ncap = capacities.size();
  Stream s;
  s.rows.resize(static_cast<size_t>(o.lookups));
  s.ideal_hits.assign(ncap, 0);
  s.ideal_copies.assign(ncap, 0);
  Xoshiro256pp rng(o.seed);
  std::vector<uint32_t> perm(static_cast<size_t>(o.nrows)), pool(static_cast<size_t>(o.nrows));
  std::iota(perm.begin(), perm.end(), 0u);
  std::iota(pool.begin(), pool.end(), 0u);
  for (int64_t i = o.nrows - 1; i > 0; --i) std::swap(perm[i], perm[rng.Below(i + 1)]);  // Fisher-Yates
  const ZipfSampler zipf(static_cast<uint64_t>(o.nrows), o.alpha);
  const int64_t nshift = static_cast<int64_t>(o.shift_fraction * static_cast<double>(o.nrows));
  std::vector<uint32_t> moved(static_cast<size_t>(nshift)), order(static_cast<size_t>(nshift));
  for (int64_t i = 0; i < o.lookups; ++i) {
    if (o.shift_every > 0 && i > 0 && i % o.shift_every == 0 && nshift > 1) {
      // nshift distinct ranks (a partial Fisher-Yates over pool), whose rows are shuffled among them.
      for (int64_t k = 0; k < nshift; ++k) {
        std::swap(pool[k], pool[k + rng.Below(o.nrows - k)]);
        moved[k] = perm[pool[k]];
        order[k] = static_cast<uint32_t>(k);
      }
      for (int64_t k = nshift - 1; k > 0; --k) std::swap(order[k], order[rng.Below(k + 1)]);
      for (int64_t k = 0; k < nshift; ++k) {
        perm[pool[k]] = moved[order[k]];
        if (i < o.warmup) continue;
        for (size_t j = 0; j < ncap; ++j) {  // a hot rank whose new row was cold: the oracle loads it
          s.ideal_copies[j] += pool[k] < capacities[j] && pool[order[k]] >= capacities[j];
        }
      }
    }
    const uint64_t rank = zipf(rng);
    s.rows[i] = perm[rank];
    if (i < o.warmup) continue;
    for (size_t j = 0; j < ncap; ++j) s.ideal_hits[j] += static_cast<int64_t>(rank) < capacities[j];
  }
  return s;
}

}  // namespace cemb::sim

#endif  // CEMB_BENCH_EVICTION_POLICIES_H_
