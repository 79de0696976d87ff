// dlrm-serve's server end to end: a model trained here on a small Criteo
// TSV file (26 tables, table 2 on the ssd tier: served in place), a Server
// on a free loopback port, requests over HTTP with cpp-httplib's client.
#include "server/server.h"

#include <unistd.h>

#include <atomic>
#include <bit>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "tests/server/gate.h"
#include "serve/predictor.h"
#include "train/config.h"
#include "train/trainer.h"

namespace cemb::server {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using ::testing::HasSubstr;

constexpr int kTables = 26;
constexpr int kDense = 13;
constexpr char kInfer[] = "/v2/models/dlrm/infer";

std::string TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base ? base : "/tmp") + "/cemb_server_test_XXXXXX";
  EXPECT_NE(::mkdtemp(pattern.data()), nullptr);
  return pattern;
}

// Raw Criteo lines: 13 integers (some missing) and 26 hex ids (some missing).
std::vector<std::string> CriteoLines(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::string> lines;
  for (int i = 0; i < n; ++i) {
    std::string line = absl::StrCat(rng() % 2);
    for (int j = 0; j < kDense; ++j) {
      absl::StrAppend(&line, "\t", rng() % 10 == 0 ? "" : absl::StrCat(static_cast<int64_t>(rng() % 3000) - 3));
    }
    for (int j = 0; j < kTables; ++j) {
      const uint32_t id = static_cast<uint32_t>((rng() % 600 + 1) * 0x9e3779b1u);
      absl::StrAppend(&line, "\t", rng() % 10 == 0 ? "" : absl::StrCat(absl::Hex(id)));
    }
    lines.push_back(line);
  }
  return lines;
}

