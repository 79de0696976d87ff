// The generic embedding kernels of ResolvedRowTable (ssd/internal/resolved_rows.h),
// compiled without -m flags: the path of CPUs without AVX2, and the plain
// path tests compare against; as the libraries' generated kernel units
// (cmake/kernels_isa.cc.in) are for their tables.
#define CEMB_KERNELS_ISA_GENERIC
#include "embedding/internal/kernels_impl.h"
#include "ssd/internal/resolved_rows.h"
#define CEMB_RESOLVED_KERNELS(T) CEMB_INSTANTIATE_KERNELS(MakeKernelsGeneric, ::cemb::ssd_internal::ResolvedRowTable<T>)
CEMB_FOR_EACH_ROW_ELEMENT(CEMB_RESOLVED_KERNELS)
#undef CEMB_RESOLVED_KERNELS
