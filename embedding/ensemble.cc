#include "embedding/ensemble.h"

#include <algorithm>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/parallel.h"
#include "base/status_macros.h"

namespace cemb {

namespace internal {
bool StreamableRows(const void* base, int64_t ld_bytes, int64_t rows) {
  return reinterpret_cast<uintptr_t>(base) % 64 == 0 && (rows <= 1 || ld_bytes % 64 == 0);
}
}  // namespace internal

absl::Status Ensemble::CheckCount(size_t n, const char* what) const {
  if (n != tables_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("ensemble of ", tables_.size(), " tables given ", n, " ", what));
  }
  return absl::OkStatus();
}

void Ensemble::MakeItems(std::span<const int64_t> sizes) {
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  const int64_t target_items = static_cast<int64_t>(threads()) * options_.items_per_thread;
  const int64_t chunk = std::max<int64_t>(16, (total + target_items - 1) / std::max<int64_t>(1, target_items));
  items_.clear();
  for (int t = 0; t < static_cast<int>(sizes.size()); ++t) {
    for (int64_t b = 0; b < sizes[t]; b += chunk) items_.push_back({t, b, std::min(sizes[t], b + chunk)});
  }
}

namespace {

template <typename Index>
const Bags<Index>& BagsOf(const Bags<Index>& b) {
  return b;
}
template <typename Index>
const Bags<Index>& BagsOf(const CheckedBags<Index>& b) {
  return b.bags();
}
template <typename B>
using IndexOf = std::remove_cvref_t<decltype(BagsOf(std::declval<const B&>()).indices[0])>;

}  // namespace

template <typename Index>
absl::Status Ensemble::CheckBagsOf(size_t t, const Bags<Index>& bags) const {
  return validate_bags(tables_[t]->name(), tables_[t]->nvectors(), bags);
}

template <typename Index>
absl::Status Ensemble::CheckBagsOf(size_t t, const CheckedBags<Index>& bags) const {
  if (bags.nvectors() == tables_[t]->nvectors()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("table ", tables_[t]->name(), ": bags checked against ",
                                                 bags.nvectors(), " rows, where the table has ",
                                                 tables_[t]->nvectors()));
}

template <typename B>
absl::Status Ensemble::PooledLookup(std::span<const B> bags, std::span<const MatrixView> out,
                                    const LookupOptions& options) {
  if (absl::Status s = CheckCount(bags.size(), "bag sets"); !s.ok()) return s;
  if (absl::Status s = CheckCount(out.size(), "outputs"); !s.ok()) return s;
  sizes_.resize(tables_.size());
  for (size_t t = 0; t < tables_.size(); ++t) {
    if (absl::Status s = CheckBagsOf(t, bags[t]); !s.ok()) return s;
    sizes_[t] = BagsOf(bags[t]).nbags();
    if (absl::Status s = tables_[t]->validate_output(sizes_[t], out[t]); !s.ok()) return s;
  }
  MakeItems(sizes_);
  parallel_for(static_cast<int64_t>(items_.size()), options_.threads, [&](int64_t i) {
    const Item& item = items_[i];
    tables_[item.table]->pooled(BagsOf(bags[item.table]), out[item.table], options, item.begin, item.end);
  });
  return absl::OkStatus();
}

template <typename B>
absl::Status Ensemble::Reindex(std::span<const B> bags, Pooling pooling, std::span<UpdatePlan* const> ready) {
  using Index = IndexOf<B>;
  if (absl::Status s = CheckCount(bags.size(), "bag sets"); !s.ok()) return s;
  if (!ready.empty()) CEMB_RETURN_IF_ERROR(CheckCount(ready.size(), "plans made ahead"));
  auto made_ahead = [&](size_t t) { return !ready.empty() && ready[t] != nullptr; };
  for (size_t t = 0; t < tables_.size(); ++t) {
    if (absl::Status s = CheckBagsOf(t, bags[t]); !s.ok()) return s;
    if (made_ahead(t)) {
      const Bags<Index>& b = BagsOf(bags[t]);
      const UpdatePlan& p = *ready[t];
      const int64_t outputs = b.offsets.empty() ? static_cast<int64_t>(b.indices.size()) : b.nbags();
      if (p.nvectors() != tables_[t]->nvectors() || p.noutputs() != outputs ||
          p.noccurrences() != static_cast<int64_t>(b.indices.size())) {
        return absl::InvalidArgumentError(absl::StrCat("table ", tables_[t]->name(), ": a plan made ahead for ",
                                                       p.noutputs(), " bags of ", p.noccurrences(),
                                                       " indices, not this batch's"));
      }
    }
  }
  parallel_for(ntables(), options_.threads, [&](int64_t t) {
    if (made_ahead(static_cast<size_t>(t))) {
      std::swap(plans_[t], *ready[t]);
    } else {
      const Bags<Index>& b = BagsOf(bags[t]);
      plans_[t].BuildUnchecked<Index>(tables_[t]->nvectors(), b.offsets, b.indices, b.weights, pooling);
    }
  });
  return absl::OkStatus();
}

