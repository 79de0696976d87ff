#include "server/batcher.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/gate.h"

namespace cemb::server {
namespace {

using namespace std::chrono_literals;
using ::testing::ElementsAre;
using ::testing::UnorderedElementsAre;

// A scorer that records each batch (the payloads are ints), held while its gate is.
class Recorder {
 public:
  Batcher::ScoreFn Fn() {
    return [this](std::span<Batcher::Request* const> batch) {
      std::vector<int> ids;
      for (Batcher::Request* r : batch) ids.push_back(*static_cast<int*>(r->payload));
      {
        std::lock_guard<std::mutex> lock(mu_);
        batches_.push_back(ids);
      }
      gate.Enter();
    };
  }
  std::vector<std::vector<int>> batches() {
    std::lock_guard<std::mutex> lock(mu_);
    return batches_;
  }

  Gate gate;

 private:
  std::mutex mu_;
  std::vector<std::vector<int>> batches_;
};

struct Pending {
  int id;
  std::unique_ptr<Batcher::Request> request;
  Pending(int id, int form, int64_t samples)
      : id(id), request(std::make_unique<Batcher::Request>(form, samples, &this->id)) {}
};

// Makes the batcher's only scoring thread busy with `first`, held.
void Busy(Batcher& b, Recorder& rec, Pending& first) {
  rec.gate.Hold();
  ASSERT_TRUE(b.Submit(first.request.get()).ok());
  rec.gate.WaitEntered(1);
}

TEST(Batcher, RequestsQueuedWhileTheScorerIsBusyFormOneBatch) {
  Recorder rec;
  Batcher b({.max_batch = 8, .max_wait = 0us, .max_queue = 100, .threads = 1}, rec.Fn());
  Pending first(0, 0, 1);
  Busy(b, rec, first);
  std::vector<std::unique_ptr<Pending>> next;
  for (int i = 1; i <= 4; ++i) {
    next.push_back(std::make_unique<Pending>(i, 0, 2));
    ASSERT_TRUE(b.Submit(next.back()->request.get()).ok());
  }
  EXPECT_EQ(b.queued(), 4);
  rec.gate.Release();
  for (auto& p : next) p->request->Wait();
  first.request->Wait();
  // 4 requests of 2 samples: one batch of 8 (max_batch), though max_wait is 0.
  EXPECT_THAT(rec.batches(), ElementsAre(ElementsAre(0), ElementsAre(1, 2, 3, 4)));
}

TEST(Batcher, ABatchHoldsAtMostMaxBatchSamplesAndOneForm) {
  Recorder rec;
  Batcher b({.max_batch = 4, .max_wait = 0us, .max_queue = 100, .threads = 1}, rec.Fn());
  Pending first(0, 0, 1);
  Busy(b, rec, first);
  // forms: 1 0 0 1 0 ; samples 3 2 2 1 9
  std::vector<std::unique_ptr<Pending>> next;
  const int forms[] = {1, 0, 0, 1, 0};
  const int samples[] = {3, 2, 2, 1, 9};
  for (int i = 0; i < 5; ++i) {
    next.push_back(std::make_unique<Pending>(i + 1, forms[i], samples[i]));
    ASSERT_TRUE(b.Submit(next.back()->request.get()).ok());
  }
  rec.gate.Release();
  for (auto& p : next) p->request->Wait();
  // The oldest first, then what fits of its form: {1 (3), 4 (1)}, {2, 3}, {5} alone (9 > max_batch).
  EXPECT_THAT(rec.batches(),
              ElementsAre(ElementsAre(0), ElementsAre(1, 4), ElementsAre(2, 3), ElementsAre(5)));
}

TEST(Batcher, ARequestWaitsForOthersWithinItsWindow) {
  Recorder rec;
  // A window far longer than the test: the batch ends when it is full.
  Batcher b({.max_batch = 2, .max_wait = 60s, .max_queue = 100, .threads = 2}, rec.Fn());
  Pending a(0, 0, 1), c(1, 0, 1);
  ASSERT_TRUE(b.Submit(a.request.get()).ok());
  std::this_thread::sleep_for(20ms);
  ASSERT_TRUE(b.Submit(c.request.get()).ok());
  a.request->Wait();
  c.request->Wait();
  // One batch, though a second scoring thread was idle when c arrived.
  EXPECT_THAT(rec.batches(), ElementsAre(ElementsAre(0, 1)));
}

TEST(Batcher, ALoneRequestIsScoredWhenItsWindowEnds) {
  Recorder rec;
  Batcher b({.max_batch = 64, .max_wait = 50ms, .max_queue = 100, .threads = 1}, rec.Fn());
  Pending a(0, 0, 1);
  const auto start = Batcher::Clock::now();
  ASSERT_TRUE(b.Submit(a.request.get()).ok());
  a.request->Wait();
  EXPECT_GE(Batcher::Clock::now() - start, 50ms);  // it waited for others, then was scored alone
  EXPECT_THAT(rec.batches(), ElementsAre(ElementsAre(0)));
}

TEST(Batcher, AFullQueueRefusesAtOnce) {
  Recorder rec;
  Batcher b({.max_batch = 1, .max_wait = 0us, .max_queue = 2, .threads = 1}, rec.Fn());
  Pending p0(0, 0, 1), p1(1, 0, 1), p2(2, 0, 1), p3(3, 0, 1);
  Busy(b, rec, p0);
  ASSERT_TRUE(b.Submit(p1.request.get()).ok());
  EXPECT_TRUE(b.Admits().ok());
  ASSERT_TRUE(b.Submit(p2.request.get()).ok());
  EXPECT_TRUE(absl::IsUnavailable(b.Admits())) << "what Submit would answer now";
  const absl::Status full = b.Submit(p3.request.get());
  EXPECT_TRUE(absl::IsUnavailable(full)) << full;
  EXPECT_THAT(full.message(), ::testing::HasSubstr("overloaded"));
  EXPECT_EQ(b.Admits().message(), full.message());
  rec.gate.Release();
  p0.request->Wait();
  p1.request->Wait();
  p2.request->Wait();
  EXPECT_EQ(rec.batches().size(), 3u);
}

TEST(Batcher, StopScoresWhatIsQueuedThenRefuses) {
  Recorder rec;
  auto b = std::make_unique<Batcher>(Batcher::Options{.max_batch = 1, .max_wait = 0us, .max_queue = 10, .threads = 2},
                                     rec.Fn());
  rec.gate.Hold();
  std::vector<std::unique_ptr<Pending>> all;
  for (int i = 0; i < 5; ++i) {
    all.push_back(std::make_unique<Pending>(i, 0, 1));
    ASSERT_TRUE(b->Submit(all.back()->request.get()).ok());
  }
  rec.gate.WaitEntered(2);
  std::thread stop([&] { b->Stop(); });
  std::this_thread::sleep_for(10ms);
  Pending late(9, 0, 1);
  EXPECT_TRUE(absl::IsUnavailable(b->Submit(late.request.get())));
  rec.gate.Release();
  stop.join();
  for (auto& p : all) p->request->Wait();  // every queued request was scored
  std::vector<int> scored;
  for (const auto& batch : rec.batches()) scored.insert(scored.end(), batch.begin(), batch.end());
  EXPECT_THAT(scored, UnorderedElementsAre(0, 1, 2, 3, 4));
}

}  // namespace
}  // namespace cemb::server
