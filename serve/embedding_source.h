// EmbeddingSource: where a predictor's pooled rows come from, behind one
// call that any number of request threads make at once, each through a
// reader of its own. The predictor knows nothing of how the tables are
// stored. A model's tables are served from two places:
//   - an EmbeddingLayer holding some of them (model-wide ids; in DRAM, a
//     cache over the slow tier, or the training's ssd tier):
//       no ssd table: EmbeddingLayer::LookupShared, no lock, on the
//       caller's threads, each table straight into its columns;
//       ssd tables (loaded from the checkpoint into a new log, as training
//       loads them): each request's rows go through the step protocol
//       (Prefetch, BeginStep, Lookup, EndStep) under one mutex, so lookups
//       of such a layer run one at a time (serialised());
//   - ssd snapshots (a trained table's, or rows converted for serving in
//     a smaller format: embedding/row_format.h) served in place
//     (ssd/snapshot_table.h), read only:
//       a request starts its rows of every such table (hits pinned with no
//       lock, misses submitted with O_DIRECT through io_uring), then
//       finishes them together (SnapshotRequest: its misses of all its
//       tables in flight at once), pools them, releases its pins. Nothing
//       is written;
//   - snapshots converted for serving, read whole into DRAM or a slow
//     tier (ServedTable, ssd/served_snapshot.h): rows in their format, no
//     cache, no lock; or copied to a slow tier with a DRAM cache over it
//     (CachedTable of the format: static, or dynamic with CLOCK eviction
//     beside the readers): a request resolves its rows inside a
//     ReadSection and pools them as stored.
// The kernels read every format's rows as they are stored (never widened).
//
// Thread safety: NewReader and snapshots from any thread; each reader by one
// thread at a time (a predictor gives each inference context its own).
//
//   CEMB_ASSIGN_OR_RETURN(auto source, MakeEmbeddingSource({.layer = &layer, .num_tables = 26, ...}));
//   std::unique_ptr<EmbeddingReader> reader = source->NewReader();
//   CEMB_RETURN_IF_ERROR(reader->Lookup(bags, out, /*threads=*/1));
#ifndef CEMB_SERVE_EMBEDDING_SOURCE_H_
#define CEMB_SERVE_EMBEDDING_SOURCE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cache/cached_table.h"
#include "embedding/row_format.h"
#include "embedding/types.h"
#include "ssd/snapshot_table.h"
#include "tables/embedding_layer.h"

namespace cemb::serve {

class EmbeddingReader {
 public:
  virtual ~EmbeddingReader() = default;
  // out.row(b) columns [t*dim, (t+1)*dim) = the pooled rows of bag b of
  // model table t (EmbeddingLayer::Lookup's layout), on `threads` OpenMP
  // threads of the caller. Errors name the table, bag and index of a bad
  // row; a failed read names the table, its file and the offset.
  [[nodiscard]] virtual absl::Status Lookup(std::span<const Bags<int32_t>> bags, MatrixView out, int threads) = 0;
};

// A model table served from its ssd snapshot: in place, or (resident) read
// whole into DRAM.
struct SnapshotTableSpec {
  int table = 0;              // model-wide id
  std::string path;           // the checkpoint's snapshot file
  int64_t rows = 0;
  int64_t capacity_bytes = 0;  // DRAM for its resident rows (SnapshotTableOptions)
  // Read whole into memory (a snapshot converted for serving only):
  // capacity_bytes is not used, nothing is read while serving. The
  // memory: resident_tier's (DRAM by default; a slow tier: CXL or
  // persistent memory, read there directly).
  bool resident = false;
  TierOptions resident_tier;
  // With resident on a slow tier: the DRAM cache in front of it (its
  // policy kStatic, filled at random once, or kDynamic).
  std::optional<CacheOptions> cache;
};

// A snapshot table served in place: its file (open for the table's life:
// never reopen it by path) and its counters.
struct SnapshotTableInfo {
  int table = 0;  // model-wide id
  std::string path;
  int fd = -1;
  int64_t capacity_rows = 0;
  SnapshotStats stats;
};

// A converted table on a slow tier behind a DRAM cache, and its counters.
struct CachedTableInfo {
  int table = 0;  // model-wide id
  CacheStats stats;
};

struct EmbeddingSourceOptions {
  int num_tables = 0;  // the model's
  int64_t dim = 0;
  // The snapshots' rows: a trained table's (fp32 or bf16, with
  // state_floats per row) or converted for serving (no state).
  RowFormat row_format = RowFormat::kFp32;
  int64_t state_floats = 0;  // per row in the snapshots (the optimizer's)
  // The tables held in a layer (each with its model-wide id; the layer
  // outlives the source and nothing changes it while the source is used),
  // or null when every table is a snapshot.
  EmbeddingLayer* layer = nullptr;
  std::vector<int> layer_ids;  // model-wide id of the layer's table t
  std::vector<SnapshotTableSpec> snapshots;
  int queue_depth = 64;  // of each request's io_uring, per snapshot table
};

class EmbeddingSource {
 public:
  virtual ~EmbeddingSource() = default;
  [[nodiscard]] virtual std::unique_ptr<EmbeddingReader> NewReader() = 0;
  // True when lookups take a lock (a layer with ssd tables, through the
  // step protocol).
  virtual bool serialised() const = 0;
  // The snapshot tables served in place (none when there are none).
  virtual std::vector<SnapshotTableInfo> snapshots() const = 0;
  // The tables behind a DRAM cache, the layer's and the converted ones
  // (none when there are none).
  virtual std::vector<CachedTableInfo> cached() const = 0;
  // One eviction round of each dynamic cache that needs one (as its
  // evictor thread runs, and beside it); the rows freed.
  virtual int64_t EvictCached() = 0;
};

// Every table of the model is either in options.layer or in
// options.snapshots, once. Errors: InvalidArgument for a table held twice
// or by neither; what SnapshotTable::Open says of a snapshot (its shape,
// DataLoss naming the file and offset).
[[nodiscard]] absl::StatusOr<std::unique_ptr<EmbeddingSource>> MakeEmbeddingSource(
    const EmbeddingSourceOptions& options);

}  // namespace cemb::serve

#endif  // CEMB_SERVE_EMBEDDING_SOURCE_H_
