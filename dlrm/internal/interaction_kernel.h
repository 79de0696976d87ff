// The dot-interaction kernels, compiled once per ISA: included only by
// interaction_generic.cc and interaction_avx512.cc, whose flags differ. The
// code has internal linkage (anonymous namespace), so the linker can never
// merge an AVX-512 copy into the generic path. Not API.
#ifndef CEMB_DLRM_INTERNAL_INTERACTION_KERNEL_H_
#define CEMB_DLRM_INTERNAL_INTERACTION_KERNEL_H_

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "dlrm/internal/interaction_rows.h"

namespace cemb::dlrm::internal {
namespace {

constexpr int64_t kBlock = 16;  // pairs computed per vector block

inline const float* Feature(const DotRowsArgs& a, int64_t b, int64_t f) {
  return f == 0 ? a.dense + b * a.dense_ld : a.sparse + b * a.sparse_ld + (f - 1) * a.dim;
}

// out row = [x0, Z[i][j] for j < i (+1 with self)]. Scratch: xt [D x Fpad].
// kD > 0: the feature size as a compile-time constant (accumulators stay in
// registers, loops over D unroll); kD == 0: a.dim at run time.
template <int kD>
void DotForwardRowsT(const DotRowsArgs& a, int64_t begin, int64_t end, float* scratch) {
  const int64_t F = a.features, D = kD > 0 ? kD : a.dim, self = a.self ? 1 : 0;
  const int64_t fpad = (F + kBlock - 1) / kBlock * kBlock;
  float* __restrict xt = scratch;
  std::fill(xt, xt + D * fpad, 0.f);
  for (int64_t b = begin; b < end; ++b) {
    for (int64_t f = 0; f < F; ++f) {
      const float* x = Feature(a, b, f);
      for (int64_t d = 0; d < D; ++d) xt[d * fpad + f] = x[d];
    }
    float* __restrict out = a.out + b * a.out_ld;
    std::memcpy(out, Feature(a, b, 0), static_cast<size_t>(D) * sizeof(float));
    float* __restrict z = out + D;
    for (int64_t i = 0; i < F; ++i) {
      const int64_t jn = i + self;  // pairs (i, j), j < jn
      const float* __restrict xi = Feature(a, b, i);
      for (int64_t jb = 0; jb < jn; jb += kBlock) {
        float acc[kBlock] = {};
        for (int64_t d = 0; d < D; ++d) {
          const float s = xi[d];
          const float* __restrict col = xt + d * fpad + jb;
          for (int64_t jj = 0; jj < kBlock; ++jj) acc[jj] += s * col[jj];
        }
        const int64_t n = std::min(kBlock, jn - jb);
        for (int64_t jj = 0; jj < n; ++jj) z[jb + jj] = acc[jj];
      }
      z += jn;
    }
  }
}

// dX = (G + G^T) X; scratch: s [F x F], acc [D].
template <int kD>
void DotBackwardRowsT(const DotRowsArgs& a, int64_t begin, int64_t end, float* scratch) {
  const int64_t F = a.features, D = kD > 0 ? kD : a.dim, self = a.self ? 1 : 0;
  float* __restrict s = scratch;
  float* __restrict acc = scratch + F * F;
  for (int64_t b = begin; b < end; ++b) {
    const float* __restrict dout = a.d_out + b * a.d_out_ld;
    std::fill(s, s + F * F, 0.f);
    const float* g = dout + D;
    for (int64_t i = 0; i < F; ++i) {
      for (int64_t j = 0; j < i + self; ++j) {
        s[i * F + j] += g[j];
        s[j * F + i] += g[j];
      }
      g += i + self;
    }
    for (int64_t i = 0; i < F; ++i) {
      std::fill(acc, acc + D, 0.f);
      for (int64_t j = 0; j < F; ++j) {
        const float sij = s[i * F + j];
        const float* __restrict xj = Feature(a, b, j);
        for (int64_t d = 0; d < D; ++d) acc[d] += sij * xj[d];
      }
      if (i == 0) {
        float* __restrict dd = a.d_dense + b * a.d_dense_ld;
        for (int64_t d = 0; d < D; ++d) dd[d] = dout[d] + acc[d];
      } else {
        float* __restrict ds = a.d_sparse + b * a.d_sparse_ld + (i - 1) * D;
        std::memcpy(ds, acc, static_cast<size_t>(D) * sizeof(float));
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
  CEMB_DOT_DISPATCH(DotForwardRowsT, a, begin, end, scratch);
}
void DotBackwardRowsImpl(const DotRowsArgs& a, int64_t begin, int64_t end, float* scratch) {
  CEMB_DOT_DISPATCH(DotBackwardRowsT, a, begin, end, scratch);
}
#undef CEMB_DOT_DISPATCH

}  // namespace
}  // namespace cemb::dlrm::internal

#endif  // CEMB_DLRM_INTERNAL_INTERACTION_KERNEL_H_
