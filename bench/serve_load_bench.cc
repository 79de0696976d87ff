// serve_load_bench: open-loop load on the in-process predictor
// (serve/predictor.h). Requests arrive as a Poisson process at a set rate
// whatever the predictor's speed, and a request's latency runs from its
// SCHEDULED arrival to its answer, so queueing (in the predictor's context
// pool, or behind busy request threads) is measured, never hidden
// (no coordinated omission). Per offered rate it reports: offered and
// achieved requests/s, the share of the window's arrivals answered in it,
// samples/s, p50 / p99 / p99.9 latency, requests sent late and dropped, the
// process's share of the CPUs; with tables served from ssd the tier's hit
// rate (of every lookup), reads/s and per request, rows made from the seed
// on first use (0 when every row of the checkpoint was written), and the
// best possible hit rate (the share of lookups the hottest rows that fit
// the cache would serve).
//
// Requests: --samples S each; table t's row of a sample ~ Zipf(--alpha) over
// table t's rows in the checkpoint's SERVING manifest (ranks spread over the
// table by a per-table LFSR bijection: bench_util.h's FillZipf), uniform
// with --alpha 0; dense features uniform in [0, 8) (16 blocks, reused: no
// cache depends on them). Request i's rows are a function of (--seed, i);
// request numbers run on across measurements, so every request is new and
// no row is resident because an earlier request was replayed. A
// measurement's requests are made before its clock starts (4 bytes a row:
// the bytes per request are printed), so that making them (Zipf draws cost
// ~0.2 us a row) takes no CPU from the predictor.
//
// Arrivals: exponential gaps at the offered rate (a fixed seed per
// measurement): --warmup_seconds, then --seconds measured. --threads
// request threads (0: twice the predictor's contexts, so that a context
// that frees up finds the next request already waiting for it) take the
// arrivals in order, sleep until the arrival's time, send it and record
// (arrival, answer). Achieved = answers within the measured window / its
// length. A request of the window not answered --drain_seconds after the
// window is dropped: its latency counts as infinite in the percentiles.
// Late: sent more than 1 ms after its arrival (every request thread was
// busy, so the queue was here rather than in the predictor; its latency
// counts from its arrival all the same).
//
// --find_max: max QPS = the highest offered rate at which the predictor
// keeps up (answers within the window >= --min_achieved (0.99) x the
// window's arrivals: the offered load as it came, free of the Poisson
// count's own noise) and p99 <= --max_p99_ms (25): the rate doubles from
// --start_rate until one fails, then bisection until the two differ by
// --precision (5%); then one measurement at 70% of it. When the first rate
// fails, the rate halves until one passes (none below 1/64 of the first:
// e.g. a request alone takes longer than --max_p99_ms).
//
// Storage: the predictor's: a table that trained on ssd is served in place
// from its snapshot (--ssd_cache_bytes: PredictorOptions::ssd_cache_bytes,
// the DRAM for their rows); every other table is in DRAM. --dram_tables
// loads every table into DRAM (the all-in-DRAM reference of the same
// checkpoint). Open verifies the snapshots' checksums in the background:
// the bench waits for that before it measures (--verify_checksums 0: none).
//
//   serve_load_bench --checkpoint runs/kaggle/ck --samples 16 --alpha 0 --rates 2000,4000,8000
//   serve_load_bench --checkpoint runs/kaggle/ck --samples 1 --alpha 0 --find_max
//   memlimit 3G serve_load_bench --checkpoint runs/ssd/ck --samples 64 --alpha 1.05
//       --ssd_cache_bytes 2147483648 --prewarm_seconds 20 --find_max
//   serve_load_bench --rows 1000 --seconds 0.2 --rates 100,200   (a tiny Kaggle-shaped model trained here)
//   serve_load_bench --rows 4096 --ssd_tables --ssd_cache_bytes 262144 --max_batch 8 --samples 8 --rates 100
// Flags (--help says each): --checkpoint DIR (none: a tiny Kaggle-shaped
// model of --rows trained here; --ssd_tables: 4 tables on ssd), --samples, --alpha, --rates a,b,c,
// --find_max, --start_rate, --precision, --min_achieved, --max_p99_ms,
// --max_measurements, --seconds, --warmup_seconds, --drain_seconds,
// --prewarm_seconds, --threads, --contexts, --threads_per_context,
// --max_batch, --ssd_cache_bytes, --dram_tables, --verify_checksums, --seed.
// Exit status 1 when a request fails or the checkpoint does not open, 2 on a
// usage error.
#include <sys/prctl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/random.h"
#include "bench/bench_checkpoint.h"
#include "bench/bench_util.h"
#include "bench/rate_search.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/serving_manifest.h"
#include "serve/predictor.h"

