// AdmissionFilter: "admit a row into the cache only after it was seen k
// times", counted in a small count-min sketch (two hashed rows of 8-bit
// saturating counters). Used by the dynamic policy of CachedTable, beyond the
// thesis: with uniform indices, eager caching copies rows that are never hit
// again (thesis 5.6.3); with k = 2 or 3 only rows that recur are copied.
//
// The counts over-estimate (hash collisions), never under-estimate except for
// increments lost to races between threads, which only delay an admission.
// age() halves every counter so that old popularity fades (CachedTable calls
// it at every flush).
//
// Thread safety: observe() may be called from any number of threads (relaxed
// atomics); age() and reset() need exclusive access.
//
// Example:
//   AdmissionFilter filter(/*threshold=*/2, /*counters=*/1 << 16);
//   if (filter.observe(row)) { /* seen twice: cache it */ }
#ifndef CEMB_CACHE_ADMISSION_H_
#define CEMB_CACHE_ADMISSION_H_

#include <atomic>
#include <cstdint>
#include <memory>

namespace cemb {

class AdmissionFilter {
 public:
  // threshold <= 1 admits every row. counters is rounded up to a power of two
  // (at least 64) and is the size of each of the two sketch rows.
  AdmissionFilter(int threshold, int64_t counters);

  int threshold() const { return threshold_; }
  int64_t counters() const { return mask_ + 1; }
  bool enabled() const { return threshold_ > 1; }

  // Counts one sighting of `row`; true when it has now been seen at least
  // threshold() times (estimated).
  [[gnu::always_inline]] bool observe(int64_t row) const {
    if (threshold_ <= 1) return true;
    const uint64_t h = Hash(static_cast<uint64_t>(row));
    const uint8_t a = Bump(counts_[h & mask_]);
    const uint8_t b = Bump(counts_[(mask_ + 1) + ((h >> 32) & mask_)]);
    return (a < b ? a : b) >= threshold_;
  }

  // The current estimate for `row` (no counting).
  int estimate(int64_t row) const;

  void age();    // every counter halves
  void reset();  // every counter to zero

 private:
  static uint64_t Hash(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
  }
  static uint8_t Bump(std::atomic<uint8_t>& c) {
    const uint8_t v = c.load(std::memory_order_relaxed);
    if (v == 255) return v;
    c.store(static_cast<uint8_t>(v + 1), std::memory_order_relaxed);  // a lost race only delays admission
    return static_cast<uint8_t>(v + 1);
  }

  int threshold_;
  uint64_t mask_;
  std::unique_ptr<std::atomic<uint8_t>[]> counts_;  // 2 * (mask_ + 1)
};

}  // namespace cemb

#endif  // CEMB_CACHE_ADMISSION_H_
