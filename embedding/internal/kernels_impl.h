// The embedding kernels, written once over the rowpointer interface and an
// ISA `A` (ScalarArch, xsimd::fma3<xsimd::avx2>, xsimd::avx512bw).
//
// Included only by the ISA translation units. Every function here is a
// template over A, so the AVX-512 and AVX2 copies have different symbols and
// the linker can never merge one into the other; the kernels are
// [[gnu::flatten]] so that the table's inline accessors are inlined into the
// ISA code rather than called as shared weak symbols.
//
// Reference semantics (what tests/embedding/reference.h implements plainly):
//   row(r):   table row r's features as fp32 (an int8 row's: fma(q, scale, bias),
//             DecodeRow of embedding/row_format.h)
//   gather:   out[i, :] = row(indices[i])
//   pooled:   out[b, :] = s_b * sum_{j in bag b} w_j * row(indices[j])
//             w_j = weights[j] or 1; s_b = 1/|bag b| for kMean (0-size bag: 0 row), else 1
//   sgd:      for each unique row u: g = sum_{k in occ(u)} scale_k * grad[source_k, :]
//             row(u) -= lr * g
//   rowwise:  g as above; state[u] += mean(g^2); row(u) -= lr * g / (sqrt(state[u]) + eps)
//   adagrad:  g as above; m = the fp32 state after row(u)'s features, per element:
//             m += g^2; row(u) -= lr * g / (sqrt(m) + eps)
// Tables of the served-only element types (float16, int8_rowwise) have the
// lookups only: their kernel sets hold no updates.
#ifndef CEMB_EMBEDDING_INTERNAL_KERNELS_IMPL_H_
#define CEMB_EMBEDDING_INTERNAL_KERNELS_IMPL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "embedding/internal/feature_sizes.h"
#include "embedding/internal/kernel_args.h"
#include "embedding/internal/simd.h"
#include "embedding/simple_table.h"

