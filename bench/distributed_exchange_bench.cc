// The embedding all-to-all of a multi-rank step, alone: run it
// under mpirun; every rank takes global_batch / ranks samples of a batch of
// `tables` tables with `hotness` uniform indices per bag, and each step runs
// EmbeddingExchange::Forward and Backward with owners that neither pool nor
// update (the rows are left as they are), so only the exchange is timed.
// Against it, the machine's limit measured in the same run: one plain
// MPI_Alltoallv of the same bytes per pair, contiguous, per phase.
//
//   mpirun --oversubscribe --allow-run-as-root -np 2 ./build/bench/distributed_exchange_bench
//   (defaults: bench-dlrm-s's shapes: --tables 8 --rows 1000000 --dim 64
//    --hotness 100 --batch 2048; --steps 200 --warmup 5)
//
// Each step starts after a barrier and counts the slowest rank's time. On a
// shared, oversubscribed machine a rank that is descheduled stalls the
// other, so the distribution has a long tail: the p10 over the steps is the
// exchange's own cost, the median and p90 what a busy machine adds.
// Printed on rank 0: per Transfer (kNonblocking and kBlocking, their steps
// alternating) the ms of each phase, the bytes each rank sends to the
// others, and the limit's ms. Refuses a debug build.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/random.h"
#include "bench/bench_util.h"
#include "distributed/comm.h"
#include "distributed/embedding_exchange.h"
#include "distributed/shard_plan.h"

namespace cemb {
namespace {

struct Flags {
  int tables = 8;
  int64_t rows = 1000000;
  int64_t dim = 64;
  int hotness = 100;
  int64_t batch = 2048;  // global
  int steps = 200;
  int warmup = 5;
};

Flags Parse(int argc, char** argv) {
  Flags f;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const long long v = std::atoll(argv[i + 1]);
    if (k == "--tables") f.tables = static_cast<int>(v);
    else if (k == "--rows") f.rows = v;
    else if (k == "--dim") f.dim = v;
    else if (k == "--hotness") f.hotness = static_cast<int>(v);
    else if (k == "--batch") f.batch = v;
    else if (k == "--steps") f.steps = static_cast<int>(v);
    else if (k == "--warmup") f.warmup = static_cast<int>(v);
    else {
      std::fprintf(stderr, "distributed_exchange_bench: unknown flag %s\n", k.c_str());
      std::exit(2);
    }
  }
  return f;
}

double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// The q-quantile of v (0.5: the median), by rank.
double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
}

// Per step, the slowest rank's seconds of each of `k` values, in place.
void MaxOverRanks(const distributed::Comm& comm, double* v, int k) {
  MPI_Allreduce(MPI_IN_PLACE, v, k, MPI_DOUBLE, MPI_MAX, comm.raw());
}

// The p10 seconds of one MPI_Alltoallv sending bytes[r] to each rank r (and
// receiving what r sends), after a barrier, the slowest rank's.
double PlainAlltoallv(const distributed::Comm& comm, const std::vector<int>& send_bytes, int steps) {
  const int n = comm.size();
  std::vector<int> recv_bytes(n), sd(n), rd(n);
  MPI_Alltoall(send_bytes.data(), 1, MPI_INT, recv_bytes.data(), 1, MPI_INT, comm.raw());
  int s = 0, r = 0;
  for (int q = 0; q < n; ++q) {
    sd[q] = s;
    rd[q] = r;
    s += send_bytes[q];
    r += recv_bytes[q];
  }
  std::vector<char> send(std::max(s, 1), 1), recv(std::max(r, 1));
  std::vector<double> times;
  for (int i = 0; i < steps; ++i) {
    MPI_Barrier(comm.raw());
    const double t0 = Now();
    MPI_Alltoallv(send.data(), send_bytes.data(), sd.data(), MPI_CHAR, recv.data(), recv_bytes.data(), rd.data(),
                  MPI_CHAR, comm.raw());
    double t = Now() - t0;
    MaxOverRanks(comm, &t, 1);
    times.push_back(t);
  }
  return Quantile(times, 0.1);
}

// Per step, each phase's ms, the slowest rank's.
struct Phases {
  std::vector<double> indices, pooled, gradients, total;
};

