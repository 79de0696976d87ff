// The embedding kernels over the thesis' parameter space (its Table 5.1) and
// its headline configurations (bench/run_embedding.sh).
//
//   build-bench/bench/embedding_bench --cemb_grid=headline --benchmark_min_time=0.5
//   bench/run_embedding.sh [--small]          (runs this and prints a summary table)
//
// Operations (all through Ensemble, as the DLRM will call them):
//   lookup          pooled_lookup (sum) of every table into one concatenated
//                   output matrix (each table writes a column slice).
//   reindex         Ensemble::reindex alone.
//   sgd             sgd_update alone (its reindex runs with the timer paused).
//   reindex_sgd     reindex + fused sgd_update of the same batch, both timed.
//   reindex_adagrad reindex + fused rowwise_adagrad_update, both timed.
//
// Grids (--cemb_grid=, comma-separated; default small):
//   small     8 x 200,000 rows: the headline configurations, quickly.
//   headline  item 15: 8 x 1,000,000 rows, batch 16384, all threads, huge
//             pages: D=16/128/256, L=1/40, uniform/Zipf, int32/int64,
//             standard/non-temporal stores, and the update of D=128 L=40.
//   sweep     one factor at a time around D=128 L=40 uniform: D x L x
//             distribution, tier (huge pages, none, PMem file), static /
//             dynamic / indirect / bfloat16-row table, stores, index width, threads 1..N,
//             ensemble size, prefetch distance, update per D.
//   all       every grid above.
// Other flags: --cemb_rows=N and --cemb_tables=N override the table shape of
// every grid, --cemb_threads=N the thread count (default: all OpenMP threads),
// --cemb_pmem_dir=DIR the PMem tier's directory (default $TMPDIR, else /tmp).
//
// Counters: rows/s (row reads: indices per second), GB/s (table row bytes
// read; for the updates, unique rows read + written), limit_GB/s (a plain
// random-row gather of the same tables with the same threads, measured once
// per tables x threads in this process: bench_util.h), vs_gather = GB/s /
// limit_GB/s. real_time is milliseconds per batch.
//
// Fresh indices: each configuration draws a pool of P distinct batches per
// table outside the timed region and the iterations cycle through it, so a
// batch comes back only after P - 1 others. P = clamp(4 * LLC / (indices per
// batch * 64 B), 8, 64): between two uses of a batch the kernels read at least
// four last-level caches' worth of rows (at the smallest row, 64 B), so the
// rows of one batch are gone from the 105 MiB L3 when it comes back; at L=40
// the pool's indices alone (>= 168 MiB in int32) exceed the L3 as well.
//
// Memory: tables are built once per (tables, rows, D, kind, tier) and kept
// while consecutive benchmarks use them (the grids are ordered so); the
// largest, 8 x 1M x 256 fp32, is 8 GiB.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/random.h"
#include "bench/bench_util.h"
#include "bench/indirect_table.h"
#include "embedding/ensemble.h"
#include "embedding/kernels.h"
#include "embedding/memory.h"
#include "embedding/simple_table.h"
#include "embedding/table_io.h"

