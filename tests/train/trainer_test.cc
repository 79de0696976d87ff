// End-to-end tests of the training driver. They need the model (dlrm/model.cc).
#include "train/trainer.h"

#include <unistd.h>

#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/npy.h"
#include "dlrm/precision.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "train/checkpoint.h"

namespace cemb::train {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base ? base : "/tmp") + "/cemb_trainer_test_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // A small synthetic setup: 8 tables (two behind a dynamic cache on the
  // slow tier), a planted signal, quiet output.
  std::string SmallYaml() const {
    return absl::StrCat(R"(
data:
  source: synthetic
  samples: 40960
  distribution: zipf
  alpha: 1.1
  validation_fraction: 0.2
  seed: 5
  work_dir: )", dir_, R"(/data
model:
  embedding_dim: 16
  bottom_mlp: [64, 16]
  top_mlp: [64, 1]
  tables: {count: 8, rows: 2000}
  storage: {kind: dram, slow_tier: )", dir_, R"(}
  table_storage:
    "1": {kind: dynamic, cache_lower: 0.1, cache_slack: 0.02}
    "5": {kind: dynamic, cache_lower: 0.1, cache_slack: 0.02}
optimizer:
  learning_rate: 0.1
train:
  batch_size: 512
  epochs: 1
  threads: 2
  seed: 3
  progress: false
)");
  }

  absl::StatusOr<TrainConfig> Config(const std::string& yaml, std::vector<std::string> overrides = {}) {
    return TrainConfig::Parse(yaml, "test.yaml", overrides);
  }

  absl::StatusOr<TrainSummary> Train(const TrainConfig& config, bool resume = false, FILE* out = nullptr) {
    absl::StatusOr<std::unique_ptr<Trainer>> t = Trainer::Create(config, {.resume = resume, .out = out});
    if (!t.ok()) return t.status();
    return (*t)->Run();
  }

  // Trains and returns what the trainer printed (or the error's message).
  std::string TrainAndPrint(const TrainConfig& config, bool resume = false) {
    FILE* out = std::tmpfile();
    if (out == nullptr) return "tmpfile failed";
    absl::StatusOr<TrainSummary> s = Train(config, resume, out);
    std::string text;
    std::rewind(out);
    for (int c; (c = std::fgetc(out)) != EOF;) text.push_back(static_cast<char>(c));
    std::fclose(out);
    return s.ok() ? text : std::string(s.status().message());
  }

  std::string dir_;
};

TEST_F(TrainerTest, LearnsThePlantedSignal) {
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<TrainConfig> c =
      Config(SmallYaml(), {"train.epochs=3", "train.eval_every=40", absl::StrCat("train.log_jsonl=", dir_, "/log.jsonl")});
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<TrainSummary> s = Train(*c);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->steps, 3 * 64);  // 32768 training samples / 512
  EXPECT_EQ(s->losses.size(), 192u);
  EXPECT_GT(s->final_metrics.auc, 0.7);
  EXPECT_EQ(s->final_metrics.samples, 8192);
  EXPECT_LT(s->final_metrics.log_loss, 0.65);
  EXPECT_GE(s->evals.size(), 4u);  // steps 40, 80, 120, 160 and the end
  // The cached tables worked as caches and were reported: a 12% cache of a
  // Zipf(1.1) table filled, was flushed, and served most lookups but not
  // all (measured: 271 flushes, hit rate 0.70).
  ASSERT_EQ(s->tables.size(), 8u);
  for (int t : {1, 5}) {
    SCOPED_TRACE(t);
    const CacheStats& c = s->tables[t].stats;
    EXPECT_TRUE(s->tables[t].cached);
    EXPECT_EQ(c.lookups(), 192u * 512 + 4 * 8192 + 8192);  // the training steps and the 5 evaluations
    EXPECT_GT(c.flushes(), 10u);
    EXPECT_GT(c.migrations(), 0u);
    EXPECT_GT(c.hit_rate(), 0.4);
    EXPECT_LT(c.hit_rate(), 0.95);
  }
  EXPECT_FALSE(s->tables[0].cached);
  // One JSON line per evaluation and a summary.
  std::ifstream in(dir_ + "/log.jsonl");
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), s->evals.size() + 1);
  EXPECT_THAT(lines[0], HasSubstr("\"type\":\"eval\",\"step\":40"));
  EXPECT_THAT(lines.back(), HasSubstr("\"type\":\"summary\""));
  EXPECT_THAT(lines.back(), HasSubstr("\"embedding lookup\":"));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  RecordProperty("seconds", std::to_string(seconds));
}

