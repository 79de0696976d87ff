#include "train/config.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cemb::train {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

absl::StatusOr<TrainConfig> Parse(const std::string& yaml, std::vector<std::string> overrides = {}) {
  return TrainConfig::Parse(yaml, "configs/x.yaml", overrides);
}

std::string ErrorOf(const std::string& yaml, std::vector<std::string> overrides = {}) {
  absl::StatusOr<TrainConfig> c = Parse(yaml, overrides);
  EXPECT_FALSE(c.ok()) << yaml;
  return c.ok() ? std::string() : std::string(c.status().message());
}

TEST(TrainConfig, EmptyFileGivesTheDefaults) {
  absl::StatusOr<TrainConfig> c = Parse("");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->data.source, DataSource::kSynthetic);
  EXPECT_EQ(c->model.embedding_dim, 16);
  EXPECT_EQ(c->model.bottom_mlp, (std::vector<int64_t>{512, 256, 64, 16}));
  EXPECT_EQ(c->model.top_mlp, (std::vector<int64_t>{512, 256, 1}));
  EXPECT_EQ(c->train.batch_size, 2048);
  EXPECT_TRUE(c->train.progress);
  EXPECT_EQ(c->model.mlp_precision, dlrm::Precision::kAuto);
}

TEST(TrainConfig, MlpPrecisionIsAutoFp32OrBf16) {
  for (const auto& [text, want] : {std::pair("auto", dlrm::Precision::kAuto), std::pair("fp32", dlrm::Precision::kFp32),
                                   std::pair("bf16", dlrm::Precision::kBf16), std::pair("BF16", dlrm::Precision::kBf16)}) {
    absl::StatusOr<TrainConfig> c = Parse(absl::StrCat("model:\n  mlp_precision: ", text, "\n"));
    ASSERT_TRUE(c.ok()) << text << ": " << c.status();
    EXPECT_EQ(c->model.mlp_precision, want) << text;
    absl::StatusOr<dlrm::DlrmOptions> o = c->ToDlrmOptions(std::vector<uint64_t>{10, 20});
    ASSERT_TRUE(o.ok()) << o.status();
    EXPECT_EQ(o->mlp_precision, want) << text;  // Dlrm::Create resolves auto
  }
  EXPECT_EQ(ErrorOf("model:\n  mlp_precision: fp16\n"),
            "configs/x.yaml: model.mlp_precision: expected one of fp32, bf16, auto; got 'fp16' (line 2)");
}

// model.interaction: dcn reads the cross network's layers and rank (the
// MLPerf DLRM-DCNv2's by default); elsewhere they are an error.
TEST(TrainConfig, DcnInteractionHasLayersAndRank) {
  absl::StatusOr<TrainConfig> c = Parse("model:\n  interaction: dcn\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model.dcn_layers, 3);
  EXPECT_EQ(c->model.dcn_rank, 512);
  c = Parse("model:\n  interaction: dcn\n  dcn_layers: 2\n  dcn_rank: 0\n");
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<dlrm::DlrmOptions> o = c->ToDlrmOptions(std::vector<uint64_t>{10, 20});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->interaction, dlrm::InteractionKind::kDcn);
  EXPECT_EQ(o->dcn_layers, 2);
  EXPECT_EQ(o->dcn_rank, 0);
  EXPECT_EQ(ErrorOf("model:\n  dcn_rank: 64\n"),
            "configs/x.yaml: model.dcn_rank: only with model.interaction: dcn (line 2)");
  EXPECT_EQ(ErrorOf("model:\n  interaction: dcn\n  dcn_layers: 0\n").substr(0, 40),
            "configs/x.yaml: model.dcn_layers: expect");
}

