// ResolvedRowTable<T>: a request's resolved row addresses (SnapshotTable::
// Resolve's `out`) seen as a table of the rowpointer interface, so that the
// embedding kernels (embedding/internal/kernels_impl.h), compiled per ISA for
// it by ssd/resolved_kernels_<isa>.cc, pool them unchanged: row j is the
// j-th address, and the kernels are given the indices 0, 1, 2, ... Not API:
// PooledSumResolved (ssd/snapshot_table.h) is the interface.
#ifndef CEMB_SSD_INTERNAL_RESOLVED_ROWS_H_
#define CEMB_SSD_INTERNAL_RESOLVED_ROWS_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "embedding/internal/feature_sizes.h"
#include "embedding/internal/kernel_args.h"
#include "embedding/simple_table.h"
#include "embedding/types.h"

namespace cemb::ssd_internal {

template <RowElement T>
class ResolvedRowTable {
 public:
  using value_type = T;
  static constexpr int64_t kFeatureSize = kDynamic;

  ResolvedRowTable(const T* const* rows, int64_t nrows, int64_t featuresize)
      : rows_(rows), nrows_(nrows), featuresize_(featuresize) {}

  [[gnu::always_inline]] int64_t featuresize() const { return featuresize_; }
  [[gnu::always_inline]] int64_t nvectors() const { return nrows_; }
  // Non-const only because the interface is: the kernels a view runs
  // (pooled lookups) never write through it.
  [[gnu::always_inline]] T* rowpointer(int64_t j, Access = Access::kForward) const {
    return const_cast<T*>(rows_[j]);
  }
  const char* name() const { return "resolved rows"; }

 private:
  const T* const* rows_;
  int64_t nrows_;
  int64_t featuresize_;
};

// 0, 1, ..., n - 1: the indices the kernels are given for resolved rows.
// Up to kStaticPositions a constant array; beyond, a per-thread one, grown
// as needed (valid until the thread's next call).
inline constexpr int64_t kStaticPositions = 1024;
extern const std::array<int64_t, kStaticPositions> kPositions;
std::span<const int64_t> GrowPositions(int64_t n);
inline std::span<const int64_t> Positions(int64_t n) {
  return n <= kStaticPositions ? std::span<const int64_t>(kPositions.data(), static_cast<size_t>(n)) : GrowPositions(n);
}

template <RowElement T>
using ResolvedPooledFn = internal::PooledFn<ResolvedRowTable<T>, int64_t>;

// The pooled kernel (int64 offsets and indices) of `isa` for resolved rows
// of `featuresize` elements: specialised for the sizes of
// embedding/internal/feature_sizes.h, else the tiled fallback.
// REQUIRES: IsaAvailable(isa).
template <RowElement T>
ResolvedPooledFn<T> ResolvedPooledKernelOf(Isa isa, int64_t featuresize);

// The process's pooled kernels: the ISA as TableKernels' kAuto resolves
// it (the environment's CEMB_ISA, else the best the CPU has), one kernel
// per specialised feature size, then the tiled fallback. Made once.
template <RowElement T>
struct ResolvedKernels {
  std::array<ResolvedPooledFn<T>, internal::kFeatureSizes.size() + 1> pooled;
};
template <RowElement T>
const ResolvedKernels<T>& ProcessResolvedKernels();

// The process's pooled kernel for resolved rows of `featuresize` elements.
template <RowElement T>
[[gnu::always_inline]] inline ResolvedPooledFn<T> ResolvedPooledKernel(int64_t featuresize) {
  static const ResolvedKernels<T>& kernels = ProcessResolvedKernels<T>();
  size_t i = 0;
  while (i < internal::kFeatureSizes.size() && internal::kFeatureSizes[i] != featuresize) ++i;
  return kernels.pooled[i];
}

// PooledSumResolved (ssd/snapshot_table.h) with the given kernel.
template <RowElement T>
void PoolResolvedRows(ResolvedPooledFn<T> kernel, std::span<const T* const> rows, std::span<const int64_t> offsets,
                      int64_t featuresize, Pooling pooling, std::span<const float> weights, float* out, int64_t ld) {
  if (offsets.size() < 2) return;
  const ResolvedRowTable<T> view(rows.data(), static_cast<int64_t>(rows.size()), featuresize);
  const int64_t nbags = static_cast<int64_t>(offsets.size()) - 1;
  const std::span<const int64_t> positions = Positions(offsets.back());
  const internal::PooledArgs<int64_t> args{offsets.data(),
                                           positions.data(),
                                           weights.empty() ? nullptr : weights.data(),
                                           MatrixView{out, nbags, featuresize, ld},
                                           pooling,
                                           /*stream=*/false,
                                           internal::kDefaultPrefetchDistance,
                                           static_cast<int64_t>(positions.size())};
  kernel(view, args, 0, nbags);
}

}  // namespace cemb::ssd_internal

#endif  // CEMB_SSD_INTERNAL_RESOLVED_ROWS_H_
