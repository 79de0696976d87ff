// The DRAM budget's split (tables/dram_budget.h): what every table needs
// first, then the sampled traffic, then size; cached tables without a given
// size take part; layers of different row sizes share one budget.
#include "tables/dram_budget.h"

#include <cmath>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cemb {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kDim = 16;  // fp32: 64-byte rows and slots
constexpr int64_t kSsdCost = 64 + kSsdSlotMetadataBytes;
constexpr int64_t kCacheCost = 64 + 8;

EmbeddingLayerOptions Tables(std::vector<std::pair<int64_t, StorageKind>> tables) {
  EmbeddingLayerOptions o;
  o.dim = kDim;
  for (const auto& [rows, kind] : tables) {
    EmbeddingTableSpec spec;
    spec.rows = rows;
    spec.storage.kind = kind;
    o.tables.push_back(spec);
  }
  return o;
}

int64_t SsdFixed(int64_t rows) { return SsdFixedDramBytes(rows, 64, SsdOptions{}, /*evicts=*/true); }

DramBudgetRequest Request(int64_t budget) {
  return {.budget = budget, .where = "x.yaml: model.dram_budget: ", .batch_size = 10,
          .prefetch_batches = 1};
}

TEST(DramBudget, HotRowsOfOneTableWinOverColdRowsOfABiggerOne) {
  // Two ssd tables; table 1 is ten times bigger, but in the sample table 0
  // has 1,000 rows looked up 50 times each and table 1 10,000 rows once.
  EmbeddingLayerOptions emb = Tables({{100000, StorageKind::kSsd}, {1000000, StorageKind::kSsd}});
  TableTraffic traffic{.samples = 20000, .counts = {std::vector<uint32_t>(1000, 50), std::vector<uint32_t>(10000, 1)}};
  const int64_t need = SsdFixed(100000) + SsdFixed(1000000) + 2 * 20 * kSsdCost;  // 2 batches of 10 pinned
  // Room for 1,500 more rows: table 0's 980 sampled rows beyond its 20 pinned
  // come first, then table 1's.
  absl::StatusOr<DramSplit> split = SplitDramBudget(Request(need + 1500 * kSsdCost), &traffic, emb);
  ASSERT_TRUE(split.ok()) << split.status();
  ASSERT_EQ(split->shares.size(), 2u);
  EXPECT_EQ(split->sampled, 20000u);
  EXPECT_EQ(split->shares[0].by_traffic, 980 * 64);
  EXPECT_EQ(split->shares[1].by_traffic, (1500 - 980) * 64);
  EXPECT_EQ(emb.tables[0].storage.ssd.capacity_bytes, 1000 * 64);
  EXPECT_EQ(emb.tables[1].storage.ssd.capacity_bytes, (20 + 520) * 64);
  EXPECT_DOUBLE_EQ(split->shares[0].sampled_hit_rate, 1.0);
  EXPECT_DOUBLE_EQ(split->shares[1].sampled_hit_rate, 540.0 / 10000.0);
  EXPECT_LE(split->used, need + 1500 * kSsdCost);

  // Without a sample the same budget goes by size: table 1 gets ten times
  // table 0's share.
  EmbeddingLayerOptions by_size = Tables({{100000, StorageKind::kSsd}, {1000000, StorageKind::kSsd}});
  absl::StatusOr<DramSplit> s2 = SplitDramBudget(Request(need + 1500 * kSsdCost), nullptr, by_size);
  ASSERT_TRUE(s2.ok()) << s2.status();
  EXPECT_EQ(s2->sampled, 0u);
  EXPECT_TRUE(std::isnan(s2->shares[0].sampled_hit_rate));
  const double extra0 = static_cast<double>(by_size.tables[0].storage.ssd.capacity_bytes / 64 - 20);
  const double extra1 = static_cast<double>(by_size.tables[1].storage.ssd.capacity_bytes / 64 - 20);
  EXPECT_NEAR(extra1 / extra0, 10.0, 0.2);
}

TEST(DramBudget, WhatTheSampleDoesNotNeedGoesBySize) {
  // Every sampled row fits: the rest is shared by size, capped at the rows.
  EmbeddingLayerOptions emb = Tables({{1000, StorageKind::kSsd}, {100000, StorageKind::kSsd}});
  TableTraffic traffic{.samples = 100, .counts = {std::vector<uint32_t>(50, 2), std::vector<uint32_t>(100, 1)}};
  absl::StatusOr<DramSplit> split = SplitDramBudget(Request(int64_t{64} << 20), &traffic, emb);
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_EQ(emb.tables[0].storage.ssd.capacity_bytes, 1000 * 64);    // all of its rows
  EXPECT_EQ(emb.tables[1].storage.ssd.capacity_bytes, 100000 * 64);  // all of its rows
  EXPECT_EQ(split->shares[0].by_traffic, 30 * 64);                   // 50 sampled - 20 pinned
}

