// Runs under mpirun with 2 ranks (tests/distributed/CMakeLists.txt). Every rank
// makes the same global batch and tables from a fixed seed, takes its own
// contiguous share of the samples, and checks the exchange against what one
// process computes on the whole batch: bit for bit.
#include "distributed/embedding_exchange.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/random.h"
#include "embedding/ensemble.h"
#include "embedding/simple_table.h"
#include "embedding/table_io.h"
#include "gtest/gtest.h"

namespace cemb::distributed {
namespace {

constexpr float kSentinel = -12345.5f;

struct Case {
  std::string name;
  std::vector<int64_t> rows;   // per table
  int64_t dim = 8;
  std::vector<int64_t> local;  // the local batch of rank 0 and rank 1
  std::vector<int> owners;     // empty: ShardPlan::Create
  int max_hot = 4;             // bag lengths in [0, max_hot]; bag 0 of every table is empty
  uint64_t seed = 1;
};

std::vector<Case> Cases() {
  return {
      {.name = "uneven batches and tables, balanced plan", .rows = {50, 7, 300, 1, 20}, .dim = 8, .local = {5, 3}},
      {.name = "rank 1 owns no table", .rows = {10, 20, 30}, .dim = 16, .local = {4, 6}, .owners = {0, 0, 0},
       .seed = 2},
      {.name = "rank 0 has no samples, odd dim", .rows = {9, 9, 9}, .dim = 5, .local = {0, 7}, .owners = {1, 0, 1},
       .seed = 3},
      {.name = "every bag empty", .rows = {4, 4}, .dim = 16, .local = {3, 2}, .max_hot = 0, .seed = 4},
      {.name = "rank 0 owns no table, long bags", .rows = {1000, 3, 64}, .dim = 32, .local = {64, 61},
       .owners = {1, 1, 1}, .max_hot = 40, .seed = 5},
  };
}

// One global batch: per table CSR bags over every sample, and the gradient
// of the pooled rows, [N x T*dim].
struct GlobalBatch {
  int64_t n = 0;
  std::vector<std::vector<int32_t>> offsets, indices;
  std::vector<float> grad;
};

GlobalBatch MakeBatch(const Case& c, uint64_t seed) {
  Xoshiro256pp rng(seed);
  GlobalBatch b;
  b.n = c.local[0] + c.local[1];
  const int tables = static_cast<int>(c.rows.size());
  b.offsets.resize(tables);
  b.indices.resize(tables);
  for (int t = 0; t < tables; ++t) {
    b.offsets[t].push_back(0);
    for (int64_t i = 0; i < b.n; ++i) {
      const int64_t len = i == 0 ? 0 : static_cast<int64_t>(rng.Below(c.max_hot + 1));
      for (int64_t j = 0; j < len; ++j) b.indices[t].push_back(static_cast<int32_t>(rng.Below(c.rows[t])));
      b.offsets[t].push_back(static_cast<int32_t>(b.indices[t].size()));
    }
  }
  b.grad.resize(b.n * tables * c.dim);
  for (float& g : b.grad) g = static_cast<float>(rng.Uniform() - 0.5);
  return b;
}

// Rank `rank`'s share: its samples' bags, rebased offsets.
struct LocalBatch {
  std::vector<std::vector<int32_t>> offsets, indices;
  std::vector<Bags<int32_t>> bags;
};

LocalBatch Share(const Case& c, const GlobalBatch& g, int rank) {
  const int64_t first = rank == 0 ? 0 : c.local[0], n = c.local[rank];
  LocalBatch l;
  const int tables = static_cast<int>(c.rows.size());
  l.offsets.resize(tables);
  l.indices.resize(tables);
  for (int t = 0; t < tables; ++t) {
    const int32_t base = g.offsets[t][first];
    for (int64_t i = 0; i <= n; ++i) l.offsets[t].push_back(g.offsets[t][first + i] - base);
    l.indices[t].assign(g.indices[t].begin() + base, g.indices[t].begin() + g.offsets[t][first + n]);
  }
  for (int t = 0; t < tables; ++t) l.bags.push_back({.offsets = l.offsets[t], .indices = l.indices[t]});
  return l;
}

absl::StatusOr<ShardPlan> PlanFor(const Case& c) {
  std::vector<TableCost> costs;
  for (int64_t r : c.rows) costs.push_back({.bytes = r * c.dim * 4, .lookups_per_step = 1.0 + r % 7});
  if (c.owners.empty()) return ShardPlan::Create(costs, 2);
  return ShardPlan::FromOwners(costs, c.owners, 2);
}

// A case's plan and an exchange for it (max_local_batch 64).
struct PlannedExchange {
  ShardPlan plan;
  std::unique_ptr<EmbeddingExchange> exchange;
};

absl::StatusOr<PlannedExchange> MakeExchange(const Comm& comm, const Case& c, Transfer transfer = Transfer::kNonblocking) {
  absl::StatusOr<ShardPlan> plan = PlanFor(c);
  if (!plan.ok()) return plan.status();
  absl::StatusOr<std::unique_ptr<EmbeddingExchange>> exchange =
      EmbeddingExchange::Create(comm, *plan, {.dim = c.dim, .max_local_batch = 64, .transfer = transfer});
  if (!exchange.ok()) return exchange.status();
  return PlannedExchange{*std::move(plan), *std::move(exchange)};
}

// The obvious pooling: out.row(b) = sum of the bag's rows, in index order.
void PoolReference(const std::vector<float>& table, int64_t dim, const Bags<int32_t>& bags, MatrixView out) {
  for (int64_t b = 0; b < bags.nbags(); ++b) {
    for (int64_t d = 0; d < dim; ++d) out.row(b)[d] = 0.0f;
    for (int32_t j = bags.offsets[b]; j < bags.offsets[b + 1]; ++j) {
      for (int64_t d = 0; d < dim; ++d) out.row(b)[d] += table[bags.indices[j] * dim + d];
    }
  }
}

std::vector<std::vector<float>> MakeTables(const Case& c) {
  Xoshiro256pp rng(c.seed * 1000);
  std::vector<std::vector<float>> tables;
  for (int64_t r : c.rows) {
    tables.emplace_back(r * c.dim);
    for (float& x : tables.back()) x = static_cast<float>(rng.Uniform() - 0.5);
  }
  return tables;
}

TEST(EmbeddingExchange, RunsOnTwoRanks) { ASSERT_EQ(Comm(MPI_COMM_WORLD).size(), 2) << "run under mpirun -np 2"; }

// Two steps of one case: the owners' bags, the pooled rows every rank gets
// and the gradients every owner gets, against one process on the global batch.
void ExpectSameAsOneProcess(const Comm& comm, const Case& c, Transfer transfer) {
  const int me = comm.rank();
  SCOPED_TRACE(c.name + ", seed " + std::to_string(c.seed) +
               (transfer == Transfer::kBlocking ? ", blocking" : ", nonblocking"));
  absl::StatusOr<PlannedExchange> setup = MakeExchange(comm, c, transfer);
  ASSERT_TRUE(setup.ok()) << setup.status();
  const ShardPlan& plan = setup->plan;
  EmbeddingExchange& ex = *setup->exchange;
  const int tables = static_cast<int>(c.rows.size());
  const int64_t cols = tables * c.dim, ld = cols + 3, n = c.local[me], first = me == 0 ? 0 : c.local[0];
  const std::vector<std::vector<float>> rows = MakeTables(c);

  for (uint64_t step = 0; step < 2; ++step) {  // the second step reuses every buffer
    const GlobalBatch global = MakeBatch(c, c.seed * 100 + step);
    const LocalBatch local = Share(c, global, me);
    // One process: the pooled rows of every sample.
    std::vector<float> expected(global.n * cols);
    for (int t = 0; t < tables; ++t) {
      const Bags<int32_t> bags{.offsets = global.offsets[t], .indices = global.indices[t]};
      PoolReference(rows[t], c.dim, bags, MatrixView{expected.data(), global.n, cols, cols}.slice(t * c.dim, c.dim));
    }

    std::vector<float> emb(n * ld + 1, kSentinel);  // one more: past the last row
    absl::Status s = ex.Forward(
        local.bags,
        [&](std::span<const Bags<int32_t>> owned, MatrixView out) {
          EXPECT_EQ(owned.size(), plan.tables_of(me).size());
          EXPECT_EQ(out.rows, global.n);
          for (size_t k = 0; k < owned.size(); ++k) {
            const int t = plan.tables_of(me)[k];
            // The owner sees exactly the single process's bags of table t.
            EXPECT_EQ(std::vector<int32_t>(owned[k].offsets.begin(), owned[k].offsets.end()), global.offsets[t])
                << "table " << t;
            EXPECT_EQ(std::vector<int32_t>(owned[k].indices.begin(), owned[k].indices.end()), global.indices[t])
                << "table " << t;
            PoolReference(rows[t], c.dim, owned[k], out.slice(k * c.dim, c.dim));
          }
          return absl::OkStatus();
        },
        MatrixView{emb.data(), n, cols, ld});
    ASSERT_TRUE(s.ok()) << s;
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_EQ(std::memcmp(emb.data() + i * ld, expected.data() + (first + i) * cols, cols * sizeof(float)), 0)
          << "sample " << i << " of rank " << me;
      for (int64_t p = cols; p < ld; ++p) EXPECT_EQ(emb[i * ld + p], kSentinel) << "padding of row " << i;
    }
    EXPECT_EQ(emb[n * ld], kSentinel);

    // Backward: this rank's rows of the gradient, padded like emb.
    std::vector<float> d_emb(n * ld, kSentinel);
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(d_emb.data() + i * ld, global.grad.data() + (first + i) * cols, cols * sizeof(float));
    }
    int updates = 0;
    s = ex.Backward(ConstMatrixView(d_emb.data(), n, cols, ld),
                        [&](std::span<const Bags<int32_t>> owned, ConstMatrixView grad) {
                          ++updates;
                          EXPECT_EQ(grad.rows, global.n);
                          for (size_t k = 0; k < owned.size(); ++k) {
                            const int t = plan.tables_of(me)[k];
                            for (int64_t g = 0; g < global.n; ++g) {
                              EXPECT_EQ(std::memcmp(grad.row(g) + k * c.dim, global.grad.data() + g * cols + t * c.dim,
                                                    c.dim * sizeof(float)),
                                        0)
                                  << "table " << t << ", global sample " << g;
                            }
                          }
                          return absl::OkStatus();
                        });
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(updates, plan.tables_of(me).empty() ? 0 : 1);
  }
  EXPECT_EQ(ex.stats().steps, 2);
  // What one rank sends, the other receives. Each step sends at least the
  // pooled rows (forward: the other's samples of this rank's tables;
  // backward: this rank's samples' gradients of the other's tables), and
  // more when the other owns tables and this rank has samples: its bags.
  const int other = 1 - me;
  const int64_t mine[2] = {ex.stats().bytes_sent, ex.stats().bytes_received};
  int64_t both[4] = {};
  ASSERT_EQ(MPI_Allgather(mine, 2, MPI_INT64_T, both, 2, MPI_INT64_T, MPI_COMM_WORLD), MPI_SUCCESS);
  EXPECT_EQ(both[2 * me], both[2 * other + 1]) << "sent by rank " << me << ", received by rank " << other;
  const auto owned = [&](int r) { return static_cast<int64_t>(plan.tables_of(r).size()); };
  const int64_t rows_bytes = 2 * int64_t{sizeof(float)} * c.dim * (c.local[other] * owned(me) + c.local[me] * owned(other));
  if (owned(other) > 0 && c.local[me] > 0) {
    EXPECT_GT(ex.stats().bytes_sent, rows_bytes) << "the pooled rows and this rank's bags of the other's tables";
  } else {
    EXPECT_EQ(ex.stats().bytes_sent, rows_bytes) << "the pooled rows only";
  }
}

