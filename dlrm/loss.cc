#include "dlrm/loss.h"

#include <cmath>
#include <cstddef>

#include "absl/strings/str_cat.h"

namespace cemb::dlrm {
namespace {

// sigmoid(z) without overflow: for z < 0 use e / (1 + e) with e = exp(z).
inline float SigmoidOne(float z) {
  if (z >= 0) return 1.0f / (1.0f + std::exp(-z));
  const float e = std::exp(z);
  return e / (1.0f + e);
}

}  // namespace

double BceWithLogitsOne(float logit, float label) {
  const double z = logit;
  return std::max(z, 0.0) - z * label + std::log1p(std::exp(-std::abs(z)));
}

absl::StatusOr<double> BceWithLogits(std::span<const float> logits, std::span<const float> labels,
                                     std::span<float> grad, int64_t mean_over) {
  if (logits.empty()) return absl::InvalidArgumentError("BceWithLogits: empty batch");
  if (labels.size() != logits.size() || (!grad.empty() && grad.size() != logits.size())) {
    return absl::InvalidArgumentError(absl::StrCat("BceWithLogits: ", logits.size(), " logits, ",
                                                   labels.size(), " labels, ", grad.size(),
                                                   " gradient slots (must be equal)"));
  }
  const size_t n = logits.size();
  const int64_t over = mean_over > 0 ? mean_over : static_cast<int64_t>(n);
  const float inv_n = 1.0f / static_cast<float>(over);
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    const float z = logits[i];
    const float y = labels[i];
    sum += BceWithLogitsOne(z, y);
    if (!grad.empty()) grad[i] = (SigmoidOne(z) - y) * inv_n;
  }
  return sum / static_cast<double>(over);
}

void Sigmoid(std::span<const float> logits, std::span<float> probabilities) {
  for (size_t i = 0; i < logits.size(); ++i) probabilities[i] = SigmoidOne(logits[i]);
}

}  // namespace cemb::dlrm