// 8,000 training samples at batch 128: each epoch ends with a partial batch
// of 64, so 2 epochs are 126 steps and 16,000 samples, not 126 x 128.
TEST_F(TrainerTest, ReportCountsTheSamplesTrainedNotStepsTimesTheBatch) {
  absl::StatusOr<TrainConfig> c =
      Config(SmallYaml(), {"data.samples=10000", "train.batch_size=128", "train.epochs=2", "train.eval_every=63",
                           absl::StrCat("train.log_jsonl=", dir_, "/log.jsonl")});
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string text = TrainAndPrint(*c);
  EXPECT_THAT(text, HasSubstr("8000 train / 2000 validation samples"));
  EXPECT_THAT(text, HasSubstr("train: 126 steps of 128 samples (16000 samples, 2.00 epochs)"));
  std::ifstream in(dir_ + "/log.jsonl");
  std::vector<std::string> evals;
  for (std::string line; std::getline(in, line);) {
    if (line.find("\"type\":\"eval\"") != std::string::npos) evals.push_back(line);
  }
  ASSERT_EQ(evals.size(), 2u);  // after the first epoch, and at the end
  EXPECT_THAT(evals[0], HasSubstr("\"step\":63,\"epoch\":1,\"samples\":8000,"));
  EXPECT_THAT(evals[1], HasSubstr("\"step\":126,\"epoch\":2,\"samples\":16000,"));
}

// Losses after resuming equal those of an uninterrupted run, bit for bit,
// with cached tables and row-wise or element-wise AdaGrad (optimizer state in
// the checkpoint: apart, or in the rows and the ssd snapshots),
// and with bf16 MLPs (split-SGD: the low halves of the weights are state too)
// over bf16 tables.
TEST_F(TrainerTest, ResumeEqualsUninterrupted) {
  struct Variant {
    const char* name;
    std::vector<std::string> keys;
  };
  const Variant variants[] = {
      {"sgd", {"optimizer.embedding=sgd"}},
      {"rowwise_adagrad", {"optimizer.embedding=rowwise_adagrad"}},
      {"adagrad", {"optimizer.embedding=adagrad"}},
      // Every table on ssd with a DRAM budget that holds part of the rows:
      // the accumulators go through slots, evictions, the log and snapshots.
      {"adagrad_ssd",
       {"optimizer.embedding=adagrad", "model.storage.kind=ssd", "model.table_storage={}", "model.tables.rows=20000",
        "model.dram_budget=8MiB"}},
      {"bf16", {"optimizer.embedding=sgd", "model.mlp_precision=bf16", "model.table_dtype=bf16"}},
      // DLRM-DCNv2 with Adagrad everywhere: the cross network and every
      // dense accumulator travel in the checkpoint.
      {"dcn_adagrad",
       {"optimizer.embedding=adagrad", "optimizer.dense=adagrad", "optimizer.learning_rate=0.01",
        "model.interaction=dcn", "model.dcn_layers=2", "model.dcn_rank=8", "model.mlp_precision=fp32"}},
  };
  for (const Variant& v : variants) {
    SCOPED_TRACE(v.name);
    if (std::string(v.name) == "bf16" && dlrm::DetectMatmulCpu().bf16_matmul.empty()) {
      std::printf("skipping the bf16 variant: oneDNN has no bf16 matmul on %s\n", dlrm::DetectMatmulCpu().isa.c_str());
      continue;
    }
    auto keys = [&](std::vector<std::string> more) {
      more.insert(more.end(), v.keys.begin(), v.keys.end());
      return more;
    };
    absl::StatusOr<TrainConfig> full = Config(
        SmallYaml(), keys({"train.steps=16", "train.eval_every=5", absl::StrCat("train.checkpoint_dir=", dir_, "/a-", v.name)}));
    ASSERT_TRUE(full.ok()) << full.status();
    absl::StatusOr<TrainSummary> a = Train(*full);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_EQ(a->losses.size(), 16u);
    if (std::string(v.name) == "adagrad_ssd") {  // the premise: rows (and accumulators) left DRAM and came back
      int64_t evicted = 0, fetched = 0;
      for (const TableReport& t : a->tables) evicted += t.ssd_stats.dirty_evictions, fetched += t.ssd_stats.fetched_rows;
      EXPECT_GT(evicted, 0);
      EXPECT_GT(fetched, 0);
    }

    const std::string ck = absl::StrCat("train.checkpoint_dir=", dir_, "/b-", v.name);
    absl::StatusOr<TrainConfig> first = Config(SmallYaml(), keys({"train.steps=7", "train.eval_every=5", ck}));
    ASSERT_TRUE(first.ok());
    absl::StatusOr<TrainSummary> b1 = Train(*first);
    ASSERT_TRUE(b1.ok()) << b1.status();
    ASSERT_EQ(b1->losses.size(), 7u);

    absl::StatusOr<TrainConfig> rest = Config(SmallYaml(), keys({"train.steps=16", "train.eval_every=5", ck}));
    ASSERT_TRUE(rest.ok());
    absl::StatusOr<TrainSummary> b2 = Train(*rest, /*resume=*/true);
    ASSERT_TRUE(b2.ok()) << b2.status();
    EXPECT_EQ(b2->first_step, 7);
    ASSERT_EQ(b2->losses.size(), 9u);
    for (size_t i = 0; i < 7; ++i) EXPECT_EQ(b1->losses[i], a->losses[i]) << "step " << i;
    for (size_t i = 0; i < 9; ++i) EXPECT_EQ(b2->losses[i], a->losses[7 + i]) << "step " << 7 + i;
    EXPECT_EQ(b2->final_metrics.auc, a->final_metrics.auc);
    EXPECT_EQ(b2->final_metrics.log_loss, a->final_metrics.log_loss);
  }
}