TEST(TrainConfig, ParsesEverySection) {
  absl::StatusOr<TrainConfig> c = Parse(R"(
data:
  source: synthetic
  samples: 100_000
  distribution: zipf
  alpha: 1.2
  hotness: 3
  seed: 7
  validation_fraction: 0.2
model:
  embedding_dim: 32
  bottom_mlp: [64, 32]
  top_mlp: [16, 1]
  interaction: concat
  self_interaction: yes
  mlp_precision: bf16
  table_dtype: bf16
  tables: {count: 4, rows: 1000}
  storage: {kind: simple, slow_tier: /mnt/pmem}
  table_storage:
    "1": {kind: dynamic, cache_lower: 25%, cache_slack: 64MiB, admit_after: 2}
    "3": {kind: static, cache_lower: 4096}
optimizer:
  embedding: rowwise_adagrad
  learning_rate: 0.05
  warmup_steps: 10
  decay_start: 100
  decay_steps: 50
train:
  batch_size: 256
  steps: 1000
  eval_every: 100
  eval_batches: 5
  threads: 2
  seed: 3
  checkpoint_dir: /tmp/ck
  checkpoint_every: 500
  log_jsonl: /tmp/log.jsonl
  progress: off
)");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->data.samples, 100000u);
  EXPECT_EQ(c->data.distribution, data::IndexDistribution::kZipf);
  EXPECT_THAT(c->data.hotness, ElementsAre(3));
  EXPECT_EQ(c->model.interaction, dlrm::InteractionKind::kConcat);
  EXPECT_TRUE(c->model.self_interaction);
  EXPECT_EQ(c->model.mlp_precision, dlrm::Precision::kBf16);
  EXPECT_TRUE(c->model.bf16_tables);
  EXPECT_EQ(c->model.table_count, 4);
  EXPECT_EQ(c->model.table_rows, 1000u);
  EXPECT_EQ(c->model.StorageOf(0).kind, StorageKind::kSimple);
  const TableStorageConfig& t1 = c->model.StorageOf(1);
  EXPECT_EQ(t1.kind, StorageKind::kDynamic);
  EXPECT_DOUBLE_EQ(t1.cache_lower.fraction, 0.25);
  EXPECT_LT(t1.cache_lower.bytes, 0);
  EXPECT_EQ(t1.cache_slack.bytes, 64 << 20);
  EXPECT_EQ(t1.admit_after, 2);
  EXPECT_EQ(t1.slow_tier, "/mnt/pmem");  // inherited from the default storage
  EXPECT_EQ(c->model.StorageOf(3).cache_lower.bytes, 4096);
  EXPECT_EQ(c->optimizer.embedding, EmbeddingOptimizer::kRowwiseAdagrad);
  EXPECT_EQ(c->train.steps, 1000);
  EXPECT_EQ(c->train.threads, 2);
  EXPECT_FALSE(c->train.progress);
  EXPECT_EQ(c->train.checkpoint_dir, "/tmp/ck");
}

TEST(TrainConfig, EveryShippedConfigParses) {
  for (const char* name :
       {"default", "kaggle", "small", "large", "terabyte", "thesis-large", "bench-kaggle", "bench-dlrm-s"}) {
    const std::string path = std::string(CEMB_SOURCE_DIR) + "/configs/" + name + ".yaml";
    absl::StatusOr<TrainConfig> c = TrainConfig::Load(path);
    EXPECT_TRUE(c.ok()) << name << ": " << c.status();
  }
}

