// Gate: holds the threads that enter it while it is held, and counts them:
// the tests' way to keep a scoring in flight (a batcher's score function,
// the server's before_score hook) while they look at what queues behind it.
#ifndef CEMB_TESTS_SERVER_GATE_H_
#define CEMB_TESTS_SERVER_GATE_H_

#include <condition_variable>
#include <mutex>

namespace cemb::server {

class Gate {
 public:
  // Called by the held thread: counts it, then waits while the gate is held.
  void Enter() {
    std::unique_lock<std::mutex> lock(mu_);
    ++entered_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return !held_; });
  }
  void Hold() {
    std::lock_guard<std::mutex> lock(mu_);
    held_ = true;
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    held_ = false;
    cv_.notify_all();
  }
  // Waits until `n` threads entered, in all.
  void WaitEntered(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return entered_ >= n; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool held_ = false;
  int entered_ = 0;
};

}  // namespace cemb::server

#endif  // CEMB_TESTS_SERVER_GATE_H_
