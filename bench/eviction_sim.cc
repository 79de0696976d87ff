// Which eviction should a serving cache use? A trace-driven
// simulator of the policies in bench/eviction_policies.h on Zipf row-lookup
// streams: hit rate against the ideal cache, and the copies into the cache per
// lookup (each one a slow-tier read and a DRAM write).
//
// Streams over --rows rows (Zipf ranks scattered by a random permutation), each
// --warmup lookups not counted then --lookups counted: Zipf 0.9, 1.0, 1.2, and
// "shifting": Zipf 1.0 whose permutation is re-drawn for 10% of the ranks
// every 2 M lookups (the hot set moves). Cache sizes 1%, 5%, 10% and 20% of the
// rows, rounded down to whole 512-row pages, the same capacity for every policy.
//
//   ideal       the hottest rows that fit, by the true Zipf probability,
//               preloaded; for "shifting" an oracle per phase: it holds the
//               hottest rows of the current permutation and loads the rows
//               that became hot at each re-draw (its copies).
//   page_fifo   CachedTable's dynamic policy: 512-row pages; the cache grows
//               to lower + slack, then a flush drops the oldest pages down to
//               lower. The library's default is lower + 5% of the table (a 10%
//               cache grows to 15%); here lower + slack = the capacity compared,
//               slack = 5% of the table capped at a third of the capacity (the
//               default's ratio, 5 of 15): at 1%, 5% and 10% the slack is a
//               third, at 20% it is 5% of the table. The flush runs at once when
//               full (a serving cache cannot wait for a step boundary).
//   page_fifo_k2  the same with CachedTable's admission (admit_after = 2,
//               sketch nrows/4 counters, aged at every flush).
//   clock       CLOCK (second chance), a new row's bit clear.
//   clock_k2    CLOCK copying a row only on its 2nd miss: AdmissionFilter(2,
//               nrows/4 counters), aged (halved) every --k2_age x capacity
//               misses, so a first sighting is remembered for about one
//               cache-full of misses, about as long as S3-FIFO's ghost.
//   s3fifo      S3-FIFO (small 10%, main 90%, ghost = main, 2-bit frequency).
//   lru         exact LRU, for reference.
//
// Output: one Markdown table per stream, "hit% / copies%" per cell (copies%:
// lookups that copied a row in); --csv prints one CSV line per cell instead.
// Flags: --rows=N --lookups=M --warmup=W --seed=S --k2_age=F --csv
// Run it (about a minute at the defaults, single-threaded):
//   ./build/bench/eviction_sim > sim.md
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "bench/eviction_policies.h"

namespace cemb::sim {
namespace {

struct Flags {
  int64_t rows = 2'000'000;
  int64_t lookups = 20'000'000;
  int64_t warmup = 5'000'000;
  uint64_t seed = 11;
  double k2_age = 1.0;
  bool csv = false;
};

bool ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* key) -> const char* {
      return a.rfind(key, 0) == 0 ? argv[i] + std::strlen(key) : nullptr;
    };
    if (a == "--csv") f->csv = true;
    else if (const char* v = value("--rows=")) f->rows = std::atoll(v);
    else if (const char* v = value("--lookups=")) f->lookups = std::atoll(v);
    else if (const char* v = value("--warmup=")) f->warmup = std::atoll(v);
    else if (const char* v = value("--seed=")) f->seed = std::strtoull(v, nullptr, 10);
    else if (const char* v = value("--k2_age=")) f->k2_age = std::atof(v);
    else return false;
  }
  // 1% of the rows must hold a page; row ids are uint32_t.
  return f->rows >= 100 * 512 && f->rows < (int64_t{1} << 32) - 1 && f->lookups > 0 && f->warmup >= 0 &&
         f->k2_age > 0;
}

struct StreamSpec {
  const char* name;
  double alpha;
  bool shifting;
};

constexpr StreamSpec kStreams[] = {
    {"zipf 0.9", 0.9, false}, {"zipf 1.0", 1.0, false}, {"zipf 1.2", 1.2, false}, {"shifting zipf 1.0", 1.0, true}};
constexpr double kSizes[] = {0.01, 0.05, 0.10, 0.20};
constexpr int64_t kRowsPerPage = 512;
enum class Policy { kIdeal, kPageFifo, kPageFifoK2, kClock, kClockK2, kS3Fifo, kLru };
constexpr Policy kPolicies[] = {Policy::kIdeal,  Policy::kPageFifo, Policy::kPageFifoK2, Policy::kClock,
                                Policy::kClockK2, Policy::kS3Fifo,   Policy::kLru};
constexpr const char* kPolicyNames[] = {"ideal", "page_fifo", "page_fifo_k2", "clock", "clock_k2", "s3fifo", "lru"};
const char* Name(Policy p) { return kPolicyNames[static_cast<int>(p)]; }

