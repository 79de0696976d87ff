// The Stepper against a fake table set: what it asks of the tables, in what
// order, with which bags. A RecordingLayer (an EmbeddingLayer that stores
// nothing) writes down every Prefetch, BeginStep and EndStep; the loader
// reads a small dataset whose sample i has row (i * 7) % kRows in table 0
// and i % 3 in table 1, so a bag says which sample it belongs to.
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "gtest/gtest.h"
#include "tables/embedding_layer.h"
#include "tests/data/test_util.h"
#include "train/stepper.h"

namespace cemb::train {
namespace {

constexpr uint32_t kBatch = 4;
constexpr int64_t kRows = 50;
constexpr uint64_t kSamples = 40;  // 10 batches

class RecordingLayer final : public EmbeddingLayer {
 public:
  struct Prefetched {
    int64_t id;
    int table;
    std::vector<int32_t> indices;
  };

  int num_tables() const override { return 2; }
  int64_t dim() const override { return 4; }
  int64_t rows(int table) const override { return table == 0 ? kRows : 3; }
  absl::StatusOr<CheckedBatch> Check(std::span<const Bags<int32_t>> bags) const override {
    return Checked(bags, CheckedBatch::kNoBatch);
  }
  absl::StatusOr<CheckedBatch> CheckStep(int64_t batch_id, std::span<const Bags<int32_t>> bags) override {
    return Checked(bags, batch_id);
  }
  using EmbeddingLayer::Lookup;
  absl::Status Lookup(const CheckedBatch&, MatrixView) override { return absl::OkStatus(); }
  using EmbeddingLayer::LookupShared;
  absl::Status LookupShared(std::span<const Bags<int32_t>>, std::span<const MatrixView>, int) const override {
    return absl::OkStatus();
  }
  using EmbeddingLayer::Update;
  absl::Status Update(const CheckedBatch&, ConstMatrixView, float) override { return absl::OkStatus(); }
  bool has_ssd_tables() const override { return true; }  // so that the cycles prefetch
  absl::Status Prefetch(int64_t batch_id, int t, const Bags<int32_t>& bags) override {
    std::lock_guard<std::mutex> lock(mu_);  // the cycle's prefetcher threads call it
    prefetched_.push_back({batch_id, t, std::vector<int32_t>(bags.indices.begin(), bags.indices.end())});
    return absl::OkStatus();
  }
  absl::StatusOr<double> BeginStep(int64_t batch_id) override {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(absl::StrCat("begin ", batch_id));
    // Every table's rows of the batch were prefetched before its step began.
    for (int t = 0; t < 2; ++t) {
      const bool found = std::any_of(prefetched_.begin(), prefetched_.end(),
                                     [&](const Prefetched& p) { return p.id == batch_id && p.table == t; });
      if (!found) events_.push_back(absl::StrCat("batch ", batch_id, " table ", t, " not prefetched"));
    }
    return 0.0;
  }
  absl::StatusOr<int> EndStep(int64_t batch_id) override {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(absl::StrCat("end ", batch_id));
    return 0;
  }
  absl::Status Sync() override { return absl::OkStatus(); }
  absl::Status Save(const std::string&, const std::string&) override { return absl::OkStatus(); }
  absl::Status Load(const std::string&, const std::string&) override { return absl::OkStatus(); }
  absl::Status ExportNpy(const std::string&, const std::string&) override { return absl::OkStatus(); }
  absl::Status ImportNpy(const std::string&, const std::string&) override { return absl::OkStatus(); }
  absl::Status ReadRow(int, int64_t, std::span<float>) const override { return absl::OkStatus(); }
  absl::Status WriteRow(int, int64_t, std::span<const float>) override { return absl::OkStatus(); }
  std::vector<TableReport> Report() const override { return {}; }
  void ResetStats() override {}
  int64_t EvictCaches() override { return 0; }

  std::vector<Prefetched> prefetched() const {
    std::lock_guard<std::mutex> lock(mu_);
    return prefetched_;
  }
  std::vector<std::string> events() const {
    std::lock_guard<std::mutex> lock(mu_);
    return events_;
  }

 private:
  absl::StatusOr<CheckedBatch> Checked(std::span<const Bags<int32_t>> bags, int64_t id) const {
    std::vector<CheckedBags<int32_t>> tables;
    for (int t = 0; t < num_tables(); ++t) {
      absl::StatusOr<CheckedBags<int32_t>> c = CheckBags(absl::StrCat("t", t), rows(t), bags[t]);
      if (!c.ok()) return c.status();
      tables.push_back(*c);
    }
    return MakeBatch(std::move(tables), id);
  }

