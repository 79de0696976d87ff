// The pooled kernels of resolved rows (ssd/internal/resolved_rows.h): the
// embedding kernels compiled for ResolvedRowTable by
// ssd/resolved_kernels_<isa>.cc, chosen by ISA and feature size.
#include "ssd/internal/resolved_rows.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdio>
#include <numeric>
#include <vector>

#include "absl/status/statusor.h"
#include "embedding/cpu.h"
#include "embedding/internal/feature_sizes.h"

namespace cemb::ssd_internal {
namespace {

template <RowElement T>
internal::KernelSet<ResolvedRowTable<T>> KernelsOf(Isa isa, int64_t featuresize) {
  switch (isa) {  // only ISAs this build has kernels for
#if defined(CEMB_HAVE_AVX512_KERNELS)
    case Isa::kAvx512: return internal::MakeKernelsAvx512<ResolvedRowTable<T>>(featuresize);
#endif
#if defined(CEMB_HAVE_AVX2_KERNELS)
    case Isa::kAvx2: return internal::MakeKernelsAvx2<ResolvedRowTable<T>>(featuresize);
#endif
    default: return internal::MakeKernelsGeneric<ResolvedRowTable<T>>(featuresize);
  }
}

// The process's ISA, as TableKernels' kAuto resolves it; a CEMB_ISA that
// names no available ISA (which every TableKernels refuses) is said once.
Isa ProcessIsa() {
  static const Isa isa = [] {
    absl::StatusOr<Isa> resolved = ResolveIsa(Isa::kAuto);
    if (resolved.ok()) return *resolved;
    std::fprintf(stderr, "cemb: pooling resolved rows with the generic kernels: %s\n",
                 resolved.status().ToString().c_str());
    return Isa::kGeneric;
  }();
  return isa;
}

constexpr std::array<int64_t, kStaticPositions> Iota() {
  std::array<int64_t, kStaticPositions> a{};
  for (int64_t i = 0; i < kStaticPositions; ++i) a[static_cast<size_t>(i)] = i;
  return a;
}

}  // namespace

constinit const std::array<int64_t, kStaticPositions> kPositions = Iota();

std::span<const int64_t> GrowPositions(int64_t n) {
  thread_local std::vector<int64_t> positions;
  const size_t have = positions.size();
  if (have < static_cast<size_t>(n)) {
    positions.resize(static_cast<size_t>(n));
    std::iota(positions.begin() + static_cast<std::ptrdiff_t>(have), positions.end(), static_cast<int64_t>(have));
  }
  return {positions.data(), static_cast<size_t>(n)};
}

template <RowElement T>
ResolvedPooledFn<T> ResolvedPooledKernelOf(Isa isa, int64_t featuresize) {
  return KernelsOf<T>(isa, featuresize).pooled64;
}

template <RowElement T>
const ResolvedKernels<T>& ProcessResolvedKernels() {
  static const ResolvedKernels<T> kernels = [] {
    ResolvedKernels<T> k;
    for (size_t i = 0; i < internal::kFeatureSizes.size(); ++i) {
      k.pooled[i] = ResolvedPooledKernelOf<T>(ProcessIsa(), internal::kFeatureSizes[i]);
    }
    k.pooled.back() = ResolvedPooledKernelOf<T>(ProcessIsa(), /*no specialised size=*/1);
    return k;
  }();
  return kernels;
}

#define CEMB_RESOLVED_KERNELS_OF(T)                                                \
  template ResolvedPooledFn<T> ResolvedPooledKernelOf<T>(Isa, int64_t); \
  template const ResolvedKernels<T>& ProcessResolvedKernels<T>();
CEMB_FOR_EACH_ROW_ELEMENT(CEMB_RESOLVED_KERNELS_OF)
#undef CEMB_RESOLVED_KERNELS_OF

}  // namespace cemb::ssd_internal