// One policy at one capacity on one stream.
Result Simulate(Policy policy, const Flags& f, const Stream& s, int64_t capacity, size_t size_index) {
  const int64_t counters = std::clamp<int64_t>(f.rows / 4, 4096, int64_t{4} << 20);  // CachedTable's default
  const int64_t max_pages = capacity / kRowsPerPage;
  const int64_t slack_pages = std::max<int64_t>(1, std::min((f.rows / 20) / kRowsPerPage, max_pages / 3));
  switch (policy) {
    case Policy::kIdeal:
      return {f.lookups, s.ideal_hits[size_index], s.ideal_copies[size_index]};
    case Policy::kPageFifo:
    case Policy::kPageFifoK2: {
      const int admit_after = policy == Policy::kPageFifoK2 ? 2 : 0;
      PageFifo p(f.rows, kRowsPerPage, max_pages, max_pages - slack_pages, admit_after, counters);
      return Replay(p, s.rows, f.warmup);
    }
    case Policy::kClock: {
      Clock p(f.rows, capacity);
      return Replay(p, s.rows, f.warmup);
    }
    case Policy::kClockK2: {
      const int64_t age_every = std::max<int64_t>(1, static_cast<int64_t>(f.k2_age * static_cast<double>(capacity)));
      ClockAdmit p(f.rows, capacity, 2, counters, age_every);
      return Replay(p, s.rows, f.warmup);
    }
    case Policy::kS3Fifo: {
      S3Fifo p(f.rows, capacity);
      return Replay(p, s.rows, f.warmup);
    }
    case Policy::kLru: {
      Lru p(f.rows, capacity);
      return Replay(p, s.rows, f.warmup);
    }
  }
  return {};
}

double Percent(int64_t part, int64_t whole) { return whole > 0 ? 100.0 * static_cast<double>(part) / whole : 0.0; }

int Main(int argc, char** argv) {
  Flags f;
  if (!ParseFlags(argc, argv, &f)) {
    std::fprintf(stderr,
                 "usage: %s [--rows=N (>= 51200)] [--lookups=M] [--warmup=W] [--seed=S] [--k2_age=F] [--csv]\n",
                 argv[0]);
    return 1;
  }
  std::vector<int64_t> capacities;
  for (double size : kSizes) {
    capacities.push_back(static_cast<int64_t>(size * static_cast<double>(f.rows)) / kRowsPerPage * kRowsPerPage);
  }
  if (f.csv) {
    std::printf("stream,policy,cache_fraction,capacity_rows,lookups,hits,hit_rate,copies,copies_per_lookup\n");
  } else {
    std::printf("rows %lld, warm-up %lld lookups then %lld counted, seed %llu, clock_k2 aged every %g x capacity misses\n",
                static_cast<long long>(f.rows), static_cast<long long>(f.warmup), static_cast<long long>(f.lookups),
                static_cast<unsigned long long>(f.seed), f.k2_age);
  }
  for (const StreamSpec& spec : kStreams) {
    const auto start = std::chrono::steady_clock::now();
    const Stream s = MakeStream({.nrows = f.rows,
                                 .lookups = f.warmup + f.lookups,
                                 .warmup = f.warmup,
                                 .alpha = spec.alpha,
                                 .shift_every = spec.shifting ? 2'000'000 : 0,
                                 .shift_fraction = spec.shifting ? 0.1 : 0.0,
                                 .seed = SplitMix64::Mix(f.seed, static_cast<uint64_t>(&spec - kStreams))},
                                capacities);
    std::vector<std::string> lines;
    for (Policy p : kPolicies) {
      std::string line = std::string("| ") + Name(p) + " |";
      for (size_t j = 0; j < capacities.size(); ++j) {
        const Result r = Simulate(p, f, s, capacities[j], j);
        char cell[256];
        if (f.csv) {
          std::printf("%s,%s,%.2f,%lld,%lld,%lld,%.5f,%lld,%.5f\n", spec.name, Name(p), kSizes[j],
                      static_cast<long long>(capacities[j]), static_cast<long long>(r.lookups),
                      static_cast<long long>(r.hits), Percent(r.hits, r.lookups) / 100,
                      static_cast<long long>(r.copies), Percent(r.copies, r.lookups) / 100);
        }
        std::snprintf(cell, sizeof(cell), " %.1f / %.2f |", Percent(r.hits, r.lookups), Percent(r.copies, r.lookups));
        line += cell;
      }
      lines.push_back(line);
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (f.csv) continue;
    std::printf("\n### %s (hit %% / copies %% of lookups; %.0f s)\n\n| policy |", spec.name, seconds);
    for (double size : kSizes) std::printf(" %g%% |", 100 * size);
    std::printf("\n|---|");
    for (size_t j = 0; j < capacities.size(); ++j) std::printf("---|");
    std::printf("\n");
    for (const std::string& line : lines) std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace cemb::sim

int main(int argc, char** argv) {
  cemb::bench::RequireOptimizedBuild(argv[0]);
  return cemb::sim::Main(argc, argv);
}
