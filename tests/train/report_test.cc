#include "train/report.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "yaml-cpp/yaml.h"

namespace cemb::train {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// JSON is YAML: a JSON line parsed by yaml-cpp, as a script would parse it.
YAML::Node ParseJson(const std::string& line) {
  EXPECT_EQ(line.find('\n'), std::string::npos) << line;
  return YAML::Load(line);
}

TEST(JsonNumber, UndefinedIsNullAndADoubleReadsBackExactly) {
  EXPECT_EQ(JsonNumber(NAN), "null");
  EXPECT_EQ(JsonNumber(INFINITY), "null");
  EXPECT_EQ(JsonNumber(-INFINITY), "null");
  EXPECT_EQ(JsonNumber(0), "0");
  EXPECT_EQ(JsonNumber(0.5), "0.5");
  for (double v : {0.1, 1.0 / 3.0, -2.5e-300, 123456789.123456789}) {
    EXPECT_EQ(std::strtod(JsonNumber(v).c_str(), nullptr), v) << JsonNumber(v);
  }
}

TEST(JsonString, EscapesAndReadsBack) {
  const std::string s = "a \"quoted\" back\\slash\nnew line\ttab \x01 end";
  EXPECT_EQ(JsonString(s), "\"a \\\"quoted\\\" back\\\\slash\\nnew line\\ttab \\u0001 end\"");
  EXPECT_EQ(ParseJson("{\"s\":" + JsonString(s) + "}")["s"].as<std::string>(), s);
}

EvalRecord SomeEval() {
  EvalRecord r;
  r.step = 40;
  r.samples = 40 * 2048 - 1000;  // a partial batch among them
  r.epoch = 0.5;
  r.lr = 0.1f;
  r.train_loss = 0.123456789012345678;
  r.metrics = {.samples = 4096, .positives = 1000, .log_loss = 0.48630123, .auc = 0.78451, .accuracy = 0.7731};
  r.elapsed_seconds = 2.25;
  return r;
}

TEST(EvalReport, TextLineIsTheDocumentedOne) {
  EXPECT_EQ(EvalText(SomeEval(), 91000),
            "step      40  epoch   0.50  train loss 0.12346  val loss 0.48630  auc 0.7845  accuracy 0.7731  "
            "(91.0k samples/s)\n");
}

TEST(EvalReport, JsonLineRoundTrips) {
  const EvalRecord r = SomeEval();
  const std::string line = EvalJson(r, 91000.25);
  const YAML::Node n = ParseJson(line);
  EXPECT_EQ(n["type"].as<std::string>(), "eval");
  EXPECT_EQ(n["step"].as<int64_t>(), 40);
  EXPECT_EQ(n["samples"].as<int64_t>(), 40 * 2048 - 1000);
  EXPECT_EQ(n["epoch"].as<double>(), r.epoch);
  EXPECT_EQ(n["lr"].as<double>(), static_cast<double>(r.lr));
  EXPECT_EQ(n["train_loss"].as<double>(), r.train_loss);
  EXPECT_EQ(n["val_log_loss"].as<double>(), r.metrics.log_loss);
  EXPECT_EQ(n["val_auc"].as<double>(), r.metrics.auc);
  EXPECT_EQ(n["val_accuracy"].as<double>(), r.metrics.accuracy);
  EXPECT_EQ(n["val_samples"].as<int64_t>(), 4096);
  EXPECT_EQ(n["elapsed_s"].as<double>(), 2.25);
  EXPECT_EQ(n["samples_per_s"].as<double>(), 91000.25);
  EXPECT_EQ(n.size(), 12u);

  EvalRecord undefined = r;
  undefined.train_loss = NAN;   // no step since the last record
  undefined.metrics.auc = NAN;  // one class only
  const YAML::Node u = ParseJson(EvalJson(undefined, 0));
  EXPECT_TRUE(u["train_loss"].IsNull());
  EXPECT_TRUE(u["val_auc"].IsNull());
  EXPECT_THAT(EvalJson(undefined, 0), HasSubstr("\"train_loss\":null,"));
}

TrainSummary SomeSummary() {
  TrainSummary s;
  s.first_step = 0;
  s.steps = 10;
  s.losses = {0.7, 0.6};
  s.train_seconds = 2;
  s.samples_per_second = 10240;
  s.train_times[dlrm::Phase::kData] = 0.5;
  s.train_times[dlrm::Phase::kOther] = 1.5;
  TableReport dram;
  dram.id = 0;
  dram.rows = 100;
  dram.name = "emb0";
  dram.storage = "dram";
  dram.kernel = "avx2";
  TableReport cached = dram;
  cached.id = 1;
  cached.rows = 2000;
  cached.name = "emb1";
  cached.storage = "dynamic";
  cached.cached = true;
  s.tables = {dram, cached};
  return s;
}

TEST(SummaryReport, JsonLineRoundTripsWithNullsWhereUndefined) {
  const RunFacts facts{.config_name = "configs/x \"1\".yaml",
                       .batch_size = 1024,
                       .has_validation = false,
                       .mlp_precision = dlrm::Precision::kFp32,
                       .mlp_precision_requested = dlrm::Precision::kAuto};
  const YAML::Node n = ParseJson(SummaryJson(SomeSummary(), facts));
  EXPECT_EQ(n["type"].as<std::string>(), "summary");
  EXPECT_EQ(n["config"].as<std::string>(), facts.config_name);
  EXPECT_EQ(n["steps"].as<int64_t>(), 10);
  EXPECT_EQ(n["batch_size"].as<int64_t>(), 1024);
  EXPECT_EQ(n["mlp_precision"].as<std::string>(), "fp32");
  EXPECT_EQ(n["mlp_precision_requested"].as<std::string>(), "auto");
  EXPECT_EQ(n["samples_per_s"].as<double>(), 10240);
  EXPECT_TRUE(n["val_auc"].IsNull());  // no validation set
  EXPECT_TRUE(n["val_log_loss"].IsNull());
  EXPECT_EQ(n["phases"]["data"].as<double>(), 0.5);
  EXPECT_EQ(n["phases"][dlrm::PhaseName(dlrm::Phase::kOther)].as<double>(), 1.5);
  ASSERT_EQ(n["tables"].size(), 2u);
  EXPECT_EQ(n["tables"][1]["name"].as<std::string>(), "emb1");
  EXPECT_EQ(n["tables"][1]["rows"].as<int64_t>(), 2000);
  EXPECT_EQ(n["tables"][1]["table"].as<int>(), 1);
  EXPECT_TRUE(n["tables"][0]["hit_rate"].IsNull());  // not cached
  EXPECT_EQ(n["tables"][1]["cached"].as<bool>(), true);
  EXPECT_EQ(n["losses_digest"].as<std::string>().size(), 16u);
}

TEST(SummaryReport, TextListsThePhasesAndOnlyTheCachedTables) {
  const RunFacts facts{.has_validation = true};
  TrainSummary s = SomeSummary();
  s.final_metrics = {.samples = 512, .log_loss = 0.5, .auc = 0.75, .accuracy = 0.625};
  const std::string text = SummaryText(s, facts);
  EXPECT_THAT(text,
              HasSubstr("\ntraining: 10 steps in 2.00 s, 10.2k samples/s; evaluation 0.00 s; checkpoints 0.00 s\n"));
  EXPECT_THAT(text, HasSubstr("\ndata                          0.500   25.0%     50.000\n"));
  EXPECT_THAT(text, HasSubstr("\ntotal                         2.000  100.0%    200.000\n"));
  EXPECT_THAT(text, HasSubstr("\nemb1            2000 dynamic"));
  EXPECT_THAT(text, Not(HasSubstr("\nemb0 ")));
  EXPECT_THAT(text, HasSubstr("(tables in DRAM without a cache are not listed)\n"));
  EXPECT_THAT(text, HasSubstr("\nfinal validation (512 samples): log loss 0.50000, AUC 0.7500, accuracy 0.6250\n"));
}

TEST(TableReports, RoundTripThroughBytesWithEveryField) {
  std::vector<TableReport> reports = SomeSummary().tables;
  reports[1].stats.hot[0] = 12345;
  reports[1].stats.cold.rows_written_back = 77;
  reports[1].stats.row_bytes = 64;
  TableReport ssd = reports[0];
  ssd.id = 7;
  ssd.name = std::string("emb7 \0 with a zero byte", 23);
  ssd.storage = "ssd";
  ssd.ssd = true;
  ssd.ssd_stats.fetched_rows = 999;
  ssd.ssd_stats.waited = absl::Milliseconds(1500);
  ssd.ssd_stats.io.bytes_read = 4096;
  ssd.row_bytes = 256;
  ssd.dram_bytes = int64_t{1} << 33;
  reports.push_back(ssd);
  absl::StatusOr<std::vector<TableReport>> back = DecodeTableReports(EncodeTableReports(reports));
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), reports.size());
  for (size_t i = 0; i < reports.size(); ++i) {
    const TableReport &a = reports[i], &b = (*back)[i];
    EXPECT_EQ(b.id, a.id);
    EXPECT_EQ(b.rows, a.rows);
    EXPECT_EQ(b.name, a.name);
    EXPECT_EQ(b.storage, a.storage);
    EXPECT_EQ(b.kernel, a.kernel);
    EXPECT_EQ(b.cached, a.cached);
    EXPECT_EQ(b.stats.lookups(), a.stats.lookups());
    EXPECT_EQ(b.stats.rows_written_back(), a.stats.rows_written_back());
    EXPECT_EQ(b.stats.row_bytes, a.stats.row_bytes);
    EXPECT_EQ(b.ssd, a.ssd);
    EXPECT_EQ(b.ssd_stats.fetched_rows, a.ssd_stats.fetched_rows);
    EXPECT_EQ(b.ssd_stats.waited, a.ssd_stats.waited);
    EXPECT_EQ(b.ssd_stats.io.bytes_read, a.ssd_stats.io.bytes_read);
    EXPECT_EQ(b.row_bytes, a.row_bytes);
    EXPECT_EQ(b.dram_bytes, a.dram_bytes);
  }
  absl::StatusOr<std::vector<TableReport>> none = DecodeTableReports(EncodeTableReports({}));
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->empty());
}