TEST(EmbeddingExchange, PooledRowsBagsAndGradientsEqualOneProcessExactly) {
  const Comm comm(MPI_COMM_WORLD);
  ASSERT_EQ(comm.size(), 2);
  for (const Transfer transfer : {Transfer::kNonblocking, Transfer::kBlocking}) {
    for (const Case& c : Cases()) ExpectSameAsOneProcess(comm, c, transfer);
  }
}

using Table = SimpleTable<float, kDynamic>;

// The tables of a case as SimpleTables, InitUniform(seed + t), each identical
// on every rank.
std::vector<std::unique_ptr<Table>> MakeSimpleTables(const Case& c) {
  std::vector<std::unique_ptr<Table>> tables;
  for (size_t t = 0; t < c.rows.size(); ++t) {
    absl::StatusOr<Table> table =
        Table::Create({.name = absl::StrCat("t", t), .nvectors = c.rows[t], .featuresize = c.dim});
    EXPECT_TRUE(table.ok()) << table.status();
    tables.push_back(std::make_unique<Table>(*std::move(table)));
    InitUniform(*tables.back(), c.seed + t, /*threads=*/1);
  }
  return tables;
}

std::vector<MatrixView> Slices(MatrixView m, int tables, int64_t dim) {
  std::vector<MatrixView> out;
  for (int k = 0; k < tables; ++k) out.push_back(m.slice(k * dim, dim));
  return out;
}

