#include "train/trainer.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/checksum.h"
#include "base/file.h"
#include "base/random.h"
#include "base/status_macros.h"
#include "base/timer.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/prepare.h"
#include "data/preprocess.h"
#include "distributed/comm.h"
#include "distributed/shard_plan.h"
#include "train/checkpoint.h"
#include "train/report.h"
#include "train/stepper.h"
#include "train/trainer_testing.h"

namespace cemb::train {
namespace {

namespace fs = std::filesystem;

// model.dram_budget is split by the traffic of this many first batches.
constexpr uint64_t kTrafficSampleBatches = 64;

// Doubles in the manifest: exact, as hex floats.
std::string ExactDouble(double v) { return absl::StrFormat("%a", v); }
bool ParseExactDouble(const std::string& s, double* v) {
  char* end = nullptr;
  *v = std::strtod(s.c_str(), &end);
  return end && *end == '\0' && !s.empty();
}

// This CPU's model name (/proc/cpuinfo), or "" where there is none.
std::string CpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (absl::StartsWith(line, "model name")) return std::string(absl::StripAsciiWhitespace(line.substr(line.find(':') + 1)));
  }
  return "";
}

// The vocabulary the data's ids were mapped by, into the checkpoint `dir`
// (a hard link where the file system allows one), so that a predictor maps
// raw ids as the training did. None (modulo, synthetic or binary data; data
// prepared before vocabularies were kept): nothing.
absl::Status KeepVocabulary(const std::string& vocabulary, const std::string& dir) {
  std::error_code ec;
  if (vocabulary.empty() || !fs::exists(vocabulary, ec)) return absl::OkStatus();
  const std::string to = absl::StrCat(dir, "/", data::kVocabularyFile);
  fs::create_hard_link(vocabulary, to, ec);
  if (ec) fs::copy_file(vocabulary, to, ec);
  if (ec) return absl::InternalError(absl::StrCat(to, ": cannot copy ", vocabulary, ": ", ec.message()));
  return absl::OkStatus();
}

}  // namespace

// Several processes: only rank 0 prints.
TrainerOptions Quiet(TrainerOptions o) {
  if (o.comm != nullptr && o.comm->rank() != 0) o.out = nullptr, o.progress_stream = nullptr;
  return o;
}

struct Trainer::Impl {
  Impl(const TrainConfig& c, const TrainerOptions& o)
      : config(c), options(Quiet(o)), report(options.out, options.progress_stream, c.train.progress) {}

  TrainConfig config;
  TrainerOptions options;
  TrainerTesting::WrapSsdIo wrap_ssd_io;  // tests only (TrainerTesting::Create)
  Report report;  // the text, the progress bar, the JSON lines
  data::PreparedData datasets;  // the datasets (and a temporary work directory, removed last)
  std::vector<uint64_t> table_sizes;
  std::unique_ptr<dlrm::Dlrm> model;
  DramSplit dram_split;  // model.dram_budget's split (empty without one)
  std::unique_ptr<data::Loader> loader;
  // The owner of every batch from the loader's peek to the unpin, for
  // training and evaluation, with this rank's share of every step on
  // several processes.
  std::unique_ptr<Stepper> steps;
  std::vector<float> probabilities;

  int64_t total_steps = 0;
  int64_t step = 0;  // steps done
  int64_t first_step = 0;
  int64_t last_checkpoint_step = -1;
  double interval_loss_sum = 0;  // since the previous eval record
  int64_t interval_steps = 0;

  ~Impl() {
    steps.reset();  // joins the prefetcher threads, which read the loader's batches
    loader.reset();
  }

