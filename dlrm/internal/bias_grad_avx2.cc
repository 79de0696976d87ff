// The bias-gradient block built for AVX2 + FMA (this file gets the AVX2 flags).
#include "dlrm/internal/bias_grad_kernel.h"

namespace cemb::dlrm::internal {

void BiasGradBlockAvx2(const BiasGradArgs& a, int64_t r0, int64_t r1, int64_t c0, int64_t c1, float* sums) {
  bias_grad_impl::BiasGradBlockImpl(a, r0, r1, c0, c1, sums);
}

}  // namespace cemb::dlrm::internal
