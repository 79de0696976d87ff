// The avx2 embedding kernels of ResolvedRowTable (ssd/internal/resolved_rows.h),
// compiled with this ISA's -m flags (ssd/CMakeLists.txt) and called only when the CPU has it,
// as the libraries' generated kernel units (cmake/kernels_isa.cc.in) are for their tables.
#define CEMB_KERNELS_ISA_AVX2
#include "embedding/internal/kernels_impl.h"
#include "ssd/internal/resolved_rows.h"
#define CEMB_RESOLVED_KERNELS(T) CEMB_INSTANTIATE_KERNELS(MakeKernelsAvx2, ::cemb::ssd_internal::ResolvedRowTable<T>)
CEMB_FOR_EACH_ROW_ELEMENT(CEMB_RESOLVED_KERNELS)
#undef CEMB_RESOLVED_KERNELS
