// dlrm-train on several processes, under mpirun -np 2: the same
// global batches give the same model as one process (losses within 1e-5
// relative over the first 20 steps of configs/default.yaml), checkpoints and
// --resume work across ranks and across rank counts, and a rank that fails
// stops every rank with its message. Rank 0 also runs the single-process
// reference (the other rank waits for it).
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "distributed/comm.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ssd/block_io.h"
#include "train/checkpoint.h"
#include "train/config.h"
#include "train/trainer.h"
#include "train/trainer_testing.h"

namespace cemb::train {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::StartsWith;

distributed::Comm World() { return distributed::Comm(MPI_COMM_WORLD); }

class DistributedTrainingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // One directory for both ranks: rank 0 makes it and sends its name.
    const char* base = std::getenv("TMPDIR");
    std::string dir = std::string(base ? base : "/tmp") + "/cemb_distributed_test_XXXXXX";
    if (comm_.rank() == 0 && ::mkdtemp(dir.data()) == nullptr) dir.clear();
    ASSERT_TRUE(comm_.Broadcast(&dir, 0).ok());
    ASSERT_FALSE(dir.empty());
    dir_ = dir;
  }
  void TearDown() override {
    ASSERT_TRUE(comm_.Barrier().ok());
    if (comm_.rank() == 0) {
      std::error_code ec;
      fs::remove_all(dir_, ec);
    }
  }

  // configs/default.yaml with its data in the shared directory.
  absl::StatusOr<TrainConfig> Default(std::vector<std::string> overrides) const {
    overrides.push_back(absl::StrCat("data.work_dir=", dir_, "/data"));
    overrides.push_back("train.progress=false");
    return TrainConfig::Load(std::string(CEMB_SOURCE_DIR) + "/configs/default.yaml", overrides);
  }

  // Trains on every rank (comm) or on this process alone (nullptr).
  // `options.out`: the report (rank 0 prints it); nullptr by default.
  static absl::StatusOr<TrainSummary> Train(const TrainConfig& config, const distributed::Comm* comm, bool resume = false,
                                            TrainerOptions options = {.out = nullptr},
                                            TrainerTesting::WrapSsdIo wrap_ssd_io = nullptr) {
    options.resume = resume;
    options.comm = comm;
    absl::StatusOr<std::unique_ptr<Trainer>> t = TrainerTesting::Create(config, options, std::move(wrap_ssd_io));
    if (!t.ok()) return t.status();
    return (*t)->Run();
  }

  // The single-process run, on rank 0; the other ranks wait.
  absl::StatusOr<TrainSummary> TrainAloneOnRankZero(const TrainConfig& config, bool resume = false) {
    absl::StatusOr<TrainSummary> s = absl::UnknownError("not rank 0");
    if (comm_.rank() == 0) s = Train(config, nullptr, resume);
    EXPECT_TRUE(comm_.Barrier().ok());
    return s;
  }

  static void ExpectClose(const std::vector<double>& got, const std::vector<double>& want, size_t from = 0) {
    ASSERT_EQ(got.size() + from, want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_LE(std::abs(got[i] - want[from + i]), 1e-5 * std::abs(want[from + i]))
          << "step " << from + i << ": " << got[i] << " against " << want[from + i];
    }
  }

  const distributed::Comm comm_ = World();
  std::string dir_;
};

TEST_F(DistributedTrainingTest, RunsOnTwoRanks) { ASSERT_EQ(comm_.size(), 2) << "run under mpirun -np 2"; }