TEST(TrainConfig, LargeConfigPutsItsLargestTablesBehindACache) {
  absl::StatusOr<TrainConfig> c = TrainConfig::Load(std::string(CEMB_SOURCE_DIR) + "/configs/large.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  std::vector<uint64_t> sizes(data::kKaggleCardinalities.begin(), data::kKaggleCardinalities.end());
  absl::StatusOr<dlrm::DlrmOptions> o = c->ToDlrmOptions(sizes);
  ASSERT_TRUE(o.ok()) << o.status();
  double dram = 0, cache = 0;
  for (const EmbeddingTableSpec& t : o->embeddings.tables) {
    const double bytes = static_cast<double>(t.rows) * 128 * 4;
    if (t.storage.kind == StorageKind::kDram) {
      dram += bytes;
    } else {
      cache += static_cast<double>(t.storage.cache.lower.Resolve(static_cast<int64_t>(bytes)) +
                                   t.storage.cache.slack.Resolve(static_cast<int64_t>(bytes)));
    }
  }
  EXPECT_LT(dram + cache, 4.0 * (1 << 30)) << "dram " << dram << " cache " << cache;
}

TEST(TrainConfig, ThesisLargeTableCountScalesBySet) {
  absl::StatusOr<TrainConfig> c = TrainConfig::Load(std::string(CEMB_SOURCE_DIR) + "/configs/thesis-large.yaml",
                                                    std::vector<std::string>{"model.tables.count=4"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model.table_count, 4);
  EXPECT_EQ(c->model.table_rows, 6000000u);
  EXPECT_EQ(c->model.embedding_dim, 256);
  EXPECT_THAT(c->data.hotness, ElementsAre(100));
}

TEST(TrainConfig, UnknownKeyIsNamedWithItsPathAndFile) {
  EXPECT_THAT(ErrorOf("model:\n  bottom_mpl: [1]\n"),
              HasSubstr("configs/x.yaml: model.bottom_mpl: unknown key (known keys of model: "));
  EXPECT_THAT(ErrorOf("trian:\n  steps: 1\n"), HasSubstr("configs/x.yaml: trian: unknown key"));
  EXPECT_THAT(ErrorOf("model:\n  storage:\n    knd: dram\n"), HasSubstr("configs/x.yaml: model.storage.knd: unknown key"));
  EXPECT_THAT(ErrorOf("model:\n  table_storage:\n    \"1\": {kind: dram, lower: 1}\n"),
              HasSubstr("model.table_storage.1.lower: unknown key"));
}

TEST(TrainConfig, BadTypeIsNamed) {
  EXPECT_THAT(ErrorOf("model:\n  bottom_mlp: abc\n"),
              HasSubstr("configs/x.yaml: model.bottom_mlp: expected a list of positive integers, got 'abc' (line 2)"));
  EXPECT_THAT(ErrorOf("model:\n  bottom_mlp: [64, x, 16]\n"),
              HasSubstr("model.bottom_mlp: expected a list of positive integers, got 'x'"));
  EXPECT_THAT(ErrorOf("train:\n  batch_size: 12abc\n"),
              HasSubstr("configs/x.yaml: train.batch_size: expected an integer, got '12abc'"));
  EXPECT_THAT(ErrorOf("train:\n  batch_size: 1.5\n"), HasSubstr("train.batch_size: expected an integer, got '1.5'"));
  EXPECT_THAT(ErrorOf("train:\n  batch_size: [1]\n"), HasSubstr("train.batch_size: expected an integer, got a list"));
  EXPECT_THAT(ErrorOf("train:\n  progress: maybe\n"), HasSubstr("train.progress: expected true or false"));
  EXPECT_THAT(ErrorOf("optimizer:\n  learning_rate: fast\n"),
              HasSubstr("optimizer.learning_rate: expected a number, got 'fast'"));
  EXPECT_THAT(ErrorOf("model: 3\n"), HasSubstr("configs/x.yaml: model: expected a map of keys, got '3'"));
  EXPECT_THAT(ErrorOf("- a\n- b\n"), HasSubstr("configs/x.yaml: expected a map"));
}

TEST(TrainConfig, BadValueIsNamed) {
  EXPECT_THAT(ErrorOf("train:\n  batch_size: 0\n"),
              HasSubstr("configs/x.yaml: train.batch_size: expected an integer in [1, 16777216], got 0"));
  EXPECT_THAT(ErrorOf("model:\n  interaction: cross\n"),
              HasSubstr("model.interaction: expected one of dot, concat, dcn; got 'cross'"));
  EXPECT_THAT(ErrorOf("data:\n  source: parquet\n"),
              HasSubstr("data.source: expected one of synthetic, tsv, binary; got 'parquet'"));
  EXPECT_THAT(ErrorOf("model:\n  storage: {kind: dynamic, cache_lower: -3}\n"),
              HasSubstr("model.storage.cache_lower: expected a fraction in [0, 1]"));
  EXPECT_THAT(ErrorOf("model:\n  storage: {kind: dynamic, cache_lower: 2 potatoes}\n"),
              HasSubstr("model.storage.cache_lower: expected a fraction"));
  EXPECT_THAT(ErrorOf("optimizer:\n  learning_rate: 0\n"), HasSubstr("optimizer.learning_rate: expected a number in (0"));
  EXPECT_THAT(ErrorOf("data:\n  alpha: 0\n"), HasSubstr("data.alpha: expected a number > 0, got 0"));
  EXPECT_THAT(ErrorOf("model:\n  bottom_mlp: [64, 32]\n"),
              HasSubstr("model.bottom_mlp: the last layer (32) must equal model.embedding_dim (16)"));
  EXPECT_THAT(ErrorOf("model:\n  top_mlp: [64, 2]\n"), HasSubstr("model.top_mlp: the last layer must be 1"));
  EXPECT_THAT(ErrorOf("model:\n  table_storage:\n    big: {kind: dram}\n"),
              HasSubstr("model.table_storage.big: expected a table index"));
  EXPECT_THAT(ErrorOf("data:\n  source: tsv\n"), HasSubstr("data.path: required when data.source is tsv"));
  EXPECT_THAT(ErrorOf("model:\n  tables: {count: 3}\n"), HasSubstr("model.tables.rows: required"));
  EXPECT_THAT(ErrorOf("train:\n  checkpoint_every: 10\n"), HasSubstr("train.checkpoint_every: needs train.checkpoint_dir"));
  EXPECT_THAT(ErrorOf("model:\n  bottom_mlp: []\n"), HasSubstr("got an empty list"));
}

TEST(TrainConfig, YamlSyntaxErrorNamesTheFileAndLine) {
  EXPECT_THAT(ErrorOf("model:\n  bottom_mlp: [1, 2\n"), HasSubstr("configs/x.yaml:"));
  EXPECT_THAT(ErrorOf("model:\n  bottom_mlp: [1, 2\n"), HasSubstr("YAML syntax error"));
}

TEST(TrainConfig, MissingFileIsNotFoundAndNamed) {
  absl::StatusOr<TrainConfig> c = TrainConfig::Load("/nonexistent/dir/config.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(c.status().message()),
              HasSubstr("config file /nonexistent/dir/config.yaml: cannot open: No such file"));
}

TEST(TrainConfig, ADirectoryIsFailedPrecondition) {
  absl::StatusOr<TrainConfig> c = TrainConfig::Load(std::string(CEMB_SOURCE_DIR) + "/configs");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition) << c.status();
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("configs: cannot open: Is a directory"));
}