namespace cemb {
namespace {

using Clock = std::chrono::steady_clock;
constexpr double kInf = std::numeric_limits<double>::infinity();

struct Flags {
  std::string checkpoint;
  int64_t rows = 100000;  // the tiny model's cap, without --checkpoint
  int64_t samples = 64;
  double alpha = 1.05;
  std::vector<double> rates;
  bool find_max = false;
  double start_rate = 100;
  double precision = 0.05;
  double min_achieved = 0.99;
  double max_p99_ms = 25;
  int max_measurements = 24;
  double seconds = 10;
  double warmup_seconds = 3;
  double drain_seconds = 1;
  double prewarm_seconds = 0;
  int threads = 0;
  int contexts = 0;
  int threads_per_context = 0;
  int64_t max_batch = 256;
  int64_t ssd_cache_bytes = 0;  // 0: the predictor's default
  bool dram_tables = false;
  bool ssd_tables = false;      // the tiny model's (without --checkpoint)
  bool verify_checksums = true;
  uint64_t seed = 1;
};

// The row streams of every table: Zipf(alpha) ranks and their scramblers,
// shared read-only by the request threads.
struct Streams {
  std::vector<uint64_t> rows;
  double alpha = 0;
  std::vector<ZipfSampler> zipf;
  std::vector<LfsrScrambler> scramble;
  Streams(const std::vector<uint64_t>& table_rows, double a) : rows(table_rows), alpha(a) {
    for (size_t t = 0; t < rows.size(); ++t) {
      zipf.emplace_back(rows[t], alpha > 0 ? alpha : 1.0);
      scramble.emplace_back(rows[t], 0x5eed + t);
    }
  }
};

// fn(0), ..., fn(n - 1), each on a thread of its own; returns when all have.
template <typename Fn>
void OnThreads(int n, Fn fn) {
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) threads.emplace_back(fn, i);
  for (std::thread& t : threads) t.join();
}

// The rows of request number `i` of the stream, out[t * samples + j] = table
// t's row of sample j: a function of (seed, i) alone.
void FillRows(const Streams& s, uint64_t seed, uint64_t i, int64_t samples, std::span<int32_t> out) {
  const uint64_t base = SplitMix64::Mix(seed, i);
  for (size_t t = 0; t < s.rows.size(); ++t) {
    const std::span<int32_t> ix = out.subspan(t * static_cast<size_t>(samples), static_cast<size_t>(samples));
    const uint64_t table_seed = SplitMix64::Mix(base, t + 1);
    if (s.alpha > 0) {
      bench::FillZipf(ix, s.zipf[t], s.scramble[t], table_seed);
    } else {
      bench::FillUniform(ix, static_cast<int64_t>(s.rows[t]), table_seed);
    }
  }
}

// A request thread's view of one request: its bags over rows made before.
class Batch {
 public:
  Batch(int64_t samples, size_t tables) : samples_(samples), offsets_(static_cast<size_t>(samples + 1)) {
    for (int64_t i = 0; i <= samples; ++i) offsets_[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    bags_.resize(tables, {.offsets = offsets_});
  }
  // rows: FillRows's layout; dense: [samples x num_dense].
  dlrm::BatchView View(std::span<const int32_t> rows, std::span<const float> dense) {
    for (size_t t = 0; t < bags_.size(); ++t) {
      bags_[t].indices = rows.subspan(t * static_cast<size_t>(samples_), static_cast<size_t>(samples_));
    }
    return {.size = samples_, .dense = dense, .bags = bags_};
  }

 private:
  int64_t samples_;
  std::vector<int32_t> offsets_;
  std::vector<Bags<int32_t>> bags_;
};

// The counters of the tables served in place from their ssd snapshots
// (serve::SnapshotTableInfo, SnapshotStats), summed.
struct SsdCounters {
  int tables = 0;
  int64_t capacity_rows = 0;  // rows the DRAM cache holds
  int64_t lookups = 0;        // every index of every request
  int64_t hits = 0;           // of them, resident
  int64_t reads = 0;          // read requests (a run of adjacent 4 KiB blocks each)
  int64_t rows_read = 0;
  int64_t lazy_rows = 0;      // rows not in the snapshot, made from the seed: 0 when every row was written
  SsdCounters operator-(const SsdCounters& o) const {
    return {tables,           capacity_rows,          lookups - o.lookups,    hits - o.hits,
            reads - o.reads,  rows_read - o.rows_read, lazy_rows - o.lazy_rows};
  }
  double hit_rate() const { return lookups > 0 ? static_cast<double>(hits) / static_cast<double>(lookups) : 0.0; }
};

// nullopt: no table is served from a snapshot. REQUIRES: no request in
// flight (the I/O counters are exact then).
std::optional<SsdCounters> ReadSsdCounters(const serve::Predictor& p) {
  const std::vector<serve::SnapshotTableInfo> tables = p.snapshot_tables();
  if (tables.empty()) return std::nullopt;
  SsdCounters c;
  for (const serve::SnapshotTableInfo& t : tables) {
    ++c.tables;
    c.capacity_rows += t.capacity_rows;
    c.lookups += t.stats.lookups;
    c.hits += t.stats.hits;
    c.reads += t.stats.reads;
    c.rows_read += t.stats.rows_read;
    c.lazy_rows += t.stats.lazy_rows;
  }
  return c;
}

// The share of lookups that the `slots` hottest rows of all tables would
// serve, each table looked up once per sample, row ranks ~ Zipf(alpha)
// (uniform when alpha is 0): the best hit rate of a cache of `slots` rows.
double BestHitRate(const std::vector<uint64_t>& rows, double alpha, int64_t slots) {
  const double tables = static_cast<double>(rows.size());
  auto partial = [&](uint64_t upto) {  // sum of k^-alpha, k = 1..upto, the small terms first
    double s = 0;
    for (uint64_t k = upto; k >= 1; --k) s += std::pow(static_cast<double>(k), -alpha);
    return s;
  };
  std::vector<double> total(rows.size());
  for (size_t t = 0; t < rows.size(); ++t) total[t] = partial(rows[t]);
  // The rows of table t whose share of all lookups is >= q: ranks k with
  // k^-alpha / (total_t * tables) >= q.
  auto count = [&](size_t t, double q) -> uint64_t {
    const double x = q * total[t] * tables;  // k^-alpha >= x
    if (x > 1.0) return 0;
    const double k = alpha == 0 ? kInf : std::floor(std::pow(x, -1.0 / alpha) + 1e-9);  // may be inf
    return k >= static_cast<double>(rows[t]) ? rows[t] : static_cast<uint64_t>(k);
  };
  auto count_all = [&](double q) {
    uint64_t c = 0;
    for (size_t t = 0; t < rows.size(); ++t) c += count(t, q);
    return c;
  };
  uint64_t all = 0;
  for (uint64_t r : rows) all += r;
  if (slots <= 0) return 0;
  if (static_cast<uint64_t>(slots) >= all) return 1;
  // Bisection on log q: the smallest q whose rows still fit.
  double lo = 1e-300, hi = 1.0;  // count_all(hi) == 0 <= slots < count_all(lo)
  for (int i = 0; i < 200; ++i) {
    const double mid = std::sqrt(lo * hi);
    (count_all(mid) <= static_cast<uint64_t>(slots) ? hi : lo) = mid;
  }
  double best = 0;
  uint64_t used = 0;
  for (size_t t = 0; t < rows.size(); ++t) {
    const uint64_t c = count(t, hi);
    used += c;
    best += partial(c) / total[t] / tables;
  }
  return best + static_cast<double>(static_cast<uint64_t>(slots) - used) * hi;  // the rows at the threshold
}

struct Result {
  double offered = 0, achieved = 0;
  int64_t arrivals = 0;            // scheduled in the measured window
  int64_t answered_in_window = 0;  // answers given within the window (of any request)
  int64_t answered = 0, late = 0, dropped = 0, failed = 0;
  double p50 = 0, p99 = 0, p999 = 0;  // ms; inf when dropped requests reach the percentile
  double cpu = 0;                     // the process's share of the CPUs
  double elapsed = 0;                 // seconds from the first arrival to the last answer
  std::optional<SsdCounters> ssd;     // over the whole measurement (warm-up included)
  int64_t sent = 0;                   // requests sent over the whole measurement
  // The answers in the window against the arrivals in it (not against the
  // nominal rate x seconds: a Poisson count strays by its square root, 1% at
  // 10,000 arrivals, which would fail a rate the predictor keeps up with).
  double kept_up() const { return arrivals == 0 ? 1.0 : static_cast<double>(answered_in_window) / arrivals; }
  bool pass(const Flags& f) const {
    return arrivals > 0 && failed == 0 && kept_up() >= f.min_achieved && p99 <= f.max_p99_ms;
  }
};

class LoadRunner {
 public:
  LoadRunner(const serve::Predictor& p, const Flags& f, const Streams& s)
      : p_(p), f_(f), streams_(s), threads_(f.threads > 0 ? f.threads : 2 * p.contexts()),
        request_rows_(s.rows.size() * static_cast<size_t>(f.samples)) {
    Xoshiro256pp rng(SplitMix64::Mix(f.seed, 0xde45e));
    dense_.resize(static_cast<size_t>(kDenseBlocks * f.samples * p.num_dense()));
    for (float& x : dense_) x = static_cast<float>(rng.Uniform() * 8.0);
  }
  int threads() const { return threads_; }
  size_t request_bytes() const { return request_rows_ * sizeof(int32_t); }

