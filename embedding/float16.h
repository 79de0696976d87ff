// float16: an IEEE 754 binary16 value (1 sign, 5 exponent, 10 mantissa
// bits). Storage only, for rows served in fp16 (embedding/row_format.h);
// all arithmetic happens in fp32. Conversion from fp32 rounds to nearest
// even, as F16C's vcvtps2ph does: values past 65504 become infinity, tiny
// ones subnormals or zero, NaN stays NaN.
#ifndef CEMB_EMBEDDING_FLOAT16_H_
#define CEMB_EMBEDDING_FLOAT16_H_

#include <bit>
#include <cstdint>

namespace cemb {

struct float16 {
  uint16_t bits = 0;

  float16() = default;
  explicit float16(float f) : bits(FromFloat(f)) {}
  explicit operator float() const { return ToFloat(bits); }

  static uint16_t FromFloat(float f) {
    const uint32_t x = std::bit_cast<uint32_t>(f);
    const uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t abs = x & 0x7fffffffu;
    if (abs >= 0x7f800000u) return static_cast<uint16_t>(sign | (abs > 0x7f800000u ? 0x7e00u : 0x7c00u));
    if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: rounds past 65504
    if (abs < 0x38800000u) {
      // Below 2^-14, a subnormal: adding 0.5 leaves the value's multiple
      // of 2^-24 (the subnormals' step) in the low mantissa bits, rounded
      // to nearest even by the fp32 addition itself.
      const float shifted = std::bit_cast<float>(abs) + 0.5f;
      return static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(shifted) - 0x3f000000u));
    }
    const uint32_t odd = (abs >> 13) & 1u;
    abs += 0xc8000fffu + odd;  // rebias the exponent (127 - 15) and round to nearest even
    return static_cast<uint16_t>(sign | (abs >> 13));
  }
  static float ToFloat(uint16_t h) {
    const uint32_t sign = uint32_t{h & 0x8000u} << 16;
    const uint32_t em = h & 0x7fffu;
    if (em >= 0x7c00u) return std::bit_cast<float>(sign | 0x7f800000u | ((em & 0x3ffu) << 13));
    if (em >= 0x0400u) return std::bit_cast<float>(sign | ((em << 13) + 0x38000000u));
    const float subnormal = static_cast<float>(em) * 0x1p-24f;  // exact
    return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(subnormal));
  }
  friend bool operator==(float16 a, float16 b) { return a.bits == b.bits; }
};
static_assert(sizeof(float16) == 2);

[[gnu::always_inline]] inline float ToFloat(float16 x) { return float16::ToFloat(x.bits); }

}  // namespace cemb

#endif  // CEMB_EMBEDDING_FLOAT16_H_