// Trains (or, resume, continues to `steps`) the model of `dir`: Criteo TSV,
// ids modulo 997, fp32 MLPs, table 2 on the ssd tier.
void Train(const std::string& dir, int steps, bool resume) {
  if (!resume) {
    fs::create_directories(dir);
    ASSERT_TRUE(base::WriteFileAtomically(dir + "/train.txt", absl::StrJoin(CriteoLines(1400, 21), "\n") + "\n").ok());
  }
  absl::StatusOr<train::TrainConfig> c = train::TrainConfig::Parse(
      absl::StrCat("data: {source: tsv, path: ", dir, "/train.txt, format: kaggle, max_ind_range: 997, work_dir: ",
                   dir, "/data}\n"
                   "model:\n  embedding_dim: 8\n  bottom_mlp: [16, 8]\n  top_mlp: [16, 1]\n  mlp_precision: fp32\n"
                   "  storage: {kind: dram, slow_tier: ", dir, "}\n  table_storage: {\"2\": {kind: ssd}}\n"
                   "  dram_budget: 16MiB\n"
                   "train: {batch_size: 200, steps: ", steps, ", threads: 2, progress: false, checkpoint_dir: ", dir,
                   "/ck}\n"),
      "criteo.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  FILE* quiet = std::fopen("/dev/null", "w");
  absl::StatusOr<std::unique_ptr<train::Trainer>> trainer = train::Trainer::Create(*c, {.resume = resume, .out = quiet});
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  absl::StatusOr<train::TrainSummary> s = (*trainer)->Run();
  ASSERT_TRUE(s.ok()) << s.status();
  std::fclose(quiet);
}

// Floats as JSON numbers that read back exactly (StrJoin writes 6 digits).
std::string Floats(const std::vector<float>& v) {
  std::string s;
  char buf[32];
  for (float f : v) {
    if (!s.empty()) s += ',';
    s.append(buf, std::to_chars(buf, buf + sizeof buf, f).ptr);
  }
  return s;
}

// n samples in both forms: raw lines, and preprocessed dense features with
// one row per table (rows below `rows`).
struct Samples {
  int64_t n = 0;
  std::vector<std::string> lines;
  std::vector<data::CriteoRow> rows;
  std::vector<float> dense;
  std::vector<std::vector<int32_t>> indices, offsets;

  Samples(int64_t count, uint64_t seed, const std::vector<uint64_t>& table_rows)
      : n(count), lines(CriteoLines(static_cast<int>(count), seed)), rows(count), indices(kTables), offsets(kTables) {
    std::mt19937_64 rng(seed);
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_TRUE(data::ParseCriteoLine(lines[i], rows[i]).ok());
      for (int j = 0; j < kDense; ++j) dense.push_back(static_cast<float>(rng() % 1000) / 128.f);
    }
    for (int t = 0; t < kTables; ++t) {
      for (int64_t i = 0; i <= n; ++i) offsets[t].push_back(static_cast<int32_t>(i));
      for (int64_t i = 0; i < n; ++i) indices[t].push_back(static_cast<int32_t>(rng() % table_rows[t]));
    }
  }
  std::vector<Bags<int32_t>> MakeBags() const {
    std::vector<Bags<int32_t>> b;
    for (int t = 0; t < kTables; ++t) b.push_back({.offsets = offsets[t], .indices = indices[t]});
    return b;
  }
  // The preprocessed request: sparse [n, 26] sample by sample.
  std::string Preprocessed(const std::string& id = "") const {
    std::vector<int32_t> sparse;
    for (int64_t i = 0; i < n; ++i) {
      for (int t = 0; t < kTables; ++t) sparse.push_back(indices[t][i]);
    }
    return absl::StrCat("{", id.empty() ? "" : absl::StrCat("\"id\":\"", id, "\","),
                        R"("inputs":[{"name":"dense","datatype":"FP32","shape":[)", n, R"(,13],"data":[)",
                        Floats(dense), R"(]},{"name":"sparse","datatype":"INT64","shape":[)", n,
                        R"(,26],"data":[)", absl::StrJoin(sparse, ","), "]}]}");
  }
  // The raw request: int_features INT64 (null when missing), cat_features BYTES.
  std::string Raw() const {
    std::vector<std::string> ints, cats;
    for (const std::string& line : lines) {
      const std::vector<std::string> f = absl::StrSplit(line, '\t');
      for (int j = 1; j <= kDense; ++j) ints.push_back(f[j].empty() ? "null" : f[j]);
      for (int j = 1 + kDense; j < 1 + kDense + kTables; ++j) cats.push_back(absl::StrCat("\"", f[j], "\""));
    }
    return absl::StrCat(R"({"inputs":[{"name":"int_features","datatype":"INT64","shape":[)", n, R"(,13],"data":[)",
                        absl::StrJoin(ints, ","), R"(]},{"name":"cat_features","datatype":"BYTES","shape":[)", n,
                        R"(,26],"data":[)", absl::StrJoin(cats, ","), "]}]}");
  }
};

std::vector<uint32_t> Bits(const std::vector<float>& v) {
  std::vector<uint32_t> b;
  for (float f : v) b.push_back(std::bit_cast<uint32_t>(f));
  return b;
}

// The probabilities of an answer, read back exactly (strtof of each number).
std::vector<float> Probabilities(const std::string& body) {
  std::vector<float> p;
  const size_t at = body.find("\"data\":[");
  if (at == std::string::npos) return p;
  const size_t end = body.find(']', at);
  for (absl::string_view v : absl::StrSplit(body.substr(at + 8, end - at - 8), ',', absl::SkipEmpty())) {
    p.push_back(std::strtof(std::string(v).c_str(), nullptr));
  }
  return p;
}

// What a request got: the status (0: no answer at all), body and Connection header.
struct Answer {
  int status = 0;
  std::string body;
  std::string connection;
};

Answer AnswerOf(const httplib::Result& res) {
  if (!res) return {};
  return {.status = res->status, .body = res->body, .connection = res->get_header_value("Connection")};
}

// A server running on its own thread; Shutdown and join when destroyed.
struct Running {
  std::unique_ptr<Server> server;
  std::thread thread;
  absl::Status result;

