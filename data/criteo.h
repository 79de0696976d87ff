// The Criteo click-log line format (Kaggle `train.txt` and Terabyte `day_N`)
// and its line parser.
//
// A line holds 40 tab-separated fields: the label (0 or 1), 13 integer
// features I1..I13 (decimal, possibly negative) and 26 categorical features
// C1..C26 (up to 8 hexadecimal digits, a 32-bit id). An empty field is a
// missing value. The line ends at '\n' (one trailing '\r' is tolerated); the
// last fields may be empty, so a line can end in "\t\t".
//
// Conventions (those of the reference DLRM preprocessing):
//   - a missing integer feature reads as 0;
//   - a missing categorical feature reads as id 0;
//   - a dense feature becomes DenseTransform(x) = log(1 + max(x, 0)).
//
// Thread safety: ParseCriteoLine() is a pure function; call it from any thread.
//
//   CriteoRow row;
//   absl::Status s = ParseCriteoLine("1\t5\t\t...\t68fd1e64\t...", row);
//   if (!s.ok()) return s;   // "field 3 (I2), byte 4: 'x1' is not an integer"
//   float x = DenseTransform(row.dense[0]);
//   uint32_t id = row.categorical[0];
#ifndef CEMB_DATA_CRITEO_H_
#define CEMB_DATA_CRITEO_H_

#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace cemb::data {

inline constexpr int kNumDense = 13;
inline constexpr int kNumCategorical = 26;
inline constexpr int kNumFields = 1 + kNumDense + kNumCategorical;  // 40

// The cardinalities of C1..C26 in the Criteo Kaggle set (the reference DLRM's
// table sizes without --max-ind-range); the generator's default.
inline constexpr std::array<uint64_t, kNumCategorical> kKaggleCardinalities = {
    1460, 583,   10131227, 2202608, 305,  24,    12517, 633, 3,
    93145, 5683, 8351593, 3194,    27,   14992, 5461306, 10, 5652,
    2173, 4,     7046547, 18,      15,   286181, 105,   142572};

// Longest line the parser accepts by default. A valid Criteo line is at most
// about 530 bytes (39 tabs, 13 twenty-digit integers, 26 eight-digit ids).
inline constexpr size_t kDefaultMaxLineBytes = 4096;

// One parsed line, before any transformation.
struct CriteoRow {
  uint8_t label = 0;                              // 0 or 1
  std::array<int64_t, kNumDense> dense{};         // raw integers, missing = 0
  std::array<uint32_t, kNumCategorical> categorical{};  // ids, missing = 0
  // Bit f is set when field f (0 = label, 1..13 = I1..I13, 14..39 = C1..C26)
  // was empty. The label is never missing in a valid line.
  uint64_t missing = 0;

  bool dense_missing(int i) const { return (missing >> (1 + i)) & 1; }
  bool categorical_missing(int i) const { return (missing >> (1 + kNumDense + i)) & 1; }
};

// The name of field f as the Criteo documentation writes it: "label", "I1".."I13",
// "C1".."C26". REQUIRES: 0 <= f < kNumFields.
std::string FieldName(int f);

// Parses one line, without its '\n' (a single trailing '\r' is ignored), into
// `row`. Accepts exactly 40 fields; the label must be "0" or "1"; an integer
// field is empty or -?[0-9]+ within int64; a categorical field is empty or 1..8
// hex digits (either case). On error returns InvalidArgument naming the field
// and the byte offset within the line, and leaves `row` unspecified.
// NOTE: allocates only on error; about 2-3 ns per byte (bench/data_bench.cc).
absl::Status ParseCriteoLine(std::string_view line, CriteoRow& row,
                             size_t max_line_bytes = kDefaultMaxLineBytes);

// log(1 + max(x, 0)) in float, the reference DLRM's dense transform.
inline float DenseTransform(int64_t x) {
  return x > 0 ? static_cast<float>(std::log1p(static_cast<double>(x))) : 0.0f;
}

}  // namespace cemb::data

#endif  // CEMB_DATA_CRITEO_H_
