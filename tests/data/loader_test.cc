#include "data/loader.h"

#include <algorithm>
#include <numeric>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/data/test_util.h"

namespace cemb::data {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

constexpr uint32_t kDense = 2;
const std::vector<uint64_t> kSizes = {1000, 3};

// Sample i: label i % 2, dense {i, -i}, index[t][k] = (i + k) % size[t].
std::shared_ptr<const Dataset> MakeDataset(const TempDir& dir, uint64_t n, std::vector<uint32_t> hotness = {1, 1}) {
  const std::string path = dir.File(absl::StrCat("d", n, "_", absl::StrJoin(hotness, "_"), ".bin"));
  auto w = DatasetWriter::Create(path, {.num_dense = kDense, .table_sizes = kSizes, .hotness = hotness});
  EXPECT_TRUE(w.ok());
  for (uint64_t i = 0; i < n; ++i) {
    const float dense[kDense] = {float(i), -float(i)};
    std::vector<int32_t> idx;
    for (size_t t = 0; t < kSizes.size(); ++t) {
      for (uint32_t k = 0; k < hotness[t]; ++k) idx.push_back(int32_t((i + k) % kSizes[t]));
    }
    EXPECT_TRUE((*w)->Append(float(i % 2), dense, idx).ok());
  }
  EXPECT_TRUE((*w)->Finish().ok());
  auto d = Dataset::Open(path);
  EXPECT_TRUE(d.ok()) << d.status();
  return std::shared_ptr<const Dataset>(std::move(*d));
}

// The sample ids of a batch (dense[0] holds the id).
std::vector<uint64_t> Ids(const Batch& b) {
  std::vector<uint64_t> ids;
  for (uint32_t i = 0; i < b.size(); ++i) ids.push_back(uint64_t(b.dense()[i * kDense]));
  return ids;
}

// Checks that every field of every sample in `b` is that sample's.
// `hotness`: the bag size of each table.
void ExpectConsistent(const Batch& b, const std::vector<uint32_t>& hotness) {
  ASSERT_EQ(b.num_tables(), 2u);
  for (uint32_t i = 0; i < b.size(); ++i) {
    const uint64_t id = uint64_t(b.dense()[i * kDense]);
    EXPECT_EQ(b.dense()[i * kDense + 1], -float(id));
    EXPECT_EQ(b.labels()[i], float(id % 2));
    for (uint32_t t = 0; t < 2; ++t) {
      ASSERT_EQ(b.offsets(t)[i], int32_t(i * hotness[t]));
      for (uint32_t k = 0; k < hotness[t]; ++k) {
        EXPECT_EQ(b.indices(t)[i * hotness[t] + k], int32_t((id + k) % kSizes[t]));
      }
    }
  }
  for (uint32_t t = 0; t < 2; ++t) {
    EXPECT_EQ(b.offsets(t)[b.size()], int32_t(b.size() * hotness[t]));
    EXPECT_EQ(b.indices(t).size(), b.size() * hotness[t]);
  }
}

TEST(Loader, UnshuffledBatchesFollowTheFileWithAPartialLastBatch) {
  TempDir dir;
  auto loader = Loader::Create(MakeDataset(dir, 10), {.batch_size = 4, .shuffle = Shuffle::kNone});
  ASSERT_TRUE(loader.ok()) << loader.status();
  EXPECT_EQ((*loader)->batches_per_epoch(), 3u);
  const Batch* b = (*loader)->Next();
  ASSERT_NE(b, nullptr);
  EXPECT_THAT(Ids(*b), ::testing::ElementsAre(0, 1, 2, 3));
  ExpectConsistent(*b, {1, 1});
  b = (*loader)->Next();
  EXPECT_THAT(Ids(*b), ::testing::ElementsAre(4, 5, 6, 7));
  b = (*loader)->Next();
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->size(), 2u);
  EXPECT_THAT(Ids(*b), ::testing::ElementsAre(8, 9));
  ExpectConsistent(*b, {1, 1});
  EXPECT_EQ((*loader)->Next(), nullptr);
  EXPECT_EQ((*loader)->Next(), nullptr);
  // What the batches held: 4, 8, 10 in the first epoch, then 14, ...
  EXPECT_EQ((*loader)->samples_before(0), 0u);
  EXPECT_EQ((*loader)->samples_before(2), 8u);
  EXPECT_EQ((*loader)->samples_before(3), 10u);
  EXPECT_EQ((*loader)->samples_before(4), 14u);
  EXPECT_EQ((*loader)->samples_before(6), 20u);
}

