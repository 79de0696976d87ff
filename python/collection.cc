#include "python/collection.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "tables/dram_budget.h"

namespace cemb::python {

// Tables of one (dim, row type, number of features): one layer, one cycle.
struct Collection::Group {
  int64_t dim = 0;
  int features = 1;             // F: bag f * B + b is feature f's bag b
  std::vector<int> tables;      // collection indices, in order
  bool in_place = false;        // F = 1 and the tables adjacent: one block of the output
  std::unique_ptr<EmbeddingLayer> layer;
  std::unique_ptr<StepCycle> cycle;
  std::vector<float> scratch;   // [F x B, tables x dim] when not in place
  std::vector<std::span<const Bags<int32_t>>> ahead;  // Begin's batches ahead, reused
};

// A converted batch: per group, per table, int32 offsets (F x B + 1),
// indices and, when the features are weighted, one weight per index; and
// the Bags over them. Owned until its step ends (the prefetcher threads
// read them).
struct Collection::Batch {
  int64_t id = 0;
  int64_t size = 0;  // B
  std::vector<std::vector<std::vector<int32_t>>> offsets, indices;  // [group][table]
  std::vector<std::vector<std::vector<float>>> weights;             // [group][table]; empty: unweighted
  std::vector<std::vector<Bags<int32_t>>> bags;                     // [group][table]
  std::vector<CheckedBatch> checked;                                // [group]: bags as its layer checked them (Begin)