TEST_F(TrainerTest, CorruptCheckpointIsRefusedByName) {
  const std::string ck = absl::StrCat("train.checkpoint_dir=", dir_, "/ck");
  absl::StatusOr<TrainConfig> c = Config(SmallYaml(), {"train.steps=4", ck});
  ASSERT_TRUE(c.ok());
  absl::StatusOr<TrainSummary> s = Train(*c);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_FALSE(s->last_checkpoint.empty());
  // Flip a byte in the largest model file.
  std::string victim;
  uintmax_t largest = 0;
  for (const auto& e : fs::recursive_directory_iterator(s->last_checkpoint + "/model")) {
    if (e.is_regular_file() && e.file_size() > largest) largest = e.file_size(), victim = e.path().string();
  }
  ASSERT_FALSE(victim.empty());
  {
    std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(largest / 2));
    char ch;
    f.read(&ch, 1);
    ch ^= 0x40;
    f.seekp(static_cast<std::streamoff>(largest / 2));
    f.write(&ch, 1);
  }
  absl::StatusOr<TrainConfig> more = Config(SmallYaml(), {"train.steps=8", ck});
  ASSERT_TRUE(more.ok());
  absl::StatusOr<TrainSummary> r = Train(*more, /*resume=*/true);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr(victim));

  // Truncated.
  fs::resize_file(victim, largest / 3);
  r = Train(*more, /*resume=*/true);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr(victim + " is truncated"));
}

TEST_F(TrainerTest, RefusesToOverwriteOrResumeAnotherConfig) {
  const std::string ck = absl::StrCat("train.checkpoint_dir=", dir_, "/ck");
  absl::StatusOr<TrainConfig> c = Config(SmallYaml(), {"train.steps=2", ck});
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(Train(*c).ok());
  absl::StatusOr<TrainSummary> again = Train(*c);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(std::string(again.status().message()), HasSubstr("--resume"));

  absl::StatusOr<TrainConfig> other = Config(SmallYaml(), {"train.steps=4", ck, "optimizer.learning_rate=0.5"});
  ASSERT_TRUE(other.ok());
  absl::StatusOr<TrainSummary> r = Train(*other, /*resume=*/true);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("optimizer.learning_rate"));

  absl::StatusOr<TrainConfig> no_dir = Config(SmallYaml(), {"train.steps=4"});
  r = Train(*no_dir, /*resume=*/true);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("--resume needs train.checkpoint_dir"));
}

TEST_F(TrainerTest, MissingDataFilesGiveClearErrors) {
  absl::StatusOr<TrainConfig> tsv = Config(absl::StrCat("data:\n  source: tsv\n  path: ", dir_, "/nope.tsv\n"));
  ASSERT_TRUE(tsv.ok()) << tsv.status();
  absl::StatusOr<TrainSummary> r = Train(*tsv);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr(dir_ + "/nope.tsv"));

  absl::StatusOr<TrainConfig> bin = Config(absl::StrCat("data:\n  source: binary\n  path: ", dir_, "/nope.bin\n"));
  ASSERT_TRUE(bin.ok());
  r = Train(*bin);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("data.path: " + dir_ + "/nope.bin: no such file"));

  // Not a dataset at all.
  std::ofstream(dir_ + "/junk.bin") << "this is not a dataset";
  absl::StatusOr<TrainConfig> junk = Config(absl::StrCat("data:\n  source: binary\n  path: ", dir_, "/junk.bin\n"));
  r = Train(*junk);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr(dir_ + "/junk.bin"));
}

