// The generic embedding kernels of ResolvedRowTable (ssd/internal/resolved_rows.h),
// compiled without -m flags: the path of CPUs without AVX2, and the plain
// path tests compare against; as the libraries' generated kernel units
// (cmake/kernels_isa.cc.in) are for their tables.
#define CEMB_KERNELS_ISA_GENERIC
#include "embedding/internal/kernels_impl.h"
#include "ssd/internal/resolved_rows.h"

CEMB_INSTANTIATE_KERNELS(MakeKernelsGeneric, ::cemb::ssd_internal::ResolvedRowTable<float>)
CEMB_INSTANTIATE_KERNELS(MakeKernelsGeneric, ::cemb::ssd_internal::ResolvedRowTable<::cemb::bfloat16>)
