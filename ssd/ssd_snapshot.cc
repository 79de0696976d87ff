// SsdCore::SaveSnapshot and LoadSnapshot (ssd/ssd_table.h is the contract,
// docs/ssd.md the format): the blocks ever written, copied between the rows
// file and a snapshot file with copy_file_range, or through the table's
// BlockIo where the kernel refuses it.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/file.h"
#include "base/status_macros.h"
#include "ssd/internal/ssd_core.h"

namespace cemb::ssd_internal {
namespace {

constexpr char kMagic[8] = {'C', 'E', 'M', 'B', 'S', 'S', 'D', 'S'};
constexpr uint32_t kVersion = 1;
constexpr uint64_t kCopyPiece = uint64_t{64} << 20;  // per copy_file_range call (progress, EINTR)
constexpr uint64_t kBatchBytes = uint64_t{4} << 20;  // per BlockIo batch when copy_file_range is not used

// The first bytes of a snapshot, in the machine's byte order (little-endian
// on x86-64 and AArch64). Then the bitmap (a uint64_t per 64 blocks, bit b of
// word b / 64 = block b was written), zeros up to data_offset, then the
// written blocks in block order.
struct Header {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;  // sizeof(Header)
  int64_t nvectors;
  int64_t row_bytes;
  int64_t block_bytes;
  int64_t nblocks;
  uint64_t seed;
  uint32_t has_seed;  // 0: rows never written read as zeros
  uint32_t reserved;
  int64_t written_blocks;
  uint64_t data_offset;  // header + bitmap rounded up to 4 KiB, so a reflink can share the blocks' extents
};
static_assert(sizeof(Header) == 80);

size_t BitmapWords(int64_t nblocks) { return static_cast<size_t>((nblocks + 63) / 64); }

uint64_t DataOffset(int64_t nblocks) {
  const uint64_t bytes = sizeof(Header) + BitmapWords(nblocks) * sizeof(uint64_t);
  return (bytes + kBlockBytes - 1) / kBlockBytes * kBlockBytes;
}

int64_t CountWritten(const std::vector<uint64_t>& bitmap) {
  int64_t n = 0;
  for (uint64_t w : bitmap) n += std::popcount(w);
  return n;
}

bool Bit(const std::vector<uint64_t>& bitmap, int64_t b) { return (bitmap[b >> 6] >> (b & 63)) & 1; }

// "12.3 of 40.0 GiB" (MiB below a GiB).
std::string Amount(uint64_t done, uint64_t total) {
  const bool gib = total >= (uint64_t{1} << 30);
  const double unit = gib ? 1 << 30 : 1 << 20;
  return absl::StrFormat("%.1f of %.1f %s", static_cast<double>(done) / unit, static_cast<double>(total) / unit,
                         gib ? "GiB" : "MiB");
}

std::string SeedName(bool has, uint64_t seed) { return has ? absl::StrCat(seed) : "none"; }

// Errors of base/ name the file and the call; this adds the table.
absl::Status Prefix(const std::string& table, absl::Status s) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(table, ": ", s.message()));
}

// Where the kernel cannot copy between these files (another file system
// before Linux 5.19, a file system without it): copy through the BlockIo.
bool CopyUnsupported(int err) { return err == EINVAL || err == EXDEV || err == EOPNOTSUPP || err == ENOSYS; }

}  // namespace

absl::Status SsdCore::BlockIoBatch(IoOp op, int64_t first, int64_t count, std::byte* buffer) {
  const auto bytes = static_cast<uint32_t>(layout.block_bytes);
  std::vector<BlockRequest> requests(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    requests[static_cast<size_t>(i)] = {op, layout.file_offset(first + i), buffer + i * layout.block_bytes, bytes,
                                        static_cast<uint64_t>(i)};
  }
  absl::Status error = file_.io().Submit(requests);
  if (!error.ok()) error = absl::Status(error.code(), absl::StrCat(name_, ": ", file_.name(), ": ", error.message()));
  done_.clear();
  while (file_.io().in_flight() > 0) {  // DrainIo ran first: every request in flight is ours
    if (absl::Status s = file_.io().Reap(file_.io().in_flight(), &done_); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(name_, ": ", file_.name(), ": ", s.message()));
    }
  }
  for (const BlockCompletion& c : done_) {
    if (c.result != layout.block_bytes && error.ok()) error = IoError(op, first + static_cast<int64_t>(c.tag), c.result);
  }
  return error;
}

