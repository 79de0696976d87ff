// SGD updates of dense parameters: plain fp32, and split-SGD for bf16 weights.
//
// Split-SGD (as in Intel's DLRM for bf16 training): an fp32 master weight w is
// stored as two 16-bit halves, `hi` = the upper 16 bits of w (a bf16 value,
// truncated, used as the weight by the bf16 matmuls) and `lo` = the lower 16
// bits. An update recombines them into the exact fp32 w, applies the fp32
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

// The fp32 value whose upper half is `hi` and lower half is `lo`.
inline float CombineSplit(uint16_t hi, uint16_t lo) {
  return std::bit_cast<float>((static_cast<uint32_t>(hi) << 16) | lo);
}
// The two halves of `w` (hi is `w` truncated to bf16).
inline void SplitFloat(float w, uint16_t& hi, uint16_t& lo) {
  const uint32_t bits = std::bit_cast<uint32_t>(w);
  hi = static_cast<uint16_t>(bits >> 16);
  lo = static_cast<uint16_t>(bits & 0xffffu);
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
