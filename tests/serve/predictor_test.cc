#include "serve/predictor.h"

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "checkpoint/checkpoint.h"
#include "dlrm/precision.h"
#include "embedding/row_format.h"
#include "serve/convert.h"
#include "data/criteo.h"
#include "data/dataset.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "train/config.h"
#include "train/trainer.h"

namespace cemb::serve {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr int kTables = 8;
// docs/serving.md: how far a bf16 model's score of a sample may move with
// the size of the batch it is scored in (fp32: not at all).
constexpr double kBf16BatchTolerance = 1e-4;
constexpr int64_t kRows = 2000;

std::string TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base ? base : "/tmp") + "/cemb_predictor_test_XXXXXX";
  EXPECT_NE(::mkdtemp(pattern.data()), nullptr);
  return pattern;
}

// "dot", "concat", "dcn": fp32 MLPs; "dot-bf16": bf16 MLPs.
std::string Yaml(const std::string& dir, const std::string& model) {
  const std::string interaction = model.substr(0, model.find('-'));
  const std::string precision = model.ends_with("-bf16") ? "bf16" : "fp32";
  return absl::StrCat(R"(
data:
  source: synthetic
  samples: 8192
  distribution: zipf
  alpha: 1.1
  validation_fraction: 0.25
  seed: 5
  work_dir: )", dir, R"(/data
model:
  embedding_dim: 16
  bottom_mlp: [512, 256, 64, 16]
  top_mlp: [512, 256, 1]
  interaction: )", interaction, interaction == "dcn" ? "\n  dcn_layers: 2\n  dcn_rank: 8" : "", R"(
  mlp_precision: )", precision, R"(
  tables: {count: 8, rows: 2000}
  storage: {kind: dram, slow_tier: )", dir, R"(}
  table_storage:
    "1": {kind: dynamic, cache_lower: 0.1, cache_slack: 0.02}
    "2": {kind: ssd}
  dram_budget: 16MiB
optimizer:
  learning_rate: 0.1
train:
  batch_size: 512
  steps: 6
  threads: 2
  seed: 3
  progress: false
  checkpoint_dir: )", dir, R"(/ck
)");
}

// A batch of n samples: dense features and one row per table, from `seed`.
struct Samples {
  int64_t n = 0;
  std::vector<float> dense;
  std::vector<std::vector<int32_t>> indices, offsets;
  std::vector<Bags<int32_t>> bags;

  Samples(int64_t count, uint64_t seed) : n(count), indices(kTables), offsets(kTables) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> x(0.f, 5.f);
    std::uniform_int_distribution<int32_t> row(0, kRows - 1);
    for (int64_t i = 0; i < n * 13; ++i) dense.push_back(x(rng));
    for (int t = 0; t < kTables; ++t) {
      for (int64_t i = 0; i <= n; ++i) offsets[t].push_back(static_cast<int32_t>(i));
      for (int64_t i = 0; i < n; ++i) indices[t].push_back(row(rng));
    }
    for (int t = 0; t < kTables; ++t) bags.push_back({.offsets = offsets[t], .indices = indices[t]});
  }
  dlrm::BatchView view() const { return {.size = n, .dense = dense, .bags = bags}; }
  // Samples [s, s + m) as a batch of their own.
  Samples Slice(int64_t s, int64_t m) const {
    Samples out(0, 0);
    out.n = m;
    out.dense.assign(dense.begin() + s * 13, dense.begin() + (s + m) * 13);
    out.bags.clear();
    for (int t = 0; t < kTables; ++t) {
      out.indices[t].assign(indices[t].begin() + s, indices[t].begin() + s + m);
      out.offsets[t].clear();
      for (int64_t i = 0; i <= m; ++i) out.offsets[t].push_back(static_cast<int32_t>(i));
    }
    for (int t = 0; t < kTables; ++t) out.bags.push_back({.offsets = out.offsets[t], .indices = out.indices[t]});
    return out;
  }
};

std::vector<uint32_t> Bits(const std::vector<float>& v) {
  std::vector<uint32_t> b;
  for (float f : v) b.push_back(std::bit_cast<uint32_t>(f));
  return b;
}

