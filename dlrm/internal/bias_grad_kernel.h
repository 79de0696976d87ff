// The bias-gradient block (bias_grad.h), written once for the compiler to
// vectorise: included by one translation unit per ISA.
#ifndef CEMB_DLRM_INTERNAL_BIAS_GRAD_KERNEL_H_
#define CEMB_DLRM_INTERNAL_BIAS_GRAD_KERNEL_H_

#include <bit>
#include <cstdint>

#include "dlrm/internal/bias_grad.h"

namespace cemb::dlrm::internal {
namespace bias_grad_impl {

inline float Value(float v) { return v; }
inline float Value(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }
// y > 0 for a ReLU output: fp32 compare; bf16 as a signed 16-bit integer
// (sign clear and not zero), which is what the float compare gives.
inline bool Positive(float v) { return v > 0.f; }
inline bool Positive(uint16_t b) { return static_cast<int16_t>(b) > 0; }

// kWidth > 0: the block is exactly kWidth columns wide (constant trip count,
// vectorised); 0: `width` columns.
template <typename T, bool kRelu, int64_t kWidth>
inline void Rows(const BiasGradArgs& a, int64_t r0, int64_t r1, int64_t c0, int64_t width, float* sums) {
  const int64_t w = kWidth > 0 ? kWidth : width;
  float acc[kBiasGradCols] = {};
  for (int64_t r = r0; r < r1; ++r) {
    const T* g = static_cast<const T*>(a.g_in) + r * a.out + c0;
    if constexpr (kRelu) {
      const T* y = static_cast<const T*>(a.y) + r * a.out + c0;
      T* o = static_cast<T*>(a.g_out) + r * a.out + c0;
      for (int64_t c = 0; c < w; ++c) {
        const T v = Positive(y[c]) ? g[c] : T{0};
        o[c] = v;
        acc[c] += Value(v);
      }
    } else {
      for (int64_t c = 0; c < w; ++c) acc[c] += Value(g[c]);
    }
  }
  for (int64_t c = 0; c < w; ++c) sums[c] = acc[c];
}

template <typename T, bool kRelu>
inline void Block(const BiasGradArgs& a, int64_t r0, int64_t r1, int64_t c0, int64_t c1, float* sums) {
  if (c1 - c0 == kBiasGradCols) {
    Rows<T, kRelu, kBiasGradCols>(a, r0, r1, c0, kBiasGradCols, sums);
  } else {
    Rows<T, kRelu, 0>(a, r0, r1, c0, c1 - c0, sums);
  }
}

inline void BiasGradBlockImpl(const BiasGradArgs& a, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                              float* sums) {
  const bool relu = a.g_out != nullptr;
  if (a.bf16) {
    relu ? Block<uint16_t, true>(a, r0, r1, c0, c1, sums) : Block<uint16_t, false>(a, r0, r1, c0, c1, sums);
  } else {
    relu ? Block<float, true>(a, r0, r1, c0, c1, sums) : Block<float, false>(a, r0, r1, c0, c1, sums);
  }
}

}  // namespace bias_grad_impl
}  // namespace cemb::dlrm::internal

#endif  // CEMB_DLRM_INTERNAL_BIAS_GRAD_KERNEL_H_
