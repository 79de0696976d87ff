// Dlrm: the DLRM of the thesis (section 5.5) and of facebookresearch/dlrm,
// forward and backward on one batch:
//
//   bottom = BottomMLP(dense)                      [n x dim]   (dlrm/mlp.h, ReLU after every layer)
//   emb    = EmbeddingLayer.Lookup(bags)           [n x T*dim] (pooled sums, one column block per table)
//   z      = Interaction(bottom, emb)              [n x W]     (dot: bottom ++ pairwise dots; or concat)
//   z      = CrossNetwork(z)                       [n x W]     (dcn only: DLRM-DCNv2, dlrm/cross_network.h)
//   logit  = TopMLP(z)                             [n x 1]     (no activation on the last layer)
//   loss   = mean BCE(sigmoid(logit), label)                   (dlrm/loss.h, from logits)
//
// TrainStep runs that forward, the backward through every layer, the dense
// optimizer (SGD or Adagrad, dlrm/dense_optimizer.h; on split weights in
// bf16) on the MLPs and the cross network, and the fused embedding update
// (SGD or row-wise AdaGrad) with one learning rate. Predict runs the
// forward only. The cross network runs in the MLPs' precision
// (mlp_precision, resolved).
//
// Plan once: every oneDNN primitive, every kernel choice and every buffer is
// made by Create() for the planned batch sizes (batch_size, plus
// extra_batch_sizes, e.g. the last partial batch or an evaluation batch); a
// step allocates nothing. A batch of another size is an InvalidArgument error.
//
// Phase times: TrainStep and Predict add the seconds of each phase to a
// PhaseTimes (the caller adds kData, kSsdWait, kCacheFlush and kOther around
// them).
//
// The step's boundaries are not the model's: TrainStep and Predict do not
// prefetch ssd rows, wait for them, unpin them or flush caches. The caller
// brackets each one with a StepCycle (tables/step_cycle.h; the trainer's
// Stepper, train/stepper.h, owns both).
//
// Thread safety: one caller at a time; the work runs on OpenMP threads.
//
//   CEMB_ASSIGN_OR_RETURN(auto model, Dlrm::Create(options));
//   PhaseTimes times;
//   CEMB_ASSIGN_OR_RETURN(double loss, model->TrainStep(batch, /*lr=*/0.1f, &times));
#ifndef CEMB_DLRM_MODEL_H_
#define CEMB_DLRM_MODEL_H_

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dlrm/cross_network.h"
#include "dlrm/interaction.h"
#include "dlrm/mlp.h"
#include "dlrm/precision.h"
#include "tables/embedding_layer.h"

