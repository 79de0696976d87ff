// Validation of kernel inputs, done once at the API boundary; the kernels
// themselves check nothing. Every message names the table, the bag, the
// position in the bag and the bad value:
//   "table t7, bag 12, index 3: row 1048576 >= nvectors 1048576"
#ifndef CEMB_EMBEDDING_VALIDATE_H_
#define CEMB_EMBEDDING_VALIDATE_H_

#include <cstdint>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "embedding/types.h"

namespace cemb {

// offsets: nbags + 1 entries, offsets[0] == 0, non-decreasing, last ==
// indices.size(); every index in [0, nvectors); weights empty or one per index.
template <typename Index>
[[nodiscard]] absl::Status validate_bags(const std::string& table, int64_t nvectors, const Bags<Index>& bags);

// Bags that validate_bags passed for a table of nvectors() rows. Only
// CheckBags makes one, so code that takes CheckedBags (Ensemble, the
// layer's step) checks them no more: the type says they were. It views the
// caller's arrays, as Bags does: REQUIRES they stay valid and unchanged
// while it is used.
template <typename Index>
class CheckedBags {
 public:
  const Bags<Index>& bags() const { return bags_; }
  int64_t nvectors() const { return nvectors_; }  // the rows they were checked against
  int64_t nbags() const { return bags_.nbags(); }

 private:
  template <typename I>
  friend absl::StatusOr<CheckedBags<I>> CheckBags(const std::string& table, int64_t nvectors, const Bags<I>& bags);
  CheckedBags(const Bags<Index>& bags, int64_t nvectors) : bags_(bags), nvectors_(nvectors) {}

  Bags<Index> bags_;
  int64_t nvectors_ = 0;
};

// validate_bags, and on success the bags as CheckedBags.
template <typename Index>
[[nodiscard]] absl::StatusOr<CheckedBags<Index>> CheckBags(const std::string& table, int64_t nvectors,
                                                           const Bags<Index>& bags) {
  if (absl::Status s = validate_bags(table, nvectors, bags); !s.ok()) return s;
  return CheckedBags<Index>(bags, nvectors);
}

// Every index in [0, nvectors) (a non-reducing lookup: index i is bag i).
template <typename Index>
[[nodiscard]] absl::Status validate_indices(const std::string& table, int64_t nvectors,
                                            std::span<const Index> indices);

// `out` has at least `rows` rows and `featuresize` columns, ld >= cols.
[[nodiscard]] absl::Status validate_matrix(const std::string& table, const char* what,
                                           int64_t featuresize, int64_t rows, ConstMatrixView out);

}  // namespace cemb

#endif  // CEMB_EMBEDDING_VALIDATE_H_
