#include "ssd/ssd_table.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <vector>

#include "base/random.h"
#include "embedding/kernels.h"
#include "embedding/reindex.h"
#include "embedding/table_io.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
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
  // The log: segments of 4096 row ids (16 KiB) and 1 MiB of rows, for 1.5 x
  // the table's 256 MiB of rows, plus 8 in reserve.
  const LogLayout& log = t->log_layout();
  EXPECT_EQ(log.segment_bytes, 16384 + (1 << 20));
  EXPECT_EQ(log.nsegments, 384 + 8);
  EXPECT_EQ(t->file().size(), log.file_bytes());
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
  const int64_t slot = SlotBytes(static_cast<int64_t>(d * sizeof(T)));
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
  // Every read is a missed row's block or the collector's: nothing is read to be written.
  EXPECT_EQ(s.io.reads, s.fetch_reads + s.gc_segments) << s.ToString(slot);
  EXPECT_GT(s.segments_written, 0) << s.ToString(slot);
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
  ASSERT_TRUE(t.FlushDirty().ok());  // the segments' writes done: later reads reach the file
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
  // Rows 0-255 were appended in order, 64 to a segment (a 4 KiB id area, then one block).
  const LogLayout& log = t->log_layout();
  ASSERT_EQ(log.segment_rows, 64);
  EXPECT_NE(msg.find(absl::StrCat("read of 4096 bytes at offset ", log.segment_bytes + log.id_bytes,
                                  " failed: Input/output error")),
            std::string::npos)
      << msg;
  EXPECT_FALSE(t->is_resident(64));
  EXPECT_TRUE(t->is_resident(0));
  ASSERT_TRUE(t->Unpin(0).ok());
  // Nothing lost: the failed row is read again, the others are as written.
  for (int64_t r = 0; r < 256; ++r) ASSERT_EQ(t->rowpointer(r, Access::kRead)[0], static_cast<float>(r)) << r;
  EXPECT_TRUE(t->status().ok());
}

TEST(SsdTable, EnospcOnASegmentWriteIsReportedByTheNextPrefetchAndLosesNothing) {
  // 64 rows a segment: evicting 64 dirty rows fills one, whose write fails.
  auto t = SsdTable<float, 16>::Create({.name = "t_full", .nvectors = 1024},
                                       WithFaults(64 * 64, {{.op = IoOp::kWrite, .nth = 1, .error = ENOSPC}}));
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->log_layout().segment_rows, 64);
  for (int64_t r = 0; r < 64; ++r) t->rowpointer(r, Access::kUpdate)[0] = static_cast<float>(r) + 0.5f;
  ASSERT_TRUE(t->EvictUnpinned().ok());  // the segment's write goes out behind the call
  std::vector<int64_t> rows = {3, 500};
  absl::Status s;
  for (int64_t k = 0; s.ok() && k < 100; ++k) {  // the failure is reported by the first call after its completion
    s = t->Prefetch(k, rows);
    if (s.ok()) s = t->WaitResident(k).status();
    if (s.ok()) s = t->Unpin(k);
  }
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("t_full: "), std::string::npos) << s;
  EXPECT_NE(s.message().find(absl::StrCat("write of ", t->log_layout().segment_bytes,
                                          " bytes at offset 0 failed: No space left on device")),
            std::string::npos)
      << s;
  EXPECT_EQ(t->pinned_rows(), 0);
  // The rows are still in their write buffer; a flush writes it again.
  for (int64_t r = 0; r < 64; ++r) ASSERT_EQ(t->rowpointer(r, Access::kRead)[0], static_cast<float>(r) + 0.5f) << r;
  ASSERT_TRUE(t->FlushDirty().ok());
  ASSERT_TRUE(t->EvictUnpinned().ok());
  for (int64_t r = 0; r < 64; ++r) ASSERT_EQ(t->rowpointer(r, Access::kRead)[0], static_cast<float>(r) + 0.5f) << r;
  EXPECT_TRUE(t->status().ok()) << t->status();
}

TEST(SsdTable, FailedSyncFetchReturnsNaNsAndSetsStatus) {
  auto t = SsdTable<float, 16>::Create({.name = "t_sync", .nvectors = 256},
                                       WithFaults(256 * 64, {{.op = IoOp::kRead, .nth = 1, .kind = IoFault::Kind::kShortRead}}));
  ASSERT_TRUE(t.ok());
  WriteAndEvictAll(*t, 256);
  EXPECT_TRUE(std::isnan(t->rowpointer(3, Access::kForward)[0]));
  EXPECT_NE(t->status().message().find(absl::StrCat("read of 4096 bytes at offset ", t->log_layout().id_bytes,
                                                    " transferred only 2048 bytes")),
            std::string::npos)
      << t->status();
  EXPECT_EQ(t->rowpointer(3, Access::kForward)[0], 3.0f);  // a second try reads it
}

