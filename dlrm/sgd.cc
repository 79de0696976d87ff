#include "dlrm/sgd.h"

#include <cstddef>

namespace cemb::dlrm {

void SgdUpdate(std::span<float> w, std::span<const float> g, float lr) {
  float* __restrict wp = w.data();
  const float* __restrict gp = g.data();
  const size_t n = w.size();
#pragma omp simd
  for (size_t i = 0; i < n; ++i) wp[i] -= lr * gp[i];
}

void SplitSgdUpdate(std::span<uint16_t> hi, std::span<uint16_t> lo,
                    std::span<const float> g, float lr) {
  uint16_t* __restrict hp = hi.data();
  uint16_t* __restrict lp = lo.data();
  const float* __restrict gp = g.data();
  const size_t n = hi.size();
#pragma omp simd
  for (size_t i = 0; i < n; ++i) {
    float w = CombineSplit(hp[i], lp[i]);
    w -= lr * gp[i];
    SplitFloat(w, hp[i], lp[i]);
  }
}

}  // namespace cemb::dlrm