  bool distributed() const { return options.comm != nullptr && options.comm->size() > 1; }
  int rank() const { return distributed() ? options.comm->rank() : 0; }
  int ranks() const { return distributed() ? options.comm->size() : 1; }
  // `s`, or on several processes the first failing rank's status on every
  // rank (collective: every rank calls it at the same point).
  absl::Status Agree(const absl::Status& s) const { return distributed() ? options.comm->AgreeOnStatus(s) : s; }
  // Several processes: *tables (this rank's) becomes every rank's, in table
  // order, on every rank, so the end-of-run report covers the whole model.
  absl::Status GatherTableReports(std::vector<TableReport>* tables) const {
    std::vector<std::string> all;
    CEMB_RETURN_IF_ERROR(options.comm->Allgather(EncodeTableReports(*tables), &all));
    tables->clear();
    for (size_t r = 0; r < all.size(); ++r) {
      absl::StatusOr<std::vector<TableReport>> theirs = DecodeTableReports(all[r]);
      if (!theirs.ok()) return absl::InternalError(absl::StrCat("rank ", r, "'s ", theirs.status().message()));
      tables->insert(tables->end(), theirs->begin(), theirs->end());
    }
    std::sort(tables->begin(), tables->end(), [](const TableReport& a, const TableReport& b) { return a.id < b.id; });
    return absl::OkStatus();
  }
  absl::Status PrepareData();
  absl::StatusOr<dlrm::MlpTimings> MeasureMlpPrecisions(const dlrm::DlrmOptions& mo);
  std::optional<dlrm::Precision> ResumedMlpPrecision() const;
  absl::Status BuildModel();
  absl::StatusOr<distributed::ShardPlan> PlanShards();
  absl::Status Resume();
  absl::StatusOr<MetricsResult> Evaluate(dlrm::PhaseTimes* times);
  absl::Status WriteCheckpointNow(double* seconds, std::string* path);
};

// ---------------------------------------------------------------------------
// Data.

absl::Status Trainer::Impl::PrepareData() {
  data::PrepareOptions o = config.ToPrepareOptions();
  o.log = [this](std::string_view line) { report.Print("%s\n", line); };
  CEMB_ASSIGN_OR_RETURN(datasets, data::PrepareData(o));
  table_sizes.assign(datasets.train->table_sizes().begin(), datasets.train->table_sizes().end());
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Model, loaders, resume.

absl::Status Trainer::Impl::BuildModel() {
  const TrainSettings& t = config.train;
  data::LoaderOptions lo;
  lo.batch_size = static_cast<uint32_t>(t.batch_size);
  lo.shuffle = t.shuffle ? data::Shuffle::kWithinBlocks : data::Shuffle::kNone;
  lo.block_samples = t.shuffle_block;
  lo.seed = SplitMix64::Mix(t.seed, 0x10ade5);
  lo.last_batch = data::LastBatch::kPartial;
  lo.num_epochs = 0;  // endless: the trainer counts steps
  lo.prefetch = std::max<uint32_t>(lo.prefetch, static_cast<uint32_t>(Stepper::PeekFor(t.prefetch_batches, ranks())));
  lo.rank = static_cast<uint32_t>(rank());
  lo.ranks = static_cast<uint32_t>(ranks());
  CEMB_ASSIGN_OR_RETURN(loader, data::Loader::Create(datasets.train, lo));
  total_steps = t.steps > 0 ? t.steps : t.epochs * static_cast<int64_t>(loader->batches_per_epoch());

  // The tables this process holds: all, or on several processes its share
  // of the plan.
  std::optional<distributed::ShardPlan> plan;
  std::vector<int> held;
  if (distributed()) {
    CEMB_ASSIGN_OR_RETURN(plan, PlanShards());
    held.assign(plan->tables_of(rank()).begin(), plan->tables_of(rank()).end());
  } else {
    for (size_t i = 0; i < table_sizes.size(); ++i) held.push_back(static_cast<int>(i));
  }

  // model.dram_budget is split by the traffic of the first batches (of the
  // tables here that share it only).
  std::vector<bool> shares(table_sizes.size());
  bool any_share = false;
  for (int i : held) {
    shares[i] = config.model.StorageOf(i).SharesDramBudget();
    any_share |= shares[i];
  }
  TableTraffic traffic;
  if (config.model.dram_budget && any_share) {
    traffic = SampleTraffic(*datasets.train, kTrafficSampleBatches * static_cast<uint64_t>(t.batch_size), shares);
  }
  CEMB_ASSIGN_OR_RETURN(dlrm::DlrmOptions mo, config.ToDlrmOptions(table_sizes, datasets.train->hotness(), &traffic,
                                                             &dram_split, distributed() ? &held : nullptr));
  mo.num_dense = datasets.train->num_dense();
  mo.embeddings.progress = [this](std::string_view line) { report.Print("%s\n", line); };  // ssd snapshots
  if (wrap_ssd_io) {
    for (size_t i = 0; i < mo.embeddings.tables.size(); ++i) {
      mo.embeddings.tables[i].storage.ssd.file.wrap_io = [wrap = wrap_ssd_io, t = held[i]](
                                                             std::unique_ptr<BlockIo> io) { return wrap(t, std::move(io)); };
    }
  }
  // The batch sizes the model sees: the full batch and the last partial
  // ones, or on several processes every rank's slices of them.
  std::vector<int64_t> global = {t.batch_size};
  for (const data::Dataset* d : {datasets.train.get(), datasets.validation.get()}) {
    const int64_t partial = d != nullptr ? static_cast<int64_t>(d->num_samples() % static_cast<uint64_t>(t.batch_size)) : 0;
    if (partial > 0) global.push_back(partial);
  }
  absl::StatusOr<std::vector<int64_t>> local = distributed::LocalBatchSizes(global, ranks());
  if (!local.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        config.source_name, ": ", local.status().message(),
        t.batch_size < ranks() ? " (train.batch_size)" : " (the last, partial batch of a dataset)",
        "; choose another train.batch_size or fewer ranks"));
  }
  std::vector<int64_t>& sizes = *local;
  mo.batch_size = sizes.back();
  sizes.pop_back();
  mo.extra_batch_sizes = sizes;
  if (mo.mlp_precision == dlrm::Precision::kAuto) {
    // A resumed run keeps the precision its checkpoint ran in; a fresh one
    // measures (where oneDNN has a bf16 matmul).
    if (options.resume) mo.mlp_auto.resumed = ResumedMlpPrecision();
    if (!mo.mlp_auto.resumed && !dlrm::DetectMatmulCpu().bf16_matmul.empty()) {
      CEMB_ASSIGN_OR_RETURN(mo.mlp_auto.measured, MeasureMlpPrecisions(mo));
    }
  }
  CEMB_ASSIGN_OR_RETURN(model, dlrm::Dlrm::Create(mo));
  // From here on the config holds the precision the model runs in (auto
  // resolved), so that a checkpoint's fingerprint records it and a bf16
  // checkpoint never resumes as fp32.
  config.SetMlpPrecision(model->options().mlp_precision);
  if (!config.model.init_from.empty()) {
    if (absl::Status s = model->ImportNpy(config.model.init_from); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(config.source_name, ": model.init_from: ", s.message()));
    }
    report.Print("model: every parameter from %s\n", config.model.init_from);
  }
  CEMB_ASSIGN_OR_RETURN(steps, Stepper::Create(&model->embeddings(), t.prefetch_batches,
                                               {.comm = distributed() ? options.comm : nullptr,
                                                .plan = plan ? &*plan : nullptr,
                                                .dim = mo.embeddings.dim,
                                                .max_local_batch = mo.batch_size}));
  probabilities.resize(static_cast<size_t>(t.batch_size));
  return absl::OkStatus();
}

