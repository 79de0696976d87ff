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
#include "embedding/cpu.h"
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

// --- a request of several tables (SnapshotRequest) --------------------------

TEST(SnapshotTable, StartSetsHitsAtOnceAndFinishTheMisses) {
  constexpr int64_t kN = 1000;
  auto want = TrainedSnapshot<float>::Make<16>("halves", kN, 16, 0, 1, kN);
  ASSERT_TRUE(want.ok()) << want.status();
  auto t = SnapshotTable<float, 16>::Open({.name = "halves", .nvectors = kN},
                                          {.path = want->path, .capacity_bytes = 1 << 16});
  ASSERT_TRUE(t.ok());
  SnapshotPins pins;
  std::vector<int64_t> warm = {want->ids[0]};
  std::vector<const float*> out(1);
  ASSERT_TRUE(t->Resolve(warm, &pins, out).ok());
  t->Release(&pins);
  const std::vector<int64_t> rows = {want->ids[0], want->ids[700], want->ids[0]};
  out.assign(3, nullptr);
  ASSERT_TRUE(t->Start(rows, &pins, out).ok());
  EXPECT_TRUE(pins.started());
  EXPECT_NE(out[0], nullptr);  // the hits, at once
  EXPECT_EQ(out[1], nullptr);  // the miss, at Finish
  EXPECT_EQ(t->Start(rows, &pins, out).code(), absl::StatusCode::kFailedPrecondition);  // one call at a time
  ASSERT_TRUE(t->Finish(&pins, out).ok());
  EXPECT_FALSE(pins.started());
  for (size_t i = 0; i < rows.size(); ++i) EXPECT_EQ(std::memcmp(out[i], want->row(rows[i]), 64), 0) << i;
  EXPECT_EQ(pins.size(), 3);
  t->Release(&pins);
  EXPECT_EQ(t->Finish(&pins, out).code(), absl::StatusCode::kFailedPrecondition);
  // Released while started: abandoned, its row installed, nothing pinned.
  const std::vector<int64_t> more = {want->ids[900]};
  out.assign(1, nullptr);
  ASSERT_TRUE(t->Start(more, &pins, out).ok());
  t->Release(&pins);
  EXPECT_EQ(pins.size(), 0);
  EXPECT_FALSE(pins.started());
  EXPECT_TRUE(t->is_resident(more[0]));
}

// Three tables of rows of 64 bytes (D = 16 floats), every row in the
// snapshot, `slots` slots each; table `faulty` (if any) fails its first read.
struct ThreeTables {
  ThreeTables(const char* name, int64_t slots, int faulty = -1) {
    for (int k = 0; k < 3; ++k) {
      auto w = TrainedSnapshot<float>::Make<16>(absl::StrCat(name, k), kN, 16, 0, 1 + k, kN);
      EXPECT_TRUE(w.ok()) << w.status();
      want.push_back(*std::move(w));
      SnapshotTableOptions o{.path = want.back().path, .capacity_bytes = slots * 64};
      if (k == faulty) {
        o.wrap_io = [](std::unique_ptr<BlockIo> io, int) -> std::unique_ptr<BlockIo> {
          return std::make_unique<FaultInjectingBlockIo>(std::move(io),
                                                         std::vector<IoFault>{{.op = IoOp::kRead, .nth = 1}});
        };
      }
      auto t = SnapshotTable<float, 16>::Open({.name = absl::StrCat(name, k), .nvectors = kN}, o);
      EXPECT_TRUE(t.ok()) << t.status();
      tables.push_back(*std::move(t));
    }
  }
  // rows[k] of each table k in one request: its status, the rows checked.
  absl::Status Serve(const std::vector<std::vector<int64_t>>& rows) {
    SnapshotRequest request;
    std::vector<std::vector<const float*>> out(3);
    for (int k = 0; k < 3; ++k) {
      out[k].resize(rows[k].size());
      if (absl::Status s = request.Start(tables[k], rows[k], out[k]); !s.ok()) return s;
    }
    if (absl::Status s = request.Finish(); !s.ok()) return s;
    for (int k = 0; k < 3; ++k) {
      for (size_t i = 0; i < rows[k].size(); ++i) {
        EXPECT_EQ(std::memcmp(out[k][i], want[k].row(rows[k][i]), 64), 0) << "table " << k << ", row " << rows[k][i];
      }
    }
    return absl::OkStatus();
  }
  // A request of every slot of every table: fails (ResourceExhausted) if any
  // slot is still pinned.
  absl::Status ServeEverySlot(int64_t slots, int64_t first) {
    std::vector<std::vector<int64_t>> rows(3);
    for (int k = 0; k < 3; ++k) {
      for (int64_t i = 0; i < slots; ++i) rows[k].push_back(want[k].ids[static_cast<size_t>(first + 64 * i)]);
    }
    return Serve(rows);
  }
  static constexpr int64_t kN = 1000;
  std::vector<TrainedSnapshot<float>> want;
  std::vector<SnapshotTable<float, 16>> tables;
};

