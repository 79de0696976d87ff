// SnapshotCore (ssd/internal/snapshot_core.h): an ssd snapshot served in
// place. ssd/snapshot_table.h is the contract, docs/ssd.md ("Serving
// reads") the design.
#include "ssd/snapshot_table.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "ssd/internal/snapshot_format.h"

namespace cemb::ssd_internal {
namespace {

constexpr size_t kIdChunkBytes = size_t{1} << 20;  // the id area is read in chunks of this
constexpr size_t kSlotAlignment = 64;

using Buffer = std::unique_ptr<std::byte, decltype(&std::free)>;
Buffer AlignedBuffer(size_t bytes) {
  return Buffer(static_cast<std::byte*>(std::aligned_alloc(kIoAlignment, (bytes + kIoAlignment - 1) / kIoAlignment *
                                                                             kIoAlignment)),
                &std::free);
}


}  // namespace

absl::StatusOr<std::unique_ptr<SnapshotCore>> SnapshotCore::Open(std::string name, int64_t nvectors,
                                                                 int64_t featuresize, size_t feature_bytes,
                                                                 size_t row_bytes, uint32_t row_format,
                                                                 const SnapshotTableOptions& options,
                                                                 SnapshotInitFn init_row) {
  std::unique_ptr<SnapshotCore> c(new SnapshotCore());
  c->name_ = std::move(name);
  c->path_ = options.path;
  c->options_ = options;
  c->nvectors_ = nvectors;
  c->featuresize_ = featuresize;
  c->feature_bytes_ = feature_bytes;
  c->row_bytes_ = row_bytes;
  c->init_row_ = init_row;
  // A row of a cache line or less never straddles two (a power of two);
  // a longer one is packed at 8 bytes: it touches as many lines either
  // way, and the DRAM holds more rows (an int8 row of 64 features: 72
  // bytes, not 128).
  c->stride_ = feature_bytes <= kSlotAlignment ? std::bit_ceil(feature_bytes) : (feature_bytes + 7) / 8 * 8;
  c->capacity_ = options.capacity_bytes / static_cast<int64_t>(c->stride_);
  const std::string& table = c->name_;
  if (c->capacity_ < 1) {
    return absl::InvalidArgumentError(absl::StrCat(table, ": capacity_bytes ", options.capacity_bytes,
                                                   " holds no slot of ", c->stride_, " bytes"));
  }
  c->capacity_ = std::min<int64_t>(c->capacity_, int64_t{kLoading} - 2);
  if (nvectors >= int64_t{kLoading} - 1) {
    return absl::InvalidArgumentError(absl::StrCat(table, ": nvectors ", nvectors, " >= 2^31 - 1"));
  }

  // The file, opened once: O_DIRECT where the file system takes it.
  int fd = -1;
  if (options.direct == DirectIo::kAuto) {
    fd = ::open(options.path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
    c->direct_ = fd >= 0;
    if (fd < 0 && errno == EINVAL) {
      std::fprintf(stderr, "%s: %s: the file system refuses O_DIRECT; serving through the page cache\n",
                   table.c_str(), options.path.c_str());
    }
  }
  if (fd < 0) fd = ::open(options.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return base::WithPrefix(table, base::ErrnoStatus(errno, options.path, "open"));
  c->file_ = base::File::Adopt(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) return base::WithPrefix(table, base::ErrnoStatus(errno, options.path, "fstat"));
  const auto size = static_cast<uint64_t>(st.st_size);

  // The header and the id area, checked whole before a row is served.
  const std::string where = absl::StrCat(table, ": ", options.path, ": ");
  SnapshotHeader h{};
  {
    Buffer head = AlignedBuffer(kBlockBytes);
    absl::StatusOr<size_t> got = base::ReadSomeAt(fd, options.path, head.get(), kBlockBytes, 0);
    if (!got.ok()) return base::WithPrefix(table, got.status());
    std::memcpy(&h, head.get(), std::min(*got, sizeof h));
  }
  CEMB_RETURN_IF_ERROR(CheckSnapshotHeader(h, size, where, nvectors, static_cast<int64_t>(row_bytes), row_format));
  c->snapshot_rows_ = h.rows;
  c->rows_ = SnapshotRowsOf(h.row_format, h.data_offset, row_bytes);
  c->seed_ = h.has_seed != 0 ? std::optional<uint64_t>(h.seed) : std::nullopt;
  c->position_.assign(static_cast<size_t>(nvectors), kNoRow);
  {
    SnapshotIdCheck check(where, nvectors, h.ids_offset);
    Buffer chunk = AlignedBuffer(kIdChunkBytes);
    const uint64_t id_bytes = static_cast<uint64_t>(h.rows) * sizeof(uint32_t);
    for (uint64_t at = 0; at < id_bytes; at += kIdChunkBytes) {
      // Whole blocks (O_DIRECT): the id area is padded to data_offset.
      const size_t want = static_cast<size_t>(std::min<uint64_t>(kIdChunkBytes, h.data_offset - h.ids_offset - at));
      absl::StatusOr<size_t> got = base::ReadSomeAt(fd, options.path, chunk.get(), want, h.ids_offset + at);
      if (!got.ok()) return base::WithPrefix(table, got.status());
      const int64_t n = static_cast<int64_t>(std::min<uint64_t>(*got, id_bytes - at) / sizeof(uint32_t));
      const auto first = static_cast<int64_t>(at / sizeof(uint32_t));
      if (first + n < h.rows && *got < want) {
        return absl::DataLossError(absl::StrCat(where, "the id area ends early at offset ", h.ids_offset + at + *got));
      }
      const auto* ids = reinterpret_cast<const uint32_t*>(chunk.get());
      CEMB_RETURN_IF_ERROR(check.Add(ids, n, first));
      for (int64_t i = 0; i < n; ++i) c->position_[ids[i]] = static_cast<uint32_t>(first + i);
    }
  }

  c->state_.reset(new std::atomic<uint32_t>[static_cast<size_t>(nvectors)]());
  c->pins_.reset(new std::atomic<uint32_t>[static_cast<size_t>(c->capacity_)]());
  c->referenced_.reset(new std::atomic<uint8_t>[static_cast<size_t>(c->capacity_)]());
  c->slot_row_.assign(static_cast<size_t>(c->capacity_), kNoRow);
  const size_t pool_bytes = static_cast<size_t>(c->capacity_) * c->stride_;
  c->pool_ = Buffer(static_cast<std::byte*>(std::aligned_alloc(
                        kSlotAlignment, (pool_bytes + kSlotAlignment - 1) / kSlotAlignment * kSlotAlignment)),
                    &std::free);
  if (c->pool_ == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat(table, ": cannot allocate ", c->capacity_ * static_cast<int64_t>(c->stride_), " bytes of slots"));
  }
  return c;
}

SnapshotCore::~SnapshotCore() = default;

// --- the hit path ------------------------------------------------------------

const std::byte* SnapshotCore::TryHit(uint32_t row, SnapshotPins* pins) {
  const uint32_t w = state_[row].load(std::memory_order_acquire);
  const uint32_t s = w - 1;
  if (s >= kLoading - 1) return nullptr;  // not resident (0), or loading
  // Pin, then check that the slot still holds the row: an eviction claims a
  // slot only at pin count 0 (a CAS to kClaimed) and points the row's word
  // elsewhere before it lets the count go, so a pin that sees no claim and
  // the same word afterwards holds the row.
  const uint32_t p = pins_[s].fetch_add(1, std::memory_order_acq_rel);
  if ((p & kClaimed) != 0 || state_[row].load(std::memory_order_acquire) != w) {
    pins_[s].fetch_sub(1, std::memory_order_release);
    return nullptr;
  }
  if (referenced_[s].load(std::memory_order_relaxed) == 0) referenced_[s].store(1, std::memory_order_relaxed);
  pins->slots_.push_back(s);
  return Slot(s);
}

// --- a call: Start, Install, Finish ------------------------------------------
//
// Start never waits (beyond mu_), Install waits only for the device, and
// only Finish waits for rows other requests load, after the call's own rows
// are installed. A request that starts several tables installs all of them
// before it finishes any (SnapshotRequest), so every row it waits for
// belongs to a request that installs its rows without waiting for anyone:
// two requests cannot wait on each other.

template <typename Index>
absl::Status SnapshotCore::Start(std::span<const Index> rows, SnapshotPins* pins, const std::byte** out) {
  if (pins->phase_ != SnapshotPins::Phase::kIdle) {
    return absl::FailedPreconditionError(absl::StrCat(name_, ": these pins hold a call started and not finished"));
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] < 0 || rows[i] >= nvectors_) {
      return absl::InvalidArgumentError(
          absl::StrCat(name_, ", index ", i, ": row ", rows[i], (rows[i] < 0 ? " < 0" : " >= "),
                       rows[i] < 0 ? "" : absl::StrCat(nvectors_)));
    }
  }
  pins->first_pin_ = pins->slots_.size();
  pins->misses_.clear();
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto row = static_cast<uint32_t>(rows[i]);
    if (const std::byte* p = TryHit(row, pins)) {
      out[i] = p;
    } else {
      pins->misses_.push_back({row, static_cast<uint32_t>(i)});
    }
  }
  lookups_.fetch_add(static_cast<int64_t>(rows.size()), std::memory_order_relaxed);
  hits_.fetch_add(static_cast<int64_t>(rows.size() - pins->misses_.size()), std::memory_order_relaxed);
  pins->error_ = absl::OkStatus();
  pins->rows_.clear();
  pins->loads_.clear();
  pins->waits_.clear();
  pins->phase_ = SnapshotPins::Phase::kWaiting;
  if (pins->misses_.empty()) return absl::OkStatus();

  std::vector<SnapshotPins::Miss>& misses = pins->misses_;
  std::sort(misses.begin(), misses.end(),
            [](const SnapshotPins::Miss& a, const SnapshotPins::Miss& b) { return a.row < b.row; });
  for (const SnapshotPins::Miss& m : misses) {
    if (pins->rows_.empty() || pins->rows_.back() != m.row) pins->rows_.push_back(m.row);
  }
  const size_t nrows = pins->rows_.size();
  misses_.fetch_add(static_cast<int64_t>(nrows), std::memory_order_relaxed);
  pins->addresses_.assign(nrows, nullptr);
  pins->pending_.resize(nrows);
  for (size_t k = 0; k < nrows; ++k) pins->pending_[k] = static_cast<uint32_t>(k);
  if (absl::Status s = Claim(pins); !s.ok()) {
    pins->phase_ = SnapshotPins::Phase::kIdle;
    UnpinCall(pins);
    return s;
  }
  if (!pins->loads_.empty()) {
    pins->phase_ = SnapshotPins::Phase::kReading;
    SubmitLoads(pins);
  }
  return absl::OkStatus();
}
template absl::Status SnapshotCore::Start(std::span<const int32_t>, SnapshotPins*, const std::byte**);
template absl::Status SnapshotCore::Start(std::span<const int64_t>, SnapshotPins*, const std::byte**);