TEST(TableReports, DecodeRefusesTruncatedOrTrailingBytes) {
  const std::string bytes = EncodeTableReports(SomeSummary().tables);
  for (size_t n : {size_t{0}, size_t{5}, bytes.size() / 2, bytes.size() - 1}) {
    absl::StatusOr<std::vector<TableReport>> r = DecodeTableReports(std::string_view(bytes).substr(0, n));
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << n << " bytes";
    EXPECT_THAT(r.status().message(), HasSubstr("truncated")) << n << " bytes";
  }
  absl::StatusOr<std::vector<TableReport>> r = DecodeTableReports(bytes + "x");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("left over"));
}

TEST(Report, WritesOneJsonLinePerRecordAndTextToItsStream) {
  char log_path[] = "/tmp/cemb_report_test_XXXXXX";
  const int fd = ::mkstemp(log_path);
  ASSERT_GE(fd, 0);
  ::close(fd);
  std::FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  {
    Report report(out, nullptr, /*progress=*/true);  // no stream for the bar: never drawn
    ASSERT_TRUE(report.OpenLog(log_path, /*append=*/false).ok());
    report.Step(3, 0.25, 0.5f, 0.125);
    report.Eval(SomeEval(), 1000);
    report.Print("checkpoint: %s\n", "x");
  }
  std::ifstream in(log_path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "{\"type\":\"step\",\"step\":3,\"loss\":0.25,\"lr\":0.5,\"seconds\":0.125}");
  EXPECT_EQ(ParseJson(lines[1])["type"].as<std::string>(), "eval");
  std::rewind(out);
  char buf[512] = {};
  const size_t n = std::fread(buf, 1, sizeof buf - 1, out);
  std::fclose(out);
  EXPECT_EQ(std::string(buf, n), EvalText(SomeEval(), 1000) + "checkpoint: x\n");
  std::remove(log_path);

  Report nowhere(nullptr, nullptr, false);
  const absl::Status s = nowhere.OpenLog("/nonexistent/dir/run.jsonl", false);
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("/nonexistent/dir/run.jsonl"));
}

}  // namespace
}  // namespace cemb::train
