#include "tables/embedding_layer.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/npy.h"
#include "base/parallel.h"
#include "base/status_macros.h"
#include "embedding/ensemble.h"
#include "embedding/internal/feature_sizes.h"
#include "embedding/reindex.h"
#include "embedding/table_io.h"
#include "embedding/validate.h"

namespace cemb {
namespace {

// LoadRows walks a table's rows in order (an ssd table's, when the checkpoint
// has a .rows file for it: written with other storage); over an ssd table each
// row not resident would be one synchronous block read (queue depth 1). This
// view of an SsdTable prefetches the rows in chunks instead (one batched
// submission per chunk, each block read once), pinned while they are used.
// Batch ids from `first_id` on. Single-threaded, like table_io.
template <StorageType T, int64_t D>
class SsdSequentialView {
 public:
  using value_type = T;
  static constexpr int64_t kFeatureSize = D;

  SsdSequentialView(SsdTable<T, D>& table, int64_t first_id) : table_(&table), id_(first_id) {}
  int64_t featuresize() const { return table_->featuresize(); }
  int64_t state_floats() const { return table_->state_floats(); }
  int64_t nvectors() const { return table_->nvectors(); }
  const std::string& name() const { return table_->name(); }
  T* rowpointer(int64_t row, Access kind) const {
    if (row < begin_ || row >= end_) Advance(row);
    return table_->rowpointer(row, kind);
  }
  // Unpins the last chunk; the first error, if any (rows whose prefetch
  // failed were still reached, through the synchronous path).
  absl::Status Finish() {
    Release();
    return status_;
  }
  int64_t next_id() const { return id_; }

 private:
  void Release() const {
    if (!pinned_) return;
    status_.Update(table_->Unpin(id_));
    pinned_ = false;
    ++id_;
  }
  void Advance(int64_t row) const {
    Release();
    // Half of the slots not pinned by the training's batches, at most 64k rows.
    const int64_t free = table_->capacity_rows() - table_->pinned_rows();
    const int64_t chunk = std::clamp<int64_t>(free / 2, 1, 65536);
    begin_ = row;
    end_ = std::min(table_->nvectors(), row + chunk);
    rows_.resize(static_cast<size_t>(end_ - begin_));
    for (int64_t r = begin_; r < end_; ++r) rows_[static_cast<size_t>(r - begin_)] = r;
    absl::Status s = table_->PrefetchDistinct(id_, rows_);  // a range of the table's rows
    if (s.ok()) {
      pinned_ = true;
      s = table_->WaitResident(id_).status();
    }
    status_.Update(s);
  }

  SsdTable<T, D>* table_;
  mutable int64_t id_;
  mutable int64_t begin_ = 0, end_ = 0;
  mutable bool pinned_ = false;
  mutable std::vector<int64_t> rows_;
  mutable absl::Status status_;
};

// The tables of one element type and feature size (D static when it is one
// of the specialised sizes, so every table gets compile-time kernels).
template <StorageType T, int64_t D>
class TypedEmbeddingLayer final : public EmbeddingLayer {
 public:
  static absl::StatusOr<std::unique_ptr<EmbeddingLayer>> Make(const EmbeddingLayerOptions& options) {
    auto set = std::unique_ptr<TypedEmbeddingLayer>(new TypedEmbeddingLayer(options));
    CEMB_RETURN_IF_ERROR(set->Init());
    return std::unique_ptr<EmbeddingLayer>(std::move(set));
  }

  int num_tables() const override { return static_cast<int>(tables_.size()); }
  int64_t dim() const override { return options_.dim; }
  int64_t rows(int t) const override {
    return std::visit([](const auto& table) { return table.nvectors(); }, *tables_[t]);
  }

  absl::StatusOr<CheckedBatch> Check(std::span<const Bags<int32_t>> bags) const override {
    return CheckTables(bags, nullptr, CheckedBatch::kNoBatch);
  }

  absl::StatusOr<CheckedBatch> CheckStep(int64_t batch_id, std::span<const Bags<int32_t>> bags) override {
    return CheckTables(bags, FindPlanned(batch_id), batch_id);
  }

