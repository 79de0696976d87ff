// Fused sigmoid + binary cross-entropy from logits: the DLRM's loss.
//
// For logits z[i] and labels y[i] in [0, 1] (hard 0/1 or soft), with
// p = sigmoid(z):
//   loss    = mean_i( -y log p - (1 - y) log(1 - p) )
//           = mean_i( max(z, 0) - z y + log1p(exp(-|z|)) )   (stable form)
//   dloss/dz[i] = (p[i] - y[i]) / n
// The stable form never overflows and never takes log(0), for any finite z
// (the loss of z = -1000, y = 1 is 1000, not inf).
//
//   CEMB_ASSIGN_OR_RETURN(double loss, BceWithLogits(logits, labels, grad));
//   // then mlp.Backward(batch, grad.data(), ...)
//
// Thread safety: pure functions. The loops are single-threaded: a batch of
// logits is a few thousand values.
#ifndef CEMB_DLRM_LOSS_H_
#define CEMB_DLRM_LOSS_H_

#include <span>

#include "absl/status/statusor.h"

namespace cemb::dlrm {

// Returns the mean loss (accumulated in double) and, if `grad` is not empty,
// writes dloss/dz into it. `grad` may alias `logits` (computed in place).
// `mean_over` (0: logits.size()) is the n of the mean: a slice of a batch
// spread over processes gives its share of the whole batch's loss and
// gradient (the sum over the slices is the batch's).
// Errors: InvalidArgument when the sizes differ or the batch is empty.
[[nodiscard]] absl::StatusOr<double> BceWithLogits(std::span<const float> logits,
                                                   std::span<const float> labels,
                                                   std::span<float> grad, int64_t mean_over = 0);

// The loss of one sample: max(z, 0) - z y + log1p(exp(-|z|)).
double BceWithLogitsOne(float logit, float label);

// p[i] = sigmoid(z[i]), computed without overflow (for evaluation: AUC,
// accuracy). REQUIRES: probabilities.size() == logits.size().
void Sigmoid(std::span<const float> logits, std::span<float> probabilities);

}  // namespace cemb::dlrm

#endif  // CEMB_DLRM_LOSS_H_
