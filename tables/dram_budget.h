// One DRAM budget (dlrm-train's model.dram_budget, the Python collection's
// dram_budget) for the tables whose rows live on a slower tier, split among
// them by what they need, their traffic and size.
//
// Who takes part: every "ssd" table (its slot pool, slot metadata, map
// and log buffers: ssd/internal/ssd_core.h, SsdFixedDramBytes), and
// every cached table ("static", "dynamic") whose cache
// size the config does not give (cache_lower / cache_slack left out: the
// budget sets both; a cached table with a given size keeps it and its bytes
// come out of the budget first).
//
// The split, in order:
//   1. What each table cannot do without (refused, naming model.dram_budget
//      and the bytes, when the budget is smaller): its fixed metadata (ssd:
//      4 bytes per row of map, the log's write and collector buffers of
//      about 1 MiB each, 6 per table; cached: the
//      8-byte pointer word per row) and the rows it must hold at once (ssd:
//      the rows pinned by prefetch_batches + 1 batches, batch_size x the
//      table's hotness each; cached: one batch's rows, the cache slack a
//      step may admit, plus one row of lower mark).
//   2. By observed traffic, when a sample of the training data is given
//      (TableTraffic: the lookups of the first batches, counted per row):
//      rows are taken hottest first across all tables, by sampled lookups
//      per DRAM byte, until the budget is spent or every sampled row of
//      every table has a place. This is the split that keeps the most
//      sampled lookups in DRAM (the "ideal" cache of each table: its hottest
//      rows), whatever the tables' sizes.
//   3. What is left, in proportion to the tables' bytes, never more than a
//      table's rows (water-filling).
//
// Thread safety: pure functions.
//
//   DramBudgetRequest request{.budget = int64_t{2} << 30, .where = "dram_budget: ", .batch_size = 2048,
//                             .prefetch_batches = 2};
//   CEMB_ASSIGN_OR_RETURN(DramSplit split, SplitDramBudget(request, /*traffic=*/nullptr, layer_options));
#ifndef CEMB_TABLES_DRAM_BUDGET_H_
#define CEMB_TABLES_DRAM_BUDGET_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tables/embedding_layer.h"

namespace cemb {

// Lookups per row of each table in a sample of the training data.
struct TableTraffic {
  uint64_t samples = 0;  // how many samples were counted
  // Per table: the lookup counts of the rows the sample touched, hottest
  // first (how many times each distinct row was looked up).
  std::vector<std::vector<uint32_t>> counts;
};

struct DramBudgetRequest {
  int64_t budget = 0;                // bytes
  std::string where;                 // "configs/x.yaml: model.dram_budget: ", for messages
  std::string budget_text;           // how the user wrote it, for messages ("25% of 23.4 GiB")
  int64_t batch_size = 0;
  // Per table (tables[t]): the indices of one sample's bag, so that a batch
  // looks up at most batch_size x hotness[t] distinct rows of table t.
  // Empty: 1 for every table. REQUIRES: empty or one entry per table.
  std::vector<uint32_t> hotness;
  int64_t prefetch_batches = 0;
  std::string prefetch_name = "train.prefetch_batches";  // how the user sets it, for messages
  std::vector<bool> cache_size_given;  // per table: a cached table's cache_lower/slack came from the config
};

// What the split gave each table.
struct DramShare {
  int table = 0;
  int64_t bytes = 0;       // DRAM for rows (ssd: slots; cached: cache_lower + cache_slack)
  int64_t by_traffic = 0;  // of which step 2 gave
  double sampled_hit_rate = 0;  // of the sampled lookups, the share its rows in DRAM cover (NaN: no sample)
};

struct DramSplit {
  std::vector<DramShare> shares;  // one per table that takes part, in table order
  int64_t used = 0;               // bytes of the budget handed out, metadata included
  uint64_t sampled = 0;           // samples counted (0: split by size only)
};

// One table of a split: its spec, whose storage sizes the split sets, and
// the bytes of one of its rows (the layers of a split may differ in dim and
// row type). Table t of the request (cache_size_given, traffic.counts,
// DramShare::table) is tables[t].
struct BudgetTable {
  EmbeddingTableSpec* spec = nullptr;
  int64_t row_bytes = 0;
};

// Sets the DRAM of every table that takes part (ssd: storage.ssd.capacity_bytes;
// cached without a given size: storage.cache.lower and .slack in bytes).
// `traffic` may be null (split by size). No table takes part: an empty split.
[[nodiscard]] absl::StatusOr<DramSplit> SplitDramBudget(const DramBudgetRequest& request,
                                                        const TableTraffic* traffic, std::span<const BudgetTable> tables);
// The tables of one layer.
[[nodiscard]] absl::StatusOr<DramSplit> SplitDramBudget(const DramBudgetRequest& request,
                                                        const TableTraffic* traffic, EmbeddingLayerOptions& emb);

}  // namespace cemb

#endif  // CEMB_TABLES_DRAM_BUDGET_H_
