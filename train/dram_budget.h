// model.dram_budget: one DRAM budget for the tables whose rows live on a
// slower tier, split among them by what they need, their traffic and size.
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
//      the rows pinned by prefetch_batches + 1 batches, batch_size x hotness
//      each; cached: one batch's rows, the cache slack a step may admit,
//      plus one row of lower mark).
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
//   TableTraffic traffic = SampleTraffic(*train_set, /*samples=*/64 * 2048);  // the first 64 batches
//   CEMB_RETURN_IF_ERROR(SplitDramBudget(request, &traffic, options.embeddings));
#ifndef CEMB_TRAIN_DRAM_BUDGET_H_
#define CEMB_TRAIN_DRAM_BUDGET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "data/dataset.h"
#include "tables/embedding_layer.h"

namespace cemb::dlrm {

// Lookups per row of each table in a sample of the training data.
struct TableTraffic {
  uint64_t samples = 0;  // how many samples were counted
  // Per table: the lookup counts of the rows the sample touched, hottest
  // first (how many times each distinct row was looked up).
  std::vector<std::vector<uint32_t>> counts;
};

// Counts the lookups of the first min(samples, dataset.num_samples())
// samples of `dataset`, per table; only of the tables t with tables[t]
// (empty: every table; the others get no counts).
TableTraffic SampleTraffic(const data::Dataset& dataset, uint64_t samples, const std::vector<bool>& tables = {});

struct DramBudgetRequest {
  int64_t budget = 0;                // bytes
  std::string where;                 // "configs/x.yaml: model.dram_budget: ", for messages
  std::string budget_text;           // how the user wrote it, for messages ("25% of 23.4 GiB")
  int64_t batch_size = 0;
  uint32_t hotness = 1;
  int64_t prefetch_batches = 0;
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

// Sets the DRAM of every table that takes part (ssd: storage.ssd.capacity_bytes;
// cached without a given size: storage.cache.lower and .slack in bytes).
// `traffic` may be null (split by size). No table takes part: an empty split.
[[nodiscard]] absl::StatusOr<DramSplit> SplitDramBudget(const DramBudgetRequest& request,
                                                        const TableTraffic* traffic, EmbeddingLayerOptions& emb);

}  // namespace cemb::dlrm

#endif  // CEMB_TRAIN_DRAM_BUDGET_H_
