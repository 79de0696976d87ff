// The SimpleTable types whose kernels embedding/ compiles: float and
// bfloat16 storage, kDynamic and each specialised feature size
// (internal/feature_sizes.h).
#ifndef CEMB_EMBEDDING_INTERNAL_TABLE_TYPES_H_
#define CEMB_EMBEDDING_INTERNAL_TABLE_TYPES_H_

#include "embedding/internal/feature_sizes.h"
#include "embedding/simple_table.h"

#define CEMB_SIMPLE_TABLE_OF_SIZE(D, X, T) X(::cemb::SimpleTable<T, D>)
#define CEMB_FOR_EACH_SIMPLE_TABLE_OF(X, T)     \
  X(::cemb::SimpleTable<T, ::cemb::kDynamic>) \
  CEMB_FOR_EACH_FEATURE_SIZE(CEMB_SIMPLE_TABLE_OF_SIZE, X, T)

#define CEMB_FOR_EACH_SIMPLE_TABLE(X)            \
  CEMB_FOR_EACH_SIMPLE_TABLE_OF(X, float)        \
  CEMB_FOR_EACH_SIMPLE_TABLE_OF(X, ::cemb::bfloat16)

#endif  // CEMB_EMBEDDING_INTERNAL_TABLE_TYPES_H_
