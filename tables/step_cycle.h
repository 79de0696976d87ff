// StepCycle: the beginning and the end of a step of an EmbeddingLayer
// (tables/embedding_layer.h), for training and for evaluation, with
// prefetcher threads that read the next batches' ssd rows while a step
// computes.
//
//   Begin(k, bags of batch k, bags of the batches after it)
//     waits for the prefetchers' previous job; prefetches batch k here if
//     nobody did (the first step, P = 0, a jump); checks batch k
//     (CheckStep: the ssd tables' bags as their prefetch checked them);
//     waits for batch k's reads (BeginStep); hands the next batches not
//     prefetched yet (one a step in steady state) to the prefetcher
//     threads. Returns batch k checked; its seconds: the step's wait.
//   ... Lookup(batch), the model, Update(batch) ...
//   End(k)
//     closes the step scopes, unpins batch k, flushes the full dynamic
//     caches (EndStep). Its seconds: the caches' flush.
//
// Batch ids are consecutive within one cycle. With prefetch_batches = P the
// rows of at most P + 1 batches are pinned at once (the current one and the
// P after it): the ssd tables' DRAM must hold them. A second cycle over the
// same layer (evaluation between training steps, P = 0) pins one more batch.
// Without ssd tables Begin only checks the batch and opens the scopes;
// `ahead` is not read.
//
// Thread safety: one caller. With ssd tables and P > 0 the cycle owns
// prefetcher threads, one per table up to kMaxPrefetchThreads (table t to
// thread t mod n, so the drive sees every table's queue at once), under
// SCHED_BATCH (a woken prefetcher does not preempt the step's OpenMP
// threads). Their Prefetch calls run beside the step's kernels, which touch
// only rows pinned by the step's batch (tests/tables/step_cycle_test.cc runs
// this under ThreadSanitizer). Drain() waits for them: call it before
// anything that needs the tables quiet (Save, Load, evaluation, the end).
// Where rows are never changes what they are: the values do not depend on
// the prefetchers' timing.
//
//   StepCycle cycle(layer.get(), /*prefetch_batches=*/2);
//   CEMB_ASSIGN_OR_RETURN(CheckedBatch batch, cycle.Begin(k, bags, bags_of_the_next_two, &wait_seconds));
//   CEMB_RETURN_IF_ERROR(layer->Lookup(batch, out)); ... CEMB_RETURN_IF_ERROR(layer->Update(batch, d_out, lr));
//   CEMB_RETURN_IF_ERROR(cycle.End(k, &flush_seconds));
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
  // do). Adds the seconds it took to *wait_seconds when given. Returns the
  // batch checked, for Lookup and Update. Errors: malformed bags or an
  // index out of range, too few ssd slots for the pinned rows, an I/O error
  // (naming the table and the file); the step must not run then.
  [[nodiscard]] absl::StatusOr<CheckedBatch> Begin(int64_t id, std::span<const Bags<int32_t>> bags,
                                                   std::span<const std::span<const Bags<int32_t>>> ahead,
                                                   double* wait_seconds = nullptr);
  // Hands batch `id` to the prefetcher threads now, for a caller that knows
  // a batch only once the step before it is under way (a PyTorch loop's
  // prefetch(next) between forward and backward). `bags` are copied as in
  // Begin. Nothing when there are no prefetcher threads (Begin prefetches
  // then). Waits for the prefetchers' previous job; its error, if any.
  // REQUIRES: id is the next batch not handed out yet, and at most
  // prefetch_batches ahead of the step that began last.
  [[nodiscard]] absl::Status PrefetchNow(int64_t id, std::span<const Bags<int32_t>> bags);
  // Ends step `id` (after its update, or its forward when evaluating); adds
  // its seconds to *flush_seconds when given.
  [[nodiscard]] absl::Status End(int64_t id, double* flush_seconds = nullptr);
  // Waits until the prefetcher threads are idle; their first error, if any.
  [[nodiscard]] absl::Status Drain();

 private:
  // At most this many prefetcher threads (they wait on I/O, mostly).
  static constexpr int kMaxPrefetchThreads = 8;
  void Work(int worker, int workers);  // a prefetcher thread: tables worker, worker + workers, ...
  // Hands batches first, first + 1, ... not handed out yet to the
  // prefetcher threads. REQUIRES: drained.
  void HandOut(int64_t first, std::span<const std::span<const Bags<int32_t>>> batches);

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
