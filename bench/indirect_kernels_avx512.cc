// The avx512 kernels of the benchmark's IndirectTable types, compiled with this
// ISA's -m flags (bench/CMakeLists.txt), exactly as the libraries'
// generated kernel units (cmake/kernels_isa.cc.in) do for their tables; called only when the CPU has the ISA.
#define CEMB_KERNELS_ISA_AVX512
#include "embedding/internal/kernels_impl.h"
#include "bench/indirect_table.h"

#define CEMB_INSTANTIATE(...) CEMB_INSTANTIATE_KERNELS(MakeKernelsAvx512, __VA_ARGS__)
CEMB_FOR_EACH_INDIRECT_TABLE(CEMB_INSTANTIATE)
