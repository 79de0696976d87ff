// Training with every table on the ssd tier (storage.kind: ssd) gives the
// same losses, bit for bit, as with every table in DRAM, under a DRAM budget
// so small that every step evicts, for prefetch_batches 0, 2 and 3. An I/O
// error of an ssd table (injected: FaultInjectingBlockIo) stops training
// with a message naming it, and the last checkpoint resumes.

#include <algorithm>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/data/test_util.h"
#include "tests/ssd/test_util.h"
#include "train/checkpoint.h"
#include "train/trainer.h"
#include "train/trainer_testing.h"

namespace cemb::train {
namespace {


constexpr int64_t kTables = 6, kRows = 20000, kBatch = 256, kHotness = 2, kSteps = 20;

class SsdTrainingTest : public ::testing::Test {
 protected:
  // configs/default.yaml's shape, smaller: uniform indices (about 500
  // distinct rows per table per batch, so once the pool of (p + 1) batches is
  // full every batch evicts about as many rows as it reads; a fifth of the
  // rows are used twice, so evicted dirty rows are read back), two indices
  // per bag, an evaluation in the middle (its batches go through the ssd
  // tables too).
  std::string Yaml() const {
    return absl::StrCat(R"(
data:
  source: synthetic
  samples: 8192
  distribution: uniform
  hotness: )", kHotness, R"(
  validation_fraction: 0.25
  seed: 7
  work_dir: )", dir_, R"(/data
model:
  embedding_dim: 16
  bottom_mlp: [64, 16]
  top_mlp: [64, 1]
  mlp_precision: fp32
  tables: {count: )", kTables, ", rows: ", kRows, R"(}
  storage: {kind: dram, slow_tier: )", dir_, R"(}
optimizer:
  learning_rate: 0.1
  warmup_steps: 5
train:
  batch_size: )", kBatch, R"(
  steps: )", kSteps, R"(
  eval_every: 10
  eval_batches: 2
  threads: 2
  seed: 3
  progress: false
)");
  }

  // The smallest budget the trainer accepts for prefetch_batches = p, plus
  // `slack_rows` slots per table: (p + 1) batches of kBatch x kHotness rows
  // per table (64-byte rows and their slot metadata, the map and the log's
  // buffers: ssd/internal/ssd_core.h).
  static int64_t TightBudget(int p, int64_t slack_rows) {
    const int64_t pinned = std::min<int64_t>(kRows, (p + 1) * kBatch * kHotness) + slack_rows;
    return kTables *
           (SsdFixedDramBytes(kRows, 64, SsdOptions{}, /*evicts=*/true) + pinned * (64 + kSsdSlotMetadataBytes));
  }

  using WrapIo = TrainerTesting::WrapSsdIo;

  absl::StatusOr<TrainSummary> Train(std::vector<std::string> overrides, bool resume = false, FILE* out = nullptr,
                                     WrapIo wrap_ssd_io = nullptr) {
    absl::StatusOr<TrainConfig> c = TrainConfig::Parse(Yaml(), "ssd.yaml", overrides);
    if (!c.ok()) return c.status();
    absl::StatusOr<std::unique_ptr<Trainer>> t =
        TrainerTesting::Create(*c, {.resume = resume, .out = out}, std::move(wrap_ssd_io));
    if (!t.ok()) return t.status();
    return (*t)->Run();
  }

  // Defined below the tests that need them.
  static WrapIo Emb3AfterStep5Checkpoint(std::string checkpoint_dir, IoOp op, int64_t nth, int error,
                                         int64_t* requests_to_step10);
  void ExpectFailsNamingTheTableAndResumes(IoOp op, int error, absl::StatusCode code);