// One trained checkpoint per model, shared by the tests: table 1 trained
// behind a dynamic cache, table 2 on the ssd tier (its checkpoint file is an
// ssd snapshot), the others in DRAM.
class PredictorTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam().ends_with("-bf16") && dlrm::DetectMatmulCpu().bf16_matmul.empty()) {
      GTEST_SKIP() << "oneDNN has no bf16 matmul on this CPU";
    }
  }
  static void SetUpTestSuite() { dir_ = new std::string(TempDir()); }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(*dir_, ec);
    delete dir_;
  }

  // The checkpoint directory of GetParam()'s model, trained on first use.
  std::string Checkpoint() {
    const std::string dir = absl::StrCat(*dir_, "/", GetParam());
    if (fs::exists(dir + "/ck/LATEST")) return dir + "/ck";
    fs::create_directories(dir);
    absl::StatusOr<train::TrainConfig> c = train::TrainConfig::Parse(Yaml(dir, GetParam()), "test.yaml");
    EXPECT_TRUE(c.ok()) << c.status();
    FILE* quiet = std::fopen("/dev/null", "w");
    absl::StatusOr<std::unique_ptr<train::Trainer>> t = train::Trainer::Create(*c, {.out = quiet});
    EXPECT_TRUE(t.ok()) << t.status();
    absl::StatusOr<train::TrainSummary> s = (*t)->Run();
    EXPECT_TRUE(s.ok()) << s.status();
    std::fclose(quiet);
    return dir + "/ck";
  }

  // What dlrm-train's evaluation computes: the model the trainer builds
  // from the config (batch 512, 2 threads), loaded from the checkpoint,
  // Dlrm::Predict over `samples`.
  std::vector<float> TrainerPredicts(const Samples& samples) {
    Checkpoint();
    const std::string dir = absl::StrCat(*dir_, "/", GetParam());
    absl::StatusOr<train::TrainConfig> c = train::TrainConfig::Parse(Yaml(dir, GetParam()), "test.yaml");
    EXPECT_TRUE(c.ok()) << c.status();
    const std::vector<uint64_t> sizes(kTables, kRows);
    absl::StatusOr<dlrm::DlrmOptions> o = c->ToDlrmOptions(sizes);
    EXPECT_TRUE(o.ok()) << o.status();
    o->extra_batch_sizes = {samples.n};
    absl::StatusOr<std::unique_ptr<dlrm::Dlrm>> model = dlrm::Dlrm::Create(*o);
    EXPECT_TRUE(model.ok()) << model.status();
    absl::StatusOr<std::string> path = ResolveCheckpoint(dir + "/ck");
    EXPECT_TRUE(path.ok());
    EXPECT_TRUE((*model)->Load(*path + "/model").ok());
    std::vector<float> p(samples.n);
    absl::Status s = (*model)->Predict(samples.view(), p, nullptr);
    EXPECT_TRUE(s.ok()) << s;
    return p;
  }

  std::unique_ptr<Predictor> Open(PredictorOptions options = {}) {
    absl::StatusOr<std::unique_ptr<Predictor>> p = Predictor::Open(Checkpoint(), options);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? *std::move(p) : nullptr;
  }

  std::vector<float> Predict(const Predictor& p, const Samples& s) {
    std::vector<float> out(s.n, -1.f);
    absl::Status st = p.Predict(s.view(), out);
    EXPECT_TRUE(st.ok()) << st;
    return out;
  }

  // Six threads score 20 requests of 5 samples each at once; every score
  // equals its request's scored alone, one request at a time.
  void ExpectManyThreadsScoreAsOneAtATime(const Predictor& p, uint64_t seed) {
    constexpr int kThreads = 6, kRequests = 20;
    const Samples samples(kThreads * kRequests * 5, seed);
    std::vector<float> expected;
    for (int64_t s = 0; s < samples.n; s += 5) {
      const std::vector<float> one = Predict(p, samples.Slice(s, 5));
      expected.insert(expected.end(), one.begin(), one.end());
    }
    std::vector<float> got(samples.n, -1.f);
    std::vector<std::thread> threads;
    for (int w = 0; w < kThreads; ++w) {
      threads.emplace_back([&, w] {
        for (int r = 0; r < kRequests; ++r) {
          const int64_t s = (w * kRequests + r) * 5;
          std::vector<float> out(5);
          if (p.Predict(samples.Slice(s, 5).view(), out).ok()) std::copy(out.begin(), out.end(), got.begin() + s);
        }
      });
    }
    for (std::thread& t : threads) t.join();
    EXPECT_EQ(Bits(got), Bits(expected));
  }

  static std::string* dir_;
};
std::string* PredictorTest::dir_ = nullptr;

TEST_P(PredictorTest, ScoresEqualTheTrainersEvaluation) {
  absl::StatusOr<std::string> step = ResolveCheckpoint(Checkpoint());
  ASSERT_TRUE(step.ok());
  EXPECT_TRUE(fs::exists(*step + "/model/emb_l.2.ssd"));  // the premise: an ssd table's snapshot is served
  const Samples samples(512, 11);
  const std::vector<float> expected = TrainerPredicts(samples);
  for (auto [contexts, threads] : {std::pair{2, 1}, std::pair{1, 2}}) {
    SCOPED_TRACE(absl::StrCat(contexts, " contexts of ", threads, " threads"));
    std::unique_ptr<Predictor> p = Open({.contexts = contexts, .threads_per_context = threads});
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(p->manifest().interaction, GetParam().substr(0, GetParam().find('-')));
    EXPECT_EQ(p->precision(), GetParam().ends_with("-bf16") ? dlrm::Precision::kBf16 : dlrm::Precision::kFp32);
    EXPECT_EQ(Bits(Predict(*p, samples)), Bits(expected));
  }
}

TEST_P(PredictorTest, ASamplesScoreDoesNotDependOnItsBatch) {
  std::unique_ptr<Predictor> p = Open({.max_batch = 64});
  ASSERT_NE(p, nullptr);
  const Samples samples(200, 12);
  const std::vector<float> whole = Predict(*p, samples);  // pieces of 64, 64, 64 and 8
  std::vector<float> alone, in_odd_batches;
  for (int64_t i = 0; i < samples.n; ++i) alone.push_back(Predict(*p, samples.Slice(i, 1))[0]);
  for (int64_t s = 0; s < samples.n; s += 37) {  // 37 samples padded to 64, the last 15 to 16
    const std::vector<float> part = Predict(*p, samples.Slice(s, std::min<int64_t>(37, samples.n - s)));
    in_odd_batches.insert(in_odd_batches.end(), part.begin(), part.end());
  }
  if (!GetParam().ends_with("-bf16")) {
    EXPECT_EQ(Bits(alone), Bits(whole));
    EXPECT_EQ(Bits(in_odd_batches), Bits(whole));
    return;
  }
  // bf16 with AMX: oneDNN's matmul sums a row's products in an order that
  // depends on the batch's size, and a sum rounded to bf16 between layers
  // can then round the other way: the tolerance docs/serving.md states.
  // Its AVX512-BF16 kernels (no AMX: AMD Zen 5) kept the order; where it
  // emulates bf16 (plain AVX-512) only the tolerance is known.
  double worst = 0;
  for (int64_t i = 0; i < samples.n; ++i) {
    worst = std::max({worst, std::abs(double{alone[i]} - whole[i]), std::abs(double{in_odd_batches[i]} - whole[i])});
  }
  std::printf("bf16: largest difference of a score between batch sizes: %.3g\n", worst);
  EXPECT_LE(worst, kBf16BatchTolerance);
  if (dlrm::DetectMatmulCpu().amx_bf16) {
    EXPECT_NE(Bits(alone), Bits(whole));  // the premise: the sums did differ
  } else if (dlrm::DetectMatmulCpu().avx512_bf16) {
    EXPECT_EQ(Bits(alone), Bits(whole));
    EXPECT_EQ(Bits(in_odd_batches), Bits(whole));
  }
}