  using EmbeddingLayer::Lookup;
  absl::Status Lookup(const CheckedBatch& batch, ::cemb::MatrixView out) override {
    for (int t = 0; t < num_tables(); ++t) outs_[t] = out.slice(t * options_.dim, options_.dim);
    return ensemble_.pooled_lookup<int32_t>(batch.tables(), outs_, {.pooling = options_.pooling});
  }

  using EmbeddingLayer::LookupShared;
  absl::Status LookupShared(std::span<const Bags<int32_t>> bags, std::span<const ::cemb::MatrixView> outs,
                            int threads) const override {
    if (!ssd_.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "LookupShared: table ", ssd_.front()->name(), " is an ssd table, whose rows are looked up in steps"));
    }
    if (bags.size() != static_cast<size_t>(num_tables()) || outs.size() != bags.size()) {
      return absl::InvalidArgumentError(absl::StrCat(bags.size(), " tables of bags and ", outs.size(),
                                                     " outputs for ", num_tables(), " tables"));
    }
    for (int t = 0; t < num_tables(); ++t) CEMB_RETURN_IF_ERROR(ensemble_.table(t).validate(bags[t], outs[t]));
    parallel_for(num_tables(), threads, [&](int64_t t) {
      const int i = static_cast<int>(t);
      ensemble_.table(i).pooled(bags[i], outs[i], {.pooling = options_.pooling}, 0, bags[i].nbags());
    });
    return absl::OkStatus();
  }

  using EmbeddingLayer::Update;
  absl::Status Update(const CheckedBatch& batch, ::cemb::ConstMatrixView grad, float lr) override {
    // The plans the batch's prefetch made (ssd tables), found by its id;
    // the others' are made here. The ensemble swaps them out: made once.
    Planned* planned = batch.id() != CheckedBatch::kNoBatch ? FindPlanned(batch.id()) : nullptr;
    for (int t = 0; t < num_tables(); ++t) ready_[t] = planned && planned->built[t] ? &planned->plans[t] : nullptr;
    if (planned != nullptr) std::fill(planned->built.begin(), planned->built.end(), 0);
    CEMB_RETURN_IF_ERROR(ensemble_.reindex<int32_t>(batch.tables(), options_.pooling, {.plans = ready_}));
    for (int t = 0; t < num_tables(); ++t) grads_[t] = grad.slice(t * options_.dim, options_.dim);
    const UpdateOptions update{.learning_rate = lr, .store = options_.update_store, .eps = options_.adagrad_eps};
    switch (options_.optimizer) {
      case EmbeddingOptimizer::kRowwiseAdagrad: return ensemble_.rowwise_adagrad_update(grads_, state_ptrs_, update);
      case EmbeddingOptimizer::kAdagrad: return ensemble_.adagrad_update(grads_, update);
      case EmbeddingOptimizer::kSgd: break;
    }
    return ensemble_.sgd_update(grads_, update);
  }

  bool has_ssd_tables() const override { return !ssd_.empty(); }

  absl::Status Prefetch(int64_t batch_id, int t, const Bags<int32_t>& bags) override {
    auto* s = std::get_if<SsdTable<T, D>>(tables_[t].get());
    if (s == nullptr) return absl::OkStatus();
    // The batch's check of this table (Check's message: table, bag, index),
    // before any row is pinned; then its update plan, whose distinct rows
    // are the ones to pin (CheckStep takes the checked bags and Update the
    // plan by the batch's id: neither checked nor made again).
    CEMB_ASSIGN_OR_RETURN(CheckedBags<int32_t> checked, CheckBags(s->name(), s->nvectors(), bags));
    Planned& planned = PlannedFor(batch_id);
    UpdatePlan& plan = planned.plans[t];
    plan.BuildUnchecked<int32_t>(s->nvectors(), bags.offsets, bags.indices, bags.weights, options_.pooling);
    planned.checked[t] = checked;
    planned.built[t] = 1;
    return s->PrefetchDistinct(batch_id, plan.rows());
  }