TEST_F(TrainerTest, TrainsAndEvaluatesOnTheRealKaggleRows) {
  const std::string tsv = std::string(CEMB_SHARED_DIR) + "/data/criteo/kaggle-sample-guestwalk.tsv";
  absl::StatusOr<TrainConfig> c = Config(absl::StrCat(R"(
data:
  source: tsv
  path: )", tsv, R"(
  max_ind_range: 5000
  work_dir: )", dir_, R"(
model:
  embedding_dim: 16
  bottom_mlp: [32, 16]
  top_mlp: [32, 1]
train:
  batch_size: 128
  epochs: 2
  eval_every: 10
  threads: 2
  progress: false
)"));
  ASSERT_TRUE(c.ok()) << c.status();
  FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  absl::StatusOr<TrainSummary> s = Train(*c, /*resume=*/false, out);
  ASSERT_TRUE(s.ok()) << s.status();
  std::rewind(out);
  std::string text;
  for (int ch; (ch = std::fgetc(out)) != EOF;) text.push_back(static_cast<char>(ch));
  std::fclose(out);
  // The file's 1,999 rows split as the reference splits them: days 0-5
  // train, half of day 6 validates; 2 epochs of batches of 128, each epoch
  // ending with a partial one.
  EXPECT_THAT(text, HasSubstr("1714 train / 142 validation samples"));
  EXPECT_EQ(s->final_metrics.samples, 142);
  EXPECT_EQ(s->steps, 2 * ((1714 + 127) / 128));
  // It learned something from 2 epochs of the real rows (measured: AUC 0.70,
  // accuracy 0.72 on the 142 validation rows; a constant predictor has AUC 0.5).
  EXPECT_LT(s->final_metrics.log_loss, 0.6);
  EXPECT_GT(s->final_metrics.auc, 0.6);
  EXPECT_GT(s->final_metrics.accuracy, 0.6);
  for (double loss : s->losses) EXPECT_TRUE(std::isfinite(loss));
}

TEST_F(TrainerTest, BinaryDatasetIsSplitForValidation) {
  // First generate a synthetic set through the trainer, then train on its
  // training file as a plain binary dataset with a held-out fraction.
  absl::StatusOr<TrainConfig> gen = Config(SmallYaml(), {"train.steps=1"});
  ASSERT_TRUE(gen.ok());
  ASSERT_TRUE(Train(*gen).ok());
  std::string train_file;
  for (const auto& e : fs::recursive_directory_iterator(dir_ + "/data")) {  // <work_dir>/synthetic-<hash>/train.bin
    if (e.path().filename() == "train.bin") train_file = e.path().string();
  }
  ASSERT_FALSE(train_file.empty());
  absl::StatusOr<TrainConfig> c = Config(absl::StrCat(R"(
data: {source: binary, path: )", train_file, ", validation_fraction: 0.25, work_dir: ", dir_, R"(/split}
model: {bottom_mlp: [32, 16], top_mlp: [32, 1], tables: {count: 8, rows: 2000}}
train: {batch_size: 256, steps: 5, threads: 2, progress: false}
)"));
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<TrainSummary> s = Train(*c);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->final_metrics.samples, 8192);  // a quarter of 32768

  absl::StatusOr<TrainConfig> wrong = Config(absl::StrCat(R"(
data: {source: binary, path: )", train_file, R"(, validation_fraction: 0.25}
model: {tables: {count: 8, rows: 1000}}
train: {progress: false}
)"));
  ASSERT_TRUE(wrong.ok());
  absl::StatusOr<TrainSummary> r = Train(*wrong);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("table 0 has 2000 rows in the dataset but 1000 in the config"));
}

// The model line says what auto chose on this CPU and why (where oneDNN has a
// bf16 matmul: the two times it measured, kept in the work directory, so that
// the next run reads them and chooses alike); an explicit bf16 runs with a
// one-line warning or is refused, as ResolveMlpPrecision says for this CPU
// (the kinds of CPU and the decision are tested in precision_test.cc).
TEST_F(TrainerTest, ModelLineSaysWhichPrecisionAutoChoseAndBf16WarnsOrIsRefused) {
  const dlrm::MatmulCpu cpu = dlrm::DetectMatmulCpu();
  const std::string log = dir_ + "/log.jsonl";
  absl::StatusOr<TrainConfig> c = Config(SmallYaml(), {"train.steps=1", "train.log_jsonl=" + log});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model.mlp_precision, dlrm::Precision::kAuto);  // the default
  const std::string printed = TrainAndPrint(*c);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(printed, m, std::regex(R"((fp32|bf16) MLPs \((auto: [^)]*)\), )"))) << printed;
  const std::string precision = m[1], reason = m[2];
  if (cpu.bf16_matmul.empty()) {
    EXPECT_EQ(reason, dlrm::ResolveMlpPrecision(dlrm::Precision::kAuto, cpu)->reason);
  } else {
    EXPECT_THAT(reason, HasSubstr(" ms per MLP step measured"));
    int kept = 0;
    for (const auto& e : fs::directory_iterator(dir_ + "/data")) {
      kept += absl::StartsWith(e.path().filename().string(), "mlp-precision-") ? 1 : 0;
    }
    EXPECT_EQ(kept, 1);
    // The next run reads the kept times: the same choice, the same numbers.
    EXPECT_THAT(TrainAndPrint(*c), HasSubstr(absl::StrCat(precision, " MLPs (", reason, "), ")));
  }
  EXPECT_THAT(printed, Not(HasSubstr("warning:")));
  std::ifstream in(log);
  const std::string records((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_THAT(records, HasSubstr(absl::StrCat("\"mlp_precision\":\"", precision, "\",\"mlp_precision_requested\":\"auto\"")));

  absl::StatusOr<TrainConfig> b = Config(SmallYaml(), {"train.steps=1", "model.mlp_precision=bf16"});
  ASSERT_TRUE(b.ok());
  absl::StatusOr<dlrm::MlpPrecisionChoice> bf16 = dlrm::ResolveMlpPrecision(dlrm::Precision::kBf16, cpu);
  const std::string bf16_printed = TrainAndPrint(*b);
  if (!bf16.ok()) {
    EXPECT_EQ(bf16_printed, bf16.status().message());
    EXPECT_THAT(bf16_printed, HasSubstr("model.mlp_precision=bf16: oneDNN has no bf16 matmul on this CPU"));
  } else if (!bf16->warning.empty()) {
    EXPECT_THAT(bf16_printed, HasSubstr(", bf16 MLPs, fp32 tables"));
    EXPECT_THAT(bf16_printed, HasSubstr("\nwarning: " + bf16->warning + "\n"));
  } else {
    EXPECT_THAT(bf16_printed, HasSubstr(", bf16 MLPs, fp32 tables"));
    EXPECT_THAT(bf16_printed, Not(HasSubstr("warning:")));
  }
}

// Writes `state` as a new checkpoint in `dir`, with the model files of the
// checkpoint `model_from` (a test's edited copy of a real checkpoint).
absl::StatusOr<std::string> RewriteCheckpoint(const std::string& dir, const CheckpointState& state,
                                              const std::string& model_from) {
  return WriteCheckpoint(dir, state, [&](const std::string& tmp) -> absl::Status {
    std::error_code ec;
    fs::copy(model_from + "/model", tmp + "/model", fs::copy_options::recursive, ec);
    return ec ? absl::InternalError(ec.message()) : absl::OkStatus();
  }, /*keep=*/3);
}

// Every checkpoint holds SERVING, the model as a predictor rebuilds it: the
// options the trainer ran (the precision resolved), every table's rows,
// storage and hotness, and the data's preprocessing; it is one of the
// files the MANIFEST checksums.
TEST_F(TrainerTest, CheckpointHoldsTheServingManifest) {
  const std::string ck = absl::StrCat(dir_, "/ck");
  absl::StatusOr<TrainConfig> c =
      Config(SmallYaml(), {"train.steps=2", "train.checkpoint_dir=" + ck, "model.mlp_precision=fp32"});
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(Train(*c).ok());
  absl::StatusOr<std::string> path = ResolveCheckpoint(ck);
  ASSERT_TRUE(path.ok()) << path.status();
  absl::StatusOr<ServingManifest> m = ReadServingManifest(*path);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->num_dense, 13);
  EXPECT_EQ(m->dim, 16);
  EXPECT_EQ(m->bottom_mlp, (std::vector<int64_t>{64, 16}));
  EXPECT_EQ(m->top_mlp, (std::vector<int64_t>{64, 1}));
  EXPECT_EQ(m->interaction, "dot");
  EXPECT_FALSE(m->self_interaction);
  EXPECT_EQ(m->mlp_precision, "fp32");
  EXPECT_EQ(m->table_dtype, "fp32");
  EXPECT_EQ(m->embedding_optimizer, "sgd");
  EXPECT_EQ(m->seed, 3u);
  EXPECT_EQ(m->table_seed, 3u);
  EXPECT_EQ(m->table_rows, std::vector<uint64_t>(8, 2000));
  EXPECT_EQ(m->table_storage, (std::vector<std::string>{"dram", "dynamic", "dram", "dram", "dram", "dynamic", "dram",
                                                        "dram"}));
  EXPECT_EQ(m->hotness, std::vector<uint32_t>(8, 1));
  EXPECT_EQ(m->batch_size, 512);
  EXPECT_EQ(m->dense_transform, "none");  // synthetic data: inputs are given preprocessed
  EXPECT_EQ(m->ids, "none");
  EXPECT_EQ(m->data_source, "synthetic");
  absl::StatusOr<CheckpointState> state = ReadCheckpoint(*path);
  ASSERT_TRUE(state.ok()) << state.status();
  bool listed = false;
  for (const CheckpointFile& f : state->files) listed |= f.name == kServingManifest;
  EXPECT_TRUE(listed);
}

