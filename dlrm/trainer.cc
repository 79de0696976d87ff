#include "dlrm/trainer.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/checksum.h"
#include "base/file.h"
#include "base/human.h"
#include "base/random.h"
#include "base/status_macros.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/prepare.h"
#include "dlrm/checkpoint.h"
#include "dlrm/step_cycle.h"

namespace cemb::dlrm {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

std::string HumanCount(double v) {
  if (v >= 1e9) return absl::StrFormat("%.2fG", v / 1e9);
  if (v >= 1e6) return absl::StrFormat("%.2fM", v / 1e6);
  if (v >= 1e4) return absl::StrFormat("%.1fk", v / 1e3);
  return absl::StrFormat("%.0f", v);
}

// model.dram_budget is split by the traffic of this many first batches.
constexpr uint64_t kTrafficSampleBatches = 64;

std::string HumanTime(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const int64_t t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600) return absl::StrFormat("%dh%02dm", t / 3600, (t / 60) % 60);
  if (t >= 60) return absl::StrFormat("%dm%02ds", t / 60, t % 60);
  return absl::StrFormat("%ds", t);
}

// JSON helpers: numbers (NaN/inf as null) and strings.
std::string JsonNumber(double v) {
  if (!std::isfinite(v)) return "null";
  return absl::StrFormat("%.17g", v);
}
std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

// Doubles in the manifest: exact, as hex floats.
std::string ExactDouble(double v) { return absl::StrFormat("%a", v); }
bool ParseExactDouble(const std::string& s, double* v) {
  char* end = nullptr;
  *v = std::strtod(s.c_str(), &end);
  return end && *end == '\0' && !s.empty();
}

// A one-line progress bar on a terminal, redrawn at most 5 times a second.
class ProgressBar {
 public:
  ProgressBar(FILE* stream, bool wanted) : stream_(stream), enabled_(wanted && stream && ::isatty(::fileno(stream))) {}
  void Update(int64_t step, int64_t total, double samples_per_s, double loss, double eta_s) {
    if (!enabled_) return;
    const auto now = Clock::now();
    if (step < total && drawn_ && now - last_ < std::chrono::milliseconds(200)) return;
    last_ = now;
    drawn_ = true;
    constexpr int kWidth = 24;
    const double f = total > 0 ? static_cast<double>(step) / static_cast<double>(total) : 1.0;
    std::string bar(static_cast<size_t>(f * kWidth), '=');
    bar.resize(kWidth, ' ');
    std::fprintf(stream_, "\r\033[Kstep %" PRId64 "/%" PRId64 " [%s] %5.1f%% %s samples/s loss %.4f ETA %s", step,
                 total, bar.c_str(), 100 * f, HumanCount(samples_per_s).c_str(), loss, HumanTime(eta_s).c_str());
    std::fflush(stream_);
  }
  // Erases the bar so that a report line can be printed.
  void Clear() {
    if (!enabled_ || !drawn_) return;
    std::fprintf(stream_, "\r\033[K");
    std::fflush(stream_);
    drawn_ = false;
  }

 private:
  FILE* stream_;
  bool enabled_;
  bool drawn_ = false;
  Clock::time_point last_{};
};

}  // namespace

struct Trainer::Impl {
  TrainConfig config;
  TrainerOptions options;
  data::PreparedData datasets;  // the datasets (and a temporary work directory, removed last)
  std::vector<uint64_t> table_sizes;
  std::unique_ptr<Dlrm> model;
  DramSplit dram_split;  // model.dram_budget's split (empty without one)
  std::unique_ptr<data::Loader> loader;
  // The owner of every step's beginning and end (prefetch, ssd wait, unpin,
  // flushes): one for training (ids = step numbers), one for evaluation
  // (its own id range, prefetching each batch just before it).
  std::unique_ptr<StepCycle> train_cycle, eval_cycle;
  int64_t next_eval_id = int64_t{1} << 62;
  std::vector<Bags<int32_t>> bags;
  std::vector<float> probabilities;

  int64_t total_steps = 0;
  int64_t step = 0;  // steps done
  int64_t first_step = 0;
  int64_t last_checkpoint_step = -1;
  double interval_loss_sum = 0;  // since the previous eval record
  int64_t interval_steps = 0;
  std::FILE* jsonl = nullptr;
  ProgressBar progress{nullptr, false};

  ~Impl() {
    train_cycle.reset();  // joins the prefetcher thread, which reads the loader's batches
    loader.reset();
    if (jsonl) std::fclose(jsonl);
  }

  template <typename... Args>
  void Print(const absl::FormatSpec<Args...>& format, const Args&... args) {
    if (!options.out) return;
    progress.Clear();
    std::fputs(absl::StrFormat(format, args...).c_str(), options.out);
    std::fflush(options.out);
  }