  data::testing::TempDir tmp_;
  const std::string dir_ = tmp_.path();
};

TEST_F(SsdTrainingTest, LossesEqualDramBitForBitWhileEveryStepEvicts) {
  absl::StatusOr<TrainSummary> dram = Train({});
  ASSERT_TRUE(dram.ok()) << dram.status();
  ASSERT_EQ(dram->losses.size(), static_cast<size_t>(kSteps));
  for (int p : {2, 0, 3}) {
    SCOPED_TRACE(absl::StrCat("prefetch_batches ", p));
    absl::StatusOr<TrainSummary> ssd =
        Train({"model.storage.kind=ssd", absl::StrCat("model.dram_budget=", TightBudget(p, 8)),
               absl::StrCat("train.prefetch_batches=", p)});
    ASSERT_TRUE(ssd.ok()) << ssd.status();
    ASSERT_EQ(ssd->losses.size(), dram->losses.size());
    for (size_t i = 0; i < ssd->losses.size(); ++i) {
      // Bit for bit: == on doubles, not a tolerance.
      EXPECT_EQ(ssd->losses[i], dram->losses[i]) << "step " << i;
    }
    EXPECT_EQ(ssd->final_metrics.log_loss, dram->final_metrics.log_loss);
    EXPECT_EQ(ssd->final_metrics.auc, dram->final_metrics.auc);
    // The mechanism fired: every table evicted, dirty rows were written back
    // and read again, and nothing was fetched synchronously (every batch,
    // evaluation included, was prefetched).
    ASSERT_EQ(ssd->tables.size(), static_cast<size_t>(kTables));
    int64_t slots_bytes = 0;
    for (const TableReport& r : ssd->tables) {
      SCOPED_TRACE(r.name);
      EXPECT_TRUE(r.ssd);
      EXPECT_EQ(r.storage, "ssd");
      // From the step that fills the pool on, ~500 evictions a step.
      EXPECT_GE(r.ssd_stats.evictions, (kSteps - p - 1) * 400);
      EXPECT_GT(r.ssd_stats.dirty_evictions, 0);
      EXPECT_GT(r.ssd_stats.fetched_rows, 0);
      EXPECT_GT(r.ssd_stats.io.bytes_written, 0);
      EXPECT_EQ(r.ssd_stats.sync_fetches, 0);
      slots_bytes += r.dram_bytes;
    }
    // The 8 slots per table beyond the pinned rows go where the sampled
    // traffic is (train/dram_budget.h), not necessarily 8 to each.
    EXPECT_LE(slots_bytes, kTables * (std::min<int64_t>(kRows, (p + 1) * kBatch * kHotness) + 8) * 64);
  }
}

TEST_F(SsdTrainingTest, ABudgetBelowThePinnedBatchesIsRefusedBeforeTraining) {
  absl::StatusOr<TrainSummary> s = Train({"model.storage.kind=ssd",
                                          absl::StrCat("model.dram_budget=", TightBudget(2, 0) - 1)});
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()),
              ::testing::HasSubstr(absl::StrCat("model.dram_budget: ")));
  EXPECT_THAT(std::string(s.status().message()), ::testing::HasSubstr(absl::StrCat("(", TightBudget(2, 0) - 1, " bytes)")));
  EXPECT_THAT(std::string(s.status().message()),
              ::testing::HasSubstr(absl::StrCat("it needs at least ", TightBudget(2, 0), " bytes")));
}

// The dram_budget line prints the split; the report and the JSON summary give
// each ssd table's traffic.
TEST_F(SsdTrainingTest, ReportsTheSplitAndEachSsdTablesTraffic) {
  FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  absl::StatusOr<TrainSummary> s =
      Train({"model.storage.kind=ssd", "model.table_storage={\"0\": {kind: dram}}",
             absl::StrCat("model.dram_budget=", TightBudget(2, 8)), "train.steps=6",
             absl::StrCat("train.log_jsonl=", dir_, "/log.jsonl")},
            /*resume=*/false, out);
  ASSERT_TRUE(s.ok()) << s.status();
  std::string text;
  std::rewind(out);
  for (int c; (c = std::fgetc(out)) != EOF;) text.push_back(static_cast<char>(c));
  std::fclose(out);
  using ::testing::HasSubstr;
  EXPECT_THAT(text, HasSubstr("on ssd ("));
  EXPECT_THAT(text, HasSubstr("; prefetch 2 batches)"));
  const size_t split_at = text.find("\ndram_budget: ");
  ASSERT_NE(split_at, std::string::npos) << text;
  const std::string split_line = text.substr(split_at + 1, text.find('\n', split_at + 1) - split_at - 1);
  EXPECT_THAT(split_line, HasSubstr(": emb1 "));
  EXPECT_THAT(split_line, HasSubstr(", emb5 "));
  EXPECT_THAT(split_line, ::testing::Not(HasSubstr("emb0 ")));  // in DRAM: not in the budget
  EXPECT_THAT(split_line, HasSubstr("split by the lookups of the first "));
  EXPECT_THAT(text, HasSubstr("\nssd wait "));
  EXPECT_THAT(text, HasSubstr("hit rate   computed  rows read bytes read  rows wrtn bytes wrtn w.ampl.     moved     "
                              "file / live req/step  cpu/req    waited"));
  EXPECT_THAT(text, HasSubstr("\nemb5 "));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("\nemb0 ")));  // in DRAM: not listed
  std::ifstream in(dir_ + "/log.jsonl");
  std::string line, last;
  while (std::getline(in, line)) last = line;
  EXPECT_THAT(last, HasSubstr("\"ssd wait\":"));
  EXPECT_THAT(last, HasSubstr(",\"ssd\":{\"dram_bytes\":"));
  for (const char* key : {"\"hit_rate\":", "\"rows_read\":", "\"bytes_read\":", "\"rows_written\":",
                          "\"bytes_written\":", "\"read_amplification\":", "\"average_queue_depth\":", "\"waited_s\":",
                          "\"reads\":", "\"writes\":", "\"write_amplification\":", "\"collector_bytes_moved\":",
                          "\"file_bytes\":", "\"live_bytes\":", "\"cpu_us_per_request\":"}) {
    EXPECT_THAT(last, HasSubstr(key));
  }
  ASSERT_EQ(s->tables.size(), static_cast<size_t>(kTables));
  EXPECT_FALSE(s->tables[0].ssd);
  EXPECT_GT(s->tables[1].ssd_stats.prefetch_rows, 0);
}

