// The one way the code times its phases: seconds of the steady clock added
// to a counter the caller owns (a phase of dlrm::PhaseTimes, a wait a
// callee reports); a null counter times nothing.
//
//   ScopedSeconds t(&times[Phase::kData]);        // the scope's seconds
//   LapSeconds laps;                              // consecutive phases
//   Forward(); laps.Lap(&times[Phase::kForward]);
//   Backward(); laps.Lap(&times[Phase::kBackward]);
#ifndef CEMB_BASE_TIMER_H_
#define CEMB_BASE_TIMER_H_

#include <sys/resource.h>

#include <chrono>

namespace cemb {

using SteadyClock = std::chrono::steady_clock;

inline double SecondsSince(SteadyClock::time_point t0) {
  return std::chrono::duration<double>(SteadyClock::now() - t0).count();
}

// The CPU seconds this process has used, all threads, user and system.
inline double ProcessCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto sec = [](const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec); };
  return sec(u.ru_utime) + sec(u.ru_stime);
}

// Adds the seconds of its lifetime to *into.
class ScopedSeconds {
 public:
  explicit ScopedSeconds(double* into) : into_(into), start_(SteadyClock::now()) {}
  ~ScopedSeconds() {
    if (into_ != nullptr) *into_ += SecondsSince(start_);
  }
  ScopedSeconds(const ScopedSeconds&) = delete;
  ScopedSeconds& operator=(const ScopedSeconds&) = delete;

 private:
  double* into_;
  SteadyClock::time_point start_;
};

// Adds the seconds since the last Lap (or Skip, or construction) to *into.
class LapSeconds {
 public:
  LapSeconds() : last_(SteadyClock::now()) {}
  void Lap(double* into) {
    const SteadyClock::time_point now = SteadyClock::now();
    if (into != nullptr) *into += std::chrono::duration<double>(now - last_).count();
    last_ = now;
  }
  // Restarts the lap without adding it (a callee timed its own phases).
  void Skip() { last_ = SteadyClock::now(); }

 private:
  SteadyClock::time_point last_;
};

}  // namespace cemb

#endif  // CEMB_BASE_TIMER_H_