// A trained table behind a dynamic cache keeps admitting rows while it
// serves: CLOCK evicts beside the requests (a cache that only flushed
// between training steps would stop admitting once full).
TEST_P(PredictorTest, ScoresAreTheSameFromEveryStorageKind) {
  const Samples samples(300, 13);
  std::unique_ptr<Predictor> dram = Open();
  ASSERT_NE(dram, nullptr);
  const std::vector<float> expected = Predict(*dram, samples);
  const std::string dir = absl::StrCat(*dir_, "/", GetParam());
  std::vector<std::pair<std::string, StorageConfig>> kinds = {
      {"simple", {.kind = StorageKind::kSimple, .slow_tier = TierOptions::Pmem(dir)}},
      {"dynamic, 5%", {.kind = StorageKind::kDynamic, .slow_tier = TierOptions::Pmem(dir),
                       .cache = {.lower = CacheSize::Fraction(0.05), .slack = CacheSize::Fraction(0.01)}}},
      {"static, 50%", {.kind = StorageKind::kStatic, .slow_tier = TierOptions::Pmem(dir),
                       .cache = {.lower = CacheSize::Fraction(0.5), .slack = CacheSize::Fraction(0.01)}}}};
  StorageConfig ssd{.kind = StorageKind::kSsd};
  ssd.ssd.capacity_bytes = 4 << 20;
  ssd.ssd.file.directory = dir;
  kinds.push_back({"ssd, 4 MiB", ssd});
  for (const auto& [name, storage] : kinds) {
    SCOPED_TRACE(name);
    std::unique_ptr<Predictor> p = Open({.storage = storage});
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(Bits(Predict(*p, samples)), Bits(expected));
    const bool cached = storage.kind == StorageKind::kStatic || storage.kind == StorageKind::kDynamic;
    EXPECT_EQ(p->cached_tables().empty(), !cached);
    if (storage.kind != StorageKind::kDynamic) continue;
    p->EvictCachedRows();  // the round its evictor thread may not have run yet
    for (const CachedTableInfo& c : p->cached_tables()) {
      SCOPED_TRACE(c.table);
      EXPECT_GT(c.stats.cold.rows_evicted, 0u);
      EXPECT_EQ(c.stats.flushes(), 0u);
    }
    const uint64_t admitted = p->cached_tables().at(0).stats.migrations();
    EXPECT_EQ(Bits(Predict(*p, samples)), Bits(expected));  // and again, through the slots freed
    EXPECT_GT(p->cached_tables().at(0).stats.migrations(), admitted) << "the full cache admitted rows again";
  }
}

// Many request threads at once, each on its own samples, against the same
// samples scored one request at a time (run it under TSan: no lock is held
// while scoring, each context is one thread's at a time). Table 2 is served
// in place with a cache smaller than its rows: reads and evictions run
// while other requests hit.
TEST_P(PredictorTest, ManyThreadsScoreAtOnce) {
  std::unique_ptr<Predictor> p =
      Open({.ssd_cache_bytes = 16 << 10, .max_batch = 32, .contexts = 3, .threads_per_context = 1});
  ASSERT_NE(p, nullptr);
  ExpectManyThreadsScoreAsOneAtATime(*p, 14);
  EXPECT_GT(p->snapshot_tables().at(0).stats.evictions, 0);
}

TEST_P(PredictorTest, ABadRowIsNamedAndNothingIsScored) {
  std::unique_ptr<Predictor> p = Open();
  ASSERT_NE(p, nullptr);
  Samples samples(10, 15);
  samples.indices[3][7] = kRows;
  std::vector<float> out(10, -1.f);
  absl::Status s = p->Predict(samples.view(), out);
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << s;
  EXPECT_THAT(s.message(), HasSubstr("table emb3, bag 7, index 0: "));
  EXPECT_THAT(s.message(), HasSubstr("2000"));
  for (float v : out) EXPECT_EQ(v, -1.f);
  std::vector<float> wrong(3);
  EXPECT_TRUE(absl::IsInvalidArgument(p->Predict(samples.view(), wrong)));
  // Synthetic data: raw Criteo features have no preprocessing to go through.
  std::vector<data::CriteoRow> rows(2);
  EXPECT_TRUE(absl::IsFailedPrecondition(p->PredictCriteo(rows, out)));
  EXPECT_TRUE(absl::IsFailedPrecondition(p->TakesRawCriteo()));
}

// Table 2 trained on the ssd tier: its snapshot is served in place, and
// scores exactly as the same table loaded into DRAM, with a cache large
// enough for every row or small enough to evict.
TEST_P(PredictorTest, AnSsdTableIsServedInPlaceFromItsSnapshot) {
  const Samples samples(1500, 16);  // ~1100 distinct rows of table 2: more than 64 KiB holds
  std::unique_ptr<Predictor> loaded = Open({.table_storage = {{2, StorageConfig{.kind = StorageKind::kDram}}}});
  ASSERT_NE(loaded, nullptr);
  EXPECT_TRUE(loaded->snapshot_tables().empty());
  const std::vector<float> expected = Predict(*loaded, samples);
  for (int64_t cache : {int64_t{1} << 20, int64_t{64} << 10}) {
    SCOPED_TRACE(cache);
    std::unique_ptr<Predictor> p = Open({.ssd_cache_bytes = cache});
    ASSERT_NE(p, nullptr);
    std::vector<SnapshotTableInfo> tables = p->snapshot_tables();
    ASSERT_EQ(tables.size(), 1u);
    EXPECT_EQ(tables[0].table, 2);
    EXPECT_TRUE(tables[0].path.ends_with("/model/emb_l.2.ssd")) << tables[0].path;
    EXPECT_EQ(Bits(Predict(*p, samples)), Bits(expected));
    EXPECT_EQ(Bits(Predict(*p, samples)), Bits(expected));  // again, from the cache
    const SnapshotStats stats = p->snapshot_tables()[0].stats;
    EXPECT_GT(stats.rows_read, 0);
    if (cache < (int64_t{128} << 10)) {
      EXPECT_GT(stats.evictions, 0);
    }
  }
}

