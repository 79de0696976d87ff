// TrainConfig: everything `dlrm-train` reads from a YAML file (plus
// `--set key=value` overrides): the data, the model, the optimizer and the
// training loop. docs/training.md lists every key with its default.
//
//   data:      source (synthetic | tsv | binary), paths, synthetic parameters
//   model:     embedding_dim, MLPs, interaction, precision, tables, storage
//   optimizer: embedding optimizer, learning rate, warm-up and decay
//   train:     batch size, steps or epochs, evaluation, threads, seed,
//              checkpoints, JSON lines log, progress bar
//
// Validation: every key is checked when the file is parsed. An unknown key, a
// value of the wrong type or out of range, or an inconsistent combination
// gives InvalidArgument naming the file and the key path, e.g.
//   "configs/x.yaml: model.bottom_mlp: expected a list of positive integers, got 'abc'"
// A missing file is NotFound naming it. Nothing is ever half-applied: a
// TrainConfig either parses completely or not at all.
//
// Overrides: "a.b.c=value" sets key c of map a.b (maps are created as
// needed) before validation; the value is parsed as YAML, so lists work too
// ("model.bottom_mlp=[64,16]"). An error in an overridden key says so.
//
// Thread safety: a TrainConfig is a plain value.
//
//   CEMB_ASSIGN_OR_RETURN(TrainConfig c, TrainConfig::Load("configs/default.yaml",
//                                                           {"train.steps=100"}));
//   CEMB_ASSIGN_OR_RETURN(std::vector<uint64_t> sizes, c.model.TableSizes());
//   CEMB_ASSIGN_OR_RETURN(DlrmOptions o, c.ToDlrmOptions(sizes));
#ifndef CEMB_TRAIN_CONFIG_H_
#define CEMB_TRAIN_CONFIG_H_

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/enum_names.h"
#include "checkpoint/serving_manifest.h"
#include "data/generator.h"
#include "data/prepare.h"
#include "data/preprocess.h"
#include "dlrm/model.h"
#include "tables/storage.h"
#include "train/dram_budget.h"

namespace cemb::train {

// The data: section is data/prepare.h's DataConfig, which the trainer hands
// to data::PrepareData (ToPrepareOptions).
using data::DataConfig;
using data::DataSource;
using data::DataSourceName;
using data::DataSplit;
using data::DataSplitName;

// model.table_dtype's values (ModelConfig::bf16_tables).
inline constexpr EnumName<bool> kTableDtypeNames[] = {{false, "fp32"}, {true, "bf16"}};

// Where one table lives; the YAML spelling of StorageConfig.
struct TableStorageConfig {
  StorageKind kind = StorageKind::kDram;
  CacheSize cache_lower = CacheSize::Fraction(0.25);
  CacheSize cache_slack = CacheSize::Fraction(0.05);
  int admit_after = 0;
  // A directory: the files of "simple", "static", "dynamic" tables, and the
  // rows file of an "ssd" table (an unnamed temporary file in it). Empty =
  // $TMPDIR (or /tmp).
  std::string slow_tier;
  // ssd: requests in flight per table (io_uring entries), and the rows file
  // as a multiple of the table's rows (the log's room: docs/ssd.md).
  int ssd_queue_depth = BlockFileOptions{}.queue_depth;
  double ssd_file_space = SsdOptions{}.file_space;
  // cache_lower or cache_slack was in the config (otherwise a model.dram_budget
  // sizes a cached table's cache: train/dram_budget.h).
  bool cache_size_given = false;

  StorageConfig ToStorageConfig() const;
  // Its DRAM comes from model.dram_budget's split: an ssd table, or a cached
  // one without a given cache size.
  bool SharesDramBudget() const {
    return kind == StorageKind::kSsd ||
           ((kind == StorageKind::kStatic || kind == StorageKind::kDynamic) && !cache_size_given);
  }
};

struct ModelConfig {
  int64_t embedding_dim = 16;
  std::vector<int64_t> bottom_mlp{512, 256, 64, 16};
  std::vector<int64_t> top_mlp{512, 256, 1};
  dlrm::InteractionKind interaction = dlrm::InteractionKind::kDot;
  bool self_interaction = false;
  // dcn: the cross network's layers and rank (0: full rank); read only
  // with interaction: dcn (elsewhere an error).
  int64_t dcn_layers = 3;
  int64_t dcn_rank = 512;
  // auto: bf16 where oneDNN runs it faster than fp32 (AMX), else fp32;
  // resolved when the model is built (dlrm/precision.h).
  dlrm::Precision mlp_precision = dlrm::Precision::kAuto;
  bool bf16_tables = false;  // model.table_dtype: kTableDtypeNames
  // A directory of .npy files named by DLRM_Net.state_dict()'s keys
  // (Dlrm::ImportNpy) that every parameter starts from, instead of the
  // seeded initialisation; empty = none.
  std::string init_from;