TEST(TrainConfig, SetOverridesKeysAndCreatesMaps) {
  absl::StatusOr<TrainConfig> c =
      Parse("train:\n  batch_size: 128\n", {"train.batch_size=4096", "model.tables.count=8", "model.tables.rows=1000",
                                            "model.bottom_mlp=[64, 16]", "model.table_storage.3.kind=dynamic",
                                            "model.table_storage.3.cache_lower=512KiB", "data.distribution=zipf"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->train.batch_size, 4096);
  EXPECT_EQ(c->model.table_count, 8);
  EXPECT_EQ(c->model.bottom_mlp, (std::vector<int64_t>{64, 16}));
  EXPECT_EQ(c->model.StorageOf(3).kind, StorageKind::kDynamic);
  EXPECT_EQ(c->model.StorageOf(3).cache_lower.bytes, 512 * 1024);
  EXPECT_EQ(c->data.distribution, data::IndexDistribution::kZipf);
}

TEST(TrainConfig, BadSetIsNamed) {
  EXPECT_THAT(ErrorOf("", {"train.batch_size"}), HasSubstr("--set train.batch_size: expected key=value"));
  EXPECT_THAT(ErrorOf("", {"train..steps=3"}), HasSubstr("empty part"));
  EXPECT_THAT(ErrorOf("", {"train.batch_size=big"}),
              HasSubstr("configs/x.yaml: train.batch_size: expected an integer, got 'big' (from --set)"));
  EXPECT_THAT(ErrorOf("", {"train.batchsize=3"}), HasSubstr("train.batchsize: unknown key"));
  EXPECT_THAT(ErrorOf("train:\n  steps: 3\n", {"train.steps.x=3"}), HasSubstr("train.steps is not a map"));
}

TEST(TrainConfig, ToDlrmOptionsMapsTablesAndStorage) {
  absl::StatusOr<TrainConfig> c = Parse(R"(
model:
  storage: {kind: dram}
  table_storage:
    "1": {kind: dynamic, cache_lower: 0.1, slow_tier: /tmp}
train: {batch_size: 64, threads: 2, seed: 9}
)");
  ASSERT_TRUE(c.ok()) << c.status();
  const std::vector<uint64_t> sizes{10, 20, 30};
  absl::StatusOr<dlrm::DlrmOptions> o = c->ToDlrmOptions(sizes);
  ASSERT_TRUE(o.ok()) << o.status();
  ASSERT_EQ(o->embeddings.tables.size(), 3u);
  EXPECT_EQ(o->embeddings.tables[2].rows, 30);
  EXPECT_EQ(o->embeddings.tables[0].storage.kind, StorageKind::kDram);
  EXPECT_EQ(o->embeddings.tables[1].storage.kind, StorageKind::kDynamic);
  EXPECT_EQ(o->embeddings.tables[1].storage.slow_tier.path, "/tmp");
  EXPECT_DOUBLE_EQ(o->embeddings.tables[1].storage.cache.lower.fraction, 0.1);
  EXPECT_EQ(o->batch_size, 64);
  EXPECT_EQ(o->threads, 2);
  EXPECT_EQ(o->seed, 9u);

  absl::StatusOr<TrainConfig> bad = Parse("model:\n  table_storage:\n    \"5\": {kind: simple}\n");
  ASSERT_TRUE(bad.ok());
  absl::StatusOr<dlrm::DlrmOptions> e = bad->ToDlrmOptions(sizes);
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(std::string(e.status().message()), HasSubstr("model.table_storage.5: there are only 3 tables"));
}

TEST(TrainConfig, LearningRateScheduleWarmsUpAndDecays) {
  OptimizerConfig o;
  o.learning_rate = 1.0;
  o.warmup_steps = 4;
  o.decay_start = 10;
  o.decay_steps = 4;
  EXPECT_FLOAT_EQ(o.LearningRate(0), 0.25f);
  EXPECT_FLOAT_EQ(o.LearningRate(3), 1.0f);
  EXPECT_FLOAT_EQ(o.LearningRate(9), 1.0f);
  EXPECT_FLOAT_EQ(o.LearningRate(10), 1.0f);
  EXPECT_FLOAT_EQ(o.LearningRate(12), 0.25f);
  EXPECT_FLOAT_EQ(o.LearningRate(14), 0.0f);
  EXPECT_FLOAT_EQ(o.LearningRate(100), 0.0f);
  OptimizerConfig flat;
  EXPECT_FLOAT_EQ(flat.LearningRate(12345), 0.1f);
}

TEST(TrainConfig, FingerprintIgnoresRunLengthButNotTheModel) {
  absl::StatusOr<TrainConfig> a = Parse("", {"train.steps=10"});
  absl::StatusOr<TrainConfig> b = Parse("", {"train.steps=20", "train.eval_every=5", "train.log_jsonl=x"});
  absl::StatusOr<TrainConfig> c = Parse("", {"model.embedding_dim=32", "model.bottom_mlp=[32]"});
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->Fingerprint(), b->Fingerprint());
  EXPECT_NE(a->Fingerprint(), c->Fingerprint());
}

