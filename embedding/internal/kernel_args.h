// Arguments of the single-threaded range kernels and the per-table set of
// kernels chosen once (by ISA and feature size). Not API: embedding/kernels.h
// is the interface.
#ifndef CEMB_EMBEDDING_INTERNAL_KERNEL_ARGS_H_
#define CEMB_EMBEDDING_INTERNAL_KERNEL_ARGS_H_

#include <cstdint>

#include "embedding/types.h"

namespace cemb::internal {

// Rows ahead of the current one whose cache lines a kernel prefetches.
inline constexpr int kDefaultPrefetchDistance = 16;

template <typename Index>
struct GatherArgs {
  const Index* indices;
  MatrixView out;  // out.row(i) = row indices[i]
  bool stream;     // non-temporal stores (out rows 64-byte aligned, checked by the caller)
  int prefetch;    // distance in indices; 0 = none
  int64_t nindices;
};

template <typename Index>
struct PooledArgs {
  const Index* offsets;
  const Index* indices;
  const float* weights;  // nullptr or one per index
  MatrixView out;        // out.row(b) = pooled bag b
  Pooling pooling;
  bool stream;
  int prefetch;
  int64_t nindices;  // offsets[nbags]: prefetches never read past it
};

// An update plan's arrays (see embedding/reindex.h) plus the gradient.
struct UpdateArgs {
  const int64_t* rows;      // unique rows
  const int64_t* offsets;   // nunique + 1
  const int32_t* sources;   // gradient rows of each occurrence
  const float* scales;      // nullptr (all 1) or one per occurrence
  ConstMatrixView grad;     // one row per output of the forward pass
  float lr;
  bool stream;              // non-temporal stores of updated rows
  int prefetch;             // distance in unique rows
  float* state;             // row-wise AdaGrad: one accumulator per table row
  float eps;                // AdaGrad, both rules
};

template <typename Table, typename Index>
using GatherFn = void (*)(const Table&, const GatherArgs<Index>&, int64_t begin, int64_t end);
template <typename Table, typename Index>
using PooledFn = void (*)(const Table&, const PooledArgs<Index>&, int64_t bag_begin, int64_t bag_end);
template <typename Table>
using UpdateFn = void (*)(const Table&, const UpdateArgs&, int64_t unique_begin, int64_t unique_end);

template <typename Table>
struct KernelSet {
  Isa isa = Isa::kGeneric;
  int64_t specialised_size = 0;  // the compile-time feature size, 0 for the tiled fallback
  GatherFn<Table, int32_t> gather32 = nullptr;
  GatherFn<Table, int64_t> gather64 = nullptr;
  PooledFn<Table, int32_t> pooled32 = nullptr;
  PooledFn<Table, int64_t> pooled64 = nullptr;
  UpdateFn<Table> sgd = nullptr;
  UpdateFn<Table> rowwise_adagrad = nullptr;
  UpdateFn<Table> adagrad = nullptr;  // element-wise: the accumulators after each row's features

  UpdateFn<Table> update(UpdateRule rule) const {
    return rule == UpdateRule::kSgd ? sgd : rule == UpdateRule::kRowwiseAdagrad ? rowwise_adagrad : adagrad;
  }

  template <typename Index>
  GatherFn<Table, Index> gather() const {
    if constexpr (sizeof(Index) == 4) return gather32; else return gather64;
  }
  template <typename Index>
  PooledFn<Table, Index> pooled() const {
    if constexpr (sizeof(Index) == 4) return pooled32; else return pooled64;
  }
};

// Defined in the ISA translation units that cemb_kernel_sources
// (cmake/helpers.cmake) generates for each library's table types. Call only
// the ones the CPU supports.
template <typename Table>
KernelSet<Table> MakeKernelsGeneric(int64_t featuresize);
template <typename Table>
KernelSet<Table> MakeKernelsAvx2(int64_t featuresize);
template <typename Table>
KernelSet<Table> MakeKernelsAvx512(int64_t featuresize);

}  // namespace cemb::internal

#endif  // CEMB_EMBEDDING_INTERNAL_KERNEL_ARGS_H_