// --- snapshots ---------------------------------------------------------------

// Sets rows [begin, end) of `ssd`, and of `ref` when given, to values made
// from (salt, row, column).
template <typename Ssd, typename Ref = Ssd>
void WriteRows(Ssd& ssd, int64_t begin, int64_t end, float salt, Ref* ref = nullptr) {
  using T = typename Ssd::value_type;
  for (int64_t r = begin; r < end; ++r) {
    T* p = ssd.rowpointer(r, Access::kUpdate);
    for (int64_t j = 0; j < ssd.featuresize(); ++j) {
      p[j] = FromFloat<T>(salt + static_cast<float>(r) * 0.001f + static_cast<float>(j) * 0.25f);
      if (ref != nullptr) ref->rowpointer(r)[j] = p[j];
    }
  }
}

template <typename A, typename B>
void ExpectSameRows(const A& expected, const B& actual) {
  ASSERT_EQ(expected.nvectors(), actual.nvectors());
  const size_t bytes = static_cast<size_t>(actual.featuresize()) * sizeof(typename B::value_type);
  for (int64_t r = 0; r < actual.nvectors(); ++r) {
    ASSERT_EQ(std::memcmp(expected.rowpointer(r, Access::kRead), actual.rowpointer(r, Access::kRead), bytes), 0)
        << "row " << r;
  }
}

std::string SnapshotPath(const std::string& name) { return testing::DiskDir() + "/" + name + ".ssd"; }

// A table with rows written and evicted (in the log), rows dirty at the time
// of the save, and most rows never written, saved and loaded into a table
// that holds other written rows and dirty rows of its own: the loaded table
// equals a SimpleTable that got the same writes, bit for bit.
template <typename T, int64_t D>
void ExpectSnapshotRoundTrip() {
  SCOPED_TRACE(::testing::Message() << "row bytes " << D * sizeof(T));
  constexpr int64_t kN = 20000, kWritten = 350;
  constexpr uint64_t kSeed = 5;
  auto ref = SimpleTable<T, D>::Create({.name = "ref", .nvectors = kN});
  ASSERT_TRUE(ref.ok());
  InitUniform(*ref, kSeed);
  const int64_t slot = SlotBytes(static_cast<int64_t>(D * sizeof(T)));
  auto a = SsdTable<T, D>::Create({.name = "snap_a", .nvectors = kN}, Options(200 * slot, kSeed));
  ASSERT_TRUE(a.ok()) << a.status();
  WriteRows(*a, 0, 300, 1.0f, &*ref);  // more rows than slots: evicted, in the log
  ASSERT_TRUE(a->EvictUnpinned().ok());
  WriteRows(*a, 5000, 5050, 2.0f, &*ref);  // dirty in DRAM at the save
  ASSERT_TRUE(a->is_dirty(5000));
  ASSERT_TRUE(a->is_dirty(5049));

  const std::string path = SnapshotPath(absl::StrCat("round_trip_", sizeof(T)));
  absl::StatusOr<SnapshotInfo> saved = a->SaveSnapshot(path);
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(saved->rows, kWritten);
  // A 4 KiB header, the row ids (4 bytes each, padded to 4 KiB), the rows.
  EXPECT_EQ(saved->file_bytes, 4096 + 4096 + static_cast<uint64_t>(kWritten * D * sizeof(T)));
  EXPECT_EQ(std::filesystem::file_size(path), saved->file_bytes);
  EXPECT_FALSE(a->is_dirty(5000));  // flushed
  EXPECT_TRUE(a->is_resident(5000));

  auto b = SsdTable<T, D>::Create({.name = "snap_b", .nvectors = kN}, Options(200 * slot, kSeed));
  ASSERT_TRUE(b.ok()) << b.status();
  WriteRows(*b, 10000, 10300, 3.0f);  // rows the snapshot lacks
  ASSERT_TRUE(b->EvictUnpinned().ok());
  WriteRows(*b, 5010, 5020, 4.0f);  // dirty: dropped by the load
  ASSERT_TRUE(b->is_dirty(5010));
  absl::StatusOr<SnapshotInfo> loaded = b->LoadSnapshot(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->rows, kWritten);
  EXPECT_FALSE(b->is_resident(5010));
  EXPECT_EQ(b->stats().live_rows, kWritten);
  const int64_t lazy_before = b->stats().lazy_rows;
  ExpectSameRows(*ref, *b);
  EXPECT_EQ(b->stats().lazy_rows - lazy_before, kN - kWritten);
  ExpectSameRows(*ref, *a);  // the save changed nothing
  // The loaded table trains on: its rows are read back after eviction.
  WriteRows(*b, 100, 400, 5.0f, &*ref);
  ASSERT_TRUE(b->EvictUnpinned().ok());
  ExpectSameRows(*ref, *b);
  EXPECT_TRUE(b->status().ok()) << b->status();
  std::remove(path.c_str());
}

