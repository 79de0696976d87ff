// SsdCore::SaveSnapshot and LoadSnapshot (ssd/ssd_table.h is the contract,
// docs/ssd.md the format): the rows that have a copy in the log, compacted
// into one file (row ids, then the rows), and appended to a fresh log on load.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/file.h"
#include "base/status_macros.h"
#include "ssd/internal/snapshot_format.h"
#include "ssd/internal/ssd_core.h"

namespace cemb::ssd_internal {
namespace {

constexpr int64_t kChunkRows = int64_t{1} << 16;  // rows per read or write of the snapshot file

using Header = SnapshotHeader;
constexpr uint64_t kIdsOffset = kSnapshotIdsOffset;

// "12.3 of 40.0 GiB" (MiB below a GiB).
std::string Amount(uint64_t done, uint64_t total) {
  const bool gib = total >= (uint64_t{1} << 30);
  const double unit = gib ? 1 << 30 : 1 << 20;
  return absl::StrFormat("%.1f of %.1f %s", static_cast<double>(done) / unit, static_cast<double>(total) / unit,
                         gib ? "GiB" : "MiB");
}

struct AlignedBuffer {
  explicit AlignedBuffer(size_t bytes)
      : data(static_cast<std::byte*>(std::aligned_alloc(kIoAlignment, (bytes + kIoAlignment - 1) / kIoAlignment *
                                                                          kIoAlignment)),
             &std::free) {}
  std::unique_ptr<std::byte, decltype(&std::free)> data{nullptr, &std::free};
};

// Calls progress() with a line at most every options.progress_every.
class Progress {
 public:
  Progress(const SnapshotOptions& options, std::string prefix, uint64_t total)
      : options_(options), prefix_(std::move(prefix)), total_(total), last_(absl::Now()) {}
  void Add(uint64_t bytes) {
    done_ += bytes;
    if (!options_.progress || absl::Now() - last_ < options_.progress_every) return;
    last_ = absl::Now();
    options_.progress(absl::StrCat(prefix_, Amount(done_, total_)));
  }

