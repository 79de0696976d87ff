// SnapshotTable<T, D>: an ssd snapshot (SsdTable::SaveSnapshot) served in
// place, read only, from many request threads. The snapshot file is opened
// once, with O_DIRECT, and read where it is: a row -> position map is built
// from its id area at Open (the whole header and id area are checked then);
// nothing is copied into a log, no file is created, nothing is written.
// Rows not in the snapshot are their initial values (the snapshot's seed,
// InitRowUniform of embedding/table_io.h) or zeros, computed when first
// asked. DRAM holds a pool of slots of the rows' features (a snapshot's
// optimizer state is never read) and two words per row. docs/ssd.md
// ("Serving reads") is the design.
//
// A request (one thread) resolves its rows together: Resolve(rows, &pins,
// out) pins every resident row with no lock; the request's missed rows get
// slots (CLOCK over the unpinned ones, beside the readers) and are read
// with one batch of io_uring reads on a ring the request has to itself
// (one read per run of adjacent 4 KiB blocks), so its thread waits only
// for its own reads; a row another request is reading is waited for, not
// read twice. out[i] is then the row's features, valid until
// Release(&pins), which the request calls when its kernels are done.
//
// Errors: a row out of range is InvalidArgument; a failed or short read is
// DataLoss naming the table, the file and the offset ("t0: /ckpt/emb0.ssd:
// read of 4096 bytes at offset 12288 failed: Input/output error"): that
// request gets it and holds no pins; the rows stay not resident and the
// next request reads them again. A request that needs more slots than are
// unpinned is ResourceExhausted. Open refuses a snapshot of another shape
// (InvalidArgument) and a short or corrupt one (DataLoss, naming the offset).
//
// Thread safety: Resolve and Release from any number of threads, each with
// its own SnapshotPins. The file stays open for the table's life (the
// checkpoint's directory may be deleted meanwhile).
//
// Example:
//   CEMB_ASSIGN_OR_RETURN(auto t, SnapshotTable<float, 64>::Open({.name = "emb0", .nvectors = 1 << 22},
//                                   {.path = "/ckpt/step-100/emb0.ssd", .capacity_bytes = 1 << 30}));
//   SnapshotPins pins;  std::vector<const float*> rows(indices.size());
//   CEMB_RETURN_IF_ERROR(t.Resolve(indices, &pins, rows));
//   PooledSumResolved<float>(rows, offsets, t.featuresize(), Pooling::kSum, {}, out, ld);
//   t.Release(&pins);
#ifndef CEMB_SSD_SNAPSHOT_TABLE_H_
#define CEMB_SSD_SNAPSHOT_TABLE_H_

#include <cmath>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "embedding/simple_table.h"
#include "embedding/table_io.h"
#include "embedding/types.h"
#include "ssd/internal/snapshot_core.h"

namespace cemb {

template <StorageType T, int64_t D = kDynamic>
class SnapshotTable {
 public:
  using value_type = T;
  static_assert(D == kDynamic || D > 0);

  // Opens options.path for a table of table's shape (name, nvectors,
  // featuresize, state_floats: the snapshot's rows are featuresize T and
  // state_floats floats); table.tier is not used. Reads the header and the
  // id area (4 bytes a row in the snapshot), nothing else.
  [[nodiscard]] static absl::StatusOr<SnapshotTable> Open(const TableOptions& table,
                                                          const SnapshotTableOptions& options) {
    absl::StatusOr<TableOptions> shape = CheckedShape<T, D>(table);
    if (!shape.ok()) return shape.status();
    const int64_t d = shape->featuresize;
    const size_t feature_bytes = static_cast<size_t>(d) * sizeof(T);
    absl::StatusOr<std::unique_ptr<ssd_internal::SnapshotCore>> core = ssd_internal::SnapshotCore::Open(
        table.name, table.nvectors, d, feature_bytes, feature_bytes + static_cast<size_t>(table.state_floats) * 4,
        options, &SnapshotTable::InitRow);
    if (!core.ok()) return core.status();
    return SnapshotTable(*std::move(core), d);
  }

  SnapshotTable(SnapshotTable&&) noexcept = default;
  SnapshotTable& operator=(SnapshotTable&&) noexcept = default;