// The MLPs' precision the newest checkpoint in train.checkpoint_dir ran in
// (its manifest's model.mlp_precision; no file is read or verified here:
// Resume does), or none where there is no such checkpoint (Resume says why).
std::optional<dlrm::Precision> Trainer::Impl::ResumedMlpPrecision() const {
  if (config.train.checkpoint_dir.empty()) return std::nullopt;
  absl::StatusOr<std::string> latest = LatestCheckpoint(config.train.checkpoint_dir);
  if (!latest.ok()) return std::nullopt;
  absl::StatusOr<CheckpointState> state = ReadCheckpoint(*latest, [](const std::string&) { return false; });
  if (!state.ok()) return std::nullopt;
  const std::optional<std::string> written = TrainConfig::FingerprintValue(state->config, "model.mlp_precision");
  if (!written) return std::nullopt;
  absl::StatusOr<dlrm::Precision> p = ParseName(dlrm::kPrecisionNames, *written, "model.mlp_precision");
  return p.ok() && *p != dlrm::Precision::kAuto ? std::optional<dlrm::Precision>(*p) : std::nullopt;
}

// model.mlp_precision=auto's measurement (dlrm/precision.h), once per
// machine and model shape: rank 0 reads it from the work directory, or
// measures it and keeps it there ("<work_dir>/mlp-precision-<hash>.txt": the
// two times, fp32 first); every rank takes rank 0's. So the runs on one
// machine and all the ranks of one choose alike, where a second measurement
// could differ (a resumed run keeps its checkpoint's precision instead). A
// temporary work directory keeps nothing (each run measures); a file that
// does not parse is measured again and rewritten.
absl::StatusOr<dlrm::MlpTimings> Trainer::Impl::MeasureMlpPrecisions(const dlrm::DlrmOptions& mo) {
  auto parse = [](const std::string& text) -> std::optional<dlrm::MlpTimings> {
    const std::vector<std::string> parts = absl::StrSplit(text, absl::ByAnyChar(" \n"), absl::SkipWhitespace());
    dlrm::MlpTimings m;
    if (parts.size() != 2 || !ParseExactDouble(parts[0], &m.fp32_ms) || !ParseExactDouble(parts[1], &m.bf16_ms) ||
        !(m.fp32_ms > 0) || !(m.bf16_ms > 0)) {
      return std::nullopt;
    }
    return m;
  };
  std::string text;  // "<fp32 ms> <bf16 ms>", or "error: <message>"
  if (rank() == 0) {
    const dlrm::MatmulCpu cpu = dlrm::DetectMatmulCpu();
    std::string path;
    if (!datasets.work_dir.empty() && !datasets.temporary_work_dir) {
      std::string key = absl::StrCat("mlp-precision v1\n", CpuModelName(), "\n", cpu.isa, "\n", cpu.bf16_matmul,
                                     "\nthreads ", omp_get_max_threads(), "\nbatch ", mo.batch_size, "\ndense ",
                                     mo.num_dense, "\nbottom ", absl::StrJoin(mo.bottom_mlp, ","), "\ntop ",
                                     absl::StrJoin(mo.top_mlp, ","), "\ntables ",
                                     mo.num_tables > 0 ? mo.num_tables : static_cast<int64_t>(mo.embeddings.tables.size()),
                                     "\ndim ", mo.embeddings.dim, "\ninteraction ", dlrm::InteractionKindName(mo.interaction),
                                     mo.self_interaction ? " self" : "",
                                     mo.interaction == dlrm::InteractionKind::kDcn
                                         ? absl::StrCat(" layers ", mo.dcn_layers, " rank ", mo.dcn_rank, " v2")
                                         : std::string());
      Checksum64 sum;
      sum.Update(key.data(), key.size());
      path = absl::StrFormat("%s/mlp-precision-%016x.txt", datasets.work_dir, sum.Digest());
      if (absl::StatusOr<std::string> kept = base::ReadWholeFile(path); kept.ok() && parse(*kept)) text = *kept;
    }
    if (text.empty()) {
      absl::StatusOr<dlrm::MlpTimings> m = dlrm::Dlrm::TimeMlpPrecisions(mo);
      text = m.ok() ? absl::StrCat(ExactDouble(m->fp32_ms), " ", ExactDouble(m->bf16_ms), "\n")
                    : absl::StrCat("error: ", m.status().message());
      if (m.ok() && !path.empty()) {
        if (absl::Status s = base::WriteFileAtomically(path, text); !s.ok()) {
          report.Print("warning: model.mlp_precision=auto: could not keep the measurement: %s\n", s.message());
        }
      }
    }
  }
  if (distributed()) CEMB_RETURN_IF_ERROR(options.comm->Broadcast(&text, 0));
  if (std::optional<dlrm::MlpTimings> m = parse(text)) return *m;
  return absl::InternalError(absl::StrCat(config.source_name, ": model.mlp_precision=auto: timing the MLPs: ",
                                          absl::StripPrefix(text, "error: ")));
}

