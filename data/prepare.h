// PrepareData: the datasets a training run reads, made ready. One of three
// sources (DataConfig::source):
//
//   synthetic  generated (data/generator.h) into the work directory, split
//              into train and validation files
//   tsv        Criteo TSV preprocessed (data/preprocess.h) into the work
//              directory with the reference split
//   binary     a dataset file (or a directory of train.bin and val.bin) read
//              where it is; without a validation file its last samples are
//              held out, both parts copied into the work directory
//
// Whatever is written goes into one directory of the work directory per
// recipe, "<work_dir>/<kind>-<16 hex digits of the settings and input
// paths>" (kind: synthetic, tsv, split), with a RECIPE file written last
// that records what produced it: the settings, every input file's path,
// size and modification time, and every output file's samples and payload
// checksum. The next run reuses that directory when, and only when,
// ReuseCheck says so: the settings and inputs are the same and every output
// opens whole with the recorded samples and checksum. Otherwise the files
// are made again and the log says why, naming the file, e.g.
//   "data: /w/tsv-.../RECIPE: made from /d/day_0.tsv of 1234 bytes, now 1300 bytes: preparing again"
// (other settings give another directory: both are kept).
//
// Thread safety: PrepareData runs on the calling thread (generation and
// preprocessing use `threads` threads). Two processes must not prepare into
// the same work directory at once.
//
//   PrepareOptions o;
//   o.data.samples = 1 << 20;
//   o.data.work_dir = "work";
//   o.table_sizes = {1000, 1000};
//   CEMB_ASSIGN_OR_RETURN(PreparedData d, PrepareData(o));
//   Train(d.train, d.validation);  // validation may be null
#ifndef CEMB_DATA_PREPARE_H_
#define CEMB_DATA_PREPARE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/enum_names.h"
#include "data/dataset.h"
#include "data/generator.h"
#include "data/preprocess.h"

namespace cemb::data {

enum class DataSource { kSynthetic, kTsv, kBinary };
inline constexpr EnumName<DataSource> kDataSourceNames[] = {
    {DataSource::kSynthetic, "synthetic"}, {DataSource::kTsv, "tsv"}, {DataSource::kBinary, "binary"}};
inline const char* DataSourceName(DataSource source) { return NameOf(kDataSourceNames, source); }

// Which samples are held out for validation.
enum class DataSplit {
  // tsv: the reference split (data/preprocess.h); synthetic and binary: the
  // last validation_fraction (binary: or the validation file).
  kAuto,
  // Every sample is a training sample, in file order; no validation (the
  // run facebookresearch/dlrm makes on a file it is handed whole).
  kNone,
};
inline constexpr EnumName<DataSplit> kDataSplitNames[] = {{DataSplit::kAuto, "auto"}, {DataSplit::kNone, "none"}};
inline const char* DataSplitName(DataSplit split) { return NameOf(kDataSplitNames, split); }

// The `data:` section of a training config (train/config.h reads it; every
// key is in docs/training.md).
struct DataConfig {
  DataSource source = DataSource::kSynthetic;
  // tsv: the input files (Kaggle: one train.txt; Terabyte: the days in
  // order). binary: one file, the training set, or a directory holding
  // train.bin and val.bin (the output of `dlrm-data preprocess`).
  std::vector<std::string> paths;
  // binary: the validation set; empty = val.bin beside a directory's
  // train.bin, or else the last validation_fraction of the file.
  std::string validation_path;
  // synthetic, and binary without a validation file: the fraction of the
  // samples held out (the last ones). tsv uses the reference split.
  double validation_fraction = 0.1;
  DataSplit split = DataSplit::kAuto;  // none: every sample trains, in file order

  // synthetic
  uint64_t samples = 1 << 18;
  IndexDistribution distribution = IndexDistribution::kUniform;
  double alpha = 1.0;
  uint64_t seed = 1;
  // synthetic and binary: the indices per table per sample (data.hotness):
  // one entry per table, or one for every table (ExpandHotness); a binary
  // dataset must have it (Dataset::CheckHotness). Empty = not given: 1 for
  // synthetic data, whatever a binary dataset holds.
  std::vector<uint32_t> hotness;

  // tsv
  CriteoFormat format = CriteoFormat::kKaggle;
  IndexMode index_mode = IndexMode::kModulo;
  uint32_t frequency_threshold = 1;
  bool skip_bad_lines = false;
  // Caps every table at this many rows (row = id % size); 0 = no cap. Also
  // caps synthetic tables.
  uint64_t max_ind_range = 0;

