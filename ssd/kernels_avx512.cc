// The avx512 kernels of every SsdTable type. Compiled with this ISA's -m flags
// (cmake/helpers.cmake); called only when the CPU has the ISA.
#define CEMB_KERNELS_ISA_AVX512
#include "embedding/internal/kernels_impl.h"
#include "ssd/ssd_table.h"

#define CEMB_INSTANTIATE(...) CEMB_INSTANTIATE_KERNELS(MakeKernelsAvx512, __VA_ARGS__)
CEMB_FOR_EACH_SSD_TABLE(CEMB_INSTANTIATE)
