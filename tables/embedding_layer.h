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
// pooled by its sum or its mean (options.pooling, every table alike).
//
// A batch's bags are checked once, into a CheckedBatch (a CheckedBags per
// table, embedding/validate.h), which only the layer makes: Check(bags), or
// for a step CheckStep(id, bags), where the ssd tables' bags were checked
// by Prefetch(id, ...), which also made their update plans (the plans'
// distinct rows are the rows to pin). Lookup and Update take the batch and
// check nothing again; Update takes the plans made ahead for the batch's id
// (by id: nothing compares the bags). Lookup and Update of plain bags check
// them first and plan everything anew.
//
// The step (tables/step_cycle.h drives it; one owner):
//   Prefetch(id, t, bags)   ssd tables: check, plan, pin batch id's rows, start their reads
//   CheckStep(id, bags)     the batch: the ssd tables' bags as Prefetch had them, the others' checked now
//   BeginStep(id)           ssd tables: wait for batch id's reads; open the
//                           cached tables' step scopes (a flush inside aborts
//                           when check_lifetime is on)
//   Lookup ... Update       of CheckStep's batch
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
//   CEMB_ASSIGN_OR_RETURN(CheckedBatch batch, layer->CheckStep(k, bags));
//   CEMB_RETURN_IF_ERROR(layer->BeginStep(k).status());
//   CEMB_RETURN_IF_ERROR(layer->Lookup(batch, emb));                // emb: [batch x T*16]
//   ... backward ...
//   CEMB_RETURN_IF_ERROR(layer->Update(batch, d_emb, lr));
//   CEMB_RETURN_IF_ERROR(layer->EndStep(k).status());
#ifndef CEMB_TABLES_EMBEDDING_LAYER_H_
#define CEMB_TABLES_EMBEDDING_LAYER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/enum_names.h"
#include "embedding/kernels.h"
#include "embedding/types.h"
#include "embedding/validate.h"
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

// One batch's bags, a CheckedBags per table of a layer, checked against
// its tables. Only the layer makes one (EmbeddingLayer::Check, CheckStep).
// It views the caller's arrays: REQUIRES they stay valid and unchanged while
// it is used.
class CheckedBatch {
 public:
  // The id of a batch Check made: no prefetch made any of its plans.
  static constexpr int64_t kNoBatch = -1;

  CheckedBatch() = default;
  std::span<const CheckedBags<int32_t>> tables() const { return tables_; }
  // The batch id whose prefetch made some of its update plans (CheckStep);
  // kNoBatch: none (Check), Update plans every table.
  int64_t id() const { return id_; }

 private:
  friend class EmbeddingLayer;
  CheckedBatch(std::vector<CheckedBags<int32_t>> tables, int64_t id) : tables_(std::move(tables)), id_(id) {}

  std::vector<CheckedBags<int32_t>> tables_;
  int64_t id_ = kNoBatch;
};

class EmbeddingLayer {
 public:
  // Creates and initialises the tables (uniform ±sqrt(1/rows) with seed + t;
  // static caches are then filled with random rows). Errors name the table.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<EmbeddingLayer>> Create(const EmbeddingLayerOptions& options);
  virtual ~EmbeddingLayer() = default;

  virtual int num_tables() const = 0;
  virtual int64_t dim() const = 0;
  virtual int64_t rows(int table) const = 0;

  // Checks every table's bags (validate_bags: InvalidArgument for a
  // malformed bag, OutOfRange naming the table, bag and index). Allocates
  // the batch's list of tables (the rest of a step allocates nothing).
  [[nodiscard]] virtual absl::StatusOr<CheckedBatch> Check(std::span<const Bags<int32_t>> bags) const = 0;
  // Batch `batch_id` of a step: the bags of the tables Prefetch(batch_id, t,
  // ...) was given are taken as it checked them (by id: bags[t] of such a
  // table is not read again; REQUIRES: the same bags), the others' are
  // checked now; Update uses the plans that prefetch made.
  [[nodiscard]] virtual absl::StatusOr<CheckedBatch> CheckStep(int64_t batch_id,
                                                               std::span<const Bags<int32_t>> bags) = 0;

  // out.row(b) columns [t*dim, (t+1)*dim) = bag b of table t pooled (its
  // rows' sum or mean, options.pooling). Checks only the output's shape and
  // that the batch is this layer's; on an error nothing is written.
  [[nodiscard]] virtual absl::Status Lookup(const CheckedBatch& batch, ::cemb::MatrixView out) = 0;
  // Check, then Lookup.
  [[nodiscard]] absl::Status Lookup(std::span<const Bags<int32_t>> bags, ::cemb::MatrixView out);
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
  // the batch read, with learning rate `lr`.
  [[nodiscard]] virtual absl::Status Update(const CheckedBatch& batch, ::cemb::ConstMatrixView grad, float lr) = 0;
  // Check, then Update (every plan made anew).
  [[nodiscard]] absl::Status Update(std::span<const Bags<int32_t>> bags, ::cemb::ConstMatrixView grad, float lr);
  // True when some table is "ssd" (its rows must be prefetched).
  virtual bool has_ssd_tables() const = 0;
  // Checks `bags` (batch `batch_id`'s bags of table `t`), makes their
  // update plan and pins their rows if table t is an ssd table, and starts
  // reading those not in DRAM; nothing for other tables. Errors: a
  // malformed bag or an index out of range (Check's message: table, bag,
  // index; nothing pinned), too few slots, I/O.
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

 protected:
  // For the implementations: the only way to a CheckedBatch.
  static CheckedBatch MakeBatch(std::vector<CheckedBags<int32_t>> tables, int64_t id) {
    return CheckedBatch(std::move(tables), id);
  }
};

}  // namespace cemb

#endif  // CEMB_TABLES_EMBEDDING_LAYER_H_
