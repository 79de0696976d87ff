// bfloat16: the upper 16 bits of an IEEE fp32 value. Storage only; all
// arithmetic happens in fp32. Conversion from fp32 rounds to nearest even
// (NaN stays NaN).
#ifndef CEMB_EMBEDDING_BFLOAT16_H_
#define CEMB_EMBEDDING_BFLOAT16_H_

#include <bit>
#include <cstdint>

namespace cemb {

struct bfloat16 {
  uint16_t bits = 0;

  bfloat16() = default;
  explicit bfloat16(float f) : bits(FromFloat(f)) {}
  explicit operator float() const { return std::bit_cast<float>(uint32_t{bits} << 16); }

  static uint16_t FromFloat(float f) {
    const uint32_t u = std::bit_cast<uint32_t>(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
    return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
  friend bool operator==(bfloat16 a, bfloat16 b) { return a.bits == b.bits; }
};
static_assert(sizeof(bfloat16) == 2);

// fp32 value of a stored element, for either storage type.
[[gnu::always_inline]] inline float ToFloat(float x) { return x; }
[[gnu::always_inline]] inline float ToFloat(bfloat16 x) { return static_cast<float>(x); }
// Stored element of an fp32 value (round to nearest even for bfloat16).
template <typename T>
[[gnu::always_inline]] inline T FromFloat(float x) {
  return T(x);
}

}  // namespace cemb

#endif  // CEMB_EMBEDDING_BFLOAT16_H_
