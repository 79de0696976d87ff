// StepCycle over ssd tables (tables/step_cycle.h): its prefetcher thread's
// Prefetch of the next batches (slot choice, eviction, the write-back of
// dirty victims, the reads) runs while the step's kernels read and update
// the rows the current batch pinned, on a pool so small that every batch
// evicts. The tables must end bit-identical to DRAM tables trained the same
// way. CI runs it under ThreadSanitizer too (label tables_tsan): the
// embedding kernels run on one thread (threads = 1) so that the only
// concurrency is the cycle's, which TSan then checks.
#include "tables/step_cycle.h"

#include <cmath>
#include <memory>
#include <vector>

#include "base/random.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "gtest/gtest.h"
#include "tables/embedding_layer.h"
#include "tests/data/test_util.h"

namespace cemb {
namespace {

constexpr int kTables = 3;
constexpr int64_t kRows = 8000;
constexpr int64_t kDim = 16;
constexpr uint32_t kBatch = 256;
constexpr uint32_t kHotness = 2;
constexpr int kSteps = 30;
constexpr int kPrefetch = 2;

// The batches a test trains on: `batch` samples with bags of hotness[t]
// indices into table t.
struct Shape {
  uint32_t batch = kBatch;
  std::vector<uint32_t> hotness = data::UniformHotness(kTables, kHotness);
};

// Skewed indices (the square of a uniform draw), so batches share hot rows
// and miss cold ones.
std::shared_ptr<const data::Dataset> MakeDataset(const std::string& path, const Shape& shape = {}) {
  data::DatasetSpec spec{.num_dense = 1, .table_sizes = std::vector<uint64_t>(kTables, kRows), .hotness = shape.hotness};
  auto w = data::DatasetWriter::Create(path, spec);
  EXPECT_TRUE(w.ok()) << w.status();
  Xoshiro256pp rng(SplitMix64::Mix(5, 7));
  std::vector<int32_t> idx(spec.indices_per_sample());
  const float dense[1] = {0};
  for (int64_t i = 0; i < int64_t{shape.batch} * kSteps; ++i) {
    for (int32_t& x : idx) {
      const double u = static_cast<double>(rng.Below(1 << 20)) / (1 << 20);
      x = static_cast<int32_t>(u * u * kRows);
    }
    EXPECT_TRUE((*w)->Append(0, dense, idx).ok());
  }
  EXPECT_TRUE((*w)->Finish().ok());
  absl::StatusOr<std::unique_ptr<data::Dataset>> d = data::Dataset::Open(path);
  EXPECT_TRUE(d.ok()) << d.status();
  return std::move(*d);
}

// How the next batch reaches the prefetchers: with Begin (dlrm-train's
// loader peeks), or by PrefetchNow between the step's lookup and update (a
// PyTorch loop's prefetch(next) between forward and backward).
enum class Handoff { kAtBegin, kDuringStep };

// Trains kSteps steps of a made-up gradient (a function of the lookup) on
// tables stored as `storage` says, through a StepCycle.
std::unique_ptr<EmbeddingLayer> Train(std::shared_ptr<const data::Dataset> dataset, const StorageConfig& storage,
                                      Handoff handoff = Handoff::kAtBegin, uint32_t batch = kBatch) {
  EmbeddingLayerOptions o{.dim = kDim, .threads = 1, .seed = 11};
  for (int t = 0; t < kTables; ++t) o.tables.push_back({.rows = kRows, .storage = storage});
  absl::StatusOr<std::unique_ptr<EmbeddingLayer>> layer = EmbeddingLayer::Create(o);
  EXPECT_TRUE(layer.ok()) << layer.status();
  absl::StatusOr<std::unique_ptr<data::Loader>> loader =
      data::Loader::Create(dataset, {.batch_size = batch, .shuffle = data::Shuffle::kNone, .prefetch = kPrefetch});
  EXPECT_TRUE(loader.ok()) << loader.status();
  StepCycle cycle(layer->get(), kPrefetch);
  std::vector<float> out(size_t{batch} * kTables * kDim), grad(out.size());
  std::vector<Bags<int32_t>> bags(kTables);
  std::vector<std::vector<Bags<int32_t>>> ahead_bags(kPrefetch, std::vector<Bags<int32_t>>(kTables));
  std::vector<std::span<const Bags<int32_t>>> ahead(kPrefetch);
  for (int k = 0; k < kSteps; ++k) {
    const data::Batch* b = (*loader)->Next();
    EXPECT_NE(b, nullptr);
    if (b == nullptr) break;
    for (uint32_t t = 0; t < kTables; ++t) bags[t] = Bags<int32_t>{b->offsets(t), b->indices(t)};
    const size_t left = static_cast<size_t>(kSteps - k - 1);
    std::span<const data::Batch* const> peeked = (*loader)->Peek(std::min<size_t>(kPrefetch, left));
    for (size_t i = 0; i < peeked.size(); ++i) {
      for (uint32_t t = 0; t < kTables; ++t) ahead_bags[i][t] = Bags<int32_t>{peeked[i]->offsets(t), peeked[i]->indices(t)};
      ahead[i] = ahead_bags[i];
    }
    const size_t handed = handoff == Handoff::kAtBegin ? peeked.size() : 0;
    EXPECT_TRUE(cycle.Begin(k, bags, std::span(ahead.data(), handed), nullptr).ok());
    const MatrixView view{out.data(), batch, kTables * kDim, kTables * kDim};
    EXPECT_TRUE((*layer)->Lookup(bags, view).ok());
    if (handoff == Handoff::kDuringStep && !peeked.empty()) {
      EXPECT_TRUE(cycle.PrefetchNow(k + 1, ahead[0]).ok());
    }
    for (size_t i = 0; i < out.size(); ++i) grad[i] = 0.25f * out[i] + 0.01f * static_cast<float>(i % 7);
    const ConstMatrixView g{grad.data(), batch, kTables * kDim, kTables * kDim};
    EXPECT_TRUE((*layer)->Update(bags, g, /*lr=*/0.5f).ok());
    EXPECT_TRUE(cycle.End(k, nullptr).ok());
  }
  EXPECT_TRUE(cycle.Drain().ok());
  return std::move(*layer);
}

class StepCycleTest : public ::testing::TestWithParam<Handoff> {};

TEST_P(StepCycleTest, PrefetcherThreadEvictingWhileTheStepUpdatesEqualsDram) {
  data::testing::TempDir dir;
  std::shared_ptr<const data::Dataset> dataset = MakeDataset(dir.File("d.bin"));
  std::unique_ptr<EmbeddingLayer> dram = Train(dataset, StorageConfig{});
  StorageConfig ssd{.kind = StorageKind::kSsd};
  // The rows of P + 1 batches and a few more: every batch evicts.
  ssd.ssd.capacity_bytes = ((kPrefetch + 1) * int64_t{kBatch} * kHotness + 64) * kDim * 4;
  ssd.ssd.file.directory = dir.path();
  std::unique_ptr<EmbeddingLayer> tier = Train(dataset, ssd, GetParam());
  ASSERT_NE(dram, nullptr);
  ASSERT_NE(tier, nullptr);

  std::vector<TableReport> report = tier->Report();
  ASSERT_EQ(report.size(), static_cast<size_t>(kTables));
  for (const TableReport& r : report) {
    EXPECT_GT(r.ssd_stats.dirty_evictions, 0) << r.name;  // the write-back ran
    EXPECT_GT(r.ssd_stats.fetched_rows, 0) << r.name;     // rows came back from the file
    EXPECT_EQ(r.ssd_stats.sync_fetches, 0) << r.name;     // every batch was prefetched
  }
  std::vector<float> a(kDim), b(kDim);
  for (int t = 0; t < kTables; ++t) {
    for (int64_t row = 0; row < kRows; ++row) {
      ASSERT_TRUE(dram->ReadRow(t, row, a).ok());
      ASSERT_TRUE(tier->ReadRow(t, row, b).ok());
      ASSERT_EQ(a, b) << "table " << t << " row " << row;  // bit for bit
    }
  }
}

// Bags of up to 100 rows per table (MLPerf DLRM-DCNv2's largest hotness),
// next to one-hot and 7-hot tables: the ssd tier's prefetch pins each
// batch's up to batch x 100 rows of table 0 and evicts between batches, and
// training equals the DRAM table's bit for bit.
TEST_P(StepCycleTest, BagsOfAHundredRowsPrefetchAndEqualDram) {
  data::testing::TempDir dir;
  const Shape shape{.batch = 16, .hotness = {100, 1, 7}};
  std::shared_ptr<const data::Dataset> dataset = MakeDataset(dir.File("d.bin"), shape);
  std::unique_ptr<EmbeddingLayer> dram = Train(dataset, StorageConfig{}, GetParam(), shape.batch);
  StorageConfig ssd{.kind = StorageKind::kSsd};
  // The rows of P + 1 batches of table 0 (4800 of its 8000) and a few more.
  ssd.ssd.capacity_bytes = ((kPrefetch + 1) * int64_t{shape.batch} * 100 + 64) * kDim * 4;
  ssd.ssd.file.directory = dir.path();
  std::unique_ptr<EmbeddingLayer> tier = Train(dataset, ssd, GetParam(), shape.batch);
  ASSERT_NE(dram, nullptr);
  ASSERT_NE(tier, nullptr);
  const std::vector<TableReport> report = tier->Report();
  ASSERT_EQ(report.size(), static_cast<size_t>(kTables));
  EXPECT_GT(report[0].ssd_stats.dirty_evictions, 0);  // the 100-row bags do not fit: rows went back and forth
  EXPECT_GT(report[0].ssd_stats.fetched_rows, 0);
  for (const TableReport& r : report) EXPECT_EQ(r.ssd_stats.sync_fetches, 0) << r.name;
  std::vector<float> a(kDim), b(kDim);
  for (int t = 0; t < kTables; ++t) {
    for (int64_t row = 0; row < kRows; ++row) {
      ASSERT_TRUE(dram->ReadRow(t, row, a).ok());
      ASSERT_TRUE(tier->ReadRow(t, row, b).ok());
      for (float x : b) ASSERT_TRUE(std::isfinite(x)) << "table " << t << " row " << row;
      ASSERT_EQ(a, b) << "table " << t << " row " << row;  // bit for bit
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Handoffs, StepCycleTest, ::testing::Values(Handoff::kAtBegin, Handoff::kDuringStep),
                         [](const ::testing::TestParamInfo<Handoff>& info) {
                           return info.param == Handoff::kAtBegin ? "AtBegin" : "DuringStep";
                         });

}  // namespace
}  // namespace cemb
