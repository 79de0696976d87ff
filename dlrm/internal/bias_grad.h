// The bias gradient of an MLP layer, fused with its ReLU backward (not API):
// one pass over the layer's output gradient g [n x out] that applies the
// ReLU mask (g * (y > 0), y the layer's output) and sums the columns, instead
// of oneDNN's eltwise backward followed by a second pass for the sums.
//
// Built three times from bias_grad_kernel.h (baseline ISA, AVX2 and AVX-512,
// chosen at run time, as the interaction kernels are); the kernels work on blocks of rows
// and up to kBiasGradCols columns, and BiasGrad() spreads the blocks over the
// OpenMP threads.
#ifndef CEMB_DLRM_INTERNAL_BIAS_GRAD_H_
#define CEMB_DLRM_INTERNAL_BIAS_GRAD_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "embedding/types.h"

namespace cemb::dlrm::internal {

inline constexpr int64_t kBiasGradCols = 64;

// The element type of a gradient or output buffer.
enum class BiasGradType { kFp32, kBf16 };

// Supported with the ReLU (g_in, y, g_out): (fp32, fp32, fp32),
// (bf16, bf16, bf16), and the bf16 MLP's (fp32, bf16, bf16) and
// (fp32, fp32, bf16): an fp32 gradient masked, summed in fp32 before any
// rounding, and written rounded to bf16 (nearest even) for the matmuls.
// Without the ReLU: g_in fp32 or bf16.
struct BiasGradArgs {
  const void* g_in = nullptr;  // [n x out], row-major (bf16 as bit patterns)
  void* g_out = nullptr;       // ReLU: receives g_in * (y > 0) (may be g_in if the types agree); null: no ReLU
  const void* y = nullptr;     // ReLU: the layer's output, same shape
  BiasGradType g_in_type = BiasGradType::kFp32;
  BiasGradType y_type = BiasGradType::kFp32;
  BiasGradType g_out_type = BiasGradType::kFp32;
  int64_t n = 0, out = 0;
};

// Rows [r0, r1), columns [c0, c1) with c1 - c0 <= kBiasGradCols: applies the
// mask (if g_out) and writes the column sums of the (masked) gradient to
// sums[0, c1 - c0).
using BiasGradBlockFn = void (*)(const BiasGradArgs&, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                                 float* sums);
void BiasGradBlockGeneric(const BiasGradArgs&, int64_t r0, int64_t r1, int64_t c0, int64_t c1, float* sums);
void BiasGradBlockAvx2(const BiasGradArgs&, int64_t r0, int64_t r1, int64_t c0, int64_t c1, float* sums);
void BiasGradBlockAvx512(const BiasGradArgs&, int64_t r0, int64_t r1, int64_t c0, int64_t c1, float* sums);

// The block built for `isa` (kAuto resolved by embedding/cpu.h's ResolveIsa:
// CEMB_ISA if set, else the widest this CPU and build have). Errors:
// ResolveIsa's.
absl::StatusOr<BiasGradBlockFn> BiasGradBlockFor(Isa isa);

// Floats of scratch BiasGrad needs for `threads` threads and width `out`.
int64_t BiasGradScratchFloats(int threads, int64_t out);

// db[c] = sum over rows of the (masked) gradient, for every column; the work
// is split into column blocks and, for narrow layers, row chunks whose
// partial sums go to `scratch` (BiasGradScratchFloats) and are added in a
// fixed order, so a run is deterministic for a given thread count.
void BiasGrad(BiasGradBlockFn block, const BiasGradArgs& a, int threads, float* scratch, float* db);

}  // namespace cemb::dlrm::internal

#endif  // CEMB_DLRM_INTERNAL_BIAS_GRAD_H_