TEST_F(DistributedTrainingTest, SameLossesAsOneProcessOverTwentyStepsOfTheDefaultConfig) {
  // fp32 MLPs: on a machine with AMX `auto` picks bf16, whose rounding of
  // the two ranks' differently ordered sums moves the final AUC by 4e-5
  // (measured); the sharding, not the precision, is under test.
  absl::StatusOr<TrainConfig> c = Default({"train.steps=20", "train.eval_every=10", "model.mlp_precision=fp32"});
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<TrainSummary> alone = TrainAloneOnRankZero(*c);
  absl::StatusOr<TrainSummary> two = Train(*c, &comm_);
  ASSERT_TRUE(two.ok()) << two.status();
  ASSERT_EQ(two->losses.size(), 20u);
  // Every rank reports the same (summed) losses, bit for bit.
  std::vector<float> mine(two->losses.begin(), two->losses.end()), sum = mine;
  ASSERT_TRUE(comm_.AllreduceSum(std::span<float>(sum)).ok());
  for (size_t i = 0; i < mine.size(); ++i) EXPECT_EQ(sum[i], comm_.size() * mine[i]) << "step " << i;
  if (comm_.rank() == 0) {
    ASSERT_TRUE(alone.ok()) << alone.status();
    ExpectClose(two->losses, alone->losses);
    // Evaluation sees every rank's samples: the whole validation split.
    EXPECT_EQ(two->final_metrics.samples, alone->final_metrics.samples);
    EXPECT_NEAR(two->final_metrics.auc, alone->final_metrics.auc, 1e-5);
    EXPECT_NEAR(two->final_metrics.log_loss, alone->final_metrics.log_loss, 1e-5 * alone->final_metrics.log_loss);
    ASSERT_EQ(two->evals.size(), alone->evals.size());
  }
}

// DLRM-DCNv2 with multi-hot bags and Adagrad everywhere: the cross
// network's gradients are summed across the ranks as the MLPs' are, so two
// ranks train as one process. At lr 0.001: at 0.01 Adagrad's first steps
// (each moves every weight by about lr, whatever its gradient's size) grow
// the ranks' other summation order 10x per step from step 6 (measured:
// 1.6e-5, then 1.6e-4 relative; with dense SGD at 0.01 all 8 steps agree).
TEST_F(DistributedTrainingTest, DcnWithAdagradTrainsOnTwoRanksAsOnOne) {
  absl::StatusOr<TrainConfig> c =
      Default({"train.steps=8", "model.mlp_precision=fp32", "model.interaction=dcn", "model.dcn_layers=2",
               "model.dcn_rank=16", "data.hotness=3", "optimizer.dense=adagrad", "optimizer.embedding=adagrad",
               "optimizer.learning_rate=0.001", "data.samples=32768"});
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<TrainSummary> alone = TrainAloneOnRankZero(*c);
  absl::StatusOr<TrainSummary> two = Train(*c, &comm_);
  ASSERT_TRUE(two.ok()) << two.status();
  if (comm_.rank() == 0) {
    ASSERT_TRUE(alone.ok()) << alone.status();
    ExpectClose(two->losses, alone->losses);
  }
}

