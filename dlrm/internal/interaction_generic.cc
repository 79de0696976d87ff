// The dot-interaction kernels built for the baseline ISA.
#include "dlrm/internal/interaction_kernel.h"

namespace cemb::dlrm::internal {

void DotForwardRowsGeneric(const DotRowsArgs& a, int64_t begin, int64_t end, float* scratch) {
  DotForwardRowsImpl(a, begin, end, scratch);
}
void DotBackwardRowsGeneric(const DotRowsArgs& a, int64_t begin, int64_t end, float* scratch) {
  DotBackwardRowsImpl(a, begin, end, scratch);
}

}  // namespace cemb::dlrm::internal