  absl::StatusOr<double> BeginStep(int64_t batch_id) override {
    double waited = 0;
    for (SsdTable<T, D>* s : ssd_) {
      CEMB_ASSIGN_OR_RETURN(absl::Duration d, s->WaitResident(batch_id));
      waited += absl::ToDoubleSeconds(d);
    }
    for (size_t i = 0; i < cached_.size(); ++i) scopes_[i].emplace(cached_[i]->begin_step());
    return waited;
  }

  absl::StatusOr<int> EndStep(int64_t batch_id) override {
    for (auto& scope : scopes_) scope.reset();
    RecyclePlans(batch_id);
    // Every ssd table unpins, even after one failed (a batch whose prefetch
    // failed may be pinned in some tables and not in others).
    absl::Status unpinned;
    for (SsdTable<T, D>* s : ssd_) unpinned.Update(s->Unpin(batch_id));
    CEMB_RETURN_IF_ERROR(unpinned);
    int flushed = 0;
    for (CachedTable<T, D>* c : cached_) {
      if (c->policy() == CachePolicy::kDynamic && c->isfull()) {
        c->flush_dirty();
        ++flushed;
      }
    }
    return flushed;
  }

  absl::Status Sync() override {
    for (CachedTable<T, D>* c : cached_) c->sync();
    for (SsdTable<T, D>* s : ssd_) CEMB_RETURN_IF_ERROR(s->FlushDirty());
    return absl::OkStatus();
  }

  // Runs `io` (LoadRows) over table t's rows: an ssd table through a view
  // that prefetches its rows in chunks, any other directly.
  template <typename Io>
  absl::Status StreamRows(int t, Io&& io) {
    return std::visit(
        [&](auto& table) -> absl::Status {
          if constexpr (std::is_same_v<std::decay_t<decltype(table)>, SsdTable<T, D>>) {
            SsdSequentialView<T, D> view(table, next_stream_id_);
            absl::Status s = io(view);
            s.Update(view.Finish());
            next_stream_id_ = view.next_id();
            return s;
          } else {
            return io(table);
          }
        },
        *tables_[t]);
  }

  absl::Status Save(const std::string& dir, const std::string& prefix) override {
    CEMB_RETURN_IF_ERROR(Sync());
    for (int t = 0; t < num_tables(); ++t) {
      if (auto* s = std::get_if<SsdTable<T, D>>(tables_[t].get())) {
        CEMB_RETURN_IF_ERROR(s->SaveSnapshot(SnapshotPath(dir, prefix, Id(t)), SnapshotOpts()).status());
      } else {
        const std::string path = RowsPath(dir, prefix, Id(t));
        CEMB_RETURN_IF_ERROR(std::visit([&](const auto& table) { return SaveRows(table, path); }, *tables_[t]));
      }
      if (!states_.empty()) {
        CEMB_RETURN_IF_ERROR(WriteNpy<float>(absl::StrCat(dir, "/", prefix, Id(t), ".adagrad.npy"),
                                             states_[t].values(), {states_[t].nvectors()}));
      }
    }
    return absl::OkStatus();
  }

  absl::Status Load(const std::string& dir, const std::string& prefix) override {
    for (int t = 0; t < num_tables(); ++t) {
      const std::string rows = RowsPath(dir, prefix, Id(t)), snapshot = SnapshotPath(dir, prefix, Id(t));
      std::error_code ec;
      auto* s = std::get_if<SsdTable<T, D>>(tables_[t].get());
      if (s != nullptr && std::filesystem::exists(snapshot, ec)) {
        CEMB_RETURN_IF_ERROR(s->LoadSnapshot(snapshot, SnapshotOpts()).status());
      } else if (s == nullptr && !std::filesystem::exists(rows, ec) && std::filesystem::exists(snapshot, ec)) {
        CEMB_RETURN_IF_ERROR(LoadSnapshotElsewhere(t, snapshot));
      } else {
        CEMB_RETURN_IF_ERROR(StreamRows(t, [&](const auto& table) { return LoadRows(table, rows); }));
        // An ssd row that failed to come in reads as NaNs: the table says so.
        CEMB_RETURN_IF_ERROR(SsdStatus(t));
      }
      if (!states_.empty()) {
        const std::string state_path = absl::StrCat(dir, "/", prefix, Id(t), ".adagrad.npy");
        CEMB_ASSIGN_OR_RETURN(NpyArray<float> state, ReadNpy<float>(state_path));
        if (state.shape != std::vector<int64_t>{states_[t].nvectors()}) {
          return absl::InvalidArgumentError(
              absl::StrCat(state_path, ": AdaGrad state of the wrong shape for table ", Id(t)));
        }
        std::copy(state.data.begin(), state.data.end(), states_[t].values().begin());
      }
    }
    return absl::OkStatus();
  }