// A checkpoint holds a snapshot of each ssd table's written blocks
// (model/emb_l.<t>.ssd, no .rows): stopping after 10 steps and resuming
// gives the losses of the uninterrupted run (and of the DRAM run) bit for
// bit, under the tight budget.
TEST_F(SsdTrainingTest, ResumeEqualsUninterrupted) {
  const std::vector<std::string> ssd = {"model.storage.kind=ssd", absl::StrCat("model.dram_budget=", TightBudget(2, 8))};
  absl::StatusOr<TrainSummary> whole = Train(ssd);
  ASSERT_TRUE(whole.ok()) << whole.status();
  absl::StatusOr<TrainSummary> dram = Train({});
  ASSERT_TRUE(dram.ok()) << dram.status();
  EXPECT_EQ(whole->losses, dram->losses);

  std::vector<std::string> first = ssd;
  first.push_back(absl::StrCat("train.checkpoint_dir=", dir_, "/ck"));
  first.push_back("train.steps=10");
  absl::StatusOr<TrainSummary> a = Train(first);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_FALSE(a->last_checkpoint.empty());
  for (int t = 0; t < kTables; ++t) {
    EXPECT_TRUE(std::filesystem::exists(absl::StrCat(a->last_checkpoint, "/model/emb_l.", t, ".ssd"))) << t;
    EXPECT_FALSE(std::filesystem::exists(absl::StrCat(a->last_checkpoint, "/model/emb_l.", t, ".rows"))) << t;
  }
  std::vector<std::string> second = first;
  second.back() = absl::StrCat("train.steps=", kSteps);
  absl::StatusOr<TrainSummary> b = Train(second, /*resume=*/true);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->first_step, 10);
  std::vector<double> losses = a->losses;
  losses.insert(losses.end(), b->losses.begin(), b->losses.end());
  ASSERT_EQ(losses.size(), whole->losses.size());
  for (size_t i = 0; i < losses.size(); ++i) EXPECT_EQ(losses[i], whole->losses[i]) << "step " << i;
  EXPECT_EQ(b->final_metrics.log_loss, whole->final_metrics.log_loss);
  // Neither the snapshot's save nor its load fetched a row.
  for (const TrainSummary* run : {&*a, &*b}) {
    for (const TableReport& r : run->tables) EXPECT_EQ(r.ssd_stats.sync_fetches, 0) << r.name;
  }
}

// Kills the process (SIGKILL) at emb3's I/O: the `nth` request after the
// step-5 checkpoint is in place (in the middle of a step), or its first
// request while the step-10 checkpoint is being written (in the middle of a
// checkpoint: emb0-2's snapshots are in its temporary directory, emb3's is not).
class KillAt final : public testing::ForwardingBlockIo {
 public:
  enum class When { kStep, kCheckpoint };
  KillAt(std::unique_ptr<BlockIo> io, std::string dir, When when, int64_t nth)
      : ForwardingBlockIo(std::move(io)), dir_(std::move(dir)), when_(when), nth_(nth) {}
  absl::Status Submit(std::span<const BlockRequest> requests) override {
    if (when_ == When::kStep && std::filesystem::exists(dir_ + "/" + CheckpointName(5)) && ++seen_ >= nth_) {
      ::raise(SIGKILL);
    }
    if (when_ == When::kCheckpoint &&
        std::filesystem::exists(absl::StrCat(dir_, "/.tmp-", CheckpointName(10), "-", ::getpid()))) {
      ::raise(SIGKILL);
    }
    return io_->Submit(requests);
  }

