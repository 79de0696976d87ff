#include "cache/epoch.h"

#include <cstdio>
#include <cstdlib>
#include <thread>

namespace cemb {
namespace epoch_internal {

std::atomic<uint64_t> g_epoch{1};

namespace {

Record g_records[kMaxReaderThreads];
std::atomic<int> g_high_water{0};  // records [0, g_high_water) were ever claimed

// Releases the thread's record when the thread exits.
struct Releaser {
  Record* record = nullptr;
  ~Releaser() {
    if (record == nullptr) return;
    record->active.store(0, std::memory_order_release);
    record->claimed.store(false, std::memory_order_release);
    tls = {nullptr, 0};
  }
};

}  // namespace

Record* ClaimRecord() {
  for (int i = 0; i < kMaxReaderThreads; ++i) {
    bool expected = false;
    if (!g_records[i].claimed.load(std::memory_order_relaxed) &&
        g_records[i].claimed.compare_exchange_strong(expected, true, std::memory_order_acquire)) {
      int hw = g_high_water.load(std::memory_order_relaxed);
      while (hw < i + 1 && !g_high_water.compare_exchange_weak(hw, i + 1, std::memory_order_seq_cst)) {
      }
      static thread_local Releaser releaser;
      releaser.record = &g_records[i];
      return &g_records[i];
    }
  }
  std::fprintf(stderr, "cemb: more than %d threads inside cemb::ReadSection at once\n", kMaxReaderThreads);
  std::abort();
}

}  // namespace epoch_internal

void WaitForReaders() {
  using namespace epoch_internal;
  if (InReadSection()) {
    std::fprintf(stderr, "cemb: WaitForReaders() called inside a ReadSection (it would wait for itself)\n");
    std::abort();
  }
  const uint64_t target = g_epoch.fetch_add(1, std::memory_order_seq_cst) + 1;
  const int n = g_high_water.load(std::memory_order_seq_cst);
  for (int i = 0; i < n; ++i) {
    for (int spins = 0;; ++spins) {
      const uint64_t a = g_records[i].active.load(std::memory_order_seq_cst);
      if (a == 0 || a >= target) break;
      if (spins >= 128) std::this_thread::yield();
    }
  }
}

}  // namespace cemb
