// The ssd tier's log (docs/ssd.md, "The log"): every row reads back its last
// write however often the collector has moved it; the file never grows past
// its bound; a failed collector read is reported and loses nothing; nothing
// is read to be written.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/random.h"
#include "base/status_macros.h"
#include "embedding/simple_table.h"
#include "embedding/table_io.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ssd/ssd_table.h"
#include "tests/ssd/test_util.h"

namespace cemb {
namespace {

using Table = SsdTable<float, 16>;  // 64-byte rows: 64 to a block
constexpr int64_t kN = 4000;
constexpr uint64_t kSeed = 3;

// Segments of one block (64 rows), room for `space` x the table's rows.
SsdOptions SmallLog(int64_t capacity_rows, double space) {
  SsdOptions o;
  o.capacity_bytes = capacity_rows * 64;
  o.file.directory = testing::DiskDir();
  o.init_seed = kSeed;
  o.segment_bytes = 4096;
  o.file_space = space;
  return o;
}

// Training-like steps: batch k of `rows` is prefetched, every distinct row
// of it updated (element 0 set to a value unique to the step and the row),
// unpinned. `ref` gets the same writes.
class Steps {
 public:
  Steps(Table* t, SimpleTable<float, 16>* ref) : t_(t), ref_(ref) {}

  absl::Status Run(int64_t k, const std::vector<int64_t>& rows) {
    if (absl::Status s = t_->Prefetch(k, rows); !s.ok()) return s;
    if (absl::Status s = t_->WaitResident(k).status(); !s.ok()) return s;
    for (int64_t r : rows) {
      const float v = static_cast<float>(k * kN + r);
      t_->rowpointer(r, Access::kUpdate)[0] = v;
      ref_->rowpointer(r)[0] = v;
    }
    return t_->Unpin(k);
  }

