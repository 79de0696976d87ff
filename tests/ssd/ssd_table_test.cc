#include "ssd/ssd_table.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "base/random.h"
#include "embedding/kernels.h"
#include "embedding/reindex.h"
#include "embedding/table_io.h"
#include "gtest/gtest.h"
#include "tests/embedding/test_util.h"
#include "tests/ssd/test_util.h"

namespace cemb {
namespace {

SsdOptions Options(int64_t capacity_bytes, std::optional<uint64_t> seed = 7, std::string dir = testing::DiskDir()) {
  SsdOptions o;
  o.capacity_bytes = capacity_bytes;
  o.file.directory = std::move(dir);
  o.init_seed = seed;
  return o;
}

template <typename T, int64_t D>
void ExpectLazyEqualsEager(int64_t d) {
  constexpr int64_t kN = 3000;
  auto simple = SimpleTable<T, D>::Create({.name = "s", .nvectors = kN, .featuresize = d});
  ASSERT_TRUE(simple.ok());
  InitUniform(*simple, 42, /*threads=*/3);
  auto ssd = SsdTable<T, D>::Create({.name = "z", .nvectors = kN, .featuresize = d}, Options(200 * 512, 42));
  ASSERT_TRUE(ssd.ok()) << ssd.status();
  for (int64_t r = 0; r < kN; ++r) {
    ASSERT_EQ(std::memcmp(simple->rowpointer(r), ssd->rowpointer(r, Access::kRead), ssd->row_bytes()), 0) << r;
  }
  const SsdStats s = ssd->stats();
  EXPECT_EQ(s.lazy_rows, kN);  // every row computed, none read: no block was ever written
  EXPECT_EQ(s.io.reads, 0);
  EXPECT_EQ(s.io.writes, 0);
}

TEST(SsdTable, LazyRowsEqualEagerInitUniformBitForBit) {
  ExpectLazyEqualsEager<float, 64>(64);
  ExpectLazyEqualsEager<bfloat16, kDynamic>(33);
  ExpectLazyEqualsEager<float, kDynamic>(7);
}

TEST(SsdTable, LoadedRowsSurviveEvictionBitForBit) {
  // LoadRows writes through Access::kWrite: each row must be kept (written
  // back when evicted), although the pool holds a tenth of the table.
  constexpr int64_t kN = 2000;
  auto simple = SimpleTable<float, 64>::Create({.name = "s", .nvectors = kN});
  ASSERT_TRUE(simple.ok());
  InitUniform(*simple, 3);
  const std::string path = testing::DiskDir() + "/ssd_load_rows.rows";
  ASSERT_TRUE(SaveRows(*simple, path).ok());
  auto ssd = SsdTable<float, 64>::Create({.name = "z", .nvectors = kN}, Options(kN / 10 * 256, 42));
  ASSERT_TRUE(ssd.ok()) << ssd.status();
  ASSERT_TRUE(LoadRows(*ssd, path).ok());
  ASSERT_TRUE(ssd->FlushDirty().ok());
  for (int64_t r = 0; r < kN; ++r) {
    ASSERT_EQ(std::memcmp(simple->rowpointer(r), ssd->rowpointer(r, Access::kRead), ssd->row_bytes()), 0) << r;
  }
  EXPECT_GT(ssd->stats().io.writes, 0);
  std::remove(path.c_str());
}

TEST(SsdTable, CreatingALargeTableReadsAndWritesNothing) {
  // 2^20 rows of 256 bytes: a 256 MiB file, reserved, never touched.
  auto t = SsdTable<float, 64>::Create({.name = "big", .nvectors = 1 << 20}, Options(1 << 20));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->file().size(), uint64_t{256} << 20);
  EXPECT_EQ(t->layout().rows_per_block, 16);
  std::vector<int64_t> rows = {5, 1 << 19, (1 << 20) - 1};
  ASSERT_TRUE(t->Prefetch(0, rows).ok());
  ASSERT_TRUE(t->WaitResident(0).ok());
  const SsdStats s = t->stats();
  EXPECT_EQ(s.io.reads + s.io.writes, 0);
  EXPECT_EQ(s.lazy_rows, 3);
}

// Random training steps (pooled lookup, reindex, SGD) through the same
// kernels on an SsdTable whose pool holds about two batches, so that every
// batch evicts, and on a SimpleTable in DRAM: outputs and rows must agree bit
// for bit. Batch k+1 is prefetched before batch k is waited for.
template <typename T, int64_t D>
void ExpectTrainingMatchesSimpleTable(Isa isa, int64_t d, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "isa " << IsaName(isa) << " d " << d << " seed " << seed);
  constexpr int64_t kN = 5000, kBags = 48, kSteps = 25;
  auto simple = SimpleTable<T, D>::Create({.name = "s", .nvectors = kN, .featuresize = d});
  ASSERT_TRUE(simple.ok());
  InitUniform(*simple, seed);
  const int64_t slot = static_cast<int64_t>((d * sizeof(T) + 7) / 8 * 8);
  auto ssd = SsdTable<T, D>::Create({.name = "z", .nvectors = kN, .featuresize = d}, Options(800 * slot, seed));
  ASSERT_TRUE(ssd.ok()) << ssd.status();
  auto ks = TableKernels<SimpleTable<T, D>>::Create(*simple, {.isa = isa});
  auto kz = TableKernels<SsdTable<T, D>>::Create(*ssd, {.isa = isa});
  ASSERT_TRUE(ks.ok() && kz.ok());
  std::vector<testing::RandomBags<int32_t>> batches;
  for (int64_t k = 0; k < kSteps; ++k) batches.push_back(testing::MakeBags<int32_t>(kBags, 0, 12, kN, seed * 100 + k));
  std::vector<float> out_s(kBags * d), out_z(kBags * d), grad(kBags * d);
  Xoshiro256pp rng(seed);
  UpdatePlan plan;
  ASSERT_TRUE(ssd->Prefetch(0, std::span<const int32_t>(batches[0].indices)).ok());
  for (int64_t k = 0; k < kSteps; ++k) {
    if (k + 1 < kSteps) {
      absl::Status s = ssd->Prefetch(k + 1, std::span<const int32_t>(batches[k + 1].indices));
      ASSERT_TRUE(s.ok()) << s;
    }
    ASSERT_TRUE(ssd->WaitResident(k).ok());
    const Bags<int32_t> b = batches[k].bags(k % 3 == 0);
    ASSERT_TRUE(ks->pooled_lookup(b, {out_s.data(), kBags, d, d}).ok());
    ASSERT_TRUE(kz->pooled_lookup(b, {out_z.data(), kBags, d, d}).ok());
    ASSERT_EQ(std::memcmp(out_s.data(), out_z.data(), out_s.size() * sizeof(float)), 0) << "step " << k;
    ASSERT_TRUE(reindex("s", kN, b, Pooling::kSum, &plan).ok());
    for (float& g : grad) g = static_cast<float>(rng.Uniform() - 0.5);
    const ConstMatrixView gv(grad.data(), kBags, d, d);
    ASSERT_TRUE(ks->sgd_update(plan, gv, {.learning_rate = 0.1f}).ok());
    ASSERT_TRUE(kz->sgd_update(plan, gv, {.learning_rate = 0.1f}).ok());
    ASSERT_TRUE(ssd->Unpin(k).ok());
  }
  const SsdStats s = ssd->stats();
  EXPECT_GT(s.dirty_evictions, 0) << s.ToString(slot);
  EXPECT_GT(s.io.reads, 0) << s.ToString(slot);   // rows came back from the file
  EXPECT_GT(s.rmw_reads, 0) << s.ToString(slot);  // partial blocks were patched
  EXPECT_GT(s.prefetch_hits, 0) << s.ToString(slot);
  // Every row, resident or not (kRead fetches), then again after a flush and
  // with nothing resident.
  for (int pass = 0; pass < 2; ++pass) {
    for (int64_t r = 0; r < kN; ++r) {
      ASSERT_EQ(std::memcmp(simple->rowpointer(r), ssd->rowpointer(r, Access::kRead), ssd->row_bytes()), 0)
          << "row " << r << " pass " << pass;
    }
    ASSERT_TRUE(ssd->FlushDirty().ok());
    ASSERT_TRUE(ssd->EvictUnpinned().ok());
  }
  EXPECT_TRUE(ssd->status().ok()) << ssd->status();
}

