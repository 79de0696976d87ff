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
// A request (one thread) resolves its rows together, in two halves:
// Start(rows, &pins, out) pins every resident row with no lock; the
// request's missed rows get slots (CLOCK over the unpinned ones, beside the
// readers) and their reads are submitted, one batch of io_uring reads on a
// ring the request borrows (one read per run of adjacent 4 KiB blocks),
// and Start returns without waiting. Finish(&pins, out) reaps those reads
// (its thread waits only for its own), installs the rows, and waits for the
// request's rows that other requests were reading (a row two requests miss
// at once is read once). Resolve is Start then Finish. A request of several
// tables starts them all before it finishes any (SnapshotRequest, below):
// its misses of every table are in flight together, one round trip rather
// than one per table. out[i] is then the row's features, valid until
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
// Thread safety: Start, Finish, Resolve and Release from any number of
// threads, each with its own SnapshotPins (or SnapshotRequest). The file
// stays open for the table's life (the checkpoint's directory may be
// deleted meanwhile).
//
// Example:
//   CEMB_ASSIGN_OR_RETURN(auto t, SnapshotTable<float, 64>::Open({.name = "emb0", .nvectors = 1 << 22},
//                                   {.path = "/ckpt/step-100/emb0.ssd", .capacity_bytes = 1 << 30}));
//   SnapshotPins pins;  std::vector<const float*> rows(indices.size());
//   CEMB_RETURN_IF_ERROR(t.Resolve(indices, &pins, rows));
//   PooledSumResolved<float>(rows, offsets, t.featuresize(), Pooling::kSum, {}, out, ld);
//   t.Release(&pins);
// Several tables: SnapshotRequest request; request.Start(t0, ...) ... request.Start(t25, ...);
//   CEMB_RETURN_IF_ERROR(request.Finish()); ...kernels...; request.Release();
#ifndef CEMB_SSD_SNAPSHOT_TABLE_H_
#define CEMB_SSD_SNAPSHOT_TABLE_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "embedding/simple_table.h"
#include "embedding/table_io.h"
#include "embedding/types.h"
#include "ssd/internal/resolved_rows.h"
#include "ssd/internal/snapshot_core.h"

namespace cemb {

template <RowElement T, int64_t D = kDynamic>
class SnapshotTable {
 public:
  using value_type = T;
  static_assert(D == kDynamic || D > 0);

  // Opens options.path for a table of table's shape (name, nvectors,
  // featuresize, state_floats: the snapshot's rows are featuresize T and
  // state_floats floats); table.tier is not used. Reads the header and the
  // id area (4 bytes a row in the snapshot), nothing else. T float or
  // bfloat16 reads a trained table's snapshot or one converted to its
  // format; float16 and int8_rowwise read only converted ones
  // (WriteServedSnapshot, ssd/served_snapshot.h).
  [[nodiscard]] static absl::StatusOr<SnapshotTable> Open(const TableOptions& table,
                                                          const SnapshotTableOptions& options) {
    absl::StatusOr<TableOptions> shape = CheckedShape<T, D>(table);
    if (!shape.ok()) return shape.status();
    const int64_t d = shape->featuresize;
    const auto feature_bytes = static_cast<size_t>(RowFeatureBytes<T>(d));
    absl::StatusOr<std::unique_ptr<ssd_internal::SnapshotCore>> core = ssd_internal::SnapshotCore::Open(
        table.name, table.nvectors, d, feature_bytes, feature_bytes + static_cast<size_t>(table.state_floats) * 4,
        static_cast<uint32_t>(kRowFormatOf<T>), options, InitRowFn());
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
    return core_->Resolve(rows, pins, Bytes(out));
  }
  [[nodiscard]] absl::Status Resolve(std::span<const int32_t> rows, SnapshotPins* pins, std::span<const T*> out) {
    return core_->Resolve(rows, pins, Bytes(out));
  }

  // Resolve in two halves. Start pins the resident rows (their out[i] set
  // at once), takes slots for the missed ones, submits their reads and
  // computes the rows not in the snapshot; it never waits for the device
  // nor for another request. Finish(pins, out) reaps the reads, installs the
  // rows, waits for the rows other requests were reading and sets the rest
  // of out. On error (either half) nothing of this call stays pinned: a
  // failed read is Finish's DataLoss, naming the table, file and offset.
  // REQUIRES: as Resolve; no call of *pins started and not finished; out
  // the same span for both halves, untouched between them. A request that
  // has several calls started at once (several tables, or one table twice)
  // finishes them with a SnapshotRequest, or else in the order it started
  // them: a Finish waits for other requests' rows, and a request that waits
  // while it holds rows it has read and not installed, which a request
  // started later may be waiting for, can wait for a request that waits for
  // it.
  [[nodiscard]] absl::Status Start(std::span<const int64_t> rows, SnapshotPins* pins, std::span<const T*> out) {
    return core_->Start(rows, pins, Bytes(out));
  }
  [[nodiscard]] absl::Status Start(std::span<const int32_t> rows, SnapshotPins* pins, std::span<const T*> out) {
    return core_->Start(rows, pins, Bytes(out));
  }
  [[nodiscard]] absl::Status Finish(SnapshotPins* pins, std::span<const T*> out) {
    return core_->Finish(pins, Bytes(out));
  }
  // Unpins every row *pins holds (the request's kernels are done); a call
  // started and not finished is abandoned (its reads reaped, its rows
  // installed for the others).
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
  friend class SnapshotRequest;
  SnapshotTable(std::unique_ptr<ssd_internal::SnapshotCore> core, int64_t featuresize)
      : core_(std::move(core)), featuresize_(featuresize) {}
  static const std::byte** Bytes(std::span<const T*> out) { return reinterpret_cast<const std::byte**>(out.data()); }
  // How a row not in the snapshot is computed. A served-only type reads
  // only converted snapshots, which hold every row: none is.
  static constexpr ssd_internal::SnapshotInitFn InitRowFn() {
    if constexpr (StorageType<T>) {
      return [](uint64_t seed, int64_t nvectors, int64_t row, int64_t featuresize, void* out) {
        InitRowUniform(seed, nvectors, row, std::span<T>(static_cast<T*>(out), static_cast<size_t>(featuresize)));
      };
    } else {
      return nullptr;
    }
  }