  mutable std::mutex mu_;
  std::vector<Prefetched> prefetched_;
  std::vector<std::string> events_;
};

// Sample i: dense {i}, label i % 2, row (i * 7) % kRows of table 0, i % 3 of table 1.
std::shared_ptr<const data::Dataset> MakeDataset(const data::testing::TempDir& dir) {
  const std::string path = dir.File("d.bin");
  auto w = data::DatasetWriter::Create(path, {.num_dense = 1, .table_sizes = {kRows, 3}, .hotness = {1, 1}});
  EXPECT_TRUE(w.ok()) << w.status();
  for (uint64_t i = 0; i < kSamples; ++i) {
    const float dense[1] = {static_cast<float>(i)};
    const std::vector<int32_t> idx = {static_cast<int32_t>(i * 7 % kRows), static_cast<int32_t>(i % 3)};
    EXPECT_TRUE((*w)->Append(static_cast<float>(i % 2), dense, idx).ok());
  }
  EXPECT_TRUE((*w)->Finish().ok());
  auto d = data::Dataset::Open(path);
  EXPECT_TRUE(d.ok()) << d.status();
  return std::shared_ptr<const data::Dataset>(std::move(*d));
}

// Table 0's rows of batch k (samples 4k .. 4k + 3, in file order).
std::vector<int32_t> RowsOfBatch(int64_t k) {
  std::vector<int32_t> rows;
  for (uint64_t i = static_cast<uint64_t>(k) * kBatch; i < static_cast<uint64_t>(k + 1) * kBatch; ++i) {
    rows.push_back(static_cast<int32_t>(i * 7 % kRows));
  }
  return rows;
}

class StepperTest : public ::testing::TestWithParam<int> {};  // prefetch_batches
INSTANTIATE_TEST_SUITE_P(Prefetch, StepperTest, ::testing::Values(0, 1, 3));

// On one process: step k's batch is the loader's k-th, its bags the batch's
// own; every batch up to the run's last step, and none after it, is
// prefetched once per table with its own rows; batch k's step begins after
// its prefetch and ends before step k + 1 begins; an evaluation batch gets
// an id of its own range and its own begin and end.
TEST_P(StepperTest, EveryBatchIsPrefetchedOnceWithItsOwnRowsBeforeItsStep) {
  const int p = GetParam();
  data::testing::TempDir dir;
  absl::StatusOr<std::unique_ptr<data::Loader>> loader = data::Loader::Create(
      MakeDataset(dir), {.batch_size = kBatch, .shuffle = data::Shuffle::kNone, .prefetch = 4, .num_epochs = 0});
  ASSERT_TRUE(loader.ok()) << loader.status();
  RecordingLayer tables;
  constexpr int64_t kSteps = 7;
  {
    absl::StatusOr<std::unique_ptr<Stepper>> made = Stepper::Create(&tables, p);
    ASSERT_TRUE(made.ok()) << made.status();
    Stepper& steps = **made;
    for (int64_t k = 0; k < kSteps; ++k) {
      absl::StatusOr<const StepBatch*> b = steps.BeginTrain(**loader, k, kSteps, nullptr);
      ASSERT_TRUE(b.ok()) << b.status();
      ASSERT_EQ((*b)->view.size, kBatch);
      EXPECT_EQ((*b)->view.dense[0], static_cast<float>(k * kBatch)) << "step " << k;
      ASSERT_EQ((*b)->view.bags.size(), 2u);
      const std::vector<int32_t> rows((*b)->view.bags[0].indices.begin(), (*b)->view.bags[0].indices.end());
      EXPECT_EQ(rows, RowsOfBatch(k));
      // The model gets the step's bags as the cycle checked them, as batch k.
      ASSERT_NE((*b)->view.checked, nullptr);
      EXPECT_EQ((*b)->view.checked->id(), k);
      EXPECT_EQ((*b)->view.checked->tables()[0].bags().indices.data(), (*b)->view.bags[0].indices.data());
      ASSERT_TRUE(steps.EndTrain(k, nullptr).ok());
    }
    ASSERT_TRUE(steps.Drain().ok());
    absl::StatusOr<const StepBatch*> eval = steps.BeginEval(*(*loader)->Next(), nullptr);
    ASSERT_TRUE(eval.ok()) << eval.status();
    ASSERT_TRUE(steps.EndEval(nullptr).ok());
  }

  std::map<std::pair<int64_t, int>, int> times;
  for (const RecordingLayer::Prefetched& f : tables.prefetched()) {
    ++times[{f.id, f.table}];
    if (f.id < kEvalBatchIds && f.table == 0) EXPECT_EQ(f.indices, RowsOfBatch(f.id)) << "batch " << f.id;
  }
  for (int64_t k = 0; k < kSteps; ++k) {
    for (int t = 0; t < 2; ++t) EXPECT_EQ((times[{k, t}]), 1) << "batch " << k << " table " << t;
  }
  for (const auto& [key, n] : times) {
    EXPECT_TRUE(key.first < kSteps || key.first >= kEvalBatchIds) << "batch " << key.first << " after the last step";
  }
  std::vector<std::string> want;
  for (int64_t k = 0; k < kSteps; ++k) {
    want.push_back(absl::StrCat("begin ", k));
    want.push_back(absl::StrCat("end ", k));
  }
  want.push_back(absl::StrCat("begin ", kEvalBatchIds));
  want.push_back(absl::StrCat("end ", kEvalBatchIds));
  EXPECT_EQ(tables.events(), want);
}

}  // namespace
}  // namespace cemb::train