namespace cemb::dlrm {

enum class Phase {
  kData,
  kSsdWait,  // waiting for the ssd tables' reads of the step's rows (tables/step_cycle.h)
  kEmbeddingLookup,
  kInteraction,   // forward and backward
  kCrossNetwork,  // dcn: forward and backward
  kBottomForward,
  kBottomBackward,
  kTopForward,  // including the loss
  kTopBackward,
  kMlpUpdate,
  kEmbeddingUpdate,
  kCacheFlush,
  kAllToAll,   // several processes: the embedding exchange (indices, pooled rows, gradients)
  kAllreduce,  // several processes: summing the MLPs' gradients and the loss
  kOther,
};
inline constexpr int kNumPhases = 15;
const char* PhaseName(Phase phase);  // "data", "embedding lookup", ...

struct PhaseTimes {
  std::array<double, kNumPhases> seconds{};
  double& operator[](Phase p) { return seconds[static_cast<int>(p)]; }
  double operator[](Phase p) const { return seconds[static_cast<int>(p)]; }
  double total() const;
  PhaseTimes& operator+=(const PhaseTimes& o);
};

// The seconds of `phase` in `times`, or null (nothing timed) without times:
// what base/timer.h's ScopedSeconds and LapSeconds add to, the one way a
// phase is timed.
inline double* PhaseSeconds(PhaseTimes* times, Phase phase) { return times != nullptr ? &(*times)[phase] : nullptr; }

class EmbeddingStep;

struct DlrmOptions {
  int64_t num_dense = 13;
  // Widths of the bottom MLP's layers after its input (num_dense); the last
  // must equal the embedding dim. Reference Kaggle model: {512, 256, 64, 16}.
  std::vector<int64_t> bottom_mlp;
  // Widths of the top MLP's layers after its input (the interaction's
  // output width); the last must be 1. Kaggle: {512, 256, 1}.
  std::vector<int64_t> top_mlp;
  InteractionKind interaction = InteractionKind::kDot;
  bool self_interaction = false;
  // The MLPs' and the cross network's optimizer (the tables': embeddings.optimizer).
  DenseOptimizerOptions dense_optimizer;
  // kDcn: the cross network's layers and rank (CrossNetworkOptions).
  int dcn_layers = 3;
  int64_t dcn_rank = 512;
  // The MLPs' precision, and the cross network's (kDcn).
  // kAuto: bf16 where it is measured faster than fp32, else fp32; a resumed
  // run keeps its checkpoint's (mlp_auto). Create resolves it
  // (dlrm/precision.h); options() holds the result.
  Precision mlp_precision = Precision::kFp32;
  // What kAuto goes by: the resumed checkpoint's precision, or the
  // measurement (TimeMlpPrecisions, or a kept copy of one); with neither,
  // the ISA (bf16 with AMX).
  AutoPrecisionInputs mlp_auto;
  // The tables; embeddings.dim is the feature size of every table.
  EmbeddingLayerOptions embeddings;
  // The model's tables, of which `embeddings` holds this process's (each
  // with its model-wide id); 0: embeddings.tables.size(). A model that holds
  // some of its tables scores through batches with their own EmbeddingStep
  // (BatchView::embedding_step: several processes, the others' tables
  // pooled by their owners) or through MakeForward (a predictor that serves
  // the others itself, serve/); TrainStep and Predict of a batch without
  // one are FailedPrecondition.
  int64_t num_tables = 0;
  int64_t batch_size = 2048;
  std::vector<int64_t> extra_batch_sizes;
  int threads = 0;  // 0: all
  uint64_t seed = 1;
};

// One batch as the model reads it (the loader's data::Batch gives these).
struct BatchView {
  int64_t size = 0;
  std::span<const float> dense;   // [size x num_dense]
  std::span<const float> labels;  // [size], 0 or 1
  std::span<const Bags<int32_t>> bags;  // one per table, `size` bags each
  // What pools this batch's rows and finishes its gradients: several
  // processes' step (distributed/sharded_step.h gives each batch its
  // slot's: the tables' owners pool and update the rows of `bags`, this
  // process's slice, after their exchange). nullptr: this model's own
  // tables (one process).
  EmbeddingStep* embedding_step = nullptr;
  // The bags this process's layer looks up and updates, as it checked them
  // for the step (StepCycle::Begin: one process, `bags`; several, the owned
  // bags of the batch's slot). nullptr: the step checks `bags` itself (one
  // process; every plan made anew).
  const CheckedBatch* checked = nullptr;
};

// What a step does with the tables: pool the rows of a batch and finish
// its gradients, as TorchRec's sharded modules do. The model runs one path
// through it; one process's is the model's own (its tables hold every
// table: the lookup and the update, nothing to sum), several processes'
// (docs/distributed.md) is distributed/sharded_step.h over MPI: the tables
// are sharded (each pooled and updated by its owner), the MLPs replicated
// (their gradients summed). Within a step Dlrm calls, in this order:
// StartPooledRows, the bottom MLP forward (Progress between its layers),
// FinishPooledRows, then in TrainStep StartGradients, the bottom MLP
// backward (Progress between its layers), SumGradients (any number of
// times), SumLoss and FinishGradients. Every process makes the same calls;
// a call that gets a failed `local` status still takes part, and returns
// that failure (the lowest failing rank's) on every process, so that no
// process leaves the others waiting.
class EmbeddingStep {
 public:
  virtual ~EmbeddingStep() = default;
  // The samples of the global batch this process's batch is a slice of;
  // 0: the batch itself (one process).
  virtual int64_t global_batch() const = 0;
  // Pools every process's bags of `layer`'s tables (its owned bags:
  // batch.checked, as the layer checked them for the step, or when null
  // checked now; one process: the batch's own) into emb [n x T*dim], this
  // process's bags of every table, by FinishPooledRows (several processes:
  // the rows travel meanwhile).
  [[nodiscard]] virtual absl::Status StartPooledRows(const absl::Status& local, EmbeddingLayer& layer,
                                                     const BatchView& batch, MatrixView emb, PhaseTimes* times) = 0;
  // `local`: this process's work since StartPooledRows (the bottom MLP).
  [[nodiscard]] virtual absl::Status FinishPooledRows(const absl::Status& local, PhaseTimes* times) = 0;
  // Between a Start and its Finish: lets the exchange in flight move (MPI
  // moves large messages only inside MPI calls). Not collective.
  [[nodiscard]] virtual absl::Status Progress() = 0;
  // Sends d_emb [n x T*dim] to the tables' owners (in flight until FinishGradients).
  [[nodiscard]] virtual absl::Status StartGradients(ConstMatrixView d_emb, PhaseTimes* times) = 0;
  // data = its sum over every process, in place.
  [[nodiscard]] virtual absl::Status SumGradients(std::span<float> data, PhaseTimes* times) = 0;
  [[nodiscard]] virtual absl::Status SumLoss(double* loss, PhaseTimes* times) = 0;
  // `layer` applies the gradients of its tables to the rows of the bags
  // StartPooledRows pooled, unless some `local` failed.
  [[nodiscard]] virtual absl::Status FinishGradients(const absl::Status& local, EmbeddingLayer& layer,
                                                     const BatchView& batch, float lr, PhaseTimes* times) = 0;
};

class DlrmForward;

// What a DlrmForward is planned for.
struct DlrmForwardOptions {
  int64_t max_batch = 256;           // REQUIRES: > 0; buffers are sized for it
  std::vector<int64_t> batch_sizes;  // further batch sizes to plan (as DlrmOptions::extra_batch_sizes)
  int threads = 1;                   // the interaction's OpenMP threads (the MLPs use the caller's)
};

class Dlrm {
 public:
  // Errors: InvalidArgument for inconsistent options; FailedPrecondition for
  // bf16 MLPs where oneDNN has no bf16 matmul (ResolveMlpPrecision).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Dlrm>> Create(const DlrmOptions& options);
  ~Dlrm();