TEST(Loader, DropLastBatchDropsTheRemainder) {
  TempDir dir;
  auto loader = Loader::Create(MakeDataset(dir, 10), {.batch_size = 4, .shuffle = Shuffle::kNone,
                                                     .last_batch = LastBatch::kDrop});
  ASSERT_TRUE(loader.ok());
  EXPECT_EQ((*loader)->batches_per_epoch(), 2u);
  int batches = 0;
  while (const Batch* b = (*loader)->Next()) {
    EXPECT_EQ(b->size(), 4u);
    ++batches;
  }
  EXPECT_EQ(batches, 2);
  EXPECT_EQ((*loader)->samples_before(3), 12u);  // the second epoch's first batch
}

TEST(Loader, MultiHotBagsAreCsr) {
  TempDir dir;
  auto loader = Loader::Create(MakeDataset(dir, 50, {3, 3}), {.batch_size = 8, .block_samples = 16});
  ASSERT_TRUE(loader.ok());
  while (const Batch* b = (*loader)->Next()) ExpectConsistent(*b, {3, 3});
}

// Each table's bags have that table's size (MLPerf-like: 100 and 1), and the
// buffers a batch fills are the ones Create() sized: the slots' index
// arrays never move.
TEST(Loader, BagsHaveEachTablesHotness) {
  TempDir dir;
  auto loader = Loader::Create(MakeDataset(dir, 70, {100, 1}), {.batch_size = 16, .block_samples = 32, .prefetch = 2});
  ASSERT_TRUE(loader.ok()) << loader.status();
  std::set<const int32_t*> buffers;
  int batches = 0;
  while (const Batch* b = (*loader)->Next()) {
    ExpectConsistent(*b, {100, 1});
    buffers.insert(b->indices(0).data());
    ++batches;
  }
  EXPECT_EQ(batches, 5);
  EXPECT_LE(buffers.size(), 3u);  // prefetch + 1 slots
}

TEST(Loader, EachEpochVisitsEverySampleOnceInANewOrder) {
  TempDir dir;
  const uint64_t n = 1000;
  auto loader = Loader::Create(MakeDataset(dir, n),
                               {.batch_size = 64, .block_samples = 128, .seed = 7, .num_epochs = 3});
  ASSERT_TRUE(loader.ok());
  std::vector<std::vector<uint64_t>> orders(3);
  while (const Batch* b = (*loader)->Next()) {
    ExpectConsistent(*b, {1, 1});
    for (uint64_t id : Ids(*b)) orders[b->epoch()].push_back(id);
  }
  for (const auto& order : orders) {
    ASSERT_EQ(order.size(), n);
    std::vector<uint64_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(sorted[i], i);
    // Block-local: positions [128 j, 128 j + 128) come from one block.
    for (uint64_t j = 0; j < n / 128; ++j) {
      const uint64_t block = order[j * 128] / 128;
      for (uint64_t p = j * 128; p < (j + 1) * 128; ++p) ASSERT_EQ(order[p] / 128, block);
    }
    // The partial last block (samples 896..999) comes last.
    for (uint64_t p = 896; p < n; ++p) ASSERT_GE(order[p], 896u);
  }
  EXPECT_NE(orders[0], orders[1]);
  EXPECT_NE(orders[1], orders[2]);
  std::vector<uint64_t> identity(n);
  std::iota(identity.begin(), identity.end(), uint64_t{0});
  EXPECT_NE(orders[0], identity);
}

TEST(Loader, RanksSlicesMakeUpEveryBatchAtTheSamePosition) {
  TempDir dir;
  auto ds = MakeDataset(dir, 203, {2, 2});  // batches of 16: the last holds 11 samples
  const LoaderOptions whole_options{.batch_size = 16, .block_samples = 40, .seed = 3, .num_epochs = 2};
  auto whole = Loader::Create(ds, whole_options);
  ASSERT_TRUE(whole.ok());
  std::vector<std::unique_ptr<Loader>> ranks;
  for (uint32_t r = 0; r < 3; ++r) {
    LoaderOptions o = whole_options;
    o.rank = r;
    o.ranks = 3;
    auto l = Loader::Create(ds, o);
    ASSERT_TRUE(l.ok());
    EXPECT_EQ((*l)->position(), (*whole)->position());  // a checkpoint resumes on any number of ranks
    ranks.push_back(std::move(*l));
  }
  while (const Batch* b = (*whole)->Next()) {
    std::vector<uint64_t> joined;
    for (uint32_t r = 0; r < 3; ++r) {
      const Batch* part = ranks[r]->Next();
      ASSERT_NE(part, nullptr);
      ExpectConsistent(*part, {2, 2});
      EXPECT_EQ(part->global_size(), b->size());
      const BatchSlice slice = SliceOf(b->size(), r, 3);
      EXPECT_EQ(part->size(), slice.size);
      EXPECT_EQ(part->size(), b->size() / 3 + (r < b->size() % 3 ? 1 : 0));
      for (uint64_t id : Ids(*part)) joined.push_back(id);
    }
    EXPECT_EQ(joined, Ids(*b));
  }
  for (auto& l : ranks) EXPECT_EQ(l->Next(), nullptr);
  EXPECT_FALSE(Loader::Create(ds, {.rank = 2, .ranks = 2}).ok());
}