TEST(SnapshotTable, AFailedReadInOneTableOfARequestNamesItsFileAndOffsetAndNoTableKeepsAPin) {
  constexpr int64_t kSlots = 8;
  ThreeTables t("req_eio", kSlots, /*faulty=*/1);
  ASSERT_EQ(t.tables.size(), 3u);
  const std::vector<int64_t> rows0 = {t.want[0].ids[0], t.want[0].ids[300]};
  // Rows of two blocks far apart: the first read fails, the second does not.
  const std::vector<int64_t> rows1 = {t.want[1].ids[0], t.want[1].ids[500]};
  const std::vector<int64_t> rows2 = {t.want[2].ids[0], t.want[2].ids[300]};
  std::vector<const float*> out0(2), out1(2), out2(2);
  SnapshotRequest request;
  ASSERT_TRUE(request.Start(t.tables[0], rows0, out0).ok());
  ASSERT_TRUE(request.Start(t.tables[1], rows1, out1).ok());
  ASSERT_TRUE(request.Start(t.tables[2], rows2, out2).ok());
  EXPECT_EQ(request.tables(), 3);
  const absl::Status s = request.Finish();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("req_eio1: ", t.want[1].path,
                                                  ": read of 4096 bytes at offset 8192 failed: Input/output error")));
  EXPECT_EQ(request.pinned(), 0);
  EXPECT_EQ(request.tables(), 0);
  EXPECT_EQ(t.tables[1].stats().failed_reads, 1);
  EXPECT_FALSE(t.tables[1].is_resident(rows1[0]));  // read again by the next request
  // The rows that were read serve the next requests.
  EXPECT_TRUE(t.tables[1].is_resident(rows1[1]));
  EXPECT_TRUE(t.tables[0].is_resident(rows0[0]) && t.tables[2].is_resident(rows2[1]));
  // No table keeps a pin of it: a request of every slot of every table, and the failed row again.
  EXPECT_TRUE(t.ServeEverySlot(kSlots, 1).ok());
  EXPECT_TRUE(t.Serve({rows0, rows1, rows2}).ok());
  // The premise: a slot still pinned fails that request.
  SnapshotPins held;
  std::vector<const float*> one(1);
  ASSERT_TRUE(t.tables[2].Resolve(std::vector<int64_t>{t.want[2].ids[999]}, &held, one).ok());
  EXPECT_EQ(t.ServeEverySlot(kSlots, 2).code(), absl::StatusCode::kResourceExhausted);
  t.tables[2].Release(&held);
  EXPECT_TRUE(t.ServeEverySlot(kSlots, 2).ok());
}

