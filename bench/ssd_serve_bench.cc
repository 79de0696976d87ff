// ssd_serve_bench: serving requests from an ssd snapshot, two ways, on the
// same file and the same request stream:
//   snapshot  SnapshotTable (ssd/snapshot_table.h): the snapshot served in
//             place; a request's hits pinned with no lock, its misses read
//             in one io_uring batch on a ring of its own.
//   training  the training tier: SsdTable after LoadSnapshot of the same
//             file (its rows copied into a log first: that time is printed
//             too), each request a Prefetch(id, rows) / WaitResident(id) /
//             rowpointer / Unpin(id) of its own.
// Both pool (sum) the request's rows as one bag per --bag lookups; both get
// the same DRAM for rows (--pool_mib of slots). Each thread is a closed-loop
// client: it takes a request, serves it, takes the next. Rows are written
// with distinct values and the snapshot holds every row, so every miss is a
// real O_DIRECT read. Reports requests/s, lookups/s, reads/s, hit rate and
// request latency p50 / p99 per thread count.
//
//   build/bench/ssd_serve_bench --dir /work/tmp                       (2^19 rows x D=64 fp32 = 128 MiB, 16 MiB of slots)
//   build/bench/ssd_serve_bench --dir /work/tmp --alpha 0 --threads 1,2,4
// Flags: --dir DIR (required: the snapshot and the training table's log go
// there) --rows N (a power of two) --pool_mib M --lookups L (per request, 64)
// --bag B (8) --alpha A (Zipf, 1.05; 0: uniform) --seconds S (per
// measurement, 3) --threads a,b,... (1,2)
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/random.h"
#include "ssd/snapshot_table.h"
#include "ssd/ssd_table.h"

namespace cemb {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kD = 64;

struct Flags {
  std::string dir;
  int64_t rows = int64_t{1} << 19;
  int64_t pool_mib = 16;
  int64_t lookups = 64;
  int64_t bag = 8;
  double alpha = 1.05;
  double seconds = 3;
  std::vector<int> threads = {1, 2};
};

bool ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--dir") f->dir = v;
    else if (k == "--rows") f->rows = std::atoll(v);
    else if (k == "--pool_mib") f->pool_mib = std::atoll(v);
    else if (k == "--lookups") f->lookups = std::atoll(v);
    else if (k == "--bag") f->bag = std::atoll(v);
    else if (k == "--alpha") f->alpha = std::atof(v);
    else if (k == "--seconds") f->seconds = std::atof(v);
    else if (k == "--threads") {
      f->threads.clear();
      for (absl::string_view t : absl::StrSplit(v, ',')) f->threads.push_back(std::atoi(std::string(t).c_str()));
    } else {
      return false;
    }
  }
  return !f->dir.empty() && f->rows > 0 && (f->rows & (f->rows - 1)) == 0 && f->lookups % f->bag == 0;
}

// The request stream of one thread: Zipf ranks spread over the rows by an
// odd multiplier (a bijection of [0, 2^k)), or uniform.
class Requests {
 public:
  Requests(const Flags& f, uint64_t seed) : f_(f), rng_(seed), zipf_(static_cast<uint64_t>(f.rows), f.alpha) {}
  void Next(std::vector<int64_t>* rows) {
    for (int64_t& r : *rows) {
      const uint64_t rank = f_.alpha > 0 ? zipf_(rng_) : rng_() % static_cast<uint64_t>(f_.rows);
      r = static_cast<int64_t>((rank * 0x9E3779B97F4A7C15ull) & static_cast<uint64_t>(f_.rows - 1));
    }
  }

 private:
  const Flags& f_;
  Xoshiro256pp rng_;
  ZipfSampler zipf_;
};

struct Result {
  int64_t requests = 0;
  double seconds = 0;
  std::vector<double> latency_us;
};

double Percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

