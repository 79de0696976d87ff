// Updates of dense parameters (the MLPs' and the cross network's): SGD and
// Adagrad, on fp32 weights or on bf16 split weights.
//
// Split weights (as in Intel's DLRM for bf16 training): an fp32 master weight
// w is stored as two 16-bit halves, `hi` = w rounded to bf16 (used as the
// weight by the bf16 matmuls) and `lo` = the lower 16 bits of w. An update
// recombines them into the exact fp32 w, applies the fp32 update, and splits
// again, so the master value evolves bit for bit like an fp32 weight while
// the compute reads bf16 and no extra fp32 copy is kept.
//
// Adagrad is torch.optim.Adagrad's (no decay, zero initial accumulator):
//   s += g * g;   w -= lr * g / (sqrt(s) + eps)      (s: one fp32 per weight)
//
//   SgdUpdate(w, g, lr);                  // w[i] -= lr * g[i]
//   SplitSgdUpdate(hi, lo, g, lr);        // Combine(hi, lo) -= lr * g, then split
//
// The kernels are single-threaded range functions; DenseOptimizer runs them
// over a model part's parameters on the OpenMP threads and owns Adagrad's
// accumulators.
#ifndef CEMB_DLRM_DENSE_OPTIMIZER_H_
#define CEMB_DLRM_DENSE_OPTIMIZER_H_

#include <bit>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "base/enum_names.h"

namespace cemb::dlrm {

// The fp32 value that `hi` and `lo` (from SplitFloat) split.
inline float CombineSplit(uint16_t hi, uint16_t lo) {
  // hi was rounded up exactly when lo's top bit is set (see SplitFloat).
  const uint32_t top = static_cast<uint32_t>(hi) - (lo >> 15);
  return std::bit_cast<float>((top << 16) | lo);
}
// The two halves of `w`: `lo` is the lower 16 bits of w, `hi` is w rounded to
// the nearest bf16 (ties away from zero), not truncated: the bf16 matmuls
// then see weights without a bias toward zero (truncation shrinks every
// weight by half a bf16 ulp on average, 0.2-0.4%, the same sign in
// every layer). hi = upper half + (lo >= 0x8000), so CombineSplit recovers w
// exactly. A NaN becomes the quiet NaN of its sign (rounding would carry a
// NaN's payload into its sign bit).
inline void SplitFloat(float w, uint16_t& hi, uint16_t& lo) {
  uint32_t bits = std::bit_cast<uint32_t>(w);
  if ((bits & 0x7fffffffu) > 0x7f800000u) bits = (bits & 0x80000000u) | 0x7fc00000u;
  lo = static_cast<uint16_t>(bits & 0xffffu);
  hi = static_cast<uint16_t>((bits >> 16) + (lo >> 15));
}
// bf16 bits to fp32 (exact).
inline float Bf16ToFloat(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }
// fp32 to bf16 bits, rounded to nearest even (NaN stays NaN).
inline uint16_t FloatToBf16(float f) {
  uint32_t bits = std::bit_cast<uint32_t>(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

// w[i] -= lr * g[i] for every i.
// REQUIRES: w.size() == g.size().
void SgdUpdate(std::span<float> w, std::span<const float> g, float lr);

// For every i: w = CombineSplit(hi[i], lo[i]); w -= lr * g[i];
//              SplitFloat(w, hi[i], lo[i]).
// The recombined value equals SgdUpdate on the fp32 value, bit for bit.
// REQUIRES: hi.size() == lo.size() == g.size().
void SplitSgdUpdate(std::span<uint16_t> hi, std::span<uint16_t> lo,
                    std::span<const float> g, float lr);

// s[i] += g[i]^2; w[i] -= lr * g[i] / (sqrt(s[i]) + eps) for every i.
// REQUIRES: w.size() == s.size() == g.size().
void AdagradUpdate(std::span<float> w, std::span<float> s, std::span<const float> g, float lr, float eps);
// AdagradUpdate on CombineSplit(hi[i], lo[i]), split again.
void SplitAdagradUpdate(std::span<uint16_t> hi, std::span<uint16_t> lo, std::span<float> s, std::span<const float> g,
                        float lr, float eps);

// Name and shape of one parameter tensor, as a PyTorch state_dict has it
// (the model part's prefix left off: Mlp::Parameters, CrossNetwork::Parameters).
struct ParameterInfo {
  std::string name;
  std::vector<int64_t> shape;
};

enum class DenseOptimizerKind { kSgd, kAdagrad };
inline constexpr EnumName<DenseOptimizerKind> kDenseOptimizerNames[] = {{DenseOptimizerKind::kSgd, "sgd"},
                                                                        {DenseOptimizerKind::kAdagrad, "adagrad"}};
inline const char* DenseOptimizerName(DenseOptimizerKind k) { return NameOf(kDenseOptimizerNames, k); }

struct DenseOptimizerOptions {
  DenseOptimizerKind kind = DenseOptimizerKind::kSgd;
  float adagrad_eps = 1e-8f;
};

// The optimizer of one model part's parameters (given by their sizes, in
// the part's Parameters() order): stateless SGD, or Adagrad with its
// accumulators in one buffer. Update(i, ...) updates parameter i from its
// gradient, split over the OpenMP threads.
// Thread safety: one caller at a time.
class DenseOptimizer {
 public:
  DenseOptimizer() = default;
  DenseOptimizer(const DenseOptimizerOptions& options, std::span<const int64_t> sizes);

  const DenseOptimizerOptions& options() const { return options_; }
  void Update(int i, std::span<float> w, std::span<const float> g, float lr);
  void Update(int i, std::span<uint16_t> hi, std::span<uint16_t> lo, std::span<const float> g, float lr);

  // Parameter i's accumulators (Adagrad), empty for SGD.
  std::span<float> state(int i);
  std::span<const float> state(int i) const;
  // Adagrad: writes / reads every accumulator as "<dir>/<prefix><name>.adagrad.npy"
  // (the parameter's name and shape); SGD: nothing. Load checks every file
  // before it changes any accumulator; errors name the file.
  [[nodiscard]] absl::Status SaveNpy(const std::string& dir, const std::string& prefix,
                                     std::span<const ParameterInfo> params) const;
  [[nodiscard]] absl::Status LoadNpy(const std::string& dir, const std::string& prefix,
                                     std::span<const ParameterInfo> params);

 private:
  DenseOptimizerOptions options_;
  std::vector<size_t> offsets_;  // parameter i's accumulators: state_[offsets_[i], offsets_[i + 1])
  std::vector<float> state_;
};

}  // namespace cemb::dlrm

#endif  // CEMB_DLRM_DENSE_OPTIMIZER_H_
