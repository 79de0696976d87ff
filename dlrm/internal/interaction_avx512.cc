// The dot-interaction kernels built for AVX-512 (this file gets the AVX-512 flags).
#include "dlrm/internal/interaction_kernel.h"

namespace cemb::dlrm::internal {

void DotForwardRowsAvx512(const DotRowsArgs& a, int64_t begin, int64_t end, float* scratch) {
  DotForwardRowsImpl(a, begin, end, scratch);
}
void DotBackwardRowsAvx512(const DotRowsArgs& a, int64_t begin, int64_t end, float* scratch) {
  DotBackwardRowsImpl(a, begin, end, scratch);
}

}  // namespace cemb::dlrm::internal
