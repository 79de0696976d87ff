// SnapshotTable from many threads (std::thread: libgomp is not TSan-aware):
// requests that hit, miss, evict and wait on each other's reads at once;
// and the gate tests: a Gate (tests/ssd/test_util.h) holds one request's
// reads back while the test looks at what is in flight and at what other
// requests can still do. CI runs it under ThreadSanitizer (label ssd_tsan).
#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ssd/snapshot_table.h"
#include "tests/ssd/snapshot_test_util.h"
#include "tests/ssd/test_util.h"

namespace cemb {
namespace {

using ::testing::HasSubstr;
using testing::Gate;
using testing::TrainedSnapshot;

TEST(SnapshotTableStress, ManyThreadsHitMissAndEvictAndEveryRowIsRight) {
  constexpr int64_t kN = 4000;
  constexpr int kThreads = 8, kRequests = 150, kRows = 24;
  auto want = TrainedSnapshot<float>::Make<16>("stress", kN, 16, 0, 5, kN * 3 / 4);
  ASSERT_TRUE(want.ok()) << want.status();
  // 220 slots for 8 requests of at most 24 rows (192 pinned at most):
  // evictions all along, among few unpinned slots.
  auto t = SnapshotTable<float, 16>::Open({.name = "stress", .nvectors = kN},
                                          {.path = want->path, .capacity_bytes = 220 * 64});
  ASSERT_TRUE(t.ok()) << t.status();
  std::atomic<int64_t> wrong{0}, failed{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < kThreads; ++w) {
    threads.emplace_back([&, w] {
      std::mt19937_64 rng(100 + w);
      SnapshotPins pins;
      std::vector<int32_t> rows(kRows);
      std::vector<const float*> out(kRows);
      for (int q = 0; q < kRequests; ++q) {
        // Skewed: half the lookups among 200 hot rows (hits, and rows two
        // requests miss at once), half anywhere (misses, evictions).
        for (int32_t& r : rows) r = static_cast<int32_t>(rng() % 2 == 0 ? rng() % 200 : rng() % kN);
        if (!t->Resolve(rows, &pins, out).ok()) {
          ++failed;
          continue;
        }
        // The request's kernels: the rows are checked as it starts, and
        // again after it has let the other threads run (a pinned row must
        // stay whatever they evict meanwhile).
        for (int pass = 0; pass < 2; ++pass) {
          for (int i = 0; i < kRows; ++i) {
            if (std::memcmp(out[i], want->row(rows[i]), 64) != 0) ++wrong;
          }
          std::this_thread::yield();
        }
        t->Release(&pins);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
  const SnapshotStats s = t->stats();
  EXPECT_GT(s.evictions, 1000);
  EXPECT_GT(s.hits, 0);
  EXPECT_GT(s.rows_read, 0);
  EXPECT_GT(s.lazy_rows, 0);
  EXPECT_EQ(s.io.bytes_written, 0);
  std::printf("stress: %lld lookups, hit rate %.3f, %lld misses (%lld waited for another request's read), "
              "%lld evictions, %lld reads, %lld rings\n",
              static_cast<long long>(s.lookups), s.hit_rate(), static_cast<long long>(s.misses),
              static_cast<long long>(s.shared), static_cast<long long>(s.evictions), static_cast<long long>(s.reads),
              static_cast<long long>(s.rings));
}

// Rows of 8 KiB (1024 features, then 1024 state floats): each row's
// features fill one block and no two rows' features are in adjacent
// blocks, so k missed rows are k reads. The first ring made is gated
// (closed from the start with start_closed).
struct GatedServe {
  explicit GatedServe(const char* name, bool start_closed, int64_t written = 64) {
    auto w = TrainedSnapshot<float>::Make<kDynamic>(name, 256, 1024, 1024, 3, written);
    EXPECT_TRUE(w.ok()) << w.status();
    want = *std::move(w);
    SnapshotTableOptions o{.path = want.path, .capacity_bytes = 128 * 4096};
    o.wrap_io = [this, start_closed](std::unique_ptr<BlockIo> io, int ring) -> std::unique_ptr<BlockIo> {
      if (ring != 0) return io;
      auto g = std::make_unique<Gate>(std::move(io));
      if (start_closed) g->Close();
      gate = g.get();
      return g;
    };
    auto opened = SnapshotTable<float>::Open(
        {.name = name, .nvectors = 256, .featuresize = 1024, .state_floats = 1024}, o);
    EXPECT_TRUE(opened.ok()) << opened.status();
    table.emplace(*std::move(opened));
  }
  // Resolves rows, checks them and releases them.
  absl::Status Serve(const std::vector<int64_t>& rows) {
    SnapshotPins pins;
    std::vector<const float*> out(rows.size());
    absl::Status s = table->Resolve(rows, &pins, out);
    if (!s.ok()) return s;
    for (size_t i = 0; i < rows.size(); ++i) {
      if (std::memcmp(out[i], want.row(rows[i]), 4096) != 0) s = absl::InternalError(absl::StrCat("row ", rows[i]));
    }
    table->Release(&pins);
    return s;
  }
  // A thread's request on the gated ring: the first request to read.
  std::future<absl::Status> ServeOnTheGate(std::vector<int64_t> rows) {
    auto f = std::async(std::launch::async, [this, rows] { return Serve(rows); });
    while (gate == nullptr) std::this_thread::yield();  // the ring is made by the request
    gate.load()->AwaitWaiter();
    return f;
  }

  TrainedSnapshot<float> want;
  std::optional<SnapshotTable<float>> table;
  std::atomic<Gate*> gate{nullptr};  // set by the request thread that makes ring 0
};

// The deadlock guard of a request that must not wait for a held read: not a
// timing measurement (it passes in microseconds; a minute means blocked).
bool Finishes(std::future<absl::Status>& f) {
  return f.wait_for(std::chrono::seconds(60)) == std::future_status::ready;
}

TEST(SnapshotTableGate, ARequestsMissesAreAllInFlightTogether) {
  constexpr int kK = 26;
  GatedServe g("inflight", /*start_closed=*/true);
  std::vector<int64_t> rows(g.want.ids.begin(), g.want.ids.begin() + kK);  // in the file: k distinct blocks
  std::future<absl::Status> f = g.ServeOnTheGate(rows);
  // The request waits at the gate for its first completion: all k reads are
  // already in flight, handed to the kernel in one submission.
  EXPECT_EQ(g.gate.load()->in_flight(), kK);
  EXPECT_EQ(g.gate.load()->counters().reads, kK);
  EXPECT_EQ(g.gate.load()->counters().submissions, 1);
  g.gate.load()->Open();
  EXPECT_TRUE(f.get().ok());
  EXPECT_EQ(g.table->stats().reads, kK);
}

TEST(SnapshotTableGate, AResidentRequestAndAnotherRingsMissesCompleteWhileOneRequestsReadsAreHeldBack) {
  GatedServe g("held", /*start_closed=*/false);
  const std::vector<int64_t> warm(g.want.ids.begin(), g.want.ids.begin() + 8);
  const std::vector<int64_t> held(g.want.ids.begin() + 8, g.want.ids.begin() + 16);
  const std::vector<int64_t> other(g.want.ids.begin() + 16, g.want.ids.begin() + 24);
  ASSERT_TRUE(g.Serve(warm).ok());  // made ring 0, the gated one, open
  g.gate.load()->Close();
  std::future<absl::Status> blocked = g.ServeOnTheGate(held);

  std::future<absl::Status> resident = std::async(std::launch::async, [&] { return g.Serve(warm); });
  ASSERT_TRUE(Finishes(resident)) << "a request of resident rows waited for another request's reads";
  EXPECT_TRUE(resident.get().ok());
  // Misses of another request, on a ring of its own: its thread waits only for its reads.
  std::future<absl::Status> missing = std::async(std::launch::async, [&] { return g.Serve(other); });
  if (!Finishes(missing)) {
    g.gate.load()->Open();
    FAIL() << "a request's misses waited for another request's reads";
  }
  EXPECT_TRUE(missing.get().ok());
  EXPECT_EQ(blocked.wait_for(std::chrono::seconds(0)), std::future_status::timeout);  // still held
  EXPECT_EQ(g.gate.load()->in_flight(), 8);
  g.gate.load()->Open();
  EXPECT_TRUE(blocked.get().ok());
  EXPECT_EQ(g.table->stats().rings, 2);
}

TEST(SnapshotTableGate, ARowTwoRequestsMissAtOnceIsReadOnce) {
  GatedServe g("once", /*start_closed=*/true);
  const std::vector<int64_t> rows = {g.want.ids[3]};
  std::future<absl::Status> first = g.ServeOnTheGate(rows);
  std::future<absl::Status> second = std::async(std::launch::async, [&] { return g.Serve(rows); });
  while (g.table->stats().shared == 0) std::this_thread::yield();  // the second found it loading
  g.gate.load()->Open();
  EXPECT_TRUE(first.get().ok());
  EXPECT_TRUE(second.get().ok());
  const SnapshotStats s = g.table->stats();
  EXPECT_EQ(s.reads, 1);
  EXPECT_EQ(s.io.reads, 1);
  EXPECT_EQ(s.shared, 1);
  EXPECT_EQ(s.rings, 1);  // the second request never read
}

TEST(SnapshotTableGate, WhenTheReaderOfASharedRowFailsTheWaiterReadsItItself) {
  constexpr int64_t kN = 256;
  auto want = TrainedSnapshot<float>::Make<kDynamic>("share_eio", kN, 1024, 1024, 3, 64);
  ASSERT_TRUE(want.ok()) << want.status();
  std::atomic<Gate*> gate{nullptr};
  SnapshotTableOptions o{.path = want->path, .capacity_bytes = 64 * 4096};
  o.wrap_io = [&gate](std::unique_ptr<BlockIo> io, int ring) -> std::unique_ptr<BlockIo> {
    if (ring != 0) return io;  // ring 0: its first read fails, and is held at the gate
    auto g = std::make_unique<Gate>(std::make_unique<FaultInjectingBlockIo>(
        std::move(io), std::vector<IoFault>{{.op = IoOp::kRead, .nth = 1}}));
    gate = g.get();
    g->Close();
    return g;
  };
  auto t = SnapshotTable<float>::Open({.name = "share_eio", .nvectors = kN, .featuresize = 1024, .state_floats = 1024}, o);
  ASSERT_TRUE(t.ok()) << t.status();
  const std::vector<int64_t> rows = {want->ids[5]};
  auto serve = [&] {
    SnapshotPins pins;
    std::vector<const float*> out(1);
    absl::Status s = t->Resolve(rows, &pins, out);
    if (s.ok() && std::memcmp(out[0], want->row(rows[0]), 4096) != 0) s = absl::InternalError("wrong row");
    t->Release(&pins);
    return s;
  };
  std::future<absl::Status> first = std::async(std::launch::async, serve);
  while (gate == nullptr) std::this_thread::yield();
  gate.load()->AwaitWaiter();
  std::future<absl::Status> second = std::async(std::launch::async, serve);
  while (t->stats().shared == 0) std::this_thread::yield();
  gate.load()->Open();
  const absl::Status a = first.get();
  EXPECT_EQ(a.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(a.message(), HasSubstr(absl::StrCat("share_eio: ", want->path, ": read of 4096 bytes at offset ")));
  EXPECT_THAT(a.message(), HasSubstr("Input/output error"));
  EXPECT_TRUE(second.get().ok());  // it read the row again, itself: no NaN, no error
  EXPECT_EQ(t->stats().failed_reads, 1);
  EXPECT_TRUE(t->is_resident(rows[0]));
}

}  // namespace
}  // namespace cemb
