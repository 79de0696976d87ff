// format_quality: what a row format costs in model quality. Scores a trained
// model's validation split through a Predictor (serve/predictor.h) of each
// checkpoint given: the fp32 one dlrm-train wrote and the copies dlrm-convert
// made of it (serve/convert.h: int8 row-wise, fp16, bf16), and prints per
// checkpoint its SERVING table_dtype, the tables' bytes on disk, the
// validation ROC AUC and log loss (train/metrics.h) and the AUC's difference
// to the first checkpoint's.
//
// The validation split is the one dlrm-train evaluates on: the config (with
// the same --set overrides as the training) goes through
// TrainConfig::ToPrepareOptions and data::PrepareData, which reuses the
// prepared files of data.work_dir (by default <train.checkpoint_dir>/data),
// and an in-order loader of train.batch_size visits it once, at most
// train.eval_batches batches, as the trainer's evaluation does.
//
// --trainer_auc also evaluates the first checkpoint as dlrm-train does
// (a Trainer resumed from it, Trainer::Evaluate: Dlrm::Predict at the
// training's batch size); it must be its checkpoint directory's newest.
//
//   format_quality --config configs/default.yaml --checkpoint runs/ck --checkpoint runs/ck-int8
//                  [--set key=value ...] [--max_samples N] [--trainer_auc]
//
// Not a timing: the results do not depend on the build or the machine's
// load. Exit status 1 on an error (the message names the file or key), 2 on
// a usage error.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "checkpoint/checkpoint.h"
#include "data/loader.h"
#include "data/prepare.h"
#include "serve/predictor.h"
#include "train/config.h"
#include "train/metrics.h"
#include "train/trainer.h"

