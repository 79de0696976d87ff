#include "train/checkpoint.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cemb::train {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base ? base : "/tmp") + "/cemb_checkpoint_test_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  static void Write(const std::string& path, const std::string& content) {
    std::ofstream out(path, std::ios::binary);
    out << content;
  }
  static std::string Read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  // One bit of byte 1234 of `path` flipped: same size, another checksum.
  static void FlipABit(const std::string& path) {
    std::string content = Read(path);
    content[1234] ^= 0x10;
    Write(path, content);
  }

  absl::StatusOr<std::string> WriteStep(int64_t step, int keep = 5) {
    CheckpointState s;
    s.step = step;
    s.loader_position = "cemb-loader-position v1 epoch=0 batch=7 fingerprint=abc";
    s.state["interval_loss_sum"] = "0x1.8p-1";
    s.state["seed"] = "42";
    s.config = "model.embedding_dim=16\ntrain.seed=1\n";
    return WriteCheckpoint(dir_, s, [&](const std::string& d) -> absl::Status {
      fs::create_directories(d + "/model");
      Write(d + "/model/bot_l.0.weight.npy", std::string(1000, 'w') + std::to_string(step));
      Write(d + "/model/emb_l.0.rows", std::string(4096, 'r'));
      return absl::OkStatus();
    }, keep);
  }

  std::string dir_;
};

TEST_F(CheckpointTest, RoundTripsTheStateAndListsEveryFile) {
  absl::StatusOr<std::string> path = WriteStep(10);
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(*path, dir_ + "/step-000000010");
  absl::StatusOr<CheckpointState> s = ReadCheckpoint(*path);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->step, 10);
  EXPECT_EQ(s->loader_position, "cemb-loader-position v1 epoch=0 batch=7 fingerprint=abc");
  EXPECT_EQ(s->state.at("interval_loss_sum"), "0x1.8p-1");
  EXPECT_EQ(s->state.at("seed"), "42");
  EXPECT_EQ(s->config, "model.embedding_dim=16\ntrain.seed=1\n");
  ASSERT_EQ(s->files.size(), 2u);
  EXPECT_EQ(s->files[0].name, "model/bot_l.0.weight.npy");
  EXPECT_EQ(s->files[1].bytes, 4096u);
  EXPECT_EQ(Read(dir_ + "/LATEST"), "step-000000010\n");
  for (const auto& e : fs::directory_iterator(dir_)) {
    EXPECT_EQ(e.path().filename().string().rfind(".tmp", 0), std::string::npos) << e.path();
  }
}

TEST_F(CheckpointTest, LatestIsTheNewestAndOldOnesAreRemoved) {
  ASSERT_TRUE(WriteStep(5, 2).ok());
  ASSERT_TRUE(WriteStep(10, 2).ok());
  ASSERT_TRUE(WriteStep(15, 2).ok());
  absl::StatusOr<std::string> latest = LatestCheckpoint(dir_);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, dir_ + "/step-000000015");
  EXPECT_FALSE(fs::exists(dir_ + "/step-000000005"));
  EXPECT_TRUE(fs::exists(dir_ + "/step-000000010"));
  EXPECT_EQ(WriteStep(15).status().code(), absl::StatusCode::kAlreadyExists);
}

TEST_F(CheckpointTest, NoCheckpointIsNotFound) {
  EXPECT_EQ(LatestCheckpoint(dir_).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(LatestCheckpoint(dir_ + "/missing").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(CheckpointTest, CorruptFileIsRefusedByName) {
  absl::StatusOr<std::string> path = WriteStep(3);
  ASSERT_TRUE(path.ok());
  const std::string file = *path + "/model/emb_l.0.rows";
  FlipABit(file);
  absl::StatusOr<CheckpointState> s = ReadCheckpoint(*path);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr(file));
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("is corrupt"));
}

TEST_F(CheckpointTest, AFilterVerifiesOnlyTheFilesItSelects) {
  absl::StatusOr<std::string> path = WriteStep(3);
  ASSERT_TRUE(path.ok());
  const std::string file = *path + "/model/emb_l.0.rows";
  FlipABit(file);
  std::vector<std::string> asked;
  absl::StatusOr<CheckpointState> s = ReadCheckpoint(*path, [&](const std::string& name) {
    asked.push_back(name);
    return name != "model/emb_l.0.rows";
  });
  ASSERT_TRUE(s.ok()) << s.status();  // the corrupt file is not this reader's
  EXPECT_EQ(s->files.size(), asked.size());  // every file is listed, and asked about
  s = ReadCheckpoint(*path, [](const std::string& name) { return name == "model/emb_l.0.rows"; });
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()), HasSubstr(file + " is corrupt"));
}

TEST_F(CheckpointTest, TruncatedFileIsRefusedByName) {
  absl::StatusOr<std::string> path = WriteStep(3);
  ASSERT_TRUE(path.ok());
  const std::string file = *path + "/model/bot_l.0.weight.npy";
  fs::resize_file(file, 100);
  absl::StatusOr<CheckpointState> s = ReadCheckpoint(*path);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr(file + " is truncated: 100 bytes, the manifest says 1001"));
}

TEST_F(CheckpointTest, MissingFileIsRefusedByName) {
  absl::StatusOr<std::string> path = WriteStep(3);
  ASSERT_TRUE(path.ok());
  fs::remove(*path + "/model/emb_l.0.rows");
  absl::StatusOr<CheckpointState> s = ReadCheckpoint(*path);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()), HasSubstr(*path + "/model/emb_l.0.rows is missing"));
}

TEST_F(CheckpointTest, TamperedOrTruncatedManifestIsRefused) {
  absl::StatusOr<std::string> path = WriteStep(3);
  ASSERT_TRUE(path.ok());
  const std::string manifest = *path + "/MANIFEST";
  const std::string original = Read(manifest);

  std::string tampered = original;
  tampered.replace(tampered.find("step 3"), 6, "step 4");
  Write(manifest, tampered);
  absl::StatusOr<CheckpointState> s = ReadCheckpoint(*path);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()), HasSubstr(manifest + " is corrupt"));

  Write(manifest, original.substr(0, original.size() / 2));
  s = ReadCheckpoint(*path);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr(manifest));

  fs::remove(manifest);
  s = ReadCheckpoint(*path);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("incomplete or corrupt"));
}

TEST_F(CheckpointTest, FailedPayloadLeavesNothingBehind) {
  CheckpointState s;
  s.step = 1;
  absl::StatusOr<std::string> r = WriteCheckpoint(dir_, s, [](const std::string& d) {
    std::ofstream(d + "/half") << "x";
    return absl::InternalError("disk full");
  }, 2);
  EXPECT_FALSE(r.ok());
  EXPECT_TRUE(fs::is_empty(dir_));
}

}  // namespace
}  // namespace cemb::train