std::vector<ConstMatrixView> Slices(ConstMatrixView m, int tables, int64_t dim) {
  std::vector<ConstMatrixView> out;
  for (int k = 0; k < tables; ++k) out.push_back(m.slice(k * dim, dim));
  return out;
}

// The real kernels: each owner pools and applies SGD with an Ensemble of
// its tables; one process does the same with all tables on the global
// batch. After three steps the owned tables and every pooled row are equal.
TEST(EmbeddingExchange, OwnersRunningTheKernelsTrainTheSameTablesAsOneProcess) {
  const Comm comm(MPI_COMM_WORLD);
  ASSERT_EQ(comm.size(), 2);
  const int me = comm.rank();
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name + ", seed " + std::to_string(c.seed));
    absl::StatusOr<PlannedExchange> setup = MakeExchange(comm, c);
    ASSERT_TRUE(setup.ok()) << setup.status();
    const ShardPlan& plan = setup->plan;
    EmbeddingExchange& ex = *setup->exchange;
    const int tables = static_cast<int>(c.rows.size()), owned = static_cast<int>(plan.tables_of(me).size());
    const int64_t cols = tables * c.dim, n = c.local[me], first = me == 0 ? 0 : c.local[0];

    std::vector<std::unique_ptr<Table>> single = MakeSimpleTables(c), mine = MakeSimpleTables(c);
    Ensemble single_ensemble({.threads = 1}), my_ensemble({.threads = 1});
    for (const auto& t : single) ASSERT_TRUE(single_ensemble.add(*t).ok());
    for (int t : plan.tables_of(me)) ASSERT_TRUE(my_ensemble.add(*mine[t]).ok());
    const UpdateOptions sgd{.learning_rate = 0.5f};

    for (uint64_t step = 0; step < 3; ++step) {
      const GlobalBatch global = MakeBatch(c, c.seed * 100 + step);
      const LocalBatch local = Share(c, global, me);
      std::vector<Bags<int32_t>> global_bags;
      for (int t = 0; t < tables; ++t) global_bags.push_back({.offsets = global.offsets[t], .indices = global.indices[t]});

      // One process.
      std::vector<float> expected(global.n * cols);
      const MatrixView expected_view{expected.data(), global.n, cols, cols};
      ASSERT_TRUE(single_ensemble.pooled_lookup<int32_t>(global_bags, Slices(expected_view, tables, c.dim)).ok());
      ASSERT_TRUE(single_ensemble.reindex<int32_t>(global_bags, Pooling::kSum).ok());
      const ConstMatrixView global_grad(global.grad.data(), global.n, cols, cols);
      ASSERT_TRUE(single_ensemble.sgd_update(Slices(global_grad, tables, c.dim), sgd).ok());

      // Two ranks.
      std::vector<float> emb(n * cols, kSentinel);
      absl::Status s = ex.Forward(
          local.bags,
          [&](std::span<const Bags<int32_t>> bags, MatrixView out) {
            return my_ensemble.pooled_lookup<int32_t>(bags, Slices(out, owned, c.dim));
          },
          MatrixView{emb.data(), n, cols, cols});
      ASSERT_TRUE(s.ok()) << s;
      if (n > 0) {  // emb.data() may be null
        EXPECT_EQ(std::memcmp(emb.data(), expected.data() + first * cols, n * cols * sizeof(float)), 0)
            << "step " << step << ", rank " << me;
      }
      s = ex.Backward(ConstMatrixView(global.grad.data() + first * cols, n, cols, cols),
                          [&](std::span<const Bags<int32_t>> bags, ConstMatrixView grad) {
                            absl::Status r = my_ensemble.reindex<int32_t>(bags, Pooling::kSum);
                            if (!r.ok()) return r;
                            return my_ensemble.sgd_update(Slices(grad, owned, c.dim), sgd);
                          });
      ASSERT_TRUE(s.ok()) << s;
    }
    for (int t : plan.tables_of(me)) {
      for (int64_t r = 0; r < c.rows[t]; ++r) {
        ASSERT_EQ(std::memcmp(mine[t]->rowpointer(r, Access::kRead), single[t]->rowpointer(r, Access::kRead),
                              c.dim * sizeof(float)),
                  0)
            << "table " << t << ", row " << r << " on rank " << me;
      }
    }
  }
}

