// EmbeddingLayer: a set of embedding tables (a DLRM's, or a service's),
// each stored as its StorageConfig says (tables/storage.h: a SimpleTable in
// DRAM, a SimpleTable on the slow tier, a CachedTable with the static or
// dynamic policy, or an SsdTable whose rows live in a file), looked up and
// updated together by one Ensemble.
//
// All tables share the feature size `dim` (a DLRM's dot interaction needs it).
// Lookup writes table t's pooled rows into columns [t*dim, (t+1)*dim) of one
// [batch x T*dim] matrix, which is the interaction's input as is; Update
// takes the gradient in the same layout, builds each table's update plan
// from the same bags, and applies fused SGD or row-wise AdaGrad. A bag is
// pooled by its sum or its mean (options.pooling, every table alike). A
// batch's bags are checked once: an ssd table's by Prefetch, which also
// makes its update plan (the plan's distinct rows are the rows to pin), the
// others' by Lookup; Update checks and plans only what was not (bags are
// matched by their spans: the same spans must hold the same values
// throughout). A caller that checks its bags itself (bags_checked) has the
// layer check none of them.
//
// The step (tables/step_cycle.h drives it; one owner):
//   Prefetch(id, t, bags)   ssd tables: pin batch id's rows, start their reads
//   BeginStep(id)           ssd tables: wait for batch id's reads; open the
//                           cached tables' step scopes (a flush inside aborts
//                           when check_lifetime is on)
//   Lookup ... Update       REQUIRES: the bags Prefetch(id, ...) had
//   EndStep(id)             close the scopes, unpin batch id, flush full caches
// A step that skips Prefetch reaches an ssd row through its synchronous miss
// path: correct single-threaded, but a concurrent miss may evict an unpinned
// row another thread is reading, so multi-threaded steps must prefetch.
//
// Plan once: tables, kernels (per table, by ISA and dim), AdaGrad state and
// every buffer are made at Create(); Lookup/Update allocate nothing in steady
// state.
// Thread safety: one caller at a time; the work itself runs on
// `threads` OpenMP threads. The exception: Prefetch of a batch that the
// current step does not use may come from another thread (StepCycle's
// prefetcher) while Lookup/Update run, but not during Save, Load, Sync,
// ReadRow or WriteRow.
//
//   CEMB_ASSIGN_OR_RETURN(auto layer, EmbeddingLayer::Create({.dim = 16, .tables = specs}));
//   CEMB_RETURN_IF_ERROR(layer->Prefetch(k, t, bags[t]));          // each table t
//   CEMB_RETURN_IF_ERROR(layer->BeginStep(k).status());
//   CEMB_RETURN_IF_ERROR(layer->Lookup(bags, emb));                 // emb: [batch x T*16]
//   ... backward ...
//   CEMB_RETURN_IF_ERROR(layer->Update(bags, d_emb, lr));
//   CEMB_RETURN_IF_ERROR(layer->EndStep(k).status());
#ifndef CEMB_TABLES_EMBEDDING_LAYER_H_
#define CEMB_TABLES_EMBEDDING_LAYER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/enum_names.h"
#include "embedding/kernels.h"
#include "embedding/types.h"
#include "tables/storage.h"