  absl::Status PrepareData();
  absl::Status BuildModel();
  absl::Status Resume();
  absl::StatusOr<MetricsResult> Evaluate(PhaseTimes* times);
  absl::Status WriteCheckpointNow(double* seconds, std::string* path);
  BatchView View(const data::Batch& b);
  void WriteJson(const std::string& record) {
    if (!jsonl) return;
    std::fputs(record.c_str(), jsonl);
    std::fputc('\n', jsonl);
    std::fflush(jsonl);
  }
};

// ---------------------------------------------------------------------------
// Data.

absl::Status Trainer::Impl::PrepareData() {
  data::PrepareOptions o = config.ToPrepareOptions();
  o.log = [this](std::string_view line) { Print("%s\n", line); };
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
  lo.prefetch = std::max<uint32_t>(lo.prefetch, static_cast<uint32_t>(t.prefetch_batches));  // Peek's reach
  CEMB_ASSIGN_OR_RETURN(loader, data::Loader::Create(datasets.train, lo));
  total_steps = t.steps > 0 ? t.steps : t.epochs * static_cast<int64_t>(loader->batches_per_epoch());

  // model.dram_budget is split by the traffic of the first batches (of the
  // tables that share it only).
  std::vector<bool> shares(table_sizes.size());
  bool any_share = false;
  for (size_t i = 0; i < shares.size(); ++i) {
    shares[i] = config.model.StorageOf(static_cast<int>(i)).SharesDramBudget();
    any_share |= shares[i];
  }
  TableTraffic traffic;
  if (config.model.dram_budget && any_share) {
    traffic = SampleTraffic(*datasets.train, kTrafficSampleBatches * static_cast<uint64_t>(t.batch_size), shares);
  }
  CEMB_ASSIGN_OR_RETURN(DlrmOptions mo,
                        config.ToDlrmOptions(table_sizes, datasets.train->hotness(), &traffic, &dram_split));
  mo.num_dense = datasets.train->num_dense();
  mo.embeddings.progress = [this](std::string_view line) { Print("%s\n", line); };  // ssd snapshots
  if (options.wrap_ssd_io) {
    for (size_t i = 0; i < mo.embeddings.tables.size(); ++i) {
      mo.embeddings.tables[i].storage.ssd.file.wrap_io = [wrap = options.wrap_ssd_io, t = static_cast<int>(i)](
                                                             std::unique_ptr<BlockIo> io) { return wrap(t, std::move(io)); };
    }
  }
  std::vector<int64_t> extra;
  auto plan = [&](uint64_t samples) {
    const int64_t partial = static_cast<int64_t>(samples % static_cast<uint64_t>(t.batch_size));
    if (partial > 0) extra.push_back(partial);
  };
  plan(datasets.train->num_samples());
  if (datasets.validation) plan(datasets.validation->num_samples());
  std::sort(extra.begin(), extra.end());
  extra.erase(std::unique(extra.begin(), extra.end()), extra.end());
  mo.extra_batch_sizes = extra;
  CEMB_ASSIGN_OR_RETURN(model, Dlrm::Create(mo));
  // From here on the config holds the precision the model runs in (auto
  // resolved), so that a checkpoint's fingerprint records it and a bf16
  // checkpoint never resumes as fp32.
  config.SetMlpPrecision(model->options().mlp_precision);
  if (!config.model.init_from.empty()) {
    if (absl::Status s = model->ImportNpy(config.model.init_from); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(config.source_name, ": model.init_from: ", s.message()));
    }
    Print("model: every parameter from %s\n", config.model.init_from);
  }
  train_cycle = std::make_unique<StepCycle>(&model->embeddings(), t.prefetch_batches);
  eval_cycle = std::make_unique<StepCycle>(&model->embeddings(), 0);
  bags.resize(table_sizes.size());
  probabilities.resize(static_cast<size_t>(t.batch_size));
  return absl::OkStatus();
}