namespace cemb::bench {
namespace {

namespace fs = std::filesystem;

struct Validation {
  data::PreparedData prepared;
  std::string work_dir;  // the data.work_dir prepared into; empty: a temporary one
};

struct Scores {
  std::vector<float> probabilities, labels;
};

// The sum of the sizes of <step>/model/emb_l.* (the tables as stored).
absl::StatusOr<int64_t> TableBytes(const std::string& step_dir) {
  std::error_code ec;
  int64_t bytes = 0;
  const fs::path model = fs::path(step_dir) / "model";
  for (fs::directory_iterator it(model, ec), end; !ec && it != end; it.increment(ec)) {
    if (!absl::StartsWith(it->path().filename().string(), "emb_l.")) continue;
    const uintmax_t size = fs::file_size(it->path(), ec);
    if (ec) break;
    bytes += static_cast<int64_t>(size);
  }
  if (ec) return absl::InternalError(absl::StrCat(model.string(), ": ", ec.message()));
  return bytes;
}

// Every validation sample (at most max_samples, and train.eval_batches
// batches when set) scored by `predictor`, in the trainer's evaluation order.
absl::StatusOr<Scores> Score(const train::TrainConfig& config, const Validation& v, const serve::Predictor& predictor,
                             int64_t max_samples) {
  const data::Dataset& d = *v.prepared.validation;
  const ServingManifest& m = predictor.manifest();
  std::vector<uint64_t> rows(d.table_sizes().begin(), d.table_sizes().end());
  std::string differs;
  if (rows.size() != m.table_rows.size() || static_cast<int64_t>(d.num_dense()) != m.num_dense) {
    differs = absl::StrCat("its model has ", m.table_rows.size(), " tables and ", m.num_dense,
                           " dense features, the validation data ", rows.size(), " and ", d.num_dense());
  } else {
    for (size_t t = 0; t < rows.size() && differs.empty(); ++t) {
      if (rows[t] != m.table_rows[t]) {
        differs = absl::StrCat("its table ", t, " has ", m.table_rows[t], " rows, the data's ", rows[t]);
      }
    }
  }
  if (!differs.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(predictor.checkpoint(), " was not trained on this config's data: ",
                                                   differs, "; pass the config and --set overrides it was trained with"));
  }
  data::LoaderOptions lo;
  lo.batch_size = static_cast<uint32_t>(config.train.batch_size);
  lo.shuffle = data::Shuffle::kNone;
  lo.num_epochs = 1;
  lo.prefetch = 2;
  CEMB_ASSIGN_OR_RETURN(std::unique_ptr<data::Loader> loader, data::Loader::Create(v.prepared.validation, lo));
  Scores s;
  std::vector<Bags<int32_t>> bags(d.table_sizes().size());
  int64_t batches = 0;
  while (config.train.eval_batches == 0 || batches < config.train.eval_batches) {
    const int64_t left = max_samples > 0 ? max_samples - static_cast<int64_t>(s.labels.size()) : INT64_MAX;
    if (left <= 0) break;
    const data::Batch* b = loader->Next();
    if (b == nullptr) break;
    const int64_t n = std::min<int64_t>(b->size(), left);
    for (uint32_t t = 0; t < b->num_tables(); ++t) {
      const std::span<const int32_t> offsets = b->offsets(t).first(static_cast<size_t>(n) + 1);
      bags[t] = {.offsets = offsets, .indices = b->indices(t).first(static_cast<size_t>(offsets.back()))};
    }
    const size_t at = s.probabilities.size();
    s.probabilities.resize(at + static_cast<size_t>(n));
    CEMB_RETURN_IF_ERROR(predictor.Predict(
        {.size = n, .dense = b->dense().first(static_cast<size_t>(n) * b->num_dense()), .bags = bags},
        std::span<float>(s.probabilities).subspan(at)));
    const std::span<const float> labels = b->labels().first(static_cast<size_t>(n));
    s.labels.insert(s.labels.end(), labels.begin(), labels.end());
    ++batches;
  }
  return s;
}

// The first checkpoint evaluated by the trainer itself: resumed (the model
// loaded, nothing trained or written) and Trainer::Evaluate.
absl::StatusOr<train::MetricsResult> TrainerMetrics(train::TrainConfig config, const Validation& v,
                                                   const std::string& step_dir) {
  const std::string dir = fs::path(step_dir).parent_path().string();
  CEMB_ASSIGN_OR_RETURN(std::string latest, LatestCheckpoint(dir));
  if (fs::path(latest).filename() != fs::path(step_dir).filename()) {
    return absl::FailedPreconditionError(absl::StrCat("--trainer_auc: ", step_dir, " is not the newest checkpoint of ",
                                                      dir, " (", latest, " is): the trainer resumes from the newest"));
  }
  if (v.work_dir.empty()) {
    return absl::FailedPreconditionError(
        "--trainer_auc needs the data in a work directory (set data.work_dir or train.checkpoint_dir)");
  }
  config.train.checkpoint_dir = dir;
  config.data.work_dir = v.work_dir;  // the data prepared above, reused
  config.train.log_jsonl.clear();
  config.train.export_dir.clear();
  CEMB_ASSIGN_OR_RETURN(std::unique_ptr<train::Trainer> trainer,
                        train::Trainer::Create(config, {.resume = true, .out = nullptr, .progress_stream = nullptr}));
  return trainer->Evaluate();
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "format_quality: %s\n", std::string(status.message()).c_str());
  return 1;
}

