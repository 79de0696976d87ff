#include "checkpoint/serving_manifest.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "base/file.h"
#include "checkpoint/checkpoint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cemb {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

ServingManifest Example() {
  ServingManifest m;
  m.num_dense = 13;
  m.dim = 16;
  m.bottom_mlp = {64, 16};
  m.top_mlp = {32, 1};
  m.interaction = "dcn";
  m.self_interaction = true;
  m.dcn_layers = 2;
  m.dcn_rank = 8;
  m.mlp_precision = "bf16";
  m.table_dtype = "bf16";
  m.embedding_optimizer = "rowwise_adagrad";
  m.seed = 7;
  m.table_seed = 9;
  m.table_rows = {1460, 583, 3};
  m.table_storage = {"dram", "ssd", "dynamic"};
  m.hotness = {1, 3, 1};
  m.batch_size = 512;
  m.dense_transform = "log1p";
  m.ids = "modulo";
  m.max_ind_range = 100000;
  m.data_source = "tsv";
  return m;
}

TEST(ServingManifest, ReadsBackWhatWasWritten) {
  const ServingManifest m = Example();
  const std::string text = SerializeServingManifest(m);
  absl::StatusOr<ServingManifest> r = ParseServingManifest(text, "x/SERVING");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, m);
  EXPECT_THAT(text, HasSubstr("\ntable_rows=1460,583,3\n"));
  EXPECT_THAT(text, HasSubstr("\ninteraction=dcn\n"));
}

TEST(ServingManifest, MissingRepeatedOrUnknownKeysAreNamed) {
  const std::string text = SerializeServingManifest(Example());
  auto message = [](const std::string& t) {
    absl::StatusOr<ServingManifest> r = ParseServingManifest(t, "ck/SERVING");
    EXPECT_TRUE(absl::IsDataLoss(r.status())) << r.status();
    return std::string(r.status().message());
  };
  EXPECT_THAT(message(absl::StrReplaceAll(text, {{"dim=16\n", ""}})), HasSubstr("ck/SERVING: no key 'dim'"));
  EXPECT_THAT(message(text + "dim=16\n"), HasSubstr("key 'dim' twice"));
  EXPECT_THAT(message(text + "colour=red\n"), HasSubstr("unknown key 'colour'"));
  EXPECT_THAT(message(absl::StrReplaceAll(text, {{"dim=16", "dim=x"}})), HasSubstr("dim: bad value 'x'"));
  EXPECT_THAT(message(absl::StrReplaceAll(text, {{"hotness=1,3,1", "hotness=1,3"}})),
              HasSubstr("one per table"));
  EXPECT_THAT(message("cemb-serving v9\n"), HasSubstr("unknown format"));
}

class CheckpointDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base ? base : "/tmp") + "/cemb_serving_manifest_test_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  // Writes checkpoint `step` with (or without) a SERVING file.
  std::string Write(int64_t step, bool with_manifest) {
    CheckpointState s{.step = step};
    absl::StatusOr<std::string> path = WriteCheckpoint(
        dir_, s,
        [&](const std::string& tmp) -> absl::Status {
          if (!with_manifest) return base::WriteFileAtomically(tmp + "/weights", "w");
          return base::WriteFileAtomically(absl::StrCat(tmp, "/", kServingManifest),
                                           SerializeServingManifest(Example()));
        },
        /*keep=*/3);
    EXPECT_TRUE(path.ok()) << path.status();
    return path.value_or("");
  }
  std::string dir_;
};

TEST_F(CheckpointDirTest, ResolvesAStepDirectoryTheDirectoryAndItsLatest) {
  Write(10, true);
  const std::string newest = Write(20, true);
  for (const std::string& p : {newest, dir_, dir_ + "/LATEST"}) {
    SCOPED_TRACE(p);
    absl::StatusOr<std::string> r = ResolveCheckpoint(p);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(fs::canonical(*r), fs::canonical(newest));
    absl::StatusOr<ServingManifest> m = ReadServingManifest(*r);
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(*m, Example());
  }
  // LATEST decides, not the newest name: a reader follows what the writer published.
  ASSERT_TRUE(base::WriteFileAtomically(dir_ + "/LATEST", "step-000000010\n").ok());
  absl::StatusOr<std::string> r = ResolveCheckpoint(dir_);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(fs::path(*r).filename(), "step-000000010");
  EXPECT_TRUE(absl::IsNotFound(ResolveCheckpoint(dir_ + "/nothing").status()));
}

TEST_F(CheckpointDirTest, ACheckpointOfBeforeTheManifestSaysToSaveItAgain) {
  const std::string old = Write(5, false);
  absl::StatusOr<ServingManifest> m = ReadServingManifest(old);
  EXPECT_TRUE(absl::IsFailedPrecondition(m.status())) << m.status();
  EXPECT_THAT(m.status().message(), HasSubstr("has no SERVING manifest"));
  EXPECT_THAT(m.status().message(), HasSubstr("re-save it"));
}

}  // namespace
}  // namespace cemb