  // Closed loop for `seconds` on every request thread (each request's rows
  // made just before it is sent): fills the caches. Returns the failures.
  int64_t Prewarm(double seconds) {
    std::atomic<int64_t> failed{0};
    const Clock::time_point end = Clock::now() + Seconds(seconds);
    OnThreads(threads_, [&](int) {
      Batch batch(f_.samples, streams_.rows.size());
      std::vector<int32_t> rows(request_rows_);
      std::vector<float> out(static_cast<size_t>(f_.samples));
      while (Clock::now() < end) {
        const uint64_t i = next_request_.fetch_add(1);
        FillRows(streams_, f_.seed, i, f_.samples, rows);
        if (!p_.Predict(batch.View(rows, Dense(i)), out).ok()) ++failed;
      }
    });
    return failed.load();
  }

  Result Measure(double rate) {
    Result res;
    res.offered = rate;
    // The schedule: arrival times (ns after the start) of the warm-up and the window.
    const int64_t warm_ns = Ns(f_.warmup_seconds), window_ns = Ns(f_.seconds);
    const int64_t end_ns = warm_ns + window_ns, deadline_ns = end_ns + Ns(f_.drain_seconds);
    std::vector<int64_t> due;
    Xoshiro256pp rng(SplitMix64::Mix(f_.seed, 0xa771 + measurements_++));
    for (double t = 0;;) {
      t += -std::log(1.0 - rng.Uniform()) / rate * 1e9;
      if (t >= static_cast<double>(end_ns)) break;
      due.push_back(static_cast<int64_t>(t));
    }
    for (int64_t d : due) res.arrivals += d >= warm_ns;
    const uint64_t first_request = next_request_.fetch_add(due.size());
    // Every request's rows, made before the clock starts (by every thread),
    // so that making them takes no CPU from the predictor while it is timed.
    std::vector<int32_t> rows(due.size() * request_rows_);
    auto rows_of = [&](size_t k) { return std::span<int32_t>(rows).subspan(k * request_rows_, request_rows_); };
    OnThreads(threads_, [&](int w) {
      for (size_t k = static_cast<size_t>(w); k < due.size(); k += static_cast<size_t>(threads_)) {
        FillRows(streams_, f_.seed, first_request + k, f_.samples, rows_of(k));
      }
    });

    struct Sample {
      int64_t due, done;
    };
    std::vector<std::vector<Sample>> samples(static_cast<size_t>(threads_));
    std::vector<int64_t> late(static_cast<size_t>(threads_)), failed(static_cast<size_t>(threads_));
    std::atomic<size_t> next{0};
    const std::optional<SsdCounters> ssd_before = ReadSsdCounters(p_);
    const bench::CpuClock cpu0 = bench::CpuClock::Now();
    const Clock::time_point start = Clock::now() + std::chrono::milliseconds(20);  // every thread started
    OnThreads(threads_, [&](int w) {
      ::prctl(PR_SET_TIMERSLACK, 1000UL);  // wake within ~1 us of an arrival, not the default 50 us
      Batch batch(f_.samples, streams_.rows.size());
      std::vector<float> out(static_cast<size_t>(f_.samples));
      std::vector<Sample>& mine = samples[static_cast<size_t>(w)];
      mine.reserve(due.size() / static_cast<size_t>(threads_) + 16);
      for (size_t k; (k = next.fetch_add(1)) < due.size();) {
        if (Clock::now() - start > std::chrono::nanoseconds(deadline_ns)) break;  // the rest are dropped
        const Clock::time_point arrival = start + std::chrono::nanoseconds(due[k]);
        std::this_thread::sleep_until(arrival);
        if (Clock::now() - arrival > std::chrono::milliseconds(1)) ++late[static_cast<size_t>(w)];
        if (!p_.Predict(batch.View(rows_of(k), Dense(first_request + k)), out).ok()) {
          ++failed[static_cast<size_t>(w)];
        }
        mine.push_back({due[k], std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count()});
      }
    });
    res.cpu = bench::CpuClock::Now().Share(cpu0, static_cast<int>(std::thread::hardware_concurrency()));
    if (ssd_before) res.ssd = *ReadSsdCounters(p_) - *ssd_before;

    std::vector<double> latency_ms;
    int64_t last_done = 0;
    for (int w = 0; w < threads_; ++w) {
      res.late += late[static_cast<size_t>(w)];
      res.failed += failed[static_cast<size_t>(w)];
      for (const Sample& s : samples[static_cast<size_t>(w)]) {
        ++res.sent;
        last_done = std::max(last_done, s.done);
        res.answered_in_window += s.done >= warm_ns && s.done <= end_ns;
        if (s.due >= warm_ns && s.done <= deadline_ns) latency_ms.push_back(static_cast<double>(s.done - s.due) * 1e-6);
      }
    }
    res.achieved = static_cast<double>(res.answered_in_window) / f_.seconds;
    res.answered = static_cast<int64_t>(latency_ms.size());
    res.dropped = res.arrivals - res.answered;
    res.elapsed = static_cast<double>(last_done) * 1e-9;
    std::sort(latency_ms.begin(), latency_ms.end());
    auto percentile = [&](double q) {  // the dropped requests are the slowest
      if (res.arrivals == 0) return 0.0;
      const auto i = static_cast<size_t>(std::ceil(q * static_cast<double>(res.arrivals))) - 1;
      return i < latency_ms.size() ? latency_ms[i] : kInf;
    };
    res.p50 = percentile(0.5);
    res.p99 = percentile(0.99);
    res.p999 = percentile(0.999);
    return res;
  }