absl::Status SnapshotCore::Finish(SnapshotPins* pins, const std::byte** out) {
  if (pins->phase_ == SnapshotPins::Phase::kIdle) {
    return absl::FailedPreconditionError(absl::StrCat(name_, ": Finish of pins with no call started"));
  }
  Install(pins);
  absl::Status error = std::exchange(pins->error_, absl::OkStatus());
  // Rounds: a row whose loader (another request) failed is loaded by this
  // one, which then holds no other row loading.
  while (error.ok()) {
    AwaitShared(pins);
    if (pins->next_.empty()) break;
    std::swap(pins->pending_, pins->next_);
    error = Claim(pins);
    if (!error.ok() || pins->loads_.empty()) continue;
    pins->phase_ = SnapshotPins::Phase::kReading;
    SubmitLoads(pins);
    Install(pins);
    error = std::exchange(pins->error_, absl::OkStatus());
  }
  pins->phase_ = SnapshotPins::Phase::kIdle;
  if (!error.ok()) {
    UnpinCall(pins);
    return error;
  }
  size_t k = 0;
  for (const SnapshotPins::Miss& m : pins->misses_) {
    while (pins->rows_[k] != m.row) ++k;
    out[m.position] = pins->addresses_[k];
  }
  return absl::OkStatus();
}

