#include "train/stepper.h"

#include <algorithm>
#include <utility>

#include "base/status_macros.h"
#include "base/timer.h"

namespace cemb::train {

absl::StatusOr<std::unique_ptr<Stepper>> Stepper::Create(EmbeddingLayer* tables, int prefetch_batches,
                                                         const StepperSharding& sharding) {
  const distributed::Comm* comm = sharding.comm != nullptr && sharding.comm->size() > 1 ? sharding.comm : nullptr;
  std::unique_ptr<distributed::ShardedStep> sharded;
  if (comm != nullptr) {
    if (sharding.plan == nullptr) return absl::InvalidArgumentError("Stepper: several ranks and no shard plan");
    CEMB_ASSIGN_OR_RETURN(sharded, distributed::ShardedStep::Create(*comm, *sharding.plan, sharding.dim, sharding.max_local_batch,
                                                       SlotsFor(prefetch_batches)));
  }
  return std::unique_ptr<Stepper>(new Stepper(tables, std::move(sharded), comm, prefetch_batches));
}

Stepper::Stepper(EmbeddingLayer* tables, std::unique_ptr<distributed::ShardedStep> sharded, const distributed::Comm* comm,
                 int prefetch_batches)
    : sharded_(std::move(sharded)),
      comm_(comm),
      prefetch_batches_(prefetch_batches),
      train_cycle_(tables, prefetch_batches),
      eval_cycle_(tables, 0),
      peeked_(static_cast<size_t>(PeekFor(prefetch_batches, comm != nullptr ? comm->size() : 1))),
      ahead_(static_cast<size_t>(prefetch_batches)) {}

Stepper::~Stepper() {
  if (sharded_ != nullptr && sharded_->indices_in_flight()) (void)sharded_->FinishIndices(nullptr);
}

void Stepper::View(const data::Batch& batch) {
  bags_.resize(batch.num_tables());
  for (uint32_t t = 0; t < batch.num_tables(); ++t) bags_[t] = Bags<int32_t>{batch.offsets(t), batch.indices(t)};
  current_.batch = &batch;
  current_.view = dlrm::BatchView{.size = batch.size(), .dense = batch.dense(), .labels = batch.labels(), .bags = bags_};
}

const StepBatch* Stepper::Checked(CheckedBatch checked) {
  checked_ = std::move(checked);
  current_.view.checked = &checked_;
  return &current_;
}

absl::StatusOr<const StepBatch*> Stepper::BeginTrain(data::Loader& loader, int64_t step, int64_t total_steps,
                                                     dlrm::PhaseTimes* times) {
  std::span<const data::Batch* const> peeked;
  {
    ScopedSeconds timer(dlrm::PhaseSeconds(times, dlrm::Phase::kData));
    const data::Batch* batch = loader.Next();
    if (batch == nullptr) return absl::InternalError("the training loader ended early");  // endless: cannot happen
    View(*batch);
    // The next batches, up to the run's last step, for the ssd tables'
    // prefetch. Several ranks: whether or not this rank has ssd tables, as
    // every rank must exchange the same batches.
    if ((train_cycle_.prefetches() || distributed()) && !peeked_.empty()) {
      const auto left = static_cast<size_t>(std::max<int64_t>(0, total_steps - step - 1));
      peeked = loader.Peek(std::min(peeked_.size(), left));
    }
  }
  CEMB_ASSIGN_OR_RETURN(std::span<const Bags<int32_t>> bags, TrainBags(step, peeked, times));
  const size_t ahead = std::min(peeked.size(), ahead_.size());
  absl::StatusOr<CheckedBatch> checked =
      train_cycle_.Begin(step, bags, std::span(ahead_.data(), ahead), dlrm::PhaseSeconds(times, dlrm::Phase::kSsdWait));
  CEMB_RETURN_IF_ERROR(Agree(checked.status()));
  return Checked(*std::move(checked));
}

absl::Status Stepper::EndTrain(int64_t step, dlrm::PhaseTimes* times) {
  if (distributed()) CEMB_RETURN_IF_ERROR(sharded_->FinishIndices(times));
  return Agree(train_cycle_.End(step, dlrm::PhaseSeconds(times, dlrm::Phase::kCacheFlush)));
}

absl::StatusOr<std::span<const Bags<int32_t>>> Stepper::TrainBags(int64_t step,
                                                                  std::span<const data::Batch* const> peeked,
                                                                  dlrm::PhaseTimes* times) {
  for (size_t i = 0; i < peeked.size(); ++i) {
    peeked_[i].resize(peeked[i]->num_tables());
    for (uint32_t t = 0; t < peeked[i]->num_tables(); ++t) {
      peeked_[i][t] = Bags<int32_t>{peeked[i]->offsets(t), peeked[i]->indices(t)};
    }
  }
  if (!distributed()) {
    for (size_t i = 0; i < peeked.size(); ++i) ahead_[i] = peeked_[i];
    return current_.view.bags;
  }
  // Every rank exchanges the same batches: the step's (unless it travelled
  // ahead already), then those peeked that have not; the one past the
  // prefetchers' reach (P + 1 ahead) only starts: it travels during the
  // step, and EndTrain waits for it.
  next_exchanged_ = std::max(next_exchanged_, step);
  if (next_exchanged_ == step) {
    CEMB_RETURN_IF_ERROR(sharded_->ExchangeIndices(TrainSlot(step), current_.view.bags, times));
    ++next_exchanged_;
  }
  for (size_t i = 0; i < peeked.size(); ++i) {
    const int64_t id = step + 1 + static_cast<int64_t>(i);
    if (id == next_exchanged_) {
      if (i < ahead_.size()) {
        CEMB_RETURN_IF_ERROR(sharded_->ExchangeIndices(TrainSlot(id), peeked_[i], times));
      } else {
        CEMB_RETURN_IF_ERROR(sharded_->StartIndices(TrainSlot(id), peeked_[i], times));
      }
      ++next_exchanged_;
    }
    if (i < ahead_.size()) ahead_[i] = sharded_->owned_bags(TrainSlot(id));
  }
  current_.view.embedding_step = sharded_->step(TrainSlot(step));
  return sharded_->owned_bags(TrainSlot(step));
}

absl::StatusOr<const StepBatch*> Stepper::BeginEval(const data::Batch& batch, dlrm::PhaseTimes* times) {
  View(batch);
  std::span<const Bags<int32_t>> bags = current_.view.bags;
  if (distributed()) {
    CEMB_RETURN_IF_ERROR(sharded_->ExchangeIndices(EvalSlot(), bags, times));
    current_.view.embedding_step = sharded_->step(EvalSlot());
    bags = sharded_->owned_bags(EvalSlot());
  }
  eval_id_ = next_eval_id_++;
  absl::StatusOr<CheckedBatch> checked =
      eval_cycle_.Begin(eval_id_, bags, {}, dlrm::PhaseSeconds(times, dlrm::Phase::kSsdWait));
  CEMB_RETURN_IF_ERROR(Agree(checked.status()));
  return Checked(*std::move(checked));
}

absl::Status Stepper::EndEval(dlrm::PhaseTimes* times) {
  return Agree(eval_cycle_.End(eval_id_, dlrm::PhaseSeconds(times, dlrm::Phase::kCacheFlush)));
}

absl::Status Stepper::Drain() { return Agree(train_cycle_.Drain()); }

}  // namespace cemb::train
