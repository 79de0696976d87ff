// The generic kernels of the benchmark's IndirectTable types, compiled without -m
// flags, exactly as the generated units do for the libraries' tables (cmake/kernels_isa.cc.in).
#define CEMB_KERNELS_ISA_GENERIC
#include "embedding/internal/kernels_impl.h"
#include "bench/indirect_table.h"

#define CEMB_INSTANTIATE(...) CEMB_INSTANTIATE_KERNELS(MakeKernelsGeneric, __VA_ARGS__)
CEMB_FOR_EACH_INDIRECT_TABLE(CEMB_INSTANTIATE)