  ~Running() {
    if (thread.joinable()) {
      server->Shutdown();
      thread.join();
    }
  }
  httplib::Client Client() const {
    httplib::Client c("127.0.0.1", server->port());
    c.set_read_timeout(30, 0);
    return c;
  }
  Answer Post(const std::string& path, const std::string& body) const {
    return AnswerOf(Client().Post(path, body, "application/json"));
  }
  absl::Status Stop() {
    server->Shutdown();
    thread.join();
    return result;
  }
};

// The server's before_score hook: records each batch's samples, then
// enters the gate (held while the test holds it).
class HeldScoring {
 public:
  std::function<void(int64_t)> Hook() {
    return [this](int64_t samples) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        batches_.push_back(samples);
      }
      gate.Enter();
    };
  }
  std::vector<int64_t> batches() {
    std::lock_guard<std::mutex> lock(mu_);
    return batches_;
  }

  Gate gate;

 private:
  std::mutex mu_;
  std::vector<int64_t> batches_;
};

// A value of /metrics ("name{labels}" as written), or -1.
double Metric(const Running& r, const std::string& series) {
  httplib::Result res = r.Client().Get("/metrics");
  if (!res || res->status != 200) return -1;
  for (absl::string_view line : absl::StrSplit(res->body, '\n')) {
    if (absl::StartsWith(line, series + " ")) {
      double v = 0;
      if (absl::SimpleAtod(line.substr(series.size() + 1), &v)) return v;
    }
  }
  return -1;
}

// Waits until `series` reaches `value` (the state a test sets up).
void WaitMetric(const Running& r, const std::string& series, double value) {
  while (Metric(r, series) < value) std::this_thread::sleep_for(2ms);
}

class ServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(TempDir());
    Train(*dir_, 3, false);
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(*dir_, ec);
    delete dir_;
  }

  static ServerOptions Options(const std::string& dir = *dir_) {
    return {.checkpoint = dir + "/ck", .port = 0, .reload_poll_s = 0};
  }

  // One scoring at a time (one context), no batching window, each scoring
  // held while `held` is.
  static ServerOptions OneScoringAtATime(HeldScoring& held) {
    ServerOptions o = Options();
    o.predictor.contexts = 1;
    o.max_wait_us = 0;
    o.before_score = held.Hook();
    return o;
  }

  static std::unique_ptr<Running> Start(ServerOptions o) {
    auto r = std::make_unique<Running>();
    absl::StatusOr<std::unique_ptr<Server>> s = Server::Create(o);
    EXPECT_TRUE(s.ok()) << s.status();
    if (!s.ok()) return nullptr;
    r->server = *std::move(s);
    r->thread = std::thread([p = r.get()] { p->result = p->server->Run(); });
    // Live at once, ready once the model is open.
    for (;;) {
      httplib::Result ready = r->Client().Get("/v2/health/ready");
      if (ready && ready->status == 200) break;
      std::this_thread::sleep_for(2ms);
    }
    return r;
  }

  // A predictor of the same checkpoint: the scores the server must answer.
  static std::unique_ptr<serve::Predictor> Reference(const std::string& dir = *dir_) {
    absl::StatusOr<std::unique_ptr<serve::Predictor>> p = serve::Predictor::Open(dir + "/ck", {});
    EXPECT_TRUE(p.ok()) << p.status();
    return *std::move(p);
  }
  static std::vector<float> Expected(const serve::Predictor& p, const Samples& s) {
    std::vector<float> out(s.n);
    const std::vector<Bags<int32_t>> bags = s.MakeBags();
    EXPECT_TRUE(p.Predict({.size = s.n, .dense = s.dense, .bags = bags}, out).ok());
    return out;
  }
  static Samples MakeSamples(const serve::Predictor& p, int64_t n, uint64_t seed) {
    return Samples(n, seed, p.manifest().table_rows);
  }

  static std::string* dir_;
};
std::string* ServerTest::dir_ = nullptr;

