// Batcher: dynamic batching of requests that arrive together. Requests
// wait in one bounded queue; a fixed set of scoring threads (one per
// inference context of the predictor) takes them out in batches: the
// thread that forms the next batch takes the oldest request, then every
// queued request of the same form that fits in max_batch samples, and
// waits for more until the batch is full or the oldest request has waited
// max_wait. One thread forms a batch at a time, so that concurrent
// arrivals are gathered into one batch rather than spread over idle
// threads; the others score the batches formed before.
//
//   arrival ── Submit ──> [queue: at most max_queue requests] ──> former: oldest + same form,
//     (full: Unavailable, answered 503 at once)                   until max_batch samples or
//                                                                 oldest.enqueued + max_wait
//                                                                       │
//                                          scoring threads <── batch ───┘  score(batch), then
//                                                                          each request's done
//
// At low load a request waits at most max_wait, then one scoring (an idle
// scoring thread is forming). Requests larger than max_batch are scored
// alone. Stop() scores everything queued, then joins the threads.
//
// Thread safety: Submit and Stop from any thread; `score` runs on the
// scoring threads, one batch per call, several calls at once.
//
//   Batcher b({.max_batch = 256, .max_wait = 500us, .max_queue = 512, .threads = 2}, score);
//   Batcher::Request r(/*form=*/0, /*samples=*/n, /*payload=*/&request);
//   if (absl::Status s = b.Submit(&r); !s.ok()) return 503;
//   r.Wait();   // score(...) has filled what it fills through r.payload
#ifndef CEMB_SERVER_BATCHER_H_
#define CEMB_SERVER_BATCHER_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "absl/status/status.h"

namespace cemb::server {

class Batcher {
 public:
  using Clock = std::chrono::steady_clock;

  struct Options {
    int64_t max_batch = 256;  // samples a batch holds at most (a larger request is a batch alone)
    std::chrono::microseconds max_wait{500};  // the longest the oldest request of a batch waits for others
    int64_t max_queue = 1024;  // requests queued at most; Submit refuses beyond
    int threads = 1;           // scoring threads
  };

  // One request: what the batcher reads (form, samples), what the scorer
  // reads and fills (payload), and its completion.
  struct Request {
    Request(int form, int64_t samples, void* payload) : form(form), samples(samples), payload(payload) {}

    const int form;         // requests of different forms are never in one batch
    const int64_t samples;  // >= 1
    void* const payload;
    Clock::time_point enqueued;  // set by Submit

    // Blocks until the request's batch was scored.
    void Wait();

   private:
    friend class Batcher;
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
  };

  // score(batch) scores every request of the batch (all of one form) and
  // fills their payloads; it must not throw.
  using ScoreFn = std::function<void(std::span<Request* const> batch)>;

  Batcher(const Options& options, ScoreFn score);
  ~Batcher();  // Stop()
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  // Queues `request` (it must outlive its Wait()). Unavailable, at once,
  // when max_queue requests are queued or the batcher is stopping.
  [[nodiscard]] absl::Status Submit(Request* request);

  // What Submit would answer now: Unavailable when full or stopping. A
  // caller refuses with it before the work of making a request (parsing
  // it), so that shedding an overload costs little; Submit still decides.
  [[nodiscard]] absl::Status Admits() const;

  // Scores every queued request, then joins the scoring threads. Idempotent.
  void Stop();

  int64_t queued() const;  // requests waiting now

 private:
  absl::Status RefusalLocked() const;  // Admits(), mu_ held
  void Loop();
  // Forms the next batch into `batch`; false when stopping with nothing queued.
  bool Form(std::vector<Request*>& batch);

  const Options options_;
  const ScoreFn score_;
  std::mutex forming_;  // held by the one thread forming a batch
  mutable std::mutex mu_;
  std::condition_variable arrived_;
  std::deque<Request*> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace cemb::server

#endif  // CEMB_SERVER_BATCHER_H_
