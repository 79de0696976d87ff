#include "train/metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace cemb::train {

double RocAuc(std::span<const float> scores, std::span<const float> labels) {
  const size_t n = scores.size();
  for (float s : scores) {
    if (std::isnan(s)) return std::numeric_limits<double>::quiet_NaN();  // a diverged model
  }
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return scores[a] < scores[b]; });
  double positive_rank_sum = 0;  // 1-based ranks, ties averaged
  uint64_t positives = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i + 1;
    while (j < n && scores[order[j]] == scores[order[i]]) ++j;
    const double rank = 0.5 * static_cast<double>(i + 1 + j);  // average of ranks i+1 .. j
    for (size_t k = i; k < j; ++k) {
      if (labels[order[k]] > 0.5f) positive_rank_sum += rank, ++positives;
    }
    i = j;
  }
  const uint64_t negatives = n - positives;
  if (positives == 0 || negatives == 0) return std::numeric_limits<double>::quiet_NaN();
  const double p = static_cast<double>(positives);
  return (positive_rank_sum - p * (p + 1) / 2) / (p * static_cast<double>(negatives));
}

double LogLoss(std::span<const float> probabilities, std::span<const float> labels) {
  if (probabilities.empty()) return 0;
  double sum = 0;
  for (size_t i = 0; i < probabilities.size(); ++i) {
    const double p = probabilities[i], y = labels[i];
    const double log_p = std::max(std::log(p), -100.0);
    const double log_q = std::max(std::log1p(-p), -100.0);
    sum -= y * log_p + (1 - y) * log_q;
  }
  return sum / static_cast<double>(probabilities.size());
}

double Accuracy(std::span<const float> probabilities, std::span<const float> labels) {
  if (probabilities.empty()) return 0;
  size_t right = 0;
  for (size_t i = 0; i < probabilities.size(); ++i) {
    right += (probabilities[i] >= 0.5f) == (labels[i] > 0.5f);
  }
  return static_cast<double>(right) / static_cast<double>(probabilities.size());
}

void BinaryMetrics::Add(std::span<const float> probabilities, std::span<const float> labels) {
  scores_.insert(scores_.end(), probabilities.begin(), probabilities.end());
  labels_.insert(labels_.end(), labels.begin(), labels.end());
}

MetricsResult BinaryMetrics::Compute() const {
  MetricsResult r;
  r.samples = samples();
  for (float y : labels_) r.positives += y > 0.5f;
  r.log_loss = LogLoss(scores_, labels_);
  r.auc = RocAuc(scores_, labels_);
  r.accuracy = Accuracy(scores_, labels_);
  return r;
}

}  // namespace cemb::train
