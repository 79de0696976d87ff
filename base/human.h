// Sizes for people: "1.50 GiB", "215.8 MiB", "12.0 KiB", "512 B" (binary
// units, as `model.dram_budget: 6GiB` is written).
//
//   absl::StrCat("needs ", HumanBytes(bytes));
#ifndef CEMB_BASE_HUMAN_H_
#define CEMB_BASE_HUMAN_H_

#include <string>

#include "absl/strings/str_format.h"

namespace cemb {

inline std::string HumanBytes(double v) {
  if (v >= 1073741824.0) return absl::StrFormat("%.2f GiB", v / 1073741824.0);
  if (v >= 1048576.0) return absl::StrFormat("%.1f MiB", v / 1048576.0);
  if (v >= 1024.0) return absl::StrFormat("%.1f KiB", v / 1024.0);
  return absl::StrFormat("%.0f B", v);
}

}  // namespace cemb

#endif  // CEMB_BASE_HUMAN_H_