  bool SameAs(const Batch& o) const {
    return size == o.size && offsets == o.offsets && indices == o.indices && weights == o.weights;
  }
};

namespace {

int64_t At(const IndexArray& a, int64_t i) {
  return a.type == IndexType::kInt32 ? static_cast<const int32_t*>(a.data)[i] : static_cast<const int64_t*>(a.data)[i];
}

}  // namespace

std::string Collection::Named(absl::string_view message) const {
  // The layers name table i "emb<i>" (its id); the user knows it by its name.
  if (message.substr(0, 3) != "emb") return std::string(message);
  size_t end = 3;
  int id = 0;
  while (end < message.size() && end < 12 && message[end] >= '0' && message[end] <= '9') {
    id = id * 10 + (message[end++] - '0');
  }
  if (end == 3 || end >= message.size() || message[end] != ':' || id >= static_cast<int>(options_.tables.size())) {
    return std::string(message);
  }
  return absl::StrCat("table '", options_.tables[id].name, "'", message.substr(end));
}

Collection::Collection(const CollectionOptions& options) : options_(options) {}
Collection::~Collection() = default;

absl::StatusOr<std::unique_ptr<Collection>> Collection::Create(const CollectionOptions& options) {
  if (options.tables.empty()) return absl::InvalidArgumentError("EmbeddingBagCollection: no tables");
  if (options.prefetch_batches < 0) return absl::InvalidArgumentError("prefetch_batches must be >= 0");
  if (options.max_open_steps < 1) return absl::InvalidArgumentError("max_open_steps must be >= 1");
  std::unique_ptr<Collection> c(new Collection(options));
  absl::flat_hash_set<std::string> names, features;
  bool any_ssd = false, any_budget = false;
  for (size_t i = 0; i < options.tables.size(); ++i) {
    const CollectionTable& t = options.tables[i];
    const std::string where = absl::StrCat("table '", t.name, "'");
    if (t.name.empty()) return absl::InvalidArgumentError(absl::StrCat("table ", i, ": no name"));
    if (!names.insert(t.name).second) return absl::InvalidArgumentError(absl::StrCat(where, ": a second table of that name"));
    if (t.rows <= 0 || t.rows > INT32_MAX) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": num_embeddings ", t.rows, " is not in [1, 2^31)"));
    }
    if (t.dim <= 0) return absl::InvalidArgumentError(absl::StrCat(where, ": embedding_dim ", t.dim, " is not positive"));
    if (t.features.empty()) return absl::InvalidArgumentError(absl::StrCat(where, ": no feature_names"));
    for (const std::string& f : t.features) {
      if (!features.insert(f).second) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": feature '", f, "' is another table's too"));
      }
      c->features_.push_back(f);
      c->feature_table_.push_back(static_cast<int>(i));
    }
    if (t.storage != StorageKind::kDram) {
      if (t.directory.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": storage '", StorageKindName(t.storage), "' needs a directory"));
      }
      std::error_code ec;
      if (!std::filesystem::is_directory(t.directory, ec)) {
        return absl::NotFoundError(absl::StrCat(where, ": storage '", StorageKindName(t.storage), "': directory ",
                                                t.directory, ": no such directory"));
      }
      any_budget = true;
    }
    any_ssd |= t.storage == StorageKind::kSsd;
    c->table_col_.push_back(c->width_);
    c->width_ += t.dim * static_cast<int64_t>(t.features.size());
  }
  if (any_ssd && options.dram_budget <= 0) {
    return absl::InvalidArgumentError("dram_budget: required when a table's storage is 'ssd' (bytes of DRAM for rows)");
  }

  // The groups, in order of their first table.
  std::map<std::tuple<int64_t, bool, size_t, Pooling>, int> group_of;
  std::vector<EmbeddingLayerOptions> layer_options;
  c->where_.resize(options.tables.size());
  for (size_t i = 0; i < options.tables.size(); ++i) {
    const CollectionTable& t = options.tables[i];
    auto [it, added] =
        group_of.try_emplace({t.dim, t.bf16, t.features.size(), t.pooling}, static_cast<int>(c->groups_.size()));
    if (added) {
      auto g = std::make_unique<Group>();
      g->dim = t.dim;
      g->features = static_cast<int>(t.features.size());
      c->groups_.push_back(std::move(g));
      layer_options.push_back({.dim = t.dim, .bf16_rows = t.bf16, .pooling = t.pooling,
                               .optimizer = options.optimizer, .adagrad_eps = options.adagrad_eps,
                               .threads = options.threads, .seed = options.seed});
    }
    Group& g = *c->groups_[it->second];
    c->where_[i] = {it->second, static_cast<int>(g.tables.size())};
    g.tables.push_back(static_cast<int>(i));
    EmbeddingTableSpec spec{.rows = t.rows, .id = static_cast<int>(i), .storage = {.kind = t.storage}};
    if (t.storage == StorageKind::kSsd) {
      spec.storage.ssd.file.directory = t.directory;
      spec.storage.ssd.file.wrap_io = options.ssd_wrap_io;
    } else if (t.storage != StorageKind::kDram) {
      spec.storage.slow_tier = TierOptions::Pmem(t.directory);
    }
    layer_options[it->second].tables.push_back(spec);
  }
  for (auto& g : c->groups_) {
    g->in_place = g->features == 1;
    for (size_t p = 0; p < g->tables.size(); ++p) g->in_place &= g->tables[p] == g->tables[0] + static_cast<int>(p);
  }

  if (any_budget && options.dram_budget > 0) {
    if (options.batch_size <= 0 || options.bag_size <= 0) {
      return absl::InvalidArgumentError(
          "batch_size (and bag_size): needed to split dram_budget (the rows a batch pins per table)");
    }
    // A sample looks up bag_size rows per feature of a table.
    std::vector<uint32_t> hotness;
    std::vector<BudgetTable> budget_tables;
    for (size_t i = 0; i < options.tables.size(); ++i) {
      const CollectionTable& t = options.tables[i];
      hotness.push_back(
          static_cast<uint32_t>(options.bag_size * static_cast<int64_t>(std::max<size_t>(1, t.features.size()))));
      auto [g, p] = c->where_[i];
      budget_tables.push_back(
          {.spec = &layer_options[g].tables[p], .row_bytes = EmbeddingRowBytes(t.dim, t.bf16, options.optimizer)});
    }
    const DramBudgetRequest request{
        .budget = options.dram_budget,
        .where = "dram_budget: ",
        .batch_size = options.batch_size,
        .hotness = std::move(hotness),
        .prefetch_batches = options.prefetch_batches,
        .prefetch_name = "prefetch_batches"};
    TableTraffic traffic;
    if (!options.traffic_sample.empty()) {
      CEMB_ASSIGN_OR_RETURN(traffic, c->CountTraffic(options.traffic_sample));
    }
    CEMB_RETURN_IF_ERROR(
        SplitDramBudget(request, options.traffic_sample.empty() ? nullptr : &traffic, budget_tables).status());
  }

  c->options_.traffic_sample.clear();  // its arrays are the caller's, read only here
  c->options_.ssd_wrap_io = nullptr;
  for (size_t g = 0; g < c->groups_.size(); ++g) {
    absl::StatusOr<std::unique_ptr<EmbeddingLayer>> layer = EmbeddingLayer::Create(layer_options[g]);
    if (!layer.ok()) return layer.status();
    c->groups_[g]->layer = *std::move(layer);
    c->groups_[g]->cycle = std::make_unique<StepCycle>(c->groups_[g]->layer.get(), options.prefetch_batches);
  }
  return c;
}

