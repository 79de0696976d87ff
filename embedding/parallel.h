// The one place where embedding/ creates threads: an OpenMP parallel_for over
// work items. Kernels are single-threaded range functions; executors split
// their work into items and hand them to parallel_for.
//
// Thread safety: parallel_for may be called from any thread; nested calls run
// their items on the calling thread (OpenMP nesting is off).
#ifndef CEMB_EMBEDDING_PARALLEL_H_
#define CEMB_EMBEDDING_PARALLEL_H_

#include <omp.h>

#include <cstdint>

namespace cemb {

// The number of threads parallel_for uses when asked for 0 threads.
inline int DefaultThreads() { return omp_get_max_threads(); }

// Runs fn(i) for every i in [0, n), items handed out dynamically, on
// `threads` threads (0: DefaultThreads()). Returns after all items ran.
template <typename Fn>
void parallel_for(int64_t n, int threads, Fn&& fn) {
  if (n <= 0) return;
  if (threads <= 0) threads = DefaultThreads();
  if (threads == 1 || n == 1 || omp_in_parallel()) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t i = 0; i < n; ++i) fn(i);
}

}  // namespace cemb

#endif  // CEMB_EMBEDDING_PARALLEL_H_