TEST(Loader, SameSeedSameOrderOtherSeedOtherOrder) {
  TempDir dir;
  auto ds = MakeDataset(dir, 300);
  auto order = [&](uint64_t seed) {
    auto loader = Loader::Create(ds, {.batch_size = 32, .block_samples = 100, .seed = seed});
    std::vector<uint64_t> ids;
    while (const Batch* b = (*loader)->Next()) {
      for (uint64_t id : Ids(*b)) ids.push_back(id);
    }
    return ids;
  };
  EXPECT_EQ(order(5), order(5));
  EXPECT_NE(order(5), order(6));
}

TEST(Loader, SampleAtAgreesWithTheBatches) {
  TempDir dir;
  auto loader = Loader::Create(MakeDataset(dir, 200), {.batch_size = 16, .block_samples = 50, .num_epochs = 2});
  ASSERT_TRUE(loader.ok());
  uint64_t p = 0;
  while (const Batch* b = (*loader)->Next()) {
    if (b->index() == 0) p = 0;
    for (uint64_t id : Ids(*b)) ASSERT_EQ((*loader)->SampleAt(b->epoch(), p++), id);
  }
}

TEST(Loader, PeekShowsTheBatchesNextReturns) {
  TempDir dir;
  auto loader = Loader::Create(MakeDataset(dir, 500), {.batch_size = 10, .block_samples = 64, .prefetch = 3});
  ASSERT_TRUE(loader.ok());
  uint64_t consumed = 0;
  std::vector<uint64_t> previous_second;
  while (true) {
    std::span<const Batch* const> ahead = (*loader)->Peek(5);  // more than prefetch: capped
    const uint64_t left = 50 - consumed;
    ASSERT_EQ(ahead.size(), std::min<uint64_t>(3, left));
    if (ahead.empty()) break;
    std::vector<std::vector<uint64_t>> peeked;
    for (const Batch* b : ahead) peeked.push_back(Ids(*b));
    // Consume one, then peek again: the peeked batches are the next ones.
    const Batch* b = (*loader)->Next();
    ASSERT_EQ(b, ahead[0]);
    EXPECT_EQ(Ids(*b), peeked[0]) << "batch " << consumed;
    if (consumed >= 1) {
      EXPECT_EQ(Ids(*b), previous_second) << "batch " << consumed;
    }
    previous_second = peeked.size() > 1 ? peeked[1] : std::vector<uint64_t>{};
    ++consumed;
  }
  EXPECT_EQ(consumed, 50u);
  EXPECT_EQ((*loader)->Next(), nullptr);
}

TEST(Loader, ReusesItsBatchBuffers) {
  TempDir dir;
  auto loader = Loader::Create(MakeDataset(dir, 1000), {.batch_size = 8, .prefetch = 2, .num_epochs = 2});
  ASSERT_TRUE(loader.ok());
  std::set<const float*> dense_buffers;
  std::set<const int32_t*> index_buffers;
  int batches = 0;
  while (const Batch* b = (*loader)->Next()) {
    dense_buffers.insert(b->dense().data());
    index_buffers.insert(b->indices(0).data());
    ++batches;
  }
  EXPECT_EQ(batches, 250);
  EXPECT_EQ(dense_buffers.size(), 3u);  // prefetch + 1 slots
  EXPECT_EQ(index_buffers.size(), 3u);
}

