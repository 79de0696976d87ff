// Preprocess: Criteo TSV logs in, binary dataset files (data/dataset.h) out.
//
// Each line becomes one record: the label, the 13 dense features as
// DenseTransform(x) = log(1 + max(x, 0)), and for each of the 26 categorical
// features a row index in its table, by one of two IndexModes:
//
//   kModulo      row = id % table_size[t]        (the reference DLRM's
//                --max-ind-range behaviour, one pass over the input)
//   kVocabulary  a first pass counts every id; ids seen at least
//                `frequency_threshold` times get rows 1..n in increasing id
//                order, all others share row 0; table size = n + 1 (the
//                reference preprocessing with a frequency threshold)
//
// A missing categorical is id 0 in both modes (as in the reference).
//
// The split (SplitMode::kReference) follows the reference DLRM:
//   Kaggle   (one input, train.txt): the lines are cut into 7 "days" like
//            np.array_split; days 0-5 are train, day 6 is cut in halves:
//            first half test, second half validation.
//   Terabyte (inputs day_0 .. day_23 in order): all inputs but the last are
//            train; the last is cut in halves: first half test, second
//            half validation.
// The split is by line number, so skipped bad lines do not move it. Output:
// <output_dir>/train.bin, val.bin and test.bin (SplitMode::kNone: all.bin).
//
// Parsing and transformation run on `reader.threads` threads; memory stays
// bounded except for the vocabulary (one hash-map entry per distinct id).
// The output bytes depend only on the input and the options, never on the
// number of threads.
//
//   PreprocessOptions o;
//   o.inputs = {"train.txt"};
//   o.output_dir = "criteo-kaggle";
//   o.max_index_range = 10'000'000;
//   CEMB_ASSIGN_OR_RETURN(PreprocessSummary s, Preprocess(o));
#ifndef CEMB_DATA_PREPROCESS_H_
#define CEMB_DATA_PREPROCESS_H_

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "base/enum_names.h"
#include "data/criteo_reader.h"
#include "data/dataset.h"

