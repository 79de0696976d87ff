// The SimpleTable types whose kernels embedding/ compiles: float and
// bfloat16 storage, each specialised feature size and kDynamic.
#ifndef CEMB_EMBEDDING_INTERNAL_TABLE_TYPES_H_
#define CEMB_EMBEDDING_INTERNAL_TABLE_TYPES_H_

#include "embedding/simple_table.h"

#define CEMB_FOR_EACH_SIMPLE_TABLE_OF(X, T)                                   \
  X(::cemb::SimpleTable<T, ::cemb::kDynamic>)                                 \
  X(::cemb::SimpleTable<T, 16>) X(::cemb::SimpleTable<T, 32>)                 \
  X(::cemb::SimpleTable<T, 64>) X(::cemb::SimpleTable<T, 128>)                \
  X(::cemb::SimpleTable<T, 256>)

#define CEMB_FOR_EACH_SIMPLE_TABLE(X)            \
  CEMB_FOR_EACH_SIMPLE_TABLE_OF(X, float)        \
  CEMB_FOR_EACH_SIMPLE_TABLE_OF(X, ::cemb::bfloat16)

#endif  // CEMB_EMBEDDING_INTERNAL_TABLE_TYPES_H_