void SnapshotCore::Abandon(SnapshotPins* pins) {
  if (pins->phase_ == SnapshotPins::Phase::kIdle) return;
  Install(pins);
  pins->error_ = absl::OkStatus();
  pins->phase_ = SnapshotPins::Phase::kIdle;
  UnpinCall(pins);
}

void SnapshotCore::Release(SnapshotPins* pins) {
  Abandon(pins);
  for (uint32_t s : pins->slots_) pins_[s].fetch_sub(1, std::memory_order_release);
  pins->slots_.clear();
}

void SnapshotCore::UnpinCall(SnapshotPins* pins) {
  for (const SnapshotPins::Load& l : pins->waits_) pins_[l.slot].fetch_sub(1, std::memory_order_release);
  pins->waits_.clear();
  for (size_t i = pins->first_pin_; i < pins->slots_.size(); ++i) {
    pins_[pins->slots_[i]].fetch_sub(1, std::memory_order_release);
  }
  pins->slots_.resize(pins->first_pin_);
}

// --- misses ----------------------------------------------------------------

std::optional<uint32_t> SnapshotCore::TakeSlot() {
  if (unused_ < capacity_) {
    const auto s = static_cast<uint32_t>(unused_++);
    pins_[s].fetch_add(kClaimed, std::memory_order_acq_rel);
    return s;
  }
  // CLOCK: two sweeps clear every second chance; a slot pinned all along is skipped.
  for (int64_t step = 0; step < 2 * capacity_ + 1; ++step) {
    const auto s = static_cast<uint32_t>(hand_);
    hand_ = hand_ + 1 == capacity_ ? 0 : hand_ + 1;
    if (pins_[s].load(std::memory_order_relaxed) != 0) continue;
    if (slot_row_[s] != kNoRow && referenced_[s].load(std::memory_order_relaxed) != 0) {
      referenced_[s].store(0, std::memory_order_relaxed);
      continue;
    }
    uint32_t expected = 0;
    if (!pins_[s].compare_exchange_strong(expected, kClaimed, std::memory_order_acq_rel)) continue;
    if (slot_row_[s] != kNoRow) {
      state_[slot_row_[s]].store(0, std::memory_order_relaxed);  // published by the release of the claim
      evictions_.fetch_add(1, std::memory_order_relaxed);
    }
    slot_row_[s] = kNoRow;
    referenced_[s].store(0, std::memory_order_relaxed);
    return s;
  }
  return std::nullopt;
}

