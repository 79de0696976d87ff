// The embedding kernels of one table, planned once: TableKernels<Table>
// picks, at Create(), the instruction set (AVX-512, AVX2 or generic, at run
// time) and the kernel specialised for the table's feature size (one of
// internal/feature_sizes.h: 16, 32, 64, 128, 256), or a tiled fallback for
// any other, and then only runs them. A table of a static size outside that
// list runs on the tiled kernels of its kDynamic base type (SimpleTable<T, D>
// derives from SimpleTable<T, kDynamic>, CachedTable likewise), so every
// SimpleTable and CachedTable type has kernels.
//
// Reference semantics (for out = a MatrixView, row(r) = the table's row r in fp32):
//   lookup:         out[i, :] = row(indices[i])                      (non-reducing)
//   pooled_lookup:  out[b, :] = s_b * sum_{j in bag b} w_j row(indices[j])
//                   w_j = weights[j] or 1;  s_b = 1/|bag| for kMean, else 1;
//                   an empty bag gives a zero row
//   sgd_update:     for each unique row u of the plan:
//                     g = sum_k scale_k * grad[source_k, :];  row(u) -= lr * g
//   rowwise_adagrad_update: g as above; state[u] += mean(g .* g);
//                   row(u) -= lr * g / (sqrt(state[u]) + eps)      (FBGEMM's EXACT_ROWWISE_ADAGRAD)
//   adagrad_update: g as above; m = row u's fp32 state (after its features), element-wise:
//                   m += g .* g; row(u) -= lr * g / (sqrt(m) + eps)  (FBGEMM's EXACT_ADAGRAD)
// Only featuresize() columns of each output row are written, so `out` may be
// a column slice of a larger matrix (the DLRM concatenation costs nothing).
//
// Errors: every input is validated once here (validate.h) and a bad one
// returns a Status naming table, bag, position and row; the table and the
// output are then untouched. The *_range functions are the unchecked,
// single-threaded pieces the ensemble executor calls in parallel.
//
// Thread safety: a TableKernels is immutable after Create(); lookups may run
// concurrently; updates of one table must not overlap other accesses to the
// same rows (the executor partitions unique rows).
// NOTE: holds a pointer to the table, which must outlive it.
//
// Example:
//   auto table = SimpleTable<float, 128>::Create({.name = "t0", .nvectors = 1 << 20});
//   auto kernels = TableKernels<SimpleTable<float, 128>>::Create(*table);
//   CEMB_RETURN_IF_ERROR(kernels->pooled_lookup(Bags<int32_t>{offsets, indices}, out));
//   CEMB_RETURN_IF_ERROR(reindex(table->name(), table->nvectors(), bags, Pooling::kSum, &plan));
//   CEMB_RETURN_IF_ERROR(kernels->sgd_update(plan, grad, {.learning_rate = 0.1f}));
#ifndef CEMB_EMBEDDING_KERNELS_H_
#define CEMB_EMBEDDING_KERNELS_H_

#include <cstdint>
#include <concepts>
#include <cstdio>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "embedding/cpu.h"
#include "embedding/internal/feature_sizes.h"
#include "embedding/internal/kernel_args.h"
#include "embedding/reindex.h"
#include "embedding/simple_table.h"
#include "embedding/validate.h"

namespace cemb {

struct KernelOptions {
  Isa isa = Isa::kAuto;
  // Rows ahead whose cache lines are prefetched (0 turns prefetching off).
  int prefetch_distance = internal::kDefaultPrefetchDistance;
  // Print the chosen kernel once, at Create(), to stderr.
  bool log_choice = false;
};

struct LookupOptions {
  Pooling pooling = Pooling::kSum;  // pooled_lookup only
  Store store = Store::kStandard;
};

struct UpdateOptions {
  float learning_rate = 0.01f;
  Store store = Store::kStandard;
  float eps = 1e-8f;  // the AdaGrad updates only
};

// One accumulator per row for row-wise AdaGrad (FBGEMM's
// EXACT_ROWWISE_ADAGRAD), zero-initialised.
class RowwiseAdagradState {
 public:
  explicit RowwiseAdagradState(int64_t nvectors) : sum_(static_cast<size_t>(nvectors), 0.0f) {}
  int64_t nvectors() const { return static_cast<int64_t>(sum_.size()); }
  float* data() { return sum_.data(); }
  std::span<float> values() { return sum_; }