namespace cemb {

struct EmbeddingTableSpec {
  int64_t rows = 0;
  // The table's number in the model: its name "emb<id>", its seed (seed +
  // id) and its files ("<prefix><id>.rows", ...). -1: its position in the
  // layer. A layer that holds some of a model's tables (one rank's)
  // gives each its model-wide number, so that every rank initialises, saves
  // and loads a table as a single process does.
  int id = -1;
  // kind (dram, simple, static, dynamic, ssd), slow tier, cache sizes; ssd:
  // capacity_bytes and the directory (init_seed is set from `seed`).
  StorageConfig storage;
};

// The tables' optimizer (embedding/types.h's UpdateRule, by name): sgd;
// rowwise_adagrad, one accumulator per row in DRAM (4 bytes a row, saved as
// "<t>.adagrad.npy"); adagrad, element-wise as MLPerf's DLRM-DCNv2 reference
// trains (torch.optim.Adagrad, FBGEMM's EXACT_ADAGRAD), one fp32
// accumulator per element stored with its row wherever the row lives.
enum class EmbeddingOptimizer { kSgd, kRowwiseAdagrad, kAdagrad };
inline constexpr EnumName<EmbeddingOptimizer> kEmbeddingOptimizerNames[] = {
    {EmbeddingOptimizer::kSgd, "sgd"},
    {EmbeddingOptimizer::kRowwiseAdagrad, "rowwise_adagrad"},
    {EmbeddingOptimizer::kAdagrad, "adagrad"}};
inline const char* EmbeddingOptimizerName(EmbeddingOptimizer o) { return NameOf(kEmbeddingOptimizerNames, o); }

// fp32 optimizer-state values a table keeps with each row of `dim`
// features (TableOptions::state_floats): element-wise AdaGrad's `dim`, else 0.
inline int64_t RowStateFloats(int64_t dim, EmbeddingOptimizer optimizer) {
  return optimizer == EmbeddingOptimizer::kAdagrad ? dim : 0;
}
// The bytes of one row wherever it is stored (DRAM, a cache slot, the ssd
// log, a checkpoint): its features and the state kept with it. Row-wise
// AdaGrad's accumulators are apart, in DRAM: RowwiseStateBytes.
inline int64_t EmbeddingRowBytes(int64_t dim, bool bf16_rows, EmbeddingOptimizer optimizer) {
  return dim * (bf16_rows ? 2 : 4) + RowStateFloats(dim, optimizer) * 4;
}
inline int64_t RowwiseStateBytes(EmbeddingOptimizer optimizer) {
  return optimizer == EmbeddingOptimizer::kRowwiseAdagrad ? 4 : 0;
}

// The batch ids of the step (Prefetch, BeginStep, EndStep), kept apart by
// range, so that batches of different callers never share one: training
// batches count from 0 (the trainer's steps, the Python module's batches),
// evaluation batches from kEvalBatchIds, and the layer's own LoadRows
// chunks from kLoadBatchIds.
inline constexpr int64_t kLoadBatchIds = int64_t{1} << 61;
inline constexpr int64_t kEvalBatchIds = int64_t{1} << 62;

struct EmbeddingLayerOptions {
  int64_t dim = 16;
  std::vector<EmbeddingTableSpec> tables;
  bool bf16_rows = false;  // bfloat16 storage (fp32 arithmetic)
  // Every table's bags pool their rows' sum, or their mean (kMean: the sum
  // times 1/|bag|, an empty bag a zero row); Update then scales each value's
  // gradient by the same 1/|bag| (nn.EmbeddingBag's mode "mean").
  Pooling pooling = Pooling::kSum;
  EmbeddingOptimizer optimizer = EmbeddingOptimizer::kSgd;
  float adagrad_eps = 1e-8f;
  Store update_store = Store::kStandard;
  int threads = 0;  // 0: all
  uint64_t seed = 1;  // InitUniform seed of table t: seed + its id
  KernelOptions kernels;
  // The caller checks every batch's bags as validate_bags does (offsets from
  // 0, non-decreasing, ending at the indices' count; every index below its
  // table's rows; weights none or one per index) before it hands them to
  // Prefetch, Lookup or Update, with messages in its own terms: the layer
  // then checks only the output's and the gradient's shapes. The Python
  // collection does (python/collection.cc converts and checks each batch).
  // REQUIRES: no bags reach the layer unchecked (an index out of range would
  // be read and written out of bounds).
  bool bags_checked = false;
  // Lines about long copies (an ssd table's snapshot in Save and Load,
  // "emb0: snapshot 12.3 of 40.0 GiB", every few seconds); none when empty.
  std::function<void(std::string_view line)> progress;
};

// What a table is and how its cache did, for the end-of-run report.
struct TableReport {
  int id = 0;          // EmbeddingTableSpec::id
  int64_t rows = 0;
  std::string name;
  std::string storage;  // "dram", "simple", "static", "dynamic", "ssd"
  std::string kernel;   // TableKernels::description()
  bool cached = false;
  CacheStats stats;     // meaningful when cached
  bool ssd = false;
  SsdStats ssd_stats;   // meaningful when ssd
  int64_t row_bytes = 0;
  int64_t dram_bytes = 0;  // ssd: the slot pool
};

// Table reports as bytes, for the ranks of one job to exchange at the end of
// a run (each rank reports the tables it owns). The statistics travel as
// their in-memory bytes: every rank runs the same build. Decode refuses
// bytes that do not parse (InvalidArgument), never reads past them.
std::string EncodeTableReports(std::span<const TableReport> reports);
[[nodiscard]] absl::StatusOr<std::vector<TableReport>> DecodeTableReports(std::string_view bytes);

class EmbeddingLayer {
 public:
  // Creates and initialises the tables (uniform ±sqrt(1/rows) with seed + t;
  // static caches are then filled with random rows). Errors name the table.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<EmbeddingLayer>> Create(const EmbeddingLayerOptions& options);
  virtual ~EmbeddingLayer() = default;

  virtual int num_tables() const = 0;
  virtual int64_t dim() const = 0;
  virtual int64_t rows(int table) const = 0;

