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
#include "embedding/types.h"

namespace cemb {

// offsets: nbags + 1 entries, offsets[0] == 0, non-decreasing, last ==
// indices.size(); every index in [0, nvectors); weights empty or one per index.
template <typename Index>
[[nodiscard]] absl::Status validate_bags(const std::string& table, int64_t nvectors, const Bags<Index>& bags);

// Every index in [0, nvectors) (a non-reducing lookup: index i is bag i).
template <typename Index>
[[nodiscard]] absl::Status validate_indices(const std::string& table, int64_t nvectors,
                                            std::span<const Index> indices);

// `out` has at least `rows` rows and `featuresize` columns, ld >= cols.
[[nodiscard]] absl::Status validate_matrix(const std::string& table, const char* what,
                                           int64_t featuresize, int64_t rows, ConstMatrixView out);

}  // namespace cemb

#endif  // CEMB_EMBEDDING_VALIDATE_H_