absl::Status SsdCore::CopyBlocks(CopyTo to, int snapshot_fd, const std::string& snapshot_name,
                                 const std::vector<uint64_t>& bitmap, uint64_t data_offset,
                                 const SnapshotOptions& options, SnapshotInfo* info) {
  const bool save = to == CopyTo::kSnapshot;
  const auto bb = static_cast<uint64_t>(layout.block_bytes);
  const uint64_t total = static_cast<uint64_t>(CountWritten(bitmap)) * bb;
  uint64_t done = 0;
  absl::Time last = absl::Now();
  auto progress = [&] {
    if (!options.progress || absl::Now() - last < options.progress_every) return;
    last = absl::Now();
    options.progress(absl::StrCat(name_, save ? ": snapshot " : ": loading snapshot ", Amount(done, total)));
  };
  bool use_kernel = !options.force_block_io;
  std::unique_ptr<std::byte, decltype(&std::free)> buffer{nullptr, &std::free};
  const int64_t batch_blocks = std::max<int64_t>(1, static_cast<int64_t>(kBatchBytes / bb));
  uint64_t at = data_offset;  // the run's place in the snapshot
  for (int64_t b = 0; b < layout.nblocks;) {
    if (!Bit(bitmap, b)) {
      ++b;
      continue;
    }
    int64_t e = b + 1;
    while (e < layout.nblocks && Bit(bitmap, e)) ++e;
    const uint64_t len = static_cast<uint64_t>(e - b) * bb;
    const uint64_t done_before = done;
    for (uint64_t copied = 0; use_kernel && copied < len;) {
      loff_t rows_at = static_cast<loff_t>(layout.file_offset(b) + copied), snap_at = static_cast<loff_t>(at + copied);
      const size_t n = static_cast<size_t>(std::min(len - copied, kCopyPiece));
      const ssize_t r = save ? ::copy_file_range(file_.fd(), &rows_at, snapshot_fd, &snap_at, n, 0)
                             : ::copy_file_range(snapshot_fd, &snap_at, file_.fd(), &rows_at, n, 0);
      const int err = r < 0 ? errno : 0;
      if (err == EINTR) continue;
      if (CopyUnsupported(err)) {  // this run again, and every later one, through the BlockIo
        use_kernel = false;
        done = done_before;
        break;
      }
      if (r <= 0) {
        const std::string what = absl::StrCat(
            name_, ": copy_file_range of ", n, " bytes from ", save ? file_.name() : snapshot_name, " at offset ",
            save ? layout.file_offset(b) + copied : at + copied, " to ", save ? snapshot_name : file_.name(),
            " at offset ", save ? at + copied : layout.file_offset(b) + copied);
        if (r == 0) return absl::DataLossError(absl::StrCat(what, ": the source ended"));
        return absl::Status(absl::ErrnoToStatusCode(err), absl::StrCat(what, " failed: ", std::strerror(err)));
      }
      copied += static_cast<uint64_t>(r);
      done += static_cast<uint64_t>(r);
      progress();
    }
    if (!use_kernel) {
      if (buffer == nullptr) {
        buffer.reset(static_cast<std::byte*>(std::aligned_alloc(kIoAlignment, static_cast<size_t>(batch_blocks) * bb)));
      }
      for (int64_t c = b; c < e;) {
        const int64_t k = std::min(batch_blocks, e - c);
        const size_t n = static_cast<size_t>(k) * bb;
        const uint64_t snap_at = at + static_cast<uint64_t>(c - b) * bb;
        if (save) {
          CEMB_RETURN_IF_ERROR(BlockIoBatch(IoOp::kRead, c, k, buffer.get()));
          CEMB_RETURN_IF_ERROR(Prefix(name_, base::WriteAllAt(snapshot_fd, snapshot_name, buffer.get(), n, snap_at)));
        } else {
          if (::lseek(snapshot_fd, static_cast<off_t>(snap_at), SEEK_SET) < 0) {
            return Prefix(name_, base::ErrnoStatus(errno, snapshot_name, "seek"));
          }
          CEMB_RETURN_IF_ERROR(Prefix(name_, base::ReadExactly(snapshot_fd, snapshot_name, buffer.get(), n)));
          CEMB_RETURN_IF_ERROR(BlockIoBatch(IoOp::kWrite, c, k, buffer.get()));
        }
        c += k;
        done += n;
        progress();
      }
    }
    at += len;
    b = e;
  }
  info->copy_file_range = use_kernel;
  return absl::OkStatus();
}