// The bytes this process has passed to write(2) and its kin (/proc/self/io).
int64_t BytesWritten() {
  std::ifstream io("/proc/self/io");
  std::string key;
  int64_t value = 0;
  while (io >> key >> value) {
    if (key == "wchar:") return value;
  }
  ADD_FAILURE() << "no wchar in /proc/self/io";
  return -1;
}

// Sends this process's stderr into a pipe for its lifetime and counts the
// bytes, so that a warning (a file system that refuses O_DIRECT or io_uring,
// as in a container) is told apart from a write to a file. The text is kept
// and printed once the tap is closed.
class StderrTap {
 public:
  StderrTap() {
    fflush(stderr);
    if (pipe(fds_) != 0) ADD_FAILURE() << "pipe failed";
    saved_ = dup(STDERR_FILENO);
    dup2(fds_[1], STDERR_FILENO);
    reader_ = std::thread([this] {
      char buf[4096];
      for (ssize_t n; (n = read(fds_[0], buf, sizeof buf)) > 0;) text_.append(buf, static_cast<size_t>(n));
    });
  }
  // The bytes written to stderr so far; closes the tap.
  int64_t Close() {
    if (saved_ >= 0) {
      fflush(stderr);
      dup2(saved_, STDERR_FILENO);
      ::close(saved_);
      ::close(fds_[1]);
      reader_.join();
      ::close(fds_[0]);
      saved_ = -1;
    }
    return static_cast<int64_t>(text_.size());
  }
  ~StderrTap() {
    Close();
    std::fputs(text_.c_str(), stderr);
  }

 private:
  int fds_[2] = {-1, -1};
  int saved_ = -1;
  std::thread reader_;
  std::string text_;
};

// Every file under `dir` with its size and modification time.
std::map<std::string, std::pair<uintmax_t, fs::file_time_type>> Listing(const std::string& dir) {
  std::map<std::string, std::pair<uintmax_t, fs::file_time_type>> files;
  for (const fs::directory_entry& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) files[e.path().string()] = {e.file_size(), e.last_write_time()};
  }
  return files;
}

TEST_P(PredictorTest, ServingInPlaceWritesNothingAndCreatesNoFile) {
  const std::string dir = absl::StrCat(*dir_, "/", GetParam());
  Checkpoint();
  const auto before = Listing(*dir_);
  const Samples samples(200, 17);
  StderrTap warnings;
  const int64_t written = BytesWritten();
  {
    std::unique_ptr<Predictor> p = Open({.ssd_cache_bytes = 64 << 10});
    ASSERT_NE(p, nullptr);
    for (int i = 0; i < 3; ++i) Predict(*p, samples);
    for (int i = 0; i < 500 && absl::IsUnavailable(p->verification()); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_TRUE(p->verification().ok()) << p->verification();
  }
  const int64_t all = BytesWritten() - written;  // before the tap's own write
  const int64_t warned = warnings.Close();
#ifndef __SANITIZE_ADDRESS__
  EXPECT_EQ(all - warned, 0) << "bytes written other than warnings to stderr";
#else
  // The sanitizers' runtime writes too: UBSan's vptr check probes whether a
  // vtable is readable by write(2)-ing 16 bytes of it into a pipe
  // (IsAccessibleMemoryRange). The byte count is checked in the Release
  // build; here the files alone.
  (void)all;
  (void)warned;
#endif
  EXPECT_EQ(Listing(*dir_), before);
}

// A request waiting on the drive holds a context but no core: by default a
// predictor serving tables in place has more contexts than hardware
// threads, as many as every table's share of the cache can pin.
TEST_P(PredictorTest, TablesServedInPlaceGetMoreContextsThanCores) {
  const int hardware = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::unique_ptr<Predictor> roomy = Open();
  ASSERT_NE(roomy, nullptr);
  ASSERT_FALSE(roomy->snapshot_tables().empty());
  EXPECT_EQ(roomy->contexts(), PredictorOptions::kSsdContextsPerThread * hardware);

  // A share that pins two requests of 32 samples per hardware thread.
  std::unique_ptr<Predictor> probe = Open({.ssd_cache_bytes = 64 << 10, .max_batch = 1});
  ASSERT_NE(probe, nullptr);
  const double rows_per_byte = static_cast<double>(probe->snapshot_tables()[0].capacity_rows) / (64 << 10);
  const auto two = static_cast<int64_t>(std::ceil(2 * hardware * 32 / rows_per_byte));
  std::unique_ptr<Predictor> tight = Open({.ssd_cache_bytes = two, .max_batch = 32});
  ASSERT_NE(tight, nullptr);
  EXPECT_GE(tight->contexts(), hardware);
  EXPECT_LT(tight->contexts(), PredictorOptions::kSsdContextsPerThread * hardware);
  for (const SnapshotTableInfo& info : tight->snapshot_tables()) {
    EXPECT_GE(info.capacity_rows, tight->contexts() * 32) << "emb" << info.table;
    EXPECT_LT(info.capacity_rows, PredictorOptions::kSsdContextsPerThread * hardware * 32) << "emb" << info.table;
  }

  std::unique_ptr<Predictor> dram = Open({.serve_in_place = false});
  ASSERT_NE(dram, nullptr);
  EXPECT_TRUE(dram->snapshot_tables().empty());
  EXPECT_EQ(dram->contexts(), hardware);
}

// A copy of GetParam()'s checkpoint directory (its step-N directories and LATEST).
std::string CopyCheckpoint(const std::string& from, const std::string& name) {
  const std::string to = absl::StrCat(fs::path(from).parent_path().string(), "/", name);
  fs::remove_all(to);
  fs::copy(from, to, fs::copy_options::recursive);
  return to;
}

TEST_P(PredictorTest, AFileServedInPlaceStaysOpenWhenItsCheckpointIsDeleted) {
  const Samples samples(100, 18);
  std::unique_ptr<Predictor> original = Open();
  ASSERT_NE(original, nullptr);
  const std::vector<float> expected = Predict(*original, samples);
  const std::string copy = CopyCheckpoint(Checkpoint(), "deleted");
  absl::StatusOr<std::unique_ptr<Predictor>> p = Predictor::Open(copy, {.ssd_cache_bytes = 64 << 10});
  ASSERT_TRUE(p.ok()) << p.status();
  fs::remove_all(copy);  // as the trainer deletes old checkpoints
  std::vector<float> got(samples.n);
  ASSERT_TRUE((*p)->Predict(samples.view(), got).ok());
  EXPECT_EQ(Bits(got), Bits(expected));
}

// A snapshot corrupt after its header: Open returns at once, the check in
// the background finds it, and from then on every request gets its DataLoss.
TEST_P(PredictorTest, ACorruptSnapshotIsFoundInTheBackgroundAndRefusesRequests) {
  const std::string copy = CopyCheckpoint(Checkpoint(), "corrupt");
  absl::StatusOr<std::string> step = ResolveCheckpoint(copy);
  ASSERT_TRUE(step.ok());
  const std::string file = *step + "/model/emb_l.2.ssd";
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(file) - 100));
    f.put('\x5a').put('\xa5');
  }
  absl::StatusOr<std::unique_ptr<Predictor>> p = Predictor::Open(copy, {});
  ASSERT_TRUE(p.ok()) << p.status();
  for (int i = 0; i < 500 && absl::IsUnavailable((*p)->verification()); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const absl::Status v = (*p)->verification();
  EXPECT_TRUE(absl::IsDataLoss(v)) << v;
  EXPECT_THAT(v.message(), HasSubstr("emb_l.2.ssd"));
  const Samples samples(10, 19);
  std::vector<float> out(10, -1.f);
  EXPECT_TRUE(absl::IsDataLoss((*p)->Predict(samples.view(), out)));
  for (float x : out) EXPECT_EQ(x, -1.f);
  fs::remove_all(copy);
}