absl::StatusOr<std::unique_ptr<Collection::Batch>> Collection::Convert(const FeatureArrays& in) {
  const size_t nf = features_.size();
  if (in.values.size() != nf || in.splits.size() != nf) {
    return absl::InvalidArgumentError(absl::StrCat("features: got ", in.values.size(), " where the collection has ", nf,
                                                   " (", absl::StrJoin(features_, ", "), ")"));
  }
  if (!in.weights.empty() && in.weights.size() != nf) {
    return absl::InvalidArgumentError(
        absl::StrCat("features: weights for ", in.weights.size(), " features where the collection has ", nf));
  }
  const int64_t batch = in.lengths ? in.splits[0].size : in.splits[0].size - 1;
  if (batch < 0) return absl::InvalidArgumentError(absl::StrCat("feature '", features_[0], "': offsets are empty"));
  std::unique_ptr<Batch> b;
  if (!spare_.empty()) {
    b = std::move(spare_.back());
    spare_.pop_back();
  } else {
    b = std::make_unique<Batch>();
    b->offsets.resize(groups_.size());
    b->indices.resize(groups_.size());
    b->weights.resize(groups_.size());
    b->bags.resize(groups_.size());
    b->checked.resize(groups_.size());
    for (size_t g = 0; g < groups_.size(); ++g) {
      b->offsets[g].resize(groups_[g]->tables.size());
      b->indices[g].resize(groups_[g]->tables.size());
      b->weights[g].resize(groups_[g]->tables.size());
      b->bags[g].resize(groups_[g]->tables.size());
    }
  }
  b->size = batch;
  int feature = 0;
  for (size_t i = 0; i < options_.tables.size(); ++i) {
    const CollectionTable& t = options_.tables[i];
    auto [g, p] = where_[i];
    std::vector<int32_t>& offsets = b->offsets[g][p];
    std::vector<int32_t>& indices = b->indices[g][p];
    std::vector<float>& weights = b->weights[g][p];
    offsets.assign(1, 0);
    indices.clear();
    weights.clear();
    for (size_t f = 0; f < t.features.size(); ++f, ++feature) {
      const IndexArray& values = in.values[feature];
      const IndexArray& splits = in.splits[feature];
      // For messages only: made when one is (no allocation per batch).
      auto where = [&] { return absl::StrCat("table '", t.name, "', feature '", t.features[f], "'"); };
      if (!in.weights.empty()) {
        const std::span<const float> w = in.weights[feature];
        if (static_cast<int64_t>(w.size()) != values.size) {
          return absl::InvalidArgumentError(
              absl::StrCat(where(), ": ", w.size(), " weights for ", values.size, " values (one weight per value)"));
        }
        weights.insert(weights.end(), w.begin(), w.end());
      }
      const int64_t bags = in.lengths ? splits.size : splits.size - 1;
      if (bags != batch) {
        return absl::InvalidArgumentError(absl::StrCat(where(), ": ", bags, " bags where feature '", features_[0],
                                                       "' has ", batch, " (every feature has one bag per sample)"));
      }
      if (!in.lengths && At(splits, 0) != 0) {
        return absl::InvalidArgumentError(absl::StrCat(where(), ": offsets[0] is ", At(splits, 0), ", not 0"));
      }
      if (static_cast<int64_t>(indices.size()) + values.size > INT32_MAX) {
        return absl::InvalidArgumentError(absl::StrCat(where(), ": more than 2^31 - 1 values in a batch"));
      }
      const int64_t base = static_cast<int64_t>(indices.size());
      int64_t end = 0;
      auto negative = [&](int64_t k) {
        return absl::InvalidArgumentError(absl::StrCat(where(), ", bag ", k, ": length ", At(splits, k), " < 0"));
      };
      for (int64_t k = 0; k < batch; ++k) {
        const int64_t next = in.lengths ? end + At(splits, k) : At(splits, k + 1);
        if (next < end) {
          return in.lengths ? negative(k)
                            : absl::InvalidArgumentError(absl::StrCat(where(), ", bag ", k, ": offsets decrease (",
                                                                      next, " after ", end, ")"));
        }
        if (next > values.size) {
          // A negative length further on shortened the feature's values
          // (cemb.torch cuts a batch's values by the sums of its lengths):
          // that one is named. Searched on failure only.
          for (int64_t j = k + 1; in.lengths && j < batch; ++j) {
            if (At(splits, j) < 0) return negative(j);
          }
          return absl::InvalidArgumentError(absl::StrCat(where(), ", bag ", k, ": ends at value ", next, ", past the ",
                                                         values.size, " values"));
        }
        end = next;
        offsets.push_back(static_cast<int32_t>(base + end));
      }
      if (end != values.size) {
        return absl::InvalidArgumentError(absl::StrCat(where(), ": the bags hold ", end, " values where there are ",
                                                       values.size,
                                                       in.lengths ? " (the lengths must sum to the values' count)"
                                                                  : " (offsets[B] must be the values' count)"));
      }
      for (int64_t k = 0; k < values.size; ++k) {
        const int64_t row = At(values, k);
        if (row < 0 || row >= t.rows) {
          // The bag holding value k: the last whose start is at or before it.
          const auto first = offsets.end() - batch - 1;
          const int64_t bag = std::upper_bound(first, offsets.end() - 1, static_cast<int32_t>(base + k)) - first - 1;
          return absl::OutOfRangeError(absl::StrCat(where(), ", bag ", bag, ", index ", base + k - first[bag], ": row ",
                                                    row,
                                                    row < 0 ? " < 0" : absl::StrCat(" >= ", t.rows, " (num_embeddings)")));
        }
        indices.push_back(static_cast<int32_t>(row));
      }
    }
    b->bags[g][p] = Bags<int32_t>{offsets, indices, weights};
  }
  return b;
}

