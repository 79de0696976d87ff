#include "embedding/ensemble.h"

#include <algorithm>

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

absl::Status Ensemble::CheckPrepared(const Prepared& prepared) const {
  if (!prepared.checked.empty()) CEMB_RETURN_IF_ERROR(CheckCount(prepared.checked.size(), "checked flags"));
  if (!prepared.plans.empty()) CEMB_RETURN_IF_ERROR(CheckCount(prepared.plans.size(), "plans made ahead"));
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

template <typename Index>
absl::Status Ensemble::pooled_lookup(std::span<const Bags<Index>> bags, std::span<const MatrixView> out,
                                     const LookupOptions& options, const Prepared& prepared) {
  if (absl::Status s = CheckCount(bags.size(), "bag sets"); !s.ok()) return s;
  if (absl::Status s = CheckCount(out.size(), "outputs"); !s.ok()) return s;
  if (absl::Status s = CheckPrepared(prepared); !s.ok()) return s;
  sizes_.resize(tables_.size());
  for (size_t t = 0; t < tables_.size(); ++t) {
    const bool checked = !prepared.checked.empty() && prepared.checked[t] != 0;
    if (absl::Status s = checked ? tables_[t]->validate_output(bags[t].nbags(), out[t])
                                 : tables_[t]->validate(bags[t], out[t]);
        !s.ok()) {
      return s;
    }
    sizes_[t] = bags[t].nbags();
  }
  MakeItems(sizes_);
  parallel_for(static_cast<int64_t>(items_.size()), options_.threads, [&](int64_t i) {
    const Item& item = items_[i];
    tables_[item.table]->pooled(bags[item.table], out[item.table], options, item.begin, item.end);
  });
  return absl::OkStatus();
}

template <typename Index>
absl::Status Ensemble::reindex(std::span<const Bags<Index>> bags, Pooling pooling, const Prepared& prepared) {
  if (absl::Status s = CheckCount(bags.size(), "bag sets"); !s.ok()) return s;
  if (absl::Status s = CheckPrepared(prepared); !s.ok()) return s;
  const std::span<UpdatePlan* const> ready = prepared.plans;
  auto made_ahead = [&](size_t t) { return !ready.empty() && ready[t] != nullptr; };
  auto checked = [&](size_t t) { return !prepared.checked.empty() && prepared.checked[t] != 0; };
  for (size_t t = 0; t < tables_.size(); ++t) {
    if (made_ahead(t)) {
      const UpdatePlan& p = *ready[t];
      const int64_t outputs = bags[t].offsets.empty() ? static_cast<int64_t>(bags[t].indices.size()) : bags[t].nbags();
      if (p.nvectors() != tables_[t]->nvectors() || p.noutputs() != outputs ||
          p.noccurrences() != static_cast<int64_t>(bags[t].indices.size())) {
        return absl::InvalidArgumentError(absl::StrCat("table ", tables_[t]->name(), ": a plan made ahead for ",
                                                       p.noutputs(), " bags of ", p.noccurrences(),
                                                       " indices, not this batch's"));
      }
    } else if (!checked(t)) {
      if (absl::Status s = validate_bags(tables_[t]->name(), tables_[t]->nvectors(), bags[t]); !s.ok()) return s;
    }
  }
  parallel_for(ntables(), options_.threads, [&](int64_t t) {
    if (made_ahead(static_cast<size_t>(t))) {
      std::swap(plans_[t], *ready[t]);
    } else {
      plans_[t].BuildUnchecked<Index>(tables_[t]->nvectors(), bags[t].offsets, bags[t].indices, bags[t].weights,
                                      pooling);
    }
  });
  return absl::OkStatus();
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
                                              const LookupOptions&, const Prepared&);
template absl::Status Ensemble::pooled_lookup(std::span<const Bags<int64_t>>, std::span<const MatrixView>,
                                              const LookupOptions&, const Prepared&);
template absl::Status Ensemble::reindex(std::span<const Bags<int32_t>>, Pooling, const Prepared&);
template absl::Status Ensemble::reindex(std::span<const Bags<int64_t>>, Pooling, const Prepared&);

}  // namespace cemb