  // Table sizes: `table_sizes` when not empty; else `table_count` tables of
  // `table_rows` rows when table_count > 0; else the dataset's (binary, tsv
  // vocabulary) or the 26 Kaggle cardinalities.
  std::vector<uint64_t> table_sizes;
  int64_t table_count = 0;
  uint64_t table_rows = 0;

  TableStorageConfig storage;                    // every table's default
  std::map<int, TableStorageConfig> table_storage;  // per-table overrides

  // DRAM for the rows of the tables on a slower tier: the ssd tables' slot
  // pools, slot metadata, maps and log buffers, and the caches of cached tables
  // whose size is not given; in bytes ("6GiB") or as a fraction of this
  // machine's physical memory ("25%", "0.25"). Required when a table is
  // "ssd". ToDlrmOptions splits it (train/dram_budget.h).
  std::optional<CacheSize> dram_budget;

  // The storage of table t.
  const TableStorageConfig& StorageOf(int t) const;
};

struct OptimizerConfig {
  EmbeddingOptimizer embedding = EmbeddingOptimizer::kSgd;
  // The MLPs' and the cross network's: sgd or adagrad (dlrm/dense_optimizer.h).
  dlrm::DenseOptimizerKind dense = dlrm::DenseOptimizerKind::kSgd;
  double learning_rate = 0.1;
  double adagrad_eps = 1e-8;  // row-wise and dense Adagrad alike
  // The MLPerf DLRM schedule: lr * (step + 1) / warmup_steps during the
  // warm-up, then lr, then from decay_start for decay_steps steps
  // lr * ((decay_end - step) / decay_steps)^2, and 0 after decay_end.
  // decay_steps == 0: no decay.
  int64_t warmup_steps = 0;
  int64_t decay_start = 0;
  int64_t decay_steps = 0;

  // The learning rate of (0-based) step `step`. A pure function of the step:
  // the schedule's state is the step count.
  float LearningRate(int64_t step) const;
};

struct TrainSettings {
  int64_t batch_size = 2048;
  int64_t steps = 0;   // > 0: train this many steps (overrides epochs)
  int64_t epochs = 1;  // used when steps == 0
  int64_t eval_every = 0;    // steps between evaluations; 0 = only at the end
  int64_t eval_batches = 0;  // batches per evaluation; 0 = the whole validation set
  int threads = 0;           // 0 = all hardware threads
  uint64_t seed = 1;         // model initialisation and shuffling
  bool shuffle = true;
  uint64_t shuffle_block = uint64_t{1} << 16;  // data::LoaderOptions::block_samples
  std::string checkpoint_dir;    // empty = no checkpoints
  int64_t checkpoint_every = 0;  // steps; 0 = only at the end (when checkpoint_dir is set)
  int64_t keep_checkpoints = 2;  // older ones are removed
  std::string log_jsonl;         // empty = no JSON lines log
  // > 0: a {"type":"step","step":k,"loss":...} record in log_jsonl (when
  // there is one) for every
  // step k that is a multiple of it (the loss of step k's forward, before
  // its update); 0 = none.
  int64_t log_every = 0;
  // Where the trained model goes as .npy files (Dlrm::ExportNpy) at the end;
  // empty = nowhere. `dlrm-train --export DIR` sets it.
  std::string export_dir;
  bool progress = true;          // the progress bar (only on a terminal)
  // ssd tables: the rows of this many batches after the current one are read
  // while the current step computes (tables/step_cycle.h); 0 = each batch's
  // rows are read (batched) just before its step.
  int prefetch_batches = 2;
};

struct TrainConfig {
  std::string source_name;  // the file (or "<string>") it was parsed from
  DataConfig data;
  ModelConfig model;
  OptimizerConfig optimizer;
  TrainSettings train;

  // Reads and validates `path` with `overrides` ("a.b=value") applied first.
  [[nodiscard]] static absl::StatusOr<TrainConfig> Load(const std::string& path,
                                                        std::span<const std::string> overrides = {});
  // The same from YAML text; `name` stands for the file in messages.
  [[nodiscard]] static absl::StatusOr<TrainConfig> Parse(std::string_view yaml, std::string_view name,
                                                         std::span<const std::string> overrides = {});