TEST(SsdTable, SnapshotRoundTripIsBitForBit) {
  ExpectSnapshotRoundTrip<float, 64>();
  ExpectSnapshotRoundTrip<bfloat16, 32>();
}

TEST(SsdTable, SnapshotHoldsTheHeaderAndTheWrittenRowsOnly) {
  // 2^20 rows of 256 bytes: a 256 MiB table.
  auto t = SsdTable<float, 64>::Create({.name = "big", .nvectors = 1 << 20}, Options(1 << 20));
  ASSERT_TRUE(t.ok()) << t.status();
  const std::string path = SnapshotPath("sizes");
  absl::StatusOr<SnapshotInfo> empty = t->SaveSnapshot(path);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->rows, 0);
  EXPECT_EQ(std::filesystem::file_size(path), 4096u);  // the header
  for (int64_t r : {3, 17, 500000}) t->rowpointer(r, Access::kUpdate)[0] = 1.5f;
  absl::StatusOr<SnapshotInfo> three = t->SaveSnapshot(path);
  ASSERT_TRUE(three.ok()) << three.status();
  EXPECT_EQ(three->rows, 3);
  EXPECT_EQ(std::filesystem::file_size(path), 8192u + 3 * 256);
  EXPECT_EQ(three->file_bytes, 8192u + 3 * 256);
  std::remove(path.c_str());
}

TEST(SsdTable, SnapshotReportsProgressLines) {
  auto t = SsdTable<float, 16>::Create({.name = "p", .nvectors = 64 * 1000}, Options(1 << 20));
  ASSERT_TRUE(t.ok()) << t.status();
  WriteRows(*t, 0, 64 * 128, 1.0f);  // 8192 rows of 64 bytes: 0.5 MiB
  const std::string path = SnapshotPath("progress");
  {
    std::vector<std::string> lines;
    SnapshotOptions o{.progress = [&](std::string_view l) { lines.emplace_back(l); },
                      .progress_every = absl::ZeroDuration()};
    ASSERT_TRUE(t->SaveSnapshot(path, o).ok());
    ASSERT_FALSE(lines.empty());
    EXPECT_EQ(lines.back(), "p: snapshot 0.5 of 0.5 MiB");
    lines.clear();
    ASSERT_TRUE(t->LoadSnapshot(path, o).ok());
    ASSERT_FALSE(lines.empty());
    EXPECT_EQ(lines.back(), "p: loading snapshot 0.5 of 0.5 MiB");
    lines.clear();
    o.progress_every = absl::Hours(1);  // no line before an hour has passed
    ASSERT_TRUE(t->SaveSnapshot(path, o).ok());
    EXPECT_TRUE(lines.empty());
  }
  std::remove(path.c_str());
}

TEST(SsdTable, SnapshotOfAnotherShapeIsRefusedNamingTheFieldAndTheTableIsUnchanged) {
  auto src = SsdTable<float, 16>::Create({.name = "src", .nvectors = 1000}, Options(1 << 12, 7));
  ASSERT_TRUE(src.ok());
  src->rowpointer(1, Access::kUpdate)[0] = 9.0f;
  const std::string path = SnapshotPath("shape");
  ASSERT_TRUE(src->SaveSnapshot(path).ok());
  auto expect_refused = [&](auto&& table, const std::string& what) {
    ASSERT_TRUE(table.ok()) << table.status();
    using T = std::decay_t<decltype(*table->rowpointer(0))>;
    table->rowpointer(1, Access::kUpdate)[0] = FromFloat<T>(-3.0f);
    absl::StatusOr<SnapshotInfo> r = table->LoadSnapshot(path);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
    EXPECT_EQ(r.status().message(), absl::StrCat("dst: ", path, ": ", what)) << r.status();
    EXPECT_EQ(ToFloat(table->rowpointer(1, Access::kRead)[0]), -3.0f);
    EXPECT_TRUE(table->is_dirty(1));
    EXPECT_TRUE(table->status().ok());
  };
  {
    auto t = SsdTable<float, 16>::Create({.name = "dst", .nvectors = 2000}, Options(1 << 12, 7));
    expect_refused(t, "the snapshot's nvectors is 1000, the table's is 2000");
  }
  {
    auto t = SsdTable<bfloat16, 16>::Create({.name = "dst", .nvectors = 1000}, Options(1 << 12, 7));
    expect_refused(t, "the snapshot's row_bytes is 64, the table's is 32");
  }
  {
    auto t = SsdTable<float, 16>::Create({.name = "dst", .nvectors = 1000}, Options(1 << 12, 7));
    ASSERT_TRUE(t.ok());
    ASSERT_TRUE(t->LoadSnapshot(path).ok());
    EXPECT_EQ(t->rowpointer(1, Access::kRead)[0], 9.0f);
  }
  std::remove(path.c_str());
}

