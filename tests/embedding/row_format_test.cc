#include "embedding/row_format.h"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include "absl/strings/str_cat.h"
#include "embedding/bfloat16.h"
#include "embedding/float16.h"
#include "gtest/gtest.h"

namespace cemb {
namespace {

// --- float16 against F16C ----------------------------------------------------

bool HasF16c() { return __builtin_cpu_supports("f16c"); }

// The hardware's conversions (vcvtph2ps, vcvtps2ph round to nearest even),
// the independent references of float16's software ones.
__attribute__((target("f16c"))) float F16cToFloat(uint16_t h) { return _cvtsh_ss(h); }
__attribute__((target("f16c"))) uint16_t F16cFromFloat(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}

bool IsHalfNan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }

// FromFloat(f) equals the hardware's conversion; a NaN is a NaN of the same
// sign (the payload is not kept).
::testing::AssertionResult FromFloatMatchesF16c(float f) {
  const uint16_t got = float16::FromFloat(f), want = F16cFromFloat(f);
  if (IsHalfNan(want) ? IsHalfNan(got) && (got & 0x8000u) == (want & 0x8000u) : got == want) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "float " << f << " (bits 0x" << std::hex << std::bit_cast<uint32_t>(f)
                                       << "): FromFloat 0x" << got << ", F16C 0x" << want;
}

TEST(Float16, ToFloatOfEveryHalfEqualsF16c) {
  if (!HasF16c()) GTEST_SKIP() << "no F16C on this CPU";
  int nans = 0;
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const auto bits = static_cast<uint16_t>(h);
    const float got = float16::ToFloat(bits), want = F16cToFloat(bits);
    if (IsHalfNan(bits)) {
      ++nans;
      ASSERT_TRUE(std::isnan(got)) << "half 0x" << std::hex << h;
      ASSERT_TRUE(std::isnan(want)) << "half 0x" << std::hex << h;
      ASSERT_EQ(std::signbit(got), std::signbit(want)) << "half 0x" << std::hex << h;
    } else {
      ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want)) << "half 0x" << std::hex << h;
    }
    float16 x;
    x.bits = bits;
    ASSERT_EQ(std::bit_cast<uint32_t>(ToFloat(x)), std::bit_cast<uint32_t>(got));
  }
  EXPECT_EQ(nans, 2 * 1023);
}

