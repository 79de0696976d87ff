#include "serve/embedding_source.h"

#include <algorithm>
#include <cstring>
#include <cstdint>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "embedding/internal/feature_sizes.h"
#include "embedding/validate.h"
#include "ssd/served_snapshot.h"

namespace cemb::serve {
namespace {

// The tables of a layer: straight into their columns with LookupShared, or
// (ssd tables) one request at a time through the step protocol.
class LayerPart {
 public:
  LayerPart(EmbeddingLayer& layer, std::vector<int> ids) : layer_(layer), ids_(std::move(ids)) {}

  struct Scratch {
    std::vector<Bags<int32_t>> bags;  // the layer's tables' bags
    std::vector<MatrixView> outs;     // their columns of the output
    std::vector<float> stepped;       // the step protocol's output [n x tables*dim]
  };

  absl::Status Lookup(std::span<const Bags<int32_t>> bags, MatrixView out, int threads, Scratch& s) {
    const int64_t dim = layer_.dim();
    s.bags.clear();
    s.outs.clear();
    for (int id : ids_) {
      s.bags.push_back(bags[id]);
      s.outs.push_back(out.slice(id * dim, dim));
    }
    if (!layer_.has_ssd_tables()) return layer_.LookupShared(s.bags, s.outs, threads);

    const int64_t width = static_cast<int64_t>(ids_.size()) * dim;
    s.stepped.resize(static_cast<size_t>(out.rows * width));
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t id = next_id_++;
    absl::Status status;
    for (int t = 0; t < static_cast<int>(ids_.size()) && status.ok(); ++t) status = layer_.Prefetch(id, t, s.bags[t]);
    absl::StatusOr<CheckedBatch> batch = status.ok() ? layer_.CheckStep(id, s.bags) : status;
    status = batch.status();
    if (status.ok()) status = layer_.BeginStep(id).status();
    if (status.ok()) status = layer_.Lookup(*batch, {s.stepped.data(), out.rows, width, width});
    // Unpins whatever was pinned, even after a failure.
    absl::Status end = layer_.EndStep(id).status();
    CEMB_RETURN_IF_ERROR(status);
    CEMB_RETURN_IF_ERROR(end);
    for (size_t t = 0; t < ids_.size(); ++t) {
      for (int64_t b = 0; b < out.rows; ++b) {
        std::copy_n(s.stepped.data() + b * width + static_cast<int64_t>(t) * dim, dim, s.outs[t].row(b));
      }
    }
    return absl::OkStatus();
  }

  bool serialised() const { return layer_.has_ssd_tables(); }
  std::vector<CachedTableInfo> cached_info() const {
    std::vector<CachedTableInfo> out;
    for (const TableReport& r : layer_.Report()) {
      if (r.cached) out.push_back({.table = r.id, .stats = r.stats});
    }
    return out;
  }
  int64_t EvictCached() { return layer_.EvictCaches(); }