namespace cemb::bench {
namespace {

constexpr int64_t kBatch = 16384;

// kBf16: SimpleTable<bfloat16, D>, rows stored in bfloat16 (half the bytes).
enum class Kind { kStatic, kDynamic, kIndirect, kBf16 };
enum class Tier { kHuge, kNoHuge, kPmem };
enum class Op { kLookup, kReindex, kSgd, kReindexSgd, kReindexAdagrad };

const char* KindName(Kind k) {
  switch (k) {
    case Kind::kStatic: return "static";
    case Kind::kDynamic: return "dynamic";
    case Kind::kIndirect: return "indirect";
    case Kind::kBf16: return "bf16";
  }
  return "?";
}
const char* TierLabel(Tier t) {
  switch (t) {
    case Tier::kHuge: return "dram_huge";
    case Tier::kNoHuge: return "dram_4k";
    case Tier::kPmem: return "pmem_file";
  }
  return "?";
}
const char* OpName(Op o) {
  switch (o) {
    case Op::kLookup: return "lookup";
    case Op::kReindex: return "reindex";
    case Op::kSgd: return "sgd";
    case Op::kReindexSgd: return "reindex_sgd";
    case Op::kReindexAdagrad: return "reindex_adagrad";
  }
  return "?";
}

// The tables a benchmark needs; the cache key of the table set.
struct TableShape {
  int64_t nrows = 1'000'000;
  int64_t d = 128;
  Kind kind = Kind::kStatic;
  Tier tier = Tier::kHuge;
  auto key() const { return std::tuple(nrows, d, kind, tier); }
};

struct Config {
  Op op = Op::kLookup;
  TableShape shape;
  int ntables = 8;
  int64_t bag = 40;  // L, indices per bag
  Distribution dist = Distribution::kUniform;
  bool index64 = false;
  Store store = Store::kStandard;
  int threads = 0;    // 0: all OpenMP threads
  int prefetch = -1;  // KernelOptions::prefetch_distance; -1 = the library's default

