// EmbeddingLayer (tables/embedding_layer.h): a set of tables of every
// storage kind trained through the step protocol equals the same set in
// DRAM bit for bit; mean pooling scales the lookup and the update by
// 1/|bag|; a bad index is refused before anything is written;
// Save and Load move a table between kinds; the statistics describe
// training only.
#include "tables/embedding_layer.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/random.h"
#include "gtest/gtest.h"
#include "tables/step_cycle.h"
#include "tests/data/test_util.h"

namespace cemb {
namespace {

constexpr int64_t kDim = 16;
constexpr int64_t kRows = 3000;
constexpr int64_t kBatch = 64;
constexpr int64_t kHotness = 3;
constexpr StorageKind kKinds[] = {StorageKind::kDram, StorageKind::kSimple, StorageKind::kStatic,
                                  StorageKind::kDynamic, StorageKind::kSsd};
constexpr int kTables = static_cast<int>(std::size(kKinds));

StorageConfig Storage(StorageKind kind, const std::string& dir, EmbeddingOptimizer optimizer) {
  StorageConfig s{.kind = kind, .slow_tier = TierOptions::Pmem(dir), .cache = {.lower = CacheSize::Fraction(0.05)}};
  // Every batch evicts.
  s.ssd.capacity_bytes = (2 * kBatch * kHotness + 64) * EmbeddingRowBytes(kDim, /*bf16_rows=*/false, optimizer);
  s.ssd.file.directory = dir;
  return s;
}

// One table of each kind, or (all_dram) the same tables in DRAM.
std::unique_ptr<EmbeddingLayer> MakeLayer(const std::string& dir, bool all_dram,
                                          EmbeddingOptimizer optimizer = EmbeddingOptimizer::kSgd) {
  EmbeddingLayerOptions o{.dim = kDim, .optimizer = optimizer, .threads = 1, .seed = 5};
  for (StorageKind kind : kKinds) {
    o.tables.push_back({.rows = kRows, .storage = Storage(all_dram ? StorageKind::kDram : kind, dir, optimizer)});
  }
  absl::StatusOr<std::unique_ptr<EmbeddingLayer>> layer = EmbeddingLayer::Create(o);
  EXPECT_TRUE(layer.ok()) << layer.status();
  return layer.ok() ? std::move(*layer) : nullptr;
}

// Skewed bags of kHotness rows, the same for every table of a batch.
struct Batches {
  explicit Batches(int steps) : offsets(kBatch + 1), indices(steps, std::vector<int32_t>(kBatch * kHotness)) {
    for (int64_t b = 0; b <= kBatch; ++b) offsets[b] = static_cast<int32_t>(b * kHotness);
    Xoshiro256pp rng(SplitMix64::Mix(3, 9));
    for (std::vector<int32_t>& step : indices) {
      for (int32_t& x : step) {
        const double u = static_cast<double>(rng.Below(1 << 20)) / (1 << 20);
        x = static_cast<int32_t>(u * u * kRows);
      }
    }
  }
  std::vector<Bags<int32_t>> Of(int step) const {
    return std::vector<Bags<int32_t>>(kTables, Bags<int32_t>{offsets, indices[step]});
  }
  std::vector<int32_t> offsets;
  std::vector<std::vector<int32_t>> indices;
};

// `steps` steps of a made-up gradient through a StepCycle that prefetches
// one batch ahead.
void Train(EmbeddingLayer* layer, const Batches& batches, int steps) {
  StepCycle cycle(layer, /*prefetch_batches=*/1);
  std::vector<float> out(kBatch * kTables * kDim), grad(out.size());
  for (int k = 0; k < steps; ++k) {
    const std::vector<Bags<int32_t>> bags = batches.Of(k);
    std::vector<std::vector<Bags<int32_t>>> next;
    if (k + 1 < steps) next.push_back(batches.Of(k + 1));
    std::vector<std::span<const Bags<int32_t>>> ahead(next.begin(), next.end());
    ASSERT_TRUE(cycle.Begin(k, bags, ahead).ok());
    ASSERT_TRUE(layer->Lookup(bags, MatrixView{out.data(), kBatch, kTables * kDim, kTables * kDim}).ok());
    for (size_t i = 0; i < out.size(); ++i) grad[i] = 0.5f * out[i] - 0.01f * static_cast<float>(i % 5);
    ASSERT_TRUE(layer->Update(bags, ConstMatrixView{grad.data(), kBatch, kTables * kDim, kTables * kDim}, 0.3f).ok());
    ASSERT_TRUE(cycle.End(k).ok());
  }
  ASSERT_TRUE(cycle.Drain().ok());
}

void ExpectSameRows(const EmbeddingLayer& a, const EmbeddingLayer& b) {
  std::vector<float> x(kDim), y(kDim);
  for (int t = 0; t < kTables; ++t) {
    for (int64_t row = 0; row < kRows; ++row) {
      ASSERT_TRUE(a.ReadRow(t, row, x).ok());
      ASSERT_TRUE(b.ReadRow(t, row, y).ok());
      ASSERT_EQ(x, y) << "table " << t << " (" << StorageKindName(kKinds[t]) << ") row " << row;
    }
  }
}

class EveryOptimizer : public ::testing::TestWithParam<EmbeddingOptimizer> {};
INSTANTIATE_TEST_SUITE_P(EmbeddingLayer, EveryOptimizer,
                         ::testing::Values(EmbeddingOptimizer::kSgd, EmbeddingOptimizer::kRowwiseAdagrad,
                                           EmbeddingOptimizer::kAdagrad),
                         [](const auto& info) { return std::string(EmbeddingOptimizerName(info.param)); });

// With element-wise AdaGrad the accumulators travel with their rows: a
// cache that dropped them on a flush, or a log that lost them on eviction,
// would restart them at zero and the rows would part from DRAM's.
TEST_P(EveryOptimizer, EveryStorageKindTrainsBitIdenticalToDram) {
  data::testing::TempDir dir;
  const Batches batches(20);
  std::unique_ptr<EmbeddingLayer> dram = MakeLayer(dir.path(), /*all_dram=*/true, GetParam());
  std::unique_ptr<EmbeddingLayer> mixed = MakeLayer(dir.path(), /*all_dram=*/false, GetParam());
  ASSERT_NE(dram, nullptr);
  ASSERT_NE(mixed, nullptr);
  EXPECT_FALSE(dram->has_ssd_tables());
  EXPECT_TRUE(mixed->has_ssd_tables());
  Train(dram.get(), batches, 20);
  Train(mixed.get(), batches, 20);

  const std::vector<TableReport> report = mixed->Report();
  ASSERT_EQ(report.size(), static_cast<size_t>(kTables));
  for (int t = 0; t < kTables; ++t) EXPECT_EQ(report[t].storage, StorageKindName(kKinds[t]));
  EXPECT_GT(report[3].stats.lookups(), 0u);           // the dynamic cache saw the steps
  EXPECT_GT(report[4].ssd_stats.dirty_evictions, 0);  // the ssd table wrote back
  EXPECT_EQ(report[4].ssd_stats.sync_fetches, 0);     // every batch was prefetched (ReadRow comes later)
  const absl::StatusOr<std::vector<TableReport>> decoded = DecodeTableReports(EncodeTableReports(report));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->size(), report.size());
  ExpectSameRows(*dram, *mixed);
}

TEST(EmbeddingLayer, AnIndexOutOfRangeIsRefusedBeforeAnyRowIsWritten) {
  data::testing::TempDir dir;
  std::unique_ptr<EmbeddingLayer> layer = MakeLayer(dir.path(), /*all_dram=*/false);
  std::unique_ptr<EmbeddingLayer> untouched = MakeLayer(dir.path(), /*all_dram=*/true);
  ASSERT_NE(layer, nullptr);
  Batches batches(1);
  batches.indices[0][7] = static_cast<int32_t>(kRows);  // one past the end
  const std::vector<Bags<int32_t>> bags = batches.Of(0);
  std::vector<float> out(kBatch * kTables * kDim, 0.0f), grad(out.size(), 1.0f);
  const absl::Status lookup = layer->Lookup(bags, MatrixView{out.data(), kBatch, kTables * kDim, kTables * kDim});
  EXPECT_EQ(lookup.code(), absl::StatusCode::kOutOfRange) << lookup;
  EXPECT_TRUE(std::string(lookup.message()).starts_with("table emb0, bag 2, index 1: ")) << lookup;  // index 7: bag 2's second
  EXPECT_NE(lookup.message().find("3000"), std::string::npos) << lookup;
  // The ssd table's prefetch (the first to see a batch's rows) says it the
  // same way, before it pins anything.
  const absl::Status prefetch = layer->Prefetch(0, 4, bags[4]);
  EXPECT_EQ(prefetch.code(), absl::StatusCode::kOutOfRange) << prefetch;
  const std::string p(prefetch.message()), l(lookup.message());
  EXPECT_EQ(p.substr(p.find(',')), l.substr(l.find(',')));
  EXPECT_TRUE(std::string(prefetch.message()).starts_with("table emb4, ")) << prefetch;
  const Batches good(1);  // batch 0 was not pinned: it may be prefetched now
  const absl::Status again = layer->Prefetch(0, 4, good.Of(0)[4]);
  EXPECT_TRUE(again.ok()) << again;
  EXPECT_TRUE(layer->BeginStep(0).ok());
  EXPECT_TRUE(layer->EndStep(0).ok());
  const absl::Status update =
      layer->Update(bags, ConstMatrixView{grad.data(), kBatch, kTables * kDim, kTables * kDim}, 0.3f);
  EXPECT_EQ(update.code(), absl::StatusCode::kOutOfRange) << update;
  for (float v : out) ASSERT_EQ(v, 0.0f);
  ExpectSameRows(*untouched, *layer);
}

// A step's Lookup and Update with bags other than the ones prefetched (other
// spans, other rows): they are checked and planned anew, not taken for the
// prefetched batch's. An index out of range in them is refused; in range,
// every kind ends with DRAM's rows (the ssd table reads the rows it was not
// given ahead when they are looked up).
TEST(EmbeddingLayer, BagsOtherThanThePrefetchedOnesAreCheckedAndPlannedAnew) {
  data::testing::TempDir dir;
  std::unique_ptr<EmbeddingLayer> dram = MakeLayer(dir.path(), /*all_dram=*/true);
  std::unique_ptr<EmbeddingLayer> mixed = MakeLayer(dir.path(), /*all_dram=*/false);
  ASSERT_NE(dram, nullptr);
  ASSERT_NE(mixed, nullptr);
  const Batches prefetched(3), used(6);  // used: steps 3..5 are other rows
  std::vector<float> want(kBatch * kTables * kDim), got(want.size()), grad(want.size());
  const MatrixView want_view{want.data(), kBatch, kTables * kDim, kTables * kDim};
  const MatrixView got_view{got.data(), kBatch, kTables * kDim, kTables * kDim};
  for (int k = 0; k < 3; ++k) {
    for (int t = 0; t < kTables; ++t) ASSERT_TRUE(mixed->Prefetch(k, t, prefetched.Of(k)[t]).ok());
    ASSERT_TRUE(mixed->BeginStep(k).ok());
    // Other spans and other rows than the prefetched batch's.
    std::vector<int32_t> indices = used.indices[3 + k];
    std::vector<Bags<int32_t>> bags(kTables, Bags<int32_t>{used.offsets, indices});
    if (k == 0) {  // out of range: refused by the lookup, though batch 0's plan is in range
      indices[5] = static_cast<int32_t>(kRows);
      EXPECT_EQ(mixed->Lookup(bags, got_view).code(), absl::StatusCode::kOutOfRange);
      indices[5] = used.indices[3][5];
    }
    ASSERT_TRUE(dram->Lookup(bags, want_view).ok());
    ASSERT_TRUE(mixed->Lookup(bags, got_view).ok());
    ASSERT_EQ(got, want) << "step " << k;
    for (size_t i = 0; i < want.size(); ++i) grad[i] = 0.5f * want[i] - 0.01f * static_cast<float>(i % 7);
    const ConstMatrixView g{grad.data(), kBatch, kTables * kDim, kTables * kDim};
    // The update's bags: the lookup's rows again, in new spans.
    const std::vector<int32_t> again = indices;
    const std::vector<Bags<int32_t>> update_bags(kTables, Bags<int32_t>{used.offsets, again});
    ASSERT_TRUE(dram->Update(update_bags, g, 0.3f).ok());
    ASSERT_TRUE(mixed->Update(update_bags, g, 0.3f).ok());
    ASSERT_TRUE(mixed->EndStep(k).ok());
  }
  ExpectSameRows(*dram, *mixed);
  EXPECT_GT(mixed->Report()[4].ssd_stats.sync_fetches, 0);  // rows not prefetched were read when looked up
}

// Mean pooling: a bag's lookup is its rows' sum times 1/|bag| (an empty bag
// zeros) and the update scales each of its rows' gradient by the same, in
// every storage kind (an ssd table's update plan is made by its prefetch).
TEST(EmbeddingLayer, MeanPoolingScalesTheLookupAndTheUpdateByOneOverTheBagLength) {
  data::testing::TempDir dir;
  EmbeddingLayerOptions o{.dim = kDim, .pooling = Pooling::kMean, .threads = 1, .seed = 5};
  for (StorageKind kind : kKinds) o.tables.push_back({.rows = kRows, .storage = Storage(kind, dir.path(), {})});
  absl::StatusOr<std::unique_ptr<EmbeddingLayer>> made = EmbeddingLayer::Create(o);
  ASSERT_TRUE(made.ok()) << made.status();
  EmbeddingLayer& layer = **made;
  // Bag 0: rows 1, 2, 1; bag 1: empty; bag 2: row 3.
  const std::vector<int32_t> offsets = {0, 3, 3, 4}, indices = {1, 2, 1, 3};
  const std::vector<Bags<int32_t>> bags(kTables, Bags<int32_t>{offsets, indices});
  std::vector<std::vector<float>> w(kTables * 4, std::vector<float>(kDim));
  for (int t = 0; t < kTables; ++t) {
    for (int r = 0; r < 4; ++r) ASSERT_TRUE(layer.ReadRow(t, r, w[t * 4 + r]).ok());
  }
  const int64_t width = kTables * kDim;
  std::vector<float> out(3 * width, -1.0f), grad(3 * width);
  for (size_t i = 0; i < grad.size(); ++i) grad[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
  StepCycle cycle(&layer, /*prefetch_batches=*/1);
  ASSERT_TRUE(cycle.Begin(0, bags, {}).ok());
  ASSERT_TRUE(layer.Lookup(bags, MatrixView{out.data(), 3, width, width}).ok());
  ASSERT_TRUE(layer.Update(bags, ConstMatrixView{grad.data(), 3, width, width}, 0.5f).ok());
  ASSERT_TRUE(cycle.End(0).ok());
  ASSERT_TRUE(cycle.Drain().ok());
  std::vector<float> row(kDim);
  for (int t = 0; t < kTables; ++t) {
    const std::string kind = StorageKindName(kKinds[t]);
    auto at = [&](const std::vector<float>& m, int64_t b, int64_t c) { return m[b * width + t * kDim + c]; };
    for (int64_t c = 0; c < kDim; ++c) {
      const float* w1 = w[t * 4 + 1].data();
      EXPECT_NEAR(at(out, 0, c), (2 * w1[c] + w[t * 4 + 2][c]) / 3, 1e-6) << kind << " column " << c;
      EXPECT_EQ(at(out, 1, c), 0.0f) << kind;
      EXPECT_NEAR(at(out, 2, c), w[t * 4 + 3][c], 1e-6) << kind;
    }
    // Row 1 twice in bag 0 (2/3 of its gradient), row 2 once (1/3), row 3 alone in bag 2.
    for (int r = 0; r < 4; ++r) {
      ASSERT_TRUE(layer.ReadRow(t, r, row).ok());
      for (int64_t c = 0; c < kDim; ++c) {
        const float g = r == 1 ? 2 * at(grad, 0, c) / 3 : r == 2 ? at(grad, 0, c) / 3 : r == 3 ? at(grad, 2, c) : 0;
        EXPECT_NEAR(row[c], w[t * 4 + r][c] - 0.5f * g, 1e-6) << kind << " row " << r << " column " << c;
      }
    }
  }
}

// LookupShared: what Lookup writes, from several threads at once, each
// into its own output (no buffer of the layer's), for every kind but ssd.
TEST(EmbeddingLayer, LookupSharedWritesWhatLookupWritesFromManyThreads) {
  data::testing::TempDir dir;
  EmbeddingLayerOptions o{.dim = kDim, .threads = 1, .seed = 5};
  for (StorageKind kind : kKinds) {
    if (kind != StorageKind::kSsd) o.tables.push_back({.rows = kRows, .storage = Storage(kind, dir.path(), {})});
  }
  const int tables = static_cast<int>(o.tables.size());
  absl::StatusOr<std::unique_ptr<EmbeddingLayer>> layer = EmbeddingLayer::Create(o);
  ASSERT_TRUE(layer.ok()) << layer.status();
  const Batches batches(4);
  auto bags_of = [&](int k) {
    std::vector<Bags<int32_t>> b = batches.Of(k);
    b.resize(tables);
    return b;
  };
  const int64_t width = tables * kDim;
  std::vector<std::vector<float>> expected(4, std::vector<float>(kBatch * width));
  for (int k = 0; k < 4; ++k) {
    ASSERT_TRUE((*layer)->Lookup(bags_of(k), MatrixView{expected[k].data(), kBatch, width, width}).ok());
  }
  std::vector<std::vector<float>> got(8, std::vector<float>(kBatch * width, -1.f));
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      const std::vector<Bags<int32_t>> bags = bags_of(i % 4);
      EXPECT_TRUE((*layer)->LookupShared(bags, MatrixView{got[i].data(), kBatch, width, width}, 1).ok());
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < 8; ++i) EXPECT_EQ(got[i], expected[i % 4]) << i;
  // An index out of range is named as Lookup names it; nothing is written.
  Batches bad(1);
  bad.indices[0][7] = static_cast<int32_t>(kRows);
  std::vector<Bags<int32_t>> bad_bags = bad.Of(0);
  bad_bags.resize(tables);
  std::vector<float> out(kBatch * width, 0.f);
  const absl::Status s = (*layer)->LookupShared(bad_bags, MatrixView{out.data(), kBatch, width, width}, 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << s;
  EXPECT_TRUE(std::string(s.message()).starts_with("table emb0, bag 2, index 1: ")) << s;
  for (float v : out) ASSERT_EQ(v, 0.f);
  // An ssd table's rows are pinned by the step protocol: refused.
  std::unique_ptr<EmbeddingLayer> mixed = MakeLayer(dir.path(), /*all_dram=*/false);
  ASSERT_NE(mixed, nullptr);
  std::vector<float> all(kBatch * kTables * kDim);
  EXPECT_TRUE(absl::IsFailedPrecondition(
      mixed->LookupShared(batches.Of(0), MatrixView{all.data(), kBatch, kTables * kDim, kTables * kDim}, 1)));
}

// The optimizer state moves too: training on after the move equals training
// on without it.
TEST_P(EveryOptimizer, SaveThenLoadMovesEveryTableToAnotherKind) {
  data::testing::TempDir dir;
  const Batches batches(12);
  std::unique_ptr<EmbeddingLayer> mixed = MakeLayer(dir.path(), /*all_dram=*/false, GetParam());
  ASSERT_NE(mixed, nullptr);
  Train(mixed.get(), batches, 8);
  ASSERT_TRUE(mixed->Save(dir.path(), "ckpt.").ok());
  std::unique_ptr<EmbeddingLayer> dram = MakeLayer(dir.path(), /*all_dram=*/true, GetParam());
  ASSERT_NE(dram, nullptr);
  const absl::Status loaded = dram->Load(dir.path(), "ckpt.");
  ASSERT_TRUE(loaded.ok()) << loaded;
  ExpectSameRows(*mixed, *dram);
  Batches later(12);
  later.indices.erase(later.indices.begin(), later.indices.begin() + 8);
  Train(mixed.get(), later, 4);
  Train(dram.get(), later, 4);
  ExpectSameRows(*mixed, *dram);
  // Back from DRAM's rows files into every kind, the state with them.
  ASSERT_TRUE(dram->Save(dir.path(), "back.").ok());
  std::unique_ptr<EmbeddingLayer> again = MakeLayer(dir.path(), /*all_dram=*/false, GetParam());
  ASSERT_NE(again, nullptr);
  ASSERT_TRUE(again->Load(dir.path(), "back.").ok());
  Train(dram.get(), later, 4);
  Train(again.get(), later, 4);
  ExpectSameRows(*dram, *again);
  const absl::Status missing = dram->Load(dir.path(), "nothing.");
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("nothing.0"), std::string::npos) << missing;
}

// The cache report describes training: initialising a cached table (every
// base row written once) is not counted as slow-tier traffic. The library
// itself leaves it out (InitUniform writes through Access::kWrite); the
// layer does not reset the statistics. The static policy's fill is the
// cache's own work: it reads the filled rows once, and says so.
TEST(EmbeddingLayer, StatisticsStartAtZeroAfterInitialisation) {
  for (StorageKind kind : {StorageKind::kDynamic, StorageKind::kStatic}) {
    EmbeddingLayerOptions o;
    o.dim = 16;
    o.tables.push_back({.rows = 5000, .storage = {.kind = kind, .cache = {.lower = CacheSize::Fraction(0.1)}}});
    absl::StatusOr<std::unique_ptr<EmbeddingLayer>> layer = EmbeddingLayer::Create(o);
    ASSERT_TRUE(layer.ok()) << layer.status();
    const std::vector<TableReport> reports = (*layer)->Report();
    ASSERT_EQ(reports.size(), 1u);
    EXPECT_TRUE(reports[0].cached);
    const CacheStats& s = reports[0].stats;
    EXPECT_EQ(s.lookups(), 0u);
    EXPECT_EQ(s.update_hits() + s.base_updates(), 0u);
    if (kind == StorageKind::kStatic) {
      EXPECT_GT(s.cold.rows_filled, 0u);
    }
    EXPECT_EQ(s.slow_bytes_read(), s.cold.rows_filled * s.row_bytes);
    EXPECT_EQ(s.slow_bytes_written(), 0u);
  }
}

}  // namespace
}  // namespace cemb