TEST(SnapshotTable, AFailedStartReleasesTheTablesTheRequestStartedBefore) {
  constexpr int64_t kSlots = 8;
  ThreeTables t("req_start", kSlots);
  ASSERT_EQ(t.tables.size(), 3u);
  const std::vector<int64_t> rows0 = {t.want[0].ids[0], t.want[0].ids[300]};
  const std::vector<int64_t> rows1 = {t.want[1].ids[0]};
  std::vector<const float*> out0(2), out1(1), out2(2);
  SnapshotRequest request;
  ASSERT_TRUE(request.Start(t.tables[0], rows0, out0).ok());  // its reads in flight
  ASSERT_TRUE(request.Start(t.tables[1], rows1, out1).ok());
  absl::Status s = request.Start(t.tables[2], std::vector<int32_t>{1, ThreeTables::kN}, out2);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("req_start2, index 1: row 1000 >= 1000"));
  EXPECT_EQ(request.pinned(), 0);
  EXPECT_EQ(request.tables(), 0);
  EXPECT_TRUE(t.tables[0].is_resident(rows0[1]));  // its reads were reaped and installed
  EXPECT_TRUE(t.ServeEverySlot(kSlots, 1).ok());

  // More distinct rows than a table has slots.
  std::vector<int64_t> too_many;
  for (int64_t i = 0; i <= kSlots; ++i) too_many.push_back(t.want[1].ids[static_cast<size_t>(64 * i)]);
  std::vector<const float*> out_many(too_many.size());
  ASSERT_TRUE(request.Start(t.tables[0], rows0, out0).ok());
  s = request.Start(t.tables[1], too_many, out_many);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("req_start1: every one of the 8 slots is pinned"));
  EXPECT_EQ(request.pinned(), 0);
  EXPECT_TRUE(t.ServeEverySlot(kSlots, 2).ok());
}

// The same stream of requests through two copies of three tables of mixed
// row types and sizes, one resolving each request's tables together
// (SnapshotRequest), the other one table after the other (Resolve): the
// same rows, bit for bit, and the same hits, reads and evictions.
TEST(SnapshotTable, ARequestOfSeveralTablesEqualsResolvingThemOneByOne) {
  constexpr int64_t kN = 2000;
  auto w0 = TrainedSnapshot<float>::Make<64>("mix0", kN, 64, 0, 42, kN / 2);
  auto w1 = TrainedSnapshot<bfloat16>::Make<32>("mix1", kN, 32, 1, 43, kN / 2);
  auto w2 = TrainedSnapshot<float>::Make<kDynamic>("mix2", kN, 24, 0, 44, kN / 2);
  ASSERT_TRUE(w0.ok() && w1.ok() && w2.ok());
  auto open = [&]<typename T, int64_t D>(const TrainedSnapshot<T>& w, const char* name, int64_t state_floats) {
    auto t = SnapshotTable<T, D>::Open(
        {.name = name, .nvectors = kN, .featuresize = w.featuresize, .state_floats = state_floats},
        {.path = w.path, .capacity_bytes = 120 * 256});  // 120 to 480 slots: evictions all along
    EXPECT_TRUE(t.ok()) << t.status();
    return *std::move(t);
  };
  auto a0 = open.operator()<float, 64>(*w0, "mix0", 0), b0 = open.operator()<float, 64>(*w0, "mix0", 0);
  auto a1 = open.operator()<bfloat16, 32>(*w1, "mix1", 1), b1 = open.operator()<bfloat16, 32>(*w1, "mix1", 1);
  auto a2 = open.operator()<float, kDynamic>(*w2, "mix2", 0), b2 = open.operator()<float, kDynamic>(*w2, "mix2", 0);

  std::mt19937_64 rng(12);
  SnapshotRequest request;
  SnapshotPins p0, p1, p2;
  for (int q = 0; q < 200; ++q) {
    std::vector<int64_t> r0(20), r1(30), r2(10);
    for (auto* r : {&r0, &r1, &r2}) {
      for (int64_t& row : *r) row = static_cast<int64_t>(rng() % 3 == 0 ? rng() % 50 : rng() % kN);
    }
    std::vector<const float*> oa0(r0.size()), ob0(r0.size()), oa2(r2.size()), ob2(r2.size());
    std::vector<const bfloat16*> oa1(r1.size()), ob1(r1.size());
    ASSERT_TRUE(request.Start(a0, r0, oa0).ok());
    ASSERT_TRUE(request.Start(a1, r1, oa1).ok());
    ASSERT_TRUE(request.Start(a2, r2, oa2).ok());
    ASSERT_TRUE(request.Finish().ok());
    ASSERT_TRUE(b0.Resolve(r0, &p0, ob0).ok());
    ASSERT_TRUE(b1.Resolve(r1, &p1, ob1).ok());
    ASSERT_TRUE(b2.Resolve(r2, &p2, ob2).ok());
    for (size_t i = 0; i < r0.size(); ++i) {
      ASSERT_EQ(std::memcmp(oa0[i], ob0[i], 64 * 4), 0) << "request " << q << ", row " << r0[i];
      ASSERT_EQ(std::memcmp(oa0[i], w0->row(r0[i]), 64 * 4), 0) << "request " << q << ", row " << r0[i];
    }
    for (size_t i = 0; i < r1.size(); ++i) {
      ASSERT_EQ(std::memcmp(oa1[i], ob1[i], 32 * 2), 0) << "request " << q << ", row " << r1[i];
      ASSERT_EQ(std::memcmp(oa1[i], w1->row(r1[i]), 32 * 2), 0) << "request " << q << ", row " << r1[i];
    }
    for (size_t i = 0; i < r2.size(); ++i) {
      ASSERT_EQ(std::memcmp(oa2[i], ob2[i], 24 * 4), 0) << "request " << q << ", row " << r2[i];
      ASSERT_EQ(std::memcmp(oa2[i], w2->row(r2[i]), 24 * 4), 0) << "request " << q << ", row " << r2[i];
    }
    request.Release();
    b0.Release(&p0);
    b1.Release(&p1);
    b2.Release(&p2);
  }
  auto same = [](const SnapshotStats& a, const SnapshotStats& b, const char* name) {
    EXPECT_GT(a.evictions, 0) << name;
    EXPECT_GT(a.rows_read, 0) << name;
    EXPECT_GT(a.lazy_rows, 0) << name;
    EXPECT_EQ(a.lookups, b.lookups) << name;
    EXPECT_EQ(a.hits, b.hits) << name;
    EXPECT_EQ(a.misses, b.misses) << name;
    EXPECT_EQ(a.rows_read, b.rows_read) << name;
    EXPECT_EQ(a.lazy_rows, b.lazy_rows) << name;
    EXPECT_EQ(a.reads, b.reads) << name;
    EXPECT_EQ(a.evictions, b.evictions) << name;
  };
  same(a0.stats(), b0.stats(), "mix0");
  same(a1.stats(), b1.stats(), "mix1");
  same(a2.stats(), b2.stats(), "mix2");
}

