// WriteServedSnapshot: a table's rows converted for serving (embedding/
// row_format.h: fp32, bf16, fp16, int8 row-wise), written as an ssd
// snapshot that SnapshotTable<T> of the format's element type serves in
// place, and ServedTable<T> (below) holds whole in DRAM.
// Every row is in it, in row order, features only (no optimizer state);
// rows are packed whole into 4 KiB blocks, none crossing one
// (ssd/internal/snapshot_format.h, SnapshotRows), so a row is one 4 KiB
// read. docs/serving.md ("Smaller rows for serving") says how a model is
// converted (dlrm-convert).
//
// The file is written atomically (base::AtomicFile: a temporary, fsync,
// rename): a failure leaves no file at `path`.
//
//   CEMB_RETURN_IF_ERROR(WriteServedSnapshot("/srv/emb_l.3.ssd", {.name = "t3", .nvectors = n, .dim = 64,
//       .format = RowFormat::kInt8}, [&](int64_t first, std::span<float> rows) { ...fp32 rows... }));
//   CEMB_ASSIGN_OR_RETURN(auto t, ServedTable<int8_rowwise>::Load("/srv/emb_l.3.ssd", {.name = "t3",
//       .nvectors = n, .featuresize = 64}));
//   const int8_rowwise* row = t.rowpointer(17);  // 64 bytes, then its scale and bias
#ifndef CEMB_SSD_SERVED_SNAPSHOT_H_
#define CEMB_SSD_SERVED_SNAPSHOT_H_

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "embedding/memory.h"
#include "embedding/row_format.h"
#include "embedding/simple_table.h"
#include "ssd/internal/snapshot_format.h"

namespace cemb {

struct ServedSnapshotOptions {
  std::string name = "table";  // for messages
  int64_t nvectors = 0;
  int64_t dim = 0;
  RowFormat format = RowFormat::kFp32;
};

// Fills `rows` (n x dim floats, row-major) with the fp32 rows first ..
// first + n - 1.
using RowSource = std::function<absl::Status(int64_t first, std::span<float> rows)>;

// Errors: InvalidArgument for a shape (dim, nvectors < 1; a row over 4 KiB;
// nvectors >= 2^32); the source's error; a write's (naming the file).
[[nodiscard]] absl::Status WriteServedSnapshot(const std::string& path, const ServedSnapshotOptions& options,
                                               const RowSource& rows);

namespace ssd_internal {
// A served snapshot's rows read whole into DRAM, as the file packs them.
struct ServedRows {
  Region region;
  SnapshotRows layout;  // its data_offset is region's first byte
};
absl::StatusOr<ServedRows> ReadServedRows(const std::string& path, const std::string& name, int64_t nvectors,
                                          int64_t row_bytes, RowFormat format, const TierOptions& tier);
}  // namespace ssd_internal

// Calls row(r, its row_bytes bytes) for every row r of a served snapshot,
// in order, reading the file 1 MiB at a time (never holding it whole: for
// a table copied into storage of its own, e.g. a CachedTable's slow tier).
// Errors: ServedTable::Load's.
[[nodiscard]] absl::Status ForEachServedRow(const std::string& path, const std::string& name, int64_t nvectors,
                                            int64_t row_bytes, RowFormat format,
                                            const std::function<void(int64_t row, const std::byte* bytes)>& row);

namespace ssd_internal {
}  // namespace ssd_internal

// ServedTable<T>: a served snapshot (WriteServedSnapshot, rows in T's
// format) read whole into memory, read only: the rowpointer interface over
// the rows as the file packs them (no per-row word). The memory is
// table.tier's: DRAM (the default), or a slow tier (TierOptions::Pmem: CXL
// or persistent memory through libpmem2, read there directly, no cache).
// Safe to read from any number of threads.
// Errors of Load: InvalidArgument for a snapshot of another shape or
// format, or one not written for serving; DataLoss for a truncated or
// corrupt one (naming the offset); a read's error (naming the file).
template <RowElement T>
class ServedTable {
 public:
  using value_type = T;
  static constexpr int64_t kFeatureSize = kDynamic;

  [[nodiscard]] static absl::StatusOr<ServedTable> Load(const std::string& path, const TableOptions& table) {
    absl::StatusOr<TableOptions> shape = CheckedShape<T, kDynamic>(table);
    if (!shape.ok()) return shape.status();
    absl::StatusOr<ssd_internal::ServedRows> rows = ssd_internal::ReadServedRows(
        path, table.name, table.nvectors, RowFeatureBytes<T>(shape->featuresize), kRowFormatOf<T>, table.tier);
    if (!rows.ok()) return rows.status();
    return ServedTable(*std::move(rows), table.name, table.nvectors, shape->featuresize);
  }

  int64_t featuresize() const { return featuresize_; }
  int64_t nvectors() const { return nvectors_; }
  const std::string& name() const { return name_; }
  [[gnu::always_inline]] T* rowpointer(int64_t row, Access = Access::kForward) const {
    return reinterpret_cast<T*>(rows_.region.data() + rows_.layout.offset(static_cast<uint64_t>(row)));
  }
  size_t bytes() const { return rows_.region.size(); }

 private:
  ServedTable(ssd_internal::ServedRows rows, std::string name, int64_t nvectors, int64_t featuresize)
      : rows_(std::move(rows)), name_(std::move(name)), nvectors_(nvectors), featuresize_(featuresize) {}

  ssd_internal::ServedRows rows_;
  std::string name_;
  int64_t nvectors_;
  int64_t featuresize_;
};

}  // namespace cemb

#endif  // CEMB_SSD_SERVED_SNAPSHOT_H_
