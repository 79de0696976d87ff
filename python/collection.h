// Collection: the engine under the Python module's EmbeddingBagCollection
// (python/cemb/torch.py): named tables of any embedding_dim and row type,
// each serving one or more features, stored as each says (tables/storage.h),
// one DRAM budget split among them (tables/dram_budget.h), looked up and
// updated a batch of jagged features at a time.
//
// Tables that share (embedding_dim, row type, number of features) form one
// group, an EmbeddingLayer of their own; a table with F features is looked
// up as a batch of F x B bags (feature f's bag b is bag f * B + b). The
// output is [B, sum over tables of dim x features], the features in table
// order, the layout of TorchRec's pooled KeyedTensor. A group whose columns
// are one block of the output (one feature per table, tables adjacent) is
// written in place; the others through a scratch matrix.
//
// The step, as a PyTorch loop drives it:
//   Prefetch(next)          converts and checks batch `next`, hands it to the
//                           ssd tables' prefetcher threads (its reads run
//                           while the current step computes)
//   Forward(features, out)  ends the open step if any; begins this batch's
//                           step (waits only for rows still in flight),
//                           writes the pooled rows
//   Backward(grad, lr)      the fused optimizer in place; ends the step
//   EndStep()               ends a step that has no backward (evaluation)
// A Forward after Prefetch must get the prefetched batches, in order (it
// checks: the same values and offsets). Between steps (Save, Load, Export,
// Import, ReadTable, WriteTable) the open step ends and prefetched batches
// are dropped (their rows unpinned); prefetch again after.
//
// Errors are Status: a malformed batch names the table, its feature, the
// bag and the position; an ssd table's I/O error names the file.
// Thread safety: one caller at a time (the module holds a mutex).
//
//   CEMB_ASSIGN_OR_RETURN(auto c, Collection::Create({.tables = {{.name = "t0", .rows = 1000, .dim = 16,
//                                                                 .features = {"f0"}}}}));
//   FeatureArrays f{.values = {{ids.data(), IndexType::kInt64, ids.size()}}, .offsets = ...};
//   CEMB_RETURN_IF_ERROR(c->Forward(f, out));                   // out: [B x 16]
//   CEMB_RETURN_IF_ERROR(c->Backward(grad, /*lr=*/0.01f));
#ifndef CEMB_PYTHON_COLLECTION_H_
#define CEMB_PYTHON_COLLECTION_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "embedding/types.h"
#include "tables/dram_budget.h"
#include "tables/embedding_layer.h"
#include "tables/step_cycle.h"

namespace cemb::python {

struct CollectionTable {
  std::string name;
  int64_t rows = 0;
  int64_t dim = 0;
  std::vector<std::string> features;
  bool bf16 = false;
  StorageKind storage = StorageKind::kDram;
  // dynamic (and simple, static): the slow tier's directory (a file made in
  // it, libpmem2); ssd: the directory of the rows file. Must exist.
  std::string directory;
};

enum class IndexType { kInt32, kInt64 };

// One feature's jagged values: `offsets` (B + 1, from 0) or `lengths` (B).
struct IndexArray {
  const void* data = nullptr;
  IndexType type = IndexType::kInt64;
  int64_t size = 0;
};
struct FeatureArrays {
  std::vector<IndexArray> values;  // one per feature, in Collection::features() order
  std::vector<IndexArray> splits;  // offsets or lengths, as `lengths` says
  bool lengths = false;
};

struct CollectionOptions {
  std::vector<CollectionTable> tables;
  // Bytes of DRAM for the rows of the tables not in DRAM ("dynamic",
  // "ssd"), split as dlrm-train splits model.dram_budget (by need, then the
  // traffic sample's hottest rows, then size). Required when a table is "ssd"; 0 leaves a dynamic cache at its
  // default size.
  int64_t dram_budget = 0;
  // For the split: the rows a batch pins per table, at most batch_size x
  // bag_size (the longest bag's length times the batch, or the values of a
  // feature in a batch, whichever is smaller).
  int64_t batch_size = 0;
  int64_t bag_size = 1;
  // A sample of the training batches (their features, as Forward takes
  // them; read during Create only): the budget then goes first to the rows
  // the sample looks up most, across tables, as dlrm-train's split by the
  // first batches does. Empty: by need and size only.
  std::vector<FeatureArrays> traffic_sample;
  // Batches prefetched ahead of the step (P): ssd tables pin P + 1 batches.
  int prefetch_batches = 1;
  EmbeddingOptimizer optimizer = EmbeddingOptimizer::kSgd;
  float adagrad_eps = 1e-8f;
  int threads = 0;    // OpenMP threads of the kernels; 0: all
  uint64_t seed = 1;  // table i is initialised uniform ±sqrt(1/rows) with seed + i
};

class Collection {
 public:
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Collection>> Create(const CollectionOptions& options);
  ~Collection();