// A read that fails (the file cut short under the predictor) gives the
// request a DataLoss naming the table, the file and the offset, never a
// score; the next request still fails the same way, not with NaNs.
TEST_P(PredictorTest, AFailedReadNamesTheTableFileAndOffset) {
  const std::string copy = CopyCheckpoint(Checkpoint(), "truncated");
  absl::StatusOr<std::string> step = ResolveCheckpoint(copy);
  ASSERT_TRUE(step.ok());
  absl::StatusOr<std::unique_ptr<Predictor>> p =
      Predictor::Open(copy, {.ssd_cache_bytes = 64 << 10, .verify_checksums = false});
  ASSERT_TRUE(p.ok()) << p.status();
  fs::resize_file(*step + "/model/emb_l.2.ssd", 4096);
  const Samples samples(50, 20);
  for (int i = 0; i < 2; ++i) {
    std::vector<float> out(samples.n, -1.f);
    const absl::Status s = (*p)->Predict(samples.view(), out);
    EXPECT_TRUE(absl::IsDataLoss(s)) << s;
    EXPECT_THAT(s.message(), HasSubstr("emb2"));
    EXPECT_THAT(s.message(), HasSubstr("emb_l.2.ssd"));
    EXPECT_THAT(s.message(), HasSubstr("offset"));
    for (float x : out) EXPECT_EQ(x, -1.f);
  }
  fs::remove_all(copy);
}

// A model's rows converted for serving (serve/convert.h). The rows do not
// depend on the dense part: one model (dot, fp32 MLPs) is enough.
class ConvertedTest : public PredictorTest {};

// The rows read back through the predictor of the converted checkpoint:
// each is the format's encoding of the trained row, decoded
// (embedding/row_format.h). Table 2 trained on ssd: served in place; the
// others read into DRAM.
TEST_P(ConvertedTest, ConvertedRowsAreTheTrainedRowsInTheirFormat) {
  std::unique_ptr<Predictor> trained = Open();
  ASSERT_NE(trained, nullptr);
  for (RowFormat format : {RowFormat::kFp32, RowFormat::kBf16, RowFormat::kFp16, RowFormat::kInt8}) {
    SCOPED_TRACE(RowFormatName(format));
    const std::string out = absl::StrCat(*dir_, "/", GetParam(), "-", RowFormatName(format));
    absl::StatusOr<std::string> path = ConvertCheckpoint(Checkpoint(), out, {.format = format});
    ASSERT_TRUE(path.ok()) << path.status();
    absl::StatusOr<ServingManifest> m = ReadServingManifest(*path);
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(m->table_dtype, RowFormatName(format));
    EXPECT_EQ(m->table_rows_format, "converted");
    absl::StatusOr<std::unique_ptr<Predictor>> converted = Predictor::Open(out, {.ssd_cache_bytes = 64 << 10});
    ASSERT_TRUE(converted.ok()) << converted.status();
    ASSERT_EQ((*converted)->snapshot_tables().size(), 1u);
    EXPECT_EQ((*converted)->snapshot_tables()[0].table, 2);
    const int64_t dim = 16;
    std::vector<float> want(kRows * dim), got(kRows * dim), row(dim);
    std::vector<std::byte> encoded(static_cast<size_t>(RowFormatBytes(format, dim)));
    for (int t = 0; t < kTables; ++t) {
      ASSERT_TRUE(trained->ReadRows(t, 0, want).ok());
      ASSERT_TRUE((*converted)->ReadRows(t, 0, got).ok());
      for (int64_t r = 0; r < kRows; ++r) {
        EncodeRow(format, std::span<const float>(want.data() + r * dim, dim), encoded.data());
        DecodeRow(format, encoded.data(), row);
        ASSERT_EQ(Bits(row), Bits(std::vector<float>(got.begin() + r * dim, got.begin() + (r + 1) * dim)))
            << "table " << t << " row " << r;
      }
    }
    // fp32 is the trained model itself.
    if (format == RowFormat::kFp32) {
      const Samples samples(300, 21);
      EXPECT_EQ(Bits(Predict(**converted, samples)), Bits(Predict(*trained, samples)));
    }
  }
}

