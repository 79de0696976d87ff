// BatchPlans<Plan>: a layer stack's oneDNN plans, one per batch size it
// was asked for (the full batch, and e.g. the last partial batch of an
// epoch or a predictor's smaller sizes), made once at Create and found by
// batch size. The one list of plans of the MLPs (dlrm/mlp.cc) and the cross
// network (dlrm/cross_network.cc).
//
// Order: the largest batch is planned first, and plans() keeps that order.
// A stack whose weight layout is chosen by its first plan (the MLPs' fp32
// blocked copies) chooses it for the largest batch.
//
//   BatchPlans<MyPlan> plans;
//   CEMB_RETURN_IF_ERROR(plans.Make(options.batch_sizes, max_batch,
//                                   [&](int64_t n) -> absl::StatusOr<MyPlan> { return Plan(n); }));
//   CEMB_ASSIGN_OR_RETURN(const MyPlan* p, plans.Get(batch, "MLP Forward"));
#ifndef CEMB_DLRM_INTERNAL_BATCH_PLANS_H_
#define CEMB_DLRM_INTERNAL_BATCH_PLANS_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"

namespace cemb::dlrm::internal {

template <typename Plan>
class BatchPlans {
 public:
  // Plans `full` and every size of `extra` once, largest first: make(n)
  // returns the plan for n, or an error that Make returns.
  template <typename MakeFn>
  absl::Status Make(std::span<const int64_t> extra, int64_t full, MakeFn make) {
    std::vector<int64_t> sizes(extra.begin(), extra.end());
    sizes.push_back(full);
    std::sort(sizes.begin(), sizes.end(), std::greater<>());
    sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
    for (int64_t n : sizes) {
      absl::StatusOr<Plan> plan = make(n);
      if (!plan.ok()) return plan.status();
      sizes_.push_back(n);
      plans_.push_back(*std::move(plan));
    }
    return absl::OkStatus();
  }

  // The plan of batch size n, or InvalidArgument naming `what` and the
  // sizes planned.
  absl::StatusOr<const Plan*> Get(int64_t n, absl::string_view what) const {
    for (size_t i = 0; i < sizes_.size(); ++i) {
      if (sizes_[i] == n) return &plans_[i];
    }
    return absl::InvalidArgumentError(absl::StrCat(what, ": batch ", n, " was not planned (planned: ",
                                                   absl::StrJoin(sizes_, ", "), ")"));
  }

  // Every plan, largest batch first (to bind a scratchpad to each).
  std::span<Plan> plans() { return plans_; }
  std::span<const Plan> plans() const { return plans_; }
  std::span<const int64_t> sizes() const { return sizes_; }

 private:
  std::vector<int64_t> sizes_;  // sizes_[i] is plans_[i]'s batch
  std::vector<Plan> plans_;
};

}  // namespace cemb::dlrm::internal

#endif  // CEMB_DLRM_INTERNAL_BATCH_PLANS_H_