absl::StatusOr<distributed::ShardPlan> Trainer::Impl::PlanShards() {
  const EmbeddingOptimizer optimizer = config.optimizer.embedding;
  const std::vector<distributed::TableCost> costs = distributed::TableCosts(
      table_sizes,
      EmbeddingRowBytes(config.model.embedding_dim, config.model.bf16_tables, optimizer) + RowwiseStateBytes(optimizer),
      config.train.batch_size, datasets.train->hotness());
  CEMB_ASSIGN_OR_RETURN(distributed::ShardPlan plan, distributed::ShardPlan::Create(costs, ranks()));
  report.Print("tables on %d ranks:\n", ranks());
  for (int r = 0; r < ranks(); ++r) report.Print("  %s\n", plan.Describe(r));
  return plan;
}

absl::Status Trainer::Impl::Resume() {
  const std::string& dir = config.train.checkpoint_dir;
  if (dir.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(config.source_name, ": --resume needs train.checkpoint_dir (where the checkpoints are)"));
  }
  CEMB_ASSIGN_OR_RETURN(std::string path, LatestCheckpoint(dir));
  // Several processes: each verifies the MLPs and the tables it loads, not
  // every rank's (a table's bytes are read by its owner alone).
  std::function<bool(const std::string&)> verify;
  if (distributed()) {
    verify = [&tables = model->options().embeddings.tables](const std::string& name) {
      const int t = dlrm::Dlrm::TableOfFile(name);
      return t < 0 || std::any_of(tables.begin(), tables.end(), [t](const EmbeddingTableSpec& s) { return s.id == t; });
    };
  }
  CEMB_ASSIGN_OR_RETURN(CheckpointState state, ReadCheckpoint(path, verify));
  if (std::optional<TrainConfig::FingerprintDiff> d = config.DiffFingerprint(state.config)) {
    std::string diff = d->key.empty() ? std::string("the settings differ")
                                      : absl::StrCat("it was written with ", d->key, "=", d->was,
                                                     ", the config says ", d->key, "=", d->is);
    if (d->key == "model.mlp_precision") {
      // Name what auto chose.
      const dlrm::MlpPrecisionChoice& p = model->mlp_precision_choice();
      diff = absl::StrCat("it was written with ", d->was, " MLPs, this run's are ", dlrm::PrecisionName(p.precision),
                          p.reason.empty() ? "" : absl::StrCat(" (", p.reason, ")"),
                          "; set model.mlp_precision=", d->was, " to resume it");
    }
    return absl::FailedPreconditionError(absl::StrCat("cannot resume from ", path, ": ", diff,
                                                      " (only these may change: ",
                                                      TrainConfig::MayChangeOnResumeList(), ")"));
  }
  CEMB_ASSIGN_OR_RETURN(data::LoaderPosition pos, data::LoaderPosition::Parse(state.loader_position));
  CEMB_RETURN_IF_ERROR(model->Load(path + "/model"));
  CEMB_RETURN_IF_ERROR(loader->Seek(pos));
  step = first_step = last_checkpoint_step = state.step;
  auto get = [&](const std::string& k) { auto it = state.state.find(k); return it == state.state.end() ? std::string() : it->second; };
  if (!ParseExactDouble(get("interval_loss_sum"), &interval_loss_sum) ||
      !absl::SimpleAtoi(get("interval_steps"), &interval_steps)) {
    interval_loss_sum = 0, interval_steps = 0;
  }
  const std::string threads = get("threads");
  if (!threads.empty() && threads != absl::StrCat(config.train.threads)) {
    report.Print("warning: the checkpoint was written with train.threads=%s, this run uses %d: the losses may differ "
          "in the last bits from an uninterrupted run\n",
          threads, config.train.threads);
  }
  const std::string written_ranks = get("ranks").empty() ? "1" : get("ranks");
  if (written_ranks != absl::StrCat(ranks())) {
    report.Print("the checkpoint was written by %s rank(s), this run has %d: each loads the tables it owns now\n",
                 written_ranks, ranks());
  }
  report.Print("resumed from %s at step %d\n", path, step);
  return absl::OkStatus();
}

