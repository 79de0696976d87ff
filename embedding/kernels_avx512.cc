// The avx512 kernels of every SimpleTable type. Compiled with this ISA's -m flags
// (cmake/helpers.cmake); called only when the CPU has the ISA.
#define CEMB_KERNELS_ISA_AVX512
#include "embedding/internal/kernels_impl.h"
#include "embedding/internal/table_types.h"

#define CEMB_INSTANTIATE(...) CEMB_INSTANTIATE_KERNELS(MakeKernelsAvx512, __VA_ARGS__)
CEMB_FOR_EACH_SIMPLE_TABLE(CEMB_INSTANTIATE)