 private:
  std::string dir_;
  When when_;
  int64_t nth_;
  int64_t seen_ = 0;
};

// kill -9 in the middle of a step, and in the middle of writing a
// checkpoint: --resume starts from the last complete checkpoint (step 5) and
// gives the uninterrupted run's losses bit for bit. The rows file dies with
// the process; a checkpoint is renamed into place only when complete.
TEST_F(SsdTrainingTest, KilledMidStepOrMidCheckpointResumesFromTheLastCheckpointBitForBit) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a fresh process: no OpenMP pool across fork()
  // The child is this test run again in a new process with a new fixture:
  // it finds the parent's directory in the environment it inherits.
  const char* inherited = std::getenv("CEMB_KILL_TEST_DIR");
  const std::string dir = inherited != nullptr ? std::string(inherited) : dir_;
  ::setenv("CEMB_KILL_TEST_DIR", dir.c_str(), 1);
  const std::vector<std::string> ssd = {"model.storage.kind=ssd", absl::StrCat("model.dram_budget=", TightBudget(2, 8)),
                                        "train.checkpoint_every=5"};
  auto run_in = [&](const std::string& sub) {
    std::vector<std::string> run = ssd;
    run.push_back(absl::StrCat("train.checkpoint_dir=", dir, "/", sub));
    return run;
  };
  auto kill = [&](const std::string& sub, KillAt::When when) -> WrapIo {
    return [=](int table, std::unique_ptr<BlockIo> io) -> std::unique_ptr<BlockIo> {
      if (table != 3) return io;
      return std::make_unique<KillAt>(std::move(io), dir + "/" + sub, when, /*nth=*/2);
    };
  };
  EXPECT_EXIT((void)Train(run_in("step"), false, nullptr, kill("step", KillAt::When::kStep)); std::exit(0),
              ::testing::KilledBySignal(SIGKILL), "");
  EXPECT_EXIT((void)Train(run_in("checkpoint"), false, nullptr, kill("checkpoint", KillAt::When::kCheckpoint));
              std::exit(0), ::testing::KilledBySignal(SIGKILL), "");

  absl::StatusOr<TrainSummary> whole = Train(run_in("whole"));
  ASSERT_TRUE(whole.ok()) << whole.status();
  for (const char* sub : {"step", "checkpoint"}) {
    SCOPED_TRACE(absl::StrCat("killed in the middle of a ", sub));
    absl::StatusOr<std::string> latest = LatestCheckpoint(absl::StrCat(dir, "/", sub));
    ASSERT_TRUE(latest.ok()) << latest.status();
    absl::StatusOr<CheckpointState> state = ReadCheckpoint(*latest);
    ASSERT_TRUE(state.ok()) << state.status();
    EXPECT_EQ(state->step, 5);
    absl::StatusOr<TrainSummary> resumed = Train(run_in(sub), /*resume=*/true);
    ASSERT_TRUE(resumed.ok()) << resumed.status();
    EXPECT_EQ(resumed->first_step, 5);
    ASSERT_EQ(resumed->losses.size(), static_cast<size_t>(kSteps - 5));
    for (size_t i = 0; i < resumed->losses.size(); ++i) {
      EXPECT_EQ(resumed->losses[i], whole->losses[5 + i]) << "step " << 5 + i;
    }
    EXPECT_EQ(resumed->final_metrics.log_loss, whole->final_metrics.log_loss);
  }
}