 private:
  std::vector<float> sum_;
};

namespace internal {
// A table of a static feature size that names, as dynamic_type, the
// kDynamic table type it derives from.
template <typename Table>
concept HasDynamicBase = requires { typename Table::dynamic_type; } &&
                         std::derived_from<Table, typename Table::dynamic_type> &&
                         Table::dynamic_type::kFeatureSize == kDynamic;

// The table type whose compiled kernels (the ISA translation units'
// MakeKernels<Isa><KernelTable>) run a `Table`: the table itself when its
// feature size is kDynamic or specialised, else its kDynamic base.
template <RowTable Table>
constexpr auto KernelTableOf() {
  if constexpr (Table::kFeatureSize == kDynamic || IsSpecialisedFeatureSize(Table::kFeatureSize)) {
    return std::type_identity<Table>{};
  } else if constexpr (HasDynamicBase<Table>) {
    return std::type_identity<typename Table::dynamic_type>{};
  } else {
    static_assert(HasDynamicBase<Table>,
                  "no kernels for this static feature size; the specialised sizes are" CEMB_FEATURE_SIZES_STRING
                  " (embedding/internal/feature_sizes.h): use one of them or kDynamic");
    return std::type_identity<Table>{};
  }
}
template <RowTable Table>
using KernelTable = typename decltype(KernelTableOf<Table>())::type;

// Streaming stores need every written vector 64-byte aligned (a 256-bit
// vector 32-byte aligned); otherwise the kernels store normally.
bool StreamableRows(const void* base, int64_t ld_bytes, int64_t rows);
}  // namespace internal

template <RowTable Table>
class TableKernels {
 public:
  using value_type = typename Table::value_type;
  // The type the kernels were compiled for: Table, or its kDynamic base.
  using KernelTable = internal::KernelTable<Table>;

  [[nodiscard]] static absl::StatusOr<TableKernels> Create(const Table& table, const KernelOptions& options = {}) {
    absl::StatusOr<Isa> isa = ResolveIsa(options.isa);
    if (!isa.ok()) return isa.status();
    internal::KernelSet<KernelTable> set;
    switch (*isa) {  // ResolveIsa only returns ISAs this build has kernels for
#if defined(CEMB_HAVE_AVX512_KERNELS)
      case Isa::kAvx512: set = internal::MakeKernelsAvx512<KernelTable>(table.featuresize()); break;
#endif
#if defined(CEMB_HAVE_AVX2_KERNELS)
      case Isa::kAvx2: set = internal::MakeKernelsAvx2<KernelTable>(table.featuresize()); break;
#endif
      default: set = internal::MakeKernelsGeneric<KernelTable>(table.featuresize()); break;
    }
    TableKernels k(table, set, options.prefetch_distance);
    if (options.log_choice) std::fprintf(stderr, "cemb: %s\n", k.description().c_str());
    return k;
  }

  const Table& table() const { return *table_; }
  Isa isa() const { return set_.isa; }
  // The compile-time feature size of the chosen kernel; 0 for the fallback.
  int64_t specialised_size() const { return set_.specialised_size; }
  // "table t0: avx512 kernels, bfloat16 rows, D=128 specialised (static)"
  std::string description() const {
    return absl::StrCat("table ", table_->name(), ": ", IsaName(set_.isa), " kernels, ",
                        std::is_same_v<value_type, float> ? "float" : "bfloat16", " rows, D=", table_->featuresize(),
                        set_.specialised_size > 0 ? " specialised" : " tiled fallback",
                        Table::kFeatureSize == kDynamic ? " (dynamic)" : " (static)");
  }

  // --- validating, single-threaded --------------------------------------

  template <typename Index>
  [[nodiscard]] absl::Status lookup(std::span<const Index> indices, MatrixView out,
                                    const LookupOptions& options = {}) const {
    const int64_t n = static_cast<int64_t>(indices.size());
    if (absl::Status s = validate_indices(table_->name(), table_->nvectors(), indices); !s.ok()) return s;
    if (absl::Status s = validate_matrix(table_->name(), "output", table_->featuresize(), n, out); !s.ok()) return s;
    lookup_range(gather_args(indices, out, options), 0, n);
    return absl::OkStatus();
  }

  template <typename Index>
  [[nodiscard]] absl::Status pooled_lookup(const Bags<Index>& bags, MatrixView out,
                                           const LookupOptions& options = {}) const {
    if (absl::Status s = validate_bags(table_->name(), table_->nvectors(), bags); !s.ok()) return s;
    if (absl::Status s = validate_matrix(table_->name(), "output", table_->featuresize(), bags.nbags(), out);
        !s.ok()) {
      return s;
    }
    pooled_range(pooled_args(bags, out, options), 0, bags.nbags());
    return absl::OkStatus();
  }

  [[nodiscard]] absl::Status sgd_update(const UpdatePlan& plan, ConstMatrixView grad,
                                        const UpdateOptions& options) const {
    if (absl::Status s = validate_update(plan, grad); !s.ok()) return s;
    update_range(UpdateRule::kSgd, update_args(plan, grad, options, nullptr), 0, plan.nunique());
    return absl::OkStatus();
  }

