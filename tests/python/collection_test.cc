// python/collection.h's steps when the ssd tier fails a read: the batch is
// dropped, its rows unpinned, and the collection takes the next batch with
// nothing lost (the Python tests cover the steps' order; a fault needs the
// BlockIo hook, which only C++ reaches).
#include "python/collection.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "ssd/block_io.h"

namespace cemb::python {
namespace {

constexpr int64_t kRows = 4096, kDim = 16, kBatch = 64;

// One ssd table over a pool smaller than its rows, made on a fresh
// directory; each table's BlockIo is a FaultInjectingBlockIo with `faults`,
// left in *io.
// prefetch_batches: 0, or 1 (each batch is then prefetched before its
// forward, through the prefetcher thread).
std::unique_ptr<Collection> Make(const std::string& dir, int prefetch_batches, std::vector<IoFault> faults,
                                 FaultInjectingBlockIo** io) {
  CollectionOptions o{.tables = {{.name = "t0", .rows = kRows, .dim = kDim, .features = {"f0"},
                                  .storage = StorageKind::kSsd, .directory = dir}},
                      .dram_budget = 160 << 10, .batch_size = kBatch, .bag_size = 1,
                      .prefetch_batches = prefetch_batches};
  o.ssd_wrap_io = [faults, io](std::unique_ptr<BlockIo> inner) -> std::unique_ptr<BlockIo> {
    auto f = std::make_unique<FaultInjectingBlockIo>(std::move(inner), faults);
    *io = f.get();
    return f;
  };
  absl::StatusOr<std::unique_ptr<Collection>> c = Collection::Create(o);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

// A forward of one value per sample (rows first, first + 1, ...), then its
// backward with a gradient made from the rows.
absl::Status Forward(Collection& c, int64_t first, int64_t n, int64_t* step) {
  std::vector<int64_t> values(n), offsets(n + 1);
  std::iota(values.begin(), values.end(), first);
  std::iota(offsets.begin(), offsets.end(), 0);
  const FeatureArrays f{.values = {{values.data(), IndexType::kInt64, n}},
                        .splits = {{offsets.data(), IndexType::kInt64, n + 1}}};
  if (c.options().prefetch_batches > 0) {
    if (absl::Status s = c.Prefetch(f); !s.ok()) return s;
  }
  std::vector<float> out(n * kDim);
  absl::StatusOr<int64_t> s = c.Forward(f, {out.data(), n, kDim, kDim}, /*train=*/true);
  if (s.ok()) *step = *s;
  return s.status();
}
absl::Status Step(Collection& c, int64_t first, int64_t n = kBatch) {
  int64_t step = -1;
  if (absl::Status s = Forward(c, first, n, &step); !s.ok()) return s;
  std::vector<float> grad(n * kDim);
  for (size_t i = 0; i < grad.size(); ++i) grad[i] = static_cast<float>((first * 7 + i) % 13) * 0.125f - 0.75f;
  return c.Backward(step, {grad.data(), n, kDim, kDim}, 0.05f);
}

// Every row written, the pool smaller than the table: later batches read.
void Warm(Collection& c) {
  for (int64_t first = 0; first < kRows; first += kBatch) ASSERT_TRUE(Step(c, first).ok());
}

std::vector<float> Rows(Collection& c) {
  std::vector<float> rows(kRows * kDim);
  EXPECT_TRUE(c.ReadTable(0, rows).ok());
  return rows;
}

std::string TempDir(const char* name) {
  const std::string dir = ::testing::TempDir() + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

class CollectionIoError : public ::testing::TestWithParam<int> {};

TEST_P(CollectionIoError, AFailedSsdReadDropsTheBatchUnpinsItsRowsAndLosesNothing) {
  const int prefetch = GetParam();
  const std::string dir = TempDir("collection_eio");
  // The run without a fault: how many reads come before batch X's, and the
  // rows after X's step and Y's.
  FaultInjectingBlockIo* io = nullptr;
  std::unique_ptr<Collection> clean = Make(dir, prefetch, {}, &io);
  ASSERT_NE(clean, nullptr);
  Warm(*clean);
  const int64_t reads = io->counters().reads;
  const int64_t x = 0, y = kBatch;  // both evicted since they were written
  ASSERT_TRUE(Step(*clean, x).ok());
  ASSERT_GT(io->counters().reads, reads);  // X's rows came back from the file
  ASSERT_TRUE(Step(*clean, y).ok());
  const std::vector<float> expected = Rows(*clean);

  // The same with X's first read failing.
  std::unique_ptr<Collection> c = Make(dir, prefetch, {{.op = IoOp::kRead, .nth = reads + 1, .error = EIO}}, &io);
  ASSERT_NE(c, nullptr);
  Warm(*c);
  int64_t step = -1;
  const absl::Status failed = Forward(*c, x, kBatch, &step);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(io->fired(), 1);
  const std::string msg(failed.message());
  EXPECT_EQ(msg.find("forward: table 't0': "), 0u) << msg;
  EXPECT_NE(msg.find("Input/output error"), std::string::npos) << msg;
  EXPECT_NE(msg.find("the batch is dropped"), std::string::npos) << msg;
  EXPECT_EQ(c->open_steps(), 0);
  // The next batch, then X again: nothing was lost, and the SGD steps of
  // disjoint rows commute, so the rows are the clean run's bit for bit.
  ASSERT_TRUE(Step(*c, y).ok());
  ASSERT_TRUE(Step(*c, x).ok());
  EXPECT_EQ(Rows(*c), expected);
  // X's rows were unpinned: a batch as large as the slot pool fits.
  const std::vector<TableReport> report = c->Report();
  const int64_t capacity = report[0].dram_bytes / static_cast<int64_t>(kDim * sizeof(float));
  ASSERT_GT(capacity, kBatch);
  int64_t whole = -1;
  EXPECT_TRUE(Forward(*c, 0, std::min(capacity, kRows), &whole).ok());
  EXPECT_TRUE(c->Release(whole).ok());
}

INSTANTIATE_TEST_SUITE_P(PrefetchBatches, CollectionIoError, ::testing::Values(0, 1));

}  // namespace
}  // namespace cemb::python
