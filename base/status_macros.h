// Status propagation macros over absl::Status / absl::StatusOr (Abseil
// 2022-06 has none public), and WithPrefix: an error that names who had it.
//
//   CEMB_RETURN_IF_ERROR(table.Save(path));
//   CEMB_ASSIGN_OR_RETURN(Region r, Region::Allocate(tier, bytes));
//   return base::WithPrefix(name, out.Commit());   // "emb3: <path>: cannot ..."
#ifndef CEMB_BASE_STATUS_MACROS_H_
#define CEMB_BASE_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

#define CEMB_RETURN_IF_ERROR(expr)                  \
  do {                                              \
    ::absl::Status cemb_status_ = (expr);           \
    if (!cemb_status_.ok()) return cemb_status_;    \
  } while (0)

#define CEMB_STATUS_CONCAT_INNER_(a, b) a##b
#define CEMB_STATUS_CONCAT_(a, b) CEMB_STATUS_CONCAT_INNER_(a, b)

#define CEMB_ASSIGN_OR_RETURN(lhs, expr) \
  CEMB_ASSIGN_OR_RETURN_IMPL_(CEMB_STATUS_CONCAT_(cemb_statusor_, __LINE__), lhs, expr)

#define CEMB_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()

namespace cemb::base {

// `s` with "<who>: " before its message (the same code); OK stays OK.
inline absl::Status WithPrefix(absl::string_view who, const absl::Status& s) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(who, ": ", s.message()));
}

}  // namespace cemb::base

#endif  // CEMB_BASE_STATUS_MACROS_H_
