#include "embedding/reindex.h"

#include "embedding/validate.h"

namespace cemb {
namespace {

// Indices ahead whose slot (or offset) is prefetched.
constexpr int64_t kAhead = 16;
// The hash table replaces the slot array when the table has more than this
// many rows per hash entry (hash capacity: the power of two >= 2 x indices).
constexpr int64_t kHashRatio = 8;

}  // namespace

template <typename Index>
void UpdatePlan::BuildUnchecked(int64_t nvectors, std::span<const Index> offsets, std::span<const Index> indices,
                                std::span<const float> weights, Pooling pooling) {
  const int64_t n = static_cast<int64_t>(indices.size());
  const bool one_per_bag = offsets.empty();
  noutputs_ = one_per_bag ? n : static_cast<int64_t>(offsets.size()) - 1;
  nvectors_ = nvectors;
  rows_.clear();
  rows_.reserve(n);
  unique_of_.resize(n);

  // (1) Histogram with first-seen order; offsets_ holds the counts for now.
  // A row's unique id + 1 lives in the slot array (one int32 per table row)
  // or, when the table is much larger than the batch, in a hash table of a
  // few times the batch's indices that stays in L1/L2 (the slot array would
  // cost a cache miss per index and 4 bytes per row of DRAM: 160 MB for a
  // 40 M-row table). Both give the same plan.
  offsets_.clear();
  offsets_.reserve(n + 1);
  auto first_seen = [&](int64_t p, int64_t row, int32_t& id) {
    if (id == 0) {
      rows_.push_back(row);
      offsets_.push_back(0);
      id = static_cast<int32_t>(rows_.size());
    }
    ++offsets_[id - 1];
    unique_of_[p] = id - 1;
  };
  int capacity_bits = 4;
  while ((int64_t{1} << capacity_bits) < 2 * n) ++capacity_bits;
  const int64_t capacity = int64_t{1} << capacity_bits;
  // Neither structure is freed when a call takes the other path (a smaller
  // last batch), so alternating batch sizes never reallocate.
  if (nvectors > kHashRatio * capacity) {
    if (static_cast<int64_t>(hash_rows_.size()) < capacity) {
      hash_rows_.assign(capacity, -1);
      hash_ids_.assign(capacity, 0);
    }
    const uint64_t mask = static_cast<uint64_t>(capacity - 1);
    auto home = [&](int64_t row) {  // Fibonacci hashing: the top bits of row * 2^64 / phi
      return (static_cast<uint64_t>(row) * 0x9E3779B97F4A7C15ull) >> (64 - capacity_bits);
    };
    for (int64_t p = 0; p < n; ++p) {  // linear probing; at most half full
      const int64_t row = indices[p];
      uint64_t h = home(row);
      while (hash_rows_[h] != row && hash_rows_[h] != -1) h = (h + 1) & mask;
      hash_rows_[h] = row;
      first_seen(p, row, hash_ids_[h]);
    }
    // Empty the used entries again (at most n, all in cache). A probe for a
    // row still present skips entries already emptied: it stops only at the
    // row itself.
    for (int64_t row : rows_) {
      uint64_t h = home(row);
      while (hash_rows_[h] != row) h = (h + 1) & mask;
      hash_rows_[h] = -1;
      hash_ids_[h] = 0;
    }
  } else {
    if (static_cast<int64_t>(slot_.size()) != nvectors) slot_.assign(nvectors, 0);
    // The slot array is a random access per index (often past L2): prefetch
    // the slot of an index kAhead positions on.
    for (int64_t p = 0; p < n; ++p) {
      if (p + kAhead < n) __builtin_prefetch(&slot_[indices[p + kAhead]], 1, 3);
      const int64_t row = indices[p];
      first_seen(p, row, slot_[row]);
    }
    for (int64_t row : rows_) slot_[row] = 0;
  }

  // (2) Exclusive prefix sum: offsets_[u] is where u's occurrences start;
  // the scatter below advances it to where they end, then everything shifts.
  const int64_t nunique = static_cast<int64_t>(rows_.size());
  int64_t sum = 0;
  for (int64_t u = 0; u < nunique; ++u) {
    const int64_t count = offsets_[u];
    offsets_[u] = sum;
    sum += count;
  }

  // (3) Scatter the sources (and scales) of each occurrence.
  const bool scaled = !weights.empty() || (pooling == Pooling::kMean && !one_per_bag);
  sources_.resize(n);
  scales_.resize(scaled ? n : 0);
  for (int64_t b = 0; b < noutputs_; ++b) {
    const int64_t begin = one_per_bag ? b : static_cast<int64_t>(offsets[b]);
    const int64_t end = one_per_bag ? b + 1 : static_cast<int64_t>(offsets[b + 1]);
    const float bag_scale = pooling == Pooling::kMean && end > begin ? 1.0f / static_cast<float>(end - begin) : 1.0f;
    for (int64_t p = begin; p < end; ++p) {
      if (p + kAhead < n) __builtin_prefetch(&offsets_[unique_of_[p + kAhead]], 1, 3);
      const int64_t k = offsets_[unique_of_[p]]++;
      sources_[k] = static_cast<int32_t>(b);
      if (scaled) scales_[k] = (weights.empty() ? 1.0f : weights[p]) * bag_scale;
    }
  }
  // offsets_[u] now ends u's range: shift right by one for CSR.
  offsets_.push_back(0);
  for (int64_t u = nunique; u > 0; --u) offsets_[u] = offsets_[u - 1];
  offsets_[0] = 0;
}

template <typename Index>
absl::Status reindex(const std::string& table, int64_t nvectors, const Bags<Index>& bags, Pooling pooling,
                     UpdatePlan* plan) {
  if (absl::Status s = validate_bags(table, nvectors, bags); !s.ok()) return s;
  plan->BuildUnchecked<Index>(nvectors, bags.offsets, bags.indices, bags.weights, pooling);
  return absl::OkStatus();
}

template <typename Index>
absl::Status reindex_indices(const std::string& table, int64_t nvectors, std::span<const Index> indices,
                             UpdatePlan* plan) {
  if (absl::Status s = validate_indices(table, nvectors, indices); !s.ok()) return s;
  plan->BuildUnchecked<Index>(nvectors, {}, indices, {}, Pooling::kSum);
  return absl::OkStatus();
}

template void UpdatePlan::BuildUnchecked(int64_t, std::span<const int32_t>, std::span<const int32_t>,
                                         std::span<const float>, Pooling);
template void UpdatePlan::BuildUnchecked(int64_t, std::span<const int64_t>, std::span<const int64_t>,
                                         std::span<const float>, Pooling);
template absl::Status reindex(const std::string&, int64_t, const Bags<int32_t>&, Pooling, UpdatePlan*);
template absl::Status reindex(const std::string&, int64_t, const Bags<int64_t>&, Pooling, UpdatePlan*);
template absl::Status reindex_indices(const std::string&, int64_t, std::span<const int32_t>, UpdatePlan*);
template absl::Status reindex_indices(const std::string&, int64_t, std::span<const int64_t>, UpdatePlan*);

}  // namespace cemb