template <typename Index>
absl::Status Ensemble::pooled_lookup(std::span<const Bags<Index>> bags, std::span<const MatrixView> out,
                                     const LookupOptions& options) {
  return PooledLookup(bags, out, options);
}

template <typename Index>
absl::Status Ensemble::pooled_lookup(std::span<const CheckedBags<Index>> bags, std::span<const MatrixView> out,
                                     const LookupOptions& options) {
  return PooledLookup(bags, out, options);
}

template <typename Index>
absl::Status Ensemble::reindex(std::span<const Bags<Index>> bags, Pooling pooling) {
  return Reindex(bags, pooling, {});
}

template <typename Index>
absl::Status Ensemble::reindex(std::span<const CheckedBags<Index>> bags, Pooling pooling, const Prepared& prepared) {
  return Reindex(bags, pooling, prepared.plans);
}

absl::Status Ensemble::Update(std::span<const ConstMatrixView> grads, UpdateRule rule,
                              std::span<RowwiseAdagradState* const> states, const UpdateOptions& options) {
  if (absl::Status s = CheckCount(grads.size(), "gradients"); !s.ok()) return s;
  sizes_.resize(tables_.size());
  for (size_t t = 0; t < tables_.size(); ++t) {
    if (absl::Status s = tables_[t]->validate_update(plans_[t], grads[t]); !s.ok()) return s;
    if (absl::Status s = tables_[t]->validate_rule(rule); !s.ok()) return s;
    if (!states.empty() && (states[t] == nullptr || states[t]->nvectors() != tables_[t]->nvectors())) {
      return absl::InvalidArgumentError(absl::StrCat("table ", tables_[t]->name(), ": missing or mis-sized AdaGrad state"));
    }
    sizes_[t] = plans_[t].nunique();
  }
  MakeItems(sizes_);
  parallel_for(static_cast<int64_t>(items_.size()), options_.threads, [&](int64_t i) {
    const Item& item = items_[i];
    float* state = states.empty() ? nullptr : states[item.table]->data();
    tables_[item.table]->update(plans_[item.table], grads[item.table], options, rule, state, item.begin, item.end);
  });
  return absl::OkStatus();
}

absl::Status Ensemble::sgd_update(std::span<const ConstMatrixView> grads, const UpdateOptions& options) {
  return Update(grads, UpdateRule::kSgd, {}, options);
}

absl::Status Ensemble::adagrad_update(std::span<const ConstMatrixView> grads, const UpdateOptions& options) {
  return Update(grads, UpdateRule::kAdagrad, {}, options);
}

absl::Status Ensemble::rowwise_adagrad_update(std::span<const ConstMatrixView> grads,
                                              std::span<RowwiseAdagradState* const> states,
                                              const UpdateOptions& options) {
  if (absl::Status s = CheckCount(states.size(), "AdaGrad states"); !s.ok()) return s;
  return Update(grads, UpdateRule::kRowwiseAdagrad, states, options);
}

template absl::Status Ensemble::pooled_lookup(std::span<const Bags<int32_t>>, std::span<const MatrixView>,
                                              const LookupOptions&);
template absl::Status Ensemble::pooled_lookup(std::span<const Bags<int64_t>>, std::span<const MatrixView>,
                                              const LookupOptions&);
template absl::Status Ensemble::pooled_lookup(std::span<const CheckedBags<int32_t>>, std::span<const MatrixView>,
                                              const LookupOptions&);
template absl::Status Ensemble::pooled_lookup(std::span<const CheckedBags<int64_t>>, std::span<const MatrixView>,
                                              const LookupOptions&);
template absl::Status Ensemble::reindex(std::span<const Bags<int32_t>>, Pooling);
template absl::Status Ensemble::reindex(std::span<const Bags<int64_t>>, Pooling);
template absl::Status Ensemble::reindex(std::span<const CheckedBags<int32_t>>, Pooling, const Prepared&);
template absl::Status Ensemble::reindex(std::span<const CheckedBags<int64_t>>, Pooling, const Prepared&);

}  // namespace cemb