absl::Status SnapshotCore::Claim(SnapshotPins* pins) {
  pins->loads_.clear();
  pins->waits_.clear();
  std::lock_guard<std::mutex> lock(mu_);
  for (uint32_t k : pins->pending_) {
    const uint32_t row = pins->rows_[k];
    const uint32_t w = state_[row].load(std::memory_order_relaxed);  // changes only under mu_, but for hits' pins
    if (w != 0 && (w & kLoading) == 0) {  // resident since the hit path looked
      const uint32_t s = w - 1;
      pins_[s].fetch_add(1, std::memory_order_relaxed);
      referenced_[s].store(1, std::memory_order_relaxed);
      pins->slots_.push_back(s);
      pins->addresses_[k] = Slot(s);
    } else if (w != 0) {  // another request is loading it: pinned now, waited for in Finish
      const uint32_t s = (w & ~kLoading) - 1;
      pins_[s].fetch_add(1, std::memory_order_relaxed);
      pins->waits_.push_back({row, s, k, 0, false});
      shared_.fetch_add(1, std::memory_order_relaxed);
    } else {
      const std::optional<uint32_t> s = TakeSlot();
      if (!s) {
        const int64_t asked = static_cast<int64_t>(pins->loads_.size() + pins->waits_.size());
        for (const SnapshotPins::Load& l : pins->loads_) {
          state_[l.row].store(0, std::memory_order_relaxed);
          slot_row_[l.slot] = kNoRow;
          pins_[l.slot].fetch_sub(1, std::memory_order_release);
        }
        for (const SnapshotPins::Load& l : pins->waits_) pins_[l.slot].fetch_sub(1, std::memory_order_release);
        pins->loads_.clear();
        pins->waits_.clear();
        return absl::ResourceExhaustedError(absl::StrCat(
            name_, ": every one of the ", capacity_, " slots is pinned (a request has ",
            static_cast<int64_t>(pins->slots_.size()) + asked, " rows pinned and needs more): give the table more ",
            "capacity_bytes than the rows of the requests served at once"));
      }
      slot_row_[*s] = row;
      state_[row].store(kLoading | (*s + 1), std::memory_order_relaxed);
      pins_[*s].fetch_add(1 - kClaimed, std::memory_order_release);  // the claim becomes this request's pin
      const uint32_t at = position_[row];
      pins->loads_.push_back(
          {row, *s, k, at == kNoRow ? kLazy : rows_.offset(at), false});
    }
  }
  return absl::OkStatus();
}

