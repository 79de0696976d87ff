#include "train/dram_budget.h"

#include <algorithm>
#include <functional>

#include "absl/container/flat_hash_map.h"

namespace cemb::train {

TableTraffic SampleTraffic(const data::Dataset& dataset, uint64_t samples, const std::vector<bool>& tables) {
  const uint64_t n = std::min(samples, dataset.num_samples());
  TableTraffic traffic;
  traffic.samples = n;
  traffic.counts.resize(dataset.num_tables());
  for (uint32_t t = 0; t < dataset.num_tables(); ++t) {
    if (!tables.empty() && (t >= tables.size() || !tables[t])) continue;
    absl::flat_hash_map<int32_t, uint32_t> seen;
    for (uint64_t i = 0; i < n; ++i) {
      for (int32_t row : dataset.indices(i, t)) ++seen[row];
    }
    std::vector<uint32_t>& counts = traffic.counts[t];
    counts.reserve(seen.size());
    for (const auto& [row, count] : seen) counts.push_back(count);
    std::sort(counts.begin(), counts.end(), std::greater<>());
  }
  return traffic;
}

}  // namespace cemb::train
