#include "distributed/sharded_step.h"

#include <cstdio>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/timer.h"

namespace cemb::distributed {

// One slot's batch in a Dlrm step: the EmbeddingStep calls on its exchange.
class ShardedStep::SlotStep final : public dlrm::EmbeddingStep {
 public:
  SlotStep(ShardedStep& step, EmbeddingExchange& exchange) : step_(step), exchange_(exchange) {}

  int64_t global_batch() const override { return exchange_.global_batch(); }

  absl::Status StartPooledRows(const absl::Status& local, EmbeddingLayer& layer, const dlrm::BatchView& batch,
                               MatrixView emb, dlrm::PhaseTimes* times) override {
    absl::Status mine = local;
    if (mine.ok() && layer.num_tables() > 0) {
      ScopedSeconds timer(dlrm::PhaseSeconds(times, dlrm::Phase::kEmbeddingLookup));
      mine = batch.checked != nullptr ? layer.Lookup(*batch.checked, exchange_.owned_output())
                                      : layer.Lookup(exchange_.owned_bags(), exchange_.owned_output());
    }
    ScopedSeconds timer(dlrm::PhaseSeconds(times, dlrm::Phase::kAllToAll));
    CEMB_RETURN_IF_ERROR(step_.comm_.AgreeOnStatus(mine));
    return step_.OrAbort(exchange_.StartPooled(emb));
  }

  absl::Status FinishPooledRows(const absl::Status& local, dlrm::PhaseTimes* times) override {
    ScopedSeconds timer(dlrm::PhaseSeconds(times, dlrm::Phase::kAllToAll));
    CEMB_RETURN_IF_ERROR(step_.OrAbort(exchange_.WaitPooled()));
    return step_.comm_.AgreeOnStatus(local);
  }

  absl::Status Progress() override {
    CEMB_RETURN_IF_ERROR(step_.OrAbort(exchange_.Progress()));
    return step_.ProgressIndices();
  }

  absl::Status StartGradients(ConstMatrixView d_emb, dlrm::PhaseTimes* times) override {
    ScopedSeconds timer(dlrm::PhaseSeconds(times, dlrm::Phase::kAllToAll));
    return step_.OrAbort(exchange_.StartGradients(d_emb));
  }

  absl::Status SumGradients(std::span<float> data, dlrm::PhaseTimes* times) override {
    ScopedSeconds timer(dlrm::PhaseSeconds(times, dlrm::Phase::kAllreduce));
    // Let the gradients' exchange move while this rank waits in the allreduce
    // (Open MPI has no progress thread).
    CEMB_RETURN_IF_ERROR(Progress());
    return step_.OrAbort(step_.comm_.AllreduceSum(data));
  }

  absl::Status SumLoss(double* loss, dlrm::PhaseTimes* times) override {
    ScopedSeconds timer(dlrm::PhaseSeconds(times, dlrm::Phase::kAllreduce));
    return step_.OrAbort(step_.comm_.AllreduceSum(std::span<double>(loss, 1)));
  }

  absl::Status FinishGradients(const absl::Status& local, EmbeddingLayer& layer, const dlrm::BatchView& batch,
                               float lr, dlrm::PhaseTimes* times) override {
    {
      ScopedSeconds timer(dlrm::PhaseSeconds(times, dlrm::Phase::kAllToAll));
      CEMB_RETURN_IF_ERROR(step_.OrAbort(exchange_.WaitGradients()));
    }
    absl::Status mine = local;
    if (mine.ok() && layer.num_tables() > 0) {
      ScopedSeconds timer(dlrm::PhaseSeconds(times, dlrm::Phase::kEmbeddingUpdate));
      mine = batch.checked != nullptr ? layer.Update(*batch.checked, exchange_.owned_grad(), lr)
                                      : layer.Update(exchange_.owned_bags(), exchange_.owned_grad(), lr);
    }
    ScopedSeconds timer(dlrm::PhaseSeconds(times, dlrm::Phase::kAllToAll));
    return step_.comm_.AgreeOnStatus(mine);
  }

 private:
  ShardedStep& step_;
  EmbeddingExchange& exchange_;
};

absl::StatusOr<std::unique_ptr<ShardedStep>> ShardedStep::Create(const Comm& comm, const ShardPlan& plan,
                                                                  int64_t dim, int64_t max_local_batch, int slots) {
  if (slots < 1) return absl::InvalidArgumentError(absl::StrCat("ShardedStep: ", slots, " slots"));
  std::unique_ptr<ShardedStep> step(new ShardedStep(comm, plan));
  for (int i = 0; i < slots; ++i) {
    CEMB_ASSIGN_OR_RETURN(std::unique_ptr<EmbeddingExchange> exchange,
                          EmbeddingExchange::Create(comm, plan, {.dim = dim, .max_local_batch = max_local_batch}));
    step->steps_.push_back(std::make_unique<SlotStep>(*step, *exchange));
    step->slots_.push_back(std::move(exchange));
  }
  return step;
}

absl::Status ShardedStep::OrAbort(const absl::Status& s) const {
  if (s.ok()) return s;
  std::fprintf(stderr, "rank %d: the ranks are out of step, ending the job: %s\n", comm_.rank(),
               std::string(s.message()).c_str());
  std::fflush(stderr);
  comm_.Abort(1);
}

absl::Status ShardedStep::ExchangeIndices(int slot, std::span<const Bags<int32_t>> bags, dlrm::PhaseTimes* times) {
  CEMB_RETURN_IF_ERROR(StartIndices(slot, bags, times));
  return FinishIndices(times);
}

absl::Status ShardedStep::StartIndices(int slot, std::span<const Bags<int32_t>> bags, dlrm::PhaseTimes* times) {
  ScopedSeconds timer(dlrm::PhaseSeconds(times, dlrm::Phase::kAllToAll));
  if (pending_ >= 0) return OrAbort(absl::FailedPreconditionError("ShardedStep: StartIndices with indices in flight"));
  absl::Status s = slots_[slot]->StartIndices(bags);
  // Malformed bags on some rank are agreed on (every rank returns them); an
  // MPI failure or a call out of order is not.
  if (absl::IsInternal(s) || absl::IsFailedPrecondition(s)) return OrAbort(s);
  CEMB_RETURN_IF_ERROR(s);
  pending_ = slot;
  return absl::OkStatus();
}

absl::Status ShardedStep::FinishIndices(dlrm::PhaseTimes* times) {
  ScopedSeconds timer(dlrm::PhaseSeconds(times, dlrm::Phase::kAllToAll));
  if (pending_ < 0) return absl::OkStatus();
  const int slot = std::exchange(pending_, -1);
  return OrAbort(slots_[slot]->WaitIndices());
}

ShardedStep::ShardedStep(const Comm& comm, const ShardPlan& plan)
    : comm_(comm), plan_(plan) {}
ShardedStep::~ShardedStep() = default;

dlrm::EmbeddingStep* ShardedStep::step(int slot) const { return steps_[slot].get(); }

absl::Status ShardedStep::ProgressIndices() {
  return pending_ >= 0 ? OrAbort(slots_[pending_]->Progress()) : absl::OkStatus();
}

}  // namespace cemb::distributed
