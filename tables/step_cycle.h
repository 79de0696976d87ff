// StepCycle: the one owner of the beginning and the end of a step of the
// embedding tables (tables/embedding_layer.h), for training and evaluation.
//
//   Begin(k, batch k, the next batches)
//     ssd tables: wait for the prefetcher threads' work of the previous step;
//     Prefetch batch k here if it was not (the first step, P = 0);
//     WaitResident(k); then hand the next batches not prefetched yet (one a
//     step in steady state) to the prefetcher threads, whose Prefetch — slot
//     choice, eviction, the write-back of dirty victims, the read submission
//     — runs while this step computes: all of it phase "ssd wait" when it is
//     on the trainer's thread, none of it when it is not; cached tables: open
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
// Thread safety: one caller (the trainer's thread). With ssd tables and
// P > 0 the cycle owns prefetcher threads, one per table up to
// kMaxPrefetchThreads (table t to thread t mod n: the tables' reads and
// write-backs overlap, so the drive sees every table's queue at once), under
// SCHED_BATCH; their Prefetch calls run concurrently with the step's kernels,
// which only touch rows pinned by the step's batch (SsdTable allows it: its
// stress test, and tests/tables/step_cycle_test.cc, run this pattern under
// ThreadSanitizer). Drain() waits for them: call it before anything that
// needs the tables quiet (evaluation, a checkpoint, the end of the run).
// The values the tables hold never depend on its timing (a prefetch changes
// where rows are, not what they are), so the losses stay exact.
//
//   StepCycle cycle(&model->embeddings(), /*prefetch_batches=*/2);
//   const data::Batch* b = loader->Next();
//   CEMB_RETURN_IF_ERROR(cycle.Begin(k, view.bags, bags_of_the_next_two, &times));
//   CEMB_ASSIGN_OR_RETURN(double loss, model->TrainStep(view, lr, &times));
//   CEMB_RETURN_IF_ERROR(cycle.End(k, &times));
#ifndef CEMB_TABLES_STEP_CYCLE_H_
#define CEMB_TABLES_STEP_CYCLE_H_

#include <condition_variable>
#include <cstdint>
#include <limits>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "tables/embedding_layer.h"

namespace cemb {

class StepCycle {
 public:
  // REQUIRES: layer outlives the cycle; prefetch_batches >= 0.
  StepCycle(EmbeddingLayer* layer, int prefetch_batches);
  ~StepCycle();  // drains and joins the prefetcher threads
  StepCycle(const StepCycle&) = delete;
  StepCycle& operator=(const StepCycle&) = delete;

  int prefetch_batches() const { return prefetch_batches_; }
  bool prefetches() const { return layer_->has_ssd_tables(); }

  // Begins step `id` on `bags` (one per table of the layer); `ahead` are the
  // bags of batches id + 1, id + 2, ... (at most prefetch_batches are used;
  // the cycle copies the Bags, whose indices must stay valid until the
  // batch's step, as a loader's peeked batches and an exchange's owned bags
  // do). Errors: too few ssd slots for the pinned rows, an I/O error (naming
  // the table and the file); the step must not run then.
  [[nodiscard]] absl::Status Begin(int64_t id, std::span<const Bags<int32_t>> bags,
                                   std::span<const std::span<const Bags<int32_t>>> ahead,
                                   double* wait_seconds = nullptr);
  // Ends step `id` (after its update, or its forward when evaluating).
  [[nodiscard]] absl::Status End(int64_t id, double* flush_seconds = nullptr);
  // Waits until the prefetcher threads are idle; their first error, if any.
  [[nodiscard]] absl::Status Drain();

 private:
  // At most this many prefetcher threads (they wait on I/O, mostly).
  static constexpr int kMaxPrefetchThreads = 8;
  void Work(int worker, int workers);  // a prefetcher thread: tables worker, worker + workers, ...

  EmbeddingLayer* layer_;
  int prefetch_batches_;
  int64_t next_ = std::numeric_limits<int64_t>::min();  // the first id not prefetched yet

  // The prefetcher threads' job: the bags of batches `jobs_[0, njobs_)` of
  // ids job_first_id_, +1, ... (copied; their indices live in the loader's
  // ring or an exchange, valid until the batch's step: later than Drain).
  // Each new job bumps generation_; busy_ counts the threads still on it.
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::vector<Bags<int32_t>>> jobs_;  // P x tables, allocated once
  size_t njobs_ = 0;
  int64_t job_first_id_ = 0;
  uint64_t generation_ = 0;
  int busy_ = 0;
  bool stop_ = false;
  absl::Status job_status_;
  std::vector<std::thread> threads_;
};

}  // namespace cemb

#endif  // CEMB_TABLES_STEP_CYCLE_H_