TEST(DramBudget, CachedTablesWithoutASizeTakePartAndGivenSizesAreCharged) {
  // Table 0 ssd, table 1 dynamic (size from the budget), table 2 dynamic
  // with a given 10% cache, table 3 in DRAM (not in the budget).
  EmbeddingLayerOptions emb = Tables({{10000, StorageKind::kSsd},
                                      {10000, StorageKind::kDynamic},
                                      {10000, StorageKind::kDynamic},
                                      {10000, StorageKind::kDram}});
  emb.tables[2].storage.cache.lower = CacheSize::Fraction(0.1);
  emb.tables[2].storage.cache.slack = CacheSize::Bytes(0);
  DramBudgetRequest r = Request(int64_t{1} << 20);
  r.cache_size_given = {false, false, true, false};
  absl::StatusOr<DramSplit> split = SplitDramBudget(r, nullptr, emb);
  ASSERT_TRUE(split.ok()) << split.status();
  ASSERT_EQ(split->shares.size(), 2u);
  EXPECT_EQ(split->shares[0].table, 0);
  EXPECT_EQ(split->shares[1].table, 1);
  const CacheOptions& c = emb.tables[1].storage.cache;
  ASSERT_GE(c.lower.bytes, 64);                // a lower mark of at least a row
  EXPECT_EQ(c.slack.bytes, 10 * 64);           // one batch of admissions
  EXPECT_EQ(c.lower.bytes + c.slack.bytes, split->shares[1].bytes);
  EXPECT_EQ(emb.tables[2].storage.cache.lower.fraction, 0.1);  // kept
  const int64_t given = 64000 + 8 * 10000;                       // 10% of 640,000 bytes + pointer words
  EXPECT_LE(split->used, int64_t{1} << 20);
  EXPECT_GT(split->used, (int64_t{1} << 20) - 2 * kSsdCost);
  EXPECT_EQ(split->used, given + SsdFixed(10000) + emb.tables[0].storage.ssd.capacity_bytes / 64 * kSsdCost +
                             8 * 10000 + split->shares[1].bytes / 64 * kCacheCost);
}

// A cache counts its rows in slots (SlotBytes): an fp32 table of dim 13
// (52-byte rows, 56-byte slots) is planned in slots, so that the cache holds
// the rows the split counted and its slack a whole batch of admissions.
TEST(DramBudget, ACachedTableOfOddDimIsPlannedInSlots) {
  EmbeddingLayerOptions emb = Tables({{10000, StorageKind::kDynamic}});
  emb.dim = 13;
  constexpr int64_t kBudget = 300000;  // about a third of the rows
  absl::StatusOr<DramSplit> split = SplitDramBudget(Request(kBudget), nullptr, emb);
  ASSERT_TRUE(split.ok()) << split.status();
  constexpr int64_t kSlot = SlotBytes(13 * 4);
  static_assert(kSlot == 56);
  const CacheOptions& c = emb.tables[0].storage.cache;
  EXPECT_EQ(c.slack.bytes, 10 * kSlot);  // one batch of admissions
  EXPECT_EQ(c.lower.bytes % kSlot, 0);
  const int64_t rows = (c.lower.bytes + c.slack.bytes) / kSlot;  // what the cache will hold
  EXPECT_EQ(split->shares[0].bytes, rows * kSlot);
  EXPECT_EQ(split->used, 8 * 10000 + rows * (kSlot + kCacheSlotMetadataBytes));
  EXPECT_LE(split->used, kBudget);
  EXPECT_GT(split->used, kBudget - (kSlot + kCacheSlotMetadataBytes));  // the whole budget
}

