// Ensemble: the embedding tables of a model, run together. One lookup or
// update of all tables is one parallel_for over work items: a table's bags
// are cut into chunks, each chunk owning distinct output rows, so no item
// takes a lock; the update cuts each table's unique rows (not its outputs)
// into chunks, so no two items touch the same row.
//
// Tables of different types (a SimpleTable in DRAM, one on PMem, a cached
// table) live in one ensemble: each is added with its planned TableKernels
// behind a small virtual interface, called once per chunk, never per row.
//
// Ownership: the ensemble holds the kernels (which point at the tables; the
// tables must outlive the ensemble) and one reusable UpdatePlan per table.
// Thread safety: one call at a time (the plans and work lists are reused, so
// a steady-state step allocates nothing).
//
// Example:
//   Ensemble ensemble({.threads = 2});
//   CEMB_RETURN_IF_ERROR(ensemble.add(table0));
//   CEMB_RETURN_IF_ERROR(ensemble.add(table1));
//   CEMB_RETURN_IF_ERROR(ensemble.pooled_lookup<int32_t>(bags, outputs));   // one Bags and one MatrixView per table
//   CEMB_RETURN_IF_ERROR(ensemble.reindex<int32_t>(bags, Pooling::kSum));
//   CEMB_RETURN_IF_ERROR(ensemble.sgd_update(grads, {.learning_rate = 0.1f}));
#ifndef CEMB_EMBEDDING_ENSEMBLE_H_
#define CEMB_EMBEDDING_ENSEMBLE_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "embedding/kernels.h"
#include "embedding/validate.h"
#include "base/parallel.h"

namespace cemb {

// The type-erased face of one table's kernels.
class TableOps {
 public:
  virtual ~TableOps() = default;
  virtual const std::string& name() const = 0;
  virtual int64_t nvectors() const = 0;
  virtual int64_t featuresize() const = 0;
  virtual std::string description() const = 0;

  virtual absl::Status validate(const Bags<int32_t>& bags, MatrixView out) const = 0;
  virtual absl::Status validate(const Bags<int64_t>& bags, MatrixView out) const = 0;
  // The output's shape only, for bags checked already.
  virtual absl::Status validate_output(int64_t nbags, MatrixView out) const = 0;
  virtual void pooled(const Bags<int32_t>& bags, MatrixView out, const LookupOptions& o, int64_t b0,
                      int64_t b1) const = 0;
  virtual void pooled(const Bags<int64_t>& bags, MatrixView out, const LookupOptions& o, int64_t b0,
                      int64_t b1) const = 0;
  virtual absl::Status validate_update(const UpdatePlan& plan, ConstMatrixView grad) const = 0;
  // state == nullptr: SGD; else row-wise AdaGrad with that accumulator array.
  virtual absl::Status validate_rule(UpdateRule rule) const = 0;
  virtual void update(const UpdatePlan& plan, ConstMatrixView grad, const UpdateOptions& o, UpdateRule rule,
                      float* state, int64_t u0, int64_t u1) const = 0;
};

template <RowTable Table>
class BoundTableOps final : public TableOps {
 public:
  explicit BoundTableOps(TableKernels<Table> kernels) : k_(std::move(kernels)) {}
  const TableKernels<Table>& kernels() const { return k_; }

  const std::string& name() const override { return k_.table().name(); }
  int64_t nvectors() const override { return k_.table().nvectors(); }
  int64_t featuresize() const override { return k_.table().featuresize(); }
  std::string description() const override { return k_.description(); }
  absl::Status validate(const Bags<int32_t>& bags, MatrixView out) const override { return Validate(bags, out); }
  absl::Status validate(const Bags<int64_t>& bags, MatrixView out) const override { return Validate(bags, out); }
  absl::Status validate_output(int64_t nbags, MatrixView out) const override {
    const Table& t = k_.table();
    return validate_matrix(t.name(), "output", t.featuresize(), nbags, out);
  }
  void pooled(const Bags<int32_t>& bags, MatrixView out, const LookupOptions& o, int64_t b0,
              int64_t b1) const override {
    k_.pooled_range(k_.pooled_args(bags, out, o), b0, b1);
  }
  void pooled(const Bags<int64_t>& bags, MatrixView out, const LookupOptions& o, int64_t b0,
              int64_t b1) const override {
    k_.pooled_range(k_.pooled_args(bags, out, o), b0, b1);
  }
  absl::Status validate_update(const UpdatePlan& plan, ConstMatrixView grad) const override {
    return k_.validate_update(plan, grad);
  }
  absl::Status validate_rule(UpdateRule rule) const override { return k_.validate_rule(rule); }
  void update(const UpdatePlan& plan, ConstMatrixView grad, const UpdateOptions& o, UpdateRule rule, float* state,
              int64_t u0, int64_t u1) const override {
    k_.update_range(rule, k_.update_args(plan, grad, o, state), u0, u1);
  }

 private:
  template <typename Index>
  absl::Status Validate(const Bags<Index>& bags, MatrixView out) const {
    const Table& t = k_.table();
    if (absl::Status s = validate_bags(t.name(), t.nvectors(), bags); !s.ok()) return s;
    return validate_matrix(t.name(), "output", t.featuresize(), bags.nbags(), out);
  }