TEST(SsdTable, TrainingWithEvictionsMatchesSimpleTableBitForBit) {
  for (Isa isa : testing::AvailableIsas()) {
    ExpectTrainingMatchesSimpleTable<float, 64>(isa, 64, 1);
    ExpectTrainingMatchesSimpleTable<bfloat16, 32>(isa, 32, 2);
    ExpectTrainingMatchesSimpleTable<float, kDynamic>(isa, 24, 3);
    ExpectTrainingMatchesSimpleTable<bfloat16, kDynamic>(isa, 200, 4);  // 400-byte rows: 10 per block
  }
}

TEST(SsdTable, RowsLargerThanABlockSpanWholeBlocks) {
  constexpr int64_t kN = 40, kD = 1500;  // 6000-byte rows in 8 KiB blocks
  auto t = SsdTable<float, kDynamic>::Create({.name = "wide", .nvectors = kN, .featuresize = kD},
                                             Options(4 * kD * 4, std::nullopt));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->layout().block_bytes, 8192);
  for (int64_t r = 0; r < kN; ++r) {
    float* p = t->rowpointer(r, Access::kUpdate);
    for (int64_t j = 0; j < kD; ++j) p[j] = static_cast<float>(r * 10000 + j);
  }
  ASSERT_TRUE(t->EvictUnpinned().ok());
  for (int64_t r = 0; r < kN; ++r) {
    const float* p = t->rowpointer(r, Access::kRead);
    for (int64_t j = 0; j < kD; j += 97) ASSERT_EQ(p[j], static_cast<float>(r * 10000 + j)) << r;
  }
}