// A checkpoint records the precision the model ran in, not "auto". Resuming,
// auto keeps the checkpoint's precision (a second measurement could choose
// the other: on another number of ranks, say), so a bf16 checkpoint never
// continues in fp32; an explicit precision that differs is refused, naming
// both.
TEST_F(TrainerTest, CheckpointRecordsTheResolvedPrecisionAndAutoKeepsIt) {
  const std::string ck = absl::StrCat(dir_, "/ck");
  absl::StatusOr<TrainConfig> first = Config(SmallYaml(), {"train.steps=2", "train.checkpoint_dir=" + ck});
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(Train(*first).ok());
  absl::StatusOr<std::string> written_first = LatestCheckpoint(ck);
  ASSERT_TRUE(written_first.ok());
  absl::StatusOr<CheckpointState> recorded = ReadCheckpoint(*written_first);
  ASSERT_TRUE(recorded.ok()) << recorded.status();
  const bool was_bf16 = absl::StrContains(recorded->config, "model.mlp_precision=bf16\n");
  ASSERT_TRUE(was_bf16 || absl::StrContains(recorded->config, "model.mlp_precision=fp32\n")) << recorded->config;
  const char* resolved = was_bf16 ? "bf16" : "fp32";
  const char* other = was_bf16 ? "fp32" : "bf16";
  absl::StatusOr<TrainConfig> more = Config(SmallYaml(), {"train.steps=3", "train.checkpoint_dir=" + ck});
  ASSERT_TRUE(more.ok());
  EXPECT_THAT(TrainAndPrint(*more, /*resume=*/true),
              HasSubstr(absl::StrCat(resolved, " MLPs (auto: as the checkpoint it resumes)")));

  // The same checkpoint, as if written in the other precision (step 4, the
  // newest): auto resumes it in that precision where oneDNN runs bf16.
  absl::StatusOr<std::string> latest = LatestCheckpoint(ck);
  ASSERT_TRUE(latest.ok());
  absl::StatusOr<CheckpointState> state = ReadCheckpoint(*latest);
  ASSERT_TRUE(state.ok()) << state.status();
  const std::string line = absl::StrCat("model.mlp_precision=", resolved, "\n");
  const size_t at = state->config.find(line);
  ASSERT_NE(at, std::string::npos) << state->config;
  state->config.replace(at, line.size(), absl::StrCat("model.mlp_precision=", other, "\n"));
  state->step = 4;
  ASSERT_TRUE(RewriteCheckpoint(ck, *state, *latest).ok());
  if (!dlrm::DetectMatmulCpu().bf16_matmul.empty()) {
    absl::StatusOr<TrainConfig> again = Config(SmallYaml(), {"train.steps=5", "train.checkpoint_dir=" + ck});
    ASSERT_TRUE(again.ok());
    EXPECT_THAT(TrainAndPrint(*again, /*resume=*/true),
                HasSubstr(absl::StrCat(other, " MLPs (auto: as the checkpoint it resumes)")));
  }
  // An explicit precision other than the newest checkpoint's is refused.
  absl::StatusOr<std::string> newest = LatestCheckpoint(ck);
  ASSERT_TRUE(newest.ok());
  absl::StatusOr<CheckpointState> last = ReadCheckpoint(*newest);
  ASSERT_TRUE(last.ok());
  const bool last_bf16 = absl::StrContains(last->config, "model.mlp_precision=bf16\n");
  const char* explicit_other = last_bf16 ? "fp32" : "bf16";
  if (!last_bf16 && dlrm::DetectMatmulCpu().bf16_matmul.empty()) return;  // an explicit bf16 cannot run here at all
  absl::StatusOr<TrainConfig> refuse = Config(
      SmallYaml(), {"train.steps=9", "train.checkpoint_dir=" + ck, absl::StrCat("model.mlp_precision=", explicit_other)});
  ASSERT_TRUE(refuse.ok());
  absl::StatusOr<TrainSummary> refused = Train(*refuse, /*resume=*/true);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr(absl::StrCat("it was written with ", last_bf16 ? "bf16" : "fp32", " MLPs, this run's are ",
                                     explicit_other)));
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr(absl::StrCat("set model.mlp_precision=", last_bf16 ? "bf16" : "fp32", " to resume it")));
}

