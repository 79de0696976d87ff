// The generic kernels of every CachedTable type. Compiled without -m flags: the path of CPUs without AVX2.
#define CEMB_KERNELS_ISA_GENERIC
#include "embedding/internal/kernels_impl.h"
#include "cache/cached_table.h"

#define CEMB_INSTANTIATE(...) CEMB_INSTANTIATE_KERNELS(MakeKernelsGeneric, __VA_ARGS__)
CEMB_FOR_EACH_CACHED_TABLE(CEMB_INSTANTIATE)
