// What every benchmark under bench/ needs:
//
//   RequireOptimizedBuild()   refuses to run a build without NDEBUG (a debug
//                             build's numbers mean nothing): prints why, exits 1.
//   AddMachineContext()       the CPU model, the kernel ISA chosen, threads,
//                             the transparent-huge-page setting, into the
//                             benchmark's context (the JSON "context" object).
//   MeasureGatherLimit()      the machine's own limit for a set of tables: a
//                             plain loop that reads whole random rows, with
//                             the same threads; the denominator of vs_gather.
//   FillUniform(), FillZipf() index streams: uniform over [0, n), or Zipf(alpha)
//                             ranks scrambled by a per-table LFSR bijection
//                             (thesis 5.4.1.1), so each table has its own hot rows.
//   ReadCacheBytes()          the last-level cache size (sizing index pools).
//   MeasureSequentialReadBytesPerSecond(), MeasureLatencyNs()
//                             the DRAM's sequential read bandwidth and load latency,
//                             for the context: what any gather is bound by.
//
// Thread safety: MeasureGatherLimit() runs its own OpenMP region; the rest is
// plain functions of their arguments.
#ifndef CEMB_BENCH_BENCH_UTIL_H_
#define CEMB_BENCH_BENCH_UTIL_H_

#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "base/random.h"
#include "base/timer.h"
#include "embedding/cpu.h"
#include "embedding/memory.h"
#include "base/parallel.h"

namespace cemb::bench {

inline void RequireOptimizedBuild(const char* program) {
#ifndef NDEBUG
  std::fprintf(stderr,
               "%s: refusing to run: this is a debug build (NDEBUG is not defined), whose timings mean nothing.\n"
               "Configure with -DCMAKE_BUILD_TYPE=Release and rebuild.\n",
               program);
  std::exit(1);
#else
  (void)program;
#endif
}

// The first line of `path` that starts with `key`, after the ':' (or the
// whole first line when key is empty); "" when absent.
inline std::string ReadFileField(const char* path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (key.empty()) return line;
    if (line.rfind(key, 0) == 0) {
      const size_t colon = line.find(':');
      if (colon == std::string::npos) return "";
      const size_t start = line.find_first_not_of(" \t", colon + 1);
      return start == std::string::npos ? "" : line.substr(start);
    }
  }
  return "";
}

// The largest data/unified cache's size in bytes (the L3 here), from sysfs;
// 32 MiB when unknown.
inline int64_t ReadCacheBytes() {
  int64_t best = 0;
  for (int i = 0; i < 8; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    const std::string type = ReadFileField((dir + "type").c_str(), "");
    if (type.empty()) break;
    if (type == "Instruction") continue;
    const std::string size = ReadFileField((dir + "size").c_str(), "");
    int64_t bytes = std::atoll(size.c_str());
    if (!size.empty() && size.back() == 'K') bytes <<= 10;
    if (!size.empty() && size.back() == 'M') bytes <<= 20;
    best = std::max(best, bytes);
  }
  return best > 0 ? best : int64_t{32} << 20;
}

// "always [madvise] never" -> "madvise".
inline std::string HugePageSetting() {
  const std::string line = ReadFileField("/sys/kernel/mm/transparent_hugepage/enabled", "");
  const size_t open = line.find('['), close = line.find(']');
  if (open == std::string::npos || close == std::string::npos) return line.empty() ? "unknown" : line;
  return line.substr(open + 1, close - open - 1);
}

inline void AddMachineContext() {
  benchmark::AddCustomContext("cpu_model", ReadFileField("/proc/cpuinfo", "model name"));
  benchmark::AddCustomContext("online_cpus", std::to_string(omp_get_num_procs()));
  benchmark::AddCustomContext("omp_max_threads", std::to_string(omp_get_max_threads()));
  absl::StatusOr<Isa> isa = ResolveIsa(Isa::kAuto);
  benchmark::AddCustomContext("kernel_isa", isa.ok() ? IsaName(*isa) : std::string(isa.status().message()));
  benchmark::AddCustomContext("thp_enabled", HugePageSetting());
  benchmark::AddCustomContext("last_level_cache_bytes", std::to_string(ReadCacheBytes()));
  benchmark::AddCustomContext("mem_total", ReadFileField("/proc/meminfo", "MemTotal"));
}

