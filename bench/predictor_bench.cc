// The predictor's threading, measured: request-level parallelism (one
// inference context per core, one OpenMP thread each) against batch-level
// (one context whose scoring uses every core), at batch 1, 16 and 256, with
// 1 and 2 closed-loop client threads. Prints samples/s and the p50 / p99
// latency of a request for each; docs/serving.md's default comes from it.
//
// The model is the Kaggle-shaped DLRM (26 tables of the Kaggle
// cardinalities capped at --rows, dim 16, bottom 512-256-64-16, top
// 512-256-1, dot, fp32), trained for one step by the trainer into a
// temporary checkpoint (or --checkpoint DIR, written before: any model, e.g.
// the full Kaggle cardinalities that bench/run_serve.sh trains). A request
// larger than --max_batch (the predictor's, 256) is scored in pieces. Each
// client cycles through --pool requests of uniform random rows made before
// the clock starts (16 by default; the rows a pool touches, against the
// last-level cache, decide whether the lookups reach DRAM).
// Not Google Benchmark: its loop has no notion of concurrent clients whose
// request latencies are the result.
//
//   predictor_bench [--rows 100000] [--seconds 2] [--batches 1,16,256] [--clients 1,2]
//                   [--checkpoint DIR] [--max_batch 256] [--pool 16]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <latch>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/bench_checkpoint.h"
#include "bench/bench_util.h"
#include "serve/predictor.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Request {
  int64_t n = 0;
  std::vector<float> dense;
  std::vector<std::vector<int32_t>> indices, offsets;
  std::vector<cemb::Bags<int32_t>> bags;
};

Request MakeRequest(int64_t n, const std::vector<uint64_t>& rows, std::mt19937_64& rng) {
  Request r;
  r.n = n;
  std::uniform_real_distribution<float> x(0.f, 8.f);
  for (int64_t i = 0; i < n * 13; ++i) r.dense.push_back(x(rng));
  r.indices.resize(rows.size());
  r.offsets.resize(rows.size());
  for (size_t t = 0; t < rows.size(); ++t) {
    std::uniform_int_distribution<int64_t> row(0, static_cast<int64_t>(rows[t]) - 1);
    for (int64_t i = 0; i <= n; ++i) r.offsets[t].push_back(static_cast<int32_t>(i));
    for (int64_t i = 0; i < n; ++i) r.indices[t].push_back(static_cast<int32_t>(row(rng)));
  }
  for (size_t t = 0; t < rows.size(); ++t) r.bags.push_back({.offsets = r.offsets[t], .indices = r.indices[t]});
  return r;
}

std::vector<int64_t> ParseList(const std::string& s) {
  std::vector<int64_t> v;
  for (absl::string_view p : absl::StrSplit(s, ',')) {
    int64_t x = 0;
    if (!absl::SimpleAtoi(p, &x) || x <= 0) {
      std::fprintf(stderr, "bad list '%s'\n", s.c_str());
      std::exit(2);
    }
    v.push_back(x);
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  cemb::bench::RequireOptimizedBuild("predictor_bench");
  int64_t rows = 100000;
  double seconds = 2;
  std::vector<int64_t> batches = {1, 16, 256}, clients = {1, 2};
  int64_t max_batch = 256, pool_size = 16;
  std::string checkpoint;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--rows") rows = ParseList(value)[0];
    else if (flag == "--seconds") seconds = std::atof(value.c_str());
    else if (flag == "--batches") batches = ParseList(value);
    else if (flag == "--clients") clients = ParseList(value);
    else if (flag == "--checkpoint") checkpoint = value;
    else if (flag == "--max_batch") max_batch = ParseList(value)[0];
    else if (flag == "--pool") pool_size = ParseList(value)[0];
    else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  std::unique_ptr<cemb::bench::TempCheckpoint> temp;
  if (checkpoint.empty()) {
    absl::StatusOr<std::unique_ptr<cemb::bench::TempCheckpoint>> ck =
        cemb::bench::TempCheckpoint::Train({.rows = rows}, "predictor_bench");
    if (!ck.ok()) {
      std::fprintf(stderr, "%s\n", ck.status().ToString().c_str());
      return 1;
    }
    temp = *std::move(ck);
    checkpoint = temp->path();
  }
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  struct Mode {
    const char* name;
    int contexts, threads;
  };
  const Mode modes[] = {{"request-level", cores, 1}, {"batch-level", 1, cores}};
  std::printf("%-14s %5s %7s %12s %10s %10s\n", "mode", "batch", "clients", "samples/s", "p50 us", "p99 us");
  for (const Mode& mode : modes) {
    absl::StatusOr<std::unique_ptr<cemb::serve::Predictor>> p = cemb::serve::Predictor::Open(
        checkpoint, {.max_batch = max_batch, .contexts = mode.contexts, .threads_per_context = mode.threads});
    if (!p.ok()) {
      std::fprintf(stderr, "%s\n", p.status().ToString().c_str());
      return 1;
    }
    const std::vector<uint64_t>& table_rows = (*p)->manifest().table_rows;
    for (int64_t b : batches) {
      for (int64_t nc : clients) {
        std::atomic<bool> failed{false};
        std::vector<std::vector<double>> latencies(nc);
        std::vector<std::thread> threads;
        // One window for every client: the pools are built, then all warm up
        // for 200 ms and are timed over the same `seconds`; a request counts
        // when it ends inside the window. (Windows of each client's own would
        // overlap only partly when building a pool competes with the others'
        // scoring, and the sum of their counts would overstate the rate.)
        std::latch built(nc + 1);
        std::latch go(1);
        Clock::time_point warm_end, end;
        for (int64_t c = 0; c < nc; ++c) {
          threads.emplace_back([&, c] {
            std::mt19937_64 rng(1000 + c);
            std::vector<Request> pool;
            for (int64_t i = 0; i < pool_size; ++i) pool.push_back(MakeRequest(b, table_rows, rng));
            std::vector<float> out(b);
            built.arrive_and_wait();
            go.wait();
            for (size_t i = 0; Clock::now() < end; ++i) {
              const Request& r = pool[i % pool.size()];
              const Clock::time_point t0 = Clock::now();
              if (!(*p)->Predict({.size = r.n, .dense = r.dense, .bags = r.bags}, out).ok()) failed = true;
              const Clock::time_point t1 = Clock::now();
              if (t0 >= warm_end && t1 <= end) {
                latencies[c].push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
              }
            }
          });
        }
        built.arrive_and_wait();
        warm_end = Clock::now() + std::chrono::milliseconds(200);
        end = warm_end + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
        go.count_down();
        for (std::thread& t : threads) t.join();
        if (failed) {
          std::fprintf(stderr, "a Predict failed\n");
          return 1;
        }
        std::vector<double> all;
        for (const auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
        if (all.empty()) {
          std::fprintf(stderr, "no request of %lld samples ended within %g s: give it more --seconds\n",
                       static_cast<long long>(b), seconds);
          return 1;
        }
        std::sort(all.begin(), all.end());
        const double rate = static_cast<double>(all.size() * b) / seconds;
        std::printf("%-14s %5lld %7lld %12.0f %10.1f %10.1f\n", mode.name, static_cast<long long>(b),
                    static_cast<long long>(nc), rate, all[all.size() / 2], all[all.size() * 99 / 100]);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