// The storage is not part of a checkpoint's settings: a checkpoint of DRAM
// tables (.rows files) resumes into ssd tables, bit for bit (their rows
// loaded through LoadRows, prefetched in chunks), and a checkpoint of ssd
// tables (snapshots) into DRAM tables (through a temporary ssd table).
TEST_F(SsdTrainingTest, CheckpointsResumeBitForBitWithTheTablesMovedBetweenDramAndSsd) {
  absl::StatusOr<TrainSummary> whole = Train({});
  ASSERT_TRUE(whole.ok()) << whole.status();
  const std::string ck = absl::StrCat("train.checkpoint_dir=", dir_, "/ck_dram");
  absl::StatusOr<TrainSummary> a = Train({ck, "train.steps=10"});
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<TrainSummary> b = Train(
      {ck, "model.storage.kind=ssd", absl::StrCat("model.dram_budget=", TightBudget(2, 8))}, /*resume=*/true);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(b->first_step, 10);
  ASSERT_EQ(b->losses.size(), static_cast<size_t>(kSteps - 10));
  for (size_t i = 0; i < b->losses.size(); ++i) EXPECT_EQ(b->losses[i], whole->losses[10 + i]) << "step " << 10 + i;
  for (const TableReport& r : b->tables) EXPECT_EQ(r.ssd_stats.sync_fetches, 0) << r.name;

  const std::string ck_ssd = absl::StrCat("train.checkpoint_dir=", dir_, "/ck_ssd");
  absl::StatusOr<TrainSummary> c =
      Train({ck_ssd, "train.steps=10", "model.storage.kind=ssd", absl::StrCat("model.dram_budget=", TightBudget(2, 8))});
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(std::filesystem::exists(absl::StrCat(c->last_checkpoint, "/model/emb_l.0.ssd")));
  absl::StatusOr<TrainSummary> d = Train({ck_ssd}, /*resume=*/true);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->first_step, 10);
  ASSERT_EQ(d->losses.size(), static_cast<size_t>(kSteps - 10));
  for (size_t i = 0; i < d->losses.size(); ++i) EXPECT_EQ(d->losses[i], whole->losses[10 + i]) << "step " << 10 + i;
  EXPECT_EQ(d->final_metrics.auc, whole->final_metrics.auc);
}

// emb3's backend, from the moment the checkpoint of step 5 is in
// `checkpoint_dir` (renamed into place after every table's write-back;
// training goes on only after it): counts its requests of kind `op` until
// the checkpoint of step 10 is in place (into *requests_to_step10, if it
// comes), and, with nth > 0, fails the nth of them with `error`. The other
// tables' backends are left alone.
//
// The fault is placed by the requests after the checkpoint, not by a count
// from the run's start: how many come before it depends on the prefetcher
// threads' timing (whether a table's Prefetch of batch k + 2 runs before or
// after the trainer's Unpin of batch k decides which rows it evicts), so a
// count taken from other runs can land before the checkpoint. Over 82 runs
// emb3's writes by the step-5 checkpoint ranged from 752 to 1001, while the
// old placement, (writes of a 5-step run + of a 10-step run) / 2, ranged
// from 998 to 1255.
SsdTrainingTest::WrapIo SsdTrainingTest::Emb3AfterStep5Checkpoint(std::string checkpoint_dir, IoOp op, int64_t nth,
                                                                  int error, int64_t* requests_to_step10) {
  class AfterStep5 final : public testing::ForwardingBlockIo {
   public:
    AfterStep5(std::unique_ptr<BlockIo> io, std::string dir, IoOp op, int64_t nth, int error, int64_t* counted)
        : ForwardingBlockIo(std::move(io)),
          dir_(std::move(dir)),
          op_(op),
          nth_(nth),
          error_(error),
          counted_(counted) {}

    absl::Status Submit(std::span<const BlockRequest> requests) override {
      if (at_step5_ < 0 && Exists(5)) {
        at_step5_ = Requests();
        if (nth_ > 0) {
          io_ = std::make_unique<FaultInjectingBlockIo>(
              std::move(io_), std::vector<IoFault>{{.op = op_, .nth = nth_, .error = error_}});
        }
      }
      if (at_step5_ >= 0 && *counted_ < 0 && Exists(10)) *counted_ = Requests() - at_step5_;
      return io_->Submit(requests);
    }

   private:
    bool Exists(int64_t step) const { return std::filesystem::exists(dir_ + "/" + CheckpointName(step)); }
    int64_t Requests() const { return op_ == IoOp::kRead ? io_->counters().reads : io_->counters().writes; }

    // io_ becomes a FaultInjectingBlockIo over the table's once armed with a fault.
    std::string dir_;
    IoOp op_;
    int64_t nth_;
    int error_;
    int64_t* counted_;
    int64_t at_step5_ = -1;  // requests before the checkpoint of step 5 was seen
  };
  *requests_to_step10 = -1;
  return [=](int table, std::unique_ptr<BlockIo> io) -> std::unique_ptr<BlockIo> {
    if (table != 3) return io;
    return std::make_unique<AfterStep5>(std::move(io), checkpoint_dir, op, nth, error, requests_to_step10);
  };
}