namespace cemb::internal {

// --- helpers -------------------------------------------------------------

template <typename A, typename T, int kVecs>
[[gnu::always_inline]] inline void StoreRow(float* out, const typename Simd<A>::F* acc, bool stream) {
  using S = Simd<A>;
  if (stream) {
    for (int v = 0; v < kVecs; ++v) S::stream(out + v * S::kWidth, acc[v]);
  } else {
    for (int v = 0; v < kVecs; ++v) S::store(out + v * S::kWidth, acc[v]);
  }
}

// How a kernel reads a row's features as fp32 vectors: as they are stored
// (float, bfloat16, float16: S::load), or, for an int8 row, its bytes
// scaled and biased by the pair after them (fma(q, scale, bias), as
// DecodeRow). Made once per row; free for the stored types.
template <typename A, typename T>
struct RowReader {
  using S = Simd<A>;
  [[gnu::always_inline]] RowReader() = default;
  [[gnu::always_inline]] RowReader(const T*, int64_t) {}
  [[gnu::always_inline]] typename S::F load(const T* row, int64_t col) const { return S::load(row + col); }
  [[gnu::always_inline]] float at(const T* row, int64_t col) const { return ToFloat(row[col]); }
};
template <typename A>
struct RowReader<A, int8_rowwise> {
  using S = Simd<A>;
  [[gnu::always_inline]] RowReader() = default;
  [[gnu::always_inline]] RowReader(const int8_rowwise* row, int64_t d) {
    RowScaleBias(row, d, &scale, &bias);
    vscale = S::broadcast(scale);
    vbias = S::broadcast(bias);
  }
  [[gnu::always_inline]] typename S::F load(const int8_rowwise* row, int64_t col) const {
    if constexpr (S::kWidth == 1) {
      return at(row, col);  // the generic ISA has no fma instruction: std::fma rounds once, as DecodeRow
    } else {
      return S::fma(S::load(row + col), vscale, vbias);
    }
  }
  [[gnu::always_inline]] float at(const int8_rowwise* row, int64_t col) const {
    return std::fma(static_cast<float>(row[col].q), scale, bias);
  }
  float scale = 0.0f, bias = 0.0f;
  typename S::F vscale{}, vbias{};
};

template <typename Table>
[[gnu::always_inline]] inline void PrefetchTableRow(const Table& t, int64_t row) {
  PrefetchRow(t.rowpointer(row, Access::kPrefetch), RowFeatureBytes<typename Table::value_type>(t.featuresize()));
}

// A table whose rows are found through a per-row word (CachedTable): the
// address of row r's word, so it can be prefetched before the row is.
// Such a table also resolves a block of rows at once (access_and_cache(rows, n, out)).
template <typename Table>
concept HasRowIndirection = requires(const Table& t, int64_t r) { t.indirection_address(r); };

// Prefetches for position j of `rows` (n of them): the row `distance` ahead
// and, for a table with an indirection word, that word `2 * distance` ahead,
// so that resolving the row's address does not stall the row's prefetch.
template <typename Table, typename Index>
[[gnu::always_inline]] inline void PrefetchAhead(const Table& t, const Index* rows, int64_t j, int64_t n,
                                                 int distance) {
  if (distance <= 0) return;
  if (j + distance < n) PrefetchTableRow(t, rows[j + distance]);
  if constexpr (HasRowIndirection<Table>) {
    if (j + 2 * distance < n) __builtin_prefetch(t.indirection_address(rows[j + 2 * distance]), 0, 3);
  }
}

// The row addresses of positions [begin, end) of `indices` in a table with an
// indirection word, resolved a block at a time ahead of their use. Resolving
// (the table's access_and_cache(rows, n, out): the words' loads, their tag
// tests, the miss path's call) happens here, apart from the loop that sums rows, so that loop holds no call (a
// call clobbers every vector register: the accumulators would live on the
// stack) and its row prefetches read an address already resolved instead of
// waiting on the word's load. The loop that resolves block k also prefetches
// block k+1's words, so they have a block's time to arrive (128 rows: 5-10%
// more lookups/s than 64 in an in-process A/B on the 2-core VM, 32 slower
// still; bench/history/cache.md). Resolution never reaches past `end`: a row is looked up (counted,
// admitted) only by the kernel call that owns its position. A template over
// the ISA `A` (unused in its code) like every kernel here: ResolveBlocks is
// not inlined, and without A the copies of the AVX2 and AVX-512 translation
// units would be one weak symbol, of either ISA.
template <typename A, typename Table, typename Index>
class ResolvedRows {
 public:
  using T = typename Table::value_type;
  static constexpr int64_t kBlock = 128;
  static constexpr int64_t kRing = 512;  // a span of a bag, the prefetch distance and a block
  static constexpr int kMaxDistance = 128;

  ResolvedRows(const Table& t, const Index* indices, int64_t begin, int64_t end)
      : t_(t), indices_(indices), begin_(begin), resolved_(begin), end_(end) {
    for (int64_t j = begin; j < std::min(end, begin + kBlock); ++j) {
      __builtin_prefetch(t.indirection_address(indices[j]), 0, 3);
    }
  }

  // Makes positions up to `j` (exclusive; at most end) resolved.
  [[gnu::always_inline]] void Reach(int64_t j) {
    if (j > resolved_) [[unlikely]] ResolveBlocks(std::min(j, end_));
  }
  [[gnu::always_inline]] const T* operator[](int64_t j) const { return ring_[(j - begin_) & (kRing - 1)]; }

 private:
  // Blocks start at begin_ + a multiple of kBlock, so each is contiguous in
  // the ring; the table resolves (and counts) a block at a time.
  [[gnu::noinline]] void ResolveBlocks(int64_t j) {
    while (resolved_ < j) {
      const int64_t stop = std::min(resolved_ + kBlock, end_);
      t_.access_and_cache(indices_ + resolved_, stop - resolved_, ring_ + ((resolved_ - begin_) & (kRing - 1)),
                          std::min(kBlock, end_ - stop));
      resolved_ = stop;
    }
  }