// The fingerprint is made of the keys the reader read: every one of them,
// defaults included, but those that may change on resume; enums by name.
TEST(TrainConfig, FingerprintHoldsEveryKeyReadButTheRunLengthOnesWithEnumsByName) {
  absl::StatusOr<TrainConfig> c = Parse("", {"model.interaction=concat", "data.bad_lines=skip"});
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string f = c->Fingerprint();
  EXPECT_TRUE(f.starts_with(absl::StrCat(TrainConfig::kFingerprintVersion, "\n"))) << f;
  EXPECT_THAT(f, HasSubstr("\nmodel.interaction=concat\n"));
  EXPECT_THAT(f, HasSubstr("\ndata.bad_lines=skip\n"));  // a key the fixed list of old left out
  EXPECT_THAT(f, HasSubstr("\ndata.distribution=uniform\n"));  // a default, by name
  EXPECT_THAT(f, HasSubstr("\noptimizer.learning_rate=0.1\n"));
  int fingerprinted = 0, may_change = 0;
  for (const auto& [key, value] : c->settings) {
    const std::string line = absl::StrCat("\n", key, "=", value, "\n");
    if (TrainConfig::MayChangeOnResume(key)) {
      ++may_change;
      EXPECT_THAT(f, Not(HasSubstr(absl::StrCat("\n", key, "=")))) << key;
    } else {
      ++fingerprinted;
      EXPECT_THAT(f, HasSubstr(line)) << key;
    }
  }
  EXPECT_GT(fingerprinted, 30);
  EXPECT_GT(may_change, 10);
  for (const char* key : {"train.steps", "train.log_jsonl", "model.storage.kind", "model.dram_budget"}) {
    EXPECT_TRUE(TrainConfig::MayChangeOnResume(key)) << key;
  }
  for (const char* key : {"train.batch_size", "model.storage", "data.seed", "train.stepsize"}) {
    EXPECT_FALSE(TrainConfig::MayChangeOnResume(key)) << key;
  }
  // A learning rate that differs in the 9th digit is another fingerprint.
  absl::StatusOr<TrainConfig> lr = Parse("", {"model.interaction=concat", "data.bad_lines=skip",
                                              "optimizer.learning_rate=0.100000001"});
  ASSERT_TRUE(lr.ok());
  EXPECT_NE(lr->Fingerprint(), f);
}

// DiffFingerprint names the first key, in the written fingerprint's order,
// that differs or that only one side has.
TEST(TrainConfig, DiffFingerprintNamesTheFirstKeyThatDiffers) {
  absl::StatusOr<TrainConfig> a = Parse("", {"model.interaction=concat"});
  absl::StatusOr<TrainConfig> b = Parse("", {"model.interaction=dot", "train.steps=7"});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_FALSE(a->DiffFingerprint(a->Fingerprint()).has_value());
  std::optional<TrainConfig::FingerprintDiff> d = b->DiffFingerprint(a->Fingerprint());
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->key, "model.interaction");
  EXPECT_EQ(d->was, "concat");
  EXPECT_EQ(d->is, "dot");
  d = a->DiffFingerprint(absl::StrCat(a->Fingerprint(), "model.retired_key=3\n"));
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->key, "model.retired_key");
  EXPECT_EQ(d->is, "(not set)");
  const std::string f = a->Fingerprint();
  const size_t cut = f.find("\ndata.seed=");
  ASSERT_NE(cut, std::string::npos);
  d = a->DiffFingerprint(f.substr(0, cut + 1) + f.substr(f.find('\n', cut + 1) + 1));
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->key, "data.seed");
  EXPECT_EQ(d->was, "(not set)");
  // A key added since (optimizer.dense) that a checkpoint lacks is what
  // every run before it had (sgd): such a checkpoint resumes, unless the
  // run asks for another value.
  const size_t dense = f.find("\noptimizer.dense=sgd\n");
  ASSERT_NE(dense, std::string::npos);
  const std::string before_dense = f.substr(0, dense + 1) + f.substr(dense + std::string("\noptimizer.dense=sgd\n").size());
  EXPECT_FALSE(a->DiffFingerprint(before_dense).has_value());
  absl::StatusOr<TrainConfig> adagrad = Parse("", {"model.interaction=concat", "optimizer.dense=adagrad"});
  ASSERT_TRUE(adagrad.ok());
  d = adagrad->DiffFingerprint(before_dense);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->key, "optimizer.dense");
  EXPECT_EQ(d->is, "adagrad");
  EXPECT_THAT(TrainConfig::MayChangeOnResumeList(), HasSubstr("train.steps, "));
  EXPECT_THAT(TrainConfig::MayChangeOnResumeList(), HasSubstr("model.storage.*"));
}

