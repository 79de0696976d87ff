#include "ssd/served_snapshot.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <numeric>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "base/status_macros.h"
#include "ssd/internal/snapshot_format.h"

namespace cemb {
namespace {

constexpr int64_t kChunkBlocks = 256;  // 1 MiB of rows a write

}  // namespace

absl::Status WriteServedSnapshot(const std::string& path, const ServedSnapshotOptions& o, const RowSource& source) {
  using ssd_internal::SnapshotHeader;
  const int64_t row_bytes = RowFormatBytes(o.format, o.dim);
  if (o.dim < 1 || o.nvectors < 1 || row_bytes > static_cast<int64_t>(kBlockBytes) ||
      o.nvectors >= (int64_t{1} << 32)) {
    return absl::InvalidArgumentError(absl::StrCat(o.name, ": cannot write ", o.nvectors, " rows of ", o.dim, " in ",
                                                   RowFormatName(o.format), " (", row_bytes,
                                                   " bytes a row) as a served snapshot"));
  }
  SnapshotHeader h{};
  std::memcpy(h.magic, ssd_internal::kSnapshotMagic, sizeof ssd_internal::kSnapshotMagic);
  h.version = ssd_internal::kSnapshotVersion;
  h.header_bytes = sizeof h;
  h.nvectors = o.nvectors;
  h.row_bytes = row_bytes;
  h.row_format = static_cast<uint32_t>(o.format);
  h.rows = o.nvectors;
  h.ids_offset = ssd_internal::kSnapshotIdsOffset;
  h.data_offset = ssd_internal::SnapshotDataOffset(h.rows);
  const ssd_internal::SnapshotRows layout =
      ssd_internal::SnapshotRowsOf(h.row_format, h.data_offset, static_cast<uint64_t>(row_bytes));

  absl::StatusOr<base::AtomicFile> created = base::AtomicFile::Create(path);
  if (!created.ok()) return base::WithPrefix(o.name, created.status());
  base::AtomicFile out = *std::move(created);
  std::string head(ssd_internal::kSnapshotIdsOffset, '\0');
  std::memcpy(head.data(), &h, sizeof h);
  CEMB_RETURN_IF_ERROR(base::WithPrefix(o.name, out.WriteAt(head.data(), head.size(), 0)));
  {  // the ids: 0 .. nvectors - 1
    std::vector<uint32_t> ids;
    constexpr int64_t kIds = int64_t{1} << 18;
    for (int64_t first = 0; first < o.nvectors; first += kIds) {
      ids.resize(static_cast<size_t>(std::min(kIds, o.nvectors - first)));
      std::iota(ids.begin(), ids.end(), static_cast<uint32_t>(first));
      CEMB_RETURN_IF_ERROR(base::WithPrefix(o.name, out.WriteAt(ids.data(), ids.size() * sizeof(uint32_t),
                                                       h.ids_offset + static_cast<uint64_t>(first) * 4)));
    }
  }
  // The rows, kChunkBlocks blocks at a time, packed as the readers expect.
  const auto per_block = static_cast<int64_t>(layout.per_block);
  const int64_t chunk_rows = per_block * kChunkBlocks;
  std::vector<float> values(static_cast<size_t>(chunk_rows * o.dim));
  std::vector<std::byte> blocks(static_cast<size_t>(kChunkBlocks) * kBlockBytes);
  for (int64_t first = 0; first < o.nvectors; first += chunk_rows) {
    const int64_t n = std::min(chunk_rows, o.nvectors - first);
    CEMB_RETURN_IF_ERROR(source(first, std::span<float>(values.data(), static_cast<size_t>(n * o.dim))));
    std::fill(blocks.begin(), blocks.end(), std::byte{0});
    for (int64_t i = 0; i < n; ++i) {
      const uint64_t at = layout.offset(static_cast<uint64_t>(first + i)) - layout.offset(static_cast<uint64_t>(first));
      EncodeRow(o.format, std::span<const float>(values.data() + i * o.dim, static_cast<size_t>(o.dim)),
                blocks.data() + at);
    }
    const int64_t nblocks = (n + per_block - 1) / per_block;
    CEMB_RETURN_IF_ERROR(base::WithPrefix(o.name, out.WriteAt(blocks.data(), static_cast<size_t>(nblocks) * kBlockBytes,
                                                     layout.offset(static_cast<uint64_t>(first)))));
  }
  return base::WithPrefix(o.name, out.Commit());
}

namespace ssd_internal {

namespace {

// A served snapshot checked against the table it is opened for: its file,
// header, and its rows' layout in the file.
struct OpenedServed {
  base::File file;
  SnapshotHeader header;
  SnapshotRows rows;
};

absl::StatusOr<OpenedServed> OpenServed(const std::string& path, const std::string& name, int64_t nvectors,
                                        int64_t row_bytes, RowFormat format) {
  const std::string where = absl::StrCat(name, ": ", path, ": ");
  absl::StatusOr<base::File> file = base::File::OpenForReading(path);
  if (!file.ok()) return base::WithPrefix(name, file.status());
  const uint64_t size = file->size();
  SnapshotHeader h{};
  CEMB_RETURN_IF_ERROR(base::WithPrefix(name, base::ReadExactlyAt(file->fd(), path, &h, std::min<uint64_t>(size, sizeof h), 0)));
  CEMB_RETURN_IF_ERROR(CheckSnapshotHeader(h, size, where, nvectors, row_bytes, static_cast<uint32_t>(format)));
  if (h.row_format == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "it holds a trained table's rows, not rows converted for serving (dlrm-convert)"));
  }
  {  // the ids: 0 .. nvectors - 1, in order
    std::vector<uint32_t> ids;
    constexpr int64_t kIds = int64_t{1} << 18;
    for (int64_t first = 0; first < h.rows; first += kIds) {
      ids.resize(static_cast<size_t>(std::min(kIds, h.rows - first)));
      CEMB_RETURN_IF_ERROR(base::WithPrefix(name, base::ReadExactlyAt(file->fd(), path, ids.data(), ids.size() * 4,
                                                           h.ids_offset + static_cast<uint64_t>(first) * 4)));
      for (size_t i = 0; i < ids.size(); ++i) {
        if (ids[i] != static_cast<uint64_t>(first) + i) {
          return absl::DataLossError(absl::StrCat(where, "corrupt served snapshot: row id ", ids[i], " at offset ",
                                                  h.ids_offset + (static_cast<uint64_t>(first) + i) * 4,
                                                  ", expected ", static_cast<uint64_t>(first) + i));
        }
      }
    }
  }
  const SnapshotRows rows = SnapshotRowsOf(h.row_format, h.data_offset, static_cast<uint64_t>(row_bytes));
  return OpenedServed{*std::move(file), h, rows};
}

}  // namespace