  std::string Name() const {
    std::string name = absl::StrCat(OpName(op), "/T:", ntables, "x", shape.nrows, "/D:", shape.d, "/L:", bag, "/",
                                    DistributionName(dist), "/", TierLabel(shape.tier), "/", KindName(shape.kind), "/",
                                    index64 ? "i64" : "i32", "/", store == Store::kStandard ? "std" : "nt",
                                    "/threads:", threads);
    if (prefetch >= 0) absl::StrAppend(&name, "/prefetch:", prefetch);
    return name;
  }
};

struct Flags {
  std::vector<std::string> grids = {"small"};
  int64_t rows = 0;    // 0: each grid's own
  int tables = 0;      // 0: each grid's own
  int threads = 0;     // 0: omp_get_max_threads()
  std::string pmem_dir;
};
Flags g_flags;

// --- tables ----------------------------------------------------------------

class TableSetBase {
 public:
  virtual ~TableSetBase() = default;
  virtual int ntables() const = 0;
  virtual absl::Status AddTo(Ensemble& ensemble, int ntables) const = 0;
  virtual GatherTarget target(int t) const = 0;
};

// The contiguous rows of a table (an IndirectTable's storage behind its pointers).
template <typename Table>
const Table& Storage(const Table& t) { return t; }
template <typename T, int64_t D>
const SimpleTable<T, D>& Storage(const IndirectTable<T, D>& t) { return t.storage(); }

template <typename Table>
class TableSet final : public TableSetBase {
 public:
  explicit TableSet(std::vector<Table> tables) : tables_(std::move(tables)) {}
  int ntables() const override { return static_cast<int>(tables_.size()); }
  absl::Status AddTo(Ensemble& ensemble, int ntables) const override {
    for (int t = 0; t < ntables; ++t) {
      if (absl::Status s = ensemble.add(tables_[t]); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  GatherTarget target(int t) const override {
    const auto& rows = Storage(tables_[t]);
    return {reinterpret_cast<const std::byte*>(rows.rowpointer(0, Access::kPrefetch)), rows.nvectors(),
            static_cast<int64_t>(rows.row_bytes())};
  }

 private:
  std::vector<Table> tables_;
};

TierOptions TierFor(Tier tier) {
  switch (tier) {
    case Tier::kHuge: return TierOptions::Dram(true);
    case Tier::kNoHuge: return TierOptions::Dram(false);
    case Tier::kPmem: return TierOptions::Pmem(g_flags.pmem_dir);
  }
  return {};
}

template <typename Table>
absl::StatusOr<std::unique_ptr<TableSetBase>> BuildTables(const TableShape& shape, int ntables) {
  std::vector<Table> tables;
  for (int t = 0; t < ntables; ++t) {
    TableOptions o{.name = absl::StrCat("t", t), .nvectors = shape.nrows, .featuresize = shape.d,
                   .tier = TierFor(shape.tier)};
    absl::StatusOr<Table> table = Table::Create(o);
    if (!table.ok()) return table.status();
    InitUniform(*table, SplitMix64::Mix(2026, static_cast<uint64_t>(t)));
    tables.push_back(*std::move(table));
  }
  return std::unique_ptr<TableSetBase>(new TableSet<Table>(std::move(tables)));
}

template <template <typename, int64_t> class Table, typename T = float>
absl::StatusOr<std::unique_ptr<TableSetBase>> BuildStatic(const TableShape& shape, int ntables) {
  switch (shape.d) {
    case 16: return BuildTables<Table<T, 16>>(shape, ntables);
    case 64: return BuildTables<Table<T, 64>>(shape, ntables);
    case 128: return BuildTables<Table<T, 128>>(shape, ntables);
    case 256: return BuildTables<Table<T, 256>>(shape, ntables);
  }
  return absl::InvalidArgumentError(absl::StrCat("no static table type for D=", shape.d));
}

// The one table set alive at a time (freed before the next is built).
struct TableCache {
  std::unique_ptr<TableSetBase> set;
  TableShape shape;
  std::map<std::pair<int, int>, GatherLimit> limits;  // (ntables, threads)
};
TableCache g_tables;

absl::StatusOr<const TableSetBase*> GetTables(const TableShape& shape, int ntables) {
  if (g_tables.set != nullptr && g_tables.shape.key() == shape.key() && g_tables.set->ntables() >= ntables) {
    return g_tables.set.get();
  }
  g_tables.set.reset();
  g_tables.limits.clear();
  absl::StatusOr<std::unique_ptr<TableSetBase>> set;
  switch (shape.kind) {
    case Kind::kStatic: set = BuildStatic<SimpleTable>(shape, ntables); break;
    case Kind::kDynamic: set = BuildTables<SimpleTable<float, kDynamic>>(shape, ntables); break;
    case Kind::kIndirect: set = BuildStatic<IndirectTable>(shape, ntables); break;
    case Kind::kBf16: set = BuildStatic<SimpleTable, bfloat16>(shape, ntables); break;
  }
  if (!set.ok()) return set.status();
  g_tables.set = *std::move(set);
  g_tables.shape = shape;
  return g_tables.set.get();
}

const GatherLimit& GetLimit(const TableSetBase& set, int ntables, int threads) {
  auto it = g_tables.limits.find({ntables, threads});
  if (it == g_tables.limits.end()) {
    std::vector<GatherTarget> targets;
    for (int t = 0; t < ntables; ++t) targets.push_back(set.target(t));
    it = g_tables.limits.emplace(std::pair(ntables, threads), MeasureGatherLimit(targets, threads)).first;
  }
  return it->second;
}

// --- index pools -------------------------------------------------------------

template <typename Index>
struct IndexPool {
  struct Key {
    int ntables;
    int64_t nrows, bag;
    Distribution dist;
    auto tie() const { return std::tuple(ntables, nrows, bag, dist); }
  };
  Key key{};
  int nbatches = 0;
  std::vector<Index> offsets;                // shared by every bag set: b * L
  std::vector<std::vector<Index>> indices;   // [batch * ntables + table]
  std::vector<Bags<Index>> bags;             // [batch * ntables + table]
  int cursor = 0;

  std::span<const Bags<Index>> Next() {
    const int b = cursor;
    cursor = (cursor + 1) % nbatches;
    return std::span<const Bags<Index>>(bags).subspan(static_cast<size_t>(b) * key.ntables, key.ntables);
  }
};

IndexPool<int32_t> g_pool32;
IndexPool<int64_t> g_pool64;

int PoolBatches(int64_t indices_per_batch) {
  const double bytes = static_cast<double>(indices_per_batch) * 64.0;
  const int p = static_cast<int>(std::ceil(4.0 * static_cast<double>(ReadCacheBytes()) / bytes));
  return std::clamp(p, 8, 64);
}

template <typename Index>
IndexPool<Index>& GetPool(const Config& c) {
  IndexPool<Index>& pool = [&]() -> IndexPool<Index>& {
    if constexpr (sizeof(Index) == 4) {
      g_pool64 = {};
      return g_pool32;
    } else {
      g_pool32 = {};
      return g_pool64;
    }
  }();
  const typename IndexPool<Index>::Key key{c.ntables, c.shape.nrows, c.bag, c.dist};
  if (pool.nbatches > 0 && pool.key.tie() == key.tie()) return pool;
  pool = {};
  pool.key = key;
  pool.nbatches = PoolBatches(c.ntables * kBatch * c.bag);
  pool.offsets.resize(kBatch + 1);
  for (int64_t b = 0; b <= kBatch; ++b) pool.offsets[b] = static_cast<Index>(b * c.bag);
  const int64_t sets = static_cast<int64_t>(pool.nbatches) * c.ntables;
  pool.indices.resize(sets);
  const ZipfSampler zipf(static_cast<uint64_t>(c.shape.nrows), 1.0);
  parallel_for(sets, 0, [&](int64_t s) {
    const int table = static_cast<int>(s % c.ntables);
    std::vector<Index>& idx = pool.indices[s];
    idx.resize(kBatch * c.bag);
    const uint64_t seed = SplitMix64::Mix(0x1d5, static_cast<uint64_t>(s));
    if (c.dist == Distribution::kUniform) {
      FillUniform<Index>(idx, c.shape.nrows, seed);
    } else {
      FillZipf<Index>(idx, zipf, LfsrScrambler(static_cast<uint64_t>(c.shape.nrows), static_cast<uint64_t>(table)),
                      seed);
    }
  });
  for (int64_t s = 0; s < sets; ++s) pool.bags.push_back({pool.offsets, pool.indices[s]});
  return pool;
}

// --- the benchmark -----------------------------------------------------------

// A 64-byte (here 2 MiB) aligned fp32 matrix of `rows` x `cols`.
struct Matrix {
  Region region;
  MatrixView view;
  static absl::StatusOr<Matrix> Create(int64_t rows, int64_t cols) {
    absl::StatusOr<Region> r = Region::Allocate(TierOptions::Dram(true), rows * cols * sizeof(float));
    if (!r.ok()) return r.status();
    Matrix m{*std::move(r), {}};
    m.view = {reinterpret_cast<float*>(m.region.data()), rows, cols, cols};
    return m;
  }
};

template <typename Index>
void Run(benchmark::State& state, const Config& c) {
  const int threads = c.threads > 0 ? c.threads : omp_get_max_threads();
  absl::StatusOr<const TableSetBase*> set = GetTables(c.shape, c.ntables);
  if (!set.ok()) {
    state.SkipWithError(std::string(set.status().message()).c_str());
    return;
  }
  IndexPool<Index>& pool = GetPool<Index>(c);
  const GatherLimit& limit = GetLimit(**set, c.ntables, threads);

  EnsembleOptions eo;
  eo.threads = threads;
  if (c.prefetch >= 0) eo.kernels.prefetch_distance = c.prefetch;
  Ensemble ensemble(eo);
  if (absl::Status s = (*set)->AddTo(ensemble, c.ntables); !s.ok()) {
    state.SkipWithError(std::string(s.message()).c_str());
    return;
  }
  const int64_t d = c.shape.d;
  const int64_t row_bytes = (*set)->target(0).row_bytes;
  absl::StatusOr<Matrix> matrix = Matrix::Create(kBatch, c.ntables * d);  // output, or gradient
  if (!matrix.ok()) {
    state.SkipWithError(std::string(matrix.status().message()).c_str());
    return;
  }
  std::vector<MatrixView> out;
  std::vector<ConstMatrixView> grads;
  for (int t = 0; t < c.ntables; ++t) {
    out.push_back(matrix->view.slice(t * d, d));
    grads.push_back(out.back());
  }
  if (c.op != Op::kLookup) {  // a small gradient (the rows hardly move)
    Xoshiro256pp rng(7);
    float* g = matrix->view.data;
    for (int64_t i = 0; i < kBatch * c.ntables * d; ++i) g[i] = static_cast<float>(rng.Uniform() - 0.5) * 1e-3f;
  }
  std::vector<RowwiseAdagradState> states;
  std::vector<RowwiseAdagradState*> state_ptrs;
  if (c.op == Op::kReindexAdagrad) {
    states.reserve(c.ntables);
    for (int t = 0; t < c.ntables; ++t) states.emplace_back(c.shape.nrows);
    for (auto& s : states) state_ptrs.push_back(&s);
  }
  const LookupOptions lookup_options{.pooling = Pooling::kSum, .store = c.store};
  const UpdateOptions update_options{.learning_rate = 1e-3f, .store = c.store};

  int64_t unique_rows = 0;  // over the timed iterations
  double seconds = 0.0;     // timed part of the iterations
  // One step; only its timed part is added to `seconds` (the sgd benchmark's
  // reindex is not).
  auto step = [&](std::span<const Bags<Index>> bags, bool count) -> absl::Status {
    absl::Status s;
    auto start = std::chrono::steady_clock::now();
    switch (c.op) {
      case Op::kLookup: s = ensemble.pooled_lookup<Index>(bags, out, lookup_options); break;
      case Op::kReindex: s = ensemble.reindex<Index>(bags, Pooling::kSum); break;
      case Op::kSgd:
      case Op::kReindexSgd:
      case Op::kReindexAdagrad:
        s = ensemble.reindex<Index>(bags, Pooling::kSum);
        if (!s.ok()) return s;
        if (c.op == Op::kSgd) start = std::chrono::steady_clock::now();
        s = c.op == Op::kReindexAdagrad ? ensemble.rowwise_adagrad_update(grads, state_ptrs, update_options)
                                        : ensemble.sgd_update(grads, update_options);
        if (count) {
          for (int t = 0; t < c.ntables; ++t) unique_rows += ensemble.plan(t).nunique();
        }
        break;
    }
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (count) {
      state.SetIterationTime(elapsed);
      seconds += elapsed;
    }
    return s;
  };
  // Untimed: the first call grows the plans and the work lists.
  if (absl::Status s = step(pool.Next(), false); !s.ok()) {
    state.SkipWithError(std::string(s.message()).c_str());
    return;
  }
  const CpuClock cpu_start = CpuClock::Now();
  for (auto _ : state) {
    if (absl::Status s = step(pool.Next(), true); !s.ok()) {
      state.SkipWithError(std::string(s.message()).c_str());
      break;
    }
  }
  const CpuClock cpu_end = CpuClock::Now();
  if (seconds <= 0.0) return;

  const double iterations = static_cast<double>(state.iterations());
  const double indices = static_cast<double>(c.ntables) * kBatch * c.bag;
  const double bytes = c.op == Op::kLookup   ? indices * row_bytes * iterations
                       : c.op == Op::kReindex ? 0.0
                                              : 2.0 * static_cast<double>(unique_rows) * row_bytes;
  state.counters["rows/s"] = indices * iterations / seconds;
  state.counters["limit_GB/s"] = limit.best() / 1e9;
  state.counters["gather_plain_GB/s"] = limit.plain / 1e9;
  if (bytes > 0) {
    state.SetBytesProcessed(static_cast<int64_t>(bytes));
    state.counters["GB/s"] = bytes / seconds / 1e9;
    state.counters["vs_gather"] = bytes / seconds / limit.best();
  }
  if (unique_rows > 0) state.counters["unique_frac"] = static_cast<double>(unique_rows) / (indices * iterations);
  state.counters["pool_batches"] = pool.nbatches;
  // The share of `threads` CPUs this process had over the loop: well below 1
  // means other load took the cores and the timing is not the machine's.
  state.counters["cpu_share"] = cpu_end.Share(cpu_start, threads);
  state.SetLabel(ensemble.table(0).description());
}

// --- grids -------------------------------------------------------------------

void Register(std::vector<Config>& configs, const Config& c) { configs.push_back(c); }

Config Base(int64_t rows, int tables) {
  Config c;
  c.shape.nrows = g_flags.rows > 0 ? g_flags.rows : rows;
  c.ntables = g_flags.tables > 0 ? g_flags.tables : tables;
  c.threads = g_flags.threads > 0 ? g_flags.threads : omp_get_max_threads();
  return c;
}

// Item 15's configurations; `full` adds int64 and streaming-store variants.
void HeadlineGrid(std::vector<Config>& v, int64_t rows, bool full) {
  const Config base = Base(rows, 8);
  // int32 and int64 indices, then int32 with non-temporal output stores.
  auto lookup = [&](int64_t d, int64_t bag, Distribution dist) {
    for (auto [i64, store] : {std::pair(false, Store::kStandard), std::pair(true, Store::kStandard),
                              std::pair(false, Store::kNonTemporal)}) {
      if ((i64 || store != Store::kStandard) && !full) continue;
      Config c = base;
      c.shape.d = d;
      c.bag = bag;
      c.dist = dist;
      c.index64 = i64;
      c.store = store;
      Register(v, c);
    }
  };
  lookup(16, 40, Distribution::kUniform);
  lookup(128, 40, Distribution::kUniform);
  lookup(128, 40, Distribution::kZipf);
  lookup(128, 1, Distribution::kUniform);
  for (bool i64 : {false, true}) {
    if (i64 && !full) continue;
    for (Op op : {Op::kReindex, Op::kSgd, Op::kReindexSgd, Op::kReindexAdagrad}) {
      for (Store store : {Store::kStandard, Store::kNonTemporal}) {
        if (store == Store::kNonTemporal && (!full || op == Op::kReindex)) continue;
        Config c = base;
        c.op = op;
        c.index64 = i64;
        c.store = store;
        Register(v, c);
      }
    }
  }
  lookup(256, 40, Distribution::kUniform);
}

void SweepGrid(std::vector<Config>& v) {
  const Config base = Base(1'000'000, 8);
  // Feature size x accesses x distribution (Table 5.1), and the update per D.
  for (int64_t d : {16, 64, 128, 256}) {
    for (int64_t bag : {1, 40}) {
      for (Distribution dist : {Distribution::kUniform, Distribution::kZipf}) {
        Config c = base;
        c.shape.d = d;
        c.bag = bag;
        c.dist = dist;
        Register(v, c);
      }
    }
    Config u = base;
    u.shape.d = d;
    u.op = Op::kReindexSgd;
    Register(v, u);
    if (d == 128) {
      // Around D=128 L=40 uniform: stores, index width, threads, ensemble
      // size, prefetch distance (all on the same tables).
      Config c = base;
      c.store = Store::kNonTemporal;
      Register(v, c);
      c = base;
      c.index64 = true;
      Register(v, c);
      for (int t = 1; t < base.threads; ++t) {
        c = base;
        c.threads = t;
        Register(v, c);
      }
      for (int n : {1, 2, 4}) {
        if (n >= base.ntables) continue;
        c = base;
        c.ntables = n;
        Register(v, c);
      }
      for (int p : {0, 4, 8, 32, 64}) {
        c = base;
        c.prefetch = p;
        Register(v, c);
      }
    }
  }
  // Table kinds and tiers at D=128 L=40 (lookup and update).
  for (auto [kind, tier] : {std::pair(Kind::kDynamic, Tier::kHuge), std::pair(Kind::kIndirect, Tier::kHuge),
                            std::pair(Kind::kBf16, Tier::kHuge),
                            std::pair(Kind::kStatic, Tier::kNoHuge), std::pair(Kind::kStatic, Tier::kPmem)}) {
    for (Op op : {Op::kLookup, Op::kReindexSgd}) {
      Config c = base;
      c.shape.kind = kind;
      c.shape.tier = tier;
      c.op = op;
      Register(v, c);
    }
  }
}

bool ParseFlag(const std::string& arg, const char* name, std::string* value) {
  const std::string prefix = absl::StrCat("--", name, "=");
  if (arg.rfind(prefix, 0) != 0) return false;
  *value = arg.substr(prefix.size());
  return true;
}

// Removes this program's own flags from argv; false (with a message) on a bad one.
bool ParseFlags(int* argc, char** argv) {
  const char* tmp = std::getenv("TMPDIR");
  g_flags.pmem_dir = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  int kept = 1;
  for (int i = 1; i < *argc; ++i) {
    const std::string arg = argv[i];
    std::string value;
    bool ok = true;
    if (ParseFlag(arg, "cemb_grid", &value)) {
      g_flags.grids = absl::StrSplit(value, ',', absl::SkipEmpty());
    } else if (ParseFlag(arg, "cemb_rows", &value)) {
      ok = absl::SimpleAtoi(value, &g_flags.rows) && g_flags.rows > 0;
    } else if (ParseFlag(arg, "cemb_tables", &value)) {
      ok = absl::SimpleAtoi(value, &g_flags.tables) && g_flags.tables > 0;
    } else if (ParseFlag(arg, "cemb_threads", &value)) {
      ok = absl::SimpleAtoi(value, &g_flags.threads) && g_flags.threads > 0;
    } else if (ParseFlag(arg, "cemb_pmem_dir", &value)) {
      g_flags.pmem_dir = value;
    } else {
      argv[kept++] = argv[i];
      continue;
    }
    if (!ok) {
      std::fprintf(stderr, "%s: bad value in %s\n", argv[0], arg.c_str());
      return false;
    }
  }
  *argc = kept;
  for (const std::string& g : g_flags.grids) {
    if (g != "small" && g != "headline" && g != "sweep" && g != "all") {
      std::fprintf(stderr, "%s: unknown grid '%s' (small, headline, sweep, all)\n", argv[0], g.c_str());
      return false;
    }
  }
  return true;
}

}  // namespace
}  // namespace cemb::bench

int main(int argc, char** argv) {
  using namespace cemb::bench;
  RequireOptimizedBuild(argv[0]);
  if (!ParseFlags(&argc, argv)) return 1;
  std::vector<Config> configs;
  for (const std::string& g : g_flags.grids) {
    if (g == "small" || g == "all") HeadlineGrid(configs, 200'000, /*full=*/false);
    if (g == "headline" || g == "all") HeadlineGrid(configs, 1'000'000, /*full=*/true);
    if (g == "sweep" || g == "all") SweepGrid(configs);
  }
  for (const Config& c : configs) {
    auto* b = benchmark::RegisterBenchmark(c.Name().c_str(), [c](benchmark::State& state) {
      if (c.index64) {
        Run<int64_t>(state, c);
      } else {
        Run<int32_t>(state, c);
      }
    });
    b->UseManualTime()->Unit(benchmark::kMillisecond);
  }
  AddMachineContext();
  benchmark::AddCustomContext("pmem_dir", g_flags.pmem_dir);
  {
    const int threads = g_flags.threads > 0 ? g_flags.threads : omp_get_max_threads();
    benchmark::AddCustomContext(absl::StrCat("seq_read_GB/s(", threads, " threads)"),
                                absl::StrFormat("%.2f", MeasureSequentialReadBytesPerSecond(threads) / 1e9));
    benchmark::AddCustomContext("dram_latency_ns", absl::StrFormat("%.0f", MeasureLatencyNs()));
  }
  benchmark::AddCustomContext("batch", std::to_string(kBatch));
  benchmark::AddCustomContext("grids", absl::StrJoin(g_flags.grids, ","));
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
