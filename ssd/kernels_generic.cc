// The generic kernels of every SsdTable type. Compiled without -m flags: the path of CPUs without AVX2.
#define CEMB_KERNELS_ISA_GENERIC
#include "embedding/internal/kernels_impl.h"
#include "ssd/ssd_table.h"

#define CEMB_INSTANTIATE(...) CEMB_INSTANTIATE_KERNELS(MakeKernelsGeneric, __VA_ARGS__)
CEMB_FOR_EACH_SSD_TABLE(CEMB_INSTANTIATE)
