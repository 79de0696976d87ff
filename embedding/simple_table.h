// SimpleTable<T, D>: the "direct" embedding table. nvectors() rows of
// featuresize() elements of T stored contiguously, row-major, in one Region
// of a memory tier; row r lives at base + r * stride, where a row's stride is
// its D features (RowFeatureBytes: an int8 row's scale and bias included)
// and, when the table keeps optimizer state with its rows
// (TableOptions::state_floats, element-wise AdaGrad's accumulators), that
// many fp32 values right after them. T is float or bfloat16 for a trained
// table, or a served format's element (embedding/row_format.h: float16,
// int8_rowwise), whose rows hold no state and are only read.
//
// The rowpointer interface (thesis Table 5.2), which every table type of
// CachedEmbeddings implements and every kernel is written against:
//   value_type                 float or bfloat16 (arithmetic is always fp32)
//   kFeatureSize               D, or kDynamic
//   featuresize()              D (a compile-time constant when D is static)
//   nvectors()                 number of rows
//   rowpointer(row, Access)    address of the row's current copy
//   name()                     for messages ("table 7")
// and, where a table keeps optimizer state with its rows (StateFloatsOf()):
//   state_floats()             fp32 values after each row's features, moved
//                              with the row wherever it goes (cache, log, files)
//
// SimpleTable<T, D> of a static D derives from SimpleTable<T, kDynamic>: the
// same rows and members, featuresize() a constant. A table of a static size
// the kernels are not specialised for (embedding/internal/feature_sizes.h)
// runs on its kDynamic base's kernels.
//
// Ownership: the table owns its Region. Movable, not copyable.
// Thread safety: rowpointer() is safe from any number of threads; what is
// written through the pointers is the caller's business (the kernels write
// disjoint rows).
// NOTE: a pointer from rowpointer() stays valid for the table's lifetime.
//
// Example:
//   auto table = SimpleTable<float, 128>::Create({.name = "t0", .nvectors = 1 << 20});
//   if (!table.ok()) return table.status();
//   float* row = table->rowpointer(42, Access::kForward);
#ifndef CEMB_EMBEDDING_SIMPLE_TABLE_H_
#define CEMB_EMBEDDING_SIMPLE_TABLE_H_

#include <concepts>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "embedding/bfloat16.h"
#include "embedding/memory.h"
#include "embedding/row_format.h"
#include "embedding/types.h"

namespace cemb {

// The element types of trainable rows (the kernels update them); the
// served-only ones are RowElement's others (embedding/row_format.h).
template <typename T>
concept StorageType = std::same_as<T, float> || std::same_as<T, bfloat16>;

// What every table type provides (see the header comment).
template <typename Table>
concept RowTable = requires(const Table& t, int64_t row) {
  typename Table::value_type;
  requires RowElement<typename Table::value_type>;
  { Table::kFeatureSize } -> std::convertible_to<int64_t>;
  { t.featuresize() } -> std::convertible_to<int64_t>;
  { t.nvectors() } -> std::convertible_to<int64_t>;
  { t.rowpointer(row, Access::kForward) } -> std::same_as<typename Table::value_type*>;
  { t.name() } -> std::convertible_to<std::string>;
};

// What code that holds row pointers of `t` keeps open meanwhile: the
// table's read_scope() (a CachedTable that evicts while others read returns
// a ReadSection, cache/epoch.h), or nothing. The kernels and table_io open
// one per call or chunk; so must any other code that calls rowpointer().
template <typename Table>
[[gnu::always_inline]] inline auto ReadScopeOf(const Table& t) {
  if constexpr (requires { t.read_scope(); }) {
    return t.read_scope();
  } else {
    return 0;
  }
}

struct TableOptions {
  std::string name = "table";
  int64_t nvectors = 0;
  // Required when D is kDynamic; 0 or D when D is static.
  int64_t featuresize = 0;
  // fp32 optimizer-state values stored after each row's features (0: none;
  // element-wise AdaGrad keeps featuresize). They start at zero, travel
  // with the row (every copy of a row is row_bytes() long) and are not
  // features: lookups never read them. REQUIRES: featuresize * sizeof(T) a
  // multiple of 4 when > 0 (the floats are aligned).
  int64_t state_floats = 0;
  TierOptions tier;
};

// A table's state_floats(), or 0 for a table type without optimizer state.
template <typename Table>
int64_t StateFloatsOf(const Table& t) {
  if constexpr (requires { t.state_floats(); }) {
    return t.state_floats();
  } else {
    return 0;
  }
}

// The optimizer state of a row that holds `featuresize` elements of T.
template <typename T>
[[gnu::always_inline]] inline float* RowState(T* row, int64_t featuresize) {
  return reinterpret_cast<float*>(row + featuresize);
}

template <RowElement T, int64_t D = kDynamic>
class SimpleTable;

// The run-time feature size. Every SimpleTable<T, D> of a static D derives
// from it (below), so code written for SimpleTable<T, kDynamic> takes any
// table of T.
template <RowElement T>
class SimpleTable<T, kDynamic> {
 public:
  using value_type = T;
  static constexpr int64_t kFeatureSize = kDynamic;

