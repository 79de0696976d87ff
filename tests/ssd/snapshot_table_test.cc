#include "ssd/snapshot_table.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "embedding/kernels.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ssd/ssd_table.h"
#include "tests/ssd/snapshot_test_util.h"
#include "tests/ssd/test_util.h"

namespace cemb {
namespace {

using ::testing::HasSubstr;
using testing::TrainedSnapshot;

// Resolves every row of the table in requests of 37 random rows (repeats
// among them) through a pool of `slots` slots and compares each with the
// training table's row, while it is pinned.
template <typename T, int64_t D>
void ExpectEveryRowEqual(const TrainedSnapshot<T>& want, SnapshotTable<T, D>& t, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> order(static_cast<size_t>(want.nvectors));
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  std::shuffle(order.begin(), order.end(), rng);
  SnapshotPins pins;
  for (size_t at = 0; at < order.size(); at += 30) {
    std::vector<int64_t> rows(order.begin() + static_cast<int64_t>(at),
                              order.begin() + static_cast<int64_t>(std::min(order.size(), at + 30)));
    for (int k = 0; k < 7; ++k) rows.push_back(order[rng() % order.size()]);
    std::vector<const T*> out(rows.size(), nullptr);
    absl::Status s = t.Resolve(rows, &pins, out);
    ASSERT_TRUE(s.ok()) << s << " seed " << seed;
    for (size_t i = 0; i < rows.size(); ++i) {
      ASSERT_EQ(std::memcmp(out[i], want.row(rows[i]), want.feature_bytes()), 0)
          << t.name() << " row " << rows[i] << " seed " << seed;
    }
    t.Release(&pins);
    ASSERT_EQ(pins.size(), 0);
  }
}

template <typename T, int64_t D>
void ExpectServedEqualsTrained(int64_t d, int64_t state_floats, std::optional<uint64_t> seed) {
  SCOPED_TRACE(absl::StrCat("D ", d, ", state_floats ", state_floats, ", sizeof(T) ", sizeof(T)));
  constexpr int64_t kN = 3000;
  auto want = TrainedSnapshot<T>::template Make<D>("eq", kN, d, state_floats, seed, /*written=*/kN / 2);
  ASSERT_TRUE(want.ok()) << want.status();
  auto t = SnapshotTable<T, D>::Open({.name = "eq", .nvectors = kN, .featuresize = d, .state_floats = state_floats},
                                     {.path = want->path, .capacity_bytes = 100 * 64 * ((d * static_cast<int64_t>(sizeof(T)) + 63) / 64)});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->snapshot_rows(), want->written);
  ExpectEveryRowEqual(*want, *t, 5);
  const SnapshotStats s = t->stats();
  EXPECT_GT(s.evictions, 0);                 // a pool of 100 rows served all 3000
  EXPECT_GT(s.rows_read, 0);                 // written rows came from the file
  EXPECT_GT(s.lazy_rows, 0);                 // the others from the seed (or zeros)
  EXPECT_EQ(s.rows_read + s.lazy_rows, s.misses - s.shared);
  EXPECT_GT(s.hits, 0);
}

TEST(SnapshotTable, EveryRowEqualsTheTrainingTablesWrittenAndLazy) {
  ExpectServedEqualsTrained<float, 64>(64, 0, 42);
  ExpectServedEqualsTrained<float, 64>(64, 64, 42);      // element-wise AdaGrad's state after the features
  ExpectServedEqualsTrained<bfloat16, 32>(32, 1, 42);    // row-wise AdaGrad
  ExpectServedEqualsTrained<bfloat16, kDynamic>(33, 0, 9);  // 66-byte rows straddle blocks
  ExpectServedEqualsTrained<float, kDynamic>(24, 0, std::nullopt);  // no seed: lazy rows are zeros
}

TEST(SnapshotTable, ServingWritesNothingAndCreatesNoFile) {
  constexpr int64_t kN = 2000;
  auto want = TrainedSnapshot<float>::Make<16>("ro", kN, 16, 0, 3, kN);
  ASSERT_TRUE(want.ok()) << want.status();
  const std::filesystem::path dir = std::filesystem::path(want->path).parent_path();
  auto entries = [&] { return std::distance(std::filesystem::directory_iterator(dir), {}); };
  const auto before = entries();
  const auto size = std::filesystem::file_size(want->path);
  const auto mtime = std::filesystem::last_write_time(want->path);
  {
    auto t = SnapshotTable<float, 16>::Open({.name = "ro", .nvectors = kN}, {.path = want->path, .capacity_bytes = 64 * 64});
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(entries(), before);
    ExpectEveryRowEqual(*want, *t, 1);
    const SnapshotStats s = t->stats();
    EXPECT_GT(s.io.reads, 0);  // the premise: rows were read from the file
    EXPECT_GT(s.evictions, 0);
    EXPECT_EQ(s.io.writes, 0);
    EXPECT_EQ(s.io.bytes_written, 0);
    EXPECT_EQ(entries(), before);
  }
  EXPECT_EQ(entries(), before);
  EXPECT_EQ(std::filesystem::file_size(want->path), size);
  EXPECT_EQ(std::filesystem::last_write_time(want->path), mtime);
}

TEST(SnapshotTable, ReadsAreDirectAndOneReadPerRunOfBlocks) {
  constexpr int64_t kN = 4000;
  auto want = TrainedSnapshot<float>::Make<64>("dio", kN, 64, 0, 3, kN);  // 16 rows a block
  ASSERT_TRUE(want.ok()) << want.status();
  auto t = SnapshotTable<float, 64>::Open({.name = "dio", .nvectors = kN}, {.path = want->path, .capacity_bytes = 1 << 20});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->direct());  // ext4 takes O_DIRECT
  // The first 32 rows of the snapshot's order: two adjacent blocks, one read.
  std::vector<int64_t> rows(want->ids.begin(), want->ids.begin() + 32);
  std::vector<const float*> out(rows.size());
  SnapshotPins pins;
  ASSERT_TRUE(t->Resolve(rows, &pins, out).ok());
  t->Release(&pins);
  EXPECT_EQ(t->stats().reads, 1);
  EXPECT_EQ(t->stats().io.bytes_read, 2 * 4096);
  EXPECT_EQ(t->stats().rows_read, 32);
}

