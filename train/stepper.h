// Stepper: the one owner of a batch's life in a training run, from the
// loader's peek to the unpin, for training and for evaluation, on one
// process or on several.
//
//   BeginTrain(k)   the loader's next batch (step k's) and a peek at the P
//                   after it (P + 1 on several ranks), up to the run's last
//                   step; on several ranks their indices go to the tables'
//                   owners (each batch once, into its slot of the ring,
//                   ShardedStep::ExchangeIndices; batch k + P + 1's only
//                   starts, ShardedStep::StartIndices, and travels during
//                   the step) and the batch's view carries its slot's
//                   EmbeddingStep; then the tables' step begins (StepCycle::Begin: batch
//                   k's rows resident, k + 1 .. k + P handed to the
//                   prefetchers). Returns the batch as the model sees it.
//   ... Dlrm::TrainStep(batch->view, lr, times) ...
//   EndTrain(k)     on several ranks, batch k + P + 1's indices arrive
//                   (FinishIndices); the tables' step ends (StepCycle::End:
//                   unpin, flushes).
//
//   BeginEval(b) / EndEval()  the same for an evaluation batch: its own
//                   cycle (P = 0), its own ids and, on several ranks, its
//                   own slot.
//
// The indices take one road: the loader's batch -> (several ranks: the
// exchange's owned bags, this rank's tables over the global batch) -> the
// cycle's prefetch and wait -> the model's lookup and update. Slots, on
// several ranks: P + 2 for training in a ring (batch k in slot k mod
// (P + 2): a batch's indices travel during the step P + 1 before its own
// and stay valid until then) and one for evaluation, P + 3 in all, in the
// Stepper's own ShardedStep.
//
// Every status is agreed among the ranks (distributed::Comm::AgreeOnStatus),
// so that all return the same error at the same call.
//
// Thread safety: the trainer's thread only; the cycle's prefetcher threads
// read the peeked batches, so the loader must outlive the Stepper.
//
//   CEMB_ASSIGN_OR_RETURN(auto steps, Stepper::Create(&model->embeddings(), P,
//                                                     {.comm = &comm, .plan = &plan, .dim = 16, .max_local_batch = n}));
//   CEMB_ASSIGN_OR_RETURN(const StepBatch* b, steps->BeginTrain(*loader, k, total_steps, &times));
//   CEMB_ASSIGN_OR_RETURN(double loss, model->TrainStep(b->view, lr, &times));
//   CEMB_RETURN_IF_ERROR(steps->EndTrain(k, &times));
#ifndef CEMB_TRAIN_STEPPER_H_
#define CEMB_TRAIN_STEPPER_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/loader.h"
#include "distributed/comm.h"
#include "distributed/sharded_step.h"
#include "dlrm/model.h"
#include "tables/step_cycle.h"

namespace cemb::train {

// A batch as a step runs it: the loader's batch and the model's view of it
// (its bags: the batch's own, one per table of the model; on several ranks
// its embedding step: its slot's).
struct StepBatch {
  const data::Batch* batch = nullptr;
  dlrm::BatchView view;
};

// Several ranks: what the Stepper's ShardedStep is made of. The comm must
// outlive the Stepper (it agrees on every status); the plan is copied.
struct StepperSharding {
  const distributed::Comm* comm = nullptr;  // nullptr or one rank: one process (the rest is not read)
  const distributed::ShardPlan* plan = nullptr;
  int64_t dim = 0;              // the tables' feature size
  int64_t max_local_batch = 0;  // the largest slice of a batch any rank holds
};

class Stepper {
 public:
  // The batches BeginTrain peeks at, at most: P, and one more on several
  // ranks (its indices travel during the step). The loader's reach.
  static int PeekFor(int prefetch_batches, int ranks) { return prefetch_batches + (ranks > 1 ? 1 : 0); }