TEST(SsdTable, PinnedRowsAreNeverEvicted) {
  constexpr int64_t kN = 4096;
  auto t = SsdTable<float, 16>::Create({.name = "p", .nvectors = kN}, Options(64 * 64));  // 64 slots
  ASSERT_TRUE(t.ok()) << t.status();
  std::vector<int64_t> pinned;
  for (int64_t r = 0; r < 40; ++r) pinned.push_back(r * 97);
  ASSERT_TRUE(t->Prefetch(1, pinned).ok());
  ASSERT_TRUE(t->WaitResident(1).ok());
  std::vector<const float*> where;
  for (int64_t r : pinned) {
    float* p = t->rowpointer(r, Access::kUpdate);
    p[0] = static_cast<float>(-r);
    where.push_back(p);
  }
  // Misses, batches and unpins all around them: 24 free slots for thousands of rows.
  for (int64_t k = 2; k < 50; ++k) {
    std::vector<int64_t> rows;
    for (int64_t j = 0; j < 20; ++j) rows.push_back((k * 131 + j * 17) % kN);
    ASSERT_TRUE(t->Prefetch(k, rows).ok());
    ASSERT_TRUE(t->WaitResident(k).ok());
    for (int64_t r : rows) t->rowpointer(r, Access::kUpdate)[1] = 1.0f;
    ASSERT_TRUE(t->Unpin(k).ok());
    for (int64_t j = 0; j < 8; ++j) t->rowpointer((k * 7 + j * 1000 + 1) % kN, Access::kForward);
  }
  EXPECT_GT(t->stats().evictions, 500);
  for (size_t i = 0; i < pinned.size(); ++i) {
    ASSERT_TRUE(t->is_resident(pinned[i]));
    ASSERT_EQ(t->rowpointer(pinned[i], Access::kRead), where[i]) << "row " << pinned[i] << " moved";
    ASSERT_EQ(where[i][0], static_cast<float>(-pinned[i]));
  }
  ASSERT_TRUE(t->Unpin(1).ok());
  EXPECT_EQ(t->pinned_rows(), 0);
}