absl::StatusOr<TableTraffic> Collection::CountTraffic(std::span<const FeatureArrays> sample) {
  TableTraffic traffic;
  traffic.counts.resize(options_.tables.size());
  std::vector<absl::flat_hash_map<int32_t, uint32_t>> seen(options_.tables.size());
  for (size_t k = 0; k < sample.size(); ++k) {
    absl::StatusOr<std::unique_ptr<Batch>> b = Convert(sample[k]);
    if (!b.ok()) {
      return absl::Status(b.status().code(), absl::StrCat("traffic sample, batch ", k, ": ", b.status().message()));
    }
    traffic.samples += static_cast<uint64_t>((*b)->size);
    for (size_t i = 0; i < options_.tables.size(); ++i) {
      auto [g, p] = where_[i];
      for (int32_t row : (*b)->indices[g][p]) ++seen[i][row];
    }
    spare_.push_back(*std::move(b));
  }
  for (size_t i = 0; i < seen.size(); ++i) {
    std::vector<uint32_t>& counts = traffic.counts[i];
    for (const auto& [row, count] : seen[i]) counts.push_back(count);
    std::sort(counts.begin(), counts.end(), std::greater<>());
  }
  return traffic;
}

absl::Status Collection::Prefetch(const FeatureArrays& features) {
  CEMB_ASSIGN_OR_RETURN(std::unique_ptr<Batch> b, Convert(features));
  b->id = next_id_++;
  if (b->id - last_begun_ <= options_.prefetch_batches) {
    for (size_t g = 0; g < groups_.size(); ++g) CEMB_RETURN_IF_ERROR(groups_[g]->cycle->PrefetchNow(b->id, b->bags[g]));
  }
  ahead_.push_back(std::move(b));
  return absl::OkStatus();
}