// A converted model scores exactly as the fp32 model of its decoded rows
// (the int8 checkpoint converted again to fp32): the kernels read the
// stored rows as DecodeRow does. And from every place, with the same
// scores: the ssd table in place with a cache that evicts, read into DRAM,
// read whole into a slow tier, or on a slow tier behind a static or a
// dynamic DRAM cache (CLOCK, evicting: 5% of the rows).
TEST_P(ConvertedTest, AConvertedModelScoresAsItsDecodedRows) {
  const Samples samples(1500, 22);
  for (RowFormat format : {RowFormat::kBf16, RowFormat::kFp16, RowFormat::kInt8}) {
    SCOPED_TRACE(RowFormatName(format));
    const std::string out = absl::StrCat(*dir_, "/", GetParam(), "-scores-", RowFormatName(format));
    ASSERT_TRUE(ConvertCheckpoint(Checkpoint(), out, {.format = format}).ok());
    ASSERT_TRUE(ConvertCheckpoint(out, out + "-decoded", {.format = RowFormat::kFp32}).ok());
    std::vector<float> expected;
    // Read whole into a slow tier (CXL or persistent memory: a file here).
    const TierOptions tier = TierOptions::Pmem(absl::StrCat(*dir_, "/", GetParam()));
    const StorageConfig slow{.kind = StorageKind::kSimple, .slow_tier = tier};
    const StorageConfig cached_static{.kind = StorageKind::kStatic, .slow_tier = tier,
                                      .cache = {.lower = CacheSize::Fraction(0.5), .slack = CacheSize::Fraction(0.01)}};
    const StorageConfig cached_dynamic{
        .kind = StorageKind::kDynamic, .slow_tier = tier,
        .cache = {.lower = CacheSize::Fraction(0.05), .slack = CacheSize::Fraction(0.01), .rows_per_page = 8}};
    std::vector<float> first;
    for (const PredictorOptions& options :
         {PredictorOptions{.ssd_cache_bytes = 16 << 10, .max_batch = 64, .contexts = 1},
          PredictorOptions{.ssd_cache_bytes = 1 << 20},
          PredictorOptions{.table_storage = {{2, StorageConfig{.kind = StorageKind::kDram}}}},
          PredictorOptions{.serve_in_place = false},
          PredictorOptions{.table_storage = {{2, slow}, {5, slow}}},
          PredictorOptions{.storage = cached_static, .serve_in_place = false},
          PredictorOptions{.storage = cached_dynamic, .serve_in_place = false}}) {
      absl::StatusOr<std::unique_ptr<Predictor>> decoded = Predictor::Open(out + "-decoded", options);
      ASSERT_TRUE(decoded.ok()) << decoded.status();
      expected = Predict(**decoded, samples);
      if (first.empty()) first = expected;
      EXPECT_EQ(Bits(expected), Bits(first));  // the same scores from every place
      absl::StatusOr<std::unique_ptr<Predictor>> p = Predictor::Open(out, options);
      ASSERT_TRUE(p.ok()) << p.status();
      EXPECT_EQ(Bits(Predict(**p, samples)), Bits(expected));
      if (options.ssd_cache_bytes == (16 << 10)) {
        ASSERT_EQ((*p)->snapshot_tables().size(), 1u);
        EXPECT_GT((*p)->snapshot_tables()[0].stats.evictions, 0);
      }
      const StorageKind kind = options.storage.kind;
      // The scoring filled each cache; a round that its evictor thread has
      // not run yet, however the threads were scheduled, runs here.
      if (kind == StorageKind::kDynamic) (*p)->EvictCachedRows();
      if (kind == StorageKind::kStatic || kind == StorageKind::kDynamic) {
        ASSERT_EQ((*p)->cached_tables().size(), static_cast<size_t>(kTables));
        for (const CachedTableInfo& c : (*p)->cached_tables()) {
          SCOPED_TRACE(c.table);
          EXPECT_GT(c.stats.hits(), 0u);
          EXPECT_LT(c.stats.hits(), c.stats.lookups());  // some rows were read from the slow tier
          if (kind == StorageKind::kStatic) {
            EXPECT_GT(c.stats.cold.rows_filled, 0u);
          } else {
            EXPECT_GT(c.stats.cold.rows_evicted, 0u);
          }
        }
      } else {
        EXPECT_TRUE((*p)->cached_tables().empty());
      }
    }
    // The scores move little from the trained model's.
    std::unique_ptr<Predictor> trained = Open();
    const std::vector<float> fp32 = Predict(*trained, samples);
    double worst = 0;
    for (size_t i = 0; i < fp32.size(); ++i) worst = std::max(worst, std::abs(double{fp32[i]} - expected[i]));
    EXPECT_LT(worst, 0.02);
  }
}

