// Per-ISA vector primitives for the kernels: fp32 vectors loaded from and
// stored to float or bfloat16 rows, and loaded from the served-only rows
// (float16; int8_rowwise: the bytes q as fp32, before the row's scale and
// bias, which the kernels' RowReader applies). Included only by the ISA translation
// units (cmake/kernels_isa.cc.in), each compiled with its own -m flags.
#ifndef CEMB_EMBEDDING_INTERNAL_SIMD_H_
#define CEMB_EMBEDDING_INTERNAL_SIMD_H_

#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "embedding/bfloat16.h"
#include "embedding/row_format.h"

#if defined(__AVX2__)
#include <xsimd/xsimd.hpp>
#endif

namespace cemb::internal {

// The generic path: plain C++, one lane.
struct ScalarArch {
  static constexpr const char* name() { return "generic"; }
};

template <typename A>
struct Simd;

template <>
struct Simd<ScalarArch> {
  using F = float;
  static constexpr int kWidth = 1;
  static constexpr int kMaxAccumulators = 8;
  static F zero() { return 0.0f; }
  static F broadcast(float x) { return x; }
  static F load(const float* p) { return *p; }
  static F load(const bfloat16* p) { return ToFloat(*p); }
  static F load(const float16* p) { return ToFloat(*p); }
  static F load(const int8_rowwise* p) { return static_cast<float>(p->q); }
  static void store(float* p, F v) { *p = v; }
  static void store(bfloat16* p, F v) { *p = bfloat16(v); }
  static void stream(float* p, F v) { *p = v; }
  static void stream(bfloat16* p, F v) { *p = bfloat16(v); }
  static F fma(F a, F b, F c) { return a * b + c; }
  static F fnma(F a, F b, F c) { return c - a * b; }
  static F sqrt(F v) { return std::sqrt(v); }
  static float sum(F v) { return v; }
  static void fence() {}
};

#if defined(__AVX2__)

// AVX2 + FMA (8 lanes) and AVX-512 (16 lanes) through xsimd; the bfloat16
// conversions and streaming stores through intrinsics.
template <typename A>
struct Simd {
  using F = xsimd::batch<float, A>;
  static constexpr int kWidth = static_cast<int>(F::size);
  // Accumulators a kernel may keep in registers: 16 of 32 zmm, 8 of 16 ymm
  // (the rest hold loaded rows, weights and addresses).
  static constexpr int kMaxAccumulators = kWidth == 16 ? 16 : 8;

  [[gnu::always_inline]] static F zero() { return F(0.0f); }
  [[gnu::always_inline]] static F broadcast(float x) { return F(x); }
  [[gnu::always_inline]] static F load(const float* p) { return F::load_unaligned(p); }
  [[gnu::always_inline]] static F load(const bfloat16* p) {
#if defined(__AVX512F__)
    if constexpr (kWidth == 16) {
      const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
      return F(_mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
    }
#endif
    if constexpr (kWidth == 8) {
      const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
      return F(_mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
    }
  }
  // F16C's vcvtph2ps (every AVX2 and AVX-512 CPU has it; IsaAvailable checks).
  [[gnu::always_inline]] static F load(const float16* p) {
#if defined(__AVX512F__)
    if constexpr (kWidth == 16) return F(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))));
#endif
    if constexpr (kWidth == 8) return F(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  [[gnu::always_inline]] static F load(const int8_rowwise* p) {
#if defined(__AVX512F__)
    if constexpr (kWidth == 16) {
      return F(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))));
    }
#endif
    if constexpr (kWidth == 8) {
      return F(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)))));
    }
  }
  [[gnu::always_inline]] static void store(float* p, F v) { v.store_unaligned(p); }
  [[gnu::always_inline]] static void stream(float* p, F v) {
#if defined(__AVX512F__)
    if constexpr (kWidth == 16) _mm512_stream_ps(p, v);
#endif
    if constexpr (kWidth == 8) _mm256_stream_ps(p, v);
  }
  [[gnu::always_inline]] static void store(bfloat16* p, F v) { StoreBf16<false>(p, v); }
  [[gnu::always_inline]] static void stream(bfloat16* p, F v) { StoreBf16<true>(p, v); }
  // One rounding, at every optimisation level: xsimd 8.1 has no AVX-512
  // fma (its generic one is a * b + c, fused only where the compiler
  // contracts it: -O2 and up), so the intrinsics say it.
  [[gnu::always_inline]] static F fma(F a, F b, F c) {
#if defined(__AVX512F__)
    if constexpr (kWidth == 16) return F(_mm512_fmadd_ps(a, b, c));
#endif
    if constexpr (kWidth == 8) return F(_mm256_fmadd_ps(a, b, c));
  }
  [[gnu::always_inline]] static F fnma(F a, F b, F c) {  // c - a * b
#if defined(__AVX512F__)
    if constexpr (kWidth == 16) return F(_mm512_fnmadd_ps(a, b, c));
#endif
    if constexpr (kWidth == 8) return F(_mm256_fnmadd_ps(a, b, c));
  }
  [[gnu::always_inline]] static F sqrt(F v) { return xsimd::sqrt(v); }
  [[gnu::always_inline]] static float sum(F v) { return xsimd::hadd(v); }
  static void fence() { _mm_sfence(); }

 private:
  // Round to nearest even: add 0x7fff plus the lowest kept bit, keep the top
  // half. (NaN payloads may change; embedding rows hold no NaN.)
  template <bool kStream>
  [[gnu::always_inline]] static void StoreBf16(bfloat16* p, F v) {
#if defined(__AVX512F__)
    if constexpr (kWidth == 16) {
      __m512i u = _mm512_castps_si512(v);
      const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
      u = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
      const __m256i h = _mm512_cvtepi32_epi16(u);
      if constexpr (kStream) {
        _mm256_stream_si256(reinterpret_cast<__m256i*>(p), h);
      } else {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), h);
      }
    }
#endif
    if constexpr (kWidth == 8) {
      __m256i u = _mm256_castps_si256(v);
      const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
      u = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
      // packus works within 128-bit lanes: [a0..a3 a0..a3 | a4..a7 a4..a7].
      const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(u, u), 0b1000);
      const __m128i h = _mm256_castsi256_si128(packed);
      if constexpr (kStream) {
        _mm_stream_si128(reinterpret_cast<__m128i*>(p), h);
      } else {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(p), h);
      }
    }
  }
};

#endif  // __AVX2__

// Prefetches every cache line of a row of `bytes` bytes into L1.
[[gnu::always_inline]] inline void PrefetchRow(const void* row, int64_t bytes) {
  const char* p = static_cast<const char*>(row);
  for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(p + off, 0, 3);
  if (bytes % 64 != 0) __builtin_prefetch(p + bytes - 1, 0, 3);  // an unaligned row's last line
}

}  // namespace cemb::internal

#endif  // CEMB_EMBEDDING_INTERNAL_SIMD_H_
