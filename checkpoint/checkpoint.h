// Checkpoints: a directory per step, written atomically, with a manifest
// that holds the training state and a checksum of every file.
//
//   <checkpoint_dir>/
//     LATEST                   the name of the newest checkpoint (for people and tools)
//     step-000001000/
//       MANIFEST               see below
//       model/...              whatever the payload writer put there (Dlrm::Save)
//
// MANIFEST is text, one record per line:
//   cemb-checkpoint v1
//   step 1000
//   loader_position cemb-loader-position v1 epoch=0 batch=1000 fingerprint=...
//   state <key> <value>        (any number: seeds, running loss, ...)
//   config <key>=<value>       (TrainConfig::Fingerprint(), one line per key)
//   file <bytes> <checksum> <relative path>
//   end <checksum>             Checksum64 (hex) of every byte before this line
//
// Writing: the payload goes into <checkpoint_dir>/.tmp-step-N-<pid>/, every
// file is checksummed and fsync'd, then MANIFEST is written and fsync'd, the
// directory (and its subdirectories) fsync'd, and the directory renamed to
// step-N; then checkpoint_dir is fsync'd, LATEST replaced the same way, and
// all but the newest `keep` checkpoints removed. A crash at any point leaves
// either the old checkpoints or the new one complete, never a half one under
// a step-N name.
//
// Reading verifies the manifest's own checksum, then every listed file's
// size and checksum (or those a filter selects), and refuses (DataLoss) a
// missing, truncated, grown or corrupt file with a message naming it.
//
// Thread safety: free functions; one writer per directory.
//
//   CheckpointState s{.step = 1000, .loader_position = loader->position().Serialize()};
//   CEMB_ASSIGN_OR_RETURN(std::string path, WriteCheckpoint(dir, s, [&](const std::string& d) {
//     return model->Save(d + "/model"); }, /*keep=*/2));
//   CEMB_ASSIGN_OR_RETURN(std::string latest, LatestCheckpoint(dir));
//   CEMB_ASSIGN_OR_RETURN(CheckpointState r, ReadCheckpoint(latest));
#ifndef CEMB_CHECKPOINT_CHECKPOINT_H_
#define CEMB_CHECKPOINT_CHECKPOINT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cemb {

inline constexpr char kCheckpointManifest[] = "MANIFEST";

struct CheckpointFile {
  std::string name;  // relative to the checkpoint directory
  uint64_t bytes = 0;
  uint64_t checksum = 0;
};

struct CheckpointState {
  int64_t step = 0;             // steps done; training continues with this (0-based) step
  std::string loader_position;  // data::LoaderPosition::Serialize()
  std::map<std::string, std::string> state;  // values without newlines
  std::string config;                        // TrainConfig::Fingerprint()
  std::vector<CheckpointFile> files;         // filled by Write/ReadCheckpoint
};

// "step-000001000".
std::string CheckpointName(int64_t step);

// Writes checkpoint `state.step` under `dir` (created if missing).
// `write_payload(tmp)` writes the files into the directory `tmp` (which
// exists). Returns the checkpoint's path. AlreadyExists when that step's
// checkpoint is already there.
[[nodiscard]] absl::StatusOr<std::string> WriteCheckpoint(
    const std::string& dir, const CheckpointState& state,
    const std::function<absl::Status(const std::string& payload_dir)>& write_payload, int keep);

// The newest step-N directory under `dir`, or NotFound.
[[nodiscard]] absl::StatusOr<std::string> LatestCheckpoint(const std::string& dir);

// The checkpoint that `path` names, for a reader (a predictor): a step-N
// directory (it holds a MANIFEST) as is; a checkpoint directory by the name
// its LATEST file holds (else its newest step-N); a LATEST file by the name
// it holds, beside it. NotFound names the path when none of them is there.
[[nodiscard]] absl::StatusOr<std::string> ResolveCheckpoint(const std::string& path);

// Reads and verifies a checkpoint directory: the manifest, and the size and
// checksum of every listed file for which `verify(name)` is true (all when
// it is empty). Several processes verify only the files each will load.
[[nodiscard]] absl::StatusOr<CheckpointState> ReadCheckpoint(
    const std::string& path, const std::function<bool(const std::string& name)>& verify = {});

// Verifies one of a checkpoint's files, `expected` (its size and checksum
// from the manifest), through a descriptor its reader holds open (O_DIRECT
// or not), never reopening it by path: a predictor that serves a snapshot
// in place checks it in the background while the trainer may delete the
// directory. DataLoss names `path` (truncated, grown, corrupt); Cancelled
// when *stop became true.
[[nodiscard]] absl::Status VerifyOpenFile(int fd, const std::string& path, const CheckpointFile& expected,
                                          const std::atomic<bool>* stop = nullptr);

}  // namespace cemb

#endif  // CEMB_CHECKPOINT_CHECKPOINT_H_