  // Rows read as zero; initialise with InitUniform() or LoadRows().
  [[nodiscard]] static absl::StatusOr<SimpleTable> Create(const TableOptions& options) {
    if (options.featuresize <= 0) return absl::InvalidArgumentError(absl::StrCat(options.name, ": featuresize must be > 0"));
    if (options.nvectors <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(options.name, ": nvectors must be > 0"));
    }
    if (absl::Status s = CheckStateFloats(options); !s.ok()) return s;
    const int64_t stride = (RowFeatureBytes<T>(options.featuresize) + options.state_floats * 4) /
                           static_cast<int64_t>(sizeof(T));
    absl::StatusOr<Region> region = Region::Allocate(
        options.tier, static_cast<size_t>(options.nvectors) * static_cast<size_t>(stride) * sizeof(T));
    if (!region.ok()) {
      return absl::Status(region.status().code(),
                          absl::StrCat(options.name, ": ", region.status().message()));
    }
    return SimpleTable(*std::move(region), options.name, options.nvectors, options.featuresize, stride);
  }

  // The shared checks of state_floats (every table type's Create).
  static absl::Status CheckStateFloats(const TableOptions& options) {
    if (options.state_floats < 0) {
      return absl::InvalidArgumentError(absl::StrCat(options.name, ": state_floats ", options.state_floats, " < 0"));
    }
    if (!StorageType<T> && options.state_floats != 0) {
      return absl::InvalidArgumentError(absl::StrCat(options.name, ": rows in ", RowFormatName(kRowFormatOf<T>),
                                                     " are served, never trained: they hold no optimizer state"));
    }
    if (options.state_floats > 0 && options.featuresize * static_cast<int64_t>(sizeof(T)) % 4 != 0) {
      return absl::InvalidArgumentError(absl::StrCat(options.name, ": optimizer state after rows of ",
                                                     options.featuresize, " bfloat16 values needs an even featuresize"));
    }
    return absl::OkStatus();
  }

  SimpleTable(SimpleTable&&) noexcept = default;
  SimpleTable& operator=(SimpleTable&&) noexcept = default;

  [[gnu::always_inline]] int64_t featuresize() const { return featuresize_; }
  [[gnu::always_inline]] int64_t nvectors() const { return nvectors_; }
  [[gnu::always_inline]] T* rowpointer(int64_t row, Access = Access::kForward) const {
    return base_ + row * stride_;
  }
  const std::string& name() const { return name_; }
  const Region& region() const { return region_; }
  // A row's bytes: its features and its optimizer state.
  size_t row_bytes() const { return static_cast<size_t>(stride_) * sizeof(T); }
  int64_t state_floats() const {
    return (stride_ * static_cast<int64_t>(sizeof(T)) - RowFeatureBytes<T>(featuresize_)) / 4;
  }

