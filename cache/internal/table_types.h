// The CachedTable types whose kernels cache/ compiles (cache/kernels_<isa>.cc):
// float and bfloat16 storage, kDynamic and each specialised feature size
// (embedding/internal/feature_sizes.h).
// Their non-inline members (the miss path, flushes) are the kDynamic base's,
// instantiated once per storage type in cache/cached_table.cc (compiled
// without -m flags) and declared extern in cached_table.h, so no ISA
// translation unit emits a copy the linker could pick for another path.
#ifndef CEMB_CACHE_INTERNAL_TABLE_TYPES_H_
#define CEMB_CACHE_INTERNAL_TABLE_TYPES_H_

#include "embedding/internal/feature_sizes.h"

#define CEMB_CACHED_TABLE_OF_SIZE(D, X, T) X(::cemb::CachedTable<T, D>)
#define CEMB_FOR_EACH_CACHED_TABLE_OF(X, T)     \
  X(::cemb::CachedTable<T, ::cemb::kDynamic>) \
  CEMB_FOR_EACH_FEATURE_SIZE(CEMB_CACHED_TABLE_OF_SIZE, X, T)

#define CEMB_FOR_EACH_CACHED_TABLE(X)            \
  CEMB_FOR_EACH_CACHED_TABLE_OF(X, float)        \
  CEMB_FOR_EACH_CACHED_TABLE_OF(X, ::cemb::bfloat16)

#endif  // CEMB_CACHE_INTERNAL_TABLE_TYPES_H_
