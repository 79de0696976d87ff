// The generic kernels of every SimpleTable type. Compiled without -m flags: the path
// of CPUs without AVX2, and the plain path that tests compare against.
#define CEMB_KERNELS_ISA_GENERIC
#include "embedding/internal/kernels_impl.h"
#include "embedding/internal/table_types.h"

#define CEMB_INSTANTIATE(...) CEMB_INSTANTIATE_KERNELS(MakeKernelsGeneric, __VA_ARGS__)
CEMB_FOR_EACH_SIMPLE_TABLE(CEMB_INSTANTIATE)