  absl::Status ExportNpy(const std::string& dir, const std::string& prefix) override {
    const int64_t d = options_.dim;
    std::vector<float> block(static_cast<size_t>(kNpyBlockRows * d));
    for (int t = 0; t < num_tables(); ++t) {
      const int64_t n = rows(t);
      const int64_t shape[] = {n, d};
      CEMB_ASSIGN_OR_RETURN(NpyWriter writer, NpyWriter::Create(NpyPath(dir, prefix, Id(t)), shape));
      CEMB_RETURN_IF_ERROR(StreamRows(t, [&](const auto& table) -> absl::Status {
        for (int64_t begin = 0; begin < n; begin += kNpyBlockRows) {
          const int64_t end = std::min(n, begin + kNpyBlockRows);
          for (int64_t r = begin; r < end; ++r) {
            const T* row = table.rowpointer(r, Access::kRead);
            float* out = block.data() + (r - begin) * d;
            for (int64_t c = 0; c < d; ++c) out[c] = ToFloat(row[c]);
          }
          CEMB_RETURN_IF_ERROR(writer.Append(std::span<const float>(block.data(), static_cast<size_t>((end - begin) * d))));
        }
        return absl::OkStatus();
      }));
      // An ssd row that failed to come in reads as NaNs: the table says so.
      CEMB_RETURN_IF_ERROR(SsdStatus(t));
      CEMB_RETURN_IF_ERROR(writer.Commit());
    }
    return absl::OkStatus();
  }