TEST_F(ServerTest, HealthMetadataAndScoresEqualThePredictors) {
  std::unique_ptr<Running> r = Start(Options());
  ASSERT_NE(r, nullptr);
  httplib::Client c = r->Client();
  EXPECT_EQ(c.Get("/v2/health/live")->status, 200);
  EXPECT_EQ(c.Get("/v2/health/ready")->status, 200);
  EXPECT_EQ(c.Get("/v2/models/dlrm/ready")->status, 200);
  EXPECT_THAT(c.Get("/v2")->body, HasSubstr(R"("name":"dlrm-serve")"));
  httplib::Result meta = c.Get("/v2/models/dlrm");
  ASSERT_TRUE(meta);
  EXPECT_EQ(meta->status, 200);
  EXPECT_THAT(meta->body, HasSubstr(R"("versions":["3"])"));
  EXPECT_THAT(meta->body, HasSubstr(R"({"name":"sparse","datatype":"INT64","shape":[-1,26]})"));
  EXPECT_THAT(meta->body, HasSubstr(R"({"name":"cat_features","datatype":"BYTES","shape":[-1,26]})"));
  EXPECT_THAT(meta->body, HasSubstr(absl::StrCat(R"("parameters":{"table_rows":[)",
                                                 absl::StrJoin(Reference()->manifest().table_rows, ","), "]}")));

  std::unique_ptr<serve::Predictor> p = Reference();
  const Samples s = MakeSamples(*p, 37, 5);
  httplib::Result res = c.Post(kInfer, s.Preprocessed("req-7"), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->get_header_value("Content-Type"), "application/json");
  EXPECT_THAT(res->body, HasSubstr(R"("model_name":"dlrm","model_version":"3","id":"req-7")"));
  EXPECT_THAT(res->body, HasSubstr(R"("name":"probabilities","datatype":"FP32","shape":[37])"));
  EXPECT_EQ(Bits(Probabilities(res->body)), Bits(Expected(*p, s)));
  // The version in the path: the one served, or 404.
  EXPECT_EQ(c.Post("/v2/models/dlrm/versions/3/infer", s.Preprocessed(), "application/json")->status, 200);
  httplib::Result other = c.Post("/v2/models/dlrm/versions/9/infer", s.Preprocessed(), "application/json");
  EXPECT_EQ(other->status, 404);
  EXPECT_THAT(other->body, HasSubstr("model 'dlrm' has no version '9': it serves version 3"));
  EXPECT_TRUE(r->Stop().ok());
}

TEST_F(ServerTest, ACheckpointThatCannotBeOpenedEndsRun) {
  ServerOptions o = Options();
  o.checkpoint = *dir_ + "/no-such-checkpoint";
  absl::StatusOr<std::unique_ptr<Server>> s = Server::Create(o);
  ASSERT_TRUE(s.ok()) << s.status();  // the port is bound; the model is opened by Run
  const absl::Status run = (*s)->Run();
  EXPECT_TRUE(absl::IsNotFound(run)) << run;
  EXPECT_EQ((*s)->model_version(), -1);
}

