// The max-QPS search of the open-loop load generators (serve_load_bench on
// the in-process predictor, serve_http_load on dlrm-serve), so that both
// name the same rate "max QPS": the offered rate doubles from start_rate
// until one fails, then is bisected until the failing rate is within
// `precision` of the passing one. When the first rate fails, the rate halves
// until one passes (none below start_rate / 64: e.g. a request alone takes
// longer than the p99 bound).
//
//   const RateSearchResult r = FindMaxRate({.start_rate = 600}, [&](double rate) -> std::optional<bool> {
//     const Result m = Measure(rate);
//     if (m.failed > 0) return std::nullopt;  // stops the search
//     return m.pass();
//   });
//   PrintMaxRate(r, samples, "answers >= 0.99 x arrivals and p99 <= 25 ms");
#ifndef CEMB_BENCH_RATE_SEARCH_H_
#define CEMB_BENCH_RATE_SEARCH_H_

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>

namespace cemb::bench {

struct RateSearch {
  double start_rate = 100;
  double precision = 0.05;
  int max_measurements = 24;
};

struct RateSearchResult {
  double max_rate = 0;                                          // the highest rate that passed; 0: none
  double failed_rate = std::numeric_limits<double>::infinity();  // the lowest that failed; inf: none
  bool stopped = false;                                         // `measure` returned nullopt
};

// measure(rate): whether the load generator kept up at `rate` (a
// measurement), or nullopt to stop the search (e.g. a request failed).
template <typename Measure>
RateSearchResult FindMaxRate(const RateSearch& s, Measure measure) {
  RateSearchResult r;
  double& lo = r.max_rate;
  double& hi = r.failed_rate;
  double rate = s.start_rate;
  for (int i = 0; i < s.max_measurements; ++i) {
    const std::optional<bool> passed = measure(rate);
    if (!passed) {
      r.stopped = true;
      break;
    }
    (*passed ? lo : hi) = rate;
    if (std::isinf(hi)) {
      rate = 2 * lo;
    } else if (lo == 0) {
      if (hi < s.start_rate / 64) break;  // no rate passes: give up
      rate = hi / 2;
    } else if (hi / lo - 1 > s.precision) {
      rate = (lo + hi) / 2;
    } else {
      break;
    }
  }
  return r;
}

// The search's outcome, in the line scripts read (bench/run_serve.sh,
// run_serve_summary.py: "max QPS: <rate> requests/s ..."); `kept_up` says
// what passing meant.
inline void PrintMaxRate(const RateSearchResult& r, int64_t samples_per_request, const std::string& kept_up) {
  if (r.max_rate > 0) {
    std::printf("max QPS: %.1f requests/s (%.0f samples/s): %s; the next rate up failed at %.1f\n", r.max_rate,
                r.max_rate * static_cast<double>(samples_per_request), kept_up.c_str(), r.failed_rate);
  } else if (!r.stopped) {
    std::printf("max QPS: none found (every rate tried failed, the lowest %.1f requests/s)\n", r.failed_rate);
  }
}

}  // namespace cemb::bench

#endif  // CEMB_BENCH_RATE_SEARCH_H_