// Runs `serve(thread, rows, out)` as closed-loop clients on `threads` threads.
template <typename Serve>
Result Run(const Flags& f, int threads, Serve serve) {
  std::vector<Result> per(static_cast<size_t>(threads));
  std::atomic<bool> stop{false};
  std::vector<std::thread> pool;
  const auto start = Clock::now();
  for (int w = 0; w < threads; ++w) {
    pool.emplace_back([&, w] {
      Requests requests(f, 1000 + static_cast<uint64_t>(w));
      std::vector<int64_t> rows(static_cast<size_t>(f.lookups));
      std::vector<float> out(static_cast<size_t>(f.lookups / f.bag * kD));
      Result& r = per[static_cast<size_t>(w)];
      while (!stop.load(std::memory_order_relaxed)) {
        requests.Next(&rows);
        const auto t0 = Clock::now();
        serve(w, rows, out);
        r.latency_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
        ++r.requests;
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(f.seconds));
  stop = true;
  for (std::thread& t : pool) t.join();
  Result all;
  all.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  for (Result& r : per) {
    all.requests += r.requests;
    all.latency_us.insert(all.latency_us.end(), r.latency_us.begin(), r.latency_us.end());
  }
  return all;
}

void Print(const char* name, int threads, const Flags& f, Result& r, int64_t reads, int64_t hits, int64_t lookups) {
  std::printf("%-9s threads %d: %8.0f requests/s %10.0f lookups/s %8.0f reads/s  hit rate %.3f  p50 %7.0f us  p99 %7.0f us\n",
              name, threads, static_cast<double>(r.requests) / r.seconds,
              static_cast<double>(r.requests * f.lookups) / r.seconds, static_cast<double>(reads) / r.seconds,
              lookups == 0 ? 0.0 : static_cast<double>(hits) / static_cast<double>(lookups),
              Percentile(r.latency_us, 0.5), Percentile(r.latency_us, 0.99));
  std::fflush(stdout);
}

void PoolBags(const Flags& f, std::span<const float* const> rows, std::vector<float>& out) {
  std::vector<int64_t> offsets;
  for (int64_t b = 0; b <= f.lookups / f.bag; ++b) offsets.push_back(b * f.bag);
  PooledSumResolved<float>(rows, offsets, kD, Pooling::kSum, {}, out.data(), kD);
}

int Main(const Flags& f) {
  const std::string path = f.dir + "/ssd_serve_bench.ssd";
  const int64_t pool_bytes = f.pool_mib << 20;
  std::printf("ssd_serve_bench: %lld rows x D=%lld fp32 (%.0f MiB), %lld MiB of slots, requests of %lld lookups "
              "(bags of %lld), %s\n",
              static_cast<long long>(f.rows), static_cast<long long>(kD),
              static_cast<double>(f.rows * kD * 4) / (1 << 20), static_cast<long long>(f.pool_mib),
              static_cast<long long>(f.lookups), static_cast<long long>(f.bag),
              f.alpha > 0 ? absl::StrCat("Zipf(", f.alpha, ")").c_str() : "uniform");
  {  // every row written, then the snapshot
    SsdOptions o{.capacity_bytes = 64 << 20, .file = {.directory = f.dir}, .init_seed = 1};
    auto t = SsdTable<float, kD>::Create({.name = "bench", .nvectors = f.rows}, o);
    if (!t.ok()) return std::fprintf(stderr, "%s\n", t.status().ToString().c_str()), 1;
    for (int64_t r = 0; r < f.rows; ++r) {
      float* p = t->rowpointer(r, Access::kWrite);
      for (int64_t c = 0; c < kD; ++c) p[c] = static_cast<float>(r) + static_cast<float>(c) * 1e-3f;
    }
    auto saved = t->SaveSnapshot(path);
    if (!saved.ok()) return std::fprintf(stderr, "%s\n", saved.status().ToString().c_str()), 1;
  }

  for (int threads : f.threads) {
    const auto t0 = Clock::now();
    auto t = SnapshotTable<float, kD>::Open({.name = "bench", .nvectors = f.rows},
                                            {.path = path, .capacity_bytes = pool_bytes});
    if (!t.ok()) return std::fprintf(stderr, "%s\n", t.status().ToString().c_str()), 1;
    const double open_s = std::chrono::duration<double>(Clock::now() - t0).count();
    std::vector<SnapshotPins> pins(static_cast<size_t>(threads));
    std::vector<std::vector<const float*>> resolved(static_cast<size_t>(threads),
                                                    std::vector<const float*>(static_cast<size_t>(f.lookups)));
    std::atomic<int64_t> errors{0};
    auto serve = [&](int w, const std::vector<int64_t>& rows, std::vector<float>& out) {
      auto& ptrs = resolved[static_cast<size_t>(w)];
      if (!t->Resolve(rows, &pins[static_cast<size_t>(w)], ptrs).ok()) ++errors;
      PoolBags(f, ptrs, out);
      t->Release(&pins[static_cast<size_t>(w)]);
    };
    Run(f, threads, serve);  // warm-up: the pool fills
    const SnapshotStats before = t->stats();
    Result r = Run(f, threads, serve);
    const SnapshotStats s = t->stats();
    std::printf("(snapshot open %.3f s) ", open_s);
    Print("snapshot", threads, f, r, s.reads - before.reads, s.hits - before.hits, s.lookups - before.lookups);
    if (errors > 0) return std::fprintf(stderr, "%lld errors\n", static_cast<long long>(errors.load())), 1;
  }

  for (int threads : f.threads) {
    const auto t0 = Clock::now();
    SsdOptions o{.capacity_bytes = pool_bytes, .file = {.directory = f.dir}, .init_seed = 1};
    auto t = SsdTable<float, kD>::Create({.name = "bench", .nvectors = f.rows}, o);
    if (!t.ok()) return std::fprintf(stderr, "%s\n", t.status().ToString().c_str()), 1;
    if (auto loaded = t->LoadSnapshot(path); !loaded.ok()) {
      return std::fprintf(stderr, "%s\n", loaded.status().ToString().c_str()), 1;
    }
    const double load_s = std::chrono::duration<double>(Clock::now() - t0).count();
    std::atomic<int64_t> next_id{0}, errors{0};
    std::vector<std::vector<const float*>> resolved(static_cast<size_t>(threads),
                                                    std::vector<const float*>(static_cast<size_t>(f.lookups)));
    auto serve = [&](int w, const std::vector<int64_t>& rows, std::vector<float>& out) {
      const int64_t id = next_id.fetch_add(1);
      auto& ptrs = resolved[static_cast<size_t>(w)];
      if (!t->Prefetch(id, rows).ok() || !t->WaitResident(id).ok()) ++errors;
      for (size_t i = 0; i < rows.size(); ++i) ptrs[i] = t->rowpointer(rows[i], Access::kForward);
      PoolBags(f, ptrs, out);
      if (!t->Unpin(id).ok()) ++errors;
    };
    Run(f, threads, serve);
    const SsdStats before = t->stats();
    Result r = Run(f, threads, serve);
    const SsdStats s = t->stats();
    std::printf("(LoadSnapshot %.3f s) ", load_s);
    Print("training", threads, f, r, s.fetch_reads - before.fetch_reads, s.prefetch_hits - before.prefetch_hits,
          s.prefetch_rows - before.prefetch_rows);
    if (errors > 0) return std::fprintf(stderr, "%lld errors\n", static_cast<long long>(errors.load())), 1;
  }
  std::filesystem::remove(path);
  return 0;
}

}  // namespace
}  // namespace cemb

int main(int argc, char** argv) {
#ifndef NDEBUG
  std::fprintf(stderr, "ssd_serve_bench: a debug build measures nothing; build with -DCMAKE_BUILD_TYPE=Release\n");
  return 2;
#endif
  cemb::Flags flags;
  if (!cemb::ParseFlags(argc, argv, &flags)) {
    std::fprintf(stderr, "usage: ssd_serve_bench --dir DIR [--rows 2^k] [--pool_mib M] [--lookups L] [--bag B] "
                         "[--alpha A] [--seconds S] [--threads 1,2]\n");
    return 2;
  }
  return cemb::Main(flags);
}
