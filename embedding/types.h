// Vocabulary types shared by the tables and kernels of embedding/.
#ifndef CEMB_EMBEDDING_TYPES_H_
#define CEMB_EMBEDDING_TYPES_H_

#include <cstdint>
#include <span>

#include "base/enum_names.h"


namespace cemb {

// The feature size of a table known only at run time.
inline constexpr int64_t kDynamic = -1;

// Why a kernel asks for a row (thesis Table 5.2). A cached table moves a row
// into DRAM on kForward and only reads the current address otherwise; it
// counts kForward and kUpdate in its statistics, never kRead or kWrite.
enum class Access {
  kForward,   // a lookup will read the row
  kUpdate,    // a gradient will be applied to the row
  kPrefetch,  // an address for a prefetch hint only: no side effect, may be stale
  kRead,      // a read outside the kernels (save, inspect): no side effect;
              // between steps it is the row's current copy
  kWrite,     // a write outside the kernels (initialise, load, restore a row),
              // between steps: the row's current copy, not counted as traffic
};

enum class Pooling { kSum, kMean };

// The bytes of a DRAM slot holding one row of `row_bytes` bytes, in a cache
// (cache/) or the ssd tier's pool (ssd/): rounded up to 8, so that every
// slot's words are aligned. What the DRAM budget gives such a table is
// counted in slots (tables/dram_budget.h).
inline constexpr int64_t SlotBytes(int64_t row_bytes) { return (row_bytes + 7) / 8 * 8; }

// How an update applies a row's gradient g (summed over the row's
// occurrences in the batch): FBGEMM's optimizers of the same names.
enum class UpdateRule {
  kSgd,             // row -= lr * g
  kRowwiseAdagrad,  // EXACT_ROWWISE_ADAGRAD: s += mean(g^2); row -= lr * g / (sqrt(s) + eps),
                    // one accumulator s per row, kept apart (RowwiseAdagradState)
  kAdagrad,         // EXACT_ADAGRAD: m += g^2; row -= lr * g / (sqrt(m) + eps), element by
                    // element, m stored after the row's features (TableOptions::state_floats)
};

// How a kernel writes its final results: through the cache hierarchy, or with
// non-temporal (streaming) stores that bypass it. Streaming pays off when the
// written rows will not be read again soon (a large output, a cold row).
enum class Store { kStandard, kNonTemporal };

// Instruction-set paths of the kernels. kAuto picks the best the CPU has.
enum class Isa { kAuto, kGeneric, kAvx2, kAvx512 };

inline constexpr EnumName<Isa> kIsaNames[] = {
    {Isa::kAuto, "auto"}, {Isa::kGeneric, "generic"}, {Isa::kAvx2, "avx2"}, {Isa::kAvx512, "avx512"}};
inline const char* IsaName(Isa isa) { return NameOf(kIsaNames, isa); }

// A row-major fp32 matrix with a leading dimension: row i starts at
// data + i * ld. The kernels write featuresize() columns of each row, so one
// view can be a column slice of a larger matrix (the DLRM concatenation).
struct MatrixView {
  float* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t ld = 0;

  float* row(int64_t i) const { return data + i * ld; }
  // Columns [col, col + ncols) of this view.
  MatrixView slice(int64_t col, int64_t ncols) const { return {data + col, rows, ncols, ld}; }
};

struct ConstMatrixView {
  const float* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t ld = 0;

  ConstMatrixView() = default;
  ConstMatrixView(const float* d, int64_t r, int64_t c, int64_t l) : data(d), rows(r), cols(c), ld(l) {}
  ConstMatrixView(const MatrixView& m) : data(m.data), rows(m.rows), cols(m.cols), ld(m.ld) {}
  const float* row(int64_t i) const { return data + i * ld; }
  ConstMatrixView slice(int64_t col, int64_t ncols) const { return {data + col, rows, ncols, ld}; }
};

// Bags in CSR form: bag b holds indices[offsets[b] .. offsets[b+1]).
// offsets has nbags + 1 entries, offsets[0] == 0, and is non-decreasing;
// weights is empty or holds one weight per index.
template <typename Index>
struct Bags {
  std::span<const Index> offsets;
  std::span<const Index> indices;
  std::span<const float> weights = {};

  int64_t nbags() const { return offsets.empty() ? 0 : static_cast<int64_t>(offsets.size()) - 1; }
};

}  // namespace cemb

#endif  // CEMB_EMBEDDING_TYPES_H_
