// Which kernel instruction sets this CPU (and this build) can run.
#ifndef CEMB_EMBEDDING_CPU_H_
#define CEMB_EMBEDDING_CPU_H_

#include "absl/status/statusor.h"
#include "embedding/types.h"

namespace cemb {

// True when the CPU and the OS support `isa` and this build compiled its
// kernels (CEMB_ENABLE_AVX2 / CEMB_ENABLE_AVX512). kGeneric is always true.
bool IsaAvailable(Isa isa);

// The best available ISA (AVX-512, then AVX2, then generic).
Isa BestIsa();

// Resolves a requested ISA: kAuto becomes the environment's CEMB_ISA
// ("generic", "avx2", "avx512") if set, else BestIsa(). An ISA that is not
// available is an error, never a silent downgrade.
[[nodiscard]] absl::StatusOr<Isa> ResolveIsa(Isa requested);

}  // namespace cemb

#endif  // CEMB_EMBEDDING_CPU_H_
