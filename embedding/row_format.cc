#include "embedding/row_format.h"

#include <algorithm>
#include <cmath>

namespace cemb {

void EncodeRow(RowFormat format, std::span<const float> in, std::byte* out) {
  const size_t d = in.size();
  switch (format) {
    case RowFormat::kFp32:
      std::memcpy(out, in.data(), d * sizeof(float));
      return;
    case RowFormat::kBf16:
      for (size_t c = 0; c < d; ++c) {
        const uint16_t bits = bfloat16::FromFloat(in[c]);
        std::memcpy(out + 2 * c, &bits, 2);
      }
      return;
    case RowFormat::kFp16:
      for (size_t c = 0; c < d; ++c) {
        const uint16_t bits = float16::FromFloat(in[c]);
        std::memcpy(out + 2 * c, &bits, 2);
      }
      return;
    case RowFormat::kInt8: {
      if (d == 0) return;
      constexpr float kEpsilon = 1e-8f;  // FBGEMM's
      const auto [lo, hi] = std::minmax_element(in.begin(), in.end());
      const float min = *lo, range = *hi - *lo;
      const float scale = range / 255.0f, inverse_scale = 255.0f / (range + kEpsilon);
      for (size_t c = 0; c < d; ++c) out[c] = static_cast<std::byte>(std::lrintf((in[c] - min) * inverse_scale));
      std::memcpy(out + d, &scale, sizeof scale);
      std::memcpy(out + d + sizeof scale, &min, sizeof min);
      return;
    }
  }
}

void DecodeRow(RowFormat format, const std::byte* in, std::span<float> out) {
  const size_t d = out.size();
  switch (format) {
    case RowFormat::kFp32:
      std::memcpy(out.data(), in, d * sizeof(float));
      return;
    case RowFormat::kBf16:
    case RowFormat::kFp16:
      for (size_t c = 0; c < d; ++c) {
        uint16_t bits;
        std::memcpy(&bits, in + 2 * c, 2);
        out[c] = format == RowFormat::kBf16 ? std::bit_cast<float>(uint32_t{bits} << 16) : float16::ToFloat(bits);
      }
      return;
    case RowFormat::kInt8: {
      float scale, bias;
      RowScaleBias(reinterpret_cast<const int8_rowwise*>(in), static_cast<int64_t>(d), &scale, &bias);
      for (size_t c = 0; c < d; ++c) out[c] = std::fma(static_cast<float>(std::to_integer<uint8_t>(in[c])), scale, bias);
      return;
    }
  }
}

}  // namespace cemb
