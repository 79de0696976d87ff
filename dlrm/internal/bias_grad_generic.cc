// The bias-gradient block built for the baseline ISA, and the driver.
#include <algorithm>

#include "base/parallel.h"
#include "base/status_macros.h"
#include "dlrm/internal/bias_grad_kernel.h"
#include "embedding/cpu.h"

namespace cemb::dlrm::internal {
namespace {

// Below this many elements a layer's sums run on the calling thread.
constexpr int64_t kMinParallelElements = 1 << 15;
// Rows per chunk at least, when narrow layers are split by rows.
constexpr int64_t kMinChunkRows = 128;

int64_t ColumnBlocks(int64_t out) { return (out + kBiasGradCols - 1) / kBiasGradCols; }

int64_t RowChunks(int threads, int64_t n, int64_t out) {
  const int64_t blocks = ColumnBlocks(out);
  if (blocks >= threads || n * out < kMinParallelElements) return 1;
  const int64_t want = (threads + blocks - 1) / blocks;
  return std::clamp<int64_t>(n / kMinChunkRows, 1, want);
}

}  // namespace

void BiasGradBlockGeneric(const BiasGradArgs& a, int64_t r0, int64_t r1, int64_t c0, int64_t c1, float* sums) {
  bias_grad_impl::BiasGradBlockImpl(a, r0, r1, c0, c1, sums);
}

absl::StatusOr<BiasGradBlockFn> BiasGradBlockFor(Isa isa) {
  CEMB_ASSIGN_OR_RETURN(const Isa resolved, ResolveIsa(isa));
  switch (resolved) {
#if defined(CEMB_HAVE_AVX512_KERNELS)
    case Isa::kAvx512:
      return BiasGradBlockAvx512;
#endif
#if defined(CEMB_HAVE_AVX2_KERNELS)
    case Isa::kAvx2:
      return BiasGradBlockAvx2;
#endif
    default:  // ResolveIsa returns only what this build has
      return BiasGradBlockGeneric;
  }
}

int64_t BiasGradScratchFloats(int threads, int64_t out) {
  return std::max<int64_t>(threads, 1) * ColumnBlocks(out) * kBiasGradCols;
}

void BiasGrad(BiasGradBlockFn block, const BiasGradArgs& a, int threads, float* scratch, float* db) {
  const int64_t blocks = ColumnBlocks(a.out);
  const int64_t chunks = RowChunks(threads, a.n, a.out);
  const int64_t items = blocks * chunks;
  // Item i: column block i % blocks, row chunk i / blocks; its sums go to
  // scratch[(chunk * blocks + block) * kBiasGradCols], or straight to db
  // when there is one chunk.
  parallel_for(items, threads, [&](int64_t i) {
    const int64_t b = i % blocks, chunk = i / blocks;
    const int64_t c0 = b * kBiasGradCols, c1 = std::min(a.out, c0 + kBiasGradCols);
    const int64_t r0 = a.n * chunk / chunks, r1 = a.n * (chunk + 1) / chunks;
    block(a, r0, r1, c0, c1, chunks == 1 ? db + c0 : scratch + i * kBiasGradCols);
  });
  if (chunks == 1) return;
  for (int64_t c = 0; c < a.out; ++c) {
    const int64_t b = c / kBiasGradCols, k = c % kBiasGradCols;
    float s = 0;
    for (int64_t chunk = 0; chunk < chunks; ++chunk) s += scratch[(chunk * blocks + b) * kBiasGradCols + k];
    db[c] = s;
  }
}

}  // namespace cemb::dlrm::internal
