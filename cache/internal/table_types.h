// The CachedTable types whose kernels cache/ compiles (cache/kernels_<isa>.cc):
// float and bfloat16 storage, each specialised feature size and kDynamic.
// Their non-inline members (the miss path, flushes) are instantiated once, in
// cache/cached_table.cc (compiled without -m flags), and declared extern in
// cached_table.h, so no ISA translation unit emits a copy the linker could
// pick for another path.
#ifndef CEMB_CACHE_INTERNAL_TABLE_TYPES_H_
#define CEMB_CACHE_INTERNAL_TABLE_TYPES_H_

#define CEMB_FOR_EACH_CACHED_TABLE_OF(X, T)                                   \
  X(::cemb::CachedTable<T, ::cemb::kDynamic>)                                 \
  X(::cemb::CachedTable<T, 16>) X(::cemb::CachedTable<T, 32>)                 \
  X(::cemb::CachedTable<T, 64>) X(::cemb::CachedTable<T, 128>)                \
  X(::cemb::CachedTable<T, 256>)

#define CEMB_FOR_EACH_CACHED_TABLE(X)            \
  CEMB_FOR_EACH_CACHED_TABLE_OF(X, float)        \
  CEMB_FOR_EACH_CACHED_TABLE_OF(X, ::cemb::bfloat16)

#endif  // CEMB_CACHE_INTERNAL_TABLE_TYPES_H_
