// The dot-interaction kernels, compiled once per ISA: included only by
// interaction_generic.cc, interaction_avx2.cc and interaction_avx512.cc,
// whose flags differ. The
// code has internal linkage (anonymous namespace), so the linker can never
// merge an AVX-512 copy into the generic path. Not API.
#ifndef CEMB_DLRM_INTERNAL_INTERACTION_KERNEL_H_
#define CEMB_DLRM_INTERNAL_INTERACTION_KERNEL_H_

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "dlrm/internal/interaction_rows.h"

namespace cemb::dlrm::internal {
namespace {

constexpr int64_t kBlock = 16;  // pairs computed per vector block

// Sixteen floats as one GCC/Clang vector: one zmm register in the AVX-512
// build, two ymm in the AVX2 one, four xmm in the baseline one. Loaded and
// stored with memcpy (no alignment assumed); never passed to or returned
// from a function, so the baseline build has no ABI question (-Wpsabi).
typedef float V16 __attribute__((vector_size(64)));
// The backward's accumulators: one register wide. In the AVX2 build that is
// eight floats: a 64-byte vector there is two ymm per operation. Elsewhere
// sixteen (one zmm; four xmm). kAccumulators: the vectors of dX one pass over
// X accumulates (kGroup rows x kD / kLanes), so each x_j load serves kGroup
// rows. Measured (mlp_bench, bench/history/training-step.md): the AVX2 build gains up to
// 64 (D = 16: 2.9 -> 1.0 ms, D = 64: 0.94 -> 0.62 ms for a batch; beyond
// 16 ymm they live in L1), the AVX-512 build nothing beyond 4.
#if defined(__AVX2__) && !defined(__AVX512F__)
constexpr int kLanes = 8;
constexpr int kAccumulators = 64;
#else
constexpr int kLanes = 16;
constexpr int kAccumulators = 4;
#endif
typedef float VL __attribute__((vector_size(kLanes * 4)));

// Copies sample b's F features into x [F x D] (contiguous).
template <int kD>
inline void GatherFeatures(const DotRowsArgs& a, int64_t b, int64_t D, float* __restrict x) {
  std::memcpy(x, a.dense + b * a.dense_ld, static_cast<size_t>(D) * sizeof(float));
  if (a.features > 1) {
    std::memcpy(x + D, a.sparse + b * a.sparse_ld, static_cast<size_t>((a.features - 1) * D) * sizeof(float));
  }
}

// Forward for a compile-time D >= 32: each pair's dot product vectorised
// over D, then summed across the lanes; no transpose. (With D = 16 a pair is
// one vector and the lane sums would dominate: the blocked kernel below wins.)
template <int kD>
void DotForwardRowsDirect(const DotRowsArgs& a, int64_t begin, int64_t end, float* scratch) {
  constexpr int kV = kD / 16;
  const int64_t F = a.features, self = a.self ? 1 : 0;
  float* __restrict x = scratch;
  for (int64_t b = begin; b < end; ++b) {
    GatherFeatures<kD>(a, b, kD, x);
    float* __restrict out = a.out + b * a.out_ld;
    std::memcpy(out, x, kD * sizeof(float));
    float* __restrict z = out + kD;
    for (int64_t i = 0; i < F; ++i) {
      const float* __restrict xi = x + i * kD;
      for (int64_t j = 0; j < i + self; ++j) {
        const float* __restrict xj = x + j * kD;
        V16 acc = {};
        for (int v = 0; v < kV; ++v) {
          V16 p, q;
          __builtin_memcpy(&p, xi + 16 * v, sizeof p);
          __builtin_memcpy(&q, xj + 16 * v, sizeof q);
          acc += p * q;
        }
        typedef float V8 __attribute__((vector_size(32)));
        typedef float V4 __attribute__((vector_size(16)));
        const V8 s8 = __builtin_shufflevector(acc, acc, 0, 1, 2, 3, 4, 5, 6, 7) +
                      __builtin_shufflevector(acc, acc, 8, 9, 10, 11, 12, 13, 14, 15);
        const V4 s4 = __builtin_shufflevector(s8, s8, 0, 1, 2, 3) + __builtin_shufflevector(s8, s8, 4, 5, 6, 7);
        *z++ = (s4[0] + s4[2]) + (s4[1] + s4[3]);
      }
    }
  }
}

// out row = [x0, Z[i][j] for j < i (+1 with self)].
// Scratch: xt [D x Fpad] (X transposed, zero padded), then x [F x D].
// kD > 0: the feature size as a compile-time constant (loops over D unroll);
// kD == 0: a.dim at run time.
template <int kD>
void DotForwardRowsT(const DotRowsArgs& a, int64_t begin, int64_t end, float* scratch) {
  const int64_t F = a.features, D = kD > 0 ? kD : a.dim, self = a.self ? 1 : 0;
  const int64_t fpad = (F + kBlock - 1) / kBlock * kBlock;
  const int64_t width = D + (a.self ? F * (F + 1) / 2 : F * (F - 1) / 2);
  float* __restrict xt = scratch;
  float* __restrict x = scratch + D * fpad;
  std::fill(xt, xt + D * fpad, 0.f);
  for (int64_t b = begin; b < end; ++b) {
    GatherFeatures<kD>(a, b, D, x);
#if defined(__AVX512F__)
    if constexpr (kD > 0) {
      // Sixteen features of one column per gather, stored as whole vectors
      // (scalar stores read back by vector loads stall store forwarding).
      const __m512i index = _mm512_mullo_epi32(
          _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(kD));
      for (int64_t jb = 0; jb < fpad; jb += kBlock) {
        const int64_t lanes = std::min<int64_t>(kBlock, F - jb);
        const __mmask16 mask = static_cast<__mmask16>((1u << lanes) - 1);
        for (int64_t d = 0; d < kD; ++d) {
          const __m512 column = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), mask, index, x + jb * kD + d, 4);
          _mm512_storeu_ps(xt + d * fpad + jb, column);
        }
      }
    } else
#endif
    {
      // Row by row, so that the rows read back first were written first.
      for (int64_t d = 0; d < D; ++d) {
        for (int64_t f = 0; f < F; ++f) xt[d * fpad + f] = x[f * D + d];
      }
    }
    float* __restrict out = a.out + b * a.out_ld;
    std::memcpy(out, x, static_cast<size_t>(D) * sizeof(float));
    int64_t pos = D;  // where row i of Z starts in out
    for (int64_t i = 0; i < F; ++i) {
      const int64_t jn = i + self;  // pairs (i, j), j < jn
      const float* __restrict xi = x + i * D;
      for (int64_t jb = 0; jb < jn; jb += kBlock) {
        V16 acc = {};
        for (int64_t d = 0; d < D; ++d) {
          V16 col;
          __builtin_memcpy(&col, xt + d * fpad + jb, sizeof col);
          acc += xi[d] * col;
        }
        // A whole block may run past row i into the rows that follow (they
        // are written later, in order); only the end of the output row
        // bounds it.
        float* __restrict z = out + pos + jb;
        if (pos + jb + kBlock <= width) {
          __builtin_memcpy(z, &acc, sizeof acc);
        } else {
          const int64_t n = std::min(kBlock, jn - jb);
          for (int64_t jj = 0; jj < n; ++jj) z[jj] = acc[jj];
        }
      }
      pos += jn;
    }
  }
}

