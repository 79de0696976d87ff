// ShardPlan: which rank owns each embedding table (model parallelism: a
// table lives whole on one rank; tables are not split by rows).
//
// Balance. Each table t costs two shares: b_t = its bytes over all tables'
// bytes (memory: DRAM, cache and slow tier of the owner) and l_t = its
// lookups per step over all tables' lookups (time: the owner's pooling and
// update, the indices it receives). A rank is limited by whichever share
// runs out first, so the plan minimises the larger one: tables in order of
// max(b_t, l_t), largest first (then b_t + l_t, then the lower index), each
// to the rank where max(B_r + b_t, L_r + l_t) is smallest (then
// the smaller B_r + L_r, then the lower rank). This is greedy
// largest-first (LPT) on the larger share: within 4/3 of the best
// assignment for one resource, and, unlike a weighted sum of the two, it
// never hides a rank holding most of the bytes behind a small share of the
// lookups. The plan is a pure function of its inputs, so every rank
// computes the same plan from the same config without communicating.
//
// With more ranks than tables some ranks own none; they still take part in
// every exchange (their samples' rows come from the owners).
//
// Thread safety: immutable after Create.
//
//   std::vector<TableCost> costs = {{.bytes = rows0 * dim * 4, .lookups_per_step = batch * hot0}, ...};
//   CEMB_ASSIGN_OR_RETURN(ShardPlan plan, ShardPlan::Create(costs, comm.size()));
//   if (comm.rank() == 0) for (int r = 0; r < plan.num_ranks(); ++r) std::puts(plan.Describe(r).c_str());
//   for (int t : plan.tables_of(comm.rank())) ...create table t here...
#ifndef CEMB_DISTRIBUTED_SHARD_PLAN_H_
#define CEMB_DISTRIBUTED_SHARD_PLAN_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace cemb::distributed {

struct TableCost {
  int64_t bytes = 0;             // rows * dim * element size (plus optimizer state)
  double lookups_per_step = 0;   // indices of one global batch (batch * the table's hotness)
};

// The costs of a model's tables of `rows` rows each: `row_bytes` a row (its
// values and the optimizer state it keeps, with it or apart:
// tables/embedding_layer.h's EmbeddingRowBytes + RowwiseStateBytes), and
// batch_size x hotness[t] lookups per step (a sample's bag of table t holds
// hotness[t] indices). REQUIRES: hotness.size() == rows.size().
std::vector<TableCost> TableCosts(std::span<const uint64_t> rows, int64_t row_bytes, int64_t batch_size,
                                  std::span<const uint32_t> hotness);

// The batch sizes a rank's model runs when every global batch of
// `global_sizes` (the full batch, the last partial ones) is sliced over
// `ranks` ranks as the loaders slice it (data::SliceOf): ascending, without
// repeats; the largest is the model's batch and the largest local batch of
// the exchange. InvalidArgument naming the size when a batch has fewer
// samples than there are ranks (every rank needs one).
[[nodiscard]] absl::StatusOr<std::vector<int64_t>> LocalBatchSizes(std::span<const int64_t> global_sizes, int ranks);

class ShardPlan {
 public:
  // The balanced plan above. InvalidArgument for num_ranks < 1 or a negative
  // cost.
  [[nodiscard]] static absl::StatusOr<ShardPlan> Create(std::span<const TableCost> tables, int num_ranks);
  // A given assignment (tests, tables pinned by hand): owners[t] is the rank
  // of table t. InvalidArgument when an owner is outside [0, num_ranks) or
  // the sizes differ.
  [[nodiscard]] static absl::StatusOr<ShardPlan> FromOwners(std::span<const TableCost> tables,
                                                            std::span<const int> owners, int num_ranks);

  int num_ranks() const { return static_cast<int>(tables_of_.size()); }
  int num_tables() const { return static_cast<int>(owner_.size()); }
  int owner(int table) const { return owner_[table]; }
  // The tables of `rank`, ascending (its local table k is tables_of(rank)[k]).
  std::span<const int> tables_of(int rank) const { return tables_of_[rank]; }
  // Position of `table` in tables_of(owner(table)).
  int local_index(int table) const { return local_index_[table]; }
  std::span<const int> owners() const { return owner_; }

  int64_t bytes_of(int rank) const;
  // Fraction of all lookups that rank's tables serve, in [0, 1].
  double lookup_share(int rank) const;
  // "rank 0: tables 0,3,7 (12.3 GiB, 41% of lookups)"; a rank without
  // tables: "rank 3: no tables".
  std::string Describe(int rank) const;

 private:
  ShardPlan(std::span<const TableCost> tables, std::vector<int> owners, int num_ranks);

  std::vector<TableCost> costs_;
  std::vector<int> owner_;
  std::vector<int> local_index_;
  std::vector<std::vector<int>> tables_of_;
};

}  // namespace cemb::distributed

#endif  // CEMB_DISTRIBUTED_SHARD_PLAN_H_