absl::Status Trainer::Impl::Resume() {
  const std::string& dir = config.train.checkpoint_dir;
  if (dir.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(config.source_name, ": --resume needs train.checkpoint_dir (where the checkpoints are)"));
  }
  CEMB_ASSIGN_OR_RETURN(std::string path, LatestCheckpoint(dir));
  CEMB_ASSIGN_OR_RETURN(CheckpointState state, ReadCheckpoint(path));
  // Checkpoints from before the fingerprint's version line compare with the
  // fingerprint of their time.
  const bool legacy = !absl::StartsWith(state.config, absl::StrCat(TrainConfig::kFingerprintVersion, "\n"));
  const std::string now = legacy ? config.LegacyFingerprint() : config.Fingerprint();
  if (state.config != now) {
    // The first key, in the checkpoint's order, whose value differs (or that
    // only one side has).
    auto parse = [](const std::string& fingerprint) {
      std::vector<std::pair<std::string, std::string>> lines;
      for (absl::string_view line : absl::StrSplit(fingerprint, '\n', absl::SkipEmpty())) {
        const size_t eq = line.find('=');
        lines.emplace_back(std::string(line.substr(0, eq)),
                           eq == absl::string_view::npos ? "" : std::string(line.substr(eq + 1)));
      }
      return lines;
    };
    auto was = parse(state.config), is = parse(now);
    if (legacy) {
      // Legacy fingerprints hold these enums as numbers: name them.
      static const std::pair<const char*, std::vector<const char*>> kEnums[] = {
          {"data.distribution", {"uniform", "zipf"}},    {"data.format", {"kaggle", "terabyte"}},
          {"data.index_mode", {"modulo", "vocabulary"}}, {"model.interaction", {"dot", "concat"}},
          {"model.mlp_precision", {"fp32", "bf16", "auto"}}, {"optimizer.embedding", {"sgd", "rowwise_adagrad"}}};
      for (auto* lines : {&was, &is}) {
        for (auto& [k, v] : *lines) {
          for (const auto& [name, values] : kEnums) {
            int i;
            if (k == name && absl::SimpleAtoi(v, &i) && i >= 0 && i < static_cast<int>(values.size())) v = values[i];
          }
        }
      }
    }
    auto find = [](const auto& lines, const std::string& key) -> const std::string* {
      for (const auto& [k, v] : lines) {
        if (k == key) return &v;
      }
      return nullptr;
    };
    std::string key, old_value, new_value;
    for (const auto& [k, v] : was) {
      const std::string* n = find(is, k);
      if (n == nullptr || *n != v) {
        key = k, old_value = v, new_value = n ? *n : "(not set)";
        break;
      }
    }
    for (size_t i = 0; key.empty() && i < is.size(); ++i) {
      if (find(was, is[i].first) == nullptr) key = is[i].first, old_value = "(not set)", new_value = is[i].second;
    }
    std::string diff = key.empty() ? std::string("the settings differ")
                                   : absl::StrCat("it was written with ", key, "=", old_value, ", the config says ",
                                                  key, "=", new_value);
    if (key == "model.mlp_precision") {
      // Name what auto chose.
      const std::string& name = old_value;
      const MlpPrecisionChoice& p = model->mlp_precision_choice();
      diff = absl::StrCat("it was written with ", name, " MLPs, this run's are ", PrecisionName(p.precision),
                          p.reason.empty() ? "" : absl::StrCat(" (", p.reason, ")"),
                          "; set model.mlp_precision=", name, " to resume it");
    }
    return absl::FailedPreconditionError(
        absl::StrCat("cannot resume from ", path, ": ", diff,
                     " (only train.steps, epochs, evaluation, logging, checkpoint, threads and storage settings "
                     "may change)"));
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
    Print("warning: the checkpoint was written with train.threads=%s, this run uses %d: the losses may differ "
          "in the last bits from an uninterrupted run\n",
          threads, config.train.threads);
  }
  Print("resumed from %s at step %d\n", path, step);
  return absl::OkStatus();
}

BatchView Trainer::Impl::View(const data::Batch& b) {
  for (uint32_t t = 0; t < b.num_tables(); ++t) bags[t] = Bags<int32_t>{b.offsets(t), b.indices(t)};
  BatchView v;
  v.size = b.size();
  v.dense = b.dense();
  v.labels = b.labels();
  v.bags = std::span<const Bags<int32_t>>(bags.data(), bags.size());
  return v;
}

absl::StatusOr<MetricsResult> Trainer::Impl::Evaluate(PhaseTimes* times) {
  BinaryMetrics metrics;
  if (!datasets.validation) return metrics.Compute();
  CEMB_RETURN_IF_ERROR(train_cycle->Drain());  // the training's prefetches done: the tables are quiet
  data::LoaderOptions lo;
  lo.batch_size = static_cast<uint32_t>(config.train.batch_size);
  lo.shuffle = data::Shuffle::kNone;
  lo.num_epochs = 1;
  lo.prefetch = 2;
  CEMB_ASSIGN_OR_RETURN(std::unique_ptr<data::Loader> eval_loader, data::Loader::Create(datasets.validation, lo));
  int64_t batches = 0;
  while (config.train.eval_batches == 0 || batches < config.train.eval_batches) {
    const auto t0 = Clock::now();
    const data::Batch* b = eval_loader->Next();
    (*times)[Phase::kData] += Seconds(t0, Clock::now());
    if (!b) break;
    const BatchView view = View(*b);
    std::span<float> probs(probabilities.data(), b->size());
    const int64_t id = next_eval_id++;
    CEMB_RETURN_IF_ERROR(eval_cycle->Begin(id, view.bags, {}, times));
    CEMB_RETURN_IF_ERROR(model->Predict(view, probs, times));
    CEMB_RETURN_IF_ERROR(eval_cycle->End(id, times));
    metrics.Add(probs, b->labels());
    ++batches;
  }
  return metrics.Compute();
}