 private:
  EmbeddingLayer& layer_;
  const std::vector<int> ids_;
  std::mutex mu_;  // the step protocol's: one request at a time
  int64_t next_id_ = 0;
};

// The snapshot tables, of one row format and feature size: those served in
// place, and those read whole into DRAM.
class SnapshotPart {
 public:
  virtual ~SnapshotPart() = default;
  struct Scratch {
    virtual ~Scratch() = default;
  };
  virtual std::unique_ptr<Scratch> NewScratch() const = 0;
  virtual absl::Status Lookup(std::span<const Bags<int32_t>> bags, MatrixView out, Scratch& scratch) = 0;
  virtual std::vector<SnapshotTableInfo> info() const = 0;
  virtual std::vector<CachedTableInfo> cached_info() const = 0;
  virtual int64_t EvictCached() = 0;
};

template <RowElement T, int64_t D>
class TypedSnapshotPart final : public SnapshotPart {
 public:
  static absl::StatusOr<std::unique_ptr<SnapshotPart>> Open(const EmbeddingSourceOptions& o) {
    auto part = std::make_unique<TypedSnapshotPart>();
    part->dim_ = o.dim;
    for (const SnapshotTableSpec& spec : o.snapshots) {
      const TableOptions shape{.name = absl::StrCat("emb", spec.table), .nvectors = spec.rows, .featuresize = o.dim,
                               .state_floats = o.state_floats};
      if (spec.resident && spec.cache.has_value()) {
        CEMB_ASSIGN_OR_RETURN(CachedTable<T> table, LoadCached(spec, shape, *spec.cache));
        part->cached_.push_back(std::move(table));
        part->cached_ids_.push_back(spec.table);
        continue;
      }
      if (spec.resident) {
        TableOptions held = shape;
        held.tier = spec.resident_tier;
        absl::StatusOr<ServedTable<T>> table = ServedTable<T>::Load(spec.path, held);
        CEMB_RETURN_IF_ERROR(table.status());
        part->resident_.push_back(*std::move(table));
        part->resident_ids_.push_back(spec.table);
        continue;
      }
      absl::StatusOr<SnapshotTable<T, D>> table = SnapshotTable<T, D>::Open(
          shape, {.path = spec.path, .capacity_bytes = spec.capacity_bytes, .queue_depth = o.queue_depth});
      CEMB_RETURN_IF_ERROR(table.status());
      part->tables_.push_back(*std::move(table));
      part->ids_.push_back(spec.table);
    }
    return std::unique_ptr<SnapshotPart>(std::move(part));
  }

  struct TypedScratch final : Scratch {
    SnapshotRequest request;                  // the request's pins over its tables
    std::vector<std::vector<const T*>> rows;  // per table: the resolved rows of its indices
    std::vector<const T*> resident_rows;      // a resident or cached table's, one table at a time
    std::vector<int64_t> offsets;
  };

  std::unique_ptr<Scratch> NewScratch() const override {
    auto s = std::make_unique<TypedScratch>();
    s->rows.resize(tables_.size());
    return s;
  }

  // Every in-place table's rows started (hits pinned, misses submitted),
  // then one Finish: the request's misses of all its tables are in flight
  // together. The resident tables are pooled meanwhile.
  absl::Status Lookup(std::span<const Bags<int32_t>> bags, MatrixView out, Scratch& scratch) override {
    auto& s = static_cast<TypedScratch&>(scratch);
    absl::Status status;
    for (size_t k = 0; k < tables_.size() && status.ok(); ++k) {
      SnapshotTable<T, D>& table = tables_[k];
      const Bags<int32_t>& b = bags[ids_[k]];
      status = validate_bags(table.name(), table.nvectors(), b);
      if (!status.ok()) break;
      s.rows[k].resize(b.indices.size());
      status = s.request.Start(table, b.indices, std::span<const T*>(s.rows[k]));
    }
    for (size_t k = 0; k < resident_.size() && status.ok(); ++k) {
      const ServedTable<T>& table = resident_[k];
      const Bags<int32_t>& b = bags[resident_ids_[k]];
      status = validate_bags(table.name(), table.nvectors(), b);
      if (!status.ok()) break;
      s.resident_rows.resize(b.indices.size());
      for (size_t i = 0; i < b.indices.size(); ++i) s.resident_rows[i] = table.rowpointer(b.indices[i]);
      Pool(s, s.resident_rows, b, resident_ids_[k], out);
    }
    for (size_t k = 0; k < cached_.size() && status.ok(); ++k) {
      const CachedTable<T>& table = cached_[k];
      const Bags<int32_t>& b = bags[cached_ids_[k]];
      status = validate_bags(table.name(), table.nvectors(), b);
      if (!status.ok()) break;
      s.resident_rows.resize(b.indices.size());
      // The rows stay where they are (CLOCK frees no slot a reader may
      // hold) until the section closes, after the pooling.
      auto section = ReadScopeOf(table);
      table.access_and_cache(b.indices.data(), static_cast<int64_t>(b.indices.size()), s.resident_rows.data());
      Pool(s, s.resident_rows, b, cached_ids_[k], out);
    }
    if (status.ok()) status = s.request.Finish();
    if (status.ok()) {
      for (size_t k = 0; k < tables_.size(); ++k) Pool(s, s.rows[k], bags[ids_[k]], ids_[k], out);
    }
    s.request.Release();
    return status;
  }