void SnapshotCore::SubmitLoads(SnapshotPins* pins) {
  // The distinct blocks the rows' features lie in, as runs of adjacent blocks.
  pins->blocks_.clear();
  for (const SnapshotPins::Load& l : pins->loads_) {
    if (l.begin == kLazy) continue;
    for (uint64_t b = l.begin / kBlockBytes; b <= (l.begin + feature_bytes_ - 1) / kBlockBytes; ++b) {
      pins->blocks_.push_back(b);
    }
  }
  std::sort(pins->blocks_.begin(), pins->blocks_.end());
  pins->blocks_.erase(std::unique(pins->blocks_.begin(), pins->blocks_.end()), pins->blocks_.end());
  pins->runs_.clear();
  for (uint64_t b : pins->blocks_) {
    if (!pins->runs_.empty() && pins->runs_.back().first_block + pins->runs_.back().blocks == b) {
      ++pins->runs_.back().blocks;
    } else {
      pins->runs_.push_back({b, 1, pins->runs_.empty() ? 0
                                                       : pins->runs_.back().buffer_offset +
                                                             pins->runs_.back().blocks * size_t{kBlockBytes},
                             0});
    }
  }
  const size_t bytes = pins->blocks_.size() * kBlockBytes;
  if (bytes > pins->buffer_bytes_) {
    pins->buffer_ = AlignedBuffer(bytes);
    pins->buffer_bytes_ = bytes;
  }

  // The reads of every missed row, all submitted at once, with no lock.
  if (!pins->runs_.empty()) {
    pins->requests_.clear();
    for (size_t r = 0; r < pins->runs_.size(); ++r) {
      const SnapshotPins::Run& run = pins->runs_[r];
      pins->requests_.push_back({IoOp::kRead, run.first_block * kBlockBytes, pins->buffer_.get() + run.buffer_offset,
                                 run.blocks * kBlockBytes, r});
      pins->runs_[r].result = -EIO;  // until its completion says otherwise
    }
    pins->ring_ = BorrowRing();
    if (absl::Status s = pins->ring_->io->Submit(pins->requests_); !s.ok()) {
      pins->error_ = base::WithPrefix(name_, absl::Status(s.code(), absl::StrCat(path_, ": ", s.message())));
    }
    reads_.fetch_add(static_cast<int64_t>(pins->runs_.size()), std::memory_order_relaxed);
  }

  // Rows not in the snapshot, computed while the reads fly.
  int64_t lazy = 0;
  for (SnapshotPins::Load& l : pins->loads_) {
    if (l.begin != kLazy) continue;
    std::byte* slot = Slot(l.slot);
    if (seed_) {
      init_row_(*seed_, nvectors_, l.row, featuresize_, slot);
    } else {
      std::memset(slot, 0, feature_bytes_);
    }
    l.ok = true;
    ++lazy;
  }
  lazy_rows_.fetch_add(lazy, std::memory_order_relaxed);
}

