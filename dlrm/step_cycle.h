// StepCycle: the one owner of the beginning and the end of a step of the
// embedding tables (dlrm/embedding_layer.h), for training and evaluation.
//
//   Begin(k, batch k, the next batches)
//     ssd tables: Prefetch every batch among k and the next ones that was not
//     prefetched yet (their reads overlap this step's compute and the next
//     steps'), then WaitResident(k): phase "ssd wait"; cached tables: open
//     the step scopes
//   ... Dlrm::TrainStep or Predict (lookups, backward, updates) ...
//   End(k)
//     close the step scopes, Unpin(k), flush the full dynamic caches:
//     phase "cache flush"
//
// Batch ids are consecutive within one StepCycle (the trainer's: the step
// number; evaluation: its own cycle and id range). With prefetch_batches = P
// the rows of at most P + 1 batches are pinned at once (the current one and
// the P after it); model.dram_budget is checked against that
// (TrainConfig::ToDlrmOptions). Evaluation uses P = 0 (each batch's rows
// read in one batched submission before its forward): it runs between
// training steps, while the training cycle still pins its P batches, so
// together they pin P + 1 as well.
//
// Without ssd tables Begin only opens the scopes and `ahead` is not read
// (the trainer then does not Peek the loader at all).
//
// Thread safety: one caller (the trainer's thread); the ssd reads run on
// the kernel (io_uring) while the caller computes.
//
//   StepCycle cycle(&model->embeddings(), /*prefetch_batches=*/2);
//   const data::Batch* b = loader->Next();
//   CEMB_RETURN_IF_ERROR(cycle.Begin(k, view.bags, loader->Peek(2), &times));
//   CEMB_ASSIGN_OR_RETURN(double loss, model->TrainStep(view, lr, &times));
//   CEMB_RETURN_IF_ERROR(cycle.End(k, &times));
#ifndef CEMB_DLRM_STEP_CYCLE_H_
#define CEMB_DLRM_STEP_CYCLE_H_

#include <cstdint>
#include <limits>
#include <span>

#include "absl/status/status.h"
#include "data/loader.h"
#include "dlrm/embedding_layer.h"
#include "dlrm/model.h"

namespace cemb::dlrm {

class StepCycle {
 public:
  // REQUIRES: layer outlives the cycle; prefetch_batches >= 0.
  StepCycle(EmbeddingLayer* layer, int prefetch_batches) : layer_(layer), prefetch_batches_(prefetch_batches) {}

  int prefetch_batches() const { return prefetch_batches_; }
  bool prefetches() const { return layer_->has_ssd_tables(); }

  // Begins step `id` on `bags` (one per table); `ahead` are the batches of
  // ids id + 1, id + 2, ... (at most prefetch_batches are used). Errors: too
  // few ssd slots for the pinned rows, an I/O error (naming the table and the
  // file); the step must not run then.
  [[nodiscard]] absl::Status Begin(int64_t id, std::span<const Bags<int32_t>> bags,
                                   std::span<const data::Batch* const> ahead, PhaseTimes* times);
  // Ends step `id` (after its update, or its forward when evaluating).
  [[nodiscard]] absl::Status End(int64_t id, PhaseTimes* times);

 private:
  EmbeddingLayer* layer_;
  int prefetch_batches_;
  int64_t next_ = std::numeric_limits<int64_t>::min();  // the first id not prefetched yet
};

}  // namespace cemb::dlrm

#endif  // CEMB_DLRM_STEP_CYCLE_H_
