// IndirectTable<T, D>: a benchmark-only table whose rowpointer() goes through
// a per-row pointer array, to measure what one indirection per row costs
// against SimpleTable's `base + row * D` (direct vs
// indirect). The rows themselves live in a SimpleTable on the chosen tier;
// pointer r holds that table's row r, so both variants read the same bytes
// and differ only by the extra, dependent load of `pointers_[r]` (8 bytes of
// an 8 MiB array per million rows, which a random lookup misses in cache).
//
// With kResolveAhead, it also offers what CachedTable offers the kernels
// (indirection_address, and access_and_cache(rows, n, out, ahead) that
// resolves a block of rows and prefetches the next block's pointers), so
// the kernels read it exactly as they read a fully cached table: the same
// resolve-ahead pipeline without tags, counters or reclamation (serve_bench
// --pairs: what one pointer per row costs by itself).
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

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "embedding/memory.h"
#include "embedding/simple_table.h"

namespace cemb::bench {

template <StorageType T, int64_t D = kDynamic, bool kResolveAhead = false>
class IndirectTable {
 public:
  using value_type = T;
  static constexpr int64_t kFeatureSize = D;

  [[nodiscard]] static absl::StatusOr<IndirectTable> Create(const TableOptions& options) {
    absl::StatusOr<SimpleTable<T, D>> storage = SimpleTable<T, D>::Create(options);
    if (!storage.ok()) return storage.status();
    // The pointers on huge pages when they fill one, as CachedTable's words.
    const size_t bytes = static_cast<size_t>(options.nvectors) * sizeof(T*);
    absl::StatusOr<Region> pointers = Region::Allocate(TierOptions::DramFor(bytes), bytes);
    if (!pointers.ok()) return pointers.status();
    T** p = reinterpret_cast<T**>(pointers->data());
    for (int64_t r = 0; r < options.nvectors; ++r) p[r] = storage->rowpointer(r, Access::kUpdate);
    return IndirectTable(*std::move(storage), *std::move(pointers));
  }

  IndirectTable(IndirectTable&&) noexcept = default;
  IndirectTable& operator=(IndirectTable&&) noexcept = default;

  [[gnu::always_inline]] constexpr int64_t featuresize() const { return storage_.featuresize(); }
  [[gnu::always_inline]] int64_t nvectors() const { return storage_.nvectors(); }
  [[gnu::always_inline]] T* rowpointer(int64_t row, Access = Access::kForward) const { return pointers_[row]; }
  [[gnu::always_inline]] const void* indirection_address(int64_t row) const
    requires kResolveAhead
  {
    return &pointers_[row];
  }
  template <typename Index>
  [[gnu::always_inline]] void access_and_cache(const Index* rows, int64_t n, const T** out, int64_t ahead) const
    requires kResolveAhead
  {
    T* const* pointers = pointers_;
    const int64_t both = std::min(n, ahead);
    for (int64_t k = 0; k < both; ++k) {
      __builtin_prefetch(&pointers[rows[n + k]], 0, 3);
      out[k] = pointers[rows[k]];
    }
    for (int64_t k = both; k < n; ++k) out[k] = pointers[rows[k]];
  }
  const std::string& name() const { return storage_.name(); }
  // The contiguous rows behind the pointers (for the machine-limit gather).
  const SimpleTable<T, D>& storage() const { return storage_; }

 private:
  IndirectTable(SimpleTable<T, D> storage, Region pointers)
      : storage_(std::move(storage)),
        pointers_region_(std::move(pointers)),
        pointers_(reinterpret_cast<T**>(pointers_region_.data())) {}

  SimpleTable<T, D> storage_;
  Region pointers_region_;
  T** pointers_;
};

}  // namespace cemb::bench

// The IndirectTable types whose kernels bench/indirect_kernels_<isa>.cc compile.
#define CEMB_FOR_EACH_INDIRECT_TABLE(X)                                                  \
  X(::cemb::bench::IndirectTable<float, 16>) X(::cemb::bench::IndirectTable<float, 64>) \
  X(::cemb::bench::IndirectTable<float, 128>) X(::cemb::bench::IndirectTable<float, 256>) \
  X(::cemb::bench::IndirectTable<float, 64, true>) X(::cemb::bench::IndirectTable<float, 128, true>)

#endif  // CEMB_BENCH_INDIRECT_TABLE_H_
