#include "dlrm/step_cycle.h"

#include <algorithm>
#include <chrono>

#include "base/status_macros.h"

namespace cemb::dlrm {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

absl::Status StepCycle::Begin(int64_t id, std::span<const Bags<int32_t>> bags,
                              std::span<const data::Batch* const> ahead, PhaseTimes* times) {
  const Clock::time_point t0 = Clock::now();
  if (layer_->has_ssd_tables()) {
    const int tables = layer_->num_tables();
    if (next_ <= id) {  // not prefetched (the first step, P = 0, or after a jump)
      for (int t = 0; t < tables; ++t) CEMB_RETURN_IF_ERROR(layer_->Prefetch(id, t, bags[t].indices));
      next_ = id + 1;
    }
    const size_t n = std::min(ahead.size(), static_cast<size_t>(prefetch_batches_));
    for (size_t i = 0; i < n; ++i) {
      const int64_t ahead_id = id + 1 + static_cast<int64_t>(i);
      if (ahead_id < next_) continue;
      for (int t = 0; t < tables; ++t) {
        CEMB_RETURN_IF_ERROR(layer_->Prefetch(ahead_id, t, ahead[i]->indices(static_cast<uint32_t>(t))));
      }
      next_ = ahead_id + 1;
    }
  }
  absl::StatusOr<double> waited = layer_->BeginStep(id);
  if (times != nullptr) (*times)[Phase::kSsdWait] += Since(t0);
  return waited.status();
}

absl::Status StepCycle::End(int64_t id, PhaseTimes* times) {
  const Clock::time_point t0 = Clock::now();
  absl::StatusOr<int> flushed = layer_->EndStep(id);
  if (times != nullptr) (*times)[Phase::kCacheFlush] += Since(t0);
  return flushed.status();
}

}  // namespace cemb::dlrm