TEST(DramBudget, TooSmallNamesTheBudgetAndTheBytesNeeded) {
  EmbeddingLayerOptions emb = Tables({{100000, StorageKind::kSsd}, {5000, StorageKind::kStatic}});
  const int64_t need = SsdFixed(100000) + 20 * kSsdCost + 8 * 5000 + 11 * kCacheCost;
  absl::StatusOr<DramSplit> split = SplitDramBudget(Request(need - 1), nullptr, emb);
  ASSERT_FALSE(split.ok());
  EXPECT_THAT(std::string(split.status().message()),
              HasSubstr(absl::StrCat("x.yaml: model.dram_budget: ")));
  EXPECT_THAT(std::string(split.status().message()), HasSubstr("; and 1 cached table(s) without a cache size: 11 rows each"));
  EXPECT_THAT(std::string(split.status().message()), HasSubstr(absl::StrCat("it needs at least ", need, " bytes")));
  EmbeddingLayerOptions again = Tables({{100000, StorageKind::kSsd}, {5000, StorageKind::kStatic}});
  EXPECT_TRUE(SplitDramBudget(Request(need), nullptr, again).ok());
}

// Each table pins the rows of its own bags: batch 10, prefetch 1, hotness
// {1, 100, 7}: 20, 2000 and 140 rows; the need is their sum (and a
// budget of exactly it gives each table just those), the message names the
// largest batch, and a hotness list of another length is refused.
TEST(DramBudget, EachTablePinsBatchTimesItsOwnHotness) {
  auto emb = [] {
    return Tables({{100000, StorageKind::kSsd}, {100000, StorageKind::kSsd}, {100000, StorageKind::kSsd}});
  };
  DramBudgetRequest request = Request(0);
  request.hotness = {1, 100, 7};
  const int64_t need = 3 * SsdFixed(100000) + (20 + 2000 + 140) * kSsdCost;
  request.budget = need - 1;
  EmbeddingLayerOptions small = emb();
  absl::StatusOr<DramSplit> refused = SplitDramBudget(request, nullptr, small);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("2 batches of up to 1000 distinct rows"));
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr(absl::StrCat("it needs at least ", need, " bytes")));
  request.budget = need;
  EmbeddingLayerOptions exact = emb();
  ASSERT_TRUE(SplitDramBudget(request, nullptr, exact).ok());
  EXPECT_EQ(exact.tables[0].storage.ssd.capacity_bytes, 20 * 64);
  EXPECT_EQ(exact.tables[1].storage.ssd.capacity_bytes, 2000 * 64);
  EXPECT_EQ(exact.tables[2].storage.ssd.capacity_bytes, 140 * 64);
  request.hotness = {1, 100};
  EmbeddingLayerOptions wrong = emb();
  EXPECT_THAT(std::string(SplitDramBudget(request, nullptr, wrong).status().message()),
              HasSubstr("a hotness for 2 tables, but 3 tables"));
}

TEST(DramBudget, TablesOfDifferentRowSizesShareOneBudget) {
  // An ssd table of 256-byte rows and one of 64-byte rows, as many rows
  // each, by size: the DRAM they get (slots and their metadata) goes 4:1,
  // as their bytes do.
  EmbeddingTableSpec wide{.rows = 10000, .storage = {.kind = StorageKind::kSsd}};
  EmbeddingTableSpec narrow{.rows = 10000, .storage = {.kind = StorageKind::kSsd}};
  const BudgetTable tables[] = {{.spec = &wide, .row_bytes = 256}, {.spec = &narrow, .row_bytes = 64}};
  DramBudgetRequest request = Request(int64_t{2} << 20);
  request.prefetch_name = "prefetch_batches";
  absl::StatusOr<DramSplit> split = SplitDramBudget(request, nullptr, tables);
  ASSERT_TRUE(split.ok()) << split.status();
  ASSERT_EQ(split->shares.size(), 2u);
  const double wide_rows = static_cast<double>(wide.storage.ssd.capacity_bytes) / 256;
  const double narrow_rows = static_cast<double>(narrow.storage.ssd.capacity_bytes) / 64;
  EXPECT_GT(wide_rows, 1000);
  EXPECT_NEAR(wide_rows * (256 + kSsdSlotMetadataBytes) / (narrow_rows * (64 + kSsdSlotMetadataBytes)), 4.0, 0.05);
  EXPECT_LE(split->used, request.budget);
  request.budget = 1000;
  split = SplitDramBudget(request, nullptr, tables);
  ASSERT_FALSE(split.ok());
  EXPECT_THAT(std::string(split.status().message()), HasSubstr("pin at once: prefetch_batches + 1 = 2"));
}

TEST(DramBudget, NoTableTakesPart) {
  EmbeddingLayerOptions emb = Tables({{100, StorageKind::kDram}});
  absl::StatusOr<DramSplit> split = SplitDramBudget(Request(1 << 20), nullptr, emb);
  ASSERT_TRUE(split.ok());
  EXPECT_TRUE(split->shares.empty());
  EXPECT_EQ(split->used, 0);
}

}  // namespace
}  // namespace cemb