  std::vector<SnapshotTableInfo> info() const override {
    std::vector<SnapshotTableInfo> out;
    for (size_t k = 0; k < tables_.size(); ++k) {
      out.push_back({.table = ids_[k],
                     .path = tables_[k].path(),
                     .fd = tables_[k].fd(),
                     .capacity_rows = tables_[k].capacity_rows(),
                     .stats = tables_[k].stats()});
    }
    return out;
  }

  std::vector<CachedTableInfo> cached_info() const override {
    std::vector<CachedTableInfo> out;
    for (size_t k = 0; k < cached_.size(); ++k) out.push_back({.table = cached_ids_[k], .stats = cached_[k].stats()});
    return out;
  }

  int64_t EvictCached() override {
    int64_t freed = 0;
    for (CachedTable<T>& table : cached_) freed += table.evict();
    return freed;
  }

 private:
  void Pool(TypedScratch& s, std::span<const T* const> rows, const Bags<int32_t>& b, int id, MatrixView out) const {
    s.offsets.assign(b.offsets.begin(), b.offsets.end());
    PooledSumResolved<T>(rows, s.offsets, dim_, Pooling::kSum, b.weights, out.data + id * dim_, out.ld);
  }

  // The snapshot's rows copied to the slow tier of a CachedTable with
  // `cache` in front; a static cache filled at random once.
  static absl::StatusOr<CachedTable<T>> LoadCached(const SnapshotTableSpec& spec, TableOptions shape,
                                                    const CacheOptions& cache) {
    shape.tier = spec.resident_tier;
    CEMB_ASSIGN_OR_RETURN(CachedTable<T> table, CachedTable<T>::Create(shape, cache));
    const int64_t row_bytes = RowFeatureBytes<T>(shape.featuresize);
    {
      auto section = ReadScopeOf(table);
      CEMB_RETURN_IF_ERROR(ForEachServedRow(spec.path, shape.name, shape.nvectors, row_bytes, kRowFormatOf<T>,
                                            [&](int64_t r, const std::byte* bytes) {
                                              std::memcpy(table.rowpointer(r, Access::kWrite), bytes,
                                                          static_cast<size_t>(row_bytes));
                                            }));
    }
    table.persist_rows(0, shape.nvectors);
    if (cache.policy == CachePolicy::kStatic) CEMB_RETURN_IF_ERROR(table.fill_random(static_cast<uint64_t>(spec.table)).status());
    return table;
  }

  int64_t dim_ = 0;
  std::vector<SnapshotTable<T, D>> tables_;  // served in place
  std::vector<int> ids_;
  std::vector<ServedTable<T>> resident_;  // in DRAM, or on a slow tier read in place
  std::vector<int> resident_ids_;
  std::vector<CachedTable<T>> cached_;  // on a slow tier, cached in DRAM
  std::vector<int> cached_ids_;
};

// One caller's: its scratch for both parts.
class Reader final : public EmbeddingReader {
 public:
  Reader(int num_tables, LayerPart* layer, SnapshotPart* snapshots)
      : num_tables_(num_tables),
        layer_(layer),
        snapshots_(snapshots),
        snapshot_scratch_(snapshots ? snapshots->NewScratch() : nullptr) {}

  absl::Status Lookup(std::span<const Bags<int32_t>> bags, MatrixView out, int threads) override {
    if (bags.size() != static_cast<size_t>(num_tables_)) {
      return absl::InvalidArgumentError(absl::StrCat(bags.size(), " tables of bags for ", num_tables_, " tables"));
    }
    if (layer_ != nullptr) CEMB_RETURN_IF_ERROR(layer_->Lookup(bags, out, threads, layer_scratch_));
    if (snapshots_ != nullptr) CEMB_RETURN_IF_ERROR(snapshots_->Lookup(bags, out, *snapshot_scratch_));
    return absl::OkStatus();
  }