// The keys of the reference's run (configs/fidelity.yaml): split, init_from,
// log_every, export_dir. Where the model starts and how the data is split
// are in the fingerprint; the log and the export are not.
TEST(TrainConfig, FidelityKeysParseAndTheModelOnesAreFingerprinted) {
  absl::StatusOr<TrainConfig> c = Parse("", {"data.split=none", "model.init_from=init", "train.log_every=1",
                                             "train.export_dir=out", "train.log_jsonl=x"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->data.split, DataSplit::kNone);
  EXPECT_EQ(c->model.init_from, "init");
  EXPECT_EQ(c->train.log_every, 1);
  EXPECT_EQ(c->train.export_dir, "out");
  absl::StatusOr<TrainConfig> plain = Parse("");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->data.split, DataSplit::kAuto);
  EXPECT_THAT(c->Fingerprint(), HasSubstr("data.split=none\n"));
  EXPECT_THAT(c->Fingerprint(), HasSubstr("model.init_from=init\n"));
  absl::StatusOr<TrainConfig> other_log = Parse("", {"data.split=none", "model.init_from=init", "train.export_dir=b"});
  ASSERT_TRUE(other_log.ok());
  EXPECT_EQ(c->Fingerprint(), other_log->Fingerprint());
  absl::StatusOr<TrainConfig> bad = Parse("", {"data.split=half"});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("data.split: expected one of auto, none; got 'half'"));
  bad = Parse("", {"train.log_every=-1"});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("train.log_every: expected an integer >= 0"));
}

TEST(TrainConfig, SsdStorageDramBudgetAndPrefetchBatchesParse) {
  absl::StatusOr<TrainConfig> c = Parse(R"(
model:
  dram_budget: 6GiB
  storage: {kind: ssd, slow_tier: /nvme}
  table_storage:
    "1": {kind: dram}
train: {prefetch_batches: 3}
)");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model.StorageOf(0).kind, StorageKind::kSsd);
  EXPECT_EQ(c->model.StorageOf(1).kind, StorageKind::kDram);
  ASSERT_TRUE(c->model.dram_budget.has_value());
  EXPECT_EQ(c->model.dram_budget->bytes, int64_t{6} << 30);
  EXPECT_EQ(c->train.prefetch_batches, 3);
  EXPECT_EQ(c->model.StorageOf(0).ToStorageConfig().ssd.file.directory, "/nvme");

  absl::StatusOr<TrainConfig> d = Parse("model: {dram_budget: 25%}\n");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_DOUBLE_EQ(d->model.dram_budget->fraction, 0.25);
  EXPECT_EQ(d->train.prefetch_batches, 2);  // the default
  EXPECT_FALSE(Parse("")->model.dram_budget.has_value());
}

TEST(TrainConfig, SsdConfigErrorsNameTheKey) {
  EXPECT_THAT(ErrorOf("model: {dram_budget: lots}\n"),
              HasSubstr("configs/x.yaml: model.dram_budget: expected a fraction in [0, 1] (0.25, 25%) or a size"));
  EXPECT_THAT(ErrorOf("model: {dram_budget: 0}\n"), HasSubstr("model.dram_budget: expected a size > 0"));
  EXPECT_THAT(ErrorOf("train: {prefetch_batches: -1}\n"),
              HasSubstr("train.prefetch_batches: expected an integer in [0, 64], got -1"));
  EXPECT_THAT(ErrorOf("model: {storage: {kind: nvme}}\n"),
              HasSubstr("model.storage.kind: expected one of dram, simple, static, dynamic, ssd; got 'nvme'"));
  // No budget for ssd tables: named when the tables are known.
  absl::StatusOr<TrainConfig> c = Parse("model: {storage: {kind: ssd}}\n");
  ASSERT_TRUE(c.ok()) << c.status();
  const std::vector<uint64_t> sizes{1000};
  absl::StatusOr<dlrm::DlrmOptions> o = c->ToDlrmOptions(sizes);
  ASSERT_FALSE(o.ok());
  EXPECT_THAT(std::string(o.status().message()),
              HasSubstr("configs/x.yaml: model.dram_budget: required when a table's storage is ssd"));
}

// dim 16 fp32: 64-byte rows, slots of 64 bytes and their metadata; the map
// and the log's buffers (ssd/internal/ssd_core.h).
int64_t SsdNeed(int64_t rows, int64_t pinned_rows) {
  return SsdFixedDramBytes(rows, 64, SsdOptions{}, /*evicts=*/true) + pinned_rows * (64 + kSsdSlotMetadataBytes);
}