  // Makes the stores to rows [begin, end) durable on a persistent tier.
  void persist_rows(int64_t begin, int64_t end) const {
    if (region_.persistent() && end > begin) {
      region_.persist(rowpointer(begin), static_cast<size_t>(end - begin) * row_bytes());
    }
  }

 protected:
  SimpleTable(Region region, std::string name, int64_t nvectors, int64_t featuresize, int64_t stride)
      : region_(std::move(region)),
        base_(reinterpret_cast<T*>(region_.data())),
        nvectors_(nvectors),
        featuresize_(featuresize),
        stride_(stride),
        name_(std::move(name)) {}

  Region region_;
  T* base_;
  int64_t nvectors_;
  int64_t featuresize_;
  int64_t stride_;  // elements of T from one row to the next
  std::string name_;
};

// A static feature size: the same rows, with featuresize() a compile-time
// constant the kernels specialise on. It adds no state to its kDynamic base,
// whose featuresize() returns D too (rowpointer() is the base's: the stride
// is D only without optimizer state).
template <RowElement T, int64_t D>
class SimpleTable : public SimpleTable<T, kDynamic> {
  using Dynamic = SimpleTable<T, kDynamic>;

 public:
  using value_type = T;
  using dynamic_type = Dynamic;  // the base: this table with a run-time size
  static constexpr int64_t kFeatureSize = D;
  static_assert(D > 0);

  // Rows read as zero; initialise with InitUniform() or LoadRows().
  [[nodiscard]] static absl::StatusOr<SimpleTable> Create(const TableOptions& options) {
    if (options.featuresize != 0 && options.featuresize != D) {
      return absl::InvalidArgumentError(absl::StrCat(
          options.name, ": featuresize ", options.featuresize, " given to a table of static size ", D));
    }
    TableOptions o = options;
    o.featuresize = D;
    absl::StatusOr<Dynamic> rows = Dynamic::Create(o);
    if (!rows.ok()) return rows.status();
    return SimpleTable(*std::move(rows));
  }

  SimpleTable(SimpleTable&&) noexcept = default;
  SimpleTable& operator=(SimpleTable&&) noexcept = default;

  [[gnu::always_inline]] constexpr int64_t featuresize() const { return D; }

 private:
  explicit SimpleTable(Dynamic rows) : Dynamic(std::move(rows)) {}
};

// `table` checked for a table of T with static size D (kDynamic: the
// options' featuresize), with featuresize resolved: a static size the
// options contradict, a featuresize or nvectors <= 0, or state_floats the
// rows cannot hold aligned is InvalidArgument naming the table. The tables
// whose rows live in a file (SsdTable, SnapshotTable) check their shape here.
template <RowElement T, int64_t D>
absl::StatusOr<TableOptions> CheckedShape(const TableOptions& table) {
  if (D != kDynamic && table.featuresize != 0 && table.featuresize != D) {
    return absl::InvalidArgumentError(
        absl::StrCat(table.name, ": featuresize ", table.featuresize, " given to a table of static size ", D));
  }
  TableOptions shape = table;
  shape.featuresize = D == kDynamic ? table.featuresize : D;
  if (shape.featuresize <= 0) return absl::InvalidArgumentError(absl::StrCat(table.name, ": featuresize must be > 0"));
  if (table.nvectors <= 0) return absl::InvalidArgumentError(absl::StrCat(table.name, ": nvectors must be > 0"));
  if (absl::Status s = SimpleTable<T, kDynamic>::CheckStateFloats(shape); !s.ok()) return s;
  return shape;
}

}  // namespace cemb

#endif  // CEMB_EMBEDDING_SIMPLE_TABLE_H_