// Start, Progress between, Wait: the same rows and gradients as Forward and
// Backward, with the caller's work (here: nothing but Progress) in between.
TEST(EmbeddingExchange, ProgressBetweenStartAndWaitGivesTheSameRowsAndGradients) {
  const Comm comm(MPI_COMM_WORLD);
  ASSERT_EQ(comm.size(), 2);
  const int me = comm.rank();
  const Case c = Cases()[0];
  absl::StatusOr<PlannedExchange> setup = MakeExchange(comm, c);
  ASSERT_TRUE(setup.ok()) << setup.status();
  const ShardPlan& plan = setup->plan;
  EmbeddingExchange& ex = *setup->exchange;
  const int tables = static_cast<int>(c.rows.size());
  const int64_t cols = tables * c.dim, n = c.local[me], first = me == 0 ? 0 : c.local[0];
  const std::vector<std::vector<float>> rows = MakeTables(c);
  const GlobalBatch global = MakeBatch(c, 77);
  const LocalBatch local = Share(c, global, me);
  std::vector<float> expected(global.n * cols);
  for (int t = 0; t < tables; ++t) {
    const Bags<int32_t> bags{.offsets = global.offsets[t], .indices = global.indices[t]};
    PoolReference(rows[t], c.dim, bags, MatrixView{expected.data(), global.n, cols, cols}.slice(t * c.dim, c.dim));
  }

  ASSERT_TRUE(ex.Progress().ok());  // nothing in flight
  ASSERT_TRUE(ex.StartIndices(local.bags).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(ex.Progress().ok());
  ASSERT_TRUE(ex.WaitIndices().ok());
  const MatrixView out = ex.owned_output();
  for (size_t k = 0; k < plan.tables_of(me).size(); ++k) {
    PoolReference(rows[plan.tables_of(me)[k]], c.dim, ex.owned_bags()[k], out.slice(k * c.dim, c.dim));
  }
  std::vector<float> emb(n * cols, kSentinel);
  ASSERT_TRUE(ex.StartPooled(MatrixView{emb.data(), n, cols, cols}).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(ex.Progress().ok());
  ASSERT_TRUE(ex.WaitPooled().ok());
  EXPECT_EQ(std::memcmp(emb.data(), expected.data() + first * cols, n * cols * sizeof(float)), 0);

  ASSERT_TRUE(ex.StartGradients(ConstMatrixView(global.grad.data() + first * cols, n, cols, cols)).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(ex.Progress().ok());
  ASSERT_TRUE(ex.WaitGradients().ok());
  for (size_t k = 0; k < plan.tables_of(me).size(); ++k) {
    const int t = plan.tables_of(me)[k];
    for (int64_t g = 0; g < global.n; ++g) {
      EXPECT_EQ(std::memcmp(ex.owned_grad().row(g) + k * c.dim, global.grad.data() + g * cols + t * c.dim,
                            c.dim * sizeof(float)),
                0)
          << "table " << t << ", global sample " << g;
    }
  }
}

TEST(EmbeddingExchange, MalformedBagsOnOneRankFailTheStepOnEveryRankWithThatRanksMessage) {
  const Comm comm(MPI_COMM_WORLD);
  ASSERT_EQ(comm.size(), 2);
  const Case c = Cases()[0];
  absl::StatusOr<PlannedExchange> setup = MakeExchange(comm, c);
  ASSERT_TRUE(setup.ok()) << setup.status();
  EmbeddingExchange& ex = *setup->exchange;
  const GlobalBatch global = MakeBatch(c, 9);
  LocalBatch local = Share(c, global, comm.rank());
  if (comm.rank() == 1) {  // rank 1's table 2: bag 1 ends before it starts
    local.offsets[2] = {0, 3, 1, 4};
    local.indices[2] = {1, 2, 3, 4};
    local.bags[2] = {.offsets = local.offsets[2], .indices = local.indices[2]};
  }
  std::vector<float> emb(c.local[comm.rank()] * c.rows.size() * c.dim);
  const MatrixView emb_view{emb.data(), c.local[comm.rank()], static_cast<int64_t>(c.rows.size()) * c.dim,
                            static_cast<int64_t>(c.rows.size()) * c.dim};
  bool pooled = false;
  auto pool = [&](std::span<const Bags<int32_t>>, MatrixView) {
    pooled = true;
    return absl::OkStatus();
  };
  absl::Status s = ex.Forward(local.bags, pool, emb_view);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "rank 1: EmbeddingExchange: table 2, bag 1: offsets 3 > 1");
  EXPECT_FALSE(pooled);

  // The next step runs (here with good bags on both ranks).
  local = Share(c, global, comm.rank());
  s = ex.Forward(local.bags, pool, emb_view);
  EXPECT_TRUE(s.ok()) << s;
}

TEST(EmbeddingExchange, AnOwnersPoolingErrorFailsTheStepOnEveryRank) {
  const Comm comm(MPI_COMM_WORLD);
  ASSERT_EQ(comm.size(), 2);
  Case c = Cases()[1];  // every table on rank 0
  absl::StatusOr<PlannedExchange> setup = MakeExchange(comm, c);
  ASSERT_TRUE(setup.ok()) << setup.status();
  EmbeddingExchange& ex = *setup->exchange;
  const GlobalBatch global = MakeBatch(c, 11);
  const LocalBatch local = Share(c, global, comm.rank());
  const int64_t cols = static_cast<int64_t>(c.rows.size()) * c.dim;
  std::vector<float> emb(c.local[comm.rank()] * cols);
  absl::Status s = ex.Forward(
      local.bags,
      [&](std::span<const Bags<int32_t>>, MatrixView) {
        return absl::OutOfRangeError("table t1, bag 7, index 0: row 20 >= nvectors 20");
      },
      MatrixView{emb.data(), c.local[comm.rank()], cols, cols});
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(s.message(), "rank 0: table t1, bag 7, index 0: row 20 >= nvectors 20");
}

TEST(EmbeddingExchange, CallsOutOfOrderAreRefused) {
  const Comm comm(MPI_COMM_WORLD);
  const Case c = Cases()[0];
  absl::StatusOr<PlannedExchange> setup = MakeExchange(comm, c);
  ASSERT_TRUE(setup.ok()) << setup.status();
  EmbeddingExchange& ex = *setup->exchange;
  EXPECT_EQ(ex.WaitIndices().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ex.StartPooled(MatrixView{}).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ex.StartGradients(ConstMatrixView{}).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(EmbeddingExchange, CreateRefusesAPlanForAnotherWorldAndBadOptions) {
  const Comm comm(MPI_COMM_WORLD);
  const std::vector<TableCost> costs(3, TableCost{.bytes = 1, .lookups_per_step = 1});
  absl::StatusOr<ShardPlan> three = ShardPlan::Create(costs, 3);
  ASSERT_TRUE(three.ok());
  EXPECT_EQ(EmbeddingExchange::Create(comm, *three, {.dim = 4, .max_local_batch = 8}).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<ShardPlan> plan = ShardPlan::Create(costs, comm.size());
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(EmbeddingExchange::Create(comm, *plan, {.dim = 4, .max_local_batch = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  // 2^31 floats of pooled rows on one rank do not fit MPI's int counts.
  EXPECT_EQ(EmbeddingExchange::Create(comm, *plan, {.dim = 1 << 13, .max_local_batch = 1 << 16}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace cemb::distributed