TEST(SsdTable, TooFewSlotsForThePinnedRowsSaysHowManyBytes) {
  auto t = SsdTable<float, 16>::Create({.name = "small", .nvectors = 1000}, Options(10 * 64));  // 10 slots
  ASSERT_TRUE(t.ok()) << t.status();
  std::vector<int64_t> a = {1, 2, 3, 4, 5, 6}, b = {7, 8, 9, 10, 11, 12};
  ASSERT_TRUE(t->Prefetch(0, a).ok());
  absl::Status s = t->Prefetch(1, b);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("need 12 rows in DRAM at once, 768 bytes"), std::string::npos) << s;
  EXPECT_NE(s.message().find("holds 10 rows, 640 bytes"), std::string::npos) << s;
  EXPECT_EQ(t->pinned_rows(), 6);  // nothing of the refused batch stays pinned
  EXPECT_TRUE(t->Unpin(1).code() == absl::StatusCode::kNotFound);
  ASSERT_TRUE(t->Unpin(0).ok());
  EXPECT_TRUE(t->Prefetch(1, b).ok());
}

TEST(SsdTable, OutOfRangeRowIsAnErrorNamingTableBatchAndIndex) {
  auto t = SsdTable<float, 16>::Create({.name = "t3", .nvectors = 100}, Options(1 << 12));
  ASSERT_TRUE(t.ok());
  std::vector<int32_t> rows = {1, 100};
  absl::Status s = t->Prefetch(9, rows);
  EXPECT_EQ(s.message(), "table t3, prefetch of batch 9, index 1: row 100 >= 100");
}

// Writes rows 0..n-1 with value r in element 0, leaves them all on the file.
template <typename Table>
void WriteAndEvictAll(Table& t, int64_t n) {
  for (int64_t r = 0; r < n; ++r) t.rowpointer(r, Access::kUpdate)[0] = static_cast<float>(r);
  ASSERT_TRUE(t.EvictUnpinned().ok());
}

SsdOptions WithFaults(int64_t capacity, std::vector<IoFault> faults) {
  SsdOptions o = Options(capacity);
  o.file.wrap_io = [faults](std::unique_ptr<BlockIo> io) -> std::unique_ptr<BlockIo> {
    return std::make_unique<FaultInjectingBlockIo>(std::move(io), faults);
  };
  return o;
}