  constexpr int64_t featuresize() const {
    if constexpr (D != kDynamic) {
      return D;
    } else {
      return featuresize_;
    }
  }
  int64_t nvectors() const { return core_->nvectors(); }
  const std::string& name() const { return core_->name(); }

  // out[i] = rows[i]'s features (featuresize() T), resident and pinned in
  // *pins until Release(pins). On error nothing of this call stays pinned.
  // REQUIRES: out.size() == rows.size(); *pins used by this thread only.
  // NOTE: waits for the request's own reads and for rows of it that other
  // requests are reading; hits cost one load and one atomic add each.
  [[nodiscard]] absl::Status Resolve(std::span<const int64_t> rows, SnapshotPins* pins, std::span<const T*> out) {
    return core_->Resolve(rows, pins, reinterpret_cast<const std::byte**>(out.data()));
  }
  [[nodiscard]] absl::Status Resolve(std::span<const int32_t> rows, SnapshotPins* pins, std::span<const T*> out) {
    return core_->Resolve(rows, pins, reinterpret_cast<const std::byte**>(out.data()));
  }
  // Unpins every row *pins holds (the request's kernels are done).
  void Release(SnapshotPins* pins) { core_->Release(pins); }

  SnapshotStats stats() const { return core_->stats(); }
  int64_t capacity_rows() const { return core_->capacity(); }
  size_t slot_bytes() const { return core_->stride(); }
  // Rows the snapshot holds (the others are computed from its seed).
  int64_t snapshot_rows() const { return core_->snapshot_rows(); }
  const std::string& path() const { return core_->path(); }
  bool direct() const { return core_->direct(); }
  int fd() const { return core_->fd(); }
  bool is_resident(int64_t row) const { return core_->is_resident(row); }

 private:
  SnapshotTable(std::unique_ptr<ssd_internal::SnapshotCore> core, int64_t featuresize)
      : core_(std::move(core)), featuresize_(featuresize) {}
  static void InitRow(uint64_t seed, int64_t nvectors, int64_t row, int64_t featuresize, void* out) {
    InitRowUniform(seed, nvectors, row, std::span<T>(static_cast<T*>(out), static_cast<size_t>(featuresize)));
  }

  std::unique_ptr<ssd_internal::SnapshotCore> core_;
  int64_t featuresize_;
};

// A request's pooled rows from resolved row addresses (SnapshotTable::Resolve):
//   out[b * ld + c] = s_b * sum_{j in [offsets[b], offsets[b+1])} w_j * rows[j][c]
//   w_j = weights[j] or 1; s_b = 1/|bag| for kMean, else 1; fp32, in index order.
// Equal to TableKernels' pooled_lookup of the same rows (each column summed
// in index order; a weighted row by fma, as the kernels do): bit for bit
// unweighted, and weighted in an optimised build.
// Scalar: a plain loop, not the ISA-dispatched kernels.
template <typename T>
void PooledSumResolved(std::span<const T* const> rows, std::span<const int64_t> offsets, int64_t featuresize,
                       Pooling pooling, std::span<const float> weights, float* out, int64_t ld) {
  for (size_t b = 0; b + 1 < offsets.size(); ++b) {
    float* o = out + static_cast<int64_t>(b) * ld;
    for (int64_t c = 0; c < featuresize; ++c) o[c] = 0.0f;
    for (int64_t j = offsets[b]; j < offsets[b + 1]; ++j) {
      const T* r = rows[static_cast<size_t>(j)];
      if (weights.empty()) {
        for (int64_t c = 0; c < featuresize; ++c) o[c] += ToFloat(r[c]);
      } else {
        const float w = weights[static_cast<size_t>(j)];
        for (int64_t c = 0; c < featuresize; ++c) o[c] = std::fma(ToFloat(r[c]), w, o[c]);
      }
    }
    if (pooling == Pooling::kMean && offsets[b + 1] > offsets[b]) {
      const float s = 1.0f / static_cast<float>(offsets[b + 1] - offsets[b]);
      for (int64_t c = 0; c < featuresize; ++c) o[c] *= s;
    }
  }
}

}  // namespace cemb

#endif  // CEMB_SSD_SNAPSHOT_TABLE_H_