  // Where generated, preprocessed and split datasets go; empty = a
  // temporary directory, removed at the end (the trainer first tries
  // <train.checkpoint_dir>/data).
  std::string work_dir;
};

struct PrepareOptions {
  // The settings. data.work_dir empty: a temporary directory (under
  // $TMPDIR), made only when something must be written and removed with the
  // PreparedData.
  DataConfig data;
  // synthetic and tsv (index_mode modulo): the rows of each table. binary:
  // the sizes the files must have; empty = whatever they hold.
  std::vector<uint64_t> table_sizes;
  int threads = 0;  // generation and preprocessing; 0 = all
  // Messages name a setting "<config_name>.<key>": the trainer passes
  // "<config file>: data", so "default.yaml: data.path: x.tsv: no such file".
  std::string config_name = "data";
  // Each line of progress ("data: reusing ..."); may be empty.
  std::function<void(std::string_view line)> log;
};

// The prepared datasets, memory-mapped, and the work directory behind them.
// Move-only: a temporary work directory is removed when the PreparedData that
// made it is destroyed (the datasets stay readable while mapped).
struct PreparedData {
  std::shared_ptr<const Dataset> train;
  std::shared_ptr<const Dataset> validation;  // null: no validation samples
  std::string work_dir;                       // empty: nothing was written
  bool temporary_work_dir = false;
  // TSV data with index_mode vocabulary: the vocabulary the ids were mapped
  // by (data/preprocess.h), for a checkpoint to keep; else empty.
  std::string vocabulary;

  PreparedData() = default;
  PreparedData(PreparedData&& other) noexcept { *this = std::move(other); }
  PreparedData& operator=(PreparedData&& other) noexcept;
  ~PreparedData();
};

// Makes the datasets ready: checks that the inputs exist before anything is
// written, reuses or (re)makes the work directory's files, opens them, and
// checks that the validation set has the training set's shape. Errors name
// the setting and the file: NotFound "<config_name>.path: x: no such file",
// the readers' errors (file and line), InvalidArgument for too few samples
// to split or table sizes other than `table_sizes`.
[[nodiscard]] absl::StatusOr<PreparedData> PrepareData(const PrepareOptions& options);

// A file a prepared directory was made from, as it was then.
struct InputFile {
  std::string path;  // absolute
  uint64_t bytes = 0;
  int64_t modified_ns = 0;  // since the Unix epoch

  // The file as it is now. NotFound naming it when it is missing.
  [[nodiscard]] static absl::StatusOr<InputFile> Stat(const std::string& path);
};

// What produced a prepared directory: `settings` ("key=value" pairs, in a
// fixed order; the source first) and the `inputs` read.
struct Recipe {
  std::vector<std::pair<std::string, std::string>> settings;
  std::vector<InputFile> inputs;
};

// An output of a prepared directory as its RECIPE file records it.
struct PreparedFile {
  std::string name;  // in the directory, e.g. "train.bin"
  uint64_t samples = 0;
  uint64_t payload_checksum = 0;
};

// The one reuse check: whether the files of `dir` may stand for `recipe`.
// OK with the recorded outputs when dir/RECIPE records the same settings and
// the same inputs of the same size and modification time, and every output
// opens (Verify::kHeader: a truncated or damaged header is found) with the
// recorded samples and checksum. Otherwise the message is the reason, naming
// the file: NotFound when dir holds no RECIPE (nothing prepared yet);
// FailedPrecondition for the rest ("<dir>/RECIPE: made with samples=1000,
// now samples=2000", "... made from /d/x.tsv of 1234 bytes, now 1300 bytes",
// "<dir>/train.bin: ... is truncated ...").
[[nodiscard]] absl::StatusOr<std::vector<PreparedFile>> ReuseCheck(const std::string& dir, const Recipe& recipe);

// Writes dir/RECIPE: `outputs` (files of dir, opened to record their samples
// and checksums) were made from `recipe`. Returns what it recorded.
[[nodiscard]] absl::StatusOr<std::vector<PreparedFile>> WriteRecipe(const std::string& dir, const Recipe& recipe,
                                                                    const std::vector<std::string>& outputs);

}  // namespace cemb::data

#endif  // CEMB_DATA_PREPARE_H_
