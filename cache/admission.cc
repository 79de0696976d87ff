#include "cache/admission.h"

namespace cemb {

AdmissionFilter::AdmissionFilter(int threshold, int64_t counters) : threshold_(threshold) {
  uint64_t n = 64;
  while (n < static_cast<uint64_t>(counters)) n <<= 1;
  mask_ = n - 1;
  counts_ = std::make_unique<std::atomic<uint8_t>[]>(2 * n);
  reset();
}

int AdmissionFilter::estimate(int64_t row) const {
  const uint64_t h = Hash(static_cast<uint64_t>(row));
  const uint8_t a = counts_[h & mask_].load(std::memory_order_relaxed);
  const uint8_t b = counts_[(mask_ + 1) + ((h >> 32) & mask_)].load(std::memory_order_relaxed);
  return a < b ? a : b;
}

void AdmissionFilter::age() {
  if (threshold_ <= 1) return;
  for (uint64_t i = 0; i < 2 * (mask_ + 1); ++i) {
    counts_[i].store(static_cast<uint8_t>(counts_[i].load(std::memory_order_relaxed) >> 1), std::memory_order_relaxed);
  }
}

void AdmissionFilter::reset() {
  for (uint64_t i = 0; i < 2 * (mask_ + 1); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

}  // namespace cemb