absl::StatusOr<MetricsResult> Trainer::Impl::Evaluate(dlrm::PhaseTimes* times) {
  BinaryMetrics metrics;
  if (!datasets.validation) return metrics.Compute();
  CEMB_RETURN_IF_ERROR(steps->Drain());  // the training's prefetches done: the tables are quiet
  data::LoaderOptions lo;
  lo.batch_size = static_cast<uint32_t>(config.train.batch_size);
  lo.shuffle = data::Shuffle::kNone;
  lo.num_epochs = 1;
  lo.prefetch = 2;
  lo.rank = static_cast<uint32_t>(rank());
  lo.ranks = static_cast<uint32_t>(ranks());
  CEMB_ASSIGN_OR_RETURN(std::unique_ptr<data::Loader> eval_loader, data::Loader::Create(datasets.validation, lo));
  std::vector<float> all_probs, all_labels;  // several processes: every rank's, gathered
  int64_t batches = 0;
  while (config.train.eval_batches == 0 || batches < config.train.eval_batches) {
    const data::Batch* b = nullptr;
    {
      ScopedSeconds timer(dlrm::PhaseSeconds(times, dlrm::Phase::kData));
      b = eval_loader->Next();  // every rank's loader ends at the same batch
    }
    if (!b) break;
    std::span<float> probs(probabilities.data(), b->size());
    CEMB_ASSIGN_OR_RETURN(const StepBatch* batch, steps->BeginEval(*b, times));
    CEMB_RETURN_IF_ERROR(model->Predict(batch->view, probs, times));
    CEMB_RETURN_IF_ERROR(steps->EndEval(times));
    if (distributed()) {
      CEMB_RETURN_IF_ERROR(options.comm->Allgatherv(probs, &all_probs));
      CEMB_RETURN_IF_ERROR(options.comm->Allgatherv(b->labels(), &all_labels));
      metrics.Add(all_probs, all_labels);
    } else {
      metrics.Add(probs, b->labels());
    }
    ++batches;
  }
  return metrics.Compute();
}