TEST(Loader, SeekToASavedPositionResumesExactly) {
  TempDir dir;
  auto ds = MakeDataset(dir, 700);
  const LoaderOptions options{.batch_size = 32, .block_samples = 100, .seed = 3, .num_epochs = 3};
  auto a = Loader::Create(ds, options);
  ASSERT_TRUE(a.ok());
  // Stop at several points, including the first batch of an epoch (22 batches per epoch).
  for (int stop : {5, 22, 30}) {
    auto reference = Loader::Create(ds, options);
    std::string saved;
    std::vector<std::vector<uint64_t>> rest;
    int i = 0;
    while (const Batch* b = (*reference)->Next()) {
      if (i == stop) saved = (*reference)->position().Serialize();
      if (i >= stop) rest.push_back(Ids(*b));
      ++i;
    }
    // saved was taken after batch `stop` was returned, so it points at stop + 1.
    rest.erase(rest.begin());
    absl::StatusOr<LoaderPosition> p = LoaderPosition::Parse(saved);
    ASSERT_TRUE(p.ok()) << saved;
    EXPECT_EQ(p->epoch * 22 + p->batch, uint64_t(stop + 1));
    auto resumed = Loader::Create(ds, options);
    (*resumed)->Next();  // hold a batch across the seek
    ASSERT_TRUE((*resumed)->Seek(*p).ok());
    EXPECT_EQ((*resumed)->position(), *p);
    std::vector<std::vector<uint64_t>> got;
    while (const Batch* b = (*resumed)->Next()) got.push_back(Ids(*b));
    EXPECT_EQ(got, rest) << "stopped after batch " << stop;
  }
}

TEST(Loader, SeekRejectsAForeignOrBadPosition) {
  TempDir dir;
  auto ds = MakeDataset(dir, 100);
  auto a = Loader::Create(ds, {.batch_size = 10, .seed = 1});
  auto b = Loader::Create(ds, {.batch_size = 10, .seed = 2});
  absl::Status s = (*b)->Seek((*a)->position());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("another dataset or loader options"));
  LoaderPosition p = (*a)->position();
  p.batch = 10;
  EXPECT_THAT((*a)->Seek(p).message(), HasSubstr("past the epoch"));
  p.batch = 0;
  p.epoch = 5;
  EXPECT_THAT((*a)->Seek(p).message(), HasSubstr("past the last epoch"));
  p.epoch = 1;  // == the end of a one-epoch loader: allowed, nothing left
  ASSERT_TRUE((*a)->Seek(p).ok());
  EXPECT_EQ((*a)->Next(), nullptr);
}

TEST(LoaderPosition, SerializeParseRoundTrip) {
  const LoaderPosition p{3, 141, 0xdeadbeef12345678ULL};
  EXPECT_EQ(p.Serialize(), "cemb-loader-position v1 epoch=3 batch=141 fingerprint=deadbeef12345678");
  absl::StatusOr<LoaderPosition> q = LoaderPosition::Parse(p.Serialize());
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(*q, p);
  for (const char* bad : {"", "cemb-loader-position v1", "cemb-loader-position v1 epoch=x batch=1 fingerprint=0",
                          "cemb-loader-position v2 epoch=1 batch=1 fingerprint=0",
                          "cemb-loader-position v1 epoch=1 batch=1 fingerprint=0 extra=1"}) {
    EXPECT_EQ(LoaderPosition::Parse(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(Loader, EndlessModeWrapsAroundEpochs) {
  TempDir dir;
  auto loader = Loader::Create(MakeDataset(dir, 30), {.batch_size = 10, .num_epochs = 0});
  ASSERT_TRUE(loader.ok());
  for (int i = 0; i < 100; ++i) {
    const Batch* b = (*loader)->Next();
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(b->epoch(), uint64_t(i / 3));
    EXPECT_EQ(b->index(), uint64_t(i % 3));
  }
}

TEST(Loader, EmptyDatasetHasNoBatches) {
  TempDir dir;
  auto loader = Loader::Create(MakeDataset(dir, 0), {.num_epochs = 0});
  ASSERT_TRUE(loader.ok());
  EXPECT_EQ((*loader)->batches_per_epoch(), 0u);
  EXPECT_EQ((*loader)->Next(), nullptr);
  EXPECT_TRUE((*loader)->Peek(2).empty());
}

TEST(Loader, RejectsBadOptions) {
  TempDir dir;
  auto ds = MakeDataset(dir, 10);
  EXPECT_FALSE(Loader::Create(ds, {.batch_size = 0}).ok());
  EXPECT_FALSE(Loader::Create(ds, {.block_samples = 0}).ok());
  EXPECT_FALSE(Loader::Create(ds, {.prefetch = 0}).ok());
  EXPECT_FALSE(Loader::Create(nullptr, {}).ok());
}

TEST(Loader, DestroyingAnUnreadLoaderStopsItsThread) {
  TempDir dir;
  auto ds = MakeDataset(dir, 1000);
  for (int i = 0; i < 20; ++i) {
    auto loader = Loader::Create(ds, {.batch_size = 7, .num_epochs = 0});
    ASSERT_TRUE(loader.ok());
    if (i % 2) (*loader)->Next();
  }
}

}  // namespace
}  // namespace cemb::data
