#include "dlrm/dense_optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "absl/strings/str_cat.h"
#include "base/npy.h"
#include "base/parallel.h"
#include "base/status_macros.h"

namespace cemb::dlrm {

void SgdUpdate(std::span<float> w, std::span<const float> g, float lr) {
  float* __restrict wp = w.data();
  const float* __restrict gp = g.data();
  const size_t n = w.size();
#pragma omp simd
  for (size_t i = 0; i < n; ++i) wp[i] -= lr * gp[i];
}

void SplitSgdUpdate(std::span<uint16_t> hi, std::span<uint16_t> lo,
                    std::span<const float> g, float lr) {
  uint16_t* __restrict hp = hi.data();
  uint16_t* __restrict lp = lo.data();
  const float* __restrict gp = g.data();
  const size_t n = hi.size();
#pragma omp simd
  for (size_t i = 0; i < n; ++i) {
    float w = CombineSplit(hp[i], lp[i]);
    w -= lr * gp[i];
    SplitFloat(w, hp[i], lp[i]);
  }
}

void AdagradUpdate(std::span<float> w, std::span<float> s, std::span<const float> g, float lr, float eps) {
  float* __restrict wp = w.data();
  float* __restrict sp = s.data();
  const float* __restrict gp = g.data();
  const size_t n = w.size();
#pragma omp simd
  for (size_t i = 0; i < n; ++i) {
    sp[i] += gp[i] * gp[i];
    wp[i] -= lr * gp[i] / (std::sqrt(sp[i]) + eps);
  }
}

void SplitAdagradUpdate(std::span<uint16_t> hi, std::span<uint16_t> lo, std::span<float> s, std::span<const float> g,
                        float lr, float eps) {
  uint16_t* __restrict hp = hi.data();
  uint16_t* __restrict lp = lo.data();
  float* __restrict sp = s.data();
  const float* __restrict gp = g.data();
  const size_t n = hi.size();
#pragma omp simd
  for (size_t i = 0; i < n; ++i) {
    float w = CombineSplit(hp[i], lp[i]);
    sp[i] += gp[i] * gp[i];
    w -= lr * gp[i] / (std::sqrt(sp[i]) + eps);
    SplitFloat(w, hp[i], lp[i]);
  }
}

namespace {
// Elements per parallel_for item.
constexpr int64_t kChunk = int64_t{1} << 14;
}  // namespace

DenseOptimizer::DenseOptimizer(const DenseOptimizerOptions& options, std::span<const int64_t> sizes)
    : options_(options) {
  offsets_.push_back(0);
  const bool adagrad = options.kind == DenseOptimizerKind::kAdagrad;
  for (int64_t n : sizes) offsets_.push_back(offsets_.back() + (adagrad ? static_cast<size_t>(n) : 0));
  state_.assign(offsets_.back(), 0.0f);
}

std::span<float> DenseOptimizer::state(int i) {
  return std::span(state_).subspan(offsets_[i], offsets_[i + 1] - offsets_[i]);
}

std::span<const float> DenseOptimizer::state(int i) const {
  return std::span(state_).subspan(offsets_[i], offsets_[i + 1] - offsets_[i]);
}

void DenseOptimizer::Update(int i, std::span<float> w, std::span<const float> g, float lr) {
  const std::span<float> s = state(i);
  const float eps = options_.adagrad_eps;
  parallel_for_ranges(static_cast<int64_t>(w.size()), kChunk, [&](int64_t begin, int64_t end) {
    const auto len = static_cast<size_t>(end - begin);
    if (s.empty()) {
      SgdUpdate(w.subspan(begin, len), g.subspan(begin, len), lr);
    } else {
      AdagradUpdate(w.subspan(begin, len), s.subspan(begin, len), g.subspan(begin, len), lr, eps);
    }
  });
}

void DenseOptimizer::Update(int i, std::span<uint16_t> hi, std::span<uint16_t> lo, std::span<const float> g,
                            float lr) {
  const std::span<float> s = state(i);
  const float eps = options_.adagrad_eps;
  parallel_for_ranges(static_cast<int64_t>(hi.size()), kChunk, [&](int64_t begin, int64_t end) {
    const auto len = static_cast<size_t>(end - begin);
    if (s.empty()) {
      SplitSgdUpdate(hi.subspan(begin, len), lo.subspan(begin, len), g.subspan(begin, len), lr);
    } else {
      SplitAdagradUpdate(hi.subspan(begin, len), lo.subspan(begin, len), s.subspan(begin, len),
                         g.subspan(begin, len), lr, eps);
    }
  });
}

namespace {
std::string StateFile(const std::string& dir, const std::string& prefix, const ParameterInfo& p) {
  return absl::StrCat(dir, "/", prefix, p.name, ".adagrad.npy");
}
}  // namespace

absl::Status DenseOptimizer::SaveNpy(const std::string& dir, const std::string& prefix,
                                     std::span<const ParameterInfo> params) const {
  if (options_.kind != DenseOptimizerKind::kAdagrad) return absl::OkStatus();
  for (size_t i = 0; i < params.size(); ++i) {
    CEMB_RETURN_IF_ERROR(WriteNpy<float>(StateFile(dir, prefix, params[i]), state(static_cast<int>(i)), params[i].shape));
  }
  return absl::OkStatus();
}

absl::Status DenseOptimizer::LoadNpy(const std::string& dir, const std::string& prefix,
                                     std::span<const ParameterInfo> params) {
  if (options_.kind != DenseOptimizerKind::kAdagrad) return absl::OkStatus();
  std::vector<std::vector<float>> values(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    CEMB_RETURN_IF_ERROR(ReadNpyFloats(StateFile(dir, prefix, params[i]), params[i].shape, values[i]));
  }
  for (size_t i = 0; i < params.size(); ++i) std::ranges::copy(values[i], state(static_cast<int>(i)).begin());
  return absl::OkStatus();
}

}  // namespace cemb::dlrm