  // Times one training step of the bottom and top MLPs that Create would
  // make from `options` (their widths, options.batch_size, this thread's
  // OpenMP threads), and with dcn of the cross network, which runs in their
  // precision, in fp32 and in bf16: one warm-up step each, then three
  // rounds of one step each, alternating; the median of each. For kAuto
  // (dlrm/precision.h). REQUIRES: oneDNN has a bf16 matmul here
  // (DetectMatmulCpu().bf16_matmul not empty). Takes a few steps' time.
  [[nodiscard]] static absl::StatusOr<MlpTimings> TimeMlpPrecisions(const DlrmOptions& options);

  // The options, with mlp_precision resolved (never kAuto).
  const DlrmOptions& options() const;
  // How mlp_precision was resolved on this CPU: requested, reason, warning.
  const MlpPrecisionChoice& mlp_precision_choice() const;
  EmbeddingLayer& embeddings();
  const Mlp& bottom_mlp() const;
  const Mlp& top_mlp() const;
  // The cross network (dcn), or null.
  const CrossNetwork* cross_network() const;

  // Forward, backward and update on `batch`; returns the batch's mean loss
  // (several processes: the global batch's, the same on every process).
  [[nodiscard]] absl::StatusOr<double> TrainStep(const BatchView& batch, float lr, PhaseTimes* times);
  // Forward only: probabilities[i] = sigmoid(logit of sample i).
  [[nodiscard]] absl::Status Predict(const BatchView& batch, std::span<float> probabilities, PhaseTimes* times);

  // Every MLP parameter as "<dir>/bot_l.<k>.weight.npy", "top_l.<k>.bias.npy"
  // (dlrm_s_pytorch's state_dict names), the cross network's as
  // "<dir>/crossnet.W_kernels.<l>.npy" ... (CrossNetwork::Parameters), with
  // dense Adagrad each one's accumulators as "<name>.adagrad.npy"
  // ("bot_l.0.weight.adagrad.npy"), and every table as "<dir>/emb_l.<t>.rows"
  // (+ ".adagrad.npy" with row-wise AdaGrad).
  [[nodiscard]] absl::Status Save(const std::string& dir);
  [[nodiscard]] absl::Status Load(const std::string& dir);
  // The model-wide table id whose file Save wrote as `name` (a path whose
  // last component is "emb_l.<t>.<ext>"), or -1 for any other file.
  static int TableOfFile(std::string_view name);
  // The name Save gives table t's file with `extension` ("ssd": an ssd
  // table's snapshot, "rows"): "emb_l.<t>.<extension>".
  static std::string TableFileName(int table, std::string_view extension);

