// RowFormat: how a served table's rows are stored. A served table is read,
// never trained, so its rows need not be fp32 (docs/serving.md, "Smaller
// rows for serving"):
//
//   format  a row of D features                                   bytes
//   fp32    D float                                               4 D
//   bf16    D bfloat16 (fp32 rounded to nearest even)             2 D
//   fp16    D float16 (IEEE binary16, rounded to nearest even)    2 D
//   int8    FBGEMM's 8-bit row-wise layout ("fused"): D uint8     D + 8
//           q, then the row's fp32 scale and bias;
//           feature c = fma(q[c], scale, bias)
//
// int8 is FBGEMM's FloatOrHalfToFused8BitRowwiseQuantizedSBFloat: over a
// row, bias = min, scale = (max - min) / 255, q = lrintf((x - min) * 255 /
// (max - min + 1e-8)) (tests/embedding/row_format_test.cc holds a
// reference written from that definition). The decoded value is one fused
// multiply-add, as the kernels compute it.
//
// Each format has an element type the kernels are compiled for (a row's
// pointer is a pointer to its first element): float, bfloat16, float16 and
// int8_rowwise (one byte of an int8 row; the scale and bias follow the D
// bytes). EncodeRow and DecodeRow are the one definition of each
// conversion: the converter (serve/convert.h) writes rows with EncodeRow,
// and tests decode them with DecodeRow to check the kernels.
#ifndef CEMB_EMBEDDING_ROW_FORMAT_H_
#define CEMB_EMBEDDING_ROW_FORMAT_H_

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <utility>

#include "base/enum_names.h"
#include "embedding/bfloat16.h"
#include "embedding/float16.h"

namespace cemb {

// The codes are stored in files (ssd snapshots' headers): never renumber.
enum class RowFormat : uint32_t { kFp32 = 1, kBf16 = 2, kFp16 = 3, kInt8 = 4 };
inline constexpr EnumName<RowFormat> kRowFormatNames[] = {
    {RowFormat::kFp32, "fp32"}, {RowFormat::kBf16, "bf16"}, {RowFormat::kFp16, "fp16"}, {RowFormat::kInt8, "int8"}};
inline const char* RowFormatName(RowFormat f) { return NameOf(kRowFormatNames, f); }
inline bool IsRowFormatCode(uint32_t code) { return code >= 1 && code <= 4; }

// One byte of an int8 row: q, whose value is fma(q, scale, bias) with the
// row's scale and bias (RowScaleBias).
struct int8_rowwise {
  uint8_t q = 0;
};
static_assert(sizeof(int8_rowwise) == 1);

// The element types of rows a kernel reads: the trainable ones (float,
// bfloat16) and the served-only ones.
template <typename T>
concept RowElement = std::same_as<T, float> || std::same_as<T, bfloat16> || std::same_as<T, float16> ||
                     std::same_as<T, int8_rowwise>;

template <RowElement T>
inline constexpr RowFormat kRowFormatOf = std::same_as<T, float>      ? RowFormat::kFp32
                                          : std::same_as<T, bfloat16> ? RowFormat::kBf16
                                          : std::same_as<T, float16>  ? RowFormat::kFp16
                                                                      : RowFormat::kInt8;

// The bytes of a row of `dim` features (no optimizer state).
constexpr int64_t RowFormatBytes(RowFormat format, int64_t dim) {
  switch (format) {
    case RowFormat::kFp32: return 4 * dim;
    case RowFormat::kBf16:
    case RowFormat::kFp16: return 2 * dim;
    case RowFormat::kInt8: return dim + 8;
  }
  return 0;
}
template <RowElement T>
constexpr int64_t RowFeatureBytes(int64_t dim) {
  return RowFormatBytes(kRowFormatOf<T>, dim);
}

// An int8 row's scale and bias (after its `dim` bytes; unaligned).
[[gnu::always_inline]] inline void RowScaleBias(const int8_rowwise* row, int64_t dim, float* scale, float* bias) {
  std::memcpy(scale, row + dim, sizeof(float));
  std::memcpy(bias, row + dim + sizeof(float), sizeof(float));
}

// out (RowFormatBytes(format, in.size()) bytes) = the row `in` in `format`.
void EncodeRow(RowFormat format, std::span<const float> in, std::byte* out);
// out = the features of the row at `in` (out.size() of them) in `format`.
void DecodeRow(RowFormat format, const std::byte* in, std::span<float> out);

// X(T) for every element type, the one list of them (the kernels compiled
// for served rows, ssd/resolved_kernels_<isa>.cc, follow it).
#define CEMB_FOR_EACH_ROW_ELEMENT(X) \
  X(float)                           \
  X(::cemb::bfloat16)                \
  X(::cemb::float16)                 \
  X(::cemb::int8_rowwise)

// f.template operator()<T>() for the element type T of `format`: the one
// run-time switch from a format to its compile-time type.
template <typename F>
decltype(auto) WithRowElement(RowFormat format, F&& f) {
  switch (format) {
    case RowFormat::kBf16: return std::forward<F>(f).template operator()<bfloat16>();
    case RowFormat::kFp16: return std::forward<F>(f).template operator()<float16>();
    case RowFormat::kInt8: return std::forward<F>(f).template operator()<int8_rowwise>();
    case RowFormat::kFp32: break;
  }
  return std::forward<F>(f).template operator()<float>();
}

}  // namespace cemb

#endif  // CEMB_EMBEDDING_ROW_FORMAT_H_