// --- pooling resolved rows ------------------------------------------------------

// The plain loop PooledSumResolved's contract describes: an obviously
// correct reference (fp32, each column in index order; a weighted row by fma).
template <typename T>
void ReferencePooled(std::span<const T* const> rows, std::span<const int64_t> offsets, int64_t d, Pooling pooling,
                     std::span<const float> weights, float* out, int64_t ld) {
  for (size_t b = 0; b + 1 < offsets.size(); ++b) {
    float* o = out + static_cast<int64_t>(b) * ld;
    for (int64_t c = 0; c < d; ++c) o[c] = 0.0f;
    for (int64_t j = offsets[b]; j < offsets[b + 1]; ++j) {
      const T* r = rows[static_cast<size_t>(j)];
      for (int64_t c = 0; c < d; ++c) {
        o[c] = weights.empty() ? o[c] + ToFloat(r[c]) : std::fma(ToFloat(r[c]), weights[static_cast<size_t>(j)], o[c]);
      }
    }
    if (pooling == Pooling::kMean && offsets[b + 1] > offsets[b]) {
      const float s = 1.0f / static_cast<float>(offsets[b + 1] - offsets[b]);
      for (int64_t c = 0; c < d; ++c) o[c] *= s;
    }
  }
}

// Rows resolved from a DRAM table, pooled by PooledSumResolved (and by each
// ISA's resolved-row kernel), against that table's own kernels of the same
// ISA (bit for bit, weighted too: the same code sums them) and the plain
// reference (bit for bit unweighted); the output's padding columns untouched.
template <typename T, int64_t D>
void ExpectPooledEqualsTheTablesKernels(int64_t d) {
  SCOPED_TRACE(absl::StrCat("D ", d, D == kDynamic ? " (dynamic)" : " (static)", ", sizeof(T) ", sizeof(T)));
  constexpr int64_t kN = 500, kBags = 40;
  constexpr float kSentinel = -12345.0f;
  const int64_t ld = d + 5;
  auto dram = SimpleTable<T, D>::Create({.name = "dram", .nvectors = kN, .featuresize = d});
  ASSERT_TRUE(dram.ok()) << dram.status();
  std::mt19937_64 rng(8);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  for (int64_t r = 0; r < kN; ++r) {
    for (int64_t c = 0; c < d; ++c) dram->rowpointer(r)[c] = FromFloat<T>(value(rng));
  }
  std::vector<int64_t> offsets = {0}, indices;
  std::vector<float> weights;
  for (int b = 0; b < kBags; ++b) {
    const int n = b == 3 ? 0 : b == 7 ? 150 : static_cast<int>(rng() % 40);  // an empty bag, a long one
    for (int j = 0; j < n; ++j) {
      indices.push_back(static_cast<int64_t>(rng() % kN));
      weights.push_back(value(rng) * 3.0f);
    }
    offsets.push_back(static_cast<int64_t>(indices.size()));
  }
  std::vector<const T*> rows(indices.size());
  for (size_t j = 0; j < indices.size(); ++j) rows[j] = dram->rowpointer(indices[j]);

  for (Isa isa : {Isa::kAuto, Isa::kGeneric, Isa::kAvx2, Isa::kAvx512}) {
    if (isa != Isa::kAuto && !IsaAvailable(isa)) continue;
    auto kernels = TableKernels<SimpleTable<T, D>>::Create(*dram, {.isa = isa});
    ASSERT_TRUE(kernels.ok()) << kernels.status();
    for (bool weighted : {false, true}) {
      for (Pooling pooling : {Pooling::kSum, Pooling::kMean}) {
        SCOPED_TRACE(absl::StrCat(isa == Isa::kAuto ? "auto" : IsaName(isa), weighted ? ", weighted" : "",
                                  pooling == Pooling::kMean ? ", mean" : ", sum"));
        std::vector<float> want(kBags * ld, kSentinel), got(kBags * ld, kSentinel), plain(kBags * ld, kSentinel);
        std::span<const float> w = weighted ? std::span<const float>(weights) : std::span<const float>();
        ASSERT_TRUE(kernels->pooled_lookup(Bags<int64_t>{offsets, indices, w}, MatrixView{want.data(), kBags, d, ld},
                                           {.pooling = pooling})
                        .ok());
        if (isa == Isa::kAuto) {
          PooledSumResolved<T>(rows, offsets, d, pooling, w, got.data(), ld);
        } else {
          ssd_internal::PoolResolvedRows<T>(ssd_internal::ResolvedPooledKernelOf<T>(isa, d), rows, offsets, d, pooling,
                                            w, got.data(), ld);
        }
        ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * 4), 0);
        ReferencePooled<T>(rows, offsets, d, pooling, w, plain.data(), ld);
        for (int64_t b = 0; b < kBags; ++b) {
          for (int64_t c = 0; c < ld; ++c) {
            const size_t i = static_cast<size_t>(b * ld + c);
            if (c >= d) {
              ASSERT_EQ(got[i], kSentinel) << "bag " << b << ", padding column " << c;
            } else if (!weighted) {
              ASSERT_EQ(got[i], plain[i]) << "bag " << b << ", column " << c;
            } else {  // the kernels' column tails may round a weighted product apart from the fma
              ASSERT_NEAR(got[i], plain[i], 1e-5f * (1 + std::abs(plain[i]))) << "bag " << b << ", column " << c;
            }
          }
        }
      }
    }
  }
}

TEST(SnapshotTable, PooledSumOfResolvedRowsEqualsTheTablesKernelsBitForBit) {
  ExpectPooledEqualsTheTablesKernels<float, 64>(64);
  ExpectPooledEqualsTheTablesKernels<bfloat16, 64>(64);
  ExpectPooledEqualsTheTablesKernels<float, kDynamic>(24);     // the tiled fallback
  ExpectPooledEqualsTheTablesKernels<bfloat16, kDynamic>(33);  // and its scalar column tail
  ExpectPooledEqualsTheTablesKernels<float, kDynamic>(128);    // a dynamic size the kernels specialise
}

// Through a snapshot: the rows Resolve hands out, pooled, equal the DRAM
// table's pooled lookup of the training table's rows.
TEST(SnapshotTable, PooledSumOfServedRowsEqualsTheDramTablesPooledLookup) {
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
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << weighted << " " << static_cast<int>(pooling);
    }
  }
  t->Release(&pins);
}

}  // namespace
}  // namespace cemb