TEST_F(DistributedTrainingTest, ResumesOnTheSameAndOnAnotherNumberOfRanks) {
  const std::string ck = absl::StrCat("train.checkpoint_dir=", dir_, "/ck");
  absl::StatusOr<TrainConfig> whole = Default({"train.steps=12", "train.eval_every=0"});
  absl::StatusOr<TrainConfig> first = Default({"train.steps=6", "train.eval_every=0", ck});
  absl::StatusOr<TrainConfig> rest = Default({"train.steps=12", "train.eval_every=0", ck});
  ASSERT_TRUE(whole.ok() && first.ok() && rest.ok());
  absl::StatusOr<TrainSummary> w = Train(*whole, &comm_);
  ASSERT_TRUE(w.ok()) << w.status();
  absl::StatusOr<TrainSummary> f = Train(*first, &comm_);
  ASSERT_TRUE(f.ok()) << f.status();

  // One checkpoint directory for both ranks: every table once, the MLPs,
  // and the manifest naming them all.
  const std::string step6 = absl::StrCat(dir_, "/ck/step-000000006");
  EXPECT_EQ(f->last_checkpoint, step6);
  std::ifstream manifest(step6 + "/MANIFEST");
  std::stringstream text;
  text << manifest.rdbuf();
  for (int t = 0; t < 26; ++t) EXPECT_THAT(text.str(), HasSubstr(absl::StrCat(" model/emb_l.", t, ".rows\n")));
  EXPECT_THAT(text.str(), HasSubstr(" model/top_l.0.weight.npy\n"));
  EXPECT_THAT(text.str(), HasSubstr("state ranks 2\n"));

  // Each rank verifies the MLPs and its own tables only: a corrupt table
  // of rank 1's is found by rank 1 (rank 0 never reads it), and the resume
  // stops on both ranks.
  const std::string manifest_text = text.str();
  const size_t owners_at = manifest_text.find("state table_owners ");
  ASSERT_NE(owners_at, std::string::npos);
  const std::vector<std::string> owners = absl::StrSplit(
      manifest_text.substr(owners_at + 19, manifest_text.find('\n', owners_at) - owners_at - 19), ',');
  const auto of_rank_1 = std::find(owners.begin(), owners.end(), "1");
  ASSERT_NE(of_rank_1, owners.end()) << manifest_text.substr(owners_at, 80);
  const std::string victim = absl::StrCat(step6, "/model/emb_l.", of_rank_1 - owners.begin(), ".rows");
  std::string saved;
  if (comm_.rank() == 0) {
    std::ifstream in(victim, std::ios::binary);
    saved.assign(std::istreambuf_iterator<char>(in), {});
    std::string bad = saved;
    bad[bad.size() / 2] ^= 0x10;
    std::ofstream(victim, std::ios::binary | std::ios::trunc) << bad;
  }
  ASSERT_TRUE(comm_.Barrier().ok());
  absl::StatusOr<TrainSummary> corrupt = Train(*rest, &comm_, /*resume=*/true);
  ASSERT_FALSE(corrupt.ok());
  EXPECT_THAT(std::string(corrupt.status().message()), StartsWith("rank 1: "));
  EXPECT_THAT(std::string(corrupt.status().message()), HasSubstr(victim + " is corrupt"));
  if (comm_.rank() == 0) std::ofstream(victim, std::ios::binary | std::ios::trunc) << saved;
  ASSERT_TRUE(comm_.Barrier().ok());

  // On the same ranks: the uninterrupted run's losses, bit for bit.
  absl::StatusOr<TrainSummary> r = Train(*rest, &comm_, /*resume=*/true);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->first_step, 6);
  ASSERT_EQ(r->losses.size(), 6u);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(r->losses[i], w->losses[6 + i]) << "step " << 6 + i;

  // On one process (each table loaded by its new owner): within 1e-5.
  ASSERT_TRUE(comm_.Barrier().ok());
  if (comm_.rank() == 0) fs::remove_all(absl::StrCat(dir_, "/ck/step-000000012"));
  absl::StatusOr<TrainSummary> one = TrainAloneOnRankZero(*rest, /*resume=*/true);
  if (comm_.rank() == 0) {
    ASSERT_TRUE(one.ok()) << one.status();
    ASSERT_EQ(one->first_step, 6);
    ExpectClose(one->losses, w->losses, 6);
  }
}