  // out.row(b) columns [t*dim, (t+1)*dim) = bag b of table t pooled (its
  // rows' sum or mean, options.pooling). Validates every table's bags first
  // (unless bags_checked); on an error nothing is written.
  [[nodiscard]] virtual absl::Status Lookup(std::span<const Bags<int32_t>> bags, ::cemb::MatrixView out) = 0;
  // Lookup for serving: any number of callers at once, while nothing
  // changes the layer (no Update, step, Load or Sync meanwhile). Writes what
  // Lookup writes, on `threads` OpenMP threads of the caller (1: on the
  // calling thread alone, no team). Its buffers are the caller's, none of
  // the layer's. Tables in DRAM, on the slow tier, and cached tables (a
  // cache admits rows concurrently until it is full and is never flushed
  // here). FailedPrecondition for a layer with ssd tables: their rows must
  // be pinned first, which is the step protocol's (one caller).
  [[nodiscard]] absl::Status LookupShared(std::span<const Bags<int32_t>> bags, ::cemb::MatrixView out,
                                          int threads) const;
  // As LookupShared, table t's pooled rows into outs[t] (bags[t].nbags() x
  // dim each, anywhere: a caller that holds other tables elsewhere places
  // each table's columns where its model wants them).
  [[nodiscard]] virtual absl::Status LookupShared(std::span<const Bags<int32_t>> bags,
                                                  std::span<const ::cemb::MatrixView> outs, int threads) const = 0;
  // Applies `grad` (the gradient of Lookup's output, same layout) to the rows
  // the bags read, with learning rate `lr`.
  [[nodiscard]] virtual absl::Status Update(std::span<const Bags<int32_t>> bags, ::cemb::ConstMatrixView grad, float lr) = 0;
  // True when some table is "ssd" (its rows must be prefetched).
  virtual bool has_ssd_tables() const = 0;
  // Pins the rows of `bags` (batch `batch_id`'s bags of table `t`) if
  // table t is an ssd table and starts reading those not in DRAM; nothing
  // for other tables. Errors: a malformed bag or an index out of range
  // (Lookup's message: table, bag, index; nothing pinned), too few slots,
  // I/O.
  [[nodiscard]] virtual absl::Status Prefetch(int64_t batch_id, int t, const Bags<int32_t>& bags) = 0;
  // Waits for batch_id's rows of every ssd table (seconds waited) and opens
  // the step scopes of the cached tables. Errors: a failed read (naming the
  // table, the file, the operation).
  [[nodiscard]] virtual absl::StatusOr<double> BeginStep(int64_t batch_id) = 0;
  // Closes the step scopes, unpins batch_id of the ssd tables, flushes every
  // dynamic cache that is full. Returns how many caches were flushed.
  [[nodiscard]] virtual absl::StatusOr<int> EndStep(int64_t batch_id) = 0;
  // Between steps: writes every dirty cached or ssd row back (the slow tier
  // is then complete, e.g. before a checkpoint).
  [[nodiscard]] virtual absl::Status Sync() = 0;

  // Rows and optimizer state of every table: "<dir>/<prefix><id>.rows"
  // (embedding/table_io.h format; an ssd table: "<prefix><t>.ssd", a snapshot
  // of its written blocks, ssd/ssd_table.h) and "<dir>/<prefix><t>.adagrad.npy".
  // Load reads an ssd table from a .rows file too, and a .ssd file into a
  // table of another kind (through a temporary ssd table in its slow-tier
  // directory): a checkpoint resumes with its tables moved.
  [[nodiscard]] virtual absl::Status Save(const std::string& dir, const std::string& prefix) = 0;
  [[nodiscard]] virtual absl::Status Load(const std::string& dir, const std::string& prefix) = 0;

  // Every table as "<dir>/<prefix><t>.weight.npy", [rows, dim] in C order:
  // with prefix "emb_l." the keys of dlrm_s_pytorch's DLRM_Net.state_dict()
  // (an EmbeddingBag's weight, row r = id r). Export writes float32 (bfloat16
  // rows widen exactly) from any kind of table; Import reads float32 or
  // bfloat16 files (rounded to nearest even into bfloat16 tables). Both stream
  // a table in blocks of rows through rowpointer (kRead / kWrite; an ssd table
  // prefetches each block), never holding a whole table in memory. Import
  // opens every file and checks its dtype and shape before it writes a row,
  // so a missing or mismatched file ("<path>: shape (1000, 8) where (1000, 16)
  // is needed") leaves every table as it was. The optimizer state is not
  // part of it (a state_dict has none): AdaGrad's stays as it is.
  // REQUIRES: between steps, like Save and Load.
  [[nodiscard]] virtual absl::Status ExportNpy(const std::string& dir, const std::string& prefix) = 0;
  [[nodiscard]] virtual absl::Status ImportNpy(const std::string& dir, const std::string& prefix) = 0;

  // Copies row `row` of table `t` (as fp32) out of / into the table, between
  // steps (inspection, tests, serving a single row).
  [[nodiscard]] virtual absl::Status ReadRow(int t, int64_t row, std::span<float> out) const = 0;
  [[nodiscard]] virtual absl::Status WriteRow(int t, int64_t row, std::span<const float> in) = 0;

  virtual std::vector<TableReport> Report() const = 0;
  virtual void ResetStats() = 0;
  // Caches that evict by CLOCK (serving): one eviction round of each whose
  // free slots ran low, beside the readers, as its evictor thread would.
  // The rows freed; 0 for every other table.
  virtual int64_t EvictCaches() = 0;
};

}  // namespace cemb

#endif  // CEMB_TABLES_EMBEDDING_LAYER_H_