  const Table& t_;
  const Index* indices_;
  int64_t begin_;
  int64_t resolved_;
  int64_t end_;
  const T* ring_[kRing];
};

// --- gather (non-reducing lookup) ------------------------------------------

template <typename A, typename Table, int KD, typename Index>
[[gnu::flatten]] void GatherRange(const Table& t, const GatherArgs<Index>& a, int64_t begin, int64_t end) {
  [[maybe_unused]] const auto scope = ReadScopeOf(t);
  using S = Simd<A>;
  using T = typename Table::value_type;
  const int64_t d = KD > 0 ? KD : t.featuresize();
  for (int64_t i = begin; i < end; ++i) {
    PrefetchAhead(t, a.indices, i, a.nindices, a.prefetch);
    const T* row = t.rowpointer(a.indices[i], Access::kForward);
    const RowReader<A, T> r(row, d);
    float* out = a.out.row(i);
    if constexpr (KD > 0) {
      constexpr int kVecs = KD / S::kWidth;
      typename S::F v[kVecs];
      for (int k = 0; k < kVecs; ++k) v[k] = r.load(row, k * S::kWidth);
      StoreRow<A, T, kVecs>(out, v, a.stream);
    } else {
      int64_t j = 0;
      for (; j + S::kWidth <= d; j += S::kWidth) S::store(out + j, r.load(row, j));
      for (; j < d; ++j) out[j] = r.at(row, j);
    }
  }
  if (a.stream) S::fence();
}

// --- pooled lookup ----------------------------------------------------------

// A bag's pooled row for a compile-time feature size KD whose vectors fit in
// the accumulator registers: rows are resolved, prefetched and summed inline.
template <typename A, typename Table, int KD, typename Index>
[[gnu::always_inline]] inline void PooledBagInRegisters(const Table& t, const PooledArgs<Index>& a,
                                                         int64_t b) {
  using S = Simd<A>;
  using T = typename Table::value_type;
  constexpr int kVecs = KD / S::kWidth;
  typename S::F acc[kVecs];
  for (int v = 0; v < kVecs; ++v) acc[v] = S::zero();
  const int64_t begin = a.offsets[b], end = a.offsets[b + 1];
  for (int64_t j = begin; j < end; ++j) {
    PrefetchAhead(t, a.indices, j, a.nindices, a.prefetch);
    const T* row = t.rowpointer(a.indices[j], Access::kForward);
    const RowReader<A, T> r(row, KD);
    if (a.weights != nullptr) {
      const typename S::F w = S::broadcast(a.weights[j]);
      for (int v = 0; v < kVecs; ++v) acc[v] = S::fma(r.load(row, v * S::kWidth), w, acc[v]);
    } else {
      for (int v = 0; v < kVecs; ++v) acc[v] = acc[v] + r.load(row, v * S::kWidth);
    }
  }
  if (a.pooling == Pooling::kMean && end > begin) {
    const typename S::F s = S::broadcast(1.0f / static_cast<float>(end - begin));
    for (int v = 0; v < kVecs; ++v) acc[v] = acc[v] * s;
  }
  StoreRow<A, T, kVecs>(a.out.row(b), acc, a.stream);
}

// A bag's pooled row when the feature size does not fit the registers (or is
// known only at run time): row addresses are resolved once per chunk of the
// bag, then summed column block by column block into the output row.
template <typename A, typename Table, int KD, typename Index>
[[gnu::always_inline]] inline void PooledBagBlocked(const Table& t, const PooledArgs<Index>& a, int64_t b) {
  using S = Simd<A>;
  using T = typename Table::value_type;
  constexpr int kChunk = 64;
  constexpr int kBlock = S::kMaxAccumulators;  // vectors per column block
  const int64_t d = KD > 0 ? KD : t.featuresize();
  const int64_t vec_cols = d / S::kWidth * S::kWidth;
  const T* rows[kChunk];
  RowReader<A, T> readers[kChunk];
  float weights[kChunk];
  float* out = a.out.row(b);
  const int64_t begin = a.offsets[b], end = a.offsets[b + 1];
  for (int64_t j = 0; j < d; ++j) out[j] = 0.0f;
  for (int64_t c0 = begin; c0 < end; c0 += kChunk) {
    const int n = static_cast<int>(std::min<int64_t>(kChunk, end - c0));
    for (int k = 0; k < n; ++k) {
      const int64_t j = c0 + k;
      PrefetchAhead(t, a.indices, j, a.nindices, a.prefetch);
      rows[k] = t.rowpointer(a.indices[j], Access::kForward);
      readers[k] = RowReader<A, T>(rows[k], d);
      weights[k] = a.weights != nullptr ? a.weights[j] : 1.0f;
    }
    int64_t col = 0;
    for (; col + kBlock * S::kWidth <= vec_cols; col += kBlock * S::kWidth) {
      typename S::F acc[kBlock];
      for (int v = 0; v < kBlock; ++v) acc[v] = S::load(out + col + v * S::kWidth);
      for (int k = 0; k < n; ++k) {
        const typename S::F w = S::broadcast(weights[k]);
        for (int v = 0; v < kBlock; ++v) acc[v] = S::fma(readers[k].load(rows[k], col + v * S::kWidth), w, acc[v]);
      }
      for (int v = 0; v < kBlock; ++v) S::store(out + col + v * S::kWidth, acc[v]);
    }
    for (; col < vec_cols; col += S::kWidth) {
      typename S::F acc = S::load(out + col);
      for (int k = 0; k < n; ++k) acc = S::fma(readers[k].load(rows[k], col), S::broadcast(weights[k]), acc);
      S::store(out + col, acc);
    }
    for (; col < d; ++col) {
      float acc = out[col];
      for (int k = 0; k < n; ++k) acc += readers[k].at(rows[k], col) * weights[k];
      out[col] = acc;
    }
  }
  if (a.pooling == Pooling::kMean && end > begin) {
    const float s = 1.0f / static_cast<float>(end - begin);
    for (int64_t j = 0; j < d; ++j) out[j] *= s;
  }
}

// PooledBagInRegisters for a table with an indirection word: the rows come
// resolved from `rows` (ResolvedRows) and are prefetched `distance` positions
// ahead from addresses already known. A bag is summed in spans whose rows
// (and the prefetch window past them) are resolved before the span starts,
// so the loop that sums holds no call and the accumulators stay in registers
// (a span's sum goes through the output row only in bags over kSpan rows).
template <typename A, typename Table, int KD, typename Index>
[[gnu::always_inline]] inline void PooledBagResolved(const PooledArgs<Index>& a, int64_t b,
                                                     ResolvedRows<A, Table, Index>& rows, int distance,
                                                     int64_t range_end) {
  using S = Simd<A>;
  using T = typename Table::value_type;
  using R = ResolvedRows<A, Table, Index>;
  constexpr int kVecs = KD / S::kWidth;
  constexpr int64_t kRowBytes = RowFeatureBytes<T>(KD);
  constexpr int64_t kSpan = R::kRing - R::kBlock - R::kMaxDistance;
  float* out = a.out.row(b);
  const int64_t begin = a.offsets[b], end = a.offsets[b + 1];
  for (int64_t c0 = begin;; c0 += kSpan) {
    const int64_t c1 = std::min(end, c0 + kSpan);
    rows.Reach(std::min(c1 + distance, range_end));
    typename S::F acc[kVecs];
    for (int v = 0; v < kVecs; ++v) acc[v] = c0 == begin ? S::zero() : S::load(out + v * S::kWidth);
    for (int64_t j = c0; j < c1; ++j) {
      if (distance > 0 && j + distance < range_end) PrefetchRow(rows[j + distance], kRowBytes);
      const T* row = rows[j];
      const RowReader<A, T> r(row, KD);
      if (a.weights != nullptr) {
        const typename S::F w = S::broadcast(a.weights[j]);
        for (int v = 0; v < kVecs; ++v) acc[v] = S::fma(r.load(row, v * S::kWidth), w, acc[v]);
      } else {
        for (int v = 0; v < kVecs; ++v) acc[v] = acc[v] + r.load(row, v * S::kWidth);
      }
    }
    if (c1 < end) {
      for (int v = 0; v < kVecs; ++v) S::store(out + v * S::kWidth, acc[v]);
      continue;
    }
    if (a.pooling == Pooling::kMean && end > begin) {
      const typename S::F s = S::broadcast(1.0f / static_cast<float>(end - begin));
      for (int v = 0; v < kVecs; ++v) acc[v] = acc[v] * s;
    }
    StoreRow<A, T, kVecs>(out, acc, a.stream);
    return;
  }
}

template <typename A, typename Table, int KD, typename Index>
[[gnu::flatten]] void PooledRange(const Table& t, const PooledArgs<Index>& a, int64_t bag_begin,
                                  int64_t bag_end) {
  [[maybe_unused]] const auto scope = ReadScopeOf(t);
  using S = Simd<A>;
  constexpr bool kInRegisters = KD > 0 && KD / S::kWidth <= S::kMaxAccumulators;
  constexpr bool kResolveAhead = kInRegisters && HasRowIndirection<Table>;
  const int64_t out_bytes = (KD > 0 ? KD : t.featuresize()) * static_cast<int64_t>(sizeof(float));
  const int64_t range_end = bag_end > bag_begin ? static_cast<int64_t>(a.offsets[bag_end]) : 0;
  using Resolver = std::conditional_t<kResolveAhead, ResolvedRows<A, Table, Index>, int>;
  Resolver rows = [&] {
    if constexpr (kResolveAhead) {
      return Resolver(t, a.indices, bag_end > bag_begin ? a.offsets[bag_begin] : 0, range_end);
    } else {
      return 0;
    }
  }();
  const int distance = std::clamp(a.prefetch, 0, ResolvedRows<A, Table, Index>::kMaxDistance);
  for (int64_t b = bag_begin; b < bag_end; ++b) {
    // The output row a.prefetch bags ahead: its read-for-ownership then
    // overlaps the gathers instead of stalling the stores (short bags).
    if (a.prefetch > 0 && !a.stream && b + a.prefetch < bag_end) {
      PrefetchRow(a.out.row(b + a.prefetch), out_bytes);
    }
    if constexpr (kResolveAhead) {
      PooledBagResolved<A, Table, KD>(a, b, rows, distance, range_end);
    } else if constexpr (kInRegisters) {
      PooledBagInRegisters<A, Table, KD>(t, a, b);
    } else {
      PooledBagBlocked<A, Table, KD>(t, a, b);
    }
  }
  if (kInRegisters && a.stream) S::fence();
}

// --- fused updates ----------------------------------------------------------

// g[col .. col + kBlock*W) of unique row u, summed over its occurrences.
template <typename A, int kBlock>
[[gnu::always_inline]] inline void SumGradient(const UpdateArgs& a, int64_t u, int64_t col,
                                               typename Simd<A>::F* g) {
  using S = Simd<A>;
  for (int v = 0; v < kBlock; ++v) g[v] = S::zero();
  for (int64_t k = a.offsets[u]; k < a.offsets[u + 1]; ++k) {
    const float* src = a.grad.row(a.sources[k]) + col;
    if (a.scales != nullptr) {
      const typename S::F s = S::broadcast(a.scales[k]);
      for (int v = 0; v < kBlock; ++v) g[v] = S::fma(S::load(src + v * S::kWidth), s, g[v]);
    } else {
      for (int v = 0; v < kBlock; ++v) g[v] = g[v] + S::load(src + v * S::kWidth);
    }
  }
}

// row[col ..] -= step * g for kBlock vectors, stored or streamed.
template <typename A, int kBlock, typename T>
[[gnu::always_inline]] inline void ApplyStep(T* row, int64_t col, const typename Simd<A>::F* g, float step,
                                             bool stream) {
  using S = Simd<A>;
  const typename S::F s = S::broadcast(step);
  for (int v = 0; v < kBlock; ++v) {
    T* p = row + col + v * S::kWidth;
    const typename S::F r = S::fnma(g[v], s, S::load(p));
    if (stream) {
      S::stream(p, r);
    } else {
      S::store(p, r);
    }
  }
}

template <typename A>
[[gnu::always_inline]] inline float SumSquares(const typename Simd<A>::F* g, int n) {
  using S = Simd<A>;
  typename S::F acc = S::zero();
  for (int v = 0; v < n; ++v) acc = S::fma(g[v], g[v], acc);
  return S::sum(acc);
}

// Element-wise AdaGrad on one vector of a row: m (the vector's accumulators)
// += g^2, row -= lr * g / (sqrt(m) + eps).
template <typename A, typename T>
[[gnu::always_inline]] inline void AdagradVector(T* row, float* m, typename Simd<A>::F g, const UpdateArgs& a,
                                                 bool stream) {
  using S = Simd<A>;
  const typename S::F sum = S::fma(g, g, S::load(m));
  S::store(m, sum);
  const typename S::F r = S::fnma(S::broadcast(a.lr), g / (S::sqrt(sum) + S::broadcast(a.eps)), S::load(row));
  if (stream) {
    S::stream(row, r);
  } else {
    S::store(row, r);
  }
}

// One unique row, compile-time feature size: the gradient of the whole row
// stays in registers (or, past the register budget, in a stack buffer).
template <typename A, typename Table, int KD, UpdateRule kRule>
[[gnu::always_inline]] inline void UpdateRowStatic(const Table& t, const UpdateArgs& a, int64_t u) {
  using S = Simd<A>;
  constexpr int kVecs = KD / S::kWidth;
  constexpr int kBlock = std::min(kVecs, S::kMaxAccumulators);
  typename Table::value_type* row = t.rowpointer(a.rows[u], Access::kUpdate);
  typename S::F g[kVecs];
  for (int v0 = 0; v0 < kVecs; v0 += kBlock) SumGradient<A, kBlock>(a, u, v0 * S::kWidth, g + v0);
  if constexpr (kRule == UpdateRule::kAdagrad) {
    float* m = RowState(row, KD);
    for (int v = 0; v < kVecs; ++v) AdagradVector<A>(row + v * S::kWidth, m + v * S::kWidth, g[v], a, a.stream);
    return;
  }
  float step = a.lr;
  if constexpr (kRule == UpdateRule::kRowwiseAdagrad) {
    float& state = a.state[a.rows[u]];
    state += SumSquares<A>(g, kVecs) / static_cast<float>(KD);
    step = a.lr / (std::sqrt(state) + a.eps);
  }
  for (int v0 = 0; v0 < kVecs; v0 += kBlock) ApplyStep<A, kBlock>(row, v0 * S::kWidth, g + v0, step, a.stream);
}

// One unique row, run-time feature size: column tiles of one vector.
template <typename A, typename Table, UpdateRule kRule>
[[gnu::always_inline]] inline void UpdateRowTiled(const Table& t, const UpdateArgs& a, int64_t u) {
  using S = Simd<A>;
  using T = typename Table::value_type;
  const int64_t d = t.featuresize();
  const int64_t vec_cols = d / S::kWidth * S::kWidth;
  T* row = t.rowpointer(a.rows[u], Access::kUpdate);
  auto scalar_grad = [&](int64_t col) {
    float g = 0.0f;
    for (int64_t k = a.offsets[u]; k < a.offsets[u + 1]; ++k) {
      g += a.grad.row(a.sources[k])[col] * (a.scales != nullptr ? a.scales[k] : 1.0f);
    }
    return g;
  };
  if constexpr (kRule == UpdateRule::kAdagrad) {
    float* m = RowState(row, d);
    for (int64_t col = 0; col < vec_cols; col += S::kWidth) {
      typename S::F g;
      SumGradient<A, 1>(a, u, col, &g);
      AdagradVector<A>(row + col, m + col, g, a, /*stream=*/false);
    }
    for (int64_t col = vec_cols; col < d; ++col) {
      AdagradVector<ScalarArch>(row + col, m + col, scalar_grad(col), a, /*stream=*/false);
    }
    return;
  }
  float step = a.lr;
  if constexpr (kRule == UpdateRule::kRowwiseAdagrad) {  // a first pass for the mean square of the gradient
    float squares = 0.0f;
    for (int64_t col = 0; col < vec_cols; col += S::kWidth) {
      typename S::F g;
      SumGradient<A, 1>(a, u, col, &g);
      squares += SumSquares<A>(&g, 1);
    }
    for (int64_t col = vec_cols; col < d; ++col) {
      const float g = scalar_grad(col);
      squares += g * g;
    }
    float& state = a.state[a.rows[u]];
    state += squares / static_cast<float>(d);
    step = a.lr / (std::sqrt(state) + a.eps);
  }
  for (int64_t col = 0; col < vec_cols; col += S::kWidth) {
    typename S::F g;
    SumGradient<A, 1>(a, u, col, &g);
    ApplyStep<A, 1>(row, col, &g, step, /*stream=*/false);
  }
  for (int64_t col = vec_cols; col < d; ++col) {
    row[col] = FromFloat<T>(ToFloat(row[col]) - step * scalar_grad(col));
  }
}

template <typename A, typename Table, int KD, UpdateRule kRule>
[[gnu::flatten]] void UpdateRange(const Table& t, const UpdateArgs& a, int64_t begin, int64_t end) {
  [[maybe_unused]] const auto scope = ReadScopeOf(t);
  using S = Simd<A>;
  for (int64_t u = begin; u < end; ++u) {
    PrefetchAhead(t, a.rows, u, end, a.prefetch);
    if constexpr (KD > 0) {
      UpdateRowStatic<A, Table, KD, kRule>(t, a, u);
    } else {
      UpdateRowTiled<A, Table, kRule>(t, a, u);
    }
  }
  if (KD > 0 && a.stream) S::fence();
}

// --- the kernel set of a table ----------------------------------------------

template <typename A, typename Table, int KD>
KernelSet<Table> KernelsFor(Isa isa) {
  KernelSet<Table> k;
  k.isa = isa;
  k.specialised_size = KD;
  k.gather32 = &GatherRange<A, Table, KD, int32_t>;
  k.gather64 = &GatherRange<A, Table, KD, int64_t>;
  k.pooled32 = &PooledRange<A, Table, KD, int32_t>;
  k.pooled64 = &PooledRange<A, Table, KD, int64_t>;
  if constexpr (StorageType<typename Table::value_type>) {
    k.sgd = &UpdateRange<A, Table, KD, UpdateRule::kSgd>;
    k.rowwise_adagrad = &UpdateRange<A, Table, KD, UpdateRule::kRowwiseAdagrad>;
    k.adagrad = &UpdateRange<A, Table, KD, UpdateRule::kAdagrad>;
  }
  return k;
}

// The kernels specialised for feature size kD when A's vectors tile it, else
// the tiled fallback (kD == kDynamic: the fallback).
template <typename A, typename Table, int64_t kD>
KernelSet<Table> KernelsForSize(Isa isa) {
  if constexpr (kD != kDynamic && kD % Simd<A>::kWidth == 0 && kD <= 1024) {
    return KernelsFor<A, Table, static_cast<int>(kD)>(isa);
  } else {
    return KernelsFor<A, Table, 0>(isa);
  }
}

// Chooses the kernels of a table: its static size, or a specialised size
// (internal/feature_sizes.h) that equals its run-time size, or the tiled
// fallback. The generic ISA has only the fallback.
template <typename A, typename Table>
KernelSet<Table> SelectKernels(Isa isa, int64_t featuresize) {
  if constexpr (std::is_same_v<A, ScalarArch>) {
    return KernelsFor<A, Table, 0>(isa);
  } else if constexpr (Table::kFeatureSize != kDynamic) {
    return KernelsForSize<A, Table, Table::kFeatureSize>(isa);
  } else {
    return WithFeatureSize(featuresize, [isa]<int64_t kD>() { return KernelsForSize<A, Table, kD>(isa); });
  }
}

}  // namespace cemb::internal

