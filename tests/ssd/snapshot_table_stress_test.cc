// SnapshotTable from many threads (std::thread: libgomp is not TSan-aware):
// requests (of one table, and of several at once: SnapshotRequest) that
// hit, miss, evict and wait on each other's reads at once; and the gate
// tests: a Gate (tests/ssd/test_util.h) holds one request's reads back while
// the test looks at what is in flight and at what other requests can still
// do. CI runs it under ThreadSanitizer (label ssd_tsan).
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <random>
#include <string>
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

// Runs body(w) on threads w = 0 .. n - 1 at once and joins them.
template <typename Body>
void OnThreads(int n, const Body& body) {
  std::vector<std::thread> threads;
  for (int w = 0; w < n; ++w) threads.emplace_back(body, w);
  for (std::thread& th : threads) th.join();
}

void PrintStats(const std::string& name, const SnapshotStats& s) {
  std::printf("%s: %lld lookups, hit rate %.3f, %lld misses (%lld waited for another request's read), "
              "%lld evictions, %lld reads, %lld rings\n",
              name.c_str(), static_cast<long long>(s.lookups), s.hit_rate(), static_cast<long long>(s.misses),
              static_cast<long long>(s.shared), static_cast<long long>(s.evictions), static_cast<long long>(s.reads),
              static_cast<long long>(s.rings));
}

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
  OnThreads(kThreads, [&](int w) {
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
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
  const SnapshotStats s = t->stats();
  EXPECT_GT(s.evictions, 1000);
  EXPECT_GT(s.hits, 0);
  EXPECT_GT(s.rows_read, 0);
  EXPECT_GT(s.lazy_rows, 0);
  EXPECT_EQ(s.io.bytes_written, 0);
  PrintStats("stress", s);
}

// Requests of three tables at once (SnapshotRequest): each thread starts
// its tables in an order of its own, so two requests often each load a row
// of one table that the other waits for; every pool is small enough to
// evict all along. A third of the requests go table by table (Resolve)
// beside them.
TEST(SnapshotTableStress, ManyThreadsResolveSeveralTablesTogetherAndEveryRowIsRight) {
  constexpr int kTables = 3, kThreads = 8, kRequests = 120, kRows = 16;
  constexpr int64_t kN = 3000;
  std::vector<TrainedSnapshot<float>> want;
  std::vector<SnapshotTable<float, 16>> tables;
  for (int k = 0; k < kTables; ++k) {
    auto w = TrainedSnapshot<float>::Make<16>(absl::StrCat("multi", k), kN, 16, 0, 7 + k, kN * 2 / 3);
    ASSERT_TRUE(w.ok()) << w.status();
    want.push_back(*std::move(w));
    // 8 requests of at most 16 rows a table (128 pinned at most) in 160 slots.
    auto t = SnapshotTable<float, 16>::Open({.name = absl::StrCat("multi", k), .nvectors = kN},
                                            {.path = want.back().path, .capacity_bytes = 160 * 64});
    ASSERT_TRUE(t.ok()) << t.status();
    tables.push_back(*std::move(t));
  }
  std::atomic<int64_t> wrong{0}, failed{0};
  OnThreads(kThreads, [&](int w) {
    std::mt19937_64 rng(300 + w);
    SnapshotRequest request;
    SnapshotPins pins;
    std::vector<std::vector<int64_t>> rows(kTables, std::vector<int64_t>(kRows));
    std::vector<std::vector<const float*>> out(kTables, std::vector<const float*>(kRows));
    for (int q = 0; q < kRequests; ++q) {
      for (auto& r : rows) {
        for (int64_t& row : r) row = static_cast<int64_t>(rng() % 2 == 0 ? rng() % 100 : rng() % kN);
      }
      const bool together = q % 3 != 0;
      absl::Status s;
      for (int i = 0; i < kTables && s.ok(); ++i) {
        const int k = (i + w) % kTables;  // this thread's order of the tables
        s = together ? request.Start(tables[k], rows[k], out[k]) : tables[k].Resolve(rows[k], &pins, out[k]);
        if (!together && s.ok()) {
          for (int j = 0; j < kRows; ++j) wrong += std::memcmp(out[k][j], want[k].row(rows[k][j]), 64) != 0;
          tables[k].Release(&pins);
        }
      }
      if (together && s.ok()) s = request.Finish();
      if (!s.ok()) {
        ++failed;
        continue;
      }
      if (!together) continue;
      for (int pass = 0; pass < 2; ++pass) {  // pinned rows stay while the others evict
        for (int k = 0; k < kTables; ++k) {
          for (int j = 0; j < kRows; ++j) wrong += std::memcmp(out[k][j], want[k].row(rows[k][j]), 64) != 0;
        }
        std::this_thread::yield();
      }
      request.Release();
    }
  });
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
  for (const SnapshotTable<float, 16>& t : tables) {
    const SnapshotStats s = t.stats();
    EXPECT_GT(s.evictions, 500) << t.name();
    EXPECT_GT(s.rows_read, 0) << t.name();
    EXPECT_GT(s.lazy_rows, 0) << t.name();
    PrintStats(t.name(), s);
  }
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

// Three tables of GatedServe's rows, each with its first ring gated (closed
// from the start with start_closed): a SnapshotRequest over them.
struct GatedTables {
  static constexpr int kTables = 3;
  explicit GatedTables(const char* name, bool start_closed) {
    for (int k = 0; k < kTables; ++k) {
      auto w = TrainedSnapshot<float>::Make<kDynamic>(absl::StrCat(name, k), 256, 1024, 1024, 3 + k, 64);
      EXPECT_TRUE(w.ok()) << w.status();
      want.push_back(*std::move(w));
    }
    for (int k = 0; k < kTables; ++k) {
      SnapshotTableOptions o{.path = want[k].path, .capacity_bytes = 128 * 4096};
      o.wrap_io = [this, k, start_closed](std::unique_ptr<BlockIo> io, int ring) -> std::unique_ptr<BlockIo> {
        if (ring != 0) return io;
        auto g = std::make_unique<Gate>(std::move(io));
        if (start_closed) g->Close();
        gates[k] = g.get();
        return g;
      };
      auto t = SnapshotTable<float>::Open(
          {.name = absl::StrCat(name, k), .nvectors = 256, .featuresize = 1024, .state_floats = 1024}, o);
      EXPECT_TRUE(t.ok()) << t.status();
      tables.push_back(*std::move(t));
    }
  }
  // Resolves rows[k] of every table k in one request, checks them and releases them.
  absl::Status Serve(const std::vector<std::vector<int64_t>>& rows) {
    SnapshotRequest request;
    std::vector<std::vector<const float*>> out(kTables);
    for (int k = 0; k < kTables; ++k) {
      out[k].resize(rows[k].size());
      if (absl::Status s = request.Start(tables[k], rows[k], out[k]); !s.ok()) return s;
    }
    absl::Status s = request.Finish();
    for (int k = 0; k < kTables && s.ok(); ++k) {
      for (size_t i = 0; i < rows[k].size(); ++i) {
        if (std::memcmp(out[k][i], want[k].row(rows[k][i]), 4096) != 0) {
          s = absl::InternalError(absl::StrCat("table ", k, ", row ", rows[k][i]));
        }
      }
    }
    request.Release();
    return s;
  }
  // rows [begin, begin + counts[k]) of each table k's snapshot order: distinct blocks.
  std::vector<std::vector<int64_t>> Rows(int begin, std::vector<int> counts) const {
    std::vector<std::vector<int64_t>> rows(kTables);
    for (int k = 0; k < kTables; ++k) {
      rows[k].assign(want[k].ids.begin() + begin, want[k].ids.begin() + begin + counts[k]);
    }
    return rows;
  }
  int64_t InFlight() const {
    int64_t n = 0;
    for (const auto& g : gates) n += g.load() == nullptr ? 0 : g.load()->in_flight();
    return n;
  }
  void OpenGates() {
    for (auto& g : gates) {
      if (g.load() != nullptr) g.load()->Open();
    }
  }

  std::vector<TrainedSnapshot<float>> want;
  std::vector<SnapshotTable<float>> tables;
  std::array<std::atomic<Gate*>, kTables> gates{};
};

TEST(SnapshotTableGate, ARequestsMissesOfEveryTableAreAllInFlightBeforeAnyCompletes) {
  GatedTables g("multi_inflight", /*start_closed=*/true);
  const std::vector<int> counts = {5, 7, 9};
  const std::vector<std::vector<int64_t>> rows = g.Rows(0, counts);
  std::future<absl::Status> f = std::async(std::launch::async, [&] { return g.Serve(rows); });
  // The request waits at the first table's gate, for its first completion:
  // by then every table's reads are in flight, each table's in one submission.
  while (g.gates[0].load() == nullptr) std::this_thread::yield();
  g.gates[0].load()->AwaitWaiter();
  EXPECT_EQ(g.InFlight(), 5 + 7 + 9);
  for (int k = 0; k < GatedTables::kTables; ++k) {
    ASSERT_NE(g.gates[k].load(), nullptr);
    EXPECT_EQ(g.gates[k].load()->in_flight(), counts[k]) << k;
    EXPECT_EQ(g.gates[k].load()->counters().reads, counts[k]) << k;
    EXPECT_EQ(g.gates[k].load()->counters().submissions, 1) << k;
  }
  g.OpenGates();
  EXPECT_TRUE(f.get().ok());
  for (int k = 0; k < GatedTables::kTables; ++k) EXPECT_EQ(g.tables[k].stats().reads, counts[k]) << k;
}

TEST(SnapshotTableGate, ResidentAndOtherRingsRequestsOfSeveralTablesCompleteWhileOneRequestsReadsAreHeld) {
  GatedTables g("multi_held", /*start_closed=*/false);
  const auto warm = g.Rows(0, {4, 4, 4});
  const auto held = g.Rows(4, {4, 4, 4});
  const auto other = g.Rows(8, {4, 4, 4});
  ASSERT_TRUE(g.Serve(warm).ok());  // made each table's ring 0, the gated one, open
  for (auto& gate : g.gates) gate.load()->Close();
  std::future<absl::Status> blocked = std::async(std::launch::async, [&] { return g.Serve(held); });
  g.gates[0].load()->AwaitWaiter();

  std::future<absl::Status> resident = std::async(std::launch::async, [&] { return g.Serve(warm); });
  if (!Finishes(resident)) {
    g.OpenGates();
    FAIL() << "a request of resident rows waited for another request's reads";
  }
  EXPECT_TRUE(resident.get().ok());
  std::future<absl::Status> missing = std::async(std::launch::async, [&] { return g.Serve(other); });
  if (!Finishes(missing)) {
    g.OpenGates();
    FAIL() << "a request's misses waited for another request's reads";
  }
  EXPECT_TRUE(missing.get().ok());
  EXPECT_EQ(blocked.wait_for(std::chrono::seconds(0)), std::future_status::timeout);  // still held
  EXPECT_EQ(g.InFlight(), 12);
  g.OpenGates();
  EXPECT_TRUE(blocked.get().ok());
  for (const SnapshotTable<float>& t : g.tables) EXPECT_EQ(t.stats().rings, 2) << t.name();
}

// Two requests that each load a row the other needs, in tables they start
// in opposite orders: request 1 loads a row of table A and finds one of B
// loading, request 2 the reverse. A request that waited for another's row
// before installing its own rows of every table (finishing its tables in
// another order than it started them, say) would wait for the other while
// the other waits for it; SnapshotRequest installs every table's rows first.
TEST(SnapshotTableGate, TwoRequestsEachLoadingARowTheOtherNeedsBothFinish) {
  GatedTables g("cross", /*start_closed=*/true);
  SnapshotTable<float>& a = g.tables[0];
  SnapshotTable<float>& b = g.tables[1];
  const std::vector<int64_t> row_a = {g.want[0].ids[1]}, row_b = {g.want[1].ids[2]};
  std::vector<const float*> out1_a(1), out1_b(1), out2_a(1), out2_b(1);
  SnapshotRequest one, two;
  // Starts never wait: one thread interleaves them as two request threads may.
  ASSERT_TRUE(one.Start(a, row_a, out1_a).ok());  // request 1 reads a's row
  ASSERT_TRUE(two.Start(b, row_b, out2_b).ok());  // request 2 reads b's row
  ASSERT_TRUE(two.Start(a, row_a, out2_a).ok());  // ...and waits for request 1's
  ASSERT_TRUE(one.Start(b, row_b, out1_b).ok());  // ...and request 1 for request 2's
  EXPECT_EQ(a.stats().shared, 1);
  EXPECT_EQ(b.stats().shared, 1);
  std::future<absl::Status> f1 = std::async(std::launch::async, [&] { return one.Finish(); });
  std::future<absl::Status> f2 = std::async(std::launch::async, [&] { return two.Finish(); });
  g.OpenGates();
  if (!Finishes(f1) || !Finishes(f2)) {  // nothing can wake them: end the test binary, failed
    std::fprintf(stderr, "two requests wait for each other\n");
    std::abort();
  }
  EXPECT_TRUE(f1.get().ok());
  EXPECT_TRUE(f2.get().ok());
  EXPECT_EQ(std::memcmp(out1_a[0], g.want[0].row(row_a[0]), 4096), 0);
  EXPECT_EQ(std::memcmp(out2_a[0], g.want[0].row(row_a[0]), 4096), 0);
  EXPECT_EQ(std::memcmp(out1_b[0], g.want[1].row(row_b[0]), 4096), 0);
  EXPECT_EQ(std::memcmp(out2_b[0], g.want[1].row(row_b[0]), 4096), 0);
  EXPECT_EQ(a.stats().reads, 1);  // each row read once
  EXPECT_EQ(b.stats().reads, 1);
  one.Release();
  two.Release();
}

}  // namespace
}  // namespace cemb