absl::Status Trainer::Impl::WriteCheckpointNow(double* seconds, std::string* path) {
  const auto start = SteadyClock::now();
  CEMB_RETURN_IF_ERROR(steps->Drain());
  CheckpointState s;
  s.step = step;
  s.loader_position = loader->position().Serialize();
  s.config = config.Fingerprint();
  s.state["train_seed"] = absl::StrCat(config.train.seed);
  s.state["data_seed"] = absl::StrCat(config.data.seed);
  s.state["threads"] = absl::StrCat(config.train.threads);
  s.state["next_learning_rate"] = ExactDouble(config.optimizer.LearningRate(step));
  s.state["interval_loss_sum"] = ExactDouble(interval_loss_sum);
  s.state["interval_steps"] = absl::StrCat(interval_steps);
  s.state["ranks"] = absl::StrCat(ranks());
  if (distributed()) s.state["table_owners"] = absl::StrJoin(steps->plan()->owners(), ",");
  CEMB_ASSIGN_OR_RETURN(
      *path, WriteCheckpointOnRanks(
                 config.train.checkpoint_dir, s, options.comm,
                 [&](const std::string& dir) -> absl::Status {
                   std::error_code ec;
                   fs::create_directories(dir + "/model", ec);
                   if (ec) return absl::InternalError(absl::StrCat(dir, "/model: ", ec.message()));
                   // Rank 0: the MLPs, its tables and the serving manifest; the others: their tables.
                   if (rank() != 0) return model->embeddings().Save(dir + "/model", "emb_l.");
                   CEMB_RETURN_IF_ERROR(base::WriteFileAtomically(
                       absl::StrCat(dir, "/", kServingManifest),
                       SerializeServingManifest(
                           config.ToServingManifest(model->options(), table_sizes, datasets.train->hotness()))));
                   CEMB_RETURN_IF_ERROR(KeepVocabulary(datasets.vocabulary, dir));
                   return model->Save(dir + "/model");
                 },
                 static_cast<int>(config.train.keep_checkpoints)));
  last_checkpoint_step = step;
  const double secs = SecondsSince(start);
  *seconds += secs;
  report.Print("checkpoint: %s (%.1f s)\n", *path, secs);
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------

Trainer::Trainer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Trainer::~Trainer() = default;
dlrm::Dlrm& Trainer::model() { return *impl_->model; }
const std::vector<uint64_t>& Trainer::table_sizes() const { return impl_->table_sizes; }
int64_t Trainer::total_steps() const { return impl_->total_steps; }
int64_t Trainer::step() const { return impl_->step; }

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const TrainConfig& config, const TrainerOptions& options) {
  return Create(std::make_unique<Impl>(config, options));
}