// Process CPU time against wall time: how much of `threads` CPUs a timed
// loop actually had (other processes on a shared machine lower it).
struct CpuClock {
  double cpu = 0.0, wall = 0.0;
  static CpuClock Now() {
    return {ProcessCpuSeconds(),
            std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count()};
  }
  double Share(const CpuClock& start, int threads) const {
    const double wall_s = wall - start.wall;
    return wall_s > 0 ? (cpu - start.cpu) / (wall_s * threads) : 0.0;
  }
};

// --- the machine's limit -------------------------------------------------

// One table's rows for the limit gather: nrows rows of row_bytes at base.
struct GatherTarget {
  const std::byte* base = nullptr;
  int64_t nrows = 0;
  int64_t row_bytes = 0;
};

// A plain random-row gather: each of `threads` threads reads whole rows
// (one 8-byte load per 64-byte line, so that the loop is bound by memory,
// not by arithmetic) of uniformly random rows of the targets, round robin
// over the tables, with no software prefetch (prefetch_distance 0) or with
// a prefetch of the row `prefetch_distance` ahead. It runs for at least
// `seconds`, over far more distinct rows than the last-level cache holds,
// and returns the bytes of rows read per second.
inline double MeasureGatherBytesPerSecond(std::span<const GatherTarget> targets, int threads, int prefetch_distance,
                                          double seconds = 0.3) {
  if (targets.empty() || threads <= 0) return 0.0;
  constexpr int64_t kIndices = int64_t{1} << 20;  // per thread; re-used passes touch ~kIndices*threads rows
  const int ntargets = static_cast<int>(targets.size());
  std::vector<std::vector<uint32_t>> rows(threads);
  for (int t = 0; t < threads; ++t) {
    Xoshiro256pp rng(SplitMix64::Mix(0x6a7e, static_cast<uint64_t>(t)));
    rows[t].resize(kIndices);
    for (int64_t i = 0; i < kIndices; ++i) rows[t][i] = static_cast<uint32_t>(rng.Below(targets[i % ntargets].nrows));
  }
  auto pass = [&](int t) -> uint64_t {
    uint64_t sum = 0;
    const uint32_t* r = rows[t].data();
    int table = 0;                                           // i % ntargets
    int ahead = prefetch_distance % ntargets;                // (i + prefetch_distance) % ntargets
    for (int64_t i = 0; i < kIndices; ++i) {
      if (prefetch_distance > 0 && i + prefetch_distance < kIndices) {
        const GatherTarget& f = targets[ahead];
        const std::byte* p = f.base + static_cast<int64_t>(r[i + prefetch_distance]) * f.row_bytes;
        for (int64_t off = 0; off < f.row_bytes; off += 64) __builtin_prefetch(p + off, 0, 3);
      }
      const GatherTarget& g = targets[table];
      const std::byte* p = g.base + static_cast<int64_t>(r[i]) * g.row_bytes;
      for (int64_t off = 0; off < g.row_bytes; off += 64) sum += *reinterpret_cast<const uint64_t*>(p + off);
      if (++table == ntargets) table = 0;
      if (++ahead == ntargets) ahead = 0;
    }
    return sum;
  };
  int64_t row_bytes_per_pass = 0;
  for (int64_t i = 0; i < kIndices; ++i) row_bytes_per_pass += targets[i % ntargets].row_bytes;
  uint64_t sink = 0;
  auto run = [&](int passes) {
    const auto start = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    {
      const int t = omp_get_thread_num();
      for (int p = 0; p < passes; ++p) sink += pass(t);
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  run(1);  // warms the pages and the index arrays
  const double one = run(1);
  const int passes = std::max(1, static_cast<int>(seconds / std::max(one, 1e-6)));
  const double elapsed = run(passes);
  benchmark::DoNotOptimize(sink);
  return static_cast<double>(row_bytes_per_pass) * threads * passes / elapsed;
}

// Sequential read bandwidth of `threads` threads over a `bytes` DRAM buffer
// (best of three passes): what a gather of random rows can at most approach.
inline double MeasureSequentialReadBytesPerSecond(int threads, size_t bytes = size_t{1} << 30) {
  const size_t words = bytes / sizeof(uint64_t);
  std::vector<uint64_t> buffer(words, 1);  // touched, so the passes read DRAM, not the zero page
  double best = 0.0;
  uint64_t sink = 0;
  for (int pass = 0; pass < 3; ++pass) {
    const auto start = std::chrono::steady_clock::now();
#pragma omp parallel for num_threads(threads) schedule(static) reduction(+ : sink)
    for (size_t i = 0; i < words; i += 8) sink += buffer[i] ^ buffer[i + 3] ^ buffer[i + 7];  // one load per line
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, static_cast<double>(bytes) / s);
  }
  benchmark::DoNotOptimize(sink);
  return best;
}

// DRAM load-to-use latency: a pointer chase through one random cyclic
// permutation of the 64-byte lines of a `bytes` buffer (huge pages advised),
// far larger than the last-level cache. Nanoseconds per dependent load.
inline double MeasureLatencyNs(size_t bytes = size_t{512} << 20) {
  absl::StatusOr<Region> region = Region::Allocate(TierOptions::Dram(true), bytes);
  if (!region.ok()) return 0.0;
  const size_t lines = bytes / 64;
  std::vector<uint32_t> order(lines);
  for (size_t i = 0; i < lines; ++i) order[i] = static_cast<uint32_t>(i);
  Xoshiro256pp rng(0x1a7e);
  for (size_t i = lines - 1; i > 0; --i) std::swap(order[i], order[rng.Below(i + 1)]);  // Fisher-Yates
  std::byte* base = region->data();
  for (size_t i = 0; i < lines; ++i) {
    *reinterpret_cast<uint64_t*>(base + size_t{order[i]} * 64) = uint64_t{order[(i + 1) % lines]} * 64;
  }
  constexpr int64_t kSteps = int64_t{1} << 21;
  uint64_t at = uint64_t{order[0]} * 64;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < kSteps; ++i) at = *reinterpret_cast<const volatile uint64_t*>(base + at);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  benchmark::DoNotOptimize(at);
  return s / kSteps * 1e9;
}