// The training's ssd tier holds trained rows with their log: a converted
// table is refused there, naming the table and its format.
TEST_P(ConvertedTest, AConvertedTableIsNeverStoredOnTheTrainingsSsdTier) {
  const std::string out = absl::StrCat(*dir_, "/", GetParam(), "-kinds");
  ASSERT_TRUE(ConvertCheckpoint(Checkpoint(), out, {.format = RowFormat::kInt8}).ok());
  StorageConfig ssd{.kind = StorageKind::kSsd};
  ssd.ssd.capacity_bytes = 4 << 20;
  absl::StatusOr<std::unique_ptr<Predictor>> p = Predictor::Open(out, {.table_storage = {{3, ssd}}});
  EXPECT_TRUE(absl::IsInvalidArgument(p.status())) << p.status();
  EXPECT_THAT(p.status().message(), HasSubstr("table 3"));
  EXPECT_THAT(p.status().message(), HasSubstr("int8"));
  EXPECT_THAT(p.status().message(), HasSubstr("not stored as ssd"));
}

// Many request threads at once over int8 rows behind a dynamic cache of 5%
// of the rows: CLOCK evicts beside the readers, and every score equals the
// same request's scored alone.
TEST_P(ConvertedTest, ManyThreadsScoreThroughADynamicCacheOfConvertedRows) {
  const std::string out = absl::StrCat(*dir_, "/", GetParam(), "-threads");
  ASSERT_TRUE(ConvertCheckpoint(Checkpoint(), out, {.format = RowFormat::kInt8}).ok());
  const StorageConfig dynamic{
      .kind = StorageKind::kDynamic, .slow_tier = TierOptions::Pmem(absl::StrCat(*dir_, "/", GetParam())),
      .cache = {.lower = CacheSize::Fraction(0.05), .slack = CacheSize::Fraction(0.01), .rows_per_page = 8}};
  absl::StatusOr<std::unique_ptr<Predictor>> p = Predictor::Open(
      out, {.storage = dynamic, .max_batch = 32, .contexts = 3, .threads_per_context = 1, .serve_in_place = false});
  ASSERT_TRUE(p.ok()) << p.status();
  ExpectManyThreadsScoreAsOneAtATime(**p, 23);
  (*p)->EvictCachedRows();  // the round its evictor thread may not have run yet
  for (const CachedTableInfo& c : (*p)->cached_tables()) EXPECT_GT(c.stats.cold.rows_evicted, 0u) << c.table;
}

