#include "embedding/validate.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

// The ISA clones below resolve through an ifunc, which runs before a
// sanitizer's runtime is up (ThreadSanitizer's tests crashed at start):
// sanitized builds take the baseline alone.
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define CEMB_NO_ISA_CLONES 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer) || __has_feature(memory_sanitizer)
#define CEMB_NO_ISA_CLONES 1
#endif
#endif
#ifdef CEMB_NO_ISA_CLONES
#define CEMB_ISA_CLONES
#else
#define CEMB_ISA_CLONES [[gnu::target_clones("avx512f", "avx2", "default")]]
#endif

namespace cemb {
namespace {

// Branch-free passes (vectorised by the compiler) over the indices (min
// and max) and the offsets (none below the one before); the slow search for
// the culprit runs only when a pass finds one. Cloned for AVX-512 and AVX2,
// chosen at load time: at the library's SSE2 baseline they took 3.2x as
// long (bench/history/python.md, "The check of a batch").
template <typename Index>
[[gnu::always_inline]] inline bool NonDecreasingOffsets(std::span<const Index> offsets) {
  bool decreases = false;
  for (size_t b = 1; b < offsets.size(); ++b) decreases |= offsets[b] < offsets[b - 1];
  return !decreases;
}
CEMB_ISA_CLONES bool NonDecreasing(std::span<const int32_t> offsets) {
  return NonDecreasingOffsets(offsets);
}
CEMB_ISA_CLONES bool NonDecreasing(std::span<const int64_t> offsets) {
  return NonDecreasingOffsets(offsets);
}
template <typename Index>
[[gnu::always_inline]] inline bool MinMaxInRange(std::span<const Index> indices, int64_t nvectors) {
  Index lo = 0, hi = 0;
  for (Index i : indices) {
    lo = std::min(lo, i);
    hi = std::max(hi, i);
  }
  return lo >= 0 && static_cast<int64_t>(hi) < nvectors;
}
CEMB_ISA_CLONES bool AllInRange(std::span<const int32_t> indices, int64_t nvectors) {
  return MinMaxInRange(indices, nvectors);
}
CEMB_ISA_CLONES bool AllInRange(std::span<const int64_t> indices, int64_t nvectors) {
  return MinMaxInRange(indices, nvectors);
}

std::string RowError(int64_t row, int64_t nvectors) {
  return row < 0 ? absl::StrCat("row ", row, " is negative")
                 : absl::StrCat("row ", row, " >= nvectors ", nvectors);
}

}  // namespace

template <typename Index>
absl::Status validate_bags(const std::string& table, int64_t nvectors, const Bags<Index>& bags) {
  const int64_t n = static_cast<int64_t>(bags.indices.size());
  if (bags.offsets.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("table ", table, ": offsets is empty (need nbags + 1 entries)"));
  }
  if (bags.offsets[0] != 0) {
    return absl::InvalidArgumentError(absl::StrCat("table ", table, ": offsets[0] is ", bags.offsets[0], ", not 0"));
  }
  const bool ordered = NonDecreasing(bags.offsets);
  for (int64_t b = 0; !ordered && b + 1 < static_cast<int64_t>(bags.offsets.size()); ++b) {
    if (bags.offsets[b + 1] < bags.offsets[b]) {
      return absl::InvalidArgumentError(absl::StrCat("table ", table, ", bag ", b, ": offsets decrease (",
                                                     bags.offsets[b], " then ", bags.offsets[b + 1], ")"));
    }
  }
  if (static_cast<int64_t>(bags.offsets.back()) != n) {
    return absl::InvalidArgumentError(absl::StrCat("table ", table, ": offsets end at ", bags.offsets.back(),
                                                   " but there are ", n, " indices"));
  }
  if (!bags.weights.empty() && static_cast<int64_t>(bags.weights.size()) != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("table ", table, ": ", bags.weights.size(), " weights for ", n, " indices"));
  }
  if (AllInRange(bags.indices, nvectors)) return absl::OkStatus();
  for (int64_t b = 0; b < bags.nbags(); ++b) {
    for (int64_t j = bags.offsets[b]; j < bags.offsets[b + 1]; ++j) {
      const int64_t row = bags.indices[j];
      if (row < 0 || row >= nvectors) {
        return absl::OutOfRangeError(absl::StrCat("table ", table, ", bag ", b, ", index ",
                                                  j - bags.offsets[b], ": ", RowError(row, nvectors)));
      }
    }
  }
  return absl::OkStatus();
}

template <typename Index>
absl::Status validate_indices(const std::string& table, int64_t nvectors, std::span<const Index> indices) {
  if (AllInRange(indices, nvectors)) return absl::OkStatus();
  for (size_t i = 0; i < indices.size(); ++i) {
    const int64_t row = indices[i];
    if (row < 0 || row >= nvectors) {
      return absl::OutOfRangeError(
          absl::StrCat("table ", table, ", bag ", i, ", index 0: ", RowError(row, nvectors)));
    }
  }
  return absl::OkStatus();
}

absl::Status validate_matrix(const std::string& table, const char* what, int64_t featuresize, int64_t rows,
                             ConstMatrixView m) {
  if (rows == 0) return absl::OkStatus();
  if (m.data == nullptr || m.rows < rows || m.cols < featuresize || m.ld < m.cols) {
    return absl::InvalidArgumentError(absl::StrCat("table ", table, ": ", what, " is ", m.rows, " x ", m.cols,
                                                   " (ld ", m.ld, "), need at least ", rows, " x ", featuresize));
  }
  return absl::OkStatus();
}

template absl::Status validate_bags(const std::string&, int64_t, const Bags<int32_t>&);
template absl::Status validate_bags(const std::string&, int64_t, const Bags<int64_t>&);
template absl::Status validate_indices(const std::string&, int64_t, std::span<const int32_t>);
template absl::Status validate_indices(const std::string&, int64_t, std::span<const int64_t>);

}  // namespace cemb
