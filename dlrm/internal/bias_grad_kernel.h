// The bias-gradient block (bias_grad.h), written once for the compiler to
// vectorise: included by one translation unit per ISA.
#ifndef CEMB_DLRM_INTERNAL_BIAS_GRAD_KERNEL_H_
#define CEMB_DLRM_INTERNAL_BIAS_GRAD_KERNEL_H_

#include <bit>
#include <cstdint>
#include <type_traits>

#include "dlrm/internal/bias_grad.h"

namespace cemb::dlrm::internal {
namespace bias_grad_impl {

inline float Value(float v) { return v; }
inline float Value(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }
// y > 0 for a ReLU output: fp32 compare; bf16 as a signed 16-bit integer
// (sign clear and not zero), which is what the float compare gives.
inline bool Positive(float v) { return v > 0.f; }
inline bool Positive(uint16_t b) { return static_cast<int16_t>(b) > 0; }
// A value stored as T: fp32 as is, bf16 rounded to nearest even (a NaN stays
// a NaN), as dlrm/dense_optimizer.h's FloatToBf16.
template <typename T>
inline T Store(float v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    const uint32_t bits = std::bit_cast<uint32_t>(v);
    const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
    return static_cast<uint16_t>((bits & 0x7fffffffu) > 0x7f800000u ? (bits >> 16) | 0x40u : rounded);
  }
}

// kWidth > 0: the block is exactly kWidth columns wide (constant trip count,
// vectorised); 0: `width` columns. The sums add the unrounded values.
template <typename In, typename Y, typename Out, bool kRelu, int64_t kWidth>
inline void Rows(const BiasGradArgs& a, int64_t r0, int64_t r1, int64_t c0, int64_t width, float* sums) {
  const int64_t w = kWidth > 0 ? kWidth : width;
  float acc[kBiasGradCols] = {};
  for (int64_t r = r0; r < r1; ++r) {
    const In* g = static_cast<const In*>(a.g_in) + r * a.out + c0;
    if constexpr (kRelu) {
      const Y* y = static_cast<const Y*>(a.y) + r * a.out + c0;
      Out* o = static_cast<Out*>(a.g_out) + r * a.out + c0;
      for (int64_t c = 0; c < w; ++c) {
        const float v = Positive(y[c]) ? Value(g[c]) : 0.f;
        o[c] = Store<Out>(v);
        acc[c] += v;
      }
    } else {
      for (int64_t c = 0; c < w; ++c) acc[c] += Value(g[c]);
    }
  }
  for (int64_t c = 0; c < w; ++c) sums[c] = acc[c];
}

template <typename In, typename Y, typename Out, bool kRelu>
inline void Block(const BiasGradArgs& a, int64_t r0, int64_t r1, int64_t c0, int64_t c1, float* sums) {
  if (c1 - c0 == kBiasGradCols) {
    Rows<In, Y, Out, kRelu, kBiasGradCols>(a, r0, r1, c0, kBiasGradCols, sums);
  } else {
    Rows<In, Y, Out, kRelu, 0>(a, r0, r1, c0, c1 - c0, sums);
  }
}

inline void BiasGradBlockImpl(const BiasGradArgs& a, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                              float* sums) {
  using T = BiasGradType;
  const bool in16 = a.g_in_type == T::kBf16;
  if (a.g_out == nullptr) {
    in16 ? Block<uint16_t, uint16_t, uint16_t, false>(a, r0, r1, c0, c1, sums)
         : Block<float, float, float, false>(a, r0, r1, c0, c1, sums);
  } else if (in16) {
    Block<uint16_t, uint16_t, uint16_t, true>(a, r0, r1, c0, c1, sums);
  } else if (a.g_out_type == T::kFp32) {
    Block<float, float, float, true>(a, r0, r1, c0, c1, sums);
  } else if (a.y_type == T::kBf16) {
    Block<float, uint16_t, uint16_t, true>(a, r0, r1, c0, c1, sums);
  } else {
    Block<float, float, uint16_t, true>(a, r0, r1, c0, c1, sums);
  }
}

}  // namespace bias_grad_impl
}  // namespace cemb::dlrm::internal

#endif  // CEMB_DLRM_INTERNAL_BIAS_GRAD_KERNEL_H_
