// The traffic sample behind model.dram_budget's split (tables/dram_budget.h):
// the lookups of the first batches of the training data, counted per row.
//
// Thread safety: a pure function.
//
//   TableTraffic traffic = SampleTraffic(*train_set, /*samples=*/64 * 2048);  // the first 64 batches
//   CEMB_RETURN_IF_ERROR(SplitDramBudget(request, &traffic, options.embeddings).status());
#ifndef CEMB_TRAIN_DRAM_BUDGET_H_
#define CEMB_TRAIN_DRAM_BUDGET_H_

#include <cstdint>
#include <vector>

#include "data/dataset.h"
#include "tables/dram_budget.h"

namespace cemb::train {

// Counts the lookups of the first min(samples, dataset.num_samples())
// samples of `dataset`, per table; only of the tables t with tables[t]
// (empty: every table; the others get no counts).
TableTraffic SampleTraffic(const data::Dataset& dataset, uint64_t samples, const std::vector<bool>& tables = {});

}  // namespace cemb::train

#endif  // CEMB_TRAIN_DRAM_BUDGET_H_