absl::StatusOr<SnapshotInfo> SsdCore::SaveSnapshot(const std::string& path, const SnapshotOptions& options) {
  const absl::Time start = absl::Now();
  std::unique_lock<std::mutex> lock = Lock();
  if (!broken_.ok()) return broken_;
  CEMB_RETURN_IF_ERROR(FlushDirtyLocked());
  CEMB_RETURN_IF_ERROR(DrainIo());

  Header h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kVersion;
  h.header_bytes = sizeof(Header);
  h.nvectors = layout.nvectors;
  h.row_bytes = layout.row_bytes;
  h.block_bytes = layout.block_bytes;
  h.nblocks = layout.nblocks;
  h.has_seed = seed_.has_value();
  h.seed = seed_.value_or(0);
  h.written_blocks = CountWritten(written_);
  h.data_offset = DataOffset(layout.nblocks);
  std::string head(h.data_offset, '\0');
  std::memcpy(head.data(), &h, sizeof h);
  std::memcpy(head.data() + sizeof h, written_.data(), written_.size() * sizeof(uint64_t));

  SnapshotInfo info;
  info.written_blocks = h.written_blocks;
  info.file_bytes = h.data_offset + static_cast<uint64_t>(h.written_blocks * h.block_bytes);
  absl::StatusOr<base::AtomicFile> out = base::AtomicFile::Create(path);
  if (!out.ok()) return Prefix(name_, out.status());
  CEMB_RETURN_IF_ERROR(Prefix(name_, out->WriteAt(head.data(), head.size(), 0)));
  CEMB_RETURN_IF_ERROR(CopyBlocks(CopyTo::kSnapshot, out->fd(), out->tmp_path(), written_, h.data_offset, options, &info));
  CEMB_RETURN_IF_ERROR(Prefix(name_, out->Commit()));
  info.took = absl::Now() - start;
  return info;
}