TEST(TrainConfig, DramBudgetThatCannotHoldThePinnedBatchesIsRefusedWithTheBytesNeeded) {
  // 2 ssd tables of 100,000 rows, batch 512, hotness 2, prefetch 2: 3 x 1024
  // rows pinned per table.
  const int64_t need = 2 * SsdNeed(100000, 3 * 1024);
  const std::string yaml = absl::StrCat("model: {dram_budget: ", need - 1,
                                        ", storage: {kind: ssd}}\ndata: {hotness: 2}\n"
                                        "train: {batch_size: 512, prefetch_batches: 2}\n");
  absl::StatusOr<TrainConfig> c = Parse(yaml);
  ASSERT_TRUE(c.ok()) << c.status();
  const std::vector<uint64_t> sizes{100000, 100000};
  absl::StatusOr<dlrm::DlrmOptions> o = c->ToDlrmOptions(sizes);
  ASSERT_FALSE(o.ok());
  const std::string m(o.status().message());
  EXPECT_THAT(m, HasSubstr("configs/x.yaml: model.dram_budget: "));
  EXPECT_THAT(m, HasSubstr("train.prefetch_batches + 1 = 3 batches of up to 1024 distinct rows"));
  EXPECT_THAT(m, HasSubstr(absl::StrCat("it needs at least ", need, " bytes")));

  absl::StatusOr<TrainConfig> fits = Parse(yaml, {absl::StrCat("model.dram_budget=", need)});
  ASSERT_TRUE(fits.ok()) << fits.status();
  absl::StatusOr<dlrm::DlrmOptions> ok = fits->ToDlrmOptions(sizes);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->embeddings.tables[0].storage.ssd.capacity_bytes, 3 * 1024 * 64);
}

// data.hotness is one number for every table or a list, one per table; the
// list's length must be the number of tables, and each table pins batch x
// its own hotness rows.
TEST(TrainConfig, HotnessIsOneNumberOrOnePerTable) {
  absl::StatusOr<TrainConfig> none = Parse("");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->data.hotness.empty());  // synthetic: 1; binary: the dataset's
  EXPECT_THAT(none->Fingerprint(), HasSubstr("data.hotness=1\n"));
  absl::StatusOr<TrainConfig> list = Parse("data: {hotness: [3, 2, 100]}\nmodel: {tables: {sizes: [10, 20, 30]}}\n");
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_THAT(list->data.hotness, ElementsAre(3, 2, 100));
  EXPECT_THAT(list->Fingerprint(), HasSubstr("data.hotness=3,2,100\n"));

  absl::Status wrong = Parse("data: {hotness: [3, 2]}\nmodel: {tables: {count: 3, rows: 10}}\n").status();
  EXPECT_EQ(wrong.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(wrong.message(), HasSubstr("configs/x.yaml: data.hotness: 2 entries for 3 tables"));
  EXPECT_THAT(Parse("data: {hotness: [3, 0]}\n").status().message(),
              HasSubstr("data.hotness: expected a list of integers in [1, 100000]"));
  EXPECT_THAT(Parse("data: {hotness: 100001}\n").status().message(), HasSubstr("data.hotness"));
  EXPECT_THAT(Parse("data: {source: tsv, path: x.tsv, hotness: [1, 2]}\n").status().message(),
              HasSubstr("data.hotness: Criteo TSV data has one index per table"));

  // Without model.tables the count comes later (the dataset's, Kaggle's 26).
  absl::StatusOr<TrainConfig> later = Parse("data: {hotness: [3, 2]}\n");
  ASSERT_TRUE(later.ok()) << later.status();
  const std::vector<uint64_t> three{10, 20, 30};
  EXPECT_THAT(later->ToDlrmOptions(three).status().message(),
              HasSubstr("configs/x.yaml: data.hotness: 2 entries for 3 tables"));

  // Pinned rows per ssd table: (prefetch + 1) x batch x its hotness.
  absl::StatusOr<TrainConfig> ssd = Parse(
      "model: {dram_budget: 1GiB, storage: {kind: ssd}}\ndata: {hotness: [1, 5]}\n"
      "train: {batch_size: 100, prefetch_batches: 1}\n");
  ASSERT_TRUE(ssd.ok()) << ssd.status();
  const std::vector<uint64_t> sizes{100000, 100000};
  DramSplit split;
  absl::StatusOr<dlrm::DlrmOptions> o = ssd->ToDlrmOptions(sizes, {}, nullptr, &split);
  ASSERT_TRUE(o.ok()) << o.status();
  absl::StatusOr<TrainConfig> tight = Parse(absl::StrCat(
      "model: {dram_budget: ", 2 * SsdNeed(100000, 1000) - 1, ", storage: {kind: ssd}}\ndata: {hotness: [5, 5]}\n"
      "train: {batch_size: 100, prefetch_batches: 1}\n"));
  ASSERT_TRUE(tight.ok()) << tight.status();
  EXPECT_THAT(tight->ToDlrmOptions(sizes).status().message(), HasSubstr("2 batches of up to 500 distinct rows"));
  // The dataset's hotness, when the caller passes it, wins over data.hotness.
  const std::vector<uint32_t> one_and_five{1, 5};
  EXPECT_TRUE(tight->ToDlrmOptions(sizes, one_and_five).ok());
}