  absl::Status ImportNpy(const std::string& dir, const std::string& prefix) override {
    const int64_t d = options_.dim;
    std::vector<NpyReader> readers;
    for (int t = 0; t < num_tables(); ++t) {
      const std::string path = NpyPath(dir, prefix, Id(t));
      CEMB_ASSIGN_OR_RETURN(NpyReader r, NpyReader::Open(path));
      if (r.dtype() != NpyDtype::kFloat32 && r.dtype() != NpyDtype::kBfloat16) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": dtype ", NpyDtypeName(r.dtype()),
                                                       " where float32 or bfloat16 is needed (table ", Id(t), ")"));
      }
      if (r.shape() != std::vector<int64_t>{rows(t), d}) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": shape ", r.shape_text(), " where (", rows(t), ", ", d,
                                                       ") is needed (table ", Id(t), ": ", rows(t), " rows of dim ", d,
                                                       ")"));
      }
      readers.push_back(std::move(r));
    }
    std::vector<float> block(static_cast<size_t>(kNpyBlockRows * d));
    for (int t = 0; t < num_tables(); ++t) {
      const int64_t n = rows(t);
      CEMB_RETURN_IF_ERROR(StreamRows(t, [&](const auto& table) -> absl::Status {
        for (int64_t begin = 0; begin < n; begin += kNpyBlockRows) {
          const int64_t end = std::min(n, begin + kNpyBlockRows);
          CEMB_RETURN_IF_ERROR(
              readers[t].ReadFloats(std::span<float>(block.data(), static_cast<size_t>((end - begin) * d))));
          for (int64_t r = begin; r < end; ++r) {
            T* row = table.rowpointer(r, Access::kWrite);
            const float* in = block.data() + (r - begin) * d;
            for (int64_t c = 0; c < d; ++c) row[c] = FromFloat<T>(in[c]);
          }
          table_io_internal::PersistRows(table, begin, end);
        }
        return absl::OkStatus();
      }));
      CEMB_RETURN_IF_ERROR(SsdStatus(t));
    }
    return absl::OkStatus();
  }

  absl::Status ReadRow(int t, int64_t row, std::span<float> out) const override {
    CEMB_RETURN_IF_ERROR(CheckRow(t, row, out.size()));
    std::visit([&](const auto& table) {
      const T* p = table.rowpointer(row, Access::kRead);
      for (int64_t c = 0; c < options_.dim; ++c) out[c] = ToFloat(p[c]);
    }, *tables_[t]);
    return absl::OkStatus();
  }

  absl::Status WriteRow(int t, int64_t row, std::span<const float> in) override {
    CEMB_RETURN_IF_ERROR(CheckRow(t, row, in.size()));
    std::visit([&](const auto& table) {
      T* p = table.rowpointer(row, Access::kWrite);
      for (int64_t c = 0; c < options_.dim; ++c) p[c] = FromFloat<T>(in[c]);
    }, *tables_[t]);
    return absl::OkStatus();
  }

  std::vector<TableReport> Report() const override {
    std::vector<TableReport> reports;
    for (int t = 0; t < num_tables(); ++t) {
      TableReport r;
      r.id = Id(t);
      r.rows = rows(t);
      r.storage = StorageKindName(options_.tables[t].storage.kind);
      r.kernel = ensemble_.table(t).description();
      std::visit(
          [&](const auto& table) {
            r.name = table.name();
            r.row_bytes = static_cast<int64_t>(table.row_bytes());
            if constexpr (std::is_same_v<std::decay_t<decltype(table)>, CachedTable<T, D>>) {
              r.cached = true;
              r.stats = table.stats();
            } else if constexpr (std::is_same_v<std::decay_t<decltype(table)>, SsdTable<T, D>>) {
              r.ssd = true;
              r.ssd_stats = table.stats();
              r.dram_bytes = table.capacity_rows() * static_cast<int64_t>(table.slot_bytes());
            }
          },
          *tables_[t]);
      reports.push_back(std::move(r));
    }
    return reports;
  }

  void ResetStats() override {
    for (CachedTable<T, D>* c : cached_) c->reset_stats();
  }

  int64_t EvictCaches() override {
    int64_t freed = 0;
    for (CachedTable<T, D>* c : cached_) freed += c->evict();
    return freed;
  }

 private:
  // A batch's update plans made ahead (members below).
  struct Planned {
    int64_t id = 0;
    std::vector<UpdatePlan> plans;                             // one per table
    std::vector<std::optional<CheckedBags<int32_t>>> checked;  // what plans[t] was made from
    std::vector<char> built;                                   // plans[t] holds this batch's plan
  };

  // The batch's bags of every table: those `planned` holds (its prefetch
  // checked them), the others checked now.
  absl::StatusOr<CheckedBatch> CheckTables(std::span<const Bags<int32_t>> bags, const Planned* planned,
                                           int64_t id) const {
    if (bags.size() != static_cast<size_t>(num_tables())) {
      return absl::InvalidArgumentError(
          absl::StrCat("embeddings: bags of ", bags.size(), " tables for a layer of ", num_tables()));
    }
    std::vector<CheckedBags<int32_t>> tables;
    tables.reserve(bags.size());
    for (int t = 0; t < num_tables(); ++t) {
      if (planned != nullptr && planned->checked[t].has_value()) {
        tables.push_back(*planned->checked[t]);
        continue;
      }
      CEMB_ASSIGN_OR_RETURN(CheckedBags<int32_t> checked, CheckBags(ensemble_.table(t).name(), rows(t), bags[t]));
      tables.push_back(checked);
    }
    return MakeBatch(std::move(tables), id);
  }

  explicit TypedEmbeddingLayer(const EmbeddingLayerOptions& options)
      : options_(options), ensemble_({.threads = options.threads, .kernels = options.kernels}) {}

  // Table t's number in the model (EmbeddingTableSpec::id).
  int Id(int t) const { return options_.tables[t].id >= 0 ? options_.tables[t].id : t; }
  static std::string RowsPath(const std::string& dir, const std::string& prefix, int t) {
    return absl::StrCat(dir, "/", prefix, t, ".rows");
  }
  static std::string SnapshotPath(const std::string& dir, const std::string& prefix, int t) {
    return absl::StrCat(dir, "/", prefix, t, ".ssd");
  }
  static std::string NpyPath(const std::string& dir, const std::string& prefix, int t) {
    return absl::StrCat(dir, "/", prefix, t, ".weight.npy");
  }
  // ExportNpy and ImportNpy move this many rows at a time.
  static constexpr int64_t kNpyBlockRows = 4096;
  SnapshotOptions SnapshotOpts() const { return {.progress = options_.progress}; }

  // The snapshot of an ssd table into table t of another kind (a run resumed
  // with the table moved to DRAM or a cache): through a temporary ssd table
  // of the same shape in the table's slow-tier directory (the snapshot's
  // rows copied in, its other rows computed from the snapshot's seed, which
  // LoadSnapshot gives the temporary table), row by row in prefetched chunks.
  absl::Status LoadSnapshotElsewhere(int t, const std::string& snapshot) {
    SsdOptions o;
    o.file.directory = options_.tables[t].storage.ssd.file.directory;
    if (o.file.directory.empty()) {
      const char* tmp = std::getenv("TMPDIR");
      o.file.directory = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
    }
    o.init_seed = options_.seed + static_cast<uint64_t>(Id(t));
    const int64_t rows = this->rows(t);
    const TableOptions shape = Shape(t);
    o.capacity_bytes = std::min<int64_t>(rows, 2 * 65536) *
                       SlotBytes(EmbeddingRowBytes(options_.dim, options_.bf16_rows, options_.optimizer));
    using Ssd = SsdTable<T, D>;
    CEMB_ASSIGN_OR_RETURN(Ssd from, Ssd::Create(shape, o));
    CEMB_RETURN_IF_ERROR(from.LoadSnapshot(snapshot, SnapshotOpts()).status());
    SsdSequentialView<T, D> view(from, 0);
    std::visit(
        [&](auto& to) {
          for (int64_t r = 0; r < rows; ++r) {
            std::memcpy(to.rowpointer(r, Access::kWrite), view.rowpointer(r, Access::kRead), to.row_bytes());
          }
        },
        *tables_[t]);
    CEMB_RETURN_IF_ERROR(view.Finish());
    return from.status();
  }

  // The first failure of an ssd table's synchronous fetches (rowpointer() of
  // a row not resident: LoadRows, ReadRow, WriteRow).
  absl::Status SsdStatus(int t) const {
    if (const auto* s = std::get_if<SsdTable<T, D>>(tables_[t].get())) return s->status();
    return absl::OkStatus();
  }

  // The plans of batch `id`, made on first use (a recycled one when there is
  // one: a steady state allocates nothing).
  Planned& PlannedFor(int64_t id) {
    std::lock_guard<std::mutex> lock(plans_mu_);
    for (const std::unique_ptr<Planned>& p : planned_) {
      if (p->id == id) return *p;
    }
    std::unique_ptr<Planned> p;
    if (spare_plans_.empty()) {
      p = std::make_unique<Planned>();
      p->plans.resize(static_cast<size_t>(num_tables()));
      p->checked.resize(static_cast<size_t>(num_tables()));
      p->built.assign(static_cast<size_t>(num_tables()), 0);
    } else {
      p = std::move(spare_plans_.back());
      spare_plans_.pop_back();
    }
    p->id = id;
    planned_.push_back(std::move(p));
    return *planned_.back();
  }
  // The plans of batch `id` if its prefetch made any, else nullptr.
  Planned* FindPlanned(int64_t id) const {
    std::lock_guard<std::mutex> lock(plans_mu_);
    for (const std::unique_ptr<Planned>& p : planned_) {
      if (p->id == id) return p.get();
    }
    return nullptr;
  }
  void RecyclePlans(int64_t id) {
    std::lock_guard<std::mutex> lock(plans_mu_);
    for (size_t i = 0; i < planned_.size(); ++i) {
      if (planned_[i]->id != id) continue;
      std::fill(planned_[i]->built.begin(), planned_[i]->built.end(), 0);
      std::fill(planned_[i]->checked.begin(), planned_[i]->checked.end(), std::nullopt);
      spare_plans_.push_back(std::move(planned_[i]));
      planned_.erase(planned_.begin() + static_cast<std::ptrdiff_t>(i));
      return;
    }
  }

  // Table t's name, rows, features and the optimizer state kept with them.
  TableOptions Shape(int t) const {
    return {.name = absl::StrCat("emb", Id(t)),
            .nvectors = options_.tables[t].rows,
            .featuresize = options_.dim,
            .state_floats = RowStateFloats(options_.dim, options_.optimizer)};
  }

  absl::Status CheckRow(int t, int64_t row, size_t n) const {
    if (t < 0 || t >= num_tables() || row < 0 || row >= rows(t) || static_cast<int64_t>(n) != options_.dim) {
      return absl::OutOfRangeError(absl::StrCat("embeddings: no row ", row, " of width ", n, " in table ", t));
    }
    return absl::OkStatus();
  }

  absl::Status Init() {
    const int n = static_cast<int>(options_.tables.size());
    for (int t = 0; t < n; ++t) {
      const EmbeddingTableSpec& spec = options_.tables[t];
      const uint64_t seed = options_.seed + static_cast<uint64_t>(Id(t));
      StorageConfig storage = spec.storage;
      storage.ssd.init_seed = seed;  // lazy: a row is InitUniform's row when first needed
      absl::StatusOr<StoredTable<T, D>> table = MakeStoredTable<T, D>(Shape(t), storage);
      if (!table.ok()) return table.status();
      tables_.push_back(std::make_unique<StoredTable<T, D>>(*std::move(table)));
      StoredTable<T, D>& stored = *tables_.back();
      if (auto* s = std::get_if<SsdTable<T, D>>(&stored)) {
        ssd_.push_back(s);
      } else {
        std::visit([&](auto& tb) { InitUniform(tb, seed, options_.threads); }, stored);
      }
      if (auto* c = std::get_if<CachedTable<T, D>>(&stored)) cached_.push_back(c);
      if (auto* c = std::get_if<CachedTable<T, D>>(&stored); c != nullptr && c->policy() == CachePolicy::kStatic) {
        absl::StatusOr<int64_t> filled = c->fill_random(seed);
        if (!filled.ok()) return filled.status();
      }
      CEMB_RETURN_IF_ERROR(std::visit([&](const auto& tb) { return ensemble_.add(tb); }, stored));
      if (options_.optimizer == EmbeddingOptimizer::kRowwiseAdagrad) states_.emplace_back(spec.rows);
    }
    for (auto& s : states_) state_ptrs_.push_back(&s);
    scopes_.resize(cached_.size());
    ready_.resize(n);
    outs_.resize(n);
    grads_.resize(n);
    return absl::OkStatus();
  }

  EmbeddingLayerOptions options_;
  std::vector<std::unique_ptr<StoredTable<T, D>>> tables_;  // stable addresses: the ensemble points at them
  std::vector<SsdTable<T, D>*> ssd_;                        // the ssd tables among them
  int64_t next_stream_id_ = kLoadBatchIds;                   // batch ids of LoadRows's chunks
  std::vector<CachedTable<T, D>*> cached_;                  // the cached ones
  std::vector<std::optional<typename CachedTable<T, D>::StepScope>> scopes_;  // open between Begin/EndStep
  Ensemble ensemble_;
  std::vector<RowwiseAdagradState> states_;
  std::vector<RowwiseAdagradState*> state_ptrs_;
  std::vector<::cemb::MatrixView> outs_;
  std::vector<::cemb::ConstMatrixView> grads_;

  // Update plans made ahead by Prefetch (ssd tables only), one Planned per
  // batch from its first Prefetch to its EndStep, then recycled. Prefetch
  // of later batches may run on other threads during a step: the lists are
  // guarded by plans_mu_; plan t of a batch is written by that batch's
  // Prefetch of table t only, and read by CheckStep and Update of the batch
  // (the caller orders them: StepCycle waits for its prefetchers first).
  mutable std::mutex plans_mu_;
  std::vector<std::unique_ptr<Planned>> planned_;      // in flight
  std::vector<std::unique_ptr<Planned>> spare_plans_;  // recycled
  std::vector<UpdatePlan*> ready_;                     // Update's plans made ahead, per table (or null)
};

