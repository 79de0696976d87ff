// The dot-interaction kernels built for AVX2 + FMA (this file gets the AVX2 flags).
#include "dlrm/internal/interaction_kernel.h"

namespace cemb::dlrm::internal {

void DotForwardRowsAvx2(const DotRowsArgs& a, int64_t begin, int64_t end, float* scratch) {
  DotForwardRowsImpl(a, begin, end, scratch);
}
void DotBackwardRowsAvx2(const DotRowsArgs& a, int64_t begin, int64_t end, float* scratch) {
  DotBackwardRowsImpl(a, begin, end, scratch);
}

}  // namespace cemb::dlrm::internal
