// The generic kernels of the benchmark's IndirectTable types, compiled without -m
// flags, exactly as embedding/kernels_generic.cc does for SimpleTable.
#define CEMB_KERNELS_ISA_GENERIC
#include "embedding/internal/kernels_impl.h"
#include "bench/indirect_table.h"

#define CEMB_INSTANTIATE(...) CEMB_INSTANTIATE_KERNELS(MakeKernelsGeneric, __VA_ARGS__)
CEMB_FOR_EACH_INDIRECT_TABLE(CEMB_INSTANTIATE)
