// The per-ISA range functions of the dot interaction (see interaction.h for
// the math). Single-threaded; Interaction splits the batch. Not API.
#ifndef CEMB_DLRM_INTERNAL_INTERACTION_ROWS_H_
#define CEMB_DLRM_INTERNAL_INTERACTION_ROWS_H_

#include <cstdint>

namespace cemb::dlrm::internal {

struct DotRowsArgs {
  int64_t features = 0;  // F
  int64_t dim = 0;       // D
  bool self = false;
  const float* dense = nullptr;
  int64_t dense_ld = 0;
  const float* sparse = nullptr;
  int64_t sparse_ld = 0;
  float* out = nullptr;  // forward
  int64_t out_ld = 0;
  const float* d_out = nullptr;  // backward
  int64_t d_out_ld = 0;
  float* d_dense = nullptr;
  int64_t d_dense_ld = 0;
  float* d_sparse = nullptr;
  int64_t d_sparse_ld = 0;
};

// Floats of scratch one thread needs for either direction.
inline int64_t DotScratchFloats(int64_t features, int64_t dim) {
  const int64_t fpad = (features + 15) / 16 * 16;
  return dim * fpad + features * dim + dim + 16;  // forward: xt, x; backward: x, acc
}

void DotForwardRowsGeneric(const DotRowsArgs& a, int64_t begin, int64_t end, float* scratch);
void DotBackwardRowsGeneric(const DotRowsArgs& a, int64_t begin, int64_t end, float* scratch);
void DotForwardRowsAvx2(const DotRowsArgs& a, int64_t begin, int64_t end, float* scratch);
void DotBackwardRowsAvx2(const DotRowsArgs& a, int64_t begin, int64_t end, float* scratch);
void DotForwardRowsAvx512(const DotRowsArgs& a, int64_t begin, int64_t end, float* scratch);
void DotBackwardRowsAvx512(const DotRowsArgs& a, int64_t begin, int64_t end, float* scratch);

}  // namespace cemb::dlrm::internal

#endif  // CEMB_DLRM_INTERNAL_INTERACTION_ROWS_H_