// A snapshot loads into a table made with another init seed (or none): the
// table takes the snapshot's seed, so the rows the snapshot does not hold
// (never written) read as the source table's, and a snapshot of the loaded
// table carries that seed on.
TEST(SsdTable, SnapshotOfAnotherSeedLoadsAndTheRowsItDoesNotHoldAreTheSourcesInitialRows) {
  constexpr int64_t kRows = 1000;
  auto src = SsdTable<float, 16>::Create({.name = "src", .nvectors = kRows}, Options(1 << 12, 7));
  ASSERT_TRUE(src.ok());
  src->rowpointer(1, Access::kUpdate)[0] = 9.0f;
  std::vector<float> expected(kRows * 16);
  for (int64_t r = 0; r < kRows; ++r) std::memcpy(&expected[r * 16], src->rowpointer(r, Access::kRead), 64);
  const std::string path = SnapshotPath("seed");
  ASSERT_TRUE(src->SaveSnapshot(path).ok());
  const std::string again = SnapshotPath("seed_again");
  for (std::optional<uint64_t> seed : {std::optional<uint64_t>(8), std::optional<uint64_t>()}) {
    auto t = SsdTable<float, 16>::Create({.name = "dst", .nvectors = kRows}, Options(1 << 12, seed));
    ASSERT_TRUE(t.ok());
    ASSERT_NE(t->rowpointer(2, Access::kRead)[0], expected[2 * 16]);  // its own initial row before the load
    ASSERT_TRUE(t->LoadSnapshot(path).ok());
    for (int64_t r = 0; r < kRows; ++r) {
      ASSERT_EQ(std::memcmp(t->rowpointer(r, Access::kRead), &expected[r * 16], 64), 0) << "row " << r;
    }
    // Its own snapshot holds the seed it took: a third table loads the same rows.
    ASSERT_TRUE(t->SaveSnapshot(again).ok());
    auto u = SsdTable<float, 16>::Create({.name = "u", .nvectors = kRows}, Options(1 << 12, 3));
    ASSERT_TRUE(u.ok());
    ASSERT_TRUE(u->LoadSnapshot(again).ok());
    for (int64_t r = 0; r < kRows; ++r) {
      ASSERT_EQ(std::memcmp(u->rowpointer(r, Access::kRead), &expected[r * 16], 64), 0) << "row " << r;
    }
  }
  std::remove(path.c_str());
  std::remove(again.c_str());
}

TEST(SsdTable, TruncatedSnapshotIsDataLossNamingTheFileAndTheOffset) {
  auto t = SsdTable<float, 16>::Create({.name = "tr", .nvectors = 1000}, Options(1 << 12, 7));
  ASSERT_TRUE(t.ok());
  for (int64_t r : {0, 100, 900}) t->rowpointer(r, Access::kUpdate)[0] = static_cast<float>(r);  // 3 rows
  const std::string path = SnapshotPath("truncated");
  ASSERT_TRUE(t->SaveSnapshot(path).ok());
  ASSERT_EQ(std::filesystem::file_size(path), 8192u + 3 * 64);
  t->rowpointer(5, Access::kUpdate)[0] = 55.0f;  // dirty: a refused load must keep it
  std::filesystem::resize_file(path, 8192 + 3 * 64 - 100);
  absl::StatusOr<SnapshotInfo> r = t->LoadSnapshot(path);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << r.status();
  EXPECT_EQ(r.status().message(), absl::StrCat("tr: ", path, ": truncated ssd snapshot: it ends at offset 8284, ",
                                               "before the end of its 3 rows at offset 8384"));
  std::filesystem::resize_file(path, 50);
  r = t->LoadSnapshot(path);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << r.status();
  EXPECT_EQ(r.status().message(),
            absl::StrCat("tr: ", path, ": truncated ssd snapshot: it ends at offset 50, before the end of its "
                         "header at offset 72"));
  EXPECT_EQ(t->rowpointer(5, Access::kRead)[0], 55.0f);
  EXPECT_EQ(t->rowpointer(100, Access::kRead)[0], 100.0f);
  EXPECT_TRUE(t->status().ok());
  std::remove(path.c_str());
}