// The ISA translation units define CEMB_KERNELS_ISA_<NAME> before including
// this header, which then defines that ISA's MakeKernels template; the unit
// explicitly instantiates it for its table types with
// CEMB_INSTANTIATE_KERNELS(MakeKernelsAvx512, SimpleTable<float, 128>).
namespace cemb::internal {
#if defined(CEMB_KERNELS_ISA_AVX512)
template <typename Table>
KernelSet<Table> MakeKernelsAvx512(int64_t featuresize) {
  return SelectKernels<xsimd::avx512bw, Table>(Isa::kAvx512, featuresize);
}
#elif defined(CEMB_KERNELS_ISA_AVX2)
template <typename Table>
KernelSet<Table> MakeKernelsAvx2(int64_t featuresize) {
  return SelectKernels<xsimd::fma3<xsimd::avx2>, Table>(Isa::kAvx2, featuresize);
}
#elif defined(CEMB_KERNELS_ISA_GENERIC)
template <typename Table>
KernelSet<Table> MakeKernelsGeneric(int64_t featuresize) {
  return SelectKernels<ScalarArch, Table>(Isa::kGeneric, featuresize);
}
#else
#error "define CEMB_KERNELS_ISA_AVX512, _AVX2 or _GENERIC before including kernels_impl.h"
#endif
}  // namespace cemb::internal

#define CEMB_INSTANTIATE_KERNELS(FN, ...) \
  template ::cemb::internal::KernelSet<__VA_ARGS__> cemb::internal::FN<__VA_ARGS__>(int64_t);

#endif  // CEMB_EMBEDDING_INTERNAL_KERNELS_IMPL_H_