 private:
  const int num_tables_;
  LayerPart* layer_;
  SnapshotPart* snapshots_;
  LayerPart::Scratch layer_scratch_;
  std::unique_ptr<SnapshotPart::Scratch> snapshot_scratch_;
};

class Source final : public EmbeddingSource {
 public:
  Source(int num_tables, std::unique_ptr<LayerPart> layer, std::unique_ptr<SnapshotPart> snapshots)
      : num_tables_(num_tables), layer_(std::move(layer)), snapshots_(std::move(snapshots)) {}

  std::unique_ptr<EmbeddingReader> NewReader() override {
    return std::make_unique<Reader>(num_tables_, layer_.get(), snapshots_.get());
  }
  bool serialised() const override { return layer_ != nullptr && layer_->serialised(); }
  std::vector<SnapshotTableInfo> snapshots() const override {
    return snapshots_ ? snapshots_->info() : std::vector<SnapshotTableInfo>{};
  }
  std::vector<CachedTableInfo> cached() const override {
    std::vector<CachedTableInfo> out = layer_ ? layer_->cached_info() : std::vector<CachedTableInfo>{};
    if (snapshots_) {
      const std::vector<CachedTableInfo> converted = snapshots_->cached_info();
      out.insert(out.end(), converted.begin(), converted.end());
    }
    return out;
  }
  int64_t EvictCached() override {
    return (layer_ ? layer_->EvictCached() : 0) + (snapshots_ ? snapshots_->EvictCached() : 0);
  }

 private:
  const int num_tables_;
  std::unique_ptr<LayerPart> layer_;
  std::unique_ptr<SnapshotPart> snapshots_;
};

absl::StatusOr<std::unique_ptr<SnapshotPart>> OpenSnapshots(const EmbeddingSourceOptions& o) {
  return WithRowElement(o.row_format, [&]<typename T>() {
    return ::cemb::internal::WithFeatureSize(o.dim, [&]<int64_t D>() { return TypedSnapshotPart<T, D>::Open(o); });
  });
}

}  // namespace

absl::StatusOr<std::unique_ptr<EmbeddingSource>> MakeEmbeddingSource(const EmbeddingSourceOptions& options) {
  std::vector<int> holders(static_cast<size_t>(std::max(options.num_tables, 0)), 0);
  auto hold = [&](int id) -> absl::Status {
    if (id < 0 || id >= options.num_tables) {
      return absl::InvalidArgumentError(absl::StrCat("embeddings: table ", id, " of a model of ", options.num_tables));
    }
    if (++holders[id] > 1) return absl::InvalidArgumentError(absl::StrCat("embeddings: table ", id, " held twice"));
    return absl::OkStatus();
  };
  if (options.layer != nullptr && static_cast<int>(options.layer_ids.size()) != options.layer->num_tables()) {
    return absl::InvalidArgumentError(absl::StrCat("embeddings: ", options.layer_ids.size(), " ids for a layer of ",
                                                   options.layer->num_tables(), " tables"));
  }
  if (options.layer != nullptr) {
    for (int id : options.layer_ids) CEMB_RETURN_IF_ERROR(hold(id));
  }
  for (const SnapshotTableSpec& s : options.snapshots) CEMB_RETURN_IF_ERROR(hold(s.table));
  for (int t = 0; t < options.num_tables; ++t) {
    if (holders[t] == 0) return absl::InvalidArgumentError(absl::StrCat("embeddings: table ", t, " is held nowhere"));
  }
  std::unique_ptr<LayerPart> layer;
  if (options.layer != nullptr && options.layer->num_tables() > 0) {
    layer = std::make_unique<LayerPart>(*options.layer, options.layer_ids);
  }
  std::unique_ptr<SnapshotPart> snapshots;
  if (!options.snapshots.empty()) {
    CEMB_ASSIGN_OR_RETURN(snapshots, OpenSnapshots(options));
  }
  return std::unique_ptr<EmbeddingSource>(
      std::make_unique<Source>(options.num_tables, std::move(layer), std::move(snapshots)));
}

}  // namespace cemb::serve