namespace cemb::data {

enum class CriteoFormat { kKaggle, kTerabyte };
inline constexpr EnumName<CriteoFormat> kCriteoFormatNames[] = {{CriteoFormat::kKaggle, "kaggle"},
                                                                {CriteoFormat::kTerabyte, "terabyte"}};
inline const char* CriteoFormatName(CriteoFormat f) { return NameOf(kCriteoFormatNames, f); }
enum class IndexMode { kModulo, kVocabulary };
inline constexpr EnumName<IndexMode> kIndexModeNames[] = {{IndexMode::kModulo, "modulo"},
                                                          {IndexMode::kVocabulary, "vocabulary"}};
inline const char* IndexModeName(IndexMode m) { return NameOf(kIndexModeNames, m); }
enum class SplitMode { kReference, kNone };
inline constexpr EnumName<SplitMode> kSplitModeNames[] = {{SplitMode::kReference, "reference"}, {SplitMode::kNone, "none"}};

// Reported after every block from the calling thread.
struct PreprocessProgress {
  int pass = 1;  // 1 of 1 (modulo), or 1 (count) / 2 (write) of 2 (vocabulary)
  int passes = 1;
  uint64_t bytes_done = 0;   // within this pass, over all inputs
  uint64_t bytes_total = 0;  // of all inputs
  uint64_t lines = 0;        // within this pass
};

struct PreprocessOptions {
  CriteoFormat format = CriteoFormat::kKaggle;
  std::vector<std::string> inputs;  // Kaggle: one file; Terabyte: the days in order
  std::string output_dir;           // created if missing
  IndexMode index_mode = IndexMode::kModulo;
  // kModulo: the table sizes; empty = kKaggleCardinalities. Each is capped by
  // max_index_range when that is not 0.
  std::vector<uint64_t> table_sizes;
  uint64_t max_index_range = 0;
  uint32_t frequency_threshold = 1;  // kVocabulary; REQUIRES: >= 1
  SplitMode split = SplitMode::kReference;
  CriteoReaderOptions reader;  // threads, bad-line policy, limits
  std::function<void(const PreprocessProgress&)> progress;  // may be empty
};

struct PreprocessSummary {
  uint64_t lines = 0;     // lines read (good and bad)
  uint64_t samples = 0;   // records written over all outputs
  uint64_t positives = 0;
  uint64_t bad_lines = 0;  // skipped under BadLines::kSkip
  std::vector<std::string> bad_line_messages;  // the first few
  std::vector<uint64_t> table_sizes;
  std::vector<std::string> outputs;     // the datasets written
  std::string vocabulary;               // kVocabulary: the vocabulary written (kVocabularyFile)
  std::vector<uint64_t> output_samples;  // per output
  uint64_t input_bytes = 0;
};

// Runs the whole preprocessing. Errors name the input file and line (bad
// line under BadLines::kFail), or the output file; no output file is left
// half-written. Inputs that hold no sample (empty, or only skipped bad
// lines) are an error naming them ("no samples"), and no dataset is written.
[[nodiscard]] absl::StatusOr<PreprocessSummary> Preprocess(const PreprocessOptions& options);

// A per-table vocabulary from id counts (IndexMode::kVocabulary).
// Preprocess writes it beside the dataset (kVocabularyFile), the trainer
// copies it into every checkpoint, and a predictor loads it from there to
// map a request's raw ids as the training's data was mapped.
//
// The file: "cemb-vocabulary-1\n", uint32 tables, then per table uint64 n
// and its n frequent ids (uint32, increasing: id k has row k + 1), then the
// Checksum64 of everything before it (little-endian).
//
// Thread safety: Count() on different tables may run concurrently; Row() is
// const and thread-safe once Finalize() (or Load) has run.
inline constexpr char kVocabularyFile[] = "vocabulary.bin";

class Vocabulary {
 public:
  explicit Vocabulary(int num_tables) : counts_(num_tables), rows_(num_tables), sizes_(num_tables) {}
  void Count(int table, uint32_t id) { ++counts_[table][id]; }
  // Assigns rows: ids with count >= threshold get 1..n by increasing id.
  void Finalize(uint32_t threshold);
  // REQUIRES: Finalize() has run. Written atomically (a temporary, renamed).
  [[nodiscard]] absl::Status Save(const std::string& path) const;
  // DataLoss naming the path for a truncated, corrupt or foreign file.
  [[nodiscard]] static absl::StatusOr<Vocabulary> Load(const std::string& path);
  int num_tables() const { return static_cast<int>(rows_.size()); }
  // REQUIRES: Finalize() has run.
  int32_t Row(int table, uint32_t id) const {
    auto it = rows_[table].find(id);
    return it == rows_[table].end() ? 0 : it->second;
  }
  uint64_t table_size(int table) const { return sizes_[table]; }

 private:
  std::vector<absl::flat_hash_map<uint32_t, uint32_t>> counts_;
  std::vector<absl::flat_hash_map<uint32_t, int32_t>> rows_;
  std::vector<uint64_t> sizes_;
};

// One parsed line as training sees it: what Preprocess writes for it, and
// what a predictor computes from a request's raw features.
//   dense[j] = DenseTransform(row.dense[j])             (j < kNumDense)
//   rows[t]  = row.categorical[t] % table_sizes[t]      (kModulo: vocabulary null)
//            = vocabulary->Row(t, row.categorical[t])   (kVocabulary)
// Thread safety: const; call it from any thread.
struct CriteoTransform {
  std::span<const uint64_t> table_sizes;  // kNumCategorical of them (kModulo)
  const Vocabulary* vocabulary = nullptr;
  void Apply(const CriteoRow& row, float* dense, int32_t* rows) const {
    for (int j = 0; j < kNumDense; ++j) dense[j] = DenseTransform(row.dense[j]);
    for (int t = 0; t < kNumCategorical; ++t) {
      rows[t] = vocabulary != nullptr ? vocabulary->Row(t, row.categorical[t])
                                      : static_cast<int32_t>(row.categorical[t] % table_sizes[t]);
    }
  }
};

// The reference's split points for `lines` lines of a Kaggle train.txt:
// train = [0, train_end), test = [train_end, test_end), validation =
// [test_end, lines) (0-based line indices).
struct SplitPoints {
  uint64_t train_end = 0;
  uint64_t test_end = 0;
};
SplitPoints KaggleSplit(uint64_t lines);

}  // namespace cemb::data

#endif  // CEMB_DATA_PREPROCESS_H_