  // Every table's features, in table order: the inputs' and the output's order.
  const std::vector<std::string>& features() const { return features_; }
  int64_t output_width() const { return width_; }
  const CollectionOptions& options() const { return options_; }

  [[nodiscard]] absl::Status Prefetch(const FeatureArrays& features);
  // REQUIRES: out is [B x output_width()].
  [[nodiscard]] absl::Status Forward(const FeatureArrays& features, MatrixView out);
  // grad: the gradient of the last Forward's output, same shape.
  [[nodiscard]] absl::Status Backward(ConstMatrixView grad, float lr);
  [[nodiscard]] absl::Status EndStep();

  // Rows and optimizer state of every table: "<dir>/emb_<i>.rows" (or .ssd)
  // and "<dir>/emb_<i>.adagrad.npy", table i of the collection.
  [[nodiscard]] absl::Status Save(const std::string& dir);
  [[nodiscard]] absl::Status Load(const std::string& dir);
  // "<dir>/<prefix><i>.weight.npy" [rows, dim] float32, streamed; with the
  // prefix "emb_l." the files of dlrm-train's --export and init_from.
  [[nodiscard]] absl::Status Export(const std::string& dir, const std::string& prefix);
  [[nodiscard]] absl::Status Import(const std::string& dir, const std::string& prefix);
  // Table i's rows as fp32, [rows x dim], in / out of `rows` (C order).
  [[nodiscard]] absl::Status ReadTable(int table, std::span<float> rows);
  [[nodiscard]] absl::Status WriteTable(int table, std::span<const float> rows);
  std::vector<TableReport> Report() const;  // table order; name is the table's

 private:
  struct Group;
  struct Batch;
  explicit Collection(const CollectionOptions& options);
  absl::StatusOr<std::unique_ptr<Batch>> Convert(const FeatureArrays& features);
  // Lookups per row of each table in `sample` (checked as Forward checks).
  absl::StatusOr<TableTraffic> CountTraffic(std::span<const FeatureArrays> sample);
  absl::Status Begin(Batch& batch);
  // A group not in place: its scratch [F x B, tables x dim], sized for
  // `batch`; fn(sample, output column, scratch block) for each of the
  // dim-wide blocks it shares with the output (feature f's bag of sample s,
  // table p: scratch row f * B + s, columns p * dim; output row s, the
  // table's first column + f * dim).
  MatrixView Scratch(Group& group, int64_t batch);
  template <typename Fn>
  void ForEachBlock(Group& group, int64_t batch, Fn fn) const;
  absl::Status EndOpenStep();
  absl::Status Quiesce();  // ends the open step, drops the prefetched batches, drains
  // Table `table` exists and `values` is rows x dim of it.
  absl::Status CheckWholeTable(int table, size_t values) const;

  CollectionOptions options_;
  std::vector<std::string> features_;
  std::vector<int> feature_table_;    // per feature: its table
  std::vector<int64_t> table_col_;    // per table: its first output column
  int64_t width_ = 0;
  std::vector<std::unique_ptr<Group>> groups_;
  std::vector<std::pair<int, int>> where_;  // per table: (group, position in it)
  int64_t next_id_ = 0;
  std::deque<std::unique_ptr<Batch>> ahead_;  // prefetched, not begun
  std::unique_ptr<Batch> open_;               // the open step's batch
  bool open_updated_ = false;
  std::vector<std::unique_ptr<Batch>> spare_;  // recycled buffers
};

}  // namespace cemb::python

#endif  // CEMB_PYTHON_COLLECTION_H_
