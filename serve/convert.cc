#include "serve/convert.h"

#include <filesystem>
#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/file.h"
#include "base/status_macros.h"
#include "base/timer.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/serving_manifest.h"
#include "dlrm/model.h"
#include "serve/predictor.h"
#include "ssd/served_snapshot.h"

namespace cemb::serve {
namespace {

// A table's files in the checkpoint (rows, snapshots, optimizer state):
// the converted snapshot replaces them all.
bool IsTableFile(const std::string& name) { return absl::StartsWith(name, "model/emb_l."); }

absl::Status CopyFile(const std::string& from, const std::string& to) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(to).parent_path(), ec);
  if (ec) return absl::UnknownError(absl::StrCat(to, ": cannot create its directory: ", ec.message()));
  std::filesystem::copy_file(from, to, std::filesystem::copy_options::overwrite_existing, ec);
  if (ec) return absl::UnknownError(absl::StrCat(from, ": cannot copy to ", to, ": ", ec.message()));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ConvertCheckpoint(const std::string& in, const std::string& out,
                                              const ConvertOptions& options) {
  CEMB_ASSIGN_OR_RETURN(std::unique_ptr<Predictor> source,
                        Predictor::Open(in, {.ssd_cache_bytes = options.ssd_cache_bytes, .contexts = 1}));
  // The files served in place are verified in the background: wait for it.
  CEMB_RETURN_IF_ERROR(source->WaitVerified());
  CEMB_ASSIGN_OR_RETURN(const CheckpointState state, ReadCheckpoint(source->checkpoint(), {}));

  ServingManifest manifest = source->manifest();
  manifest.table_dtype = RowFormatName(options.format);
  manifest.table_rows_format = "converted";
  const int64_t dim = manifest.dim;

  CheckpointState next{.step = state.step, .loader_position = state.loader_position, .state = state.state,
                       .config = state.config};
  return WriteCheckpoint(
      out, next,
      [&](const std::string& dir) -> absl::Status {
        for (const CheckpointFile& f : state.files) {
          if (IsTableFile(f.name) || f.name == kServingManifest) continue;
          CEMB_RETURN_IF_ERROR(CopyFile(absl::StrCat(source->checkpoint(), "/", f.name), absl::StrCat(dir, "/", f.name)));
        }
        for (size_t t = 0; t < manifest.table_rows.size(); ++t) {
          const auto rows = static_cast<int64_t>(manifest.table_rows[t]);
          double seconds = 0;
          {
            ScopedSeconds timed(&seconds);
            CEMB_RETURN_IF_ERROR(WriteServedSnapshot(
                absl::StrCat(dir, "/model/", dlrm::Dlrm::TableFileName(static_cast<int>(t), "ssd")),
                {.name = absl::StrCat("emb", t), .nvectors = rows, .dim = dim, .format = options.format},
                [&](int64_t first, std::span<float> values) {
                  return source->ReadRows(static_cast<int>(t), first, values);
                }));
          }
          if (options.log) {
            options.log(absl::StrFormat("dlrm-convert: table %d: %d rows of %d to %s (%d bytes a row, %.1f s)", t,
                                        rows, dim, RowFormatName(options.format),
                                        RowFormatBytes(options.format, dim), seconds));
          }
        }
        return base::WriteFileAtomically(absl::StrCat(dir, "/", kServingManifest),
                                         SerializeServingManifest(manifest));
      },
      /*keep=*/1);
}

}  // namespace cemb::serve