 private:
  const SnapshotOptions& options_;
  std::string prefix_;
  uint64_t total_, done_ = 0;
  absl::Time last_;
};

}  // namespace

absl::Status SsdCore::SyncIo(IoOp op, uint64_t offset, std::byte* buffer, int64_t bytes) {
  const BlockRequest r{op, offset, buffer, static_cast<uint32_t>(bytes), 0};
  absl::Status error = file_.io().Submit({&r, 1});
  std::vector<BlockCompletion> done;
  while (file_.io().in_flight() > 0) {  // DrainIo ran first: every request in flight is this one
    if (absl::Status s = file_.io().Reap(1, &done); !s.ok()) error.Update(s);
    if (!error.ok()) break;
  }
  if (!error.ok()) return absl::Status(error.code(), absl::StrCat(name_, ": ", file_.name(), ": ", error.message()));
  if (done.size() != 1 || done[0].result != bytes) {
    return IoError(op, offset, bytes, done.empty() ? -EIO : done[0].result);
  }
  return absl::OkStatus();
}

absl::StatusOr<SnapshotInfo> SsdCore::SaveSnapshot(const std::string& path, const SnapshotOptions& options) {
  const absl::Time start = absl::Now();
  std::unique_lock<std::mutex> lock = Lock();
  CpuTimer cpu(&stats_.cpu);
  if (!broken_.ok()) return broken_;
  CEMB_RETURN_IF_ERROR(FlushDirtyLocked());
  CEMB_RETURN_IF_ERROR(DrainIo());

  // Every row with a copy in the log, once: after the flush a resident row's
  // copy is its value. Rows without one are their initial values.
  int64_t rows = 0;
  for (uint32_t live : seg_live_) rows += live;
  Header h{};
  std::memcpy(h.magic, kSnapshotMagic, sizeof kSnapshotMagic);
  h.version = kSnapshotVersion;
  h.header_bytes = sizeof(Header);
  h.nvectors = nvectors_;
  h.row_bytes = static_cast<int64_t>(row_bytes_);
  h.has_seed = seed_.has_value();
  h.seed = seed_.value_or(0);
  h.rows = rows;
  h.ids_offset = kIdsOffset;
  h.data_offset = SnapshotDataOffset(rows);
  SnapshotInfo info;
  info.rows = rows;
  info.file_bytes = h.data_offset + static_cast<uint64_t>(rows) * row_bytes_;

  absl::StatusOr<base::AtomicFile> out = base::AtomicFile::Create(path);
  if (!out.ok()) return base::WithPrefix(name_, out.status());
  std::string head(kIdsOffset, '\0');
  std::memcpy(head.data(), &h, sizeof h);
  CEMB_RETURN_IF_ERROR(base::WithPrefix(name_, out->WriteAt(head.data(), head.size(), 0)));

  Progress progress(options, absl::StrCat(name_, ": snapshot "), static_cast<uint64_t>(rows) * row_bytes_);
  AlignedBuffer segment(static_cast<size_t>(log.segment_bytes));
  std::vector<uint32_t> ids;
  std::vector<std::byte> data;
  ids.reserve(static_cast<size_t>(kChunkRows));
  data.reserve(static_cast<size_t>(kChunkRows) * row_bytes_);
  int64_t written = 0;
  auto write_chunk = [&]() -> absl::Status {
    const auto n = static_cast<int64_t>(ids.size());
    CEMB_RETURN_IF_ERROR(base::WithPrefix(name_, out->WriteAt(ids.data(), ids.size() * sizeof(uint32_t),
                                                    h.ids_offset + static_cast<uint64_t>(written) * sizeof(uint32_t))));
    CEMB_RETURN_IF_ERROR(base::WithPrefix(name_, out->WriteAt(data.data(), data.size(),
                                                    h.data_offset + static_cast<uint64_t>(written) * row_bytes_)));
    progress.Add(data.size());
    written += n;
    ids.clear();
    data.clear();
    return absl::OkStatus();
  };
  for (int64_t g = 0; g < log.nsegments; ++g) {
    const auto gi = static_cast<size_t>(g);
    if (seg_live_[gi] == 0) continue;
    const std::byte* image = seg_buffer_[gi] >= 0 ? buffers_[static_cast<size_t>(seg_buffer_[gi])].data.get() : nullptr;
    if (image == nullptr) {
      CEMB_RETURN_IF_ERROR(SyncIo(IoOp::kRead, log.segment_offset(g), segment.data.get(), log.segment_bytes));
      image = segment.data.get();
    }
    const auto* seg_ids = reinterpret_cast<const uint32_t*>(image);
    for (int64_t i = 0; i < log.segment_rows; ++i) {
      const uint32_t row = seg_ids[i];
      if (row == LogLayout::kNoRow || row >= nvectors_) continue;
      uint32_t slot = 0;
      if (HolderOf(row, static_cast<uint32_t>(g * log.segment_rows + i), &slot) == Holder::kDead) continue;
      ids.push_back(row);
      const std::byte* bytes = image + log.offset_in_segment(i);
      data.insert(data.end(), bytes, bytes + row_bytes_);
      if (static_cast<int64_t>(ids.size()) == kChunkRows) CEMB_RETURN_IF_ERROR(write_chunk());
    }
  }
  CEMB_RETURN_IF_ERROR(write_chunk());
  if (written != rows) {
    return absl::InternalError(absl::StrCat(name_, ": the ssd log counts ", rows, " live rows, its segments hold ",
                                            written));
  }
  CEMB_RETURN_IF_ERROR(base::WithPrefix(name_, out->Commit()));
  info.took = absl::Now() - start;
  return info;
}

absl::StatusOr<SnapshotInfo> SsdCore::LoadSnapshot(const std::string& path, const SnapshotOptions& options) {
  const absl::Time start = absl::Now();
  absl::StatusOr<base::File> in = base::File::OpenForReading(path);
  if (!in.ok()) return base::WithPrefix(name_, in.status());
  const uint64_t size = in->size();
  const std::string where = absl::StrCat(name_, ": ", path, ": ");
  // The whole file is checked before the table is touched.
  Header h{};
  const auto row_bytes = static_cast<int64_t>(row_bytes_);
  if (size >= 16) CEMB_RETURN_IF_ERROR(base::WithPrefix(name_, base::ReadExactly(in->fd(), path, &h, 16)));
  if (size >= sizeof h) {
    CEMB_RETURN_IF_ERROR(
        base::WithPrefix(name_, base::ReadExactly(in->fd(), path, reinterpret_cast<char*>(&h) + 16, sizeof h - 16)));
  }
  CEMB_RETURN_IF_ERROR(CheckSnapshotHeader(h, size, where, nvectors_, row_bytes, /*trained rows=*/0));
  // Every id in range, none twice.
  std::vector<uint32_t> ids(static_cast<size_t>(std::min(h.rows, kChunkRows)));
  {
    SnapshotIdCheck check(where, nvectors_, h.ids_offset);
    for (int64_t k = 0; k < h.rows; k += kChunkRows) {
      const int64_t n = std::min(kChunkRows, h.rows - k);
      CEMB_RETURN_IF_ERROR(base::WithPrefix(name_, base::ReadExactlyAt(in->fd(), path, ids.data(), static_cast<size_t>(n) * 4,
                                                             h.ids_offset + static_cast<uint64_t>(k) * 4)));
      CEMB_RETURN_IF_ERROR(check.Add(ids.data(), n, k));
    }
  }

  std::unique_lock<std::mutex> lock = Lock();
  CpuTimer cpu(&stats_.cpu);
  if (pinned_slots_ > 0) {
    return absl::FailedPreconditionError(absl::StrCat(name_, ": LoadSnapshot of ", path, " while ", pinned_slots_,
                                                      " rows are pinned (Unpin every batch first)"));
  }
  CEMB_RETURN_IF_ERROR(DrainIo());
  // Every row goes, resident, dirty or in the log; until the copy is done the rows are undefined.
  Reset();
  // The rows the snapshot does not hold are its table's initial rows: the
  // table takes the snapshot's init seed (or none), whatever its own was.
  seed_ = h.has_seed != 0 ? std::optional<uint64_t>(h.seed) : std::nullopt;
  Progress progress(options, absl::StrCat(name_, ": loading snapshot "), static_cast<uint64_t>(h.rows) * row_bytes_);
  std::vector<std::byte> data(static_cast<size_t>(std::min(h.rows, kChunkRows)) * row_bytes_);
  auto copy = [&]() -> absl::Status {
    for (int64_t k = 0; k < h.rows; k += kChunkRows) {
      const int64_t n = std::min(kChunkRows, h.rows - k);
      CEMB_RETURN_IF_ERROR(base::WithPrefix(name_, base::ReadExactlyAt(in->fd(), path, ids.data(), static_cast<size_t>(n) * 4,
                                                             h.ids_offset + static_cast<uint64_t>(k) * 4)));
      CEMB_RETURN_IF_ERROR(base::WithPrefix(
          name_, base::ReadExactlyAt(in->fd(), path, data.data(), static_cast<size_t>(n) * row_bytes_,
                                     h.data_offset + static_cast<uint64_t>(k) * row_bytes_)));
      for (int64_t i = 0; i < n; ++i) {
        const uint32_t row = ids[static_cast<size_t>(i)];
        CEMB_ASSIGN_OR_RETURN(const uint32_t d, Append(row, data.data() + static_cast<size_t>(i) * row_bytes_));
        map[row].store(kOnDisk | d, std::memory_order_release);
      }
      progress.Add(static_cast<uint64_t>(n) * row_bytes_);
    }
    return FlushLog();
  };
  if (absl::Status s = copy(); !s.ok()) {
    broken_ = absl::Status(s.code(), absl::StrCat(s.message(), " (during LoadSnapshot: the table's rows are undefined "
                                                               "until a LoadSnapshot succeeds)"));
    return broken_;
  }
  broken_ = absl::OkStatus();
  SnapshotInfo info;
  info.rows = h.rows;
  info.file_bytes = size;
  info.took = absl::Now() - start;
  return info;
}

}  // namespace cemb::ssd_internal