template <StorageType T>
absl::StatusOr<std::unique_ptr<EmbeddingLayer>> MakeForType(const EmbeddingLayerOptions& options) {
  return ::cemb::internal::WithFeatureSize(options.dim, [&]<int64_t D>() { return TypedEmbeddingLayer<T, D>::Make(options); });
}

// Every field of a TableReport, one list for writing and for reading: `f`
// gets each in order (a field added to TableReport goes here too).
template <typename Report, typename F>
void ForEachField(Report& r, F&& f) {
  static_assert(std::is_trivially_copyable_v<CacheStats> && std::is_trivially_copyable_v<SsdStats>);
  f(r.id), f(r.rows), f(r.name), f(r.storage), f(r.kernel), f(r.cached), f(r.stats), f(r.ssd), f(r.ssd_stats),
      f(r.row_bytes), f(r.dram_bytes);
}

}  // namespace

std::string EncodeTableReports(std::span<const TableReport> reports) {
  std::string bytes;
  auto put = [&bytes](const void* p, size_t n) { bytes.append(static_cast<const char*>(p), n); };
  const uint64_t count = reports.size();
  put(&count, sizeof count);
  for (const TableReport& r : reports) {
    ForEachField(r, [&](const auto& field) {
      if constexpr (std::is_same_v<std::decay_t<decltype(field)>, std::string>) {
        const uint64_t n = field.size();
        put(&n, sizeof n);
        put(field.data(), n);
      } else {
        put(&field, sizeof field);
      }
    });
  }
  return bytes;
}

