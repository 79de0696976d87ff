// ConvertCheckpoint: a trained model's tables converted for serving into
// smaller rows (embedding/row_format.h: fp32, bf16, fp16, int8 row-wise in
// FBGEMM's layout), written as a new checkpoint that a Predictor and
// dlrm-serve open like any other (docs/serving.md, "Smaller rows for
// serving"; the command is dlrm-convert).
//
// The new checkpoint (<out>/step-N, N the source's step, and <out>/LATEST;
// written atomically with its MANIFEST of checksums, checkpoint/
// checkpoint.h) holds the source's dense part and other files as they are,
// each table t as model/emb_l.<t>.ssd, a snapshot of every row in the
// format (ssd/served_snapshot.h: rows packed whole into 4 KiB blocks, no
// optimizer state), and SERVING with table_dtype=<format> and
// table_rows_format=converted. Where the source's tables trained (its
// table_storage) stays where they are served: ssd tables in place from the
// drive, the others read whole into DRAM; they are never widened to fp32.
//
// The rows are read through a Predictor of the source (its lookups: every
// storage kind, checksums verified first), so a row converts exactly as
// the model scores it. DRAM: the source's tables not on ssd, plus
// ssd_cache_bytes.
//
//   CEMB_ASSIGN_OR_RETURN(std::string path, ConvertCheckpoint("runs/ck", "runs/ck-int8",
//                                                             {.format = RowFormat::kInt8}));
#ifndef CEMB_SERVE_CONVERT_H_
#define CEMB_SERVE_CONVERT_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "embedding/row_format.h"

namespace cemb::serve {

struct ConvertOptions {
  RowFormat format = RowFormat::kInt8;
  // DRAM for reading the source's tables that trained on ssd.
  int64_t ssd_cache_bytes = int64_t{1} << 30;
  // A line per table converted; none when empty.
  std::function<void(std::string_view line)> log;
};

// Returns the new checkpoint's step directory. Errors: the Predictor's
// (NotFound, DataLoss naming a corrupt file, FailedPrecondition for a
// checkpoint without SERVING); AlreadyExists when `out` holds that step;
// a write's (naming the file: a full disk leaves no checkpoint under the
// step's name).
[[nodiscard]] absl::StatusOr<std::string> ConvertCheckpoint(const std::string& in, const std::string& out,
                                                            const ConvertOptions& options);

}  // namespace cemb::serve

#endif  // CEMB_SERVE_CONVERT_H_