// A refused resume names the key and both values by name
// ("model.interaction=dot", never an enum's number) and the keys that may
// change; a fingerprint of another version is refused at its first line.
TEST_F(TrainerTest, RefusedResumeNamesTheKeyAndBothValues) {
  const std::string ck = absl::StrCat(dir_, "/ck");
  absl::StatusOr<TrainConfig> first =
      Config(SmallYaml(), {"train.steps=2", "train.checkpoint_dir=" + ck, "model.interaction=dot"});
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(Train(*first).ok());
  absl::StatusOr<TrainConfig> concat =
      Config(SmallYaml(), {"train.steps=3", "train.checkpoint_dir=" + ck, "model.interaction=concat"});
  ASSERT_TRUE(concat.ok());
  absl::StatusOr<TrainSummary> refused = Train(*concat, /*resume=*/true);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("it was written with model.interaction=dot, the config says model.interaction=concat"));

  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("only these may change: data.work_dir"));

  // A checkpoint whose fingerprint is of another version is refused at its
  // first line; the config's own still resumes.
  absl::StatusOr<std::string> latest = LatestCheckpoint(ck);
  ASSERT_TRUE(latest.ok());
  absl::StatusOr<CheckpointState> state = ReadCheckpoint(*latest);
  ASSERT_TRUE(state.ok()) << state.status();
  ASSERT_TRUE(state->config.starts_with(absl::StrCat(TrainConfig::kFingerprintVersion, "\n"))) << state->config;
  const std::string current = state->config;
  state->config = "fingerprint=1\n" + current.substr(current.find('\n') + 1);
  state->step = 3;
  ASSERT_TRUE(RewriteCheckpoint(ck, *state, *latest).ok());
  absl::StatusOr<TrainConfig> more = Config(SmallYaml(), {"train.steps=5", "train.checkpoint_dir=" + ck});
  ASSERT_TRUE(more.ok());
  refused = Train(*more, /*resume=*/true);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("it was written with fingerprint=1, the config says fingerprint=2"));
  state->config = current;
  state->step = 4;
  ASSERT_TRUE(RewriteCheckpoint(ck, *state, *latest).ok());
  absl::StatusOr<TrainSummary> resumed = Train(*more, /*resume=*/true);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->first_step, 4);
}