// dX[i] = sum_j S[i][j] X[j], with S = G + G^T read straight from the pair
// gradients g: G[i][j] (j < i, or j <= i with self) is at g + row(i) + j.
// Scratch: x [F x D], acc [D] (for a run-time D). A compile-time D (a
// multiple of 16) accumulates kGroup rows of dX at a time (kAccumulators
// vectors: independent FMA chains, and each x_j load serves them all).
template <int kD>
void DotBackwardRowsT(const DotRowsArgs& a, int64_t begin, int64_t end, float* scratch) {
  static_assert(kD % 16 == 0);
  const int64_t F = a.features, D = kD > 0 ? kD : a.dim;
  const bool self = a.self;
  auto row = [self](int64_t k) { return k * (k - 1 + (self ? 2 : 0)) / 2; };
  float* __restrict x = scratch;
  float* __restrict acc_scratch = scratch + F * D;
  for (int64_t b = begin; b < end; ++b) {
    GatherFeatures<kD>(a, b, D, x);
    const float* __restrict dout = a.d_out + b * a.d_out_ld;
    const float* __restrict g = dout + D;
    auto coefficient = [&](int64_t i, int64_t j) {  // S[i][j]
      return j < i ? g[row(i) + j] : j == i ? (self ? 2.f * g[row(i) + i] : 0.f) : g[row(j) + i];
    };
    auto destination = [&](int64_t i) {
      return i == 0 ? a.d_dense + b * a.d_dense_ld : a.d_sparse + b * a.d_sparse_ld + (i - 1) * D;
    };
    if constexpr (kD > 0) {
      constexpr int kV = kD / kLanes;
      constexpr int kGroup = kV >= kAccumulators ? 1 : kAccumulators / kV;
      for (int64_t i0 = 0; i0 < F; i0 += kGroup) {
        const int64_t gn = std::min<int64_t>(kGroup, F - i0);
        VL acc[kGroup][kV] = {};
        for (int64_t j = 0; j < F; ++j) {
          VL xv[kV];
          __builtin_memcpy(xv, x + j * kD, sizeof xv);
          for (int k = 0; k < kGroup; ++k) {
            const float s = k < gn ? coefficient(i0 + k, j) : 0.f;
            for (int v = 0; v < kV; ++v) acc[k][v] += s * xv[v];
          }
        }
        if (i0 == 0) {  // dX[0] also gets the pass-through gradient of x0
          VL dv[kV];
          __builtin_memcpy(dv, dout, sizeof dv);
          for (int v = 0; v < kV; ++v) acc[0][v] += dv[v];
        }
        for (int k = 0; k < gn; ++k) __builtin_memcpy(destination(i0 + k), acc[k], sizeof acc[k]);
      }
    } else {
      for (int64_t i = 0; i < F; ++i) {
        float* __restrict acc = acc_scratch;
        for (int64_t d = 0; d < D; ++d) acc[d] = 0.f;
        for (int64_t j = 0; j < F; ++j) {
          const float s = coefficient(i, j);
          const float* __restrict xj = x + j * D;
          for (int64_t d = 0; d < D; ++d) acc[d] += s * xj[d];
        }
        if (i == 0) {
          for (int64_t d = 0; d < D; ++d) acc[d] += dout[d];
        }
        float* __restrict dst = destination(i);
        for (int64_t d = 0; d < D; ++d) dst[d] = acc[d];
      }
    }
  }
}

