// IndirectTable<T, D>: a benchmark-only table whose rowpointer() goes through
// a per-row pointer array, to measure what one indirection per row costs
// against SimpleTable's `base + row * D` (issue 2, item 14: direct vs
// indirect). The rows themselves live in a SimpleTable on the chosen tier;
// pointer r holds that table's row r, so both variants read the same bytes
// and differ only by the extra, dependent load of `pointers_[r]` (8 bytes of
// an 8 MiB array per million rows, which a random lookup misses in cache).
//
// Ownership: owns its storage table and the pointer array. Movable.
// Thread safety: as SimpleTable.
// NOTE: a pointer from rowpointer() stays valid for the table's lifetime.
//
// Example:
//   auto t = IndirectTable<float, 128>::Create({.name = "t0", .nvectors = 1 << 20});
//   InitUniform(*t, 1);
//   CEMB_RETURN_IF_ERROR(ensemble.add(*t));   // kernels from bench/indirect_kernels_*.cc
#ifndef CEMB_BENCH_INDIRECT_TABLE_H_
#define CEMB_BENCH_INDIRECT_TABLE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "embedding/simple_table.h"

namespace cemb::bench {

template <StorageType T, int64_t D = kDynamic>
class IndirectTable {
 public:
  using value_type = T;
  static constexpr int64_t kFeatureSize = D;

  [[nodiscard]] static absl::StatusOr<IndirectTable> Create(const TableOptions& options) {
    absl::StatusOr<SimpleTable<T, D>> storage = SimpleTable<T, D>::Create(options);
    if (!storage.ok()) return storage.status();
    std::vector<T*> pointers(static_cast<size_t>(options.nvectors));
    for (int64_t r = 0; r < options.nvectors; ++r) pointers[r] = storage->rowpointer(r, Access::kUpdate);
    return IndirectTable(*std::move(storage), std::move(pointers));
  }

  IndirectTable(IndirectTable&&) noexcept = default;
  IndirectTable& operator=(IndirectTable&&) noexcept = default;

  [[gnu::always_inline]] constexpr int64_t featuresize() const { return storage_.featuresize(); }
  [[gnu::always_inline]] int64_t nvectors() const { return storage_.nvectors(); }
  [[gnu::always_inline]] T* rowpointer(int64_t row, Access = Access::kForward) const { return pointers_[row]; }
  const std::string& name() const { return storage_.name(); }
  // The contiguous rows behind the pointers (for the machine-limit gather).
  const SimpleTable<T, D>& storage() const { return storage_; }

 private:
  IndirectTable(SimpleTable<T, D> storage, std::vector<T*> pointers)
      : storage_(std::move(storage)), pointers_(std::move(pointers)) {}

  SimpleTable<T, D> storage_;
  std::vector<T*> pointers_;
};

}  // namespace cemb::bench

// The IndirectTable types whose kernels bench/indirect_kernels_<isa>.cc compile.
#define CEMB_FOR_EACH_INDIRECT_TABLE(X)                                                  \
  X(::cemb::bench::IndirectTable<float, 16>) X(::cemb::bench::IndirectTable<float, 64>) \
  X(::cemb::bench::IndirectTable<float, 128>) X(::cemb::bench::IndirectTable<float, 256>)

#endif  // CEMB_BENCH_INDIRECT_TABLE_H_
