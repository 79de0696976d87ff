// Epoch-based reclamation for caches that evict while other threads read
// (CachedTable with CacheEviction::kClock): a reader opens a ReadSection around
// the work that holds row pointers (one request, one kernel call), and a
// reclaimer that has unpublished a slot calls WaitForReaders() before it
// reuses the slot. Every pointer a reader obtained inside a section stays
// valid until the section closes.
//
// What a reader pays: opening the outermost section of a thread is one
// sequentially consistent store (an xchg on x86, about 20 cycles) to a cache
// line of its own; closing it is one release store; nested sections cost a
// thread-local increment. Nothing per lookup. Readers never wait.
//
// WaitForReaders() advances the global epoch and returns once every thread is
// outside a section or has entered one after the advance; it spins, then
// yields. Call it from a thread that is not itself inside a section (it
// would wait for itself: checked, aborts).
//
// A thread claims a record on its first section and releases it when it
// exits; at most kMaxReaderThreads threads hold one at a time (more aborts
// with a message).
//
// Thread safety: everything here may be used from any thread.
//
// Example:
//   void Serve(const Request& r) {
//     cemb::ReadSection section;            // row pointers valid until the end of scope
//     CEMB_CHECK_OK(kernels.pooled_lookup(r.bags, out));
//   }
//   // the evictor thread: unpublish victims, then
//   cemb::WaitForReaders();                 // no reader can still hold them
#ifndef CEMB_CACHE_EPOCH_H_
#define CEMB_CACHE_EPOCH_H_

#include <atomic>
#include <cstdint>

namespace cemb {

inline constexpr int kMaxReaderThreads = 1024;

namespace epoch_internal {

// One per reader thread, on its own cache line: 0 outside a section, else
// the global epoch the thread saw when it entered.
struct alignas(64) Record {
  std::atomic<uint64_t> active{0};
  std::atomic<bool> claimed{false};
};

// The hot, trivially constructible part of a thread's state (no TLS init guard).
struct ThreadState {
  Record* record;
  int depth;
};
inline thread_local ThreadState tls{nullptr, 0};

extern std::atomic<uint64_t> g_epoch;  // starts at 1; 0 means "outside"

// Claims a free record for this thread and arranges its release at thread exit.
Record* ClaimRecord();

}  // namespace epoch_internal

class ReadSection {
 public:
  ReadSection() : ReadSection(true) {}
  // Opens a section only when `enter` (a table that needs none passes false).
  explicit ReadSection(bool enter) : entered_(enter) {
    if (!enter) return;
    epoch_internal::ThreadState& t = epoch_internal::tls;
    if (t.depth++ == 0) {
      if (t.record == nullptr) [[unlikely]] t.record = epoch_internal::ClaimRecord();
      // seq_cst: ordered before this thread's later (seq_cst) loads of a pointer word.
      t.record->active.store(epoch_internal::g_epoch.load(std::memory_order_acquire), std::memory_order_seq_cst);
    }
  }
  ~ReadSection() {
    if (!entered_) return;
    epoch_internal::ThreadState& t = epoch_internal::tls;
    if (--t.depth == 0) t.record->active.store(0, std::memory_order_release);
  }
  ReadSection(const ReadSection&) = delete;
  ReadSection& operator=(const ReadSection&) = delete;

 private:
  bool entered_;
};

// True when this thread is inside a ReadSection.
inline bool InReadSection() { return epoch_internal::tls.depth > 0; }

// Returns once no thread is still inside a section it opened before the call.
void WaitForReaders();

}  // namespace cemb

#endif  // CEMB_CACHE_EPOCH_H_
