// Trainer: the training driver behind `dlrm-train`. It builds everything
// around the model from a TrainConfig and runs the loop:
//
//   data     data::PrepareData (data/prepare.h): synthetic (generated into
//            <work_dir>, split train/validation), Criteo TSV (preprocessed
//            into <work_dir> with the reference split), or a binary dataset
//            (data/dataset.h), memory-mapped, reused from <work_dir> when
//            unchanged; a shuffled loader for training, an in-order one for
//            evaluation
//   model    Dlrm::Create(config.ToDlrmOptions(table sizes))
//   loop     Next batch -> TrainStep(lr(step)) -> flush full caches; a
//            progress bar on stderr (terminals only); evaluation (log loss,
//            ROC AUC, accuracy) every eval_every steps and at the end;
//            checkpoints every checkpoint_every steps and at the end
//   report   train/report.h: per-phase times, the per-table cache report,
//            JSON lines (with train.log_every, one record per step's loss)
//   export   with train.export_dir, every parameter as .npy files under
//            PyTorch's state_dict names (Dlrm::ExportNpy)
//
// model.init_from starts every parameter from such files (Dlrm::ImportNpy);
// with data.split none and train.shuffle false, this is the run that
// facebookresearch/dlrm makes (configs/fidelity.yaml, tests/train/fidelity_test.cc).
//
// Resume: with TrainerOptions::resume, Create() loads the newest checkpoint
// of train.checkpoint_dir (verified: train/checkpoint.h), the model through
// Dlrm::Load and the loader position through Loader::Seek; training then
// continues with the very next batch and learning rate, so that the step
// losses equal those of an uninterrupted run bit for bit (for the same
// thread count). A checkpoint of another configuration (TrainConfig::
// Fingerprint()) is refused, naming the first key that differs.
//
// Several processes (TrainerOptions::comm, `mpirun -np N dlrm-train`): the
// tables are assigned to ranks (distributed::ShardPlan, balanced by bytes and
// lookups, printed at start), each rank builds only its tables (its own
// storage, slow tier and model.dram_budget), reads its slice of every global
// batch (data::LoaderOptions::rank) and trains through a ShardedStep
// (train/sharded_step.h). Data is prepared by rank 0 first (the others reuse
// it). Evaluation gathers every rank's probabilities, so every rank computes
// the same metrics. A checkpoint is one directory: rank 0 writes the MLPs
// and the manifest, every rank its tables under their model-wide names,
// and the directory is renamed into place only after every rank's writes
// succeeded. Tables are saved per table, so a checkpoint resumes on any
// number of ranks (resharded on load: each rank loads the tables it owns
// now). Every decision that depends on one rank (a read error, a failed
// write) is agreed on (distributed::Comm::AgreeOnStatus), so every rank stops with
// the failing rank's message.
//
// Thread safety: one thread drives a Trainer; the model and the loader use
// their own threads.
//
//   CEMB_ASSIGN_OR_RETURN(TrainConfig config, TrainConfig::Load("configs/default.yaml"));
//   CEMB_ASSIGN_OR_RETURN(auto trainer, Trainer::Create(config, {}));
//   CEMB_ASSIGN_OR_RETURN(TrainSummary summary, trainer->Run());
//   std::printf("AUC %.4f\n", summary.final_metrics.auc);
#ifndef CEMB_TRAIN_TRAINER_H_
#define CEMB_TRAIN_TRAINER_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dlrm/model.h"
#include "tables/embedding_layer.h"
#include "train/config.h"
#include "train/metrics.h"
#include "train/report.h"

namespace cemb::distributed {
class Comm;
}  // namespace cemb::distributed

namespace cemb::train {

struct TrainerOptions {
  bool resume = false;
  FILE* out = stdout;  // the report; nullptr: quiet
  FILE* progress_stream = stderr;  // the progress bar (drawn only when a terminal)
  // Training on several processes (docs/distributed.md): every
  // rank of `comm` makes a Trainer with the same config and calls the same
  // methods. nullptr, or a communicator of one rank: one process, no MPI.
  // Only rank 0 prints (`out`, the progress bar, train.log_jsonl); every
  // rank returns the same errors.
  const distributed::Comm* comm = nullptr;
};

class Trainer {
 public:
  // Prepares the data (may take a while: generation, preprocessing), builds
  // the model and the loaders, and with options.resume loads the checkpoint.
  // Errors name the config key, file or checkpoint file at fault.
  // (Tests plant I/O faults through train/trainer_testing.h.)
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Trainer>> Create(const TrainConfig& config,
                                                                      const TrainerOptions& options);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Trains to the configured number of steps; evaluates, checkpoints,
  // reports. Errors: a diverged loss (NaN/inf, naming the step), I/O.
  [[nodiscard]] absl::StatusOr<TrainSummary> Run();

  // Evaluates on the validation set (at most eval_batches batches).
  [[nodiscard]] absl::StatusOr<MetricsResult> Evaluate();

  dlrm::Dlrm& model();
  const std::vector<uint64_t>& table_sizes() const;
  int64_t total_steps() const;
  int64_t step() const;  // steps done

 private:
  friend class TrainerTesting;
  struct Impl;
  explicit Trainer(std::unique_ptr<Impl> impl);
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Trainer>> Create(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cemb::train

#endif  // CEMB_TRAIN_TRAINER_H_
