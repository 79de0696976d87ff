// Numbers for people. Sizes: "1.50 GiB", "215.8 MiB", "12.0 KiB", "512 B"
// (binary units, as `model.dram_budget: 6GiB` is written); counts: "1.25M",
// "91.0k", "950"; durations: "1h05m", "2m30s", "7s".
//
//   absl::StrCat("needs ", HumanBytes(bytes), ", ", HumanCount(rate), " samples/s, ETA ", HumanTime(eta_s));
#ifndef CEMB_BASE_HUMAN_H_
#define CEMB_BASE_HUMAN_H_

#include <cmath>
#include <cstdint>
#include <string>

#include "absl/strings/str_format.h"

namespace cemb {

inline std::string HumanBytes(double v) {
  if (v >= 1073741824.0) return absl::StrFormat("%.2f GiB", v / 1073741824.0);
  if (v >= 1048576.0) return absl::StrFormat("%.1f MiB", v / 1048576.0);
  if (v >= 1024.0) return absl::StrFormat("%.1f KiB", v / 1024.0);
  return absl::StrFormat("%.0f B", v);
}

// Decimal units: G, M, and k from 10^4 on.
inline std::string HumanCount(double v) {
  if (v >= 1e9) return absl::StrFormat("%.2fG", v / 1e9);
  if (v >= 1e6) return absl::StrFormat("%.2fM", v / 1e6);
  if (v >= 1e4) return absl::StrFormat("%.1fk", v / 1e3);
  return absl::StrFormat("%.0f", v);
}

// Rounded to the second; "?" for a negative or undefined time.
inline std::string HumanTime(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const int64_t t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600) return absl::StrFormat("%dh%02dm", t / 3600, (t / 60) % 60);
  if (t >= 60) return absl::StrFormat("%dm%02ds", t / 60, t % 60);
  return absl::StrFormat("%ds", t);
}

}  // namespace cemb

#endif  // CEMB_BASE_HUMAN_H_