int Main(int argc, char** argv) {
  CLI::App app{"format_quality: validation AUC and log loss of a model served in each row format"};
  std::string config_path;
  std::vector<std::string> overrides, checkpoints;
  int64_t max_samples = 0;
  bool trainer_auc = false;
  app.add_option("--config,-c", config_path, "the YAML config the model trained with")->required();
  app.add_option("--checkpoint", checkpoints,
                 "a checkpoint (dlrm-train's, or dlrm-convert's copy of it); repeatable, the first is the reference")
      ->required()
      ->take_all();
  app.add_option("--set,-s", overrides, "a config override the training had: --set train.checkpoint_dir=ck")
      ->take_all()
      ->type_name("KEY=VALUE");
  app.add_option("--max_samples", max_samples, "score at most N validation samples (0: all)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--trainer_auc", trainer_auc,
               "also evaluate the first checkpoint as dlrm-train does (a Trainer resumed from it)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  absl::StatusOr<train::TrainConfig> config = train::TrainConfig::Load(config_path, overrides);
  if (!config.ok()) return Fail(config.status());
  Validation v;
  data::PrepareOptions po = config->ToPrepareOptions();
  po.log = [](std::string_view line) { std::fprintf(stderr, "%.*s\n", static_cast<int>(line.size()), line.data()); };
  v.work_dir = po.data.work_dir;
  absl::StatusOr<data::PreparedData> prepared = data::PrepareData(po);
  if (!prepared.ok()) return Fail(prepared.status());
  v.prepared = std::move(*prepared);
  if (!v.prepared.validation) {
    return Fail(absl::FailedPreconditionError(
        absl::StrCat(config_path, ": the data has no validation split (data.split=none)")));
  }
  std::printf("validation: %llu samples, batches of %lld%s%s\n",
              static_cast<unsigned long long>(v.prepared.validation->num_samples()),
              static_cast<long long>(config->train.batch_size),
              config->train.eval_batches > 0
                  ? absl::StrCat(", at most ", config->train.eval_batches, " (train.eval_batches)").c_str()
                  : "",
              max_samples > 0 ? absl::StrCat(", at most ", max_samples, " samples").c_str() : "");
  std::printf("%-40s %-6s %12s %8s %10s %10s %11s\n", "checkpoint", "dtype", "table_bytes", "samples", "auc",
              "log_loss", "auc_diff");

  double first_auc = NAN;
  std::string first_step_dir;
  for (const std::string& path : checkpoints) {
    absl::StatusOr<std::unique_ptr<serve::Predictor>> predictor = serve::Predictor::Open(path, {});
    if (!predictor.ok()) return Fail(predictor.status());
    if (absl::Status s = (*predictor)->verification(); !s.ok() && !absl::IsUnavailable(s)) return Fail(s);
    if (&path == &checkpoints.front()) {
      first_step_dir = (*predictor)->checkpoint();
      if (trainer_auc && (*predictor)->manifest().table_rows_format != "trained") {
        return Fail(absl::InvalidArgumentError(absl::StrCat(
            "--trainer_auc: ", path, " holds tables converted for serving (",
            (*predictor)->manifest().table_dtype, "), which the trainer cannot load: put dlrm-train's checkpoint first")));
      }
    }
    absl::StatusOr<int64_t> bytes = TableBytes((*predictor)->checkpoint());
    if (!bytes.ok()) return Fail(bytes.status());
    absl::StatusOr<Scores> scores = Score(*config, v, **predictor, max_samples);
    if (!scores.ok()) return Fail(scores.status());
    // Tables served in place are verified in the background: a score counts
    // only once its files are known whole.
    if (absl::Status verified = (*predictor)->WaitVerified(); !verified.ok()) return Fail(verified);
    const double auc = train::RocAuc(scores->probabilities, scores->labels);
    const double log_loss = train::LogLoss(scores->probabilities, scores->labels);
    if (&path == &checkpoints.front()) first_auc = auc;
    std::printf("%-40s %-6s %12lld %8zu %10.6f %10.6f %+11.6f\n", path.c_str(),
                (*predictor)->manifest().table_dtype.c_str(), static_cast<long long>(*bytes),
                scores->labels.size(), auc, log_loss, auc - first_auc);
    std::fflush(stdout);
  }

  if (trainer_auc) {
    absl::StatusOr<train::MetricsResult> r = TrainerMetrics(*config, v, first_step_dir);
    if (!r.ok()) return Fail(r.status());
    std::printf("trainer (Dlrm::Predict, batch %lld) on %s: %lld samples, auc %.6f, log_loss %.6f, auc_diff %+.6f\n",
                static_cast<long long>(config->train.batch_size), first_step_dir.c_str(),
                static_cast<long long>(r->samples), r->auc, r->log_loss, r->auc - first_auc);
  }
  return 0;
}

}  // namespace
}  // namespace cemb::bench

int main(int argc, char** argv) {
  try {
    return cemb::bench::Main(argc, argv);
  } catch (const std::exception& e) {  // a message, never a crash
    std::fprintf(stderr, "format_quality: internal error: %s\n", e.what());
    return 1;
  }
}
