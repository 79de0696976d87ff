// Collection: the engine under the Python module's EmbeddingBagCollection
// (python/cemb/torch.py): named tables of any embedding_dim and row type,
// each serving one or more features, stored as each says (tables/storage.h),
// one DRAM budget split among them (tables/dram_budget.h), looked up and
// updated a batch of jagged features at a time.
//
// Tables that share (embedding_dim, row type, number of features, pooling)
// form one group, an EmbeddingLayer of their own; a table with F features is looked
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
//   Forward(features, out, train)
//                           begins this batch's step (waits only for rows
//                           still in flight), writes the pooled rows. Training:
//                           the step stays open, its ssd rows pinned, and its
//                           id is returned; evaluation: the step ends here.
//   Backward(id, grad, lr)  the fused optimizer in place on step `id`'s bags;
//                           ends that step
//   Release(id)             ends step `id` without an update (its forward's
//                           output was dropped)
// Several training steps may be open at once (two towers over one
// collection, gradients accumulated over micro-batches), at most
// max_open_steps; their backwards come in any order, each updating exactly
// the rows of its own forward. A forward beyond the bound is refused
// before anything is pinned or written. Each open step keeps its ssd rows
// pinned: the ssd tables' slots must hold them beside the prefetched ones.
// A Forward after Prefetch must get the prefetched batches, in order (it
// checks: the same values, offsets and weights). Save, Export and ReadTable drop the
// prefetched batches (their rows unpinned; prefetch again after) and keep
// the open steps; Load, Import and WriteTable drop the open steps too (a
// later Backward of one is refused).
// A step whose begin fails (an ssd read's I/O error) is dropped with the
// batches prefetched after it: their rows are unpinned, the tables hold what
// they held, and the next Forward takes the next batch.
//
// Errors are Status: a malformed batch names the table, its feature, the
// bag and the position (as a batch is converted; its layers then check the
// converted bags into their CheckedBatch, docs/architecture.md); an ssd
// table's I/O error names the file.
// Thread safety: one caller at a time (the module holds a mutex).
//
//   CEMB_ASSIGN_OR_RETURN(auto c, Collection::Create({.tables = {{.name = "t0", .rows = 1000, .dim = 16,
//                                                                 .features = {"f0"}}}}));
//   FeatureArrays f{.values = {{ids.data(), IndexType::kInt64, ids.size()}}, .offsets = ...};
//   CEMB_ASSIGN_OR_RETURN(int64_t step, c->Forward(f, out, /*train=*/true));   // out: [B x 16]
//   CEMB_RETURN_IF_ERROR(c->Backward(step, grad, /*lr=*/0.01f));
#ifndef CEMB_PYTHON_COLLECTION_H_
#define CEMB_PYTHON_COLLECTION_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/enum_names.h"
#include "embedding/types.h"
#include "ssd/block_io.h"
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
  // A bag's rows summed, or their mean (1/|bag| of the sum, an empty bag a
  // zero row; the update scales each value's gradient by the same 1/|bag|):
  // TorchRec's PoolingType, nn.EmbeddingBag's mode.
  Pooling pooling = Pooling::kSum;
  StorageKind storage = StorageKind::kDram;
  // dynamic (and simple, static): the slow tier's directory (a file made in
  // it, libpmem2); ssd: the directory of the rows file. Must exist.
  std::string directory;
};

// The names of CollectionTable::pooling (the Python module's "sum", "mean").
inline constexpr EnumName<Pooling> kPoolingNames[] = {{Pooling::kSum, "sum"}, {Pooling::kMean, "mean"}};

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
  // Per-value weights: empty (every weight 1), or one array per feature, a
  // float32 per value. A bag pools sum_j w_j row(j) (a mean table's times
  // 1/|bag|), and the update scales value j's gradient by w_j (and 1/|bag|)
  // (TorchRec's weighted EmbeddingBagCollection, nn.EmbeddingBag's
  // per_sample_weights in mode "sum"; cemb.torch refuses weights with mean
  // tables, as nn.EmbeddingBag does).
  std::vector<std::span<const float>> weights;
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
  // Training forwards whose backward has not come yet, at most (each pins
  // its batch's ssd rows until then).
  int max_open_steps = 4;
  EmbeddingOptimizer optimizer = EmbeddingOptimizer::kSgd;
  float adagrad_eps = 1e-8f;
  int threads = 0;    // OpenMP threads of the kernels; 0: all
  uint64_t seed = 1;  // table i is initialised uniform ±sqrt(1/rows) with seed + i
  // Tests: wraps each ssd table's block I/O (a FaultInjectingBlockIo).
  std::function<std::unique_ptr<BlockIo>(std::unique_ptr<BlockIo>)> ssd_wrap_io;
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
  // Looks the batch up into `out`. train: leaves its step open and returns
  // its id, for Backward or Release; else ends the step (returns its id).
  // REQUIRES: out is [B x output_width()].
  [[nodiscard]] absl::StatusOr<int64_t> Forward(const FeatureArrays& features, MatrixView out, bool train);
  // grad: the gradient of step `step`'s output, same shape. Refused with
  // nothing written when the step is not open (its backward ran, Release or
  // Load ended it) or the shape differs (the step stays open then).
  [[nodiscard]] absl::Status Backward(int64_t step, ConstMatrixView grad, float lr);
  // Ends step `step` with no update; nothing when it is not open.
  [[nodiscard]] absl::Status Release(int64_t step);
  int open_steps() const { return static_cast<int>(open_.size()); }

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
  // `message` with a layer's name of a table ("emb3: ...") made the
  // collection's ("table 'clicks': ...").
  std::string Named(absl::string_view message) const;
  // Ends `batch`'s step in every group, errors ignored (a group where it
  // never began, or was not pinned, has nothing to end), and recycles it.
  void Abandon(std::unique_ptr<Batch> batch);
  // Drops the prefetched batches (their rows unpinned, their reads waited
  // for), errors ignored: nothing of theirs was written.
  void DropAhead();
  // Drops the prefetched batches and, with drop_open, the open steps; drains.
  absl::Status Quiesce(bool drop_open);
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
  int64_t last_begun_ = -1;                   // the id of the last Forward's batch
  std::deque<std::unique_ptr<Batch>> ahead_;  // prefetched, not begun
  std::vector<std::unique_ptr<Batch>> open_;  // training steps awaiting Backward, in forward order
  std::vector<std::unique_ptr<Batch>> spare_;  // recycled buffers
};

}  // namespace cemb::python

#endif  // CEMB_PYTHON_COLLECTION_H_
