// parallel_for: the one way the libraries run work on several threads, an
// OpenMP loop over work items. Kernels are single-threaded range functions;
// executors (embedding/ensemble.h, data/ generation and preprocessing, the
// trainer) split their work into items and hand them to parallel_for, so
// tests can call a kernel without threads.
//
// Thread safety: parallel_for may be called from any thread; nested calls run
// their items on the calling thread (OpenMP nesting is off).
//
//   std::vector<Chunk> out(n);
//   cemb::parallel_for(n, /*threads=*/0, [&](int64_t i) { out[i] = Make(i); });
//   cemb::parallel_for_ranges(v.size(), 1 << 14, [&](int64_t b, int64_t e) { Scale(v, b, e); });
#ifndef CEMB_BASE_PARALLEL_H_
#define CEMB_BASE_PARALLEL_H_

#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace cemb {

// The number of threads parallel_for uses when asked for 0 threads.
inline int DefaultThreads() { return std::max(1, omp_get_max_threads()); }

namespace internal {
// The team, out of line: clang asks the runtime for the caller's thread
// number on entry to any function that holds a parallel region.
template <typename Fn>
[[gnu::noinline]] void ParallelForTeam(int64_t n, int threads, Fn& fn) {
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t i = 0; i < n; ++i) fn(i);
}
}  // namespace internal

// Runs fn(i) for every i in [0, n), items handed out dynamically, on
// `threads` threads (<= 0: DefaultThreads()). Returns after all items ran.
// NOTE: which thread runs an item is unspecified; results that must not
// depend on the thread count must not depend on it.
// With threads == 1 (or one item) it never enters the OpenMP runtime, so a
// thread that is not OpenMP's (a request thread of a service) does not become
// one of its roots.
template <typename Fn>
void parallel_for(int64_t n, int threads, Fn&& fn) {
  if (n <= 0) return;
  if (threads <= 0) threads = DefaultThreads();
  if (threads == 1 || n == 1 || omp_in_parallel()) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  internal::ParallelForTeam(n, threads, fn);
}

// Runs fn(begin, end) over [0, n) cut into ranges of `chunk` elements (the
// last one shorter), each range a parallel_for item on DefaultThreads().
// REQUIRES: chunk > 0.
template <typename Fn>
void parallel_for_ranges(int64_t n, int64_t chunk, Fn&& fn) {
  parallel_for((n + chunk - 1) / chunk, 0, [&](int64_t c) { fn(c * chunk, std::min(n, (c + 1) * chunk)); });
}

}  // namespace cemb

#endif  // CEMB_BASE_PARALLEL_H_