TEST(Float16, ToFloatHandWrittenValues) {
  EXPECT_EQ(float16::ToFloat(0x0000), 0.0f);
  EXPECT_TRUE(std::signbit(float16::ToFloat(0x8000)));
  EXPECT_EQ(float16::ToFloat(0x3c00), 1.0f);
  EXPECT_EQ(float16::ToFloat(0xc000), -2.0f);
  EXPECT_EQ(float16::ToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(float16::ToFloat(0x0001), 0x1p-24f);  // the smallest subnormal
  EXPECT_EQ(float16::ToFloat(0x03ff), 1023 * 0x1p-24f);
  EXPECT_EQ(float16::ToFloat(0x0400), 0x1p-14f);  // the smallest normal
  EXPECT_EQ(float16::ToFloat(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(float16::ToFloat(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(float16::ToFloat(0x7e00)));
}

TEST(Float16, FromFloatOfRandomBitPatternsEqualsF16c) {
  if (!HasF16c()) GTEST_SKIP() << "no F16C on this CPU";
  constexpr uint64_t kSeed = 20240611;
  std::mt19937 rng(kSeed);
  for (int i = 0; i < 8'000'000; ++i) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    ASSERT_TRUE(FromFloatMatchesF16c(f)) << "seed " << kSeed << ", draw " << i;
  }
  // Random values in the half's range, where almost every bit pattern above lies outside it.
  std::uniform_int_distribution<uint32_t> in_range(0x33000000u, 0x47800000u);  // 2^-25 .. 2^16
  for (int i = 0; i < 4'000'000; ++i) {
    const uint32_t u = in_range(rng) | (static_cast<uint32_t>(rng() & 1) << 31);
    ASSERT_TRUE(FromFloatMatchesF16c(std::bit_cast<float>(u))) << "seed " << kSeed << ", draw " << i;
  }
}

// Every half, the fp32 values around it and around the midpoints to its
// neighbours (where rounding to nearest even decides), both signs.
TEST(Float16, FromFloatAroundEveryHalfAndEveryMidpointEqualsF16c) {
  if (!HasF16c()) GTEST_SKIP() << "no F16C on this CPU";
  for (uint32_t h = 0; h < 0x7c00u; ++h) {
    const float lo = float16::ToFloat(static_cast<uint16_t>(h));
    const float hi = h + 1 < 0x7c00u ? float16::ToFloat(static_cast<uint16_t>(h + 1)) : 65536.0f;
    const float mid = lo + (hi - lo) / 2;  // exact: a half and its neighbour differ in 11 bits
    for (float centre : {lo, mid}) {
      const uint32_t c = std::bit_cast<uint32_t>(centre);
      for (int k = -3; k <= 3; ++k) {
        if (c == 0 && k < 0) continue;
        const float f = std::bit_cast<float>(c + static_cast<uint32_t>(k));
        ASSERT_TRUE(FromFloatMatchesF16c(f)) << "half 0x" << std::hex << h << ", step " << std::dec << k;
        ASSERT_TRUE(FromFloatMatchesF16c(-f)) << "half 0x" << std::hex << h << ", step " << std::dec << k;
      }
    }
  }
}

TEST(Float16, FromFloatEdgesEqualF16cAndHandWrittenValues) {
  const float inf = std::numeric_limits<float>::infinity();
  // The overflow edge: 65504 is the largest half; up to 65520 (the midpoint
  // to the next binade's first value) rounds down to it, 65520 (a tie, to the
  // even, which is infinity) and above round to infinity.
  EXPECT_EQ(float16::FromFloat(65504.0f), 0x7bff);
  EXPECT_EQ(float16::FromFloat(65519.99f), 0x7bff);
  EXPECT_EQ(float16::FromFloat(std::nextafter(65520.0f, 0.0f)), 0x7bff);
  EXPECT_EQ(float16::FromFloat(65520.0f), 0x7c00);
  EXPECT_EQ(float16::FromFloat(-65520.0f), 0xfc00);
  EXPECT_EQ(float16::FromFloat(1e10f), 0x7c00);
  EXPECT_EQ(float16::FromFloat(std::numeric_limits<float>::max()), 0x7c00);
  EXPECT_EQ(float16::FromFloat(inf), 0x7c00);
  EXPECT_EQ(float16::FromFloat(-inf), 0xfc00);
  EXPECT_EQ(float16::FromFloat(0.0f), 0x0000);
  EXPECT_EQ(float16::FromFloat(-0.0f), 0x8000);
  EXPECT_EQ(float16::FromFloat(1.0f), 0x3c00);
  EXPECT_EQ(float16::FromFloat(1.0f + 0x1p-11f), 0x3c00);  // tie, to even (down)
  EXPECT_EQ(float16::FromFloat(1.0f + 3 * 0x1p-11f), 0x3c02);  // tie, to even (up)
  // Subnormals: multiples of 2^-24; half of the smallest is a tie to 0.
  EXPECT_EQ(float16::FromFloat(0x1p-24f), 0x0001);
  EXPECT_EQ(float16::FromFloat(0x1p-25f), 0x0000);
  EXPECT_EQ(float16::FromFloat(std::nextafter(0x1p-25f, 1.0f)), 0x0001);
  EXPECT_EQ(float16::FromFloat(-0x1p-25f), 0x8000);
  EXPECT_EQ(float16::FromFloat(1.5f * 0x1p-24f), 0x0002);  // tie, to even (up)
  EXPECT_EQ(float16::FromFloat(1023 * 0x1p-24f), 0x03ff);
  EXPECT_EQ(float16::FromFloat(1023.5f * 0x1p-24f), 0x0400);  // rounds up into the normals
  EXPECT_EQ(float16::FromFloat(0x1p-14f), 0x0400);
  EXPECT_EQ(float16::FromFloat(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(float16::FromFloat(std::numeric_limits<float>::min()), 0x0000);
  EXPECT_TRUE(IsHalfNan(float16::FromFloat(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(IsHalfNan(float16::FromFloat(-std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(IsHalfNan(float16::FromFloat(std::bit_cast<float>(0x7f800001u))));  // a signalling NaN, low payload
  EXPECT_TRUE(IsHalfNan(float16::FromFloat(std::bit_cast<float>(0xff801000u))));

  if (!HasF16c()) GTEST_SKIP() << "no F16C on this CPU: the hand-written values only";
  std::vector<float> edges = {65504.0f, 65519.99f, 65520.0f, 65536.0f, 1e10f, inf, -inf, 0.0f, -0.0f,
                              std::numeric_limits<float>::max(), std::numeric_limits<float>::min(),
                              std::numeric_limits<float>::denorm_min(), 0x1p-24f, 0x1p-25f, 0x1p-14f,
                              std::numeric_limits<float>::quiet_NaN(), std::bit_cast<float>(0x7f800001u),
                              std::bit_cast<float>(0xffbfffffu), std::bit_cast<float>(0x7fc00001u)};
  for (uint32_t u = 0x477fe000u; u <= 0x47800100u; ++u) edges.push_back(std::bit_cast<float>(u));  // 65504 .. past 65536
  for (uint32_t u = 0; u <= 0x00100000u; u += 0x101u) edges.push_back(std::bit_cast<float>(u));   // fp32 subnormals
  for (uint32_t u = 0x33000000u - 64; u <= 0x33800000u + 64; ++u) edges.push_back(std::bit_cast<float>(u));  // around 2^-25
  for (uint32_t u = 0x387fc000u; u <= 0x38804000u; ++u) edges.push_back(std::bit_cast<float>(u));  // around 2^-14
  for (float f : edges) {
    EXPECT_TRUE(FromFloatMatchesF16c(f));
    EXPECT_TRUE(FromFloatMatchesF16c(-f));
  }
}

TEST(Float16, RoundTripOfEveryHalfIsExact) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const auto bits = static_cast<uint16_t>(h);
    const uint16_t back = float16::FromFloat(float16::ToFloat(bits));
    if (IsHalfNan(bits)) {
      ASSERT_TRUE(IsHalfNan(back)) << std::hex << h;
    } else {
      ASSERT_EQ(back, bits) << std::hex << h;
    }
  }
}

// --- int8 row-wise against FBGEMM's definition --------------------------------

// FBGEMM's FloatOrHalfToFused8BitRowwiseQuantizedSBFloatRef for one fp32 row
// (src/QuantUtils.cc), transcribed: D bytes q, then float scale, float bias.
std::vector<std::byte> FbgemmFused8BitRowwise(std::span<const float> row) {
  constexpr float kEpsilon = 1e-8f;
  const size_t d = row.size();
  std::vector<std::byte> out(d + 2 * sizeof(float));
  const float minimum_element = *std::min_element(row.begin(), row.end());
  const float maximum_element = *std::max_element(row.begin(), row.end());
  const float range = maximum_element - minimum_element;
  const float scale = range / 255.0f;
  const float bias = minimum_element;
  const float inverse_scale = 255.0f / (range + kEpsilon);
  for (size_t col = 0; col < d; ++col) {
    const long q = std::lrintf((row[col] - minimum_element) * inverse_scale);
    out[col] = static_cast<std::byte>(static_cast<uint8_t>(q));
  }
  std::memcpy(out.data() + d, &scale, sizeof scale);
  std::memcpy(out.data() + d + sizeof scale, &bias, sizeof bias);
  return out;
}

// Rows of several kinds: uniform around zero, all negative, all positive and
// large, tiny, and a few exact values.
std::vector<std::vector<float>> TestRows(int64_t d, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<std::vector<float>> rows;
  for (int kind = 0; kind < 40; ++kind) {
    std::vector<float> r(static_cast<size_t>(d));
    for (float& x : r) {
      switch (kind % 5) {
        case 0: x = u(rng); break;
        case 1: x = -3.0f - 100.0f * std::abs(u(rng)); break;  // negative only
        case 2: x = 1000.0f + 5000.0f * u(rng); break;
        case 3: x = 1e-6f * u(rng); break;
        case 4: x = static_cast<float>(static_cast<int>(rng() % 9) - 4) * 0.25f; break;
      }
    }
    rows.push_back(std::move(r));
  }
  rows.push_back(std::vector<float>(static_cast<size_t>(d), 0.37f));   // constant: range 0
  rows.push_back(std::vector<float>(static_cast<size_t>(d), -2.5f));   // constant, negative
  rows.push_back(std::vector<float>(static_cast<size_t>(d), 0.0f));
  return rows;
}

TEST(RowFormat, Int8EncodeRowEqualsFbgemmByteForByteAndDecodeIsOneFma) {
  constexpr uint64_t kSeed = 7;
  for (int64_t d : {1, 3, 16, 64, 100, 256}) {
    for (const std::vector<float>& row : TestRows(d, kSeed + static_cast<uint64_t>(d))) {
      SCOPED_TRACE(absl::StrCat("dim ", d, ", seed ", kSeed, ", row[0] ", row[0]));
      const std::vector<std::byte> want = FbgemmFused8BitRowwise(row);
      ASSERT_EQ(static_cast<int64_t>(want.size()), RowFormatBytes(RowFormat::kInt8, d));
      std::vector<std::byte> got(want.size() + 16, std::byte{0xa5});  // sentinel bytes after the row
      EncodeRow(RowFormat::kInt8, row, got.data());
      ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size()), 0);
      for (size_t i = want.size(); i < got.size(); ++i) ASSERT_EQ(got[i], std::byte{0xa5}) << "byte " << i;

      float scale, bias;
      std::memcpy(&scale, want.data() + d, 4);
      std::memcpy(&bias, want.data() + d + 4, 4);
      float rs, rb;
      RowScaleBias(reinterpret_cast<const int8_rowwise*>(got.data()), d, &rs, &rb);
      EXPECT_EQ(std::bit_cast<uint32_t>(rs), std::bit_cast<uint32_t>(scale));
      EXPECT_EQ(std::bit_cast<uint32_t>(rb), std::bit_cast<uint32_t>(bias));
      std::vector<float> decoded(static_cast<size_t>(d) + 1, -777.0f);
      DecodeRow(RowFormat::kInt8, got.data(), std::span<float>(decoded.data(), static_cast<size_t>(d)));
      EXPECT_EQ(decoded.back(), -777.0f);
      const float max = *std::max_element(row.begin(), row.end());
      for (int64_t c = 0; c < d; ++c) {
        const float q = static_cast<float>(std::to_integer<uint8_t>(want[static_cast<size_t>(c)]));
        ASSERT_EQ(std::bit_cast<uint32_t>(decoded[static_cast<size_t>(c)]),
                  std::bit_cast<uint32_t>(std::fma(q, scale, bias)))
            << "column " << c;
        // Quantisation error: at most half a step, plus what FBGEMM's epsilon
        // takes off the top of a tiny range, plus rounding.
        const float range = max - bias;
        ASSERT_LE(std::abs(decoded[static_cast<size_t>(c)] - row[static_cast<size_t>(c)]),
                  0.5f * scale + range * (1e-8f / (range + 1e-8f)) + 1e-6f * std::max(std::abs(max), std::abs(bias)))
            << "column " << c;
      }
    }
  }
}

TEST(RowFormat, Int8HandWrittenRows) {
  // A constant row: range 0, scale 0, every q 0, and it decodes exactly.
  const std::vector<float> constant(5, -1.75f);
  std::vector<std::byte> out(13);
  EncodeRow(RowFormat::kInt8, constant, out.data());
  for (int c = 0; c < 5; ++c) EXPECT_EQ(out[c], std::byte{0});
  float scale, bias;
  RowScaleBias(reinterpret_cast<const int8_rowwise*>(out.data()), 5, &scale, &bias);
  EXPECT_EQ(scale, 0.0f);
  EXPECT_EQ(bias, -1.75f);
  std::vector<float> back(5);
  DecodeRow(RowFormat::kInt8, out.data(), back);
  EXPECT_EQ(back, constant);

  // min -> 0, max -> 255, the midpoint 127.5 to even (128).
  const std::vector<float> row = {-1.0f, 1.0f, 0.0f, 0.5f};
  std::vector<std::byte> q(12);
  EncodeRow(RowFormat::kInt8, row, q.data());
  EXPECT_EQ(std::to_integer<int>(q[0]), 0);
  EXPECT_EQ(std::to_integer<int>(q[1]), 255);
  EXPECT_EQ(std::to_integer<int>(q[2]), 128);
  EXPECT_EQ(std::to_integer<int>(q[3]), 191);  // 1.5 * 255 / 2 = 191.25
  RowScaleBias(reinterpret_cast<const int8_rowwise*>(q.data()), 4, &scale, &bias);
  EXPECT_EQ(scale, 2.0f / 255.0f);
  EXPECT_EQ(bias, -1.0f);
}

TEST(RowFormat, RowFormatBytesOfEachFormat) {
  for (int64_t d : {1, 3, 16, 64, 100, 1024}) {
    EXPECT_EQ(RowFormatBytes(RowFormat::kFp32, d), 4 * d);
    EXPECT_EQ(RowFormatBytes(RowFormat::kBf16, d), 2 * d);
    EXPECT_EQ(RowFormatBytes(RowFormat::kFp16, d), 2 * d);
    EXPECT_EQ(RowFormatBytes(RowFormat::kInt8, d), d + 8);
    EXPECT_EQ(RowFeatureBytes<float>(d), 4 * d);
    EXPECT_EQ(RowFeatureBytes<bfloat16>(d), 2 * d);
    EXPECT_EQ(RowFeatureBytes<float16>(d), 2 * d);
    EXPECT_EQ(RowFeatureBytes<int8_rowwise>(d), d + 8);
  }
  static_assert(kRowFormatOf<float> == RowFormat::kFp32 && kRowFormatOf<bfloat16> == RowFormat::kBf16 &&
                kRowFormatOf<float16> == RowFormat::kFp16 && kRowFormatOf<int8_rowwise> == RowFormat::kInt8);
  // The codes are in files: never renumbered.
  EXPECT_EQ(static_cast<uint32_t>(RowFormat::kFp32), 1u);
  EXPECT_EQ(static_cast<uint32_t>(RowFormat::kBf16), 2u);
  EXPECT_EQ(static_cast<uint32_t>(RowFormat::kFp16), 3u);
  EXPECT_EQ(static_cast<uint32_t>(RowFormat::kInt8), 4u);
  EXPECT_FALSE(IsRowFormatCode(0));
  EXPECT_FALSE(IsRowFormatCode(5));
  for (RowFormat f : {RowFormat::kFp32, RowFormat::kBf16, RowFormat::kFp16, RowFormat::kInt8}) {
    EXPECT_TRUE(IsRowFormatCode(static_cast<uint32_t>(f)));
    const RowFormat of = WithRowElement(f, []<typename T>() { return kRowFormatOf<T>; });
    EXPECT_EQ(of, f) << RowFormatName(f);
  }
  EXPECT_STREQ(RowFormatName(RowFormat::kInt8), "int8");
  EXPECT_STREQ(RowFormatName(RowFormat::kFp16), "fp16");
}

TEST(RowFormat, HalfFormatsEncodeAsTheirTypesAndDecodeInverts) {
  constexpr uint64_t kSeed = 11;
  for (int64_t d : {1, 3, 16, 64, 100, 256}) {
    for (std::vector<float> row : TestRows(d, kSeed + static_cast<uint64_t>(d))) {
      row[0] = d > 1 ? 70000.0f : row[0];  // past fp16's range: infinity in fp16, finite in bf16
      SCOPED_TRACE(absl::StrCat("dim ", d, ", seed ", kSeed));
      for (RowFormat f : {RowFormat::kBf16, RowFormat::kFp16, RowFormat::kFp32}) {
        SCOPED_TRACE(RowFormatName(f));
        const auto bytes = static_cast<size_t>(RowFormatBytes(f, d));
        std::vector<std::byte> out(bytes + 8, std::byte{0x5a});
        EncodeRow(f, row, out.data());
        for (size_t i = bytes; i < out.size(); ++i) ASSERT_EQ(out[i], std::byte{0x5a}) << "byte " << i;
        std::vector<float> back(static_cast<size_t>(d));
        DecodeRow(f, out.data(), back);
        for (int64_t c = 0; c < d; ++c) {
          const float x = row[static_cast<size_t>(c)];
          float want = x;
          if (f != RowFormat::kFp32) {
            const uint16_t bits = f == RowFormat::kBf16 ? bfloat16(x).bits : float16(x).bits;
            uint16_t stored;
            std::memcpy(&stored, out.data() + 2 * c, 2);
            ASSERT_EQ(stored, bits) << "column " << c << ", value " << x;
            want = f == RowFormat::kBf16 ? ToFloat(bfloat16(x)) : ToFloat(float16(x));
          }
          ASSERT_EQ(std::bit_cast<uint32_t>(back[static_cast<size_t>(c)]), std::bit_cast<uint32_t>(want))
              << "column " << c;
        }
        // Decode, encode again: the same bits (a decoded row is exactly representable).
        std::vector<std::byte> again(bytes);
        EncodeRow(f, back, again.data());
        ASSERT_EQ(std::memcmp(again.data(), out.data(), bytes), 0);
      }
    }
  }
}

}  // namespace
}  // namespace cemb