void SnapshotCore::Install(SnapshotPins* pins) {
  if (pins->phase_ != SnapshotPins::Phase::kReading) return;
  pins->phase_ = SnapshotPins::Phase::kWaiting;
  if (std::unique_ptr<SnapshotRing> ring = std::move(pins->ring_)) {
    absl::Status s = pins->error_;
    pins->done_.clear();
    while (s.ok() && ring->io->in_flight() > 0) {
      s = ring->io->Reap(ring->io->in_flight(), &pins->done_);
      if (!s.ok()) pins->error_ = base::WithPrefix(name_, absl::Status(s.code(), absl::StrCat(path_, ": ", s.message())));
    }
    for (const BlockCompletion& c : pins->done_) pins->runs_[c.tag].result = c.result;
    // A ring that failed is not lent again; destroying it waits for what
    // the kernel still holds of the call's buffer.
    ReturnRing(std::move(ring), pins->error_.ok());
  }

  int64_t read = 0, failed = 0;
  for (SnapshotPins::Load& l : pins->loads_) {
    if (l.begin == kLazy) continue;
    const uint64_t block = l.begin / kBlockBytes;
    const auto run = std::upper_bound(pins->runs_.begin(), pins->runs_.end(), block,
                                      [](uint64_t b, const SnapshotPins::Run& r) { return b < r.first_block; }) -
                     1;
    const uint64_t run_begin = run->first_block * kBlockBytes;
    l.ok = run->result >= 0 && static_cast<uint64_t>(run->result) >= l.begin + feature_bytes_ - run_begin;
    if (l.ok) {
      std::memcpy(Slot(l.slot), pins->buffer_.get() + run->buffer_offset + (l.begin - run_begin), feature_bytes_);
      ++read;
    } else if (pins->error_.ok()) {
      pins->error_ = ReadError(run_begin, run->blocks * uint64_t{kBlockBytes}, run->result);
    }
  }
  if (!pins->error_.ok()) {
    for (const SnapshotPins::Run& r : pins->runs_) failed += r.result < 0 ? 1 : 0;
    failed_reads_.fetch_add(std::max<int64_t>(failed, 1), std::memory_order_relaxed);
  }
  rows_read_.fetch_add(read, std::memory_order_relaxed);

  // The rows this call loaded serve every request from now on (those that
  // failed are not resident again; their slots are free once unpinned).
  if (pins->loads_.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  for (const SnapshotPins::Load& l : pins->loads_) {
    if (l.ok) {
      state_[l.row].store(l.slot + 1, std::memory_order_release);
      pins->slots_.push_back(l.slot);
      pins->addresses_[l.index] = Slot(l.slot);
    } else {
      state_[l.row].store(0, std::memory_order_relaxed);
      slot_row_[l.slot] = kNoRow;
      pins_[l.slot].fetch_sub(1, std::memory_order_release);
    }
  }
  loaded_.notify_all();
}

void SnapshotCore::AwaitShared(SnapshotPins* pins) {
  pins->next_.clear();
  if (pins->waits_.empty()) return;
  std::unique_lock<std::mutex> lock(mu_);
  for (const SnapshotPins::Load& l : pins->waits_) {
    const uint32_t loading = kLoading | (l.slot + 1);
    loaded_.wait(lock, [&] { return state_[l.row].load(std::memory_order_relaxed) != loading; });
    if (state_[l.row].load(std::memory_order_relaxed) == l.slot + 1) {
      pins->slots_.push_back(l.slot);
      pins->addresses_[l.index] = Slot(l.slot);
    } else {  // its loader failed
      pins_[l.slot].fetch_sub(1, std::memory_order_release);
      pins->next_.push_back(l.index);
    }
  }
  pins->waits_.clear();
}

absl::Status SnapshotCore::ReadError(uint64_t offset, uint64_t bytes, int64_t result) const {
  const std::string what = absl::StrCat(name_, ": ", path_, ": read of ", bytes, " bytes at offset ", offset);
  if (result >= 0) return absl::DataLossError(absl::StrCat(what, " transferred only ", result, " bytes"));
  return absl::DataLossError(absl::StrCat(what, " failed: ", std::strerror(static_cast<int>(-result))));
}

// --- rings -------------------------------------------------------------------

std::unique_ptr<SnapshotRing> SnapshotCore::BorrowRing() {
  int index;
  {
    std::lock_guard<std::mutex> lock(rings_mu_);
    if (!free_rings_.empty()) {
      std::unique_ptr<SnapshotRing> ring = std::move(free_rings_.back());
      free_rings_.pop_back();
      return ring;
    }
    index = rings_made_++;
  }
  auto ring = std::make_unique<SnapshotRing>();
  absl::StatusOr<std::unique_ptr<BlockIo>> io = NewUringBlockIo(file_.fd(), options_.queue_depth);
  ring->io = io.ok() ? *std::move(io) : NewPosixBlockIo(file_.fd());  // no io_uring: pread, one at a time
  if (options_.wrap_io) ring->io = options_.wrap_io(std::move(ring->io), index);
  return ring;
}

void SnapshotCore::ReturnRing(std::unique_ptr<SnapshotRing> ring, bool healthy) {
  const IoCounters& c = ring->io->counters();
  std::lock_guard<std::mutex> lock(rings_mu_);
  io_.reads += c.reads - ring->added.reads;
  io_.writes += c.writes - ring->added.writes;
  io_.bytes_read += c.bytes_read - ring->added.bytes_read;
  io_.bytes_written += c.bytes_written - ring->added.bytes_written;
  io_.submissions += c.submissions - ring->added.submissions;
  io_.depth_sum += c.depth_sum - ring->added.depth_sum;
  io_.registered += c.registered - ring->added.registered;
  ring->added = c;
  if (healthy) free_rings_.push_back(std::move(ring));
}

SnapshotStats SnapshotCore::stats() const {
  SnapshotStats s;
  s.lookups = lookups_.load(std::memory_order_relaxed);
  s.hits = hits_.load(std::memory_order_relaxed);
  s.misses = misses_.load(std::memory_order_relaxed);
  s.shared = shared_.load(std::memory_order_relaxed);
  s.rows_read = rows_read_.load(std::memory_order_relaxed);
  s.lazy_rows = lazy_rows_.load(std::memory_order_relaxed);
  s.reads = reads_.load(std::memory_order_relaxed);
  s.failed_reads = failed_reads_.load(std::memory_order_relaxed);
  s.evictions = evictions_.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(rings_mu_);
  s.rings = rings_made_;
  s.io = io_;
  return s;
}

}  // namespace cemb::ssd_internal

namespace cemb {

absl::Status SnapshotRequest::Started(absl::Status s) {
  if (s.ok()) {
    ++used_;
  } else {
    Release();  // the failed Start holds nothing of its call
  }
  return s;
}

absl::Status SnapshotRequest::Finish() {
  // Every table's rows installed before any wait for another request's.
  for (size_t k = 0; k < used_; ++k) parts_[k].core->Install(parts_[k].pins.get());
  for (size_t k = 0; k < used_; ++k) {
    if (!parts_[k].pins->started()) continue;  // finished by an earlier Finish
    if (absl::Status s = parts_[k].core->Finish(parts_[k].pins.get(), parts_[k].out); !s.ok()) {
      Release();
      return s;
    }
  }
  return absl::OkStatus();
}

void SnapshotRequest::Release() {
  for (size_t k = 0; k < used_; ++k) parts_[k].core->Release(parts_[k].pins.get());
  used_ = 0;
}

int64_t SnapshotRequest::pinned() const {
  int64_t n = 0;
  for (size_t k = 0; k < used_; ++k) n += parts_[k].pins->size();
  return n;
}

}  // namespace cemb