absl::Status Collection::Begin(Batch& batch) {
  for (size_t g = 0; g < groups_.size(); ++g) {
    Group& group = *groups_[g];
    group.ahead.clear();
    for (size_t i = 0; i < ahead_.size() && i < static_cast<size_t>(options_.prefetch_batches); ++i) {
      group.ahead.push_back(ahead_[i]->bags[g]);
    }
    CEMB_ASSIGN_OR_RETURN(batch.checked[g], group.cycle->Begin(batch.id, batch.bags[g], group.ahead));
  }
  return absl::OkStatus();
}

MatrixView Collection::Scratch(Group& group, int64_t batch) {
  const int64_t cols = static_cast<int64_t>(group.tables.size()) * group.dim;
  group.scratch.resize(static_cast<size_t>(group.features * batch * cols));
  return {group.scratch.data(), group.features * batch, cols, cols};
}

template <typename Fn>
void Collection::ForEachBlock(Group& group, int64_t batch, Fn fn) const {
  const int64_t cols = static_cast<int64_t>(group.tables.size()) * group.dim;
  for (int f = 0; f < group.features; ++f) {
    for (int64_t s = 0; s < batch; ++s) {
      float* row = group.scratch.data() + (f * batch + s) * cols;
      for (size_t p = 0; p < group.tables.size(); ++p) {
        fn(s, table_col_[group.tables[p]] + f * group.dim, row + static_cast<int64_t>(p) * group.dim);
      }
    }
  }
}

absl::StatusOr<int64_t> Collection::Forward(const FeatureArrays& features, MatrixView out, bool train) {
  if (train && static_cast<int>(open_.size()) >= options_.max_open_steps) {
    return absl::FailedPreconditionError(absl::StrCat(
        "forward: ", open_.size(), " training forwards await their backward (max_open_steps = ",
        options_.max_open_steps, "): run their backward, or drop their outputs; forward under torch.no_grad() or "
        "eval() when no backward will come"));
  }
  CEMB_ASSIGN_OR_RETURN(std::unique_ptr<Batch> b, Convert(features));
  if (out.rows != b->size || out.cols != width_) {
    const absl::Status status = absl::InvalidArgumentError(
        absl::StrCat("forward: output is [", out.rows, ", ", out.cols, "], needed [", b->size, ", ", width_, "]"));
    spare_.push_back(std::move(b));
    return status;
  }
  if (!ahead_.empty()) {
    if (!b->SameAs(*ahead_.front())) {
      spare_.push_back(std::move(b));
      return absl::FailedPreconditionError(
          "forward: these features are not the batch prefetch() was given first (prefetch(next) must get the "
          "features of the forwards that follow, in order)");
    }
    spare_.push_back(std::move(b));
    b = std::move(ahead_.front());
    ahead_.pop_front();
  } else {
    b->id = next_id_++;
  }
  last_begun_ = b->id;
  absl::Status status = Begin(*b);
  const int64_t batch = b->size;
  for (size_t g = 0; g < groups_.size() && status.ok(); ++g) {
    Group& group = *groups_[g];
    const int64_t cols = static_cast<int64_t>(group.tables.size()) * group.dim;
    if (group.in_place) {
      status = group.layer->Lookup(b->checked[g], out.slice(table_col_[group.tables[0]], cols));
      continue;
    }
    const MatrixView scratch = Scratch(group, batch);
    status = group.layer->Lookup(b->checked[g], scratch);
    if (status.ok()) {
      ForEachBlock(group, batch, [&](int64_t s, int64_t col, float* block) {
        std::memcpy(out.row(s) + col, block, sizeof(float) * group.dim);
      });
    }
  }
  if (!status.ok()) {
    // Nothing was written: the batch and the ones prefetched after it (a
    // prefetcher's error may be theirs) are dropped, their rows unpinned.
    const size_t dropped = ahead_.size();
    Abandon(std::move(b));
    DropAhead();
    return absl::Status(status.code(),
                        absl::StrCat("forward: ", Named(status.message()), " (the batch is dropped",
                                     dropped > 0 ? absl::StrCat(", with the ", dropped,
                                                                " prefetched after it: prefetch them again")
                                                 : std::string(),
                                     open_.empty() ? std::string()
                                                   : absl::StrCat("; ", open_.size(),
                                                                  " training forwards await their backward, their "
                                                                  "rows pinned"),
                                     ")"));
  }
  const int64_t id = b->id;
  if (train) {
    open_.push_back(std::move(b));
    return id;
  }
  absl::Status ended;
  for (auto& g : groups_) ended.Update(g->cycle->End(id));
  spare_.push_back(std::move(b));
  if (!ended.ok()) return ended;
  return id;
}