TEST_F(ServerTest, RawCriteoFeaturesScoreAsPredictCriteo) {
  std::unique_ptr<Running> r = Start(Options());
  ASSERT_NE(r, nullptr);
  std::unique_ptr<serve::Predictor> p = Reference();
  const Samples s = MakeSamples(*p, 20, 9);
  std::vector<float> expected(s.n);
  ASSERT_TRUE(p->PredictCriteo(s.rows, expected).ok());
  httplib::Result res = r->Client().Post(kInfer, s.Raw(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(Bits(Probabilities(res->body)), Bits(expected));
}

TEST_F(ServerTest, MultiHotSamplesScoreAsTheirBags) {
  std::unique_ptr<Running> r = Start(Options());
  ASSERT_NE(r, nullptr);
  std::unique_ptr<serve::Predictor> p = Reference();
  // 3 samples; sample i has (i + t) % 3 ids in table t.
  constexpr int64_t n = 3;
  std::vector<std::vector<int32_t>> offsets(kTables, {0}), indices(kTables);
  std::vector<int64_t> lengths;
  std::vector<int32_t> ids;
  std::vector<float> dense;
  for (int64_t i = 0; i < n; ++i) {
    for (int j = 0; j < kDense; ++j) dense.push_back(0.25f * static_cast<float>(i + j));
    for (int t = 0; t < kTables; ++t) {
      const int64_t len = (i + t) % 3;
      lengths.push_back(len);
      for (int64_t k = 0; k < len; ++k) {
        const int32_t row = static_cast<int32_t>((7 * i + 3 * t + k) % p->manifest().table_rows[t]);
        ids.push_back(row);
        indices[t].push_back(row);
      }
      offsets[t].push_back(static_cast<int32_t>(indices[t].size()));
    }
  }
  std::vector<Bags<int32_t>> bags;
  for (int t = 0; t < kTables; ++t) bags.push_back({.offsets = offsets[t], .indices = indices[t]});
  std::vector<float> expected(n);
  ASSERT_TRUE(p->Predict({.size = n, .dense = dense, .bags = bags}, expected).ok());
  const std::string body = absl::StrCat(
      R"({"inputs":[{"name":"dense","datatype":"FP32","shape":[3,13],"data":[)", Floats(dense),
      R"(]},{"name":"sparse_lengths","datatype":"INT64","shape":[3,26],"data":[)", absl::StrJoin(lengths, ","),
      R"(]},{"name":"sparse","datatype":"INT64","shape":[)", ids.size(), R"(],"data":[)", absl::StrJoin(ids, ","),
      "]}]}");
  httplib::Result res = r->Client().Post(kInfer, body, "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(Bits(Probabilities(res->body)), Bits(expected));
}

TEST_F(ServerTest, EveryBadRequestGetsA4xxThatNamesItAndTheServerKeepsServing) {
  ServerOptions o = Options();
  o.max_body_bytes = 64 << 10;
  o.max_request_samples = 100;
  std::unique_ptr<Running> r = Start(o);
  ASSERT_NE(r, nullptr);
  httplib::Client c = r->Client();
  std::unique_ptr<serve::Predictor> p = Reference();
  const Samples s = MakeSamples(*p, 4, 11);
  const std::string good = s.Preprocessed();
  const auto expect = [&](const std::string& path, const std::string& body, int status, const std::string& says) {
    httplib::Result res = c.Post(path, body, "application/json");
    ASSERT_TRUE(res) << says;
    EXPECT_EQ(res->status, status) << res->body;
    EXPECT_EQ(res->get_header_value("Content-Type"), "application/json");
    EXPECT_THAT(res->body, HasSubstr(R"({"error":")"));
    EXPECT_THAT(res->body, HasSubstr(says));
  };
  expect(kInfer, good.substr(0, good.size() / 2), 400, "malformed JSON at byte ");
  expect(kInfer, good.substr(0, good.size() / 2), 400, "unexpected end of input");
  expect(kInfer, std::string("\xff\xfe{", 3), 400, "malformed JSON");
  std::string datatype = good;
  datatype.replace(datatype.find("\"FP32\""), 6, "\"INT64\"");
  expect(kInfer, datatype, 400, "input 'dense': datatype INT64, expected FP32");
  std::string shape = good;
  shape.replace(shape.find("[4,26]"), 6, "[4,25]");
  expect(kInfer, shape, 400, "input 'sparse': shape [4, 25], expected [n, 26]");
  // A row out of range: named by sample and table.
  Samples bad = s;
  bad.indices[5][2] = static_cast<int32_t>(p->manifest().table_rows[5]);
  expect(kInfer, bad.Preprocessed(), 400,
         absl::StrCat("input 'sparse': sample 2, table 5: row ", p->manifest().table_rows[5],
                      " is out of range (the table has ", p->manifest().table_rows[5], " rows)"));
  bad.indices[5][2] = -3;
  expect(kInfer, bad.Preprocessed(), 400, "input 'sparse': sample 2, table 5: row -3 is negative");
  const std::string dense = good.substr(good.find("{\"name\":\"dense\""), good.find(",{\"name\":\"sparse\"") - good.find("{\"name\":\"dense\""));
  expect(kInfer,
         absl::StrCat(R"({"inputs":[)", dense, R"(,{"name":"sparse_lengths","datatype":"INT64","shape":[4,26],"data":[)",
                      absl::StrJoin(std::vector<int>(103, 1), ","), R"(,-1]},{"name":"sparse","datatype":"INT64",)",
                      R"("shape":[102],"data":[)", absl::StrJoin(std::vector<int>(102, 0), ","), "]}]}"),
         400, "input 'sparse_lengths': sample 3, table 25: negative length -1");
  expect(kInfer, absl::StrCat(R"({"inputs":[)", dense, "]}"), 400, "missing input 'sparse'");
  expect("/v2/models/resnet/infer", good, 404, "unknown model 'resnet': this server serves 'dlrm'");
  expect(kInfer, std::string(70 << 10, ' '), 413, "the request body is over the limit of 65536 bytes");
  expect(kInfer, MakeSamples(*p, 101, 3).Preprocessed(), 413, "101 samples, more than a request may hold (100)");
  {  // curl -d's content type: the library's 8 KiB limit for forms, and how to avoid it
    httplib::Result res = c.Post(kInfer, MakeSamples(*p, 60, 3).Preprocessed(), "application/x-www-form-urlencoded");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 413);
    EXPECT_THAT(res->body, HasSubstr("send it with Content-Type: application/json"));
  }
  expect("/v2/nothing", good, 404, "no such endpoint: POST /v2/nothing");
  EXPECT_EQ(c.Get("/v2/models/resnet")->status, 404);

  // Still serving, every answer right.
  httplib::Result res = c.Post(kInfer, good, "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(Bits(Probabilities(res->body)), Bits(Expected(*p, s)));
  EXPECT_EQ(Metric(*r, R"(cemb_serve_errors_total{endpoint="infer",code="400"})"), 9);
  EXPECT_EQ(Metric(*r, R"(cemb_serve_errors_total{endpoint="infer",code="413"})"), 3);
  EXPECT_TRUE(r->Stop().ok());
}

TEST_F(ServerTest, RequestsArrivingTogetherAreScoredAsOneBatchAndABadRowIsRefusedBeforeIt) {
  HeldScoring held;
  ServerOptions o = OneScoringAtATime(held);
  std::unique_ptr<Running> r = Start(o);
  ASSERT_NE(r, nullptr);
  std::unique_ptr<serve::Predictor> p = Reference();
  held.gate.Hold();
  const Samples first = MakeSamples(*p, 2, 100);
  std::thread t0([&] { EXPECT_EQ(r->Client().Post(kInfer, first.Preprocessed(), "application/json")->status, 200); });
  held.gate.WaitEntered(1);  // the only context scores `first`, held
  std::vector<Samples> samples;
  for (int i = 0; i < 4; ++i) samples.push_back(MakeSamples(*p, 3 + i, 200 + i));
  samples[2].indices[7][1] = 1 << 30;  // request 2's sample 1: no such row
  // Refused as it is parsed, while the scoring is still held: it never waits.
  const Answer refused = r->Post(kInfer, samples[2].Preprocessed());
  EXPECT_EQ(refused.status, 400);
  EXPECT_THAT(refused.body, HasSubstr("input 'sparse': sample 1, table 7: row 1073741824 is out of range"));
  std::vector<Answer> answers(4);
  std::vector<std::thread> clients;
  for (int i : {0, 1, 3}) {
    clients.emplace_back([&, i] { answers[i] = r->Post(kInfer, samples[i].Preprocessed()); });
  }
  WaitMetric(*r, "cemb_serve_queued_requests", 3);
  held.gate.Release();
  t0.join();
  for (std::thread& t : clients) t.join();
  // One scoring of the 3 that queued (3 + 4 + 6 samples).
  const std::vector<int64_t> batches = held.batches();
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(batches[0], 2);
  EXPECT_EQ(batches[1], 13);
  for (int i : {0, 1, 3}) {
    EXPECT_EQ(answers[i].status, 200) << answers[i].body;
    EXPECT_EQ(Bits(Probabilities(answers[i].body)), Bits(Expected(*p, samples[i])));
  }
  EXPECT_TRUE(r->Stop().ok());
}

TEST_F(ServerTest, AFullQueueIsAnswered503AtOnce) {
  HeldScoring held;
  ServerOptions o = OneScoringAtATime(held);
  o.max_batch = 1;
  o.max_queue = 2;
  std::unique_ptr<Running> r = Start(o);
  ASSERT_NE(r, nullptr);
  std::unique_ptr<serve::Predictor> p = Reference();
  const std::string body = MakeSamples(*p, 1, 1).Preprocessed();
  held.gate.Hold();
  std::vector<std::thread> clients;
  std::atomic<int> ok{0};
  for (int i = 0; i < 3; ++i) {
    clients.emplace_back([&] { ok += r->Client().Post(kInfer, body, "application/json")->status == 200; });
    if (i == 0) held.gate.WaitEntered(1);  // one scoring held, then two queued
  }
  WaitMetric(*r, "cemb_serve_queued_requests", 2);
  // The queue is full: answered while every scoring is still held.
  httplib::Result refused = r->Client().Post(kInfer, body, "application/json");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 503);
  EXPECT_THAT(refused->body, HasSubstr("overloaded: 2 requests are waiting to be scored"));
  held.gate.Release();
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(ok.load(), 3);
  EXPECT_TRUE(r->Stop().ok());
}

TEST_F(ServerTest, ConnectionsBeyondTheHttpThreadsAreAnswered503ByTheAcceptingThread) {
  HeldScoring held;
  ServerOptions o = Options();
  o.http_threads = 1;
  o.http_queue = 0;
  o.before_score = held.Hook();
  std::unique_ptr<Running> r = Start(o);
  ASSERT_NE(r, nullptr);
  std::unique_ptr<serve::Predictor> p = Reference();
  const std::string body = MakeSamples(*p, 1, 1).Preprocessed();
  held.gate.Hold();
  std::thread busy([&] { EXPECT_EQ(r->Client().Post(kInfer, body, "application/json")->status, 200); });
  held.gate.WaitEntered(1);  // the only HTTP thread waits for its scoring
  httplib::Result shed = r->Client().Post(kInfer, body, "application/json");
  ASSERT_TRUE(shed);
  EXPECT_EQ(shed->status, 503);
  EXPECT_THAT(shed->body, HasSubstr("every HTTP thread is busy"));
  EXPECT_EQ(shed->get_header_value("Connection"), "close");
  // Health and metrics are still answered (by the accepting thread).
  EXPECT_EQ(r->Client().Get("/v2/health/live")->status, 200);
  EXPECT_GE(Metric(*r, "cemb_serve_shed_total"), 1);
  held.gate.Release();
  busy.join();
  EXPECT_TRUE(r->Stop().ok());
}

TEST_F(ServerTest, MetricsCountRequestsBatchesAndTheSsdTable) {
  std::unique_ptr<Running> r = Start(Options());
  ASSERT_NE(r, nullptr);
  std::unique_ptr<serve::Predictor> p = Reference();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(r->Client().Post(kInfer, MakeSamples(*p, 5, i).Preprocessed(), "application/json")->status, 200);
  }
  httplib::Result m = r->Client().Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 200);
  EXPECT_THAT(m->get_header_value("Content-Type"), HasSubstr("text/plain"));
  EXPECT_THAT(m->body, HasSubstr("# TYPE cemb_serve_request_duration_seconds histogram"));
  // A request is counted by the library's logger once its answer is written,
  // so the client may read its answer first: wait for the count, then check it.
  WaitMetric(*r, R"(cemb_serve_requests_total{endpoint="infer",code="200"})", 3);
  EXPECT_EQ(Metric(*r, R"(cemb_serve_requests_total{endpoint="infer",code="200"})"), 3);
  EXPECT_EQ(Metric(*r, "cemb_serve_request_duration_seconds_count"), 3);
  EXPECT_EQ(Metric(*r, "cemb_serve_batch_samples_sum"), 15);
  EXPECT_EQ(Metric(*r, "cemb_serve_model_version"), 3);
  EXPECT_EQ(Metric(*r, "cemb_serve_ready"), 1);
  // Table 2 is served in place from its snapshot: 15 rows looked up.
  EXPECT_EQ(Metric(*r, R"(cemb_serve_ssd_lookups_total{table="2"})"), 15);
  EXPECT_GE(Metric(*r, R"(cemb_serve_ssd_reads_total{table="2"})"), 1);
  EXPECT_GE(Metric(*r, R"(cemb_serve_ssd_hit_rate{table="2"})"), 0);
  EXPECT_TRUE(r->Stop().ok());
}

TEST_F(ServerTest, ShutdownAnswersTheRequestsInFlightThenStopsAccepting) {
  HeldScoring held;
  ServerOptions o = OneScoringAtATime(held);
  o.max_batch = 1;
  std::unique_ptr<Running> r = Start(o);
  ASSERT_NE(r, nullptr);
  std::unique_ptr<serve::Predictor> p = Reference();
  const Samples s = MakeSamples(*p, 1, 4);
  held.gate.Hold();
  std::vector<Answer> answers(3);
  std::vector<std::thread> clients;
  for (int i = 0; i < 3; ++i) {
    clients.emplace_back([&, i] { answers[i] = r->Post(kInfer, s.Preprocessed()); });
  }
  held.gate.WaitEntered(1);
  WaitMetric(*r, "cemb_serve_queued_requests", 2);  // one scoring, two queued: all three in flight
  r->server->Shutdown();
  // No new connection once shut down; ready says no.
  httplib::Result refused = r->Client().Get("/v2/health/live");
  EXPECT_FALSE(refused);
  held.gate.Release();
  for (std::thread& t : clients) t.join();
  for (const Answer& a : answers) {
    EXPECT_EQ(a.status, 200);
    EXPECT_EQ(a.connection, "close");
    EXPECT_EQ(Bits(Probabilities(a.body)), Bits(Expected(*p, s)));
  }
  r->thread.join();
  EXPECT_TRUE(r->result.ok()) << r->result;
}

TEST_F(ServerTest, ReloadUnderLoadFailsNoRequest) {
  const std::string dir = TempDir();
  Train(dir, 2, false);
  ServerOptions o = Options(dir);
  o.reload_poll_s = 0.02;
  std::unique_ptr<Running> r = Start(o);
  ASSERT_NE(r, nullptr);
  std::unique_ptr<serve::Predictor> p = Reference(dir);
  const Samples s = MakeSamples(*p, 8, 6);
  const std::string body = s.Preprocessed();
  std::atomic<bool> stop{false};
  std::atomic<int> answered{0}, failed{0};
  std::mutex mu;
  std::set<std::string> versions;
  std::vector<std::thread> clients;
  for (int i = 0; i < 3; ++i) {
    clients.emplace_back([&] {
      httplib::Client c = r->Client();
      c.set_keep_alive(true);
      // Bounded: until told to stop, at most 5000 requests.
      for (int k = 0; k < 5000 && !stop.load(); ++k) {
        httplib::Result res = c.Post(kInfer, body, "application/json");
        if (!res || res->status != 200) {
          ++failed;
          continue;
        }
        ++answered;
        const size_t at = res->body.find("\"model_version\":\"");
        std::lock_guard<std::mutex> lock(mu);
        versions.insert(res->body.substr(at + 17, res->body.find('"', at + 17) - at - 17));
      }
    });
  }
  while (answered.load() < 20) std::this_thread::sleep_for(1ms);
  Train(dir, 4, true);  // the trainer writes step 4 and moves LATEST
  while (r->server->model_version() != 4) std::this_thread::sleep_for(5ms);
  const int before = answered.load();
  while (answered.load() < before + 20) std::this_thread::sleep_for(1ms);
  stop = true;
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(versions, (std::set<std::string>{"2", "4"}));
  EXPECT_EQ(Metric(*r, "cemb_serve_reloads_total"), 1);
  EXPECT_TRUE(r->Stop().ok());
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace cemb::server