absl::StatusOr<std::unique_ptr<Trainer>> TrainerTesting::Create(const TrainConfig& config,
                                                                const TrainerOptions& options,
                                                                WrapSsdIo wrap_ssd_io) {
  auto impl = std::make_unique<Trainer::Impl>(config, options);
  impl->wrap_ssd_io = std::move(wrap_ssd_io);
  return Trainer::Create(std::move(impl));
}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(std::unique_ptr<Impl> impl) {
  Impl& m = *impl;
  const TrainConfig& config = m.config;
  const TrainerOptions& options = m.options;
  const TrainSettings& t = config.train;

  absl::Status fresh;
  if (!options.resume && !t.checkpoint_dir.empty()) {
    if (absl::StatusOr<std::string> latest = LatestCheckpoint(t.checkpoint_dir); latest.ok()) {
      fresh = absl::AlreadyExistsError(absl::StrCat(
          t.checkpoint_dir, " already holds checkpoints (newest: ", fs::path(*latest).filename().string(),
          "): pass --resume to continue from it, or choose another train.checkpoint_dir"));
    }
  }
  CEMB_RETURN_IF_ERROR(m.Agree(fresh));
  // train.threads bounds every OpenMP region of the run, oneDNN's included
  // (its primitives run on the calling thread's OpenMP team), not only the
  // kernels that take a thread count.
  if (t.threads > 0) omp_set_num_threads(t.threads);
  // Several processes: rank 0 prepares the data, then the others find it
  // prepared (data/prepare.h reuses it) instead of writing it at once.
  CEMB_RETURN_IF_ERROR(m.Agree(m.rank() == 0 ? m.PrepareData() : absl::OkStatus()));
  CEMB_RETURN_IF_ERROR(m.Agree(m.rank() != 0 ? m.PrepareData() : absl::OkStatus()));
  CEMB_RETURN_IF_ERROR(m.Agree(m.BuildModel()));

  // The plan, before the (possibly long) resume.
  TableBytes table_bytes = TableBytesOf(m.model->options(), config.model.bf16_tables);
  if (m.distributed()) {  // every rank's tables
    double b[] = {table_bytes.dram, table_bytes.slow, table_bytes.ssd};
    CEMB_RETURN_IF_ERROR(m.options.comm->AllreduceSum(std::span<double>(b)));
    table_bytes = {.dram = b[0], .slow = b[1], .ssd = b[2]};
  }
  std::string budget = DramBudgetText(config, m.dram_split, m.rank(), m.ranks());
  if (m.distributed()) {  // every rank's split of its own budget, in rank order
    std::vector<std::string> all;
    CEMB_RETURN_IF_ERROR(m.options.comm->Allgather(budget, &all));
    budget = absl::StrJoin(all, "");
  }
  m.report.Print("%s", PlanText(config, m.model->options(), table_bytes, budget, m.model->mlp_precision_choice(),
                                *m.datasets.train, m.datasets.validation.get(), m.total_steps,
                                static_cast<int64_t>(m.loader->samples_before(static_cast<uint64_t>(m.total_steps)))));

  if (options.resume) CEMB_RETURN_IF_ERROR(m.Agree(m.Resume()));
  absl::Status log;
  if (!t.log_jsonl.empty() && m.rank() == 0) {
    if (absl::Status s = m.report.OpenLog(t.log_jsonl, options.resume); !s.ok()) {
      log = absl::Status(s.code(), absl::StrCat(config.source_name, ": train.log_jsonl: ", s.message()));
    }
  }
  CEMB_RETURN_IF_ERROR(m.Agree(log));
  return std::unique_ptr<Trainer>(new Trainer(std::move(impl)));
}

absl::StatusOr<MetricsResult> Trainer::Evaluate() {
  dlrm::PhaseTimes times;
  return impl_->Evaluate(&times);
}

