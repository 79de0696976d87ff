// reindex: turns the bags of a lookup into an update plan, the input of the
// fused update kernels (sgd_update, rowwise_adagrad_update, adagrad_update).
//
// Reference semantics:
//   rows    = the distinct rows of `indices`, in order of first appearance
//   for each unique row u, its occurrences k in offsets[u] .. offsets[u+1]:
//     sources[k] = the output (bag) that read it, in bag order
//     scales[k]  = weight * (1 / bag length for kMean); scales is empty when
//                  every scale is 1 (plain sums)
// so that the table gradient of row u is sum_k scales[k] * grad[sources[k]],
// computed by the update kernels without ever materialising it.
//
// Three passes (thesis 5.3): (1) a histogram of each row with its first-seen
// order, through a per-table slot array; (2) a prefix sum into offsets;
// (3) a scatter of the sources. O(indices) time; the slot array holds one
// int32 per table row, allocated on first use and left zeroed after each call.
// For a table of more than 8 rows per hash entry (the hash table has the
// power of two >= 2 x indices entries) pass (1) uses an open-addressing hash
// table instead: it stays in cache and costs 12 bytes per entry instead of 4
// bytes per table row (a 40 M-row table's slot array is 160 MB).
//
// Ownership and cost: a plan is reused from step to step; after the first
// calls its buffers have grown to the batch's size and reindex allocates
// nothing. Thread safety: one plan per table per thread; distinct plans may
// be built concurrently.
//
// Example:
//   UpdatePlan plan;
//   CEMB_RETURN_IF_ERROR(reindex("t0", table.nvectors(), bags, Pooling::kSum, &plan));
//   CEMB_RETURN_IF_ERROR(kernels.sgd_update(plan, grad, {.learning_rate = 0.01f}));
#ifndef CEMB_EMBEDDING_REINDEX_H_
#define CEMB_EMBEDDING_REINDEX_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "embedding/types.h"

namespace cemb {

class UpdatePlan {
 public:
  int64_t nunique() const { return static_cast<int64_t>(rows_.size()); }
  int64_t noccurrences() const { return static_cast<int64_t>(sources_.size()); }
  // The number of gradient rows the plan reads (the number of bags).
  int64_t noutputs() const { return noutputs_; }
  // The table size the plan was built for.
  int64_t nvectors() const { return nvectors_; }

  std::span<const int64_t> rows() const { return rows_; }
  std::span<const int64_t> offsets() const { return offsets_; }
  std::span<const int32_t> sources() const { return sources_; }
  std::span<const float> scales() const { return scales_; }

  // Builds the plan from bags (offsets may be empty: then index i is bag i).
  // REQUIRES: the inputs were validated (validate_bags / validate_indices).
  template <typename Index>
  void BuildUnchecked(int64_t nvectors, std::span<const Index> offsets, std::span<const Index> indices,
                      std::span<const float> weights, Pooling pooling);

 private:
  std::vector<int64_t> rows_;
  std::vector<int64_t> offsets_;
  std::vector<int32_t> sources_;
  std::vector<float> scales_;
  std::vector<int32_t> slot_;     // per table row: unique id + 1, or 0
  std::vector<int64_t> hash_rows_;  // the hash table instead: row, or -1
  std::vector<int32_t> hash_ids_;   // and its unique id + 1
  std::vector<int32_t> unique_of_;  // per occurrence in input order: unique id
  int64_t nvectors_ = 0;
  int64_t noutputs_ = 0;
};

// Validates the bags (see validate_bags), then builds `plan`.
template <typename Index>
[[nodiscard]] absl::Status reindex(const std::string& table, int64_t nvectors, const Bags<Index>& bags,
                                   Pooling pooling, UpdatePlan* plan);

// The plan of a non-reducing lookup: index i was output i.
template <typename Index>
[[nodiscard]] absl::Status reindex_indices(const std::string& table, int64_t nvectors,
                                           std::span<const Index> indices, UpdatePlan* plan);

}  // namespace cemb

#endif  // CEMB_EMBEDDING_REINDEX_H_