 private:
  Table* t_;
  SimpleTable<float, 16>* ref_;
};

std::vector<int64_t> Batch(Xoshiro256pp& rng, int64_t n, bool zipf, ZipfSampler& z) {
  std::vector<int64_t> rows(static_cast<size_t>(n));
  for (int64_t& r : rows) r = zipf ? static_cast<int64_t>(z(rng)) : static_cast<int64_t>(rng.Below(kN));
  return rows;
}

void ExpectSameRows(const SimpleTable<float, 16>& ref, const Table& t) {
  for (int64_t r = 0; r < kN; ++r) {
    ASSERT_EQ(std::memcmp(ref.rowpointer(r), t.rowpointer(r, Access::kRead), 64), 0) << "row " << r;
  }
}

// 400 batches of 256 rows over 4000: each row rewritten ~25 times, the log
// (1.5x the rows) rewritten over and over: the collector runs all along.
void ExpectLastWritesAfterManyCollections(bool zipf) {
  SCOPED_TRACE(zipf ? "Zipf(1.05)" : "uniform");
  auto ref = SimpleTable<float, 16>::Create({.name = "ref", .nvectors = kN});
  ASSERT_TRUE(ref.ok());
  InitUniform(*ref, kSeed);
  auto t = Table::Create({.name = "log", .nvectors = kN}, SmallLog(600, 1.5));
  ASSERT_TRUE(t.ok()) << t.status();
  const uint64_t file = t->file().size();
  EXPECT_EQ(file, t->log_layout().file_bytes());
  // The bound: 1.5 x the rows' blocks (63) in segments of one block and an id area, plus 8.
  EXPECT_EQ(t->log_layout().nsegments, 95 + 8);
  Steps steps(&*t, &*ref);
  Xoshiro256pp rng(zipf ? 5 : 6);
  ZipfSampler z(kN, 1.05);
  int64_t max_live = 0;
  for (int64_t k = 0; k < 400; ++k) {
    ASSERT_TRUE(steps.Run(k, Batch(rng, 256, zipf, z)).ok()) << "step " << k;
    max_live = std::max(max_live, t->stats().live_rows);
  }
  const SsdStats s = t->stats();
  SCOPED_TRACE(s.ToString(64));
  EXPECT_GT(s.gc_segments + s.gc_freed, 50);
  if (!zipf) {
    EXPECT_GT(s.gc_rows_moved, 0);
  }
  EXPECT_LE(max_live, kN);                  // one copy per row at most
  EXPECT_EQ(t->file().size(), file);        // never grew
  EXPECT_EQ(s.io.reads, s.fetch_reads + s.gc_segments);  // nothing read to be written
  // Every request through a buffer registered with io_uring, where the
  // kernel lets it pin them (root: no RLIMIT_MEMLOCK); the read buffers
  // (fewer than the queue depth here) carved from registered chunks.
  if (geteuid() == 0 && std::string(t->file().io().name()) == "io_uring") {
    EXPECT_EQ(s.io.registered, s.requests());
  }
  // Block reads keep block-sized buffers; only the collector's (at most 2) are segment-sized.
  EXPECT_LE(s.io_buffer_bytes, s.io_buffers * 4096 + 2 * (t->log_layout().segment_bytes - 4096));
  ExpectSameRows(*ref, *t);
  // After a flush, and with nothing resident: every row from the log.
  ASSERT_TRUE(t->FlushDirty().ok());
  ASSERT_TRUE(t->EvictUnpinned().ok());
  ExpectSameRows(*ref, *t);
  // A snapshot of the collected log loads into a fresh table, bit for bit.
  const std::string path =
      absl::StrCat(testing::DiskDir(), "/log_test_", zipf ? "zipf" : "uniform", "_", getpid(), ".ssd");
  ASSERT_TRUE(t->SaveSnapshot(path).ok());
  auto u = Table::Create({.name = "log2", .nvectors = kN}, SmallLog(600, 1.5));
  ASSERT_TRUE(u.ok());
  absl::StatusOr<SnapshotInfo> loaded = u->LoadSnapshot(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->rows, t->stats().live_rows);
  ExpectSameRows(*ref, *u);
  std::remove(path.c_str());
  EXPECT_TRUE(t->status().ok()) << t->status();
}

TEST(SsdLog, EveryRowReadsItsLastWriteAfterManyCollectionsUniform) { ExpectLastWritesAfterManyCollections(false); }
TEST(SsdLog, EveryRowReadsItsLastWriteAfterManyCollectionsZipf) { ExpectLastWritesAfterManyCollections(true); }

TEST(SsdLog, EveryRowWrittenInATightLogStillFits) {
  // 1.1x: every row written, then rewritten in random order several times.
  auto ref = SimpleTable<float, 16>::Create({.name = "ref", .nvectors = kN});
  ASSERT_TRUE(ref.ok());
  InitUniform(*ref, kSeed);
  auto t = Table::Create({.name = "tight", .nvectors = kN}, SmallLog(300, 1.1));
  ASSERT_TRUE(t.ok()) << t.status();
  Steps steps(&*t, &*ref);
  Xoshiro256pp rng(8);
  ZipfSampler z(kN, 1.05);
  int64_t k = 0;
  for (int64_t r = 0; r < kN; r += 200, ++k) {
    std::vector<int64_t> rows;
    for (int64_t i = r; i < std::min(kN, r + 200); ++i) rows.push_back(i);
    ASSERT_TRUE(steps.Run(k, rows).ok());
  }
  for (int64_t i = 0; i < 100; ++i, ++k) ASSERT_TRUE(steps.Run(k, Batch(rng, 200, false, z)).ok()) << k;
  const SsdStats s = t->stats();
  EXPECT_GT(s.gc_rows_moved, 0) << s.ToString(64);
  ExpectSameRows(*ref, *t);
}

// Fails the first collector read (a whole segment) with EIO.
class FailFirstSegmentRead final : public testing::ForwardingBlockIo {
 public:
  FailFirstSegmentRead(std::unique_ptr<BlockIo> io, uint32_t segment_bytes)
      : ForwardingBlockIo(std::move(io)), segment_bytes_(segment_bytes) {}
  absl::Status Submit(std::span<const BlockRequest> requests) override {
    std::vector<BlockRequest> pass;
    for (const BlockRequest& r : requests) {
      if (!fired_ && r.op == IoOp::kRead && r.bytes == segment_bytes_) {
        fired_ = true;
        failed_.push_back({r.tag, -EIO});
        offset_ = r.offset;
        continue;
      }
      pass.push_back(r);
    }
    return io_->Submit(pass);
  }
  absl::Status Reap(int64_t min_completions, std::vector<BlockCompletion>* out) override {
    const auto n = static_cast<int64_t>(failed_.size());
    out->insert(out->end(), failed_.begin(), failed_.end());
    failed_.clear();
    return io_->Reap(min_completions - n, out);
  }
  int64_t in_flight() const override { return io_->in_flight() + static_cast<int64_t>(failed_.size()); }
  uint64_t offset() const { return offset_; }