absl::Status Trainer::Impl::WriteCheckpointNow(double* seconds, std::string* path) {
  const auto start = Clock::now();
  CEMB_RETURN_IF_ERROR(train_cycle->Drain());
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
  CEMB_ASSIGN_OR_RETURN(*path, WriteCheckpoint(
                                   config.train.checkpoint_dir, s,
                                   [&](const std::string& dir) -> absl::Status {
                                     std::error_code ec;
                                     fs::create_directories(dir + "/model", ec);
                                     if (ec) return absl::InternalError(absl::StrCat(dir, "/model: ", ec.message()));
                                     return model->Save(dir + "/model");
                                   },
                                   static_cast<int>(config.train.keep_checkpoints)));
  last_checkpoint_step = step;
  const double secs = Seconds(start, Clock::now());
  *seconds += secs;
  Print("checkpoint: %s (%.1f s)\n", *path, secs);
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------

Trainer::Trainer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Trainer::~Trainer() = default;
Dlrm& Trainer::model() { return *impl_->model; }
const std::vector<uint64_t>& Trainer::table_sizes() const { return impl_->table_sizes; }
int64_t Trainer::total_steps() const { return impl_->total_steps; }
int64_t Trainer::step() const { return impl_->step; }

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const TrainConfig& config, const TrainerOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->options = options;
  impl->progress = ProgressBar(options.progress_stream, config.train.progress);
  const TrainSettings& t = config.train;

  if (!options.resume && !t.checkpoint_dir.empty()) {
    if (absl::StatusOr<std::string> latest = LatestCheckpoint(t.checkpoint_dir); latest.ok()) {
      return absl::AlreadyExistsError(absl::StrCat(
          t.checkpoint_dir, " already holds checkpoints (newest: ", fs::path(*latest).filename().string(),
          "): pass --resume to continue from it, or choose another train.checkpoint_dir"));
    }
  }
  // train.threads bounds every OpenMP region of the run, oneDNN's included
  // (its primitives run on the calling thread's OpenMP team), not only the
  // kernels that take a thread count.
  if (t.threads > 0) omp_set_num_threads(t.threads);
  CEMB_RETURN_IF_ERROR(impl->PrepareData());
  CEMB_RETURN_IF_ERROR(impl->BuildModel());

  // The plan, before the (possibly long) resume.
  const DlrmOptions& mo = impl->model->options();
  double dram_bytes = 0, slow_bytes = 0, ssd_bytes = 0;
  const double row_bytes = static_cast<double>(mo.embeddings.dim) * (config.model.bf16_tables ? 2 : 4);
  for (size_t i = 0; i < mo.embeddings.tables.size(); ++i) {
    const EmbeddingTableSpec& spec = mo.embeddings.tables[i];
    const double bytes = static_cast<double>(spec.rows) * row_bytes;
    (spec.storage.kind == StorageKind::kSsd    ? ssd_bytes
     : spec.storage.kind == StorageKind::kDram ? dram_bytes
                                               : slow_bytes) += bytes;
  }
  std::string ssd_line;
  if (ssd_bytes > 0) {
    ssd_line = absl::StrCat(", ", HumanBytes(ssd_bytes), " on ssd (",
                            config.model.storage.slow_tier.empty() ? "$TMPDIR" : config.model.storage.slow_tier,
                            "; prefetch ", t.prefetch_batches, " batches)");
  }
  std::string budget_line;  // model.dram_budget's split, its own line
  if (config.model.dram_budget) {
    const DramSplit& split = impl->dram_split;
    const int64_t budget = config.model.dram_budget->Resolve(PhysicalMemoryBytes());
    if (split.shares.empty()) {
      budget_line = absl::StrCat("warning: model.dram_budget (", HumanBytes(static_cast<double>(budget)),
                                 ") has no effect: no table is ssd, or static/dynamic without a cache size\n");
    } else {
      std::vector<std::string> shares;  // "emb2 1.2 MiB (0.91)": the sampled lookups its rows would serve
      double rows_dram = 0;
      for (const DramShare& d : split.shares) {
        rows_dram += static_cast<double>(d.bytes);
        shares.push_back(absl::StrCat("emb", d.table, " ", HumanBytes(static_cast<double>(d.bytes)),
                                      std::isnan(d.sampled_hit_rate)
                                          ? ""
                                          : absl::StrFormat(" (%.2f)", d.sampled_hit_rate)));
      }
      budget_line = absl::StrCat(
          "dram_budget: ", HumanBytes(static_cast<double>(budget)), ", ", HumanBytes(static_cast<double>(split.used)),
          " used, ", HumanBytes(rows_dram), " of it for rows: ", absl::StrJoin(shares, ", "),
          split.sampled > 0
              ? absl::StrCat("; split by the lookups of the first ", split.sampled,
                             " samples (in parentheses: the share of them the rows in DRAM would serve), then by size")
              : "; split by size",
          "\n");
    }
  }
  const uint64_t train_n = impl->datasets.train->num_samples();
  impl->Print("data: %s, %d train / %d validation samples, %d tables, hotness %d\n",
              DataSourceName(config.data.source), train_n, impl->datasets.validation ? impl->datasets.validation->num_samples() : 0,
              impl->table_sizes.size(), impl->datasets.train->hotness());
  const MlpPrecisionChoice& precision = impl->model->mlp_precision_choice();
  impl->Print("model: dim %d, bottom %d-%s, top %s, %s interaction%s, %s MLPs%s, %s tables: %s in DRAM, %s on the slow tier%s\n",
              mo.embeddings.dim, mo.num_dense, absl::StrJoin(mo.bottom_mlp, "-"), absl::StrJoin(mo.top_mlp, "-"),
              mo.interaction == InteractionKind::kDot ? "dot" : "concat",
              mo.self_interaction ? " (with self)" : "", PrecisionName(mo.mlp_precision),
              precision.reason.empty() ? "" : absl::StrCat(" (", precision.reason, ")"),
              config.model.bf16_tables ? "bf16" : "fp32", HumanBytes(dram_bytes), HumanBytes(slow_bytes), ssd_line);
  if (!budget_line.empty()) impl->Print("%s", budget_line);
  if (!precision.warning.empty()) impl->Print("warning: %s\n", precision.warning);
  impl->Print("train: %d steps of %d samples (%.2f epochs), lr %g (%s embeddings), %s threads\n", impl->total_steps,
              t.batch_size,
              static_cast<double>(impl->total_steps) * static_cast<double>(t.batch_size) / static_cast<double>(train_n),
              config.optimizer.learning_rate,
              config.optimizer.embedding == EmbeddingOptimizer::kSgd ? "sgd" : "row-wise adagrad",
              t.threads > 0 ? absl::StrCat(t.threads) : std::string("all"));

  if (options.resume) CEMB_RETURN_IF_ERROR(impl->Resume());
  if (!t.log_jsonl.empty()) {
    impl->jsonl = std::fopen(t.log_jsonl.c_str(), options.resume ? "a" : "w");
    if (!impl->jsonl) {
      const absl::Status error = base::ErrnoStatus(errno, t.log_jsonl, "open for writing");
      return absl::Status(error.code(), absl::StrCat(config.source_name, ": train.log_jsonl: ", error.message()));
    }
  }
  return std::unique_ptr<Trainer>(new Trainer(std::move(impl)));
}