  // The model's options for tables of `table_sizes` rows (the resolved
  // sizes: see ModelConfig). Errors name the key (e.g. a per-table storage
  // override for a table that does not exist).
  //
  // model.dram_budget is split among the ssd tables and the cached tables
  // without a given cache size (train/dram_budget.h: first what each needs,
  // then by `traffic`, a sample of the training data, when given, then by
  // size); a budget too small is InvalidArgument naming model.dram_budget
  // and the bytes it needs. `hotness` = the indices per bag of each table
  // (model-wide, one per table of `table_sizes`; the dataset's, as the
  // trainer passes it); empty: data.hotness (1 when not given).
  // `split`, when not null, gets what each table was given.
  // `only`, when not null, are the tables (model-wide numbers, ascending;
  // perhaps none) this process holds when the model trains on several
  //: the layer gets those, each with its id, and they share
  // model.dram_budget (a budget per process); DlrmOptions::num_tables counts
  // them all.
  [[nodiscard]] absl::StatusOr<dlrm::DlrmOptions> ToDlrmOptions(std::span<const uint64_t> table_sizes,
                                                          std::span<const uint32_t> hotness = {},
                                                          const TableTraffic* traffic = nullptr,
                                                          DramSplit* split = nullptr,
                                                          const std::vector<int>* only = nullptr) const;
  // The model.dram_budget part of ToDlrmOptions; `hotness` has one entry
  // per table of `emb`.
  [[nodiscard]] absl::Status ApplyDramBudget(std::span<const uint32_t> hotness, const TableTraffic* traffic,
                                             EmbeddingLayerOptions& emb, DramSplit* split) const;
  // What a predictor needs to rebuild and feed the model (the checkpoint's
  // SERVING file): the model's options as `model` resolved them (the MLPs'
  // precision never auto), every table of `table_sizes` with its storage
  // here and its `hotness`, and the data's preprocessing (tsv: log1p of
  // the integers, ids by modulo or a vocabulary; synthetic and binary: none).
  ServingManifest ToServingManifest(const dlrm::DlrmOptions& model, std::span<const uint64_t> table_sizes,
                                    std::span<const uint32_t> hotness) const;
  // What data::PrepareData needs: the data section, data.work_dir defaulted
  // to <train.checkpoint_dir>/data, the model's table sizes when given
  // (model.tables), train.threads, and messages naming this file. The
  // caller adds the log.
  data::PrepareOptions ToPrepareOptions() const;

  // Every key the reader read (defaults included), in reading order, with
  // the value it took as text (enums by name: "model.interaction=dot").
  // Filled by Load / Parse; a TrainConfig made otherwise has none.
  std::vector<std::pair<std::string, std::string>> settings;

  // The first line of a Fingerprint.
  static constexpr const char* kFingerprintVersion = "fingerprint=2";

  // The settings that fix the model and the order of its training, one
  // "key=value" line per key after the kFingerprintVersion line: every key
  // of `settings` but those for which MayChangeOnResume holds. A checkpoint
  // stores it and resuming under another one is refused. Since it is made
  // from the keys the reader read, a new key is fingerprinted unless it is
  // added to MayChangeOnResume's list. Steps, epochs, evaluation, logging,
  // checkpointing and threads may change, so a run can be continued for
  // longer; so may where the rows live (model.storage, table_storage,
  // dram_budget, train.prefetch_batches): they change no bit of the results
  // (tested: tests/train/ssd_training_test.cc), so a run may resume with its
  // tables moved: a checkpoint's .rows files and an ssd table's snapshot
  // (.ssd) load into a table of any kind.
  // NOTE: the values are those read; a field changed after Load is not
  // seen, except model.mlp_precision through SetMlpPrecision (the trainer
  // sets the resolved precision, so a checkpoint records what the model
  // ran in, not auto).
  std::string Fingerprint() const;
  static bool MayChangeOnResume(std::string_view key);
  // The keys MayChangeOnResume accepts, for messages: "data.work_dir,
  // model.dram_budget, model.storage.*, ...".
  static std::string MayChangeOnResumeList();
  void SetMlpPrecision(dlrm::Precision precision);

  // Where a checkpoint's fingerprint `written` and this config's part: the
  // first key, in the checkpoint's order, whose value differs or that only
  // one side has ("(not set)" on the other). Nothing when they are equal.
  // A fingerprint of another version differs in its first line.
  struct FingerprintDiff {
    std::string key, was, is;
  };
  std::optional<FingerprintDiff> DiffFingerprint(std::string_view written) const;
  // The value of `key` in a fingerprint (a checkpoint's), or none.
  static std::optional<std::string> FingerprintValue(std::string_view fingerprint, const std::string& key);
};

// This machine's physical memory in bytes (what a model.dram_budget fraction
// is of); 0 when unknown.
int64_t PhysicalMemoryBytes();

}  // namespace cemb::train

#endif  // CEMB_TRAIN_CONFIG_H_