 private:
  static constexpr int64_t kDenseBlocks = 16;  // the dense features matter to no cache: a few blocks, reused
  static int64_t Ns(double seconds) { return static_cast<int64_t>(seconds * 1e9); }
  static Clock::duration Seconds(double s) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  }
  std::span<const float> Dense(uint64_t i) const {
    const size_t n = static_cast<size_t>(f_.samples * p_.num_dense());
    return std::span<const float>(dense_).subspan((i % kDenseBlocks) * n, n);
  }

  const serve::Predictor& p_;
  const Flags& f_;
  const Streams& streams_;
  int threads_;
  size_t request_rows_;
  std::vector<float> dense_;
  std::atomic<uint64_t> next_request_{0};
  int measurements_ = 0;
};

void PrintHeader(bool ssd) {
  std::printf("%10s %10s %7s %11s %9s %9s %9s %6s %7s %5s", "offered/s", "achieved/s", "kept up", "samples/s",
              "p50 ms", "p99 ms", "p99.9 ms", "late", "dropped", "cpu");
  if (ssd) std::printf(" %8s %10s %9s %9s", "hit rate", "reads/s", "reads/req", "lazy rows");
  std::printf("  %s\n", "pass");
}

void Print(const Result& r, const Flags& f, const char* note = "") {
  auto ms = [](double x) { return std::isinf(x) ? std::string("inf") : absl::StrCat(std::round(x * 1000) / 1000); };
  std::printf("%10.1f %10.1f %7.4f %11.0f %9s %9s %9s %6lld %7lld %5.2f", r.offered, r.achieved, r.kept_up(),
              r.achieved * static_cast<double>(f.samples), ms(r.p50).c_str(), ms(r.p99).c_str(), ms(r.p999).c_str(),
              static_cast<long long>(r.late), static_cast<long long>(r.dropped), r.cpu);
  if (r.ssd) {
    const SsdCounters& s = *r.ssd;
    std::printf(" %8.4f %10.0f %9.1f %9lld", s.hit_rate(),
                r.elapsed > 0 ? static_cast<double>(s.reads) / r.elapsed : 0.0,
                r.sent > 0 ? static_cast<double>(s.reads) / static_cast<double>(r.sent) : 0.0,
                static_cast<long long>(s.lazy_rows));
  }
  std::printf("  %s%s\n", r.pass(f) ? "yes" : "no", note);
  std::fflush(stdout);
}

int Main(const Flags& f) {
  std::unique_ptr<bench::TempCheckpoint> temp;
  std::string checkpoint = f.checkpoint;
  if (checkpoint.empty()) {
    absl::StatusOr<std::unique_ptr<bench::TempCheckpoint>> ck =
        bench::TempCheckpoint::Train({.rows = f.rows, .ssd_tables = f.ssd_tables}, "serve_load_bench");
    if (!ck.ok()) return std::fprintf(stderr, "serve_load_bench: %s\n", ck.status().ToString().c_str()), 1;
    temp = *std::move(ck);
    checkpoint = temp->path();
  }
  serve::PredictorOptions o{.max_batch = f.max_batch,
                            .contexts = f.contexts,
                            .threads_per_context = f.threads_per_context,
                            .serve_in_place = !f.dram_tables,
                            .verify_checksums = f.verify_checksums};
  if (f.ssd_cache_bytes > 0) o.ssd_cache_bytes = f.ssd_cache_bytes;
  const Clock::time_point t0 = Clock::now();
  absl::StatusOr<std::unique_ptr<serve::Predictor>> opened = serve::Predictor::Open(checkpoint, o);
  if (!opened.ok()) return std::fprintf(stderr, "serve_load_bench: %s\n", opened.status().ToString().c_str()), 1;
  const serve::Predictor& p = **opened;
  const double open_s = std::chrono::duration<double>(Clock::now() - t0).count();
  // The snapshots' checksums are verified in the background: not while measuring.
  if (!p.WaitVerified().ok()) {
    return std::fprintf(stderr, "serve_load_bench: %s\n", p.verification().ToString().c_str()), 1;
  }
  const double verified_s = std::chrono::duration<double>(Clock::now() - t0).count();
  const std::optional<SsdCounters> ssd = ReadSsdCounters(p);
  const std::vector<uint64_t>& rows = p.manifest().table_rows;
  uint64_t all_rows = 0;
  for (uint64_t r : rows) all_rows += r;

  Streams streams(rows, f.alpha);
  LoadRunner runner(p, f, streams);
  std::printf("serve_load_bench: %s (opened in %.2f s, verified in %.2f s), %zu tables, %llu rows, dim %lld, %s MLPs; requests of %lld "
              "samples, rows %s, dense uniform [0, 8); %d contexts x %d threads, max_batch %lld, %d request threads; "
              "%s; %.1f s warm-up + %.1f s per rate, drain %.1f s, %zu bytes of rows per request made before; "
              "seed %llu\n",
              p.checkpoint().c_str(), open_s, verified_s, rows.size(), static_cast<unsigned long long>(all_rows),
              static_cast<long long>(p.manifest().dim), dlrm::PrecisionName(p.precision()),
              static_cast<long long>(f.samples), f.alpha > 0 ? absl::StrCat("Zipf(", f.alpha, ")").c_str() : "uniform",
              p.contexts(), p.threads_per_context(), static_cast<long long>(f.max_batch), runner.threads(),
              ssd ? absl::StrCat(ssd->tables, " tables served in place from their snapshots, ssd_cache_bytes ",
                                 o.ssd_cache_bytes, " (", ssd->capacity_rows, " rows)")
                        .c_str()
                  : f.dram_tables ? "every table loaded into DRAM"
                                  : "every table in DRAM (none trained on ssd)",
              f.warmup_seconds, f.seconds, f.drain_seconds, runner.request_bytes(),
              static_cast<unsigned long long>(f.seed));
  if (!p.warning().empty()) std::printf("warning: %s\n", p.warning().c_str());
  if (ssd) {
    std::printf("ssd: best possible hit rate (the %lld hottest rows, as many as the cache holds, serving every "
                "lookup): %.4f\n",
                static_cast<long long>(ssd->capacity_rows), BestHitRate(rows, f.alpha, ssd->capacity_rows));
  }
  if (f.prewarm_seconds > 0) {
    const std::optional<SsdCounters> before = ReadSsdCounters(p);
    const Clock::time_point w0 = Clock::now();
    if (runner.Prewarm(f.prewarm_seconds) > 0) return std::fprintf(stderr, "serve_load_bench: a request failed\n"), 1;
    std::printf("prewarm: %.1f s closed loop on %d threads", std::chrono::duration<double>(Clock::now() - w0).count(),
                runner.threads());
    if (before) {
      const SsdCounters d = *ReadSsdCounters(p) - *before;
      std::printf(", hit rate %.4f, %lld reads", d.hit_rate(), static_cast<long long>(d.reads));
    }
    std::printf("\n");
  }

  PrintHeader(ssd.has_value());
  int failed = 0;
  auto measure = [&](double rate, const char* note = "") {
    Result r = runner.Measure(rate);
    Print(r, f, note);
    failed += r.failed > 0;
    return r;
  };
  for (double rate : f.rates) measure(rate);
  if (f.find_max && failed == 0) {
    const bench::RateSearchResult r = bench::FindMaxRate(
        {.start_rate = f.start_rate, .precision = f.precision, .max_measurements = f.max_measurements},
        [&](double rate) -> std::optional<bool> {
          const Result m = measure(rate);
          if (m.failed > 0) return std::nullopt;
          return m.pass(f);
        });
    bench::PrintMaxRate(r, f.samples,
                        absl::StrFormat("answers >= %.2f x arrivals and p99 <= %.1f ms", f.min_achieved, f.max_p99_ms));
    if (r.max_rate > 0 && !r.stopped) measure(0.7 * r.max_rate, "  (70% of max QPS)");
  }
  if (failed > 0) return std::fprintf(stderr, "serve_load_bench: requests failed\n"), 1;
  return 0;
}

}  // namespace
}  // namespace cemb