// Dispatch on the feature size: specialised for the common DLRM widths.
#define CEMB_DOT_DISPATCH(fn, a, begin, end, scratch) \
  switch ((a).dim) {                                  \
    case 16:                                          \
      return fn<16>(a, begin, end, scratch);          \
    case 32:                                          \
      return fn<32>(a, begin, end, scratch);          \
    case 64:                                          \
      return fn<64>(a, begin, end, scratch);          \
    case 128:                                         \
      return fn<128>(a, begin, end, scratch);         \
    default:                                          \
      return fn<0>(a, begin, end, scratch);           \
  }

void DotForwardRowsImpl(const DotRowsArgs& a, int64_t begin, int64_t end, float* scratch) {
  switch (a.dim) {
    case 16:
      return DotForwardRowsT<16>(a, begin, end, scratch);
    case 32:
      return DotForwardRowsDirect<32>(a, begin, end, scratch);
    case 64:
      return DotForwardRowsDirect<64>(a, begin, end, scratch);
    case 128:
      return DotForwardRowsDirect<128>(a, begin, end, scratch);
    default:
      return DotForwardRowsT<0>(a, begin, end, scratch);
  }
}
void DotBackwardRowsImpl(const DotRowsArgs& a, int64_t begin, int64_t end, float* scratch) {
  CEMB_DOT_DISPATCH(DotBackwardRowsT, a, begin, end, scratch);
}
#undef CEMB_DOT_DISPATCH

}  // namespace
}  // namespace cemb::dlrm::internal

#endif  // CEMB_DLRM_INTERNAL_INTERACTION_KERNEL_H_
