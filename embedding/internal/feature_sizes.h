// The feature sizes the kernels are specialised for, in one place. Adding a
// size is one edit of CEMB_FOR_EACH_FEATURE_SIZE: the SimpleTable,
// CachedTable and SsdTable types whose kernels and members the libraries
// compile (CEMB_FOR_EACH_TABLE_TYPE, below; the kernels' translation units
// are generated from cmake/kernels_isa.cc.in), the run-time choice of a
// kDynamic table's kernel (SelectKernels in internal/kernels_impl.h), the DLRM
// embedding layer's table types and the messages all follow from it
// (tests/lint/one_list.cmake fails where a list of table types is spelled out).
//
// A table of any other static size runs on the kernels of its kDynamic base
// (see TableKernels in embedding/kernels.h). Not API.
#ifndef CEMB_EMBEDDING_INTERNAL_FEATURE_SIZES_H_
#define CEMB_EMBEDDING_INTERNAL_FEATURE_SIZES_H_

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

#include "embedding/types.h"

// X(D) once per specialised feature size, in increasing order; extra
// arguments are passed on: X(D, args...).
#define CEMB_FOR_EACH_FEATURE_SIZE(X, ...) \
  CEMB_FEATURE_SIZE_X(X, 16, __VA_ARGS__)  \
  CEMB_FEATURE_SIZE_X(X, 32, __VA_ARGS__)  \
  CEMB_FEATURE_SIZE_X(X, 64, __VA_ARGS__)  \
  CEMB_FEATURE_SIZE_X(X, 128, __VA_ARGS__) \
  CEMB_FEATURE_SIZE_X(X, 256, __VA_ARGS__)
#define CEMB_FEATURE_SIZE_X(X, D, ...) X(D __VA_OPT__(, ) __VA_ARGS__)

// X(Table<T, D>) for T in {float, bfloat16} and D in {kDynamic, each listed
// size}: a storage's table types, e.g.
//   CEMB_FOR_EACH_TABLE_TYPE(CEMB_INSTANTIATE, ::cemb::SsdTable)
// X must be variadic (the type holds a comma).
#define CEMB_TABLE_TYPE_OF_SIZE(D, X, Table, T) X(Table<T, D>)
#define CEMB_FOR_EACH_TABLE_TYPE_OF(X, Table, T) \
  X(Table<T, ::cemb::kDynamic>)                  \
  CEMB_FOR_EACH_FEATURE_SIZE(CEMB_TABLE_TYPE_OF_SIZE, X, Table, T)
#define CEMB_FOR_EACH_TABLE_TYPE(X, Table)      \
  CEMB_FOR_EACH_TABLE_TYPE_OF(X, Table, float) \
  CEMB_FOR_EACH_TABLE_TYPE_OF(X, Table, ::cemb::bfloat16)

namespace cemb::internal {

#define CEMB_FEATURE_SIZE_ELEMENT(D) int64_t{D},
inline constexpr std::array kFeatureSizes = {CEMB_FOR_EACH_FEATURE_SIZE(CEMB_FEATURE_SIZE_ELEMENT)};
#undef CEMB_FEATURE_SIZE_ELEMENT

// " 16 32 64 128 256": the list as one string literal, for messages that
// must be literals (static_assert).
#define CEMB_FEATURE_SIZE_STRING(D) " " #D
#define CEMB_FEATURE_SIZES_STRING CEMB_FOR_EACH_FEATURE_SIZE(CEMB_FEATURE_SIZE_STRING)

constexpr bool IsSpecialisedFeatureSize(int64_t featuresize) {
  return std::find(kFeatureSizes.begin(), kFeatureSizes.end(), featuresize) != kFeatureSizes.end();
}

// Returns f.template operator()<D>() for the specialised size D equal to
// `featuresize`, or f.template operator()<kDynamic>() for any other value:
// the one run-time switch from a feature size to a compile-time one.
template <typename F>
decltype(auto) WithFeatureSize(int64_t featuresize, F&& f) {
  switch (featuresize) {
#define CEMB_FEATURE_SIZE_CASE(D) \
  case D:                         \
    return std::forward<F>(f).template operator()<int64_t{D}>();
    CEMB_FOR_EACH_FEATURE_SIZE(CEMB_FEATURE_SIZE_CASE)
#undef CEMB_FEATURE_SIZE_CASE
    default:
      return std::forward<F>(f).template operator()<kDynamic>();
  }
}

}  // namespace cemb::internal

#endif  // CEMB_EMBEDDING_INTERNAL_FEATURE_SIZES_H_