  [[nodiscard]] absl::Status rowwise_adagrad_update(const UpdatePlan& plan, ConstMatrixView grad,
                                                    RowwiseAdagradState& state, const UpdateOptions& options) const {
    if (absl::Status s = validate_update(plan, grad); !s.ok()) return s;
    if (state.nvectors() != table_->nvectors()) {
      return absl::InvalidArgumentError(absl::StrCat("table ", table_->name(), ": AdaGrad state has ",
                                                     state.nvectors(), " rows, table ", table_->nvectors()));
    }
    update_range(UpdateRule::kRowwiseAdagrad, update_args(plan, grad, options, state.data()), 0, plan.nunique());
    return absl::OkStatus();
  }

  // Element-wise: the table keeps featuresize() accumulators with each row
  // (TableOptions::state_floats).
  [[nodiscard]] absl::Status adagrad_update(const UpdatePlan& plan, ConstMatrixView grad,
                                            const UpdateOptions& options) const {
    if (absl::Status s = validate_update(plan, grad); !s.ok()) return s;
    if (absl::Status s = validate_rule(UpdateRule::kAdagrad); !s.ok()) return s;
    update_range(UpdateRule::kAdagrad, update_args(plan, grad, options, nullptr), 0, plan.nunique());
    return absl::OkStatus();
  }

  // --- unchecked pieces for executors -------------------------------------

  template <typename Index>
  internal::GatherArgs<Index> gather_args(std::span<const Index> indices, MatrixView out,
                                          const LookupOptions& options) const {
    return {indices.data(), out, Streams(options.store, out), prefetch_, static_cast<int64_t>(indices.size())};
  }
  template <typename Index>
  internal::PooledArgs<Index> pooled_args(const Bags<Index>& bags, MatrixView out,
                                          const LookupOptions& options) const {
    return {bags.offsets.data(), bags.indices.data(), bags.weights.empty() ? nullptr : bags.weights.data(),
            out, options.pooling, Streams(options.store, out), prefetch_,
            static_cast<int64_t>(bags.indices.size())};
  }
  internal::UpdateArgs update_args(const UpdatePlan& plan, ConstMatrixView grad, const UpdateOptions& options,
                                   float* state) const {
    const bool stream = options.store == Store::kNonTemporal &&
                        internal::StreamableRows(table_->rowpointer(0, Access::kPrefetch),
                                                 table_->featuresize() * static_cast<int64_t>(sizeof(value_type)) +
                                                     StateFloatsOf(*table_) * static_cast<int64_t>(sizeof(float)),
                                                 table_->nvectors());
    return {plan.rows().data(), plan.offsets().data(), plan.sources().data(),
            plan.scales().empty() ? nullptr : plan.scales().data(), grad, options.learning_rate, stream, prefetch_,
            state, options.eps};
  }

  template <typename Index>
  void lookup_range(const internal::GatherArgs<Index>& a, int64_t begin, int64_t end) const {
    set_.template gather<Index>()(*table_, a, begin, end);
  }
  template <typename Index>
  void pooled_range(const internal::PooledArgs<Index>& a, int64_t bag_begin, int64_t bag_end) const {
    set_.template pooled<Index>()(*table_, a, bag_begin, bag_end);
  }
  void update_range(UpdateRule rule, const internal::UpdateArgs& a, int64_t begin, int64_t end) const {
    set_.update(rule)(*table_, a, begin, end);
  }

  absl::Status validate_update(const UpdatePlan& plan, ConstMatrixView grad) const {
    if (plan.nunique() > 0 && plan.nvectors() != table_->nvectors()) {
      return absl::InvalidArgumentError(absl::StrCat("table ", table_->name(), ": update plan built for ",
                                                     plan.nvectors(), " rows, table has ", table_->nvectors()));
    }
    return validate_matrix(table_->name(), "gradient", table_->featuresize(), plan.noutputs(), grad);
  }
  // Element-wise AdaGrad needs a table that keeps an accumulator per element.
  absl::Status validate_rule(UpdateRule rule) const {
    if (rule == UpdateRule::kAdagrad && StateFloatsOf(*table_) < table_->featuresize()) {
      return absl::InvalidArgumentError(absl::StrCat("table ", table_->name(), ": element-wise AdaGrad needs ",
                                                     table_->featuresize(), " state values with each row, the table keeps ",
                                                     StateFloatsOf(*table_), " (TableOptions::state_floats)"));
    }
    return absl::OkStatus();
  }

 private:
  TableKernels(const Table& table, internal::KernelSet<KernelTable> set, int prefetch)
      : table_(&table), set_(set), prefetch_(prefetch) {}

  bool Streams(Store store, const MatrixView& out) const {
    return store == Store::kNonTemporal && set_.specialised_size > 0 &&
           internal::StreamableRows(out.data, out.ld * static_cast<int64_t>(sizeof(float)), out.rows);
  }

  const Table* table_;
  internal::KernelSet<KernelTable> set_;
  int prefetch_;
};

}  // namespace cemb

#endif  // CEMB_EMBEDDING_KERNELS_H_
