#include "train/checkpoint.h"

#include <filesystem>

#include "base/status_macros.h"

namespace cemb::train {

absl::StatusOr<std::string> WriteCheckpointOnRanks(
    const std::string& dir, const CheckpointState& state, const distributed::Comm* comm,
    const std::function<absl::Status(const std::string& payload_dir)>& write_mine, int keep) {
  if (comm == nullptr || comm->size() == 1) return WriteCheckpoint(dir, state, write_mine, keep);
  if (comm->rank() != 0) {
    std::string payload_dir;  // empty: rank 0 failed before it had one
    CEMB_RETURN_IF_ERROR(comm->Broadcast(&payload_dir, 0));
    if (!payload_dir.empty()) CEMB_RETURN_IF_ERROR(comm->AgreeOnStatus(write_mine(payload_dir)));
    CEMB_RETURN_IF_ERROR(comm->AgreeOnStatus(absl::OkStatus()));  // rank 0's manifest and rename
    return (std::filesystem::path(dir) / CheckpointName(state.step)).string();
  }
  bool sent = false;
  absl::Status payload;
  absl::StatusOr<std::string> written = WriteCheckpoint(
      dir, state,
      [&](const std::string& payload_dir) -> absl::Status {
        std::string name = payload_dir;
        CEMB_RETURN_IF_ERROR(comm->Broadcast(&name, 0));
        sent = true;
        payload = comm->AgreeOnStatus(write_mine(payload_dir));
        return payload;
      },
      keep);
  if (!sent) {
    std::string none;
    CEMB_RETURN_IF_ERROR(comm->Broadcast(&none, 0));
  }
  // A failed payload is known everywhere already; what failed after it (the
  // manifest, the rename) is agreed here.
  if (!sent || payload.ok()) CEMB_RETURN_IF_ERROR(comm->AgreeOnStatus(written.status()));
  return written;
}

}  // namespace cemb::train