// A run of kSteps under the tight budget, checkpointing every 5 steps, whose
// emb3 fails its first request of kind `op` after the checkpoint of step 5,
// stops with a Status of `code` naming the table, the file and the
// operation; the newest checkpoint still verifies, and a resumed run without
// faults gives the uninterrupted run's losses bit for bit.
void SsdTrainingTest::ExpectFailsNamingTheTableAndResumes(IoOp op, int error, absl::StatusCode code) {
  const std::string& dir = dir_;
  const std::vector<std::string> ssd = {"model.storage.kind=ssd",
                                        absl::StrCat("model.dram_budget=", TightBudget(2, 8)),
                                        "train.checkpoint_every=5"};
  std::vector<std::string> counted = ssd;
  counted.push_back(absl::StrCat("train.checkpoint_dir=", dir, "/count"));
  int64_t between = -1;
  absl::StatusOr<TrainSummary> whole =
      Train(counted, /*resume=*/false, nullptr, Emb3AfterStep5Checkpoint(dir + "/count", op, 0, 0, &between));
  ASSERT_TRUE(whole.ok()) << whole.status();
  // The first such request after the step-5 checkpoint fails. A read then
  // is a prefetch of a batch at most prefetch_batches (2) ahead of the step
  // the trainer is in, step 6 or later: its failure comes out at that
  // batch's WaitResident, by step 8, before the checkpoint of step 10,
  // whatever the timing. A write is one of the few segment writes of emb3's
  // dirty rows (5 in this stretch), reported by emb3's next Prefetch.
  //
  // The fault was once placed a quarter of the way, by the count of the
  // uninterrupted run. emb3's reads in this stretch have fallen from about
  // 2,600 to 130-160 since (a block is read once while it is at hand,
  // 1262685), and the quarter (the 39th read) came after the step-10
  // checkpoint in a loaded CI run (b24276b): another run's count says
  // nothing certain about where a request of this one falls.
  ASSERT_GT(between, 0) << "emb3 does no " << IoOpName(op) << " I/O between steps 5 and 10";
  constexpr int64_t nth = 1;
  SCOPED_TRACE(absl::StrCat("the first ", IoOpName(op), " of emb3 after the step-5 checkpoint fails (", between,
                            " before the step-10 one in the uninterrupted run)"));

  std::vector<std::string> run = ssd;
  run.push_back(absl::StrCat("train.checkpoint_dir=", dir, "/ck"));
  int64_t unused = -1;
  absl::StatusOr<TrainSummary> failed =
      Train(run, /*resume=*/false, nullptr, Emb3AfterStep5Checkpoint(dir + "/ck", op, nth, error, &unused));
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), code) << failed.status();
  const std::string msg(failed.status().message());
  using ::testing::HasSubstr;
  EXPECT_THAT(msg, HasSubstr("emb3: "));
  EXPECT_THAT(msg, HasSubstr(absl::StrCat(dir, "/(unnamed temporary file): ")));
  EXPECT_THAT(msg, HasSubstr(absl::StrCat(IoOpName(op), " of ")));
  EXPECT_THAT(msg, HasSubstr(" bytes at offset "));
  EXPECT_THAT(msg, HasSubstr(std::strerror(error)));

  absl::StatusOr<std::string> latest = LatestCheckpoint(dir + "/ck");
  ASSERT_TRUE(latest.ok()) << latest.status();
  absl::StatusOr<CheckpointState> state = ReadCheckpoint(*latest);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->step, 5);  // the fault came after it, in a step before the next one

  absl::StatusOr<TrainSummary> resumed = Train(run, /*resume=*/true);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->first_step, state->step);
  ASSERT_EQ(resumed->losses.size(), static_cast<size_t>(kSteps - state->step));
  for (size_t i = 0; i < resumed->losses.size(); ++i) {
    EXPECT_EQ(resumed->losses[i], whole->losses[static_cast<size_t>(state->step) + i]) << "step " << state->step + i;
  }
  EXPECT_EQ(resumed->final_metrics.log_loss, whole->final_metrics.log_loss);
}

TEST_F(SsdTrainingTest, EioOnAReadStopsTrainingNamingTableFileAndReadAndTheLastCheckpointResumes) {
  ExpectFailsNamingTheTableAndResumes(IoOp::kRead, EIO, absl::StatusCode::kDataLoss);
}

TEST_F(SsdTrainingTest, EnospcOnAWriteBackStopsTrainingNamingTableFileAndWriteAndTheLastCheckpointResumes) {
  ExpectFailsNamingTheTableAndResumes(IoOp::kWrite, ENOSPC, absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace cemb::train