// The limit: the better of the plain gather and the one with prefetching.
struct GatherLimit {
  double plain = 0.0;       // bytes/s without software prefetch
  double prefetched = 0.0;  // bytes/s with a prefetch 16 rows ahead
  double best() const { return std::max(plain, prefetched); }
};

inline GatherLimit MeasureGatherLimit(std::span<const GatherTarget> targets, int threads) {
  return {MeasureGatherBytesPerSecond(targets, threads, 0), MeasureGatherBytesPerSecond(targets, threads, 16)};
}

// --- index streams -------------------------------------------------------

enum class Distribution { kUniform, kZipf };

inline const char* DistributionName(Distribution d) { return d == Distribution::kUniform ? "uniform" : "zipf"; }

// out[i] uniform in [0, nrows), from stream `seed`.
template <typename Index>
void FillUniform(std::span<Index> out, int64_t nrows, uint64_t seed) {
  Xoshiro256pp rng(seed);
  for (Index& x : out) x = static_cast<Index>(rng.Below(static_cast<uint64_t>(nrows)));
}

// out[i] = scramble(rank), rank ~ Zipf(alpha) over [0, nrows): the table's
// hot rows are spread over the table by `scramble` (one per table), as in
// the thesis' 5.4.1.1, so that they are not the first, adjacent rows.
template <typename Index>
void FillZipf(std::span<Index> out, const ZipfSampler& zipf, const LfsrScrambler& scramble, uint64_t seed) {
  Xoshiro256pp rng(seed);
  for (Index& x : out) x = static_cast<Index>(scramble(zipf(rng)));
}

}  // namespace cemb::bench

#endif  // CEMB_BENCH_BENCH_UTIL_H_
