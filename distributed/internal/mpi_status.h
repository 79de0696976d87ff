// MPI return codes as absl::Status, for the units of distributed/ (not API).
#ifndef CEMB_DISTRIBUTED_INTERNAL_MPI_STATUS_H_
#define CEMB_DISTRIBUTED_INTERNAL_MPI_STATUS_H_

#include <mpi.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace cemb::distributed::internal {

// OK for MPI_SUCCESS, else Internal("<call>: <MPI_Error_string>").
inline absl::Status MpiStatus(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return absl::OkStatus();
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) len = 0;
  // Debian's Abseil has its own string_view, not std::string_view.
  return absl::InternalError(absl::StrCat(call, ": ", len > 0 ? absl::string_view(text, len) : "MPI error",
                                          " (code ", rc, ")"));
}

}  // namespace cemb::distributed::internal

#endif  // CEMB_DISTRIBUTED_INTERNAL_MPI_STATUS_H_