TEST(SnapshotTable, TheFileStaysOpenAfterItsPathIsUnlinked) {
  constexpr int64_t kN = 1500;
  auto want = TrainedSnapshot<float>::Make<32>("gone", kN, 32, 0, 11, 1000);
  ASSERT_TRUE(want.ok()) << want.status();
  auto t = SnapshotTable<float, 32>::Open({.name = "gone", .nvectors = kN}, {.path = want->path, .capacity_bytes = 64 * 128});
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(::unlink(want->path.c_str()), 0);  // the trainer deletes an older checkpoint
  ExpectEveryRowEqual(*want, *t, 2);
  EXPECT_GT(t->stats().rows_read, 0);
}

TEST(SnapshotTable, ARowOutOfRangeIsAnErrorAndPinsNothing) {
  auto want = TrainedSnapshot<float>::Make<16>("oor", 100, 16, 0, 1, 50);
  ASSERT_TRUE(want.ok()) << want.status();
  auto t = SnapshotTable<float, 16>::Open({.name = "oor", .nvectors = 100}, {.path = want->path, .capacity_bytes = 1 << 16});
  ASSERT_TRUE(t.ok());
  std::vector<int32_t> rows = {1, 2, 100};
  std::vector<const float*> out(3);
  SnapshotPins pins;
  absl::Status s = t->Resolve(rows, &pins, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("oor, index 2: row 100 >= 100"));
  EXPECT_EQ(pins.size(), 0);
}

TEST(SnapshotTable, ABadSnapshotIsRefusedAtOpen) {
  constexpr int64_t kN = 1000;
  auto want = TrainedSnapshot<float>::Make<16>("bad", kN, 16, 0, 1, 300);
  ASSERT_TRUE(want.ok()) << want.status();
  auto open = [&](const std::string& path, int64_t nvectors = 1000) {
    return SnapshotTable<float, 16>::Open({.name = "bad", .nvectors = nvectors}, {.path = path, .capacity_bytes = 1 << 16})
        .status();
  };
  ASSERT_TRUE(open(want->path).ok());
  EXPECT_THAT(open(want->path, 2000).message(), HasSubstr("the snapshot's nvectors is 1000, the table's is 2000"));
  EXPECT_EQ(open(want->path + ".missing").code(), absl::StatusCode::kNotFound);

  std::string bytes;
  {
    std::ifstream in(want->path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto write = [&](const std::string& contents) {
    const std::string p = want->path + ".bad";
    std::ofstream(p, std::ios::binary | std::ios::trunc) << contents;
    return p;
  };
  absl::Status s = open(write(bytes.substr(0, bytes.size() - 1)));
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("bad: " + want->path + ".bad: truncated ssd snapshot: it ends at offset"));
  s = open(write(bytes.substr(0, 100)));
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("truncated"));
  std::string magic = bytes;
  magic[0] = 'X';
  EXPECT_THAT(open(write(magic)).message(), HasSubstr("not an ssd table snapshot"));
  std::string twice = bytes;
  std::memcpy(twice.data() + 4096 + 4, twice.data() + 4096, 4);  // id 1 = id 0
  s = open(write(twice));
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("at offset 4100 appears twice"));
  std::string range = bytes;
  const uint32_t big = 5000;
  std::memcpy(range.data() + 4096 + 8, &big, 4);
  EXPECT_THAT(open(write(range)).message(), HasSubstr("row id 5000 at offset 4104 is out of range"));
}