  // Every parameter as one .npy file named by the keys of dlrm_s_pytorch's
  // DLRM_Net.state_dict(), so that a PyTorch model converts with
  // {k: v.numpy() for k, v in m.state_dict().items()}:
  //   emb_l.<t>.weight.npy   [rows_t, dim]   table t (row r = id r)
  //   bot_l.<2l>.weight.npy  [out, in]       bottom layer l (module 2l: the
  //   bot_l.<2l>.bias.npy    [out]           ReLUs are the odd modules)
  //   top_l.<2l>.weight.npy, top_l.<2l>.bias.npy
  //   crossnet.W_kernels.<l>.npy [d, r], crossnet.V_kernels.<l>.npy [r, d]
  //   (crossnet.kernels.<l>.npy [d, d] with rank 0), crossnet.bias.<l>.npy
  //                                          [d]: the cross network (dcn)
  // Export writes float32 (the MLPs' fp32 master weights; tables of any
  // storage kind, streamed block by block: EmbeddingLayer::ExportNpy) into
  // `dir`, created if missing. Import reads float32 or bfloat16 files, checks
  // each one's shape and dtype and names the file on a mismatch. An MLP's
  // files, and the tables' files, are all checked before that part is
  // written; on an error the model is left partly imported (the trainer
  // stops).
  [[nodiscard]] absl::Status ExportNpy(const std::string& dir);
  [[nodiscard]] absl::Status ImportNpy(const std::string& dir);

  // A forward-only copy of the model's dense part (below), planned for
  // `options`, with the weights as they are now.
  [[nodiscard]] absl::StatusOr<std::unique_ptr<DlrmForward>> MakeForward(const DlrmForwardOptions& options) const;

 private:
  struct Impl;
  explicit Dlrm(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// DlrmForward: the forward pass of a Dlrm's dense part, for scoring: its own
// bottom and top MLPs, interaction and cross network (the model's options and
// precision, oneDNN plans for its batch sizes, its own buffers), holding a
// copy of the model's weights taken by Dlrm::MakeForward. The tables are the
// caller's: it writes a batch's pooled rows where embeddings(n) says, then
// calls Run, which computes what Dlrm::Predict computes from them.
// Several DlrmForwards score at once, one per thread (a predictor's pool);
// each copy of the weights is read only.
// NOTE: each copy also holds its MLPs' training buffers (gradients,
// optimizer state), as Mlp::Create makes them.
//
// Thread safety: one caller at a time; the MLPs run on the caller's OpenMP
// threads (omp_get_max_threads), the interaction on options.threads.
//
//   CEMB_ASSIGN_OR_RETURN(auto f, model->MakeForward({.max_batch = 256, .threads = 1}));
//   CEMB_RETURN_IF_ERROR(layer.Lookup(bags, f->embeddings(n)));
//   CEMB_RETURN_IF_ERROR(f->Run(n, dense.data(), probabilities));
class DlrmForward {
 public:
  ~DlrmForward();
  const DlrmForwardOptions& options() const;
  // Whether Run accepts batches of n samples (planned).
  bool planned(int64_t n) const;
  // Where the batch's pooled rows go: [n x T*dim], table t in columns
  // [t*dim, (t+1)*dim) (EmbeddingLayer::Lookup's layout). REQUIRES: planned(n).
  MatrixView embeddings(int64_t n) const;
  // probabilities[i] = sigmoid(logit of sample i) from dense [n x num_dense]
  // and the rows written at embeddings(n). Errors: InvalidArgument for a
  // batch not planned or too few probabilities.
  [[nodiscard]] absl::Status Run(int64_t n, const float* dense, std::span<float> probabilities);

 private:
  friend class Dlrm;
  struct Impl;
  explicit DlrmForward(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cemb::dlrm

#endif  // CEMB_DLRM_MODEL_H_