  // `tables`: the model's (Dlrm::embeddings()), whose steps the Stepper
  // begins and ends; on several ranks (sharding.comm) the Stepper makes
  // and owns the ShardedStep that exchanges each batch. Errors: those of
  // ShardedStep::Create. REQUIRES: tables outlive the Stepper;
  // prefetch_batches >= 0.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Stepper>> Create(EmbeddingLayer* tables, int prefetch_batches,
                                                                       const StepperSharding& sharding = {});
  Stepper(const Stepper&) = delete;
  Stepper& operator=(const Stepper&) = delete;
  // Several ranks: waits for indices still travelling (a step that failed
  // left them; every rank is in the same place, the failure was agreed).
  ~Stepper();

  // Step `step` of a run of `total_steps` (see above). The batch stays valid
  // until the next BeginTrain. Errors (agreed): the loader ended, malformed
  // bags on some rank, too few ssd slots, an I/O error; the step must not
  // run then.
  [[nodiscard]] absl::StatusOr<const StepBatch*> BeginTrain(data::Loader& loader, int64_t step, int64_t total_steps,
                                                            dlrm::PhaseTimes* times);
  [[nodiscard]] absl::Status EndTrain(int64_t step, dlrm::PhaseTimes* times);

  // An evaluation batch (from the caller's loader). REQUIRES: Drain() since
  // the last training step.
  [[nodiscard]] absl::StatusOr<const StepBatch*> BeginEval(const data::Batch& batch, dlrm::PhaseTimes* times);
  [[nodiscard]] absl::Status EndEval(dlrm::PhaseTimes* times);

  // Waits for the prefetcher threads (agreed): before evaluation, a
  // checkpoint, the end of the run.
  [[nodiscard]] absl::Status Drain();

  // Several ranks: the tables' owners; nullptr on one process.
  const distributed::ShardPlan* plan() const { return sharded_ != nullptr ? &sharded_->plan() : nullptr; }

 private:
  Stepper(EmbeddingLayer* tables, std::unique_ptr<distributed::ShardedStep> sharded, const distributed::Comm* comm,
          int prefetch_batches);
  // The ShardedStep slots a run with prefetch_batches = P needs.
  static int SlotsFor(int prefetch_batches) { return prefetch_batches + 3; }
  bool distributed() const { return comm_ != nullptr && comm_->size() > 1; }
  absl::Status Agree(const absl::Status& s) const { return distributed() ? comm_->AgreeOnStatus(s) : s; }
  int TrainSlot(int64_t step) const { return static_cast<int>(step % (prefetch_batches_ + 2)); }
  int EvalSlot() const { return SlotsFor(prefetch_batches_) - 1; }
  // current_.view from `batch`: its bags, one per table.
  void View(const data::Batch& batch);
  // current_ with the step's bags as its cycle checked them.
  const StepBatch* Checked(CheckedBatch checked);
  // The bags this rank's tables see for current_ and for the `peeked`
  // batches after step `step` (into ahead_): the batches' own, or on several
  // ranks the owned bags of their slots, after the exchanges not done yet.
  absl::StatusOr<std::span<const Bags<int32_t>>> TrainBags(int64_t step, std::span<const data::Batch* const> peeked,
                                                           dlrm::PhaseTimes* times);

  std::unique_ptr<distributed::ShardedStep> sharded_;
  const distributed::Comm* comm_;
  int prefetch_batches_;
  StepCycle train_cycle_;  // ids: step numbers
  StepCycle eval_cycle_;   // ids: from kEvalBatchIds on, P = 0
  int64_t next_eval_id_ = kEvalBatchIds;
  int64_t eval_id_ = 0;  // the current evaluation batch's
  int64_t next_exchanged_ = 0;  // several ranks: the first training batch whose indices have not travelled

  StepBatch current_;
  CheckedBatch checked_;                               // current_.view.checked
  std::vector<Bags<int32_t>> bags_;                    // current_.view.bags
  std::vector<std::vector<Bags<int32_t>>> peeked_;     // PeekFor x tables: the peeked batches' own bags
  std::vector<std::span<const Bags<int32_t>>> ahead_;  // what StepCycle::Begin prefetches
};

}  // namespace cemb::train

#endif  // CEMB_TRAIN_STEPPER_H_