absl::StatusOr<SnapshotInfo> SsdCore::LoadSnapshot(const std::string& path, const SnapshotOptions& options) {
  const absl::Time start = absl::Now();
  absl::StatusOr<base::File> in = base::File::OpenForReading(path);
  if (!in.ok()) return Prefix(name_, in.status());
  const uint64_t size = in->size();
  const std::string where = absl::StrCat(name_, ": ", path, ": ");
  auto truncated = [&](const std::string& what, uint64_t end) {
    return absl::DataLossError(absl::StrCat(where, "truncated ssd snapshot: it ends at offset ", size,
                                            ", before the end of its ", what, " at offset ", end));
  };

  // The whole file is checked before the table is touched.
  Header h{};
  if (size < sizeof h) return truncated("header", sizeof h);
  CEMB_RETURN_IF_ERROR(Prefix(name_, base::ReadExactly(in->fd(), path, &h, sizeof h)));
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, "not an ssd table snapshot (no CEMBSSDS magic)"));
  }
  if (h.version != kVersion || h.header_bytes != sizeof h) {
    return absl::InvalidArgumentError(absl::StrCat(where, "ssd snapshot format version ", h.version,
                                                   ", this build reads version ", kVersion));
  }
  auto differs = [&](const char* field, const std::string& theirs, const std::string& ours) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "the snapshot's ", field, " is ", theirs, ", the table's is ", ours));
  };
  if (h.nvectors != layout.nvectors) return differs("nvectors", absl::StrCat(h.nvectors), absl::StrCat(layout.nvectors));
  if (h.row_bytes != layout.row_bytes) return differs("row_bytes", absl::StrCat(h.row_bytes), absl::StrCat(layout.row_bytes));
  if (h.block_bytes != layout.block_bytes || h.nblocks != layout.nblocks) {
    return differs("block layout", absl::StrCat(h.nblocks, " blocks of ", h.block_bytes, " bytes"),
                   absl::StrCat(layout.nblocks, " blocks of ", layout.block_bytes, " bytes"));
  }
  if ((h.has_seed != 0) != seed_.has_value() || (seed_.has_value() && h.seed != *seed_)) {
    return differs("init_seed", SeedName(h.has_seed != 0, h.seed), SeedName(seed_.has_value(), seed_.value_or(0)));
  }
  if (h.data_offset != DataOffset(layout.nblocks)) {
    return absl::DataLossError(absl::StrCat(where, "corrupt ssd snapshot: its blocks start at offset ", h.data_offset,
                                            ", not ", DataOffset(layout.nblocks)));
  }
  std::vector<uint64_t> bitmap(BitmapWords(layout.nblocks));
  const uint64_t bitmap_end = sizeof h + bitmap.size() * sizeof(uint64_t);
  if (size < bitmap_end) return truncated("bitmap", bitmap_end);
  CEMB_RETURN_IF_ERROR(Prefix(name_, base::ReadExactly(in->fd(), path, bitmap.data(), bitmap.size() * sizeof(uint64_t))));
  const int64_t written = CountWritten(bitmap);
  const bool stray = layout.nblocks % 64 != 0 && (bitmap.back() >> (layout.nblocks % 64)) != 0;
  if (written != h.written_blocks || stray) {
    return absl::DataLossError(absl::StrCat(where, "corrupt ssd snapshot: its bitmap marks ", written,
                                            " blocks", stray ? " (some past the last block)" : "", ", its header ",
                                            h.written_blocks));
  }
  const uint64_t end = h.data_offset + static_cast<uint64_t>(written * layout.block_bytes);
  if (size < end) return truncated(absl::StrCat(written, " blocks"), end);
  if (size > end) {
    return absl::DataLossError(absl::StrCat(where, "corrupt ssd snapshot: ", size - end,
                                            " bytes after its last block (offset ", end, ")"));
  }

  std::unique_lock<std::mutex> lock = Lock();
  if (pinned_slots_ > 0) {
    return absl::FailedPreconditionError(absl::StrCat(name_, ": LoadSnapshot of ", path, " while ", pinned_slots_,
                                                      " rows are pinned (Unpin every batch first)"));
  }
  CEMB_RETURN_IF_ERROR(DrainIo());
  // Every resident row goes, dirty or not; until the copy is done the rows are undefined.
  free_.clear();
  for (int64_t s = capacity - 1; s >= 0; --s) {
    if (slot_row_[s] >= 0) map[slot_row_[s]].store(0, std::memory_order_release);
    slot_row_[s] = -1;
    flags[s].store(0, std::memory_order_relaxed);
    free_.push_back(static_cast<uint32_t>(s));  // slot 0 first
  }
  hand_ = 0;
  std::fill(written_.begin(), written_.end(), 0);
  SnapshotInfo info;
  info.written_blocks = written;
  info.file_bytes = size;
  if (absl::Status s = CopyBlocks(CopyTo::kRows, in->fd(), path, bitmap, h.data_offset, options, &info); !s.ok()) {
    broken_ = absl::Status(s.code(), absl::StrCat(s.message(), " (during LoadSnapshot: the table's rows are undefined "
                                                               "until a LoadSnapshot succeeds)"));
    return broken_;
  }
  written_ = std::move(bitmap);
  broken_ = absl::OkStatus();
  info.took = absl::Now() - start;
  return info;
}

}  // namespace cemb::ssd_internal