absl::StatusOr<TrainSummary> Trainer::Run() {
  Impl& m = *impl_;
  const TrainSettings& t = m.config.train;
  TrainSummary summary;
  summary.first_step = m.step;
  summary.losses.reserve(static_cast<size_t>(std::max<int64_t>(0, m.total_steps - m.step)));
  const double train_n = static_cast<double>(m.datasets.train->num_samples());
  const auto run_start = SteadyClock::now();
  double step_wall = 0;
  int64_t samples_done = 0;
  // The progress bar's running loss: the mean of the last kWindow steps.
  constexpr int kWindow = 50;
  std::vector<double> window(kWindow, 0.0);
  double window_sum = 0;
  int64_t window_n = 0;

  auto eval_record = [&](float lr) -> absl::Status {
    const auto e0 = SteadyClock::now();
    CEMB_ASSIGN_OR_RETURN(MetricsResult r, m.Evaluate(&summary.eval_times));
    summary.eval_seconds += SecondsSince(e0);
    EvalRecord rec;
    rec.step = m.step;
    rec.samples = static_cast<int64_t>(m.loader->samples_before(static_cast<uint64_t>(m.step)));
    rec.epoch = static_cast<double>(rec.samples) / train_n;
    rec.lr = lr;
    rec.train_loss = m.interval_steps > 0 ? m.interval_loss_sum / static_cast<double>(m.interval_steps) : NAN;
    rec.metrics = r;
    rec.elapsed_seconds = SecondsSince(run_start);
    m.interval_loss_sum = 0, m.interval_steps = 0;
    summary.evals.push_back(rec);
    const double sps = step_wall > 0 ? static_cast<double>(samples_done) / step_wall : 0;
    m.report.Eval(rec, sps);
    return absl::OkStatus();
  };

  float lr = 0;
  while (m.step < m.total_steps) {
    const auto t0 = SteadyClock::now();
    CEMB_ASSIGN_OR_RETURN(const StepBatch* batch, m.steps->BeginTrain(*m.loader, m.step, m.total_steps,
                                                                     &summary.train_times));
    lr = m.config.optimizer.LearningRate(m.step);
    CEMB_ASSIGN_OR_RETURN(const double loss, m.model->TrainStep(batch->view, lr, &summary.train_times));
    CEMB_RETURN_IF_ERROR(m.steps->EndTrain(m.step, &summary.train_times));
    const double step_seconds = SecondsSince(t0);
    step_wall += step_seconds;
    if (step_seconds > summary.slowest_step_seconds) {
      summary.slowest_step_seconds = step_seconds;
      summary.slowest_step = m.step;
    }
    samples_done += batch->batch->global_size();
    if (!std::isfinite(loss)) {
      m.report.ClearProgress();
      return absl::InvalidArgumentError(absl::StrFormat(
          "training diverged at step %d: the loss is %f (try a lower optimizer.learning_rate or a warm-up)", m.step,
          loss));
    }
    summary.losses.push_back(loss);
    if (t.log_every > 0 && m.step % t.log_every == 0) m.report.Step(m.step, loss, lr, step_seconds);
    ++m.step;
    m.interval_loss_sum += loss;
    ++m.interval_steps;
    window_sum += loss - window[static_cast<size_t>(window_n % kWindow)];
    window[static_cast<size_t>(window_n % kWindow)] = loss;
    ++window_n;
    const double sps = static_cast<double>(samples_done) / step_wall;
    const double eta = static_cast<double>(m.total_steps - m.step) * step_wall /
                       static_cast<double>(m.step - summary.first_step);
    const double window_loss = window_sum / static_cast<double>(std::min<int64_t>(window_n, kWindow));
    m.report.Progress(m.step, m.total_steps, sps, window_loss, eta);

    if (t.eval_every > 0 && m.step % t.eval_every == 0 && m.step < m.total_steps) CEMB_RETURN_IF_ERROR(eval_record(lr));
    if (t.checkpoint_every > 0 && m.step % t.checkpoint_every == 0 && m.step < m.total_steps) {
      CEMB_RETURN_IF_ERROR(m.WriteCheckpointNow(&summary.checkpoint_seconds, &summary.last_checkpoint));
    }
  }
  m.report.ClearProgress();
  CEMB_RETURN_IF_ERROR(m.steps->Drain());
  summary.steps = m.step;
  summary.train_seconds = step_wall;
  summary.samples_per_second = step_wall > 0 ? static_cast<double>(samples_done) / step_wall : 0;
  const double accounted = summary.train_times.total() - summary.train_times[dlrm::Phase::kOther];
  summary.train_times[dlrm::Phase::kOther] += std::max(0.0, step_wall - accounted);

  // Final evaluation and checkpoint.
  if (m.datasets.validation) {
    CEMB_RETURN_IF_ERROR(eval_record(lr));
    summary.final_metrics = summary.evals.back().metrics;
  }
  if (!t.checkpoint_dir.empty() && m.last_checkpoint_step != m.step) {
    CEMB_RETURN_IF_ERROR(m.WriteCheckpointNow(&summary.checkpoint_seconds, &summary.last_checkpoint));
  }
  summary.tables = m.model->embeddings().Report();
  if (m.distributed()) CEMB_RETURN_IF_ERROR(m.GatherTableReports(&summary.tables));
  if (!t.export_dir.empty()) {
    const auto e0 = SteadyClock::now();
    // Several processes: rank 0 writes the MLPs and its tables, every other
    // rank its tables.
    absl::Status s = m.rank() == 0 ? m.model->ExportNpy(t.export_dir) : absl::OkStatus();
    if (m.rank() != 0) {
      std::error_code ec;
      fs::create_directories(t.export_dir, ec);
      s = ec ? absl::InternalError(absl::StrCat("cannot create '", t.export_dir, "': ", ec.message()))
             : m.model->embeddings().ExportNpy(t.export_dir, "emb_l.");
    }
    if (!s.ok()) s = absl::Status(s.code(), absl::StrCat("export to ", t.export_dir, " (train.export_dir): ", s.message()));
    CEMB_RETURN_IF_ERROR(m.Agree(s));
    summary.export_seconds = SecondsSince(e0);
    m.report.Print("export: the trained model as .npy files in %s (%.1f s)\n", t.export_dir, summary.export_seconds);
  }

  m.report.Summary(summary, {.config_name = m.config.source_name,
                             .batch_size = t.batch_size,
                             .has_validation = m.datasets.validation != nullptr,
                             .mlp_precision = m.model->options().mlp_precision,
                             .mlp_precision_requested = m.model->mlp_precision_choice().requested});
  return summary;
}

}  // namespace cemb::train