absl::StatusOr<MetricsResult> Trainer::Evaluate() {
  PhaseTimes times;
  return impl_->Evaluate(&times);
}

absl::StatusOr<TrainSummary> Trainer::Run() {
  Impl& m = *impl_;
  const TrainSettings& t = m.config.train;
  TrainSummary summary;
  summary.first_step = m.step;
  summary.losses.reserve(static_cast<size_t>(std::max<int64_t>(0, m.total_steps - m.step)));
  const double train_n = static_cast<double>(m.datasets.train->num_samples());
  const auto run_start = Clock::now();
  double step_wall = 0;
  int64_t samples_done = 0;
  // The progress bar's running loss: the mean of the last kWindow steps.
  constexpr int kWindow = 50;
  std::vector<double> window(kWindow, 0.0);
  double window_sum = 0;
  int64_t window_n = 0;

  auto eval_record = [&](float lr) -> absl::Status {
    const auto e0 = Clock::now();
    CEMB_ASSIGN_OR_RETURN(MetricsResult r, m.Evaluate(&summary.eval_times));
    summary.eval_seconds += Seconds(e0, Clock::now());
    EvalRecord rec;
    rec.step = m.step;
    rec.epoch = static_cast<double>(m.step) * static_cast<double>(t.batch_size) / train_n;
    rec.lr = lr;
    rec.train_loss = m.interval_steps > 0 ? m.interval_loss_sum / static_cast<double>(m.interval_steps) : NAN;
    rec.metrics = r;
    rec.elapsed_seconds = Seconds(run_start, Clock::now());
    m.interval_loss_sum = 0, m.interval_steps = 0;
    summary.evals.push_back(rec);
    const double sps = step_wall > 0 ? static_cast<double>(samples_done) / step_wall : 0;
    m.Print("step %7d  epoch %6.2f  train loss %.5f  val loss %.5f  auc %.4f  accuracy %.4f  (%s samples/s)\n",
            rec.step, rec.epoch, rec.train_loss, r.log_loss, r.auc, r.accuracy, HumanCount(sps));
    m.WriteJson(absl::StrCat(
        "{\"type\":\"eval\",\"step\":", rec.step, ",\"epoch\":", JsonNumber(rec.epoch),
        ",\"samples\":", rec.step * t.batch_size, ",\"lr\":", JsonNumber(rec.lr),
        ",\"train_loss\":", JsonNumber(rec.train_loss), ",\"val_log_loss\":", JsonNumber(r.log_loss),
        ",\"val_auc\":", JsonNumber(r.auc), ",\"val_accuracy\":", JsonNumber(r.accuracy),
        ",\"val_samples\":", r.samples, ",\"elapsed_s\":", JsonNumber(rec.elapsed_seconds),
        ",\"samples_per_s\":", JsonNumber(sps), "}"));
    return absl::OkStatus();
  };

  float lr = 0;
  while (m.step < m.total_steps) {
    const auto t0 = Clock::now();
    const data::Batch* b = m.loader->Next();
    const auto t1 = Clock::now();
    summary.train_times[Phase::kData] += Seconds(t0, t1);
    if (!b) return absl::InternalError("the training loader ended early");  // endless: cannot happen
    const BatchView view = m.View(*b);
    std::span<const data::Batch* const> ahead;
    if (m.train_cycle->prefetches() && t.prefetch_batches > 0) {
      // The next batches, up to the last step of this run.
      const auto left = static_cast<size_t>(m.total_steps - m.step - 1);
      ahead = m.loader->Peek(std::min(static_cast<size_t>(t.prefetch_batches), left));
      summary.train_times[Phase::kData] += Seconds(t1, Clock::now());
    }
    lr = m.config.optimizer.LearningRate(m.step);
    CEMB_RETURN_IF_ERROR(m.train_cycle->Begin(m.step, view.bags, ahead, &summary.train_times));
    CEMB_ASSIGN_OR_RETURN(const double loss, m.model->TrainStep(view, lr, &summary.train_times));
    CEMB_RETURN_IF_ERROR(m.train_cycle->End(m.step, &summary.train_times));
    const auto t3 = Clock::now();
    step_wall += Seconds(t0, t3);
    samples_done += b->size();
    if (!std::isfinite(loss)) {
      m.progress.Clear();
      return absl::InvalidArgumentError(absl::StrFormat(
          "training diverged at step %d: the loss is %f (try a lower optimizer.learning_rate or a warm-up)", m.step,
          loss));
    }
    summary.losses.push_back(loss);
    if (t.log_every > 0 && m.step % t.log_every == 0 && m.jsonl) {
      // No string is built: a step formats nothing but this line.
      std::fprintf(m.jsonl, "{\"type\":\"step\",\"step\":%" PRId64 ",\"loss\":%.17g,\"lr\":%.9g}\n", m.step,
                   loss, static_cast<double>(lr));
    }
    ++m.step;
    m.interval_loss_sum += loss;
    ++m.interval_steps;
    window_sum += loss - window[static_cast<size_t>(window_n % kWindow)];
    window[static_cast<size_t>(window_n % kWindow)] = loss;
    ++window_n;
    const double sps = static_cast<double>(samples_done) / step_wall;
    const double eta = static_cast<double>(m.total_steps - m.step) * step_wall /
                       static_cast<double>(m.step - summary.first_step);
    m.progress.Update(m.step, m.total_steps, sps, window_sum / static_cast<double>(std::min<int64_t>(window_n, kWindow)),
                      eta);

    if (t.eval_every > 0 && m.step % t.eval_every == 0 && m.step < m.total_steps) CEMB_RETURN_IF_ERROR(eval_record(lr));
    if (t.checkpoint_every > 0 && m.step % t.checkpoint_every == 0 && m.step < m.total_steps) {
      CEMB_RETURN_IF_ERROR(m.WriteCheckpointNow(&summary.checkpoint_seconds, &summary.last_checkpoint));
    }
  }
  m.progress.Clear();
  CEMB_RETURN_IF_ERROR(m.train_cycle->Drain());
  summary.steps = m.step;
  summary.train_seconds = step_wall;
  summary.samples_per_second = step_wall > 0 ? static_cast<double>(samples_done) / step_wall : 0;
  const double accounted = summary.train_times.total() - summary.train_times[Phase::kOther];
  summary.train_times[Phase::kOther] += std::max(0.0, step_wall - accounted);

  // Final evaluation and checkpoint.
  if (m.datasets.validation) {
    CEMB_RETURN_IF_ERROR(eval_record(lr));
    summary.final_metrics = summary.evals.back().metrics;
  }
  if (!t.checkpoint_dir.empty() && m.last_checkpoint_step != m.step) {
    CEMB_RETURN_IF_ERROR(m.WriteCheckpointNow(&summary.checkpoint_seconds, &summary.last_checkpoint));
  }
  summary.tables = m.model->embeddings().Report();
  if (!t.export_dir.empty()) {
    const auto e0 = Clock::now();
    if (absl::Status s = m.model->ExportNpy(t.export_dir); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("export to ", t.export_dir, " (train.export_dir): ", s.message()));
    }
    summary.export_seconds = Seconds(e0, Clock::now());
    m.Print("export: the trained model as .npy files in %s (%.1f s)\n", t.export_dir, summary.export_seconds);
  }

  // Reports.
  const int64_t steps_run = summary.steps - summary.first_step;
  const double total = summary.train_times.total();
  m.Print("\ntraining: %d steps in %.2f s, %s samples/s; evaluation %.2f s; checkpoints %.2f s\n", steps_run,
          summary.train_seconds, HumanCount(summary.samples_per_second), summary.eval_seconds,
          summary.checkpoint_seconds);
  m.Print("%-24s %10s %7s %10s\n", "phase", "seconds", "share", "ms/step");
  for (int p = 0; p < kNumPhases; ++p) {
    const double s = summary.train_times.seconds[static_cast<size_t>(p)];
    m.Print("%-24s %10.3f %6.1f%% %10.3f\n", PhaseName(static_cast<Phase>(p)), s, total > 0 ? 100 * s / total : 0.0,
            steps_run > 0 ? 1e3 * s / static_cast<double>(steps_run) : 0.0);
  }
  m.Print("%-24s %10.3f %6.1f%% %10.3f\n", "total", total, 100.0,
          steps_run > 0 ? 1e3 * total / static_cast<double>(steps_run) : 0.0);

  bool any_cached = false, any_ssd = false;
  for (const TableReport& r : summary.tables) any_cached |= r.cached, any_ssd |= r.ssd;
  bool header = false;
  for (size_t i = 0; i < summary.tables.size(); ++i) {
    const TableReport& r = summary.tables[i];
    if ((any_cached || any_ssd) && !r.cached && r.storage == "dram") continue;  // the report is about the slow tier
    if (r.ssd) continue;  // below
    if (!header) {
      m.Print("\n%-8s %11s %-8s %9s %12s %12s %8s %12s %12s\n", "table", "rows", "storage", "hit rate", "lookups",
              "migrations", "flushes", "slow read", "slow written");
      header = true;
    }
    const CacheStats& c = r.stats;
    m.Print("%-8s %11d %-8s %9s %12d %12d %8d %12s %12s\n", r.name.empty() ? absl::StrCat(i) : r.name,
            i < m.table_sizes.size() ? m.table_sizes[i] : 0, r.storage,
            r.cached ? absl::StrFormat("%.2f%%", 100 * c.hit_rate()) : std::string("-"), c.lookups(),
            c.migrations(), c.flushes(), r.cached || r.storage != "dram" ? HumanBytes(c.slow_bytes_read()) : "-",
            r.cached || r.storage != "dram" ? HumanBytes(c.slow_bytes_written()) : "-");
  }
  if (any_ssd) {
    // hit rate: distinct rows of the prefetched batches already in DRAM;
    // computed: rows first used (lazy initialisation, no read); rows read:
    // from the file; ampl.: bytes read per byte of rows read (a miss reads its
    // whole block); depth: requests per submission; waited: in WaitResident.
    m.Print("\n%-8s %11s %10s %9s %10s %10s %10s %10s %10s %6s %6s %9s\n", "ssd", "rows", "DRAM", "hit rate",
            "computed", "rows read", "bytes read", "rows wrtn", "bytes wrtn", "ampl.", "depth", "waited");
    for (size_t i = 0; i < summary.tables.size(); ++i) {
      const TableReport& r = summary.tables[i];
      if (!r.ssd) continue;
      const SsdStats& s = r.ssd_stats;
      m.Print("%-8s %11d %10s %8.2f%% %10d %10d %10s %10d %10s %5.1fx %6.1f %8.3fs\n",
              r.name.empty() ? absl::StrCat(i) : r.name, i < m.table_sizes.size() ? m.table_sizes[i] : 0,
              HumanBytes(static_cast<double>(r.dram_bytes)), 100 * s.hit_rate(), s.lazy_rows, s.fetched_rows,
              HumanBytes(static_cast<double>(s.io.bytes_read)), s.rows_written,
              HumanBytes(static_cast<double>(s.io.bytes_written)), s.read_amplification(r.row_bytes),
              s.io.average_queue_depth(), absl::ToDoubleSeconds(s.waited));
    }
  }
  if (any_cached || any_ssd) m.Print("(tables in DRAM without a cache are not listed)\n");
  if (m.datasets.validation) {
    const MetricsResult& f = summary.final_metrics;
    m.Print("\nfinal validation (%d samples): log loss %.5f, AUC %.4f, accuracy %.4f\n", f.samples, f.log_loss, f.auc,
            f.accuracy);
  }

  std::string phases;
  for (int p = 0; p < kNumPhases; ++p) {
    absl::StrAppend(&phases, p ? "," : "", JsonString(PhaseName(static_cast<Phase>(p))), ":",
                    JsonNumber(summary.train_times.seconds[static_cast<size_t>(p)]));
  }
  std::string tables;
  for (size_t i = 0; i < summary.tables.size(); ++i) {
    const TableReport& r = summary.tables[i];
    const CacheStats& c = r.stats;
    absl::StrAppend(&tables, i ? "," : "", "{\"table\":", i, ",\"name\":", JsonString(r.name),
                    ",\"rows\":", i < m.table_sizes.size() ? m.table_sizes[i] : 0,
                    ",\"storage\":", JsonString(r.storage), ",\"kernel\":", JsonString(r.kernel),
                    ",\"cached\":", r.cached ? "true" : "false", ",\"lookups\":", c.lookups(),
                    ",\"hits\":", c.hits(), ",\"hit_rate\":", JsonNumber(r.cached ? c.hit_rate() : NAN),
                    ",\"migrations\":", c.migrations(), ",\"flushes\":", c.flushes(),
                    ",\"rows_written_back\":", c.rows_written_back(), ",\"slow_bytes_read\":", c.slow_bytes_read(),
                    ",\"slow_bytes_written\":", c.slow_bytes_written());
    if (r.ssd) {
      const SsdStats& d = r.ssd_stats;
      absl::StrAppend(&tables, ",\"ssd\":{\"dram_bytes\":", r.dram_bytes, ",\"hit_rate\":", JsonNumber(d.hit_rate()),
                      ",\"rows_asked\":", d.prefetch_rows, ",\"rows_read\":", d.fetched_rows,
                      ",\"rows_computed\":", d.lazy_rows, ",\"bytes_read\":", d.io.bytes_read,
                      ",\"rows_written\":", d.rows_written, ",\"bytes_written\":", d.io.bytes_written,
                      ",\"read_amplification\":", JsonNumber(d.read_amplification(r.row_bytes)),
                      ",\"average_queue_depth\":", JsonNumber(d.io.average_queue_depth()),
                      ",\"evictions\":", d.evictions, ",\"dirty_evictions\":", d.dirty_evictions,
                      ",\"rmw_reads\":", d.rmw_reads, ",\"sync_fetches\":", d.sync_fetches,
                      ",\"waited_s\":", JsonNumber(absl::ToDoubleSeconds(d.waited)), "}");
    }
    absl::StrAppend(&tables, "}");
  }
  const MetricsResult& f = summary.final_metrics;
  // Two runs trained the same model step for step when their digests of
  // every step's loss (the bits of the doubles) are equal.
  Checksum64 losses_digest;
  losses_digest.Update(summary.losses.data(), summary.losses.size() * sizeof(double));
  m.WriteJson(absl::StrCat(
      "{\"type\":\"summary\",\"config\":", JsonString(m.config.source_name), ",\"first_step\":", summary.first_step,
      ",\"steps\":", summary.steps, ",\"batch_size\":", t.batch_size,
      ",\"mlp_precision\":", JsonString(PrecisionName(m.model->options().mlp_precision)),
      ",\"mlp_precision_requested\":", JsonString(PrecisionName(m.model->mlp_precision_choice().requested)),
      ",\"train_seconds\":", JsonNumber(summary.train_seconds),
      ",\"samples_per_s\":", JsonNumber(summary.samples_per_second),
      ",\"losses_digest\":\"", absl::StrFormat("%016x", losses_digest.Digest()), "\"",
      ",\"eval_seconds\":", JsonNumber(summary.eval_seconds),
      ",\"checkpoint_seconds\":", JsonNumber(summary.checkpoint_seconds),
      ",\"export_seconds\":", JsonNumber(summary.export_seconds), ",\"val_log_loss\":",
      JsonNumber(m.datasets.validation ? f.log_loss : NAN), ",\"val_auc\":", JsonNumber(m.datasets.validation ? f.auc : NAN),
      ",\"val_accuracy\":", JsonNumber(m.datasets.validation ? f.accuracy : NAN), ",\"phases\":{", phases, "},\"tables\":[",
      tables, "]}"));
  return summary;
}

}  // namespace cemb::dlrm