int Run(const distributed::Comm& comm, const Flags& f) {
  const int ranks = comm.size(), me = comm.rank();
  const int64_t n = f.batch / ranks + (me < f.batch % ranks ? 1 : 0);
  std::vector<distributed::TableCost> costs(f.tables, {.bytes = f.rows * f.dim * 4,
                                                .lookups_per_step = static_cast<double>(f.batch * f.hotness)});
  absl::StatusOr<distributed::ShardPlan> plan = distributed::ShardPlan::Create(costs, ranks);
  if (!plan.ok()) return std::fprintf(stderr, "%s\n", plan.status().ToString().c_str()), 1;
  // One exchange per Transfer; their steps alternate, so both see the same
  // machine (others' jobs included).
  const distributed::Transfer transfers[2] = {distributed::Transfer::kNonblocking, distributed::Transfer::kBlocking};
  std::unique_ptr<distributed::EmbeddingExchange> ex[2];
  for (int m = 0; m < 2; ++m) {
    absl::StatusOr<std::unique_ptr<distributed::EmbeddingExchange>> e = distributed::EmbeddingExchange::Create(
        comm, *plan, {.dim = f.dim, .max_local_batch = f.batch / ranks + 1, .transfer = transfers[m]});
    if (!e.ok()) return std::fprintf(stderr, "%s\n", e.status().ToString().c_str()), 1;
    ex[m] = *std::move(e);
  }

  // This rank's bags: fixed hotness, uniform rows.
  Xoshiro256pp rng(1000 + me);
  std::vector<std::vector<int32_t>> offsets(f.tables), indices(f.tables);
  std::vector<Bags<int32_t>> bags;
  for (int t = 0; t < f.tables; ++t) {
    for (int64_t i = 0; i <= n; ++i) offsets[t].push_back(static_cast<int32_t>(i * f.hotness));
    for (int64_t j = 0; j < n * f.hotness; ++j) indices[t].push_back(static_cast<int32_t>(rng.Below(f.rows)));
    bags.push_back({.offsets = offsets[t], .indices = indices[t]});
  }
  const int64_t cols = f.tables * f.dim;
  std::vector<float> emb(n * cols), d_emb(n * cols, 0.5f);
  auto pool = [](std::span<const Bags<int32_t>>, MatrixView) { return absl::OkStatus(); };
  auto update = [](std::span<const Bags<int32_t>>, ConstMatrixView) { return absl::OkStatus(); };

  Phases phases[2];
  for (int step = 0; step < f.warmup + f.steps; ++step) {
    for (int m = 0; m < 2; ++m) {
      MPI_Barrier(comm.raw());
      const distributed::ExchangeStats before = ex[m]->stats();
      absl::Status s = ex[m]->Forward(bags, pool, MatrixView{emb.data(), n, cols, cols});
      if (s.ok()) s = ex[m]->Backward(ConstMatrixView(d_emb.data(), n, cols, cols), update);
      if (!s.ok()) {
        std::fprintf(stderr, "rank %d: %s\n", me, s.ToString().c_str());
        comm.Abort(1);
      }
      const distributed::ExchangeStats& after = ex[m]->stats();
      double t[4] = {after.indices_seconds - before.indices_seconds, after.pooled_seconds - before.pooled_seconds,
                     after.gradient_seconds - before.gradient_seconds, after.seconds() - before.seconds()};
      MaxOverRanks(comm, t, 4);
      if (step < f.warmup) continue;
      phases[m].indices.push_back(t[0] * 1e3);
      phases[m].pooled.push_back(t[1] * 1e3);
      phases[m].gradients.push_back(t[2] * 1e3);
      phases[m].total.push_back(t[3] * 1e3);
    }
  }
  const double sent_mib = static_cast<double>(ex[0]->stats().bytes_sent) / (f.warmup + f.steps) / (1 << 20);

  // The limit: the same bytes per pair, contiguous, one plain MPI_Alltoallv per phase.
  std::vector<int> index_bytes(ranks), row_bytes(ranks), grad_bytes(ranks);
  for (int r = 0; r < ranks; ++r) {
    const int64_t k = static_cast<int64_t>(plan->tables_of(r).size());
    const int64_t n_r = f.batch / ranks + (r < f.batch % ranks ? 1 : 0);
    index_bytes[r] = static_cast<int>(k * n * (1 + f.hotness) * 4);                      // to owner r
    row_bytes[r] = static_cast<int>(n_r * plan->tables_of(me).size() * f.dim * 4);     // to sample rank r
    grad_bytes[r] = static_cast<int>(n * k * f.dim * 4);                                // to owner r
  }
  const double plain_indices_ms = PlainAlltoallv(comm, index_bytes, f.steps) * 1e3;
  const double plain_rows_ms = PlainAlltoallv(comm, row_bytes, f.steps) * 1e3;
  const double plain_grads_ms = PlainAlltoallv(comm, grad_bytes, f.steps) * 1e3;
  const double limit_ms = plain_indices_ms + plain_rows_ms + plain_grads_ms;
  if (me == 0) {
    for (int r = 0; r < ranks; ++r) std::printf("%s\n", plan->Describe(r).c_str());
    std::printf("ranks %d, global batch %lld, %d tables x dim %lld, hotness %d, %d steps (after %d warm-up)\n",
                ranks, static_cast<long long>(f.batch), f.tables, static_cast<long long>(f.dim), f.hotness, f.steps,
                f.warmup);
    for (int m = 0; m < 2; ++m) {
      const Phases& p = phases[m];
      std::printf("all-to-all per step, %-11s: p10 %.3f ms (indices %.3f, pooled rows %.3f, gradients %.3f), "
                  "median %.3f, p90 %.3f\n",
                  m == 0 ? "nonblocking" : "blocking", Quantile(p.total, 0.1), Quantile(p.indices, 0.1),
                  Quantile(p.pooled, 0.1), Quantile(p.gradients, 0.1), Quantile(p.total, 0.5),
                  Quantile(p.total, 0.9));
    }
    std::printf("%.2f MiB sent by rank 0 to the others per step\n", sent_mib);
    std::printf("plain MPI_Alltoallv of the same bytes: p10 %.3f ms (indices %.3f, pooled rows %.3f, "
                "gradients %.3f); nonblocking exchange / plain at p10 = %.2f\n",
                limit_ms, plain_indices_ms, plain_rows_ms, plain_grads_ms, Quantile(phases[0].total, 0.1) / limit_ms);
  }
  return 0;
}

}  // namespace
}  // namespace cemb

int main(int argc, char** argv) {
  cemb::bench::RequireOptimizedBuild("distributed_exchange_bench");
  absl::StatusOr<cemb::distributed::World> world = cemb::distributed::World::Init(&argc, &argv);
  if (!world.ok()) {
    std::fprintf(stderr, "%s\n", world.status().ToString().c_str());
    return 1;
  }
  return cemb::Run(world->comm(), cemb::Parse(argc, argv));
}