  TableKernels<Table> k_;
};

struct EnsembleOptions {
  int threads = 0;  // 0: DefaultThreads()
  // Work items per thread and call; more balances better, fewer costs less.
  int items_per_thread = 8;
  KernelOptions kernels;
};

// Update plans a caller made ahead for some tables of a batch (a table set
// whose prefetch made them, ahead of the step), so that the ensemble does
// not make them again. One entry per table, or empty.
struct Prepared {
  // plans[t] != nullptr: table t's update plan, made from these bags[t].
  std::span<UpdatePlan* const> plans;
};

class Ensemble {
 public:
  explicit Ensemble(const EnsembleOptions& options = {}) : options_(options) {}

  // Plans the kernels of `table` (which must outlive the ensemble).
  template <RowTable Table>
  [[nodiscard]] absl::Status add(const Table& table) {
    absl::StatusOr<TableKernels<Table>> k = TableKernels<Table>::Create(table, options_.kernels);
    if (!k.ok()) return k.status();
    tables_.push_back(std::make_unique<BoundTableOps<Table>>(*std::move(k)));
    plans_.emplace_back();
    return absl::OkStatus();
  }

  int ntables() const { return static_cast<int>(tables_.size()); }
  const TableOps& table(int t) const { return *tables_[t]; }
  const UpdatePlan& plan(int t) const { return plans_[t]; }
  int threads() const { return options_.threads > 0 ? options_.threads : DefaultThreads(); }

  // out[t] = pooled_lookup of table t over bags[t]. Validates every table
  // first (CheckedBags: only that they were checked against this table's
  // rows, and the outputs' shapes); on an error nothing is written.
  // Performance: threads work on different tables at once, so when the
  // out[t] are column slices of one row-major matrix, give that matrix
  // 64-byte aligned rows (and slices of whole cache lines, e.g. D = 16 fp32):
  // otherwise neighbouring tables' blocks share cache lines and the threads
  // false-share every row (the Kaggle lookup from a std::vector took about
  // 4x as long: bench/history/training-step.md, "false sharing").
  template <typename Index>
  [[nodiscard]] absl::Status pooled_lookup(std::span<const Bags<Index>> bags, std::span<const MatrixView> out,
                                           const LookupOptions& options = {});
  template <typename Index>
  [[nodiscard]] absl::Status pooled_lookup(std::span<const CheckedBags<Index>> bags, std::span<const MatrixView> out,
                                           const LookupOptions& options = {});

  // Builds each table's update plan from the bags of its last lookup
  // (tables in parallel). Validates first (CheckedBags: as pooled_lookup).
  // With `prepared`, the tables whose plan was made ahead (prepared.plans[t]
  // non-null, built from these very bags[t] and pooling) take it by a swap
  // (it gets the old plan's buffers back, to build the next one in): not
  // built again; InvalidArgument when its shape is not that of bags[t].
  template <typename Index>
  [[nodiscard]] absl::Status reindex(std::span<const Bags<Index>> bags, Pooling pooling);
  template <typename Index>
  [[nodiscard]] absl::Status reindex(std::span<const CheckedBags<Index>> bags, Pooling pooling,
                                     const Prepared& prepared = {});

  // Applies grads[t] (one row per bag of table t) through the plans of the
  // last reindex(): SGD, row-wise AdaGrad with one state per table, or
  // element-wise AdaGrad (every table keeps its accumulators with its rows).
  [[nodiscard]] absl::Status sgd_update(std::span<const ConstMatrixView> grads, const UpdateOptions& options);
  [[nodiscard]] absl::Status rowwise_adagrad_update(std::span<const ConstMatrixView> grads,
                                                    std::span<RowwiseAdagradState* const> states,
                                                    const UpdateOptions& options);
  [[nodiscard]] absl::Status adagrad_update(std::span<const ConstMatrixView> grads, const UpdateOptions& options);

 private:
  struct Item {
    int table;
    int64_t begin, end;
  };
  absl::Status CheckCount(size_t n, const char* what) const;
  // Table t's bags: validate_bags (Bags), or that they were checked against
  // its rows (CheckedBags).
  template <typename Index>
  absl::Status CheckBagsOf(size_t t, const Bags<Index>& bags) const;
  template <typename Index>
  absl::Status CheckBagsOf(size_t t, const CheckedBags<Index>& bags) const;
  // pooled_lookup and reindex over either kind, once checked.
  template <typename B>
  absl::Status PooledLookup(std::span<const B> bags, std::span<const MatrixView> out, const LookupOptions& options);
  template <typename B>
  absl::Status Reindex(std::span<const B> bags, Pooling pooling, std::span<UpdatePlan* const> ready);
  // Cuts each table's [0, sizes[t]) into chunks, into items_.
  void MakeItems(std::span<const int64_t> sizes);
  absl::Status Update(std::span<const ConstMatrixView> grads, UpdateRule rule,
                      std::span<RowwiseAdagradState* const> states, const UpdateOptions& options);

  EnsembleOptions options_;
  std::vector<std::unique_ptr<TableOps>> tables_;
  std::vector<UpdatePlan> plans_;
  std::vector<Item> items_;
  std::vector<int64_t> sizes_;
};

}  // namespace cemb

#endif  // CEMB_EMBEDDING_ENSEMBLE_H_