  std::unique_ptr<ssd_internal::SnapshotCore> core_;
  int64_t featuresize_;
};

// One request's rows of several snapshot tables, resolved together: Start
// of every table submits its reads (Start above), then Finish installs every
// table's rows before it waits for any row another request loads, so the
// request's misses of all its tables are in flight at once and its thread
// waits one round trip, not one per table.
//
// Errors: on any error (a Start's or Finish's) every table's pins of the
// request are released, and the first error is returned (Finish: in the
// order of the Starts). Owns a SnapshotPins per table, kept with its scratch
// for the next request: a warm SnapshotRequest allocates nothing.
// Thread safety: one request thread at a time; any number of requests at once.
// REQUIRES: the tables outlive the request's pins (Release, or the destructor).
//
// Example:
//   SnapshotRequest request;  // one per request thread, reused
//   for (int k = 0; k < 26; ++k) CEMB_RETURN_IF_ERROR(request.Start(tables[k], indices[k], rows[k]));
//   CEMB_RETURN_IF_ERROR(request.Finish());
//   for (int k = 0; k < 26; ++k)
//     PooledSumResolved<float>(rows[k], offsets[k], 64, Pooling::kSum, {}, out + 64 * k, ld);
//   request.Release();
class SnapshotRequest {
 public:
  SnapshotRequest() = default;
  SnapshotRequest(const SnapshotRequest&) = delete;
  SnapshotRequest& operator=(const SnapshotRequest&) = delete;
  // Releases what the request still holds.
  ~SnapshotRequest() { Release(); }

  // Starts rows of `table` into out (SnapshotTable::Start): out[i] is set
  // now for a resident row, at Finish for the others.
  // REQUIRES: out.size() == rows.size(); out untouched until Finish.
  template <RowElement T, int64_t D>
  [[nodiscard]] absl::Status Start(SnapshotTable<T, D>& table, std::span<const int64_t> rows,
                                   std::type_identity_t<std::span<const T*>> out) {
    return Started(table.core_->Start(rows, Next(table.core_.get(), out), Part::Bytes(out)));
  }
  template <RowElement T, int64_t D>
  [[nodiscard]] absl::Status Start(SnapshotTable<T, D>& table, std::span<const int32_t> rows,
                                   std::type_identity_t<std::span<const T*>> out) {
    return Started(table.core_->Start(rows, Next(table.core_.get(), out), Part::Bytes(out)));
  }
  // Installs every started table's reads, then waits for the rows other
  // requests load: every out of every Start is set. (Tables started after
  // a Finish are finished by the next.)
  [[nodiscard]] absl::Status Finish();
  // Unpins every row of every table of the request (its kernels are done;
  // a table started and not finished is abandoned). The request is then
  // empty, ready for the next.
  void Release();

  // Tables started since the last Release.
  int64_t tables() const { return static_cast<int64_t>(used_); }
  // Slots pinned, over its tables.
  int64_t pinned() const;

 private:
  struct Part {
    ssd_internal::SnapshotCore* core = nullptr;
    std::unique_ptr<SnapshotPins> pins = std::make_unique<SnapshotPins>();
    const std::byte** out = nullptr;
    template <typename T>
    static const std::byte** Bytes(std::span<const T*> out) {
      return reinterpret_cast<const std::byte**>(out.data());
    }
  };
  template <typename T>
  SnapshotPins* Next(ssd_internal::SnapshotCore* core, std::span<const T*> out) {
    if (used_ == parts_.size()) parts_.emplace_back();
    Part& p = parts_[used_];
    p.core = core;
    p.out = Part::Bytes(out);
    return p.pins.get();
  }
  // After the Start of parts_[used_]: counts it, or releases everything.
  absl::Status Started(absl::Status s);

  std::vector<Part> parts_;  // [0, used_) started; the rest kept for their scratch
  size_t used_ = 0;
};

// A request's pooled rows from resolved row addresses (SnapshotTable::Resolve):
//   out[b * ld + c] = s_b * sum_{j in [offsets[b], offsets[b+1])} w_j * rows[j][c]
//   w_j = weights[j] or 1; s_b = 1/|bag| for kMean, else 1; fp32, in index order.
// Runs the embedding kernels (embedding/kernels.h) over the rows: the
// process's ISA (as TableKernels' kAuto: CEMB_ISA, else the best the CPU
// has) and the kernel specialised for featuresize (or the tiled fallback),
// both chosen once per process. So it equals TableKernels' pooled_lookup of
// the same rows bit for bit, weighted or not: the same code sums them.
// Only featuresize columns of each output row are written.
// REQUIRES: offsets nondecreasing from 0 to at most rows.size(); weights
// empty or one per row.
template <RowElement T>
void PooledSumResolved(std::span<const T* const> rows, std::span<const int64_t> offsets, int64_t featuresize,
                       Pooling pooling, std::span<const float> weights, float* out, int64_t ld) {
  ssd_internal::PoolResolvedRows<T>(ssd_internal::ResolvedPooledKernel<T>(featuresize), rows, offsets, featuresize,
                                    pooling, weights, out, ld);
}

}  // namespace cemb

#endif  // CEMB_SSD_SNAPSHOT_TABLE_H_