// data.split: none trains on every sample (no validation, no evaluation);
// train.log_every writes one record per k-th step whose loss is that step's
// loss, bit for bit (%.17g).
TEST_F(TrainerTest, SplitNoneTrainsOnEverySampleAndLogsEveryStepLoss) {
  const std::string log = dir_ + "/steps.jsonl";
  absl::StatusOr<TrainConfig> c =
      Config(SmallYaml(), {"data.samples=5120", "data.split=none", "train.shuffle=false", "train.log_every=3",
                           "train.log_jsonl=" + log});
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<TrainSummary> s = Train(*c);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->steps, 10);  // 5120 / 512: every sample trains, none held out
  EXPECT_TRUE(s->evals.empty());
  EXPECT_EQ(s->final_metrics.samples, 0);
  std::ifstream in(log);
  std::vector<int64_t> steps;
  for (std::string line; std::getline(in, line);) {
    if (!line.starts_with("{\"type\":\"step\"")) continue;
    int64_t k = -1;
    double loss = NAN;
    ASSERT_EQ(std::sscanf(line.c_str(), "{\"type\":\"step\",\"step\":%ld,\"loss\":%lf", &k, &loss), 2) << line;
    ASSERT_LT(k, s->steps);
    EXPECT_EQ(loss, s->losses[static_cast<size_t>(k)]) << line;
    steps.push_back(k);
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{0, 3, 6, 9}));

  absl::StatusOr<TrainConfig> both = Config(SmallYaml(), {"data.split=none", "data.validation_path=/x.bin"});
  ASSERT_FALSE(both.ok());
  EXPECT_THAT(std::string(both.status().message()), HasSubstr("data.validation_path: not used with data.split none"));
}

// Every file of a directory, by name.
std::map<std::string, std::string> Files(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::ifstream in(e.path(), std::ios::binary);
    files[e.path().filename().string()] = std::string(std::istreambuf_iterator<char>(in), {});
  }
  return files;
}

// The export holds every parameter under DLRM_Net.state_dict()'s names, and
// is the same, byte for byte, whatever the storage of the tables (DRAM, the
// slow tier with or without a cache, ssd): each kind trains the same model
// and streams it out the same way.
TEST_F(TrainerTest, ExportIsTheSameFromEveryStorageKind) {
  std::map<std::string, std::string> dram;
  for (const char* kind : {"dram", "simple", "static", "dynamic", "ssd"}) {
    SCOPED_TRACE(kind);
    const std::string out = absl::StrCat(dir_, "/export-", kind);
    // Caches of 10% + 5%; the ssd tables' DRAM holds about half their rows
    // beside their maps and log buffers (each batch's rows read just before its step).
    absl::StatusOr<TrainConfig> c =
        Config(SmallYaml(), {"train.steps=6", "model.table_storage={}", absl::StrCat("model.storage.kind=", kind),
                             absl::StrCat("model.storage.slow_tier=", dir_), "model.storage.cache_lower=0.1",
                             std::string(kind) == "ssd" ? "model.dram_budget=1280KiB" : "train.seed=3",
                             "train.prefetch_batches=0",
                             "train.export_dir=" + out});
    ASSERT_TRUE(c.ok()) << c.status();
    absl::StatusOr<TrainSummary> s = Train(*c);
    ASSERT_TRUE(s.ok()) << s.status();
    const std::map<std::string, std::string> files = Files(out);
    EXPECT_EQ(files.size(), 8u + 8u);  // 8 tables; 2 layers x (weight, bias) x 2 MLPs
    EXPECT_TRUE(files.count("emb_l.7.weight.npy"));
    EXPECT_TRUE(files.count("bot_l.2.bias.npy"));
    EXPECT_TRUE(files.count("top_l.2.weight.npy"));
    if (dram.empty()) {
      dram = files;
    } else {
      for (const auto& [name, bytes] : dram) EXPECT_TRUE(files.at(name) == bytes) << name << " differs from DRAM's";
    }
  }
}