absl::StatusOr<std::vector<TableReport>> DecodeTableReports(std::string_view bytes) {
  bool ok = true;
  auto take = [&](void* p, size_t n) {
    if (!ok || n > bytes.size()) return void(ok = false);
    std::memcpy(p, bytes.data(), n);
    bytes.remove_prefix(n);
  };
  uint64_t count = 0;
  take(&count, sizeof count);
  std::vector<TableReport> reports;
  for (uint64_t i = 0; ok && i < count; ++i) {
    TableReport& r = reports.emplace_back();
    ForEachField(r, [&](auto& field) {
      if constexpr (std::is_same_v<std::decay_t<decltype(field)>, std::string>) {
        uint64_t n = 0;
        take(&n, sizeof n);
        if (!ok || n > bytes.size()) return void(ok = false);
        field.assign(bytes.data(), n);
        bytes.remove_prefix(n);
      } else {
        take(&field, sizeof field);
      }
    });
  }
  if (!ok || !bytes.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("table reports: ", ok ? "bytes left over" : "truncated", " after ",
                                                   reports.size(), " of ", count, " tables"));
  }
  return reports;
}

absl::Status EmbeddingLayer::Lookup(std::span<const Bags<int32_t>> bags, ::cemb::MatrixView out) {
  CEMB_ASSIGN_OR_RETURN(const CheckedBatch batch, Check(bags));
  return Lookup(batch, out);
}