absl::Status Collection::Backward(int64_t step, ConstMatrixView grad, float lr) {
  auto it = std::find_if(open_.begin(), open_.end(), [&](const auto& b) { return b->id == step; });
  if (it == open_.end()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "backward: step ", step, " is not open (one backward per forward; a load between a forward and its "
        "backward drops the step)"));
  }
  Batch& b = **it;
  const int64_t batch = b.size;
  if (grad.rows != batch || grad.cols != width_) {
    return absl::InvalidArgumentError(absl::StrCat("backward: gradient is [", grad.rows, ", ", grad.cols,
                                                   "], needed [", batch, ", ", width_, "]"));
  }
  std::unique_ptr<Batch> owned = std::move(*it);
  open_.erase(it);
  // Step `step` becomes each layer's current step again (its plans, its
  // scopes); its ssd rows have stayed pinned since its forward. Every group
  // first, so that a refusal writes nothing.
  absl::Status status;
  for (size_t g = 0; g < groups_.size() && status.ok(); ++g) status = groups_[g]->layer->BeginStep(step).status();
  for (size_t g = 0; g < groups_.size() && status.ok(); ++g) {
    Group& group = *groups_[g];
    const int64_t cols = static_cast<int64_t>(group.tables.size()) * group.dim;
    if (group.in_place) {
      const ConstMatrixView block(grad.data + table_col_[group.tables[0]], batch, cols, grad.ld);
      status = group.layer->Update(b.checked[g], block, lr);
      continue;
    }
    const MatrixView scratch = Scratch(group, batch);
    ForEachBlock(group, batch, [&](int64_t s, int64_t col, float* block) {
      std::memcpy(block, grad.row(s) + col, sizeof(float) * group.dim);
    });
    status = group.layer->Update(b.checked[g], ConstMatrixView(scratch), lr);
  }
  if (!status.ok()) {
    Abandon(std::move(owned));
    return absl::Status(status.code(), absl::StrCat("backward: ", Named(status.message())));
  }
  for (auto& g : groups_) status.Update(g->cycle->End(step));
  spare_.push_back(std::move(owned));
  return status;
}

absl::Status Collection::Release(int64_t step) {
  auto it = std::find_if(open_.begin(), open_.end(), [&](const auto& b) { return b->id == step; });
  if (it == open_.end()) return absl::OkStatus();
  std::unique_ptr<Batch> b = std::move(*it);
  open_.erase(it);
  absl::Status status;
  for (auto& g : groups_) status.Update(g->cycle->End(step));
  spare_.push_back(std::move(b));
  return status;
}

void Collection::Abandon(std::unique_ptr<Batch> batch) {
  for (auto& g : groups_) {
    (void)g->cycle->Drain();  // a prefetcher may still be pinning it
    (void)g->cycle->End(batch->id);
  }
  spare_.push_back(std::move(batch));
}

void Collection::DropAhead() {
  while (!ahead_.empty()) {
    std::unique_ptr<Batch> b = std::move(ahead_.front());
    ahead_.pop_front();
    (void)Begin(*b);  // waits for its reads, so that no read lands in a slot let go
    Abandon(std::move(b));
  }
}

