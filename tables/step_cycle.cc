#include "tables/step_cycle.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/timer.h"

namespace cemb {

StepCycle::StepCycle(EmbeddingLayer* layer, int prefetch_batches)
    : layer_(layer), prefetch_batches_(prefetch_batches) {
  if (layer_->has_ssd_tables() && prefetch_batches_ > 0) {
    jobs_.assign(static_cast<size_t>(prefetch_batches_), std::vector<Bags<int32_t>>(layer_->num_tables()));
    const int workers = std::min(layer_->num_tables(), kMaxPrefetchThreads);
    for (int w = 0; w < workers; ++w) threads_.emplace_back([this, w, workers] { Work(w, workers); });
  }
}

StepCycle::~StepCycle() {
  if (threads_.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void StepCycle::Work(int worker, int workers) {
  // SCHED_BATCH: a prefetcher that wakes does not preempt a step's thread
  // (an OpenMP thread preempted at once leaves the others spinning at the
  // next barrier), yet keeps its fair share of a busy machine. SCHED_IDLE
  // would run it only on idle cores: beside other busy processes the
  // prefetchers starve and Drain waits on them (bench/history/ssd-tier.md,
  // "Prefetcher threads' policy"). If the policy cannot be set, the default stays.
  sched_param param{};
  (void)pthread_setschedparam(pthread_self(), SCHED_BATCH, &param);
  std::unique_lock<std::mutex> lock(mu_);
  uint64_t done = 0;  // the last job generation this worker ran
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || generation_ != done; });
    if (stop_) return;
    done = generation_;
    const size_t n = njobs_;
    const int64_t first = job_first_id_;
    lock.unlock();
    // This worker's tables, each batch in order (a table's batches must be
    // prefetched in id order); other workers take the other tables.
    absl::Status status;
    for (size_t i = 0; i < n && status.ok(); ++i) {
      for (int t = worker; t < layer_->num_tables() && status.ok(); t += workers) {
        status = layer_->Prefetch(first + static_cast<int64_t>(i), t, jobs_[i][t]);
      }
    }
    lock.lock();
    job_status_.Update(status);
    if (--busy_ == 0) cv_.notify_all();
  }
}

absl::Status StepCycle::Drain() {
  if (threads_.empty()) return absl::OkStatus();
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return busy_ == 0; });
  return std::exchange(job_status_, absl::OkStatus());
}

absl::StatusOr<CheckedBatch> StepCycle::Begin(int64_t id, std::span<const Bags<int32_t>> bags,
                                              std::span<const std::span<const Bags<int32_t>>> ahead,
                                              double* wait_seconds) {
  for (std::span<const Bags<int32_t>> b : ahead) {
    if (static_cast<int>(b.size()) != layer_->num_tables()) {
      return absl::InvalidArgumentError(
          absl::StrCat("StepCycle: a batch ahead has bags of ", b.size(), " tables, the layer ", layer_->num_tables()));
    }
  }
  ScopedSeconds timer(wait_seconds);
  absl::Status status = Drain();
  if (status.ok() && layer_->has_ssd_tables() && next_ <= id) {
    // Not prefetched (the first step, P = 0, or after a jump): now, here.
    for (int t = 0; t < layer_->num_tables() && status.ok(); ++t) status = layer_->Prefetch(id, t, bags[t]);
    next_ = id + 1;
  }
  absl::StatusOr<CheckedBatch> batch = status.ok() ? layer_->CheckStep(id, bags) : absl::StatusOr<CheckedBatch>(status);
  if (!batch.ok()) return batch;
  CEMB_RETURN_IF_ERROR(layer_->BeginStep(id).status());
  HandOut(id + 1, ahead.first(std::min(ahead.size(), static_cast<size_t>(prefetch_batches_))));
  return batch;
}

absl::Status StepCycle::PrefetchNow(int64_t id, std::span<const Bags<int32_t>> bags) {
  if (static_cast<int>(bags.size()) != layer_->num_tables()) {
    return absl::InvalidArgumentError(
        absl::StrCat("StepCycle: batch ", id, " has bags of ", bags.size(), " tables, the layer ", layer_->num_tables()));
  }
  if (threads_.empty()) return absl::OkStatus();  // Begin prefetches it
  CEMB_RETURN_IF_ERROR(Drain());
  HandOut(id, std::span<const std::span<const Bags<int32_t>>>(&bags, 1));
  return absl::OkStatus();
}

void StepCycle::HandOut(int64_t first, std::span<const std::span<const Bags<int32_t>>> batches) {
  if (threads_.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  njobs_ = 0;
  for (size_t i = 0; i < batches.size(); ++i) {
    const int64_t batch_id = first + static_cast<int64_t>(i);
    if (batch_id < next_) continue;
    if (njobs_ == 0) job_first_id_ = batch_id;
    std::copy(batches[i].begin(), batches[i].end(), jobs_[njobs_++].begin());
    next_ = batch_id + 1;
  }
  if (njobs_ > 0) {
    busy_ = static_cast<int>(threads_.size());
    ++generation_;
    cv_.notify_all();
  }
}

absl::Status StepCycle::End(int64_t id, double* flush_seconds) {
  ScopedSeconds timer(flush_seconds);
  return layer_->EndStep(id).status();
}

}  // namespace cemb
