#include "cache/row_profiler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace cemb {

template <typename Index>
absl::Status RowProfiler::Observe(std::span<const Index> indices) {
  if (frozen_) return absl::OkStatus();
  const int64_t n = nvectors();
  for (size_t i = 0; i < indices.size(); ++i) {
    if (indices[i] < 0 || static_cast<int64_t>(indices[i]) >= n) {
      return absl::InvalidArgumentError(
          absl::StrCat("row profiler: index ", i, ": row ", indices[i], " >= nvectors ", n));
    }
  }
  for (Index r : indices) {
    if (counts_[r] != UINT32_MAX) ++counts_[r];
  }
  ++batches_;
  return absl::OkStatus();
}

template absl::Status RowProfiler::Observe<int32_t>(std::span<const int32_t>);
template absl::Status RowProfiler::Observe<int64_t>(std::span<const int64_t>);

std::vector<int64_t> RowProfiler::hottest(int64_t k) const {
  std::vector<int64_t> rows;
  for (int64_t r = 0; r < nvectors(); ++r) {
    if (counts_[r] > 0) rows.push_back(r);
  }
  auto hotter = [&](int64_t a, int64_t b) { return counts_[a] != counts_[b] ? counts_[a] > counts_[b] : a < b; };
  k = std::clamp<int64_t>(k, 0, static_cast<int64_t>(rows.size()));
  std::partial_sort(rows.begin(), rows.begin() + k, rows.end(), hotter);
  rows.resize(static_cast<size_t>(k));
  return rows;
}

}  // namespace cemb