TEST(SsdTable, LoadSnapshotWithRowsPinnedIsRefused) {
  auto t = SsdTable<float, 16>::Create({.name = "pin", .nvectors = 1000}, Options(1 << 12, 7));
  ASSERT_TRUE(t.ok());
  const std::string path = SnapshotPath("pinned");
  std::vector<int64_t> rows = {1, 2};
  ASSERT_TRUE(t->Prefetch(0, rows).ok());
  ASSERT_TRUE(t->SaveSnapshot(path).ok());  // a save may leave batches pinned
  absl::StatusOr<SnapshotInfo> r = t->LoadSnapshot(path);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  ASSERT_TRUE(t->Unpin(0).ok());
  EXPECT_TRUE(t->LoadSnapshot(path).ok());
  std::remove(path.c_str());
}

// Faults planted in the table's backend reach the snapshot: EIO on a read of
// the log during the save, EIO on a segment write during the load.
TEST(SsdTable, EioDuringSaveSnapshotIsAnErrorAndTheTableStaysUsable) {
  auto t = SsdTable<float, 16>::Create({.name = "t_snap", .nvectors = 256},
                                       WithFaults(256 * 64, {{.op = IoOp::kRead, .nth = 2, .error = EIO}}));
  ASSERT_TRUE(t.ok()) << t.status();
  WriteAndEvictAll(*t, 256);  // 4 segments written, no read yet
  const LogLayout& log = t->log_layout();
  ASSERT_EQ(log.segment_rows, 64);
  const std::string path = SnapshotPath("eio_save");
  absl::StatusOr<SnapshotInfo> r = t->SaveSnapshot(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << r.status();
  EXPECT_THAT(std::string(r.status().message()),
              ::testing::HasSubstr(absl::StrCat("t_snap: ", testing::DiskDir(), "/(unnamed temporary file): read of ",
                                                log.segment_bytes, " bytes at offset ", log.segment_bytes,
                                                " failed: Input/output error")));
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  EXPECT_TRUE(t->status().ok());
  for (int64_t r2 = 0; r2 < 256; ++r2) ASSERT_EQ(t->rowpointer(r2, Access::kRead)[0], static_cast<float>(r2)) << r2;
  ASSERT_TRUE(t->SaveSnapshot(path).ok());

  // A directory that does not exist: the error names the file.
  r = t->SaveSnapshot(testing::DiskDir() + "/no/such/dir/x.ssd");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound) << r.status();
  EXPECT_THAT(std::string(r.status().message()), ::testing::HasSubstr("t_snap: " + testing::DiskDir() + "/no/such/dir/x.ssd.tmp: cannot create"));

  auto u = SsdTable<float, 16>::Create({.name = "t_load", .nvectors = 256},
                                       WithFaults(256 * 64, {{.op = IoOp::kWrite, .nth = 3, .error = EIO}}));
  ASSERT_TRUE(u.ok()) << u.status();
  r = u->LoadSnapshot(path);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()),
              ::testing::HasSubstr(absl::StrCat("t_load: ", testing::DiskDir(), "/(unnamed temporary file): write of ",
                                                log.segment_bytes, " bytes at offset ", 2 * log.segment_bytes,
                                                " failed")));
  // Half loaded: the table says so and refuses use until a load succeeds.
  EXPECT_THAT(std::string(u->status().message()), ::testing::HasSubstr("rows are undefined"));
  std::vector<int64_t> rows = {1};
  EXPECT_EQ(u->Prefetch(0, rows).code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(std::isnan(u->rowpointer(1, Access::kRead)[0]));
  EXPECT_FALSE(u->SaveSnapshot(path + ".2").ok());
  ASSERT_TRUE(u->LoadSnapshot(path).ok());
  EXPECT_TRUE(u->status().ok()) << u->status();
  for (int64_t r2 = 0; r2 < 256; ++r2) ASSERT_EQ(u->rowpointer(r2, Access::kRead)[0], static_cast<float>(r2)) << r2;
  std::remove(path.c_str());
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