absl::Status Collection::Quiesce(bool drop_open) {
  DropAhead();
  while (drop_open && !open_.empty()) {
    std::unique_ptr<Batch> b = std::move(open_.back());
    open_.pop_back();
    Abandon(std::move(b));
  }
  for (auto& g : groups_) CEMB_RETURN_IF_ERROR(g->cycle->Drain());
  return absl::OkStatus();
}

absl::Status Collection::Save(const std::string& dir) {
  CEMB_RETURN_IF_ERROR(Quiesce(/*drop_open=*/false));
  for (auto& g : groups_) CEMB_RETURN_IF_ERROR(g->layer->Save(dir, "emb_"));
  return absl::OkStatus();
}

absl::Status Collection::Load(const std::string& dir) {
  CEMB_RETURN_IF_ERROR(Quiesce(/*drop_open=*/true));
  for (auto& g : groups_) CEMB_RETURN_IF_ERROR(g->layer->Load(dir, "emb_"));
  return absl::OkStatus();
}

absl::Status Collection::Export(const std::string& dir, const std::string& prefix) {
  CEMB_RETURN_IF_ERROR(Quiesce(/*drop_open=*/false));
  for (auto& g : groups_) CEMB_RETURN_IF_ERROR(g->layer->ExportNpy(dir, prefix));
  return absl::OkStatus();
}

absl::Status Collection::Import(const std::string& dir, const std::string& prefix) {
  CEMB_RETURN_IF_ERROR(Quiesce(/*drop_open=*/true));
  for (auto& g : groups_) CEMB_RETURN_IF_ERROR(g->layer->ImportNpy(dir, prefix));
  return absl::OkStatus();
}

absl::Status Collection::CheckWholeTable(int table, size_t values) const {
  if (table < 0 || table >= static_cast<int>(options_.tables.size())) {
    return absl::OutOfRangeError(absl::StrCat("table ", table, " of ", options_.tables.size()));
  }
  const CollectionTable& t = options_.tables[table];
  if (static_cast<int64_t>(values) != t.rows * t.dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("table '", t.name, "': ", values, " values where [", t.rows, ", ", t.dim, "] are needed"));
  }
  return absl::OkStatus();
}

absl::Status Collection::ReadTable(int table, std::span<float> rows) {
  CEMB_RETURN_IF_ERROR(CheckWholeTable(table, rows.size()));
  const CollectionTable& t = options_.tables[table];
  CEMB_RETURN_IF_ERROR(Quiesce(/*drop_open=*/false));
  auto [g, p] = where_[table];
  for (int64_t r = 0; r < t.rows; ++r) {
    CEMB_RETURN_IF_ERROR(groups_[g]->layer->ReadRow(p, r, rows.subspan(static_cast<size_t>(r * t.dim), t.dim)));
  }
  return absl::OkStatus();
}

absl::Status Collection::WriteTable(int table, std::span<const float> rows) {
  CEMB_RETURN_IF_ERROR(CheckWholeTable(table, rows.size()));
  const CollectionTable& t = options_.tables[table];
  CEMB_RETURN_IF_ERROR(Quiesce(/*drop_open=*/true));
  auto [g, p] = where_[table];
  for (int64_t r = 0; r < t.rows; ++r) {
    CEMB_RETURN_IF_ERROR(groups_[g]->layer->WriteRow(p, r, rows.subspan(static_cast<size_t>(r * t.dim), t.dim)));
  }
  return absl::OkStatus();
}

std::vector<TableReport> Collection::Report() const {
  std::vector<std::vector<TableReport>> by_group;
  for (const auto& g : groups_) by_group.push_back(g->layer->Report());
  std::vector<TableReport> reports;
  for (size_t i = 0; i < options_.tables.size(); ++i) {
    auto [g, p] = where_[i];
    reports.push_back(by_group[g][p]);
    reports.back().name = options_.tables[i].name;
  }
  return reports;
}

}  // namespace cemb::python