TEST(TrainConfig, DramBudgetIsSplitByTableBytesAndNeverMoreThanATable) {
  // Tables of 10,000, 1,000,000 and 3,000,000 rows (and one in DRAM); batch
  // 100, prefetch 1: 200 pinned rows each, the rest in proportion 1:100:300.
  const std::string yaml = R"(
model:
  dram_budget: 32MiB
  storage: {kind: ssd}
  table_storage: {"3": {kind: dram}}
train: {batch_size: 100, prefetch_batches: 1}
)";
  const std::vector<uint64_t> sizes{10000, 1000000, 3000000, 50};
  absl::StatusOr<TrainConfig> c = Parse(yaml);
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<dlrm::DlrmOptions> o = c->ToDlrmOptions(sizes);
  ASSERT_TRUE(o.ok()) << o.status();
  const auto slots = [&](int t) { return o->embeddings.tables[t].storage.ssd.capacity_bytes / 64; };
  EXPECT_EQ(o->embeddings.tables[3].storage.ssd.capacity_bytes, 0);
  const int64_t fixed = SsdNeed(10000, 0) + SsdNeed(1000000, 0) + SsdNeed(3000000, 0);
  const int64_t used = fixed + (slots(0) + slots(1) + slots(2)) * (64 + kSsdSlotMetadataBytes);
  EXPECT_LE(used, int64_t{32} << 20);
  EXPECT_GT(used, (int64_t{32} << 20) - 4 * (64 + kSsdSlotMetadataBytes));  // every whole slot handed out (but rounding)
  EXPECT_NEAR(static_cast<double>(slots(2) - 200) / static_cast<double>(slots(1) - 200), 3.0, 0.01);
  EXPECT_NEAR(static_cast<double>(slots(1) - 200) / static_cast<double>(slots(0) - 200), 100.0, 1.0);

  // A budget above the tables' bytes: each gets its rows, no more.
  absl::StatusOr<TrainConfig> big = Parse(yaml, {"model.dram_budget=1GiB"});
  ASSERT_TRUE(big.ok()) << big.status();
  absl::StatusOr<dlrm::DlrmOptions> all = big->ToDlrmOptions(sizes);
  ASSERT_TRUE(all.ok()) << all.status();
  for (int t = 0; t < 3; ++t) {
    EXPECT_EQ(all->embeddings.tables[t].storage.ssd.capacity_bytes, static_cast<int64_t>(sizes[t]) * 64) << t;
  }
}

TEST(TrainConfig, FingerprintIgnoresWhereTheRowsLive) {
  // Storage changes no bit of the results (tests/train/ssd_training_test.cc),
  // so a run may resume with its tables moved to or from ssd.
  absl::StatusOr<TrainConfig> a = Parse("");
  absl::StatusOr<TrainConfig> b = Parse("", {"model.storage.kind=ssd", "model.dram_budget=1GiB",
                                             "train.prefetch_batches=5", "model.storage.slow_tier=/x"});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->Fingerprint(), b->Fingerprint());
}

// The tables' optimizer by name: element-wise AdaGrad is "adagrad", as the
// dense part's; a wrong name lists the three.
TEST(TrainConfig, EmbeddingOptimizerNames) {
  for (const auto& [name, want] : {std::pair{"sgd", EmbeddingOptimizer::kSgd},
                                   std::pair{"rowwise_adagrad", EmbeddingOptimizer::kRowwiseAdagrad},
                                   std::pair{"adagrad", EmbeddingOptimizer::kAdagrad}}) {
    absl::StatusOr<TrainConfig> c = Parse("", {absl::StrCat("optimizer.embedding=", name)});
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->optimizer.embedding, want) << name;
    absl::StatusOr<dlrm::DlrmOptions> o = c->ToDlrmOptions(std::vector<uint64_t>{10, 20});
    ASSERT_TRUE(o.ok()) << o.status();
    EXPECT_EQ(o->embeddings.optimizer, want) << name;
  }
  absl::StatusOr<TrainConfig> bad = Parse("", {"optimizer.embedding=adam"});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("optimizer.embedding"));
  EXPECT_THAT(bad.status().message(), HasSubstr("adagrad"));
}

}  // namespace
}  // namespace cemb::train