 private:
  uint32_t segment_bytes_;
  bool fired_ = false;
  uint64_t offset_ = 0;
  std::vector<BlockCompletion> failed_;
};

TEST(SsdLog, EioOnACollectorReadIsReportedNamingTheSegmentAndLosesNothing) {
  auto ref = SimpleTable<float, 16>::Create({.name = "ref", .nvectors = kN});
  ASSERT_TRUE(ref.ok());
  InitUniform(*ref, kSeed);
  SsdOptions o = SmallLog(600, 1.5);
  FailFirstSegmentRead* fault = nullptr;
  o.file.wrap_io = [&fault](std::unique_ptr<BlockIo> io) -> std::unique_ptr<BlockIo> {
    auto f = std::make_unique<FailFirstSegmentRead>(std::move(io), 4096 + 4096);  // id area + one block
    fault = f.get();
    return f;
  };
  auto t = Table::Create({.name = "t_gc", .nvectors = kN}, o);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->log_layout().segment_bytes, 8192);
  Steps steps(&*t, &*ref);
  Xoshiro256pp rng(6);
  ZipfSampler z(kN, 1.05);
  absl::Status failed;
  int64_t k = 0;
  for (; k < 400; ++k) {
    absl::Status s = steps.Run(k, Batch(rng, 256, false, z));
    if (!s.ok()) {
      failed = s;
      ASSERT_TRUE(t->pinned_rows() == 0 || t->Unpin(k).ok());
      ++k;
      break;
    }
  }
  ASSERT_FALSE(failed.ok()) << "the collector never read a segment";
  EXPECT_EQ(failed.code(), absl::StatusCode::kDataLoss) << failed;
  EXPECT_THAT(std::string(failed.message()),
              ::testing::HasSubstr(absl::StrCat("t_gc: ", testing::DiskDir(), "/(unnamed temporary file): read of 8192 "
                                                "bytes at offset ", fault->offset(), " failed: Input/output error")));
  // The segment stayed where it was: training goes on, the collector takes it later.
  for (int64_t i = 0; i < 100; ++i, ++k) ASSERT_TRUE(steps.Run(k, Batch(rng, 256, false, z)).ok()) << k;
  ExpectSameRows(*ref, *t);
  ASSERT_TRUE(t->FlushDirty().ok());
  ASSERT_TRUE(t->EvictUnpinned().ok());
  ExpectSameRows(*ref, *t);
}

// Rows 7 and 1000..2279 written, the rest lazy, nothing resident. They are
// in the log in that order, 64 to a segment of one block: block 0 holds
// rows 7 and 1000..1062, block j > 0 rows 999 + 64j ... 1062 + 64j.
absl::StatusOr<std::unique_ptr<Table>> RowsInTheLog(const std::string& name, SsdOptions options) {
  auto t = Table::Create({.name = name, .nvectors = kN}, std::move(options));
  if (!t.ok()) return t.status();
  auto table = std::make_unique<Table>(std::move(*t));
  table->rowpointer(7, Access::kUpdate)[0] = 1.0f;
  CEMB_RETURN_IF_ERROR(table->EvictUnpinned());
  for (int64_t r = 1000; r < 1000 + 20 * 64; ++r) table->rowpointer(r, Access::kUpdate)[0] = static_cast<float>(r);
  CEMB_RETURN_IF_ERROR(table->EvictUnpinned());
  CEMB_RETURN_IF_ERROR(table->FlushDirty());
  return table;
}

TEST(SsdLog, ReadingABlockAgainForOneOfTheFourBatchesAfterIsCounted) {
  absl::StatusOr<std::unique_ptr<Table>> made = RowsInTheLog("t_reread", SmallLog(kN, 1.5));
  ASSERT_TRUE(made.ok()) << made.status();
  Table& t = **made;
  int64_t k = 0;
  // Batch k reads `rows`, unpins them, and they leave DRAM (clean: no write).
  const auto read = [&](std::vector<int64_t> rows) {
    ASSERT_TRUE(t.Prefetch(k, rows).ok());
    ASSERT_TRUE(t.WaitResident(k).ok());
    ASSERT_TRUE(t.Unpin(k++).ok());
    ASSERT_TRUE(t.EvictUnpinned().ok());
  };
  const auto blocks = [](int64_t first, int64_t last) {  // a row of each block
    std::vector<int64_t> rows;
    for (int64_t j = first; j <= last; ++j) rows.push_back(999 + 64 * j);
    return rows;
  };
  read({7});
  // Eight block reads take every read buffer (a block stays in its buffer
  // until the buffer is reused), so row 7's block is read again below.
  ASSERT_LE(t.stats().io_buffers, 8);
  read(blocks(1, 8));
  EXPECT_EQ(t.stats().fetch_reads, 9);
  EXPECT_EQ(t.stats().fetch_rereads, 0);
  read({7});  // read 2 batches before: counted
  EXPECT_EQ(t.stats().fetch_reads, 10);
  EXPECT_EQ(t.stats().fetch_rereads, 1);
  for (int64_t lazy = 100; lazy < 104; ++lazy) read({lazy});
  read(blocks(9, 16));
  read({7});  // read 6 batches before: not counted
  EXPECT_EQ(t.stats().fetch_reads, 19);
  EXPECT_EQ(t.stats().fetch_rereads, 1);
  EXPECT_EQ(t.stats().shared_rows, 0);
  EXPECT_EQ(t.rowpointer(7, Access::kRead)[0], 1.0f);
}

TEST(SsdLog, ARowOfABlockStillInItsBufferIsCopiedNotReadAgain) {
  absl::StatusOr<std::unique_ptr<Table>> made = RowsInTheLog("t_kept", SmallLog(kN, 1.5));
  ASSERT_TRUE(made.ok()) << made.status();
  Table& t = **made;
  for (int64_t k = 0; k < 3; ++k) {  // rows 1000, 1001, 1002: one block, read once
    ASSERT_TRUE(t.Prefetch(k, std::vector<int64_t>{1000 + k}).ok());
    ASSERT_TRUE(t.WaitResident(k).ok());
    EXPECT_EQ(t.rowpointer(1000 + k, Access::kRead)[0], static_cast<float>(1000 + k));
    ASSERT_TRUE(t.Unpin(k).ok());
  }
  EXPECT_EQ(t.stats().fetch_reads, 1);
  EXPECT_EQ(t.stats().shared_rows, 2);
  EXPECT_EQ(t.stats().fetched_rows, 3);
}

TEST(SsdLog, AMissInABlockWhoseReadIsInFlightJoinsThatRead) {
  testing::Gate* gate = nullptr;  // holds the reads' completions back while closed
  SsdOptions o = SmallLog(kN, 1.5);
  testing::WrapInGate(o.file, &gate);
  absl::StatusOr<std::unique_ptr<Table>> made = RowsInTheLog("t_join", o);
  ASSERT_TRUE(made.ok()) << made.status();
  Table& t = **made;
  gate->Close();
  // Batches 1 and 2 miss rows of one block; batch 2 is pinned while batch 1's read is in flight.
  ASSERT_TRUE(t.Prefetch(1, std::vector<int64_t>{1000, 1064}).ok());
  ASSERT_TRUE(t.Prefetch(2, std::vector<int64_t>{1001, 1128}).ok());
  EXPECT_EQ(t.stats().fetch_reads, 3);  // 1000's block (1001 joins it), 1064's, 1128's
  EXPECT_EQ(t.stats().shared_rows, 1);
  gate->Open();
  ASSERT_TRUE(t.WaitResident(2).ok());  // waits for batch 1's read too
  for (int64_t row : {1001, 1128}) EXPECT_EQ(t.rowpointer(row, Access::kRead)[0], static_cast<float>(row)) << row;
  ASSERT_TRUE(t.WaitResident(1).ok());
  for (int64_t row : {1000, 1064}) EXPECT_EQ(t.rowpointer(row, Access::kRead)[0], static_cast<float>(row)) << row;
  ASSERT_TRUE(t.Unpin(1).ok());
  ASSERT_TRUE(t.Unpin(2).ok());
  EXPECT_EQ(t.stats().fetched_rows, 4);
}

}  // namespace
}  // namespace cemb