TEST_F(DistributedTrainingTest, SsdTablesPrefetchAheadOnTheirOwnersAndTrainAsInDram) {
  // Every table on the ssd tier of its owner, a budget per rank that the
  // pinned rows of 3 batches nearly fill (tables evict), the indices of 2
  // batches ahead exchanged so that the owners prefetch them: the DRAM
  // run's losses, bit for bit.
  // Uniform indices over at most 20000 rows: evicted rows come back.
  const std::vector<std::string> data = {"data.distribution=uniform", "data.max_ind_range=20000"};
  absl::StatusOr<TrainConfig> dram = Default({data[0], data[1], "train.steps=12", "train.eval_every=6"});
  absl::StatusOr<TrainConfig> ssd =
      Default({data[0], data[1], "train.steps=12", "train.eval_every=6", absl::StrCat("model.storage.slow_tier=", dir_),
               "model.storage.kind=ssd", "model.dram_budget=6MiB", "train.prefetch_batches=2"});
  ASSERT_TRUE(dram.ok() && ssd.ok());
  absl::StatusOr<TrainSummary> d = Train(*dram, &comm_);
  ASSERT_TRUE(d.ok()) << d.status();
  FILE* report = std::tmpfile();
  ASSERT_NE(report, nullptr);
  absl::StatusOr<TrainSummary> s = Train(*ssd, &comm_, /*resume=*/false, {.out = report});
  ASSERT_TRUE(s.ok()) << s.status();
  if (comm_.rank() == 0) {  // the plan has each rank's split of its own budget
    std::string text;
    std::rewind(report);
    for (int c; (c = std::fgetc(report)) != EOF;) text.push_back(static_cast<char>(c));
    const size_t r0 = text.find("\nrank 0's dram_budget: 6.0 MiB, ");
    const size_t r1 = text.find("\nrank 1's dram_budget: 6.0 MiB, ");
    EXPECT_NE(r0, std::string::npos) << text;
    EXPECT_NE(r1, std::string::npos) << text;
    EXPECT_LT(r0, r1) << text;
  }
  std::fclose(report);
  ASSERT_EQ(s->losses.size(), d->losses.size());
  for (size_t i = 0; i < s->losses.size(); ++i) EXPECT_EQ(s->losses[i], d->losses[i]) << "step " << i;
  EXPECT_EQ(s->final_metrics.auc, d->final_metrics.auc);
  // Every rank's summary reports every table of the model, in order, each
  // with its owner's statistics (the budget leaves the smallest tables
  // whole in DRAM: those are not ssd).
  ASSERT_EQ(s->tables.size(), 26u);
  int64_t fetched = 0;
  for (size_t t = 0; t < s->tables.size(); ++t) {
    const TableReport& r = s->tables[t];
    EXPECT_EQ(r.id, static_cast<int>(t));
    EXPECT_EQ(r.name, absl::StrCat("emb", t));
    EXPECT_GT(r.rows, 0) << r.name;
    EXPECT_FALSE(r.kernel.empty()) << r.name;
    if (!r.ssd) continue;
    EXPECT_GT(r.ssd_stats.prefetch_rows, 0) << r.name << ": no statistics from its owner";
    fetched += r.ssd_stats.fetched_rows;
  }
  EXPECT_GT(fetched, 0) << "no row came back from the slow tier: the budget does not make the tables evict";
}

TEST_F(DistributedTrainingTest, AFailingRankStopsEveryRankWithItsMessageAndLeavesNoCheckpoint) {
  // Table 3 on the ssd tier; its owner's first write fails: the write-back
  // of its dirty rows when the checkpoint at the end is written.
  const std::string ck = absl::StrCat(dir_, "/ck");
  absl::StatusOr<TrainConfig> c = Default({"train.steps=4", "train.eval_every=0",
                                           absl::StrCat("model.storage.slow_tier=", dir_),
                                           "model.table_storage.3.kind=ssd", "model.dram_budget=64MiB",
                                           absl::StrCat("train.checkpoint_dir=", ck)});
  ASSERT_TRUE(c.ok()) << c.status();
  auto fail_emb3 = [](int table, std::unique_ptr<BlockIo> io) -> std::unique_ptr<BlockIo> {
    if (table != 3) return io;
    return std::make_unique<FaultInjectingBlockIo>(std::move(io), std::vector<IoFault>{{.op = IoOp::kWrite, .nth = 1}});
  };
  absl::StatusOr<TrainSummary> s = Train(*c, &comm_, /*resume=*/false, {.out = nullptr}, fail_emb3);
  ASSERT_FALSE(s.ok());
  // The plan (bytes, then lookups) puts table 3 on rank 1.
  EXPECT_THAT(std::string(s.status().message()), StartsWith("rank 1: "));
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("emb3"));
  // No checkpoint under a step name: the ranks' writes are one.
  EXPECT_FALSE(LatestCheckpoint(ck).ok());
}

}  // namespace
}  // namespace cemb::train