absl::Status EmbeddingLayer::Update(std::span<const Bags<int32_t>> bags, ::cemb::ConstMatrixView grad, float lr) {
  CEMB_ASSIGN_OR_RETURN(const CheckedBatch batch, Check(bags));
  return Update(batch, grad, lr);
}

absl::Status EmbeddingLayer::LookupShared(std::span<const Bags<int32_t>> bags, ::cemb::MatrixView out,
                                          int threads) const {
  std::vector<::cemb::MatrixView> outs;
  outs.reserve(static_cast<size_t>(num_tables()));
  for (int t = 0; t < num_tables(); ++t) outs.push_back(out.slice(t * dim(), dim()));
  return LookupShared(bags, outs, threads);
}

absl::StatusOr<std::unique_ptr<EmbeddingLayer>> EmbeddingLayer::Create(const EmbeddingLayerOptions& options) {
  if (options.dim <= 0) return absl::InvalidArgumentError("embeddings: dim must be > 0");
  for (size_t t = 0; t < options.tables.size(); ++t) {
    if (options.tables[t].rows <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("embeddings: table ", t, " has ", options.tables[t].rows, " rows"));
    }
  }
  return options.bf16_rows ? MakeForType<bfloat16>(options) : MakeForType<float>(options);
}

}  // namespace cemb