int main(int argc, char** argv) {
  cemb::bench::RequireOptimizedBuild("serve_load_bench");
  cemb::Flags f;
  CLI::App app{"serve_load_bench: open-loop Poisson load on the in-process predictor (bench/serve_load_bench.cc)"};
  app.add_option("--checkpoint", f.checkpoint,
                 "checkpoint dir, its LATEST or a step-N; none: a tiny model trained here");
  app.add_option("--rows", f.rows,
                 "without --checkpoint: the tiny model's tables, Kaggle cardinalities capped at this");
  app.add_option("--samples", f.samples, "samples per request")->check(CLI::PositiveNumber);
  app.add_option("--alpha", f.alpha, "Zipf exponent of each table's rows; 0: uniform")->check(CLI::NonNegativeNumber);
  app.add_option("--rates", f.rates, "offered requests/s, each measured in turn: a,b,c")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  app.add_flag("--find_max", f.find_max, "search for the max QPS (doubling, then bisection)");
  app.add_option("--start_rate", f.start_rate, "--find_max's first rate")->check(CLI::PositiveNumber);
  app.add_option("--precision", f.precision,
                 "--find_max stops when the failing rate is within this of the passing one");
  app.add_option("--min_achieved", f.min_achieved,
                 "a rate passes when answers in the window >= this x its arrivals ...");
  app.add_option("--max_p99_ms", f.max_p99_ms, "... and p99 <= this");
  app.add_option("--max_measurements", f.max_measurements, "--find_max's measurements at most");
  app.add_option("--seconds", f.seconds, "measured seconds per rate")->check(CLI::PositiveNumber);
  app.add_option("--warmup_seconds", f.warmup_seconds, "seconds of the same load before each measured window");
  app.add_option("--drain_seconds", f.drain_seconds, "a request unanswered this long after the window is dropped");
  app.add_option("--prewarm_seconds", f.prewarm_seconds, "closed-loop load before the first rate (fills caches)");
  app.add_option("--threads", f.threads, "request threads; 0: 2 x the predictor's contexts");
  app.add_option("--contexts", f.contexts, "PredictorOptions::contexts (0: the predictor's default)");
  app.add_option("--threads_per_context", f.threads_per_context, "PredictorOptions::threads_per_context");
  app.add_option("--max_batch", f.max_batch, "PredictorOptions::max_batch (a larger request is scored in pieces)");
  app.add_option("--ssd_cache_bytes", f.ssd_cache_bytes,
                 "PredictorOptions::ssd_cache_bytes: DRAM for the rows of the tables served in place (0: default)");
  app.add_flag("--dram_tables", f.dram_tables, "load every table into DRAM, those that trained on ssd too");
  app.add_flag("--ssd_tables", f.ssd_tables, "without --checkpoint: the tiny model's 4 tables trained on ssd");
  app.add_option("--verify_checksums", f.verify_checksums, "verify the checkpoint's files when opening it (1/0)");
  app.add_option("--seed", f.seed, "the arrivals' and the requests' seed");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (f.rates.empty() && !f.find_max) {
    std::fprintf(stderr, "serve_load_bench: give --rates a,b,... or --find_max (--help)\n");
    return 2;
  }
  return cemb::Main(f);
}
