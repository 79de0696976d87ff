// Binary classification metrics for click prediction: log loss, ROC AUC and
// accuracy, over predicted probabilities and 0/1 labels.
//
//   log loss = -mean(y log p + (1 - y) log(1 - p)), each log clamped at -100
//              (as PyTorch's BCELoss, so a p of exactly 0 or 1 stays finite)
//   AUC      = P(score of a random positive > score of a random negative),
//              ties counting one half: exact, by sorting, with tied scores
//              given their average rank (the Mann-Whitney U statistic):
//              AUC = (sum of positive ranks - P (P + 1) / 2) / (P N).
//              NaN when there are no positives or no negatives.
//   accuracy = fraction with (p >= 0.5) == y
//
// BinaryMetrics accumulates batches (it keeps every score and label, 8 bytes
// per sample, since the exact AUC needs them all) and Compute() sorts once.
// Thread safety: one thread at a time.
//
//   BinaryMetrics m;
//   m.Add(probabilities, labels);   // per evaluation batch
//   MetricsResult r = m.Compute();  // r.auc, r.log_loss, r.accuracy
#ifndef CEMB_TRAIN_METRICS_H_
#define CEMB_TRAIN_METRICS_H_

#include <cstdint>
#include <span>
#include <vector>

namespace cemb::train {

struct MetricsResult {
  int64_t samples = 0;
  int64_t positives = 0;
  double log_loss = 0;
  double auc = 0;  // NaN when one class is absent
  double accuracy = 0;
};

// The exact ROC AUC of `scores` against `labels` (label > 0.5 is positive).
// REQUIRES: scores.size() == labels.size().
double RocAuc(std::span<const float> scores, std::span<const float> labels);
// Mean binary cross-entropy of probabilities against labels (logs clamped at -100).
double LogLoss(std::span<const float> probabilities, std::span<const float> labels);
double Accuracy(std::span<const float> probabilities, std::span<const float> labels);

class BinaryMetrics {
 public:
  // REQUIRES: probabilities.size() == labels.size().
  void Add(std::span<const float> probabilities, std::span<const float> labels);
  MetricsResult Compute() const;
  int64_t samples() const { return static_cast<int64_t>(scores_.size()); }
  void Clear() { scores_.clear(), labels_.clear(); }

 private:
  std::vector<float> scores_, labels_;
};

}  // namespace cemb::train

#endif  // CEMB_TRAIN_METRICS_H_
