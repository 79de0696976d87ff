// SGD updates of dense parameters: plain fp32, and split-SGD for bf16 weights.
//
// Split-SGD (as in Intel's DLRM for bf16 training): an fp32 master weight w is
// stored as two 16-bit halves, `hi` = w rounded to bf16 (used as the weight
// by the bf16 matmuls) and `lo` = the lower 16 bits of w. An update recombines them into the exact fp32 w, applies the fp32
// update, and splits again, so the master value evolves bit for bit like an
// fp32 weight while the compute reads bf16 and no extra fp32 copy is kept.
//
//   SgdUpdate(w, g, lr);                  // w[i] -= lr * g[i]
//   SplitSgdUpdate(hi, lo, g, lr);        // Combine(hi, lo) -= lr * g, then split
//
// The kernels are single-threaded range functions; callers split the range.
#ifndef CEMB_DLRM_SGD_H_
#define CEMB_DLRM_SGD_H_

#include <bit>
#include <cstdint>
#include <span>

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

}  // namespace cemb::dlrm

#endif  // CEMB_DLRM_SGD_H_