// model.init_from of an export starts from exactly those parameters: the
// model exported again before any step is the same bytes.
TEST_F(TrainerTest, InitFromAnExportStartsFromExactlyThoseParameters) {
  const std::string a = dir_ + "/a", b = dir_ + "/b";
  absl::StatusOr<TrainConfig> first = Config(SmallYaml(), {"train.steps=3", "train.export_dir=" + a});
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(Train(*first).ok());
  // Another seed: without init_from it would start elsewhere.
  absl::StatusOr<TrainConfig> second = Config(SmallYaml(), {"train.seed=99", "model.init_from=" + a});
  ASSERT_TRUE(second.ok());
  absl::StatusOr<std::unique_ptr<Trainer>> t = Trainer::Create(*second, {.out = nullptr});
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE((*t)->model().ExportNpy(b).ok());
  const std::map<std::string, std::string> before = Files(a), after = Files(b);
  ASSERT_EQ(before.size(), 16u);
  for (const auto& [name, bytes] : before) EXPECT_TRUE(after.at(name) == bytes) << name;
}

// bfloat16 files (np.save of ml_dtypes' bfloat16: '<V2') load into fp32 and
// bf16 tables; a file of the wrong shape or a missing one is refused naming
// the file, and the key.
TEST_F(TrainerTest, InitFromReadsBfloat16AndNamesTheFileAtFault) {
  const std::string a = dir_ + "/a";
  absl::StatusOr<TrainConfig> first = Config(SmallYaml(), {"train.steps=1", "train.export_dir=" + a});
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(Train(*first).ok());
  // Table 3 as bfloat16: 2000 x 16 values (k % 256) / 32 - 4 (exact in bfloat16).
  std::string header = "{'descr': '<V2', 'fortran_order': False, 'shape': (2000, 16), }";
  header.append(64 - (10 + header.size() + 1) % 64, ' ');
  header += '\n';
  std::string image("\x93NUMPY\x01\x00", 8);
  image += static_cast<char>(header.size() & 0xff);
  image += static_cast<char>(header.size() >> 8);
  image += header;
  auto value = [](int k) { return static_cast<float>(k % 256) / 32.0f - 4.0f; };
  for (int k = 0; k < 2000 * 16; ++k) {
    const uint16_t bits = static_cast<uint16_t>(std::bit_cast<uint32_t>(value(k)) >> 16);
    image.append(reinterpret_cast<const char*>(&bits), 2);
  }
  std::ofstream(a + "/emb_l.3.weight.npy", std::ios::binary | std::ios::trunc) << image;
  for (const char* dtype : {"fp32", "bf16"}) {
    SCOPED_TRACE(dtype);
    absl::StatusOr<TrainConfig> c = Config(SmallYaml(), {"model.init_from=" + a, absl::StrCat("model.table_dtype=", dtype)});
    ASSERT_TRUE(c.ok());
    absl::StatusOr<std::unique_ptr<Trainer>> t = Trainer::Create(*c, {.out = nullptr});
    ASSERT_TRUE(t.ok()) << t.status();
    std::vector<float> row(16);
    for (int r : {0, 1, 1999}) {
      ASSERT_TRUE((*t)->model().embeddings().ReadRow(3, r, row).ok());
      for (int j = 0; j < 16; ++j) ASSERT_EQ(row[j], value(r * 16 + j)) << "row " << r << ", column " << j;
    }
  }

  // A table of another dim.
  std::vector<float> narrow(2000 * 8, 0.5f);
  ASSERT_TRUE(WriteNpy<float>(a + "/emb_l.5.weight.npy", narrow, {2000, 8}).ok());
  absl::StatusOr<TrainConfig> c = Config(SmallYaml(), {"model.init_from=" + a});
  ASSERT_TRUE(c.ok());
  absl::StatusOr<std::unique_ptr<Trainer>> bad = Trainer::Create(*c, {.out = nullptr});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr(absl::StrCat("test.yaml: model.init_from: ", a,
                                     "/emb_l.5.weight.npy: shape (2000, 8) where (2000, 16) is needed (table 5")));
  // A missing MLP file.
  fs::remove(a + "/emb_l.5.weight.npy");
  fs::remove(a + "/top_l.2.bias.npy");
  bad = Trainer::Create(*c, {.out = nullptr});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr(a + "/top_l.2.bias.npy"));
  absl::StatusOr<TrainConfig> none = Config(SmallYaml(), {"model.init_from=" + dir_ + "/nothing"});
  ASSERT_TRUE(none.ok());
  bad = Trainer::Create(*none, {.out = nullptr});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr(dir_ + "/nothing: no such directory"));
}

}  // namespace
}  // namespace cemb::train
