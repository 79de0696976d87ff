#include "embedding/cpu.h"

#include <cpuid.h>

#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace cemb {
namespace {

// F16C (vcvtph2ps: the fp16 rows' loads), from CPUID leaf 1, ECX bit 29:
// clang 14's __builtin_cpu_supports does not know "f16c".
[[maybe_unused]] bool HasF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}

}  // namespace

bool IsaAvailable(Isa isa) {
  switch (isa) {
    case Isa::kAuto:
    case Isa::kGeneric:
      return true;
    case Isa::kAvx2:
#if defined(CEMB_HAVE_AVX2_KERNELS)
      // libgcc's checks include the OS's XSAVE support of the registers.
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && HasF16c();
#else
      return false;
#endif
    case Isa::kAvx512:
#if defined(CEMB_HAVE_AVX512_KERNELS)
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("fma") && HasF16c();
#else
      return false;
#endif
  }
  return false;
}

Isa BestIsa() {
  if (IsaAvailable(Isa::kAvx512)) return Isa::kAvx512;
  if (IsaAvailable(Isa::kAvx2)) return Isa::kAvx2;
  return Isa::kGeneric;
}

absl::StatusOr<Isa> ResolveIsa(Isa requested) {
  if (requested == Isa::kAuto) {
    const char* env = std::getenv("CEMB_ISA");
    if (env == nullptr || *env == '\0') return BestIsa();
    const std::string name = env;
    if (name == "generic") {
      requested = Isa::kGeneric;
    } else if (name == "avx2") {
      requested = Isa::kAvx2;
    } else if (name == "avx512") {
      requested = Isa::kAvx512;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("CEMB_ISA='", name, "': expected generic, avx2 or avx512"));
    }
  }
  if (!IsaAvailable(requested)) {
    return absl::FailedPreconditionError(
        absl::StrCat("the ", IsaName(requested), " kernels cannot run here (CPU or build lacks them)"));
  }
  return requested;
}

}  // namespace cemb