absl::StatusOr<ServedRows> ReadServedRows(const std::string& path, const std::string& name, int64_t nvectors,
                                          int64_t row_bytes, RowFormat format, const TierOptions& tier) {
  CEMB_ASSIGN_OR_RETURN(OpenedServed f, OpenServed(path, name, nvectors, row_bytes, format));
  const uint64_t bytes = f.rows.end(static_cast<uint64_t>(f.header.rows)) - f.header.data_offset;
  absl::StatusOr<Region> region =
      Region::Allocate(tier.kind == TierKind::kDram ? TierOptions::DramFor(bytes) : tier, bytes);
  if (!region.ok()) return base::WithPrefix(name, region.status());
  CEMB_RETURN_IF_ERROR(
      base::WithPrefix(name, base::ReadExactlyAt(f.file.fd(), path, region->data(), bytes, f.header.data_offset)));
  return ServedRows{*std::move(region), SnapshotRowsOf(f.header.row_format, 0, static_cast<uint64_t>(row_bytes))};
}

}  // namespace ssd_internal

absl::Status ForEachServedRow(const std::string& path, const std::string& name, int64_t nvectors, int64_t row_bytes,
                              RowFormat format, const std::function<void(int64_t row, const std::byte* bytes)>& row) {
  CEMB_ASSIGN_OR_RETURN(ssd_internal::OpenedServed f, ssd_internal::OpenServed(path, name, nvectors, row_bytes, format));
  const auto chunk_rows = static_cast<int64_t>(f.rows.per_block) * kChunkBlocks;
  std::vector<std::byte> chunk(static_cast<size_t>(kChunkBlocks) * kBlockBytes);
  for (int64_t first = 0; first < f.header.rows; first += chunk_rows) {
    const int64_t n = std::min(chunk_rows, f.header.rows - first);
    const uint64_t begin = f.rows.offset(static_cast<uint64_t>(first));
    CEMB_RETURN_IF_ERROR(base::WithPrefix(
        name, base::ReadExactlyAt(f.file.fd(), path, chunk.data(), f.rows.end(static_cast<uint64_t>(first + n)) - begin,
                                  begin)));
    for (int64_t i = 0; i < n; ++i) row(first + i, chunk.data() + (f.rows.offset(static_cast<uint64_t>(first + i)) - begin));
  }
  return absl::OkStatus();
}
}  // namespace cemb