INSTANTIATE_TEST_SUITE_P(Models, ConvertedTest, ::testing::Values("dot"));
INSTANTIATE_TEST_SUITE_P(Models, PredictorTest, ::testing::Values("dot", "concat", "dcn", "dot-bf16"),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                           std::string name = i.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// Raw Criteo features go through exactly what preprocessing made of the
// same lines for training: scored from the TSV lines, they equal the scores
// of the records the trainer's preprocessing wrote (train.bin, in line
// order), bit for bit.
class RawCriteo : public ::testing::TestWithParam<std::string> {};

TEST_P(RawCriteo, FeaturesGoThroughTheTrainingsPreprocessing) {
  const bool vocabulary = GetParam() == "vocabulary";
  const std::string dir = TempDir();
  std::mt19937_64 rng(21);
  std::string tsv;
  std::vector<std::string> lines;
  for (int i = 0; i < 1400; ++i) {
    std::string line = absl::StrCat(rng() % 2);
    for (int j = 0; j < 13; ++j) {
      const uint64_t r = rng() % 10;
      absl::StrAppend(&line, "\t", r == 0 ? "" : absl::StrCat(static_cast<int64_t>(rng() % 3000) - 3));
    }
    for (int j = 0; j < 26; ++j) {
      // 600 ids a table: many seen twice or more (a vocabulary's rows)
      const uint32_t id = static_cast<uint32_t>((rng() % 600 + 1) * 0x9e3779b1u);
      absl::StrAppend(&line, "\t", rng() % 10 == 0 ? "" : absl::StrCat(absl::Hex(id)));
    }
    lines.push_back(line);
    absl::StrAppend(&tsv, line, "\n");
  }
  ASSERT_TRUE(base::WriteFileAtomically(dir + "/train.txt", tsv).ok());
  absl::StatusOr<train::TrainConfig> c = train::TrainConfig::Parse(
      absl::StrCat("data: {source: tsv, path: ", dir, "/train.txt, format: kaggle, ",
                   vocabulary ? "index_mode: vocabulary, frequency_threshold: 2" : "max_ind_range: 997",
                   ", work_dir: ", dir, "/data}\nmodel: {embedding_dim: 8, bottom_mlp: [16, 8], top_mlp: [16, 1], "
                   "mlp_precision: fp32}\ntrain: {batch_size: 200, steps: 3, threads: 2, progress: false, "
                   "checkpoint_dir: ", dir, "/ck}\n"),
      "criteo.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  FILE* quiet = std::fopen("/dev/null", "w");
  absl::StatusOr<std::unique_ptr<train::Trainer>> trainer = train::Trainer::Create(*c, {.out = quiet});
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  ASSERT_TRUE((*trainer)->Run().ok());
  std::fclose(quiet);

  absl::StatusOr<std::unique_ptr<Predictor>> p = Predictor::Open(dir + "/ck", {});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)->manifest().ids, GetParam());
  EXPECT_TRUE((*p)->TakesRawCriteo().ok()) << (*p)->TakesRawCriteo();
  EXPECT_EQ((*p)->manifest().dense_transform, "log1p");
  if (vocabulary) {
    absl::StatusOr<std::string> step = ResolveCheckpoint(dir + "/ck");
    ASSERT_TRUE(step.ok());
    EXPECT_TRUE(fs::exists(*step + "/vocabulary.bin"));
    EXPECT_LT((*p)->manifest().table_rows[2], 1400u);  // the ids seen twice or more, and row 0
  } else {
    EXPECT_EQ((*p)->manifest().table_rows[2], 997u);  // capped by max_ind_range
    EXPECT_EQ((*p)->manifest().table_rows[8], 3u);    // a Kaggle table smaller than the cap
  }

  // The first n records of train.bin are lines 0 .. n-1.
  std::string train_bin;
  for (const auto& e : fs::recursive_directory_iterator(dir + "/data")) {
    if (e.path().filename() == "train.bin") train_bin = e.path().string();
  }
  ASSERT_FALSE(train_bin.empty());
  absl::StatusOr<std::unique_ptr<data::Dataset>> d = data::Dataset::Open(train_bin);
  ASSERT_TRUE(d.ok()) << d.status();
  constexpr int64_t n = 300;
  std::vector<float> dense;
  std::vector<std::vector<int32_t>> indices(26);
  std::vector<int32_t> offsets;
  for (int64_t i = 0; i <= n; ++i) offsets.push_back(static_cast<int32_t>(i));
  std::vector<data::CriteoRow> rows(n);
  for (int64_t i = 0; i < n; ++i) {
    const float* r = (*d)->record(i);
    dense.insert(dense.end(), r + 1, r + 14);
    for (int t = 0; t < 26; ++t) indices[t].push_back(std::bit_cast<int32_t>(r[14 + t]));
    ASSERT_TRUE(data::ParseCriteoLine(lines[i], rows[i]).ok());
  }
  std::vector<Bags<int32_t>> bags;
  for (int t = 0; t < 26; ++t) bags.push_back({.offsets = offsets, .indices = indices[t]});
  std::vector<float> preprocessed(n), raw(n, -1.f);
  ASSERT_TRUE((*p)->Predict({.size = n, .dense = dense, .bags = bags}, preprocessed).ok());
  ASSERT_TRUE((*p)->PredictCriteo(rows, raw).ok());
  EXPECT_EQ(Bits(raw), Bits(preprocessed));
  if (vocabulary) {  // the frequent ids have rows of their own: not all in row 0
    EXPECT_GT(*std::max_element(indices[0].begin(), indices[0].end()), 0);
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
}

INSTANTIATE_TEST_SUITE_P(IndexModes, RawCriteo, ::testing::Values("modulo", "vocabulary"));

// Where oneDNN has no bf16 matmul (run with ONEDNN_MAX_CPU_ISA=AVX2 on a
// CPU that has one: tests/serve/CMakeLists.txt), a bf16 checkpoint is served
// in fp32 from its fp32 master weights, with a warning. The checkpoint is
// an fp32 one copied with its SERVING saying bf16 (training in bf16 needs
// the matmul this run does not have).
TEST(Predictor, ABf16CheckpointWithoutABf16MatmulIsServedInFp32WithAWarning) {
  if (!dlrm::DetectMatmulCpu().bf16_matmul.empty()) {
    GTEST_SKIP() << "oneDNN has a bf16 matmul here; ctest runs this with ONEDNN_MAX_CPU_ISA=AVX2";
  }
  const std::string dir = TempDir();
  absl::StatusOr<train::TrainConfig> c = train::TrainConfig::Parse(Yaml(dir, "dot"), "test.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  FILE* quiet = std::fopen("/dev/null", "w");
  absl::StatusOr<std::unique_ptr<train::Trainer>> trainer = train::Trainer::Create(*c, {.out = quiet});
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  ASSERT_TRUE((*trainer)->Run().ok());
  std::fclose(quiet);
  absl::StatusOr<std::string> fp32 = ResolveCheckpoint(dir + "/ck");
  ASSERT_TRUE(fp32.ok());
  absl::StatusOr<ServingManifest> m = ReadServingManifest(*fp32);
  ASSERT_TRUE(m.ok());
  m->mlp_precision = "bf16";
  absl::StatusOr<std::string> bf16 = WriteCheckpoint(
      dir + "/bf16", {.step = 6},
      [&](const std::string& tmp) -> absl::Status {
        fs::copy(*fp32 + "/model", tmp + "/model", fs::copy_options::recursive);
        return base::WriteFileAtomically(absl::StrCat(tmp, "/", kServingManifest), SerializeServingManifest(*m));
      },
      1);
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  std::vector<std::string> lines;
  absl::StatusOr<std::unique_ptr<Predictor>> p =
      Predictor::Open(*bf16, {.log = [&](std::string_view l) { lines.emplace_back(l); }});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)->precision(), dlrm::Precision::kFp32);
  EXPECT_THAT((*p)->warning(), HasSubstr("served in fp32"));
  ASSERT_FALSE(lines.empty());
  EXPECT_THAT(lines[0], HasSubstr("warning: "));
  absl::StatusOr<std::unique_ptr<Predictor>> same = Predictor::Open(*fp32, {});
  ASSERT_TRUE(same.ok());
  const Samples samples(50, 16);
  std::vector<float> a(50), b(50);
  ASSERT_TRUE((*p)->Predict(samples.view(), a).ok());
  ASSERT_TRUE((*same)->Predict(samples.view(), b).ok());
  EXPECT_EQ(Bits(a), Bits(b));
  std::error_code ec;
  fs::remove_all(dir, ec);
}

TEST(Predictor, ACheckpointWithoutAManifestSaysToSaveItAgain) {
  const std::string dir = TempDir();
  absl::StatusOr<std::string> written = WriteCheckpoint(
      dir, {.step = 4}, [](const std::string& tmp) { return base::WriteFileAtomically(tmp + "/x", "x"); }, 1);
  ASSERT_TRUE(written.ok()) << written.status();
  absl::StatusOr<std::unique_ptr<Predictor>> p = Predictor::Open(dir, {});
  EXPECT_TRUE(absl::IsFailedPrecondition(p.status())) << p.status();
  EXPECT_THAT(p.status().message(), HasSubstr("re-save it"));
  EXPECT_TRUE(absl::IsNotFound(Predictor::Open(dir + "/none", {}).status()));
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace cemb::serve
