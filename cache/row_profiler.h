// RowProfiler: counts how often each row of a table is looked up over the
// first N batches, then names the hottest rows, to fill a static cache with
// them (CachedTable::fill). The thesis' static policy fills with random rows;
// a profile is the better choice when the index distribution is skewed.
//
// Memory: one 32-bit counter per row. Counting stops at freeze().
// Thread safety: observe() may be called from one thread at a time per
// profiler (one profiler per table); hottest() after the last observe().
//
// Example:
//   RowProfiler profile(table.nvectors());
//   for (int b = 0; b < 100; ++b) profile.observe(batch[b].indices);
//   CEMB_ASSIGN_OR_RETURN(int64_t n, table.fill(profile.hottest(table.capacity_rows())));
#ifndef CEMB_CACHE_ROW_PROFILER_H_
#define CEMB_CACHE_ROW_PROFILER_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"

namespace cemb {

class RowProfiler {
 public:
  explicit RowProfiler(int64_t nvectors) : counts_(static_cast<size_t>(nvectors), 0) {}

  int64_t nvectors() const { return static_cast<int64_t>(counts_.size()); }
  int64_t batches() const { return batches_; }
  bool frozen() const { return frozen_; }

  // Counts one batch of row indices. Errors: a row out of range (nothing is
  // counted then). After freeze(): ignored.
  [[nodiscard]] absl::Status observe(std::span<const int32_t> indices) { return Observe(indices); }
  [[nodiscard]] absl::Status observe(std::span<const int64_t> indices) { return Observe(indices); }
  void freeze() { frozen_ = true; }

  uint32_t count(int64_t row) const { return counts_[row]; }
  // The `k` most looked-up rows (seen at least once), hottest first, ties by
  // row number.
  std::vector<int64_t> hottest(int64_t k) const;

 private:
  template <typename Index>
  absl::Status Observe(std::span<const Index> indices);

  std::vector<uint32_t> counts_;
  int64_t batches_ = 0;
  bool frozen_ = false;
};

}  // namespace cemb

#endif  // CEMB_CACHE_ROW_PROFILER_H_
