// ShardedStep: a DLRM's training and evaluation steps on several processes
// (docs/distributed.md), over MPI: each table lives on one rank
// (ShardPlan), every rank holds the MLPs and its slice of every global
// batch. Each of its slots is the EmbeddingStep of the batch exchanged into
// it (step(slot), which the batch's BatchView carries into Dlrm's step: the
// model runs the same path as on one process). The trainer's Stepper
// (train/stepper.h) makes it and begins each step with it:
//
//   ExchangeIndices(slot, bags)  this rank's bags of every table go to the
//                            tables' owners (EmbeddingExchange);
//                            owned_bags(slot) = this rank's tables over the
//                            global batch (what its StepCycle pins); or in
//                            two halves, StartIndices ... FinishIndices, the
//                            indices travelling while a step runs (Progress
//                            moves them along)
//   step(slot)               the slot's batch's EmbeddingStep, in its BatchView
//   Dlrm::TrainStep          StartPooledRows: the owner pools, the rows travel
//                            during the bottom MLP ... FinishPooledRows;
//                            StartGradients ... SumGradients (MLPs, allreduce)
//                            ... FinishGradients: the owner's fused update
//
// Slots: a batch's indices may travel steps before its step, so that an
// owner's ssd tables prefetch its rows while earlier steps run (StepCycle);
// each slot is one exchange, and a batch's owned bags stay valid until its
// slot's next ExchangeIndices. The Stepper uses prefetch_batches + 2 slots
// in a ring for training and one more for evaluation.
//
// Same numbers as one process: the pooled rows and the owners' updates are
// bit for bit a single process's (distributed/embedding_exchange.h); the MLPs'
// gradients are sums over the ranks' slices, so the losses differ in the
// last bits only (tests/train/distributed_test.cc: 1e-5 relative over 20
// steps of configs/default.yaml).
//
// Errors: every failure a rank finds in its own work (bad bags, a row index
// out of range in the owner's pooling, an ssd read in its update) reaches
// every rank as "rank f: <message>" (Comm::AgreeOnStatus), so that
// each returns it and the job ends with it, never a hang. A failed MPI call,
// or a call out of order, leaves the ranks out of step: the rank prints it
// and calls MPI_Abort, which ends every rank (mpirun exits non-zero).
//
// Phases: the exchange and the agreements count as `all-to-all`, the MLPs'
// and the loss's sums as `allreduce`, the owner's pooling and update as
// `embedding lookup` and `embedding update`.
//
// Thread safety: the trainer's thread only (MPI_THREAD_FUNNELED).
#ifndef CEMB_DISTRIBUTED_SHARDED_STEP_H_
#define CEMB_DISTRIBUTED_SHARDED_STEP_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "distributed/comm.h"
#include "distributed/embedding_exchange.h"
#include "distributed/shard_plan.h"
#include "dlrm/model.h"

namespace cemb::distributed {

class ShardedStep {
 public:
  // Not collective. `max_local_batch`: the largest slice any rank holds;
  // `slots` >= 1.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ShardedStep>> Create(const Comm& comm,
                                                                           const ShardPlan& plan, int64_t dim,
                                                                           int64_t max_local_batch, int slots = 1);
  ~ShardedStep();

  // Collective: every rank exchanges the same batches into the same slots
  // in the same order. `bags`: this rank's slice of a batch, one Bags per
  // table of the model. Errors, agreed: malformed bags on some rank.
  // REQUIRES: 0 <= slot < slots(); the slot's previous batch is done (its
  // step finished, or it never ran: a forward-only step).
  [[nodiscard]] absl::Status ExchangeIndices(int slot, std::span<const Bags<int32_t>> bags, dlrm::PhaseTimes* times);
  // ExchangeIndices in two halves: StartIndices posts the bags (after the
  // ranks agree on their sizes; bags may change once it returns),
  // FinishIndices waits for them; Progress() moves them along meanwhile.
  // One at a time. REQUIRES: the slot is not the current one.
  [[nodiscard]] absl::Status StartIndices(int slot, std::span<const Bags<int32_t>> bags, dlrm::PhaseTimes* times);
  [[nodiscard]] absl::Status FinishIndices(dlrm::PhaseTimes* times);
  bool indices_in_flight() const { return pending_ >= 0; }
  // After ExchangeIndices(slot): this rank's tables (plan().tables_of(rank),
  // in that order) over the global batch.
  std::span<const Bags<int32_t>> owned_bags(int slot) const { return slots_[slot]->owned_bags(); }
  // The EmbeddingStep of slot's batch: a Dlrm step (TrainStep or Predict)
  // on the BatchView that carries it runs on that batch. Valid as long as
  // the ShardedStep.
  dlrm::EmbeddingStep* step(int slot) const;
  int slots() const { return static_cast<int>(slots_.size()); }

  const Comm& comm() const { return comm_; }
  const ShardPlan& plan() const { return plan_; }

 private:
  class SlotStep;  // one slot's EmbeddingStep (sharded_step.cc)

  ShardedStep(const Comm& comm, const ShardPlan& plan);
  // `s` when OK; otherwise the ranks are out of step: prints it, MPI_Abort.
  absl::Status OrAbort(const absl::Status& s) const;
  // Moves the indices in flight (StartIndices), if any.
  absl::Status ProgressIndices();

  Comm comm_;
  ShardPlan plan_;
  std::vector<std::unique_ptr<EmbeddingExchange>> slots_;
  std::vector<std::unique_ptr<SlotStep>> steps_;  // one per slot
  int pending_ = -1;  // the slot whose indices are in flight (StartIndices), or -1
};

}  // namespace cemb::distributed

#endif  // CEMB_DISTRIBUTED_SHARDED_STEP_H_