TEST(SnapshotTable, AFailedReadNamesTableFileAndOffsetAndTheNextRequestReadsAgain) {
  constexpr int64_t kN = 1000;
  auto want = TrainedSnapshot<float>::Make<16>("t_eio", kN, 16, 0, 1, kN);
  ASSERT_TRUE(want.ok()) << want.status();
  SnapshotTableOptions o{.path = want->path, .capacity_bytes = 64 * 64};
  o.wrap_io = [](std::unique_ptr<BlockIo> io, int) -> std::unique_ptr<BlockIo> {
    return std::make_unique<FaultInjectingBlockIo>(std::move(io), std::vector<IoFault>{{.op = IoOp::kRead, .nth = 1}});
  };
  auto t = SnapshotTable<float, 16>::Open({.name = "t_eio", .nvectors = kN}, o);
  ASSERT_TRUE(t.ok());
  // Rows of two blocks far apart: the first read fails, the second does not.
  std::vector<int64_t> rows = {want->ids[0], want->ids[500]};
  std::vector<const float*> out(2);
  SnapshotPins pins;
  absl::Status s = t->Resolve(rows, &pins, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(),
              HasSubstr(absl::StrCat("t_eio: ", want->path, ": read of 4096 bytes at offset 8192 failed: Input/output error")));
  EXPECT_EQ(pins.size(), 0);
  EXPECT_FALSE(t->is_resident(rows[0]));
  EXPECT_EQ(t->stats().failed_reads, 1);
  // The row is not lost: the next request reads it.
  ASSERT_TRUE(t->Resolve(rows, &pins, out).ok());
  for (size_t i = 0; i < rows.size(); ++i) EXPECT_EQ(std::memcmp(out[i], want->row(rows[i]), 64), 0);
  t->Release(&pins);
}

TEST(SnapshotTable, PooledSumOfResolvedRowsEqualsTheKernels) {
  constexpr int64_t kN = 500, kD = 64;
  auto want = TrainedSnapshot<float>::Make<kD>("pool", kN, kD, 0, 4, 300);
  ASSERT_TRUE(want.ok()) << want.status();
  auto t = SnapshotTable<float, kD>::Open({.name = "pool", .nvectors = kN}, {.path = want->path, .capacity_bytes = 1 << 20});
  ASSERT_TRUE(t.ok());
  auto dram = SimpleTable<float, kD>::Create({.name = "dram", .nvectors = kN});
  ASSERT_TRUE(dram.ok());
  for (int64_t r = 0; r < kN; ++r) std::memcpy(dram->rowpointer(r), want->row(r), kD * 4);
  auto kernels = TableKernels<SimpleTable<float, kD>>::Create(*dram);
  ASSERT_TRUE(kernels.ok());
  std::mt19937_64 rng(8);
  std::vector<int64_t> offsets = {0}, indices;
  std::vector<float> weights;
  for (int b = 0; b < 20; ++b) {
    const int n = static_cast<int>(rng() % 40);  // empty bags too
    for (int j = 0; j < n; ++j) {
      indices.push_back(static_cast<int64_t>(rng() % kN));
      weights.push_back(static_cast<float>(rng() % 1000) / 333.0f);
    }
    offsets.push_back(static_cast<int64_t>(indices.size()));
  }
  std::vector<const float*> rows(indices.size());
  SnapshotPins pins;
  ASSERT_TRUE(t->Resolve(indices, &pins, rows).ok());
  for (bool weighted : {false, true}) {
    for (Pooling pooling : {Pooling::kSum, Pooling::kMean}) {
      std::vector<float> a(20 * kD, -1.0f), b(20 * kD, -2.0f);
      std::span<const float> w = weighted ? std::span<const float>(weights) : std::span<const float>();
      ASSERT_TRUE(kernels->pooled_lookup(Bags<int64_t>{offsets, indices, w}, MatrixView{a.data(), 20, kD, kD},
                                         {.pooling = pooling})
                      .ok());
      PooledSumResolved<float>(rows, offsets, kD, pooling, w, b.data(), kD);
      if (!weighted) {
        EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << static_cast<int>(pooling);
        continue;
      }
      // Weighted: the same fused multiply-adds in the same order in an
      // optimised build; an unoptimised one (the sanitizers' Debug build)
      // rounds differently in the last bits (measured: 1 ulp).
      for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_NEAR(a[i], b[i], 4 * std::numeric_limits<float>::epsilon() * (1 + std::abs(a[i])))
            << "element " << i << ", pooling " << static_cast<int>(pooling);
      }
    }
  }
  t->Release(&pins);
}

}  // namespace
}  // namespace cemb