TEST(SsdTable, EioOnAReadIsAStatusNamingTableFileAndOffsetAndLosesNothing) {
  auto t = SsdTable<float, 16>::Create({.name = "t_eio", .nvectors = 256},
                                       WithFaults(256 * 64, {{.op = IoOp::kRead, .nth = 2, .error = EIO}}));
  ASSERT_TRUE(t.ok()) << t.status();
  WriteAndEvictAll(*t, 256);  // 4 blocks of 64 rows, all written, nothing resident
  std::vector<int64_t> rows = {0, 64, 128, 192};  // one row per block: 4 reads, the 2nd fails
  ASSERT_TRUE(t->Prefetch(0, rows).ok());
  absl::StatusOr<absl::Duration> w = t->WaitResident(0);
  ASSERT_FALSE(w.ok());
  const std::string msg(w.status().message());
  EXPECT_NE(msg.find("t_eio: "), std::string::npos) << msg;
  EXPECT_NE(msg.find("(unnamed temporary file)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("read of 4096 bytes at offset 4096 failed: Input/output error"), std::string::npos) << msg;
  EXPECT_FALSE(t->is_resident(64));
  EXPECT_TRUE(t->is_resident(0));
  ASSERT_TRUE(t->Unpin(0).ok());
  // Nothing lost: the failed row is read again, the others are as written.
  for (int64_t r = 0; r < 256; ++r) ASSERT_EQ(t->rowpointer(r, Access::kRead)[0], static_cast<float>(r)) << r;
  EXPECT_TRUE(t->status().ok());
}

TEST(SsdTable, EnospcOnAWriteBackKeepsTheRowDirtyAndResident) {
  // 64 slots, 64 rows per block.
  auto t = SsdTable<float, 16>::Create({.name = "t_full", .nvectors = 1024},
                                       WithFaults(64 * 64, {{.op = IoOp::kWrite, .nth = 1, .error = ENOSPC}}));
  ASSERT_TRUE(t.ok()) << t.status();
  for (int64_t r = 0; r < 64; ++r) t->rowpointer(r, Access::kUpdate)[0] = static_cast<float>(r) + 0.5f;
  std::vector<int64_t> other = {500, 501, 502};
  absl::Status s = t->Prefetch(0, other);  // must evict dirty rows of block 0: the write fails
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("t_full: "), std::string::npos) << s;
  EXPECT_NE(s.message().find("write of 4096 bytes at offset 0 failed: No space left on device"), std::string::npos)
      << s;
  EXPECT_EQ(t->pinned_rows(), 0);
  for (int64_t r = 0; r < 64; ++r) {
    ASSERT_TRUE(t->is_dirty(r)) << r;
    ASSERT_EQ(t->rowpointer(r, Access::kRead)[0], static_cast<float>(r) + 0.5f);
  }
  // The fault fired once: the next attempt writes and evicts; the values survive.
  ASSERT_TRUE(t->Prefetch(0, other).ok());
  ASSERT_TRUE(t->Unpin(0).ok());
  ASSERT_TRUE(t->EvictUnpinned().ok());
  for (int64_t r = 0; r < 64; ++r) ASSERT_EQ(t->rowpointer(r, Access::kRead)[0], static_cast<float>(r) + 0.5f);
}

TEST(SsdTable, FailedSyncFetchReturnsNaNsAndSetsStatus) {
  auto t = SsdTable<float, 16>::Create({.name = "t_sync", .nvectors = 256},
                                       WithFaults(256 * 64, {{.op = IoOp::kRead, .nth = 1, .kind = IoFault::Kind::kShortRead}}));
  ASSERT_TRUE(t.ok());
  WriteAndEvictAll(*t, 256);
  EXPECT_TRUE(std::isnan(t->rowpointer(3, Access::kForward)[0]));
  EXPECT_NE(t->status().message().find("read of 4096 bytes at offset 0 transferred only 2048 bytes"), std::string::npos)
      << t->status();
  EXPECT_EQ(t->rowpointer(3, Access::kForward)[0], 3.0f);  // a second try reads it
}

// Hit rates of CLOCK and FIFO on a Zipf(1.05) stream of batches, the pool
// holding 5% of the rows. Deterministic (fixed seed, no I/O timing).
double ZipfHitRate(Eviction eviction) {
  constexpr int64_t kN = 100000, kBatch = 512, kSteps = 200;
  SsdOptions o = Options(kN / 20 * 64, 1, testing::TmpfsDir());
  o.eviction = eviction;
  auto t = SsdTable<float, 16>::Create({.name = "zipf", .nvectors = kN}, o);
  EXPECT_TRUE(t.ok());
  ZipfSampler zipf(kN, 1.05);
  LfsrScrambler scramble(kN, 3);
  Xoshiro256pp rng(11);
  std::vector<int64_t> rows(kBatch);
  for (int64_t k = 0; k < kSteps; ++k) {
    for (int64_t& r : rows) r = static_cast<int64_t>(scramble(zipf(rng)));
    EXPECT_TRUE(t->Prefetch(k, rows).ok());
    EXPECT_TRUE(t->WaitResident(k).ok());
    for (int64_t r : rows) t->rowpointer(r, Access::kForward);
    EXPECT_TRUE(t->Unpin(k).ok());
  }
  return t->stats().hit_rate();
}

TEST(SsdTable, ClockKeepsMoreHotRowsThanFifoOnAZipfStream) {
  const double clock = ZipfHitRate(Eviction::kClock), fifo = ZipfHitRate(Eviction::kFifo);
  std::printf("Zipf(1.05), 100000 rows, pool of 5%%, batches of 512: hit rate CLOCK %.3f, FIFO %.3f\n", clock, fifo);
  EXPECT_GT(clock, fifo);
}

}  // namespace
}  // namespace cemb
