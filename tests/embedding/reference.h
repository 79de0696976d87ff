// Plain, obviously-correct reference implementations of the embedding
// kernels, computed from the bags directly (no update plan), in double.
#ifndef CEMB_TESTS_EMBEDDING_REFERENCE_H_
#define CEMB_TESTS_EMBEDDING_REFERENCE_H_

#include <cmath>
#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "embedding/bfloat16.h"
#include "embedding/types.h"

namespace cemb::reference {

// A dense copy of a table's rows, in double.
struct Rows {
  int64_t n = 0, d = 0;
  std::vector<double> v;
  double& at(int64_t r, int64_t c) { return v[r * d + c]; }
  double at(int64_t r, int64_t c) const { return v[r * d + c]; }
};

template <typename Table>
Rows Snapshot(const Table& t) {
  Rows rows{t.nvectors(), t.featuresize(), {}};
  rows.v.resize(rows.n * rows.d);
  [[maybe_unused]] const auto scope = ReadScopeOf(t);
  for (int64_t r = 0; r < rows.n; ++r) {
    const auto* p = t.rowpointer(r, Access::kRead);
    for (int64_t c = 0; c < rows.d; ++c) rows.at(r, c) = ToFloat(p[c]);
  }
  return rows;
}

// out[b] = s_b * sum_j w_j row(indices[j]).
template <typename Index>
std::vector<double> Pooled(const Rows& t, std::span<const Index> offsets, std::span<const Index> indices,
                           std::span<const float> weights, Pooling pooling) {
  const int64_t nbags = static_cast<int64_t>(offsets.size()) - 1;
  std::vector<double> out(nbags * t.d, 0.0);
  for (int64_t b = 0; b < nbags; ++b) {
    const int64_t len = offsets[b + 1] - offsets[b];
    for (int64_t j = offsets[b]; j < offsets[b + 1]; ++j) {
      const double w = weights.empty() ? 1.0 : weights[j];
      for (int64_t c = 0; c < t.d; ++c) out[b * t.d + c] += w * t.at(indices[j], c);
    }
    if (pooling == Pooling::kMean && len > 0) {
      for (int64_t c = 0; c < t.d; ++c) out[b * t.d + c] /= static_cast<double>(len);
    }
  }
  return out;
}

// The table gradient: for each touched row, the sum of its outputs'
// gradients times weight (and 1/len for mean).
template <typename Index>
std::map<int64_t, std::vector<double>> TableGradient(int64_t d, std::span<const Index> offsets,
                                                     std::span<const Index> indices, std::span<const float> weights,
                                                     Pooling pooling, const float* grad, int64_t ld) {
  std::map<int64_t, std::vector<double>> g;
  const int64_t nbags = static_cast<int64_t>(offsets.size()) - 1;
  for (int64_t b = 0; b < nbags; ++b) {
    const int64_t len = offsets[b + 1] - offsets[b];
    for (int64_t j = offsets[b]; j < offsets[b + 1]; ++j) {
      double s = weights.empty() ? 1.0 : weights[j];
      if (pooling == Pooling::kMean) s /= static_cast<double>(len);
      auto& row = g[indices[j]];
      row.resize(d, 0.0);
      for (int64_t c = 0; c < d; ++c) row[c] += s * grad[b * ld + c];
    }
  }
  return g;
}

inline void ApplySgd(Rows& t, const std::map<int64_t, std::vector<double>>& g, double lr) {
  for (const auto& [row, grad] : g) {
    for (int64_t c = 0; c < t.d; ++c) t.at(row, c) -= lr * grad[c];
  }
}

inline void ApplyAdagrad(Rows& t, std::vector<double>& state, const std::map<int64_t, std::vector<double>>& g,
                         double lr, double eps) {
  for (const auto& [row, grad] : g) {
    double squares = 0;
    for (double x : grad) squares += x * x;
    state[row] += squares / static_cast<double>(t.d);
    const double step = lr / (std::sqrt(state[row]) + eps);
    for (int64_t c = 0; c < t.d; ++c) t.at(row, c) -= step * grad[c];
  }
}

// Element-wise AdaGrad (FBGEMM's EXACT_ADAGRAD): state is [n x d], one
// accumulator per element.
inline void ApplyElementwiseAdagrad(Rows& t, Rows& state, const std::map<int64_t, std::vector<double>>& g, double lr,
                                    double eps) {
  for (const auto& [row, grad] : g) {
    for (int64_t c = 0; c < t.d; ++c) {
      state.at(row, c) += grad[c] * grad[c];
      t.at(row, c) -= lr * grad[c] / (std::sqrt(state.at(row, c)) + eps);
    }
  }
}

}  // namespace cemb::reference

#endif  // CEMB_TESTS_EMBEDDING_REFERENCE_H_
