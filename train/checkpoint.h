// Checkpoints written by several ranks: WriteCheckpointOnRanks over the one
// checkpoint format of checkpoint/checkpoint.h (a directory per step, its
// MANIFEST, LATEST), which a predictor reads without MPI.
//
// Thread safety: free functions; one writer per directory.
//
//   CEMB_ASSIGN_OR_RETURN(std::string path, WriteCheckpointOnRanks(dir, s, comm, [&](const std::string& d) {
//     return model->Save(d + "/model"); }, /*keep=*/2));
#ifndef CEMB_TRAIN_CHECKPOINT_H_
#define CEMB_TRAIN_CHECKPOINT_H_

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "checkpoint/checkpoint.h"
#include "distributed/comm.h"

namespace cemb::train {

// WriteCheckpoint by every rank of `comm` (nullptr: one process, which is
// WriteCheckpoint itself): rank 0 makes the payload directory and sends its
// name to the others; every rank's `write_mine(payload_dir)` writes its own
// files there (rank 0's the model's shared part and its tables, the others'
// their tables); the checkpoint is renamed into place only when every
// rank's writes succeeded. Collective: the same status on every rank (a
// failure names the lowest failing rank), and the checkpoint's path.
[[nodiscard]] absl::StatusOr<std::string> WriteCheckpointOnRanks(
    const std::string& dir, const CheckpointState& state, const distributed::Comm* comm,
    const std::function<absl::Status(const std::string& payload_dir)>& write_mine, int keep);

}  // namespace cemb::train

#endif  // CEMB_TRAIN_CHECKPOINT_H_
