#include "server/batcher.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace cemb::server {

void Batcher::Request::Wait() {
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
}

Batcher::Batcher(const Options& options, ScoreFn score) : options_(options), score_(std::move(score)) {
  for (int i = 0; i < std::max(options_.threads, 1); ++i) threads_.emplace_back([this] { Loop(); });
}

Batcher::~Batcher() { Stop(); }

absl::Status Batcher::RefusalLocked() const {
  if (stopping_) return absl::UnavailableError("the server is shutting down");
  if (static_cast<int64_t>(queue_.size()) >= options_.max_queue) {
    return absl::UnavailableError(
        absl::StrCat("overloaded: ", queue_.size(), " requests are waiting to be scored (the queue's limit)"));
  }
  return absl::OkStatus();
}

absl::Status Batcher::Admits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return RefusalLocked();
}

absl::Status Batcher::Submit(Request* request) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (absl::Status s = RefusalLocked(); !s.ok()) return s;
    request->enqueued = Clock::now();
    queue_.push_back(request);
  }
  arrived_.notify_one();  // only the forming thread waits on it
  return absl::OkStatus();
}

void Batcher::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  arrived_.notify_all();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

int64_t Batcher::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(queue_.size());
}

bool Batcher::Form(std::vector<Request*>& batch) {
  batch.clear();
  std::lock_guard<std::mutex> forming(forming_);
  std::unique_lock<std::mutex> lock(mu_);
  arrived_.wait(lock, [&] { return !queue_.empty() || stopping_; });
  if (queue_.empty()) return false;
  Request* first = queue_.front();
  queue_.pop_front();
  batch.push_back(first);
  int64_t samples = first->samples;
  const Clock::time_point deadline = first->enqueued + options_.max_wait;
  while (samples < options_.max_batch) {
    for (auto it = queue_.begin(); it != queue_.end() && samples < options_.max_batch;) {
      if ((*it)->form == first->form && samples + (*it)->samples <= options_.max_batch) {
        samples += (*it)->samples;
        batch.push_back(*it);
        it = queue_.erase(it);
      } else {
        ++it;
      }
    }
    if (samples >= options_.max_batch || stopping_ || Clock::now() >= deadline) break;
    arrived_.wait_until(lock, deadline);
  }
  return true;
}

void Batcher::Loop() {
  std::vector<Request*> batch;
  while (Form(batch)) {
    score_(batch);
    for (Request* r : batch) {
      // Notified under the lock: the waiter may destroy the request as soon
      // as it sees done.
      std::lock_guard<std::mutex> lock(r->mu);
      r->done = true;
      r->cv.notify_all();
    }
  }
}

}  // namespace cemb::server
