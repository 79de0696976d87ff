#include "data/prepare.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/file.h"
#include "base/status_macros.h"

namespace cemb::data {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

constexpr char kRecipeFile[] = "RECIPE";
constexpr char kRecipeVersion[] = "cemb-recipe v1";

uint64_t Fnv(std::string_view s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}

// "2026-11-24 10:00:01.123456789 UTC"
std::string TimeName(int64_t ns) {
  const time_t s = static_cast<time_t>(ns / 1000000000);
  struct tm tm {};
  char buf[32];
  if (gmtime_r(&s, &tm) == nullptr || std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm) == 0) {
    return absl::StrCat(ns, " ns");
  }
  return absl::StrFormat("%s.%09d UTC", buf, ns % 1000000000);
}

absl::StatusOr<std::shared_ptr<const Dataset>> OpenDataset(const std::string& path, Verify verify) {
  CEMB_ASSIGN_OR_RETURN(std::unique_ptr<Dataset> d, Dataset::Open(path, {.verify = verify}));
  if (d->num_samples() == 0) return absl::InvalidArgumentError(absl::StrCat(path, ": the dataset is empty"));
  return std::shared_ptr<const Dataset>(std::move(d));
}

// A RECIPE file: the recipe and the outputs made from it.
//   cemb-recipe v1
//   setting <key>=<value>
//   input <bytes> <modified_ns> <absolute path>
//   output <samples> <payload checksum, hex> <name>
std::string FormatRecipe(const Recipe& recipe, const std::vector<PreparedFile>& outputs) {
  std::string text = absl::StrCat(kRecipeVersion, "\n");
  for (const auto& [key, value] : recipe.settings) absl::StrAppend(&text, "setting ", key, "=", value, "\n");
  for (const InputFile& f : recipe.inputs)
    absl::StrAppend(&text, "input ", f.bytes, " ", f.modified_ns, " ", f.path, "\n");
  for (const PreparedFile& f : outputs) {
    absl::StrAppend(&text, "output ", f.samples, " ", absl::Hex(f.payload_checksum, absl::kZeroPad16), " ", f.name,
                    "\n");
  }
  return text;
}

absl::Status ParseRecipe(const std::string& path, absl::string_view text, Recipe* recipe,
                         std::vector<PreparedFile>* outputs) {
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n', absl::SkipEmpty());
  if (lines.empty() || lines[0] != kRecipeVersion) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": not a ", kRecipeVersion, " file"));
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    absl::string_view line = lines[i];
    auto bad = [&] {
      return absl::FailedPreconditionError(absl::StrCat(path, ":", i + 1, ": cannot read '", line, "'"));
    };
    if (absl::ConsumePrefix(&line, "setting ")) {
      const size_t eq = line.find('=');
      if (eq == absl::string_view::npos) return bad();
      recipe->settings.emplace_back(std::string(line.substr(0, eq)), std::string(line.substr(eq + 1)));
    } else if (absl::ConsumePrefix(&line, "input ")) {
      std::vector<absl::string_view> f = absl::StrSplit(line, absl::MaxSplits(' ', 2));
      InputFile in;
      if (f.size() != 3 || !absl::SimpleAtoi(f[0], &in.bytes) || !absl::SimpleAtoi(f[1], &in.modified_ns)) return bad();
      in.path = std::string(f[2]);
      recipe->inputs.push_back(std::move(in));
    } else if (absl::ConsumePrefix(&line, "output ")) {
      std::vector<absl::string_view> f = absl::StrSplit(line, absl::MaxSplits(' ', 2));
      PreparedFile out;
      if (f.size() != 3 || !absl::SimpleAtoi(f[0], &out.samples) || !absl::SimpleHexAtoi(f[1], &out.payload_checksum) ||
          f[2].empty() || f[2].find('/') != absl::string_view::npos) {
        return bad();
      }
      out.name = std::string(f[2]);
      outputs->push_back(std::move(out));
    } else {
      return bad();
    }
  }
  return absl::OkStatus();
}

// Why a directory made from `was` does not stand for `now` ("" when it does).
std::string Difference(const Recipe& was, const Recipe& now) {
  const size_t n = std::max(was.settings.size(), now.settings.size());
  for (size_t i = 0; i < n; ++i) {
    auto name = [&](const Recipe& r) {
      return i < r.settings.size() ? absl::StrCat(r.settings[i].first, "=", r.settings[i].second)
                                   : std::string("(nothing)");
    };
    if (name(was) != name(now)) return absl::StrCat("made with ", name(was), ", now ", name(now));
  }
  if (was.inputs.size() != now.inputs.size()) {
    return absl::StrCat("made from ", was.inputs.size(), " input files, now ", now.inputs.size());
  }
  for (size_t i = 0; i < was.inputs.size(); ++i) {
    const InputFile &a = was.inputs[i], &b = now.inputs[i];
    if (a.path != b.path) return absl::StrCat("made from ", a.path, ", now from ", b.path);
    if (a.bytes != b.bytes)
      return absl::StrCat("made from ", a.path, " of ", a.bytes, " bytes, now ", b.bytes, " bytes");
    if (a.modified_ns != b.modified_ns) {
      return absl::StrCat("made from ", a.path, " modified ", TimeName(a.modified_ns), ", now modified ",
                          TimeName(b.modified_ns));
    }
  }
  return "";
}

// The table sizes of the data to make or check: the given ones or (synthetic,
// tsv) the Kaggle cardinalities, each capped by data.max_ind_range. Empty
// for binary data without given sizes: any will do.
std::vector<uint64_t> TableSizes(const PrepareOptions& o) {
  std::vector<uint64_t> sizes = o.table_sizes;
  if (sizes.empty() && o.data.source != DataSource::kBinary) {
    sizes.assign(kKaggleCardinalities.begin(), kKaggleCardinalities.end());
  }
  if (o.data.max_ind_range > 0) {
    for (uint64_t& s : sizes) s = std::min(s, o.data.max_ind_range);
  }
  return sizes;
}

// One PrepareData call.
class Preparer {
 public:
  Preparer(const PrepareOptions& options, PreparedData* out) : o_(options), d_(options.data), out_(out) {}

  absl::Status Run() {
    // Missing inputs first, before anything is created on disk.
    for (size_t i = 0; i < d_.paths.size() && d_.source != DataSource::kSynthetic; ++i) {
      std::error_code ec;
      if (!fs::exists(d_.paths[i], ec)) return NoSuchFile(d_.paths.size() > 1 ? "paths" : "path", d_.paths[i]);
    }
    switch (d_.source) {
      case DataSource::kSynthetic:
        CEMB_RETURN_IF_ERROR(Synthetic());
        break;
      case DataSource::kTsv:
        CEMB_RETURN_IF_ERROR(Tsv());
        break;
      case DataSource::kBinary:
        CEMB_RETURN_IF_ERROR(Binary());
        break;
    }
    const Dataset& train = *out_->train;
    if (d_.source == DataSource::kBinary && !o_.table_sizes.empty()) {
      CEMB_RETURN_IF_ERROR(train.CheckTableSizes(TableSizes(o_)));
    }
    if (!d_.hotness.empty()) CEMB_RETURN_IF_ERROR(train.CheckHotness(d_.hotness, HotnessKey()));
    if (const Dataset* val = out_->validation.get()) {
      if (val->num_dense() != train.num_dense() || !std::ranges::equal(val->hotness(), train.hotness())) {
        return absl::InvalidArgumentError(absl::StrCat(val->path(), ": the validation set's shape (", val->num_dense(),
                                                       " dense, hotness ", absl::StrJoin(val->hotness(), ","),
                                                       ") differs from the training set's (", train.num_dense(),
                                                       " dense, hotness ", absl::StrJoin(train.hotness(), ","), ")"));
      }
      CEMB_RETURN_IF_ERROR(val->CheckTableSizes(train.table_sizes()));
    }
    return absl::OkStatus();
  }

 private:
  // The files a source made or reuses: a directory of the work directory.
  struct Made {
    std::string dir;
    std::vector<PreparedFile> files;
  };
  // Writes the files of a recipe into `dir`; returns their names.
  using MakeFn = std::function<absl::StatusOr<std::vector<std::string>>(const std::string& dir)>;

  template <typename... Args>
  void Log(const absl::FormatSpec<Args...>& format, const Args&... args) {
    if (o_.log) o_.log(absl::StrFormat(format, args...));
  }

  std::string HotnessKey() const { return absl::StrCat(o_.config_name, ".hotness"); }

  absl::Status NoSuchFile(const char* key, const std::string& path) const {
    return absl::NotFoundError(absl::StrCat(o_.config_name, ".", key, ": ", path, ": no such file"));
  }

  // The work directory, made on first use.
  absl::StatusOr<std::string> WorkDir() {
    if (!out_->work_dir.empty()) return out_->work_dir;
    if (d_.work_dir.empty()) {
      const char* tmp = std::getenv("TMPDIR");
      std::string pattern = absl::StrCat(tmp && *tmp ? tmp : "/tmp", "/cemb-train-XXXXXX");
      if (!::mkdtemp(pattern.data())) {
        return base::ErrnoStatus(errno, pattern, "create a temporary work directory");
      }
      out_->work_dir = pattern;
      out_->temporary_work_dir = true;
      return out_->work_dir;
    }
    std::error_code ec;
    fs::create_directories(d_.work_dir, ec);
    if (ec) {
      return absl::InternalError(absl::StrCat(d_.work_dir, ": cannot create the data work directory (", o_.config_name,
                                              ".work_dir): ", ec.message()));
    }
    out_->work_dir = d_.work_dir;
    return out_->work_dir;
  }

  // Every source's one way to its files: "<work_dir>/<kind>-<hash of the
  // settings and input paths>", reused when ReuseCheck says so, else made
  // again by `make` and recorded.
  absl::StatusOr<Made> Prepare(const char* kind, const Recipe& recipe, const MakeFn& make) {
    std::string id;
    for (const auto& [key, value] : recipe.settings) absl::StrAppend(&id, key, "=", value, "\n");
    for (const InputFile& f : recipe.inputs) absl::StrAppend(&id, "input ", f.path, "\n");
    CEMB_ASSIGN_OR_RETURN(const std::string work_dir, WorkDir());
    Made made;
    made.dir = absl::StrFormat("%s/%s-%016x", work_dir, kind, Fnv(id));
    absl::StatusOr<std::vector<PreparedFile>> reuse = ReuseCheck(made.dir, recipe);
    if (reuse.ok()) {
      Log("data: reusing %s", made.dir);
      made.files = *std::move(reuse);
      return made;
    }
    if (!absl::IsNotFound(reuse.status())) Log("data: %s: preparing again", reuse.status().message());
    std::error_code ec;
    fs::remove(made.dir + "/" + kRecipeFile, ec);  // a crash while making leaves no record
    fs::create_directories(made.dir, ec);
    if (ec) return absl::InternalError(absl::StrCat(made.dir, ": cannot create: ", ec.message()));
    CEMB_ASSIGN_OR_RETURN(const std::vector<std::string> names, make(made.dir));
    CEMB_ASSIGN_OR_RETURN(made.files, WriteRecipe(made.dir, recipe, names));
    return made;
  }

  // A made file by name: null when there is none or it holds no sample.
  static absl::StatusOr<std::shared_ptr<const Dataset>> Open(const Made& made, const std::string& name) {
    for (const PreparedFile& f : made.files) {
      if (f.name == name && f.samples > 0) return OpenDataset(absl::StrCat(made.dir, "/", name), Verify::kHeader);
    }
    return nullptr;
  }

  absl::Status Synthetic() {
    GeneratorOptions g;
    g.num_samples = d_.samples;
    g.table_sizes = TableSizes(o_);
    if (!d_.hotness.empty()) {
      CEMB_ASSIGN_OR_RETURN(g.hotness, ExpandHotness(d_.hotness, g.table_sizes.size(), HotnessKey()));
    }
    g.distribution = d_.distribution;
    g.zipf_alpha = d_.alpha;
    g.seed = d_.seed;
    g.threads = o_.threads;
    const uint64_t n_val =
        d_.split == DataSplit::kNone
            ? 0
            : std::max<uint64_t>(1, static_cast<uint64_t>(std::llround(d_.validation_fraction * d_.samples)));
    if (n_val >= d_.samples) {
      return absl::InvalidArgumentError(absl::StrCat(o_.config_name, ".samples: ", d_.samples,
                                                     " samples leave nothing to train on after the validation split"));
    }
    Recipe recipe;
    recipe.settings = {{"source", DataSourceName(d_.source)},
                       {"samples", absl::StrCat(d_.samples)},
                       {"table_sizes", absl::StrJoin(g.table_sizes, ",")},
                       {"hotness", absl::StrJoin(g.hotness, ",")},
                       {"distribution", IndexDistributionName(d_.distribution)},
                       {"alpha", absl::StrFormat("%a", d_.alpha)},
                       {"seed", absl::StrCat(d_.seed)},
                       {"validation_samples", absl::StrCat(n_val)}};
    CEMB_ASSIGN_OR_RETURN(
        const Made made,
        Prepare("synthetic", recipe, [&](const std::string& dir) -> absl::StatusOr<std::vector<std::string>> {
          const auto start = Clock::now();
          Log("data: generating %d synthetic samples (%d tables, %s) into %s ...", d_.samples, g.table_sizes.size(),
              d_.distribution == IndexDistribution::kZipf ? absl::StrCat("zipf ", d_.alpha) : "uniform", dir);
          CEMB_RETURN_IF_ERROR(GenerateSplitDataset(g, n_val, dir + "/train.bin", dir + "/val.bin"));
          Log("data: generated in %.1f s", SecondsSince(start));
          if (n_val == 0) return std::vector<std::string>{"train.bin"};
          return std::vector<std::string>{"train.bin", "val.bin"};
        }));
    CEMB_ASSIGN_OR_RETURN(out_->train, OpenDataset(made.dir + "/train.bin", Verify::kHeader));
    CEMB_ASSIGN_OR_RETURN(out_->validation, Open(made, "val.bin"));
    return absl::OkStatus();
  }

  absl::Status Tsv() {
    for (const std::string& p : d_.paths) {
      std::error_code ec;
      if (!fs::is_regular_file(p, ec)) return NoSuchFile("path", p);
    }
    PreprocessOptions p;
    p.format = d_.format;
    p.inputs = d_.paths;
    p.index_mode = d_.index_mode;
    if (d_.index_mode == IndexMode::kModulo) p.table_sizes = TableSizes(o_);
    p.max_index_range = d_.max_ind_range;
    p.frequency_threshold = d_.frequency_threshold;
    p.split = d_.split == DataSplit::kNone ? SplitMode::kNone : SplitMode::kReference;
    p.reader.threads = o_.threads;
    p.reader.bad_lines = d_.skip_bad_lines ? BadLines::kSkip : BadLines::kFail;
    Recipe recipe;
    recipe.settings = {{"source", DataSourceName(d_.source)},
                       {"format", CriteoFormatName(d_.format)},
                       {"index_mode", IndexModeName(d_.index_mode)},
                       {"table_sizes", absl::StrJoin(p.table_sizes, ",")},
                       {"max_ind_range", absl::StrCat(d_.max_ind_range)},
                       {"frequency_threshold", absl::StrCat(d_.frequency_threshold)},
                       {"bad_lines", d_.skip_bad_lines ? "skip" : "fail"},
                       {"split", DataSplitName(d_.split)}};
    // A vocabulary's ids are mapped by a file beside the datasets (not an
    // output the RECIPE checks): directories made before it was kept differ
    // in this setting, so they are made again.
    if (d_.index_mode == IndexMode::kVocabulary) recipe.settings.push_back({"vocabulary_file", kVocabularyFile});
    for (const std::string& path : d_.paths) {
      CEMB_ASSIGN_OR_RETURN(InputFile f, InputFile::Stat(path));
      recipe.inputs.push_back(std::move(f));
    }
    CEMB_ASSIGN_OR_RETURN(
        const Made made,
        Prepare("tsv", recipe, [&](const std::string& dir) -> absl::StatusOr<std::vector<std::string>> {
          Log("data: preprocessing %s into %s ...", absl::StrJoin(d_.paths, " "), dir);
          const auto start = Clock::now();
          p.output_dir = dir;
          CEMB_ASSIGN_OR_RETURN(const PreprocessSummary s, Preprocess(p));
          Log("data: %d lines (%d bad, skipped) preprocessed in %.1f s", s.lines, s.bad_lines, SecondsSince(start));
          std::vector<std::string> names;
          for (const std::string& output : s.outputs) names.push_back(fs::path(output).filename().string());
          return names;
        }));
    if (d_.index_mode == IndexMode::kVocabulary) out_->vocabulary = absl::StrCat(made.dir, "/", kVocabularyFile);
    if (d_.split == DataSplit::kNone) {
      CEMB_ASSIGN_OR_RETURN(out_->train, OpenDataset(made.dir + "/all.bin", Verify::kHeader));
      return absl::OkStatus();
    }
    CEMB_ASSIGN_OR_RETURN(out_->train, OpenDataset(made.dir + "/train.bin", Verify::kHeader));
    CEMB_ASSIGN_OR_RETURN(out_->validation, Open(made, "val.bin"));  // a tiny input may leave none
    return absl::OkStatus();
  }

  absl::Status Binary() {
    std::string train_path = d_.paths[0], val_path = d_.validation_path;
    std::error_code ec;
    if (fs::is_directory(train_path, ec)) {
      const std::string dir = train_path;
      train_path = dir + "/train.bin";
      if (d_.split == DataSplit::kAuto && val_path.empty() && fs::exists(dir + "/val.bin", ec)) {
        val_path = dir + "/val.bin";
      }
    }
    if (!fs::exists(train_path, ec)) return NoSuchFile("path", train_path);
    if (!val_path.empty() && !fs::exists(val_path, ec)) return NoSuchFile("validation_path", val_path);
    CEMB_ASSIGN_OR_RETURN(std::shared_ptr<const Dataset> all, OpenDataset(train_path, Verify::kFull));
    if (!val_path.empty()) {
      out_->train = all;
      CEMB_ASSIGN_OR_RETURN(out_->validation, OpenDataset(val_path, Verify::kFull));
      return absl::OkStatus();
    }
    if (d_.split == DataSplit::kNone || d_.validation_fraction <= 0) {
      out_->train = all;
      return absl::OkStatus();
    }
    // Hold out the last samples: copy both parts into the work directory.
    const uint64_t n = all->num_samples();
    const uint64_t n_val = std::max<uint64_t>(1, static_cast<uint64_t>(std::llround(d_.validation_fraction * n)));
    if (n_val >= n) return absl::InvalidArgumentError(absl::StrCat(train_path, ": too few samples to split (", n, ")"));
    Recipe recipe;
    recipe.settings = {{"source", DataSourceName(d_.source)}, {"validation_samples", absl::StrCat(n_val)}};
    CEMB_ASSIGN_OR_RETURN(InputFile input, InputFile::Stat(train_path));
    recipe.inputs.push_back(std::move(input));
    CEMB_ASSIGN_OR_RETURN(
        const Made made,
        Prepare("split", recipe, [&](const std::string& dir) -> absl::StatusOr<std::vector<std::string>> {
          Log("data: holding out the last %d samples of %s for validation (copies in %s)", n_val, train_path, dir);
          DatasetSpec spec = all->spec();
          spec.part = Part::kTrain;
          CEMB_ASSIGN_OR_RETURN(auto tw, DatasetWriter::Create(dir + "/train.bin", spec));
          spec.part = Part::kValidation;
          CEMB_ASSIGN_OR_RETURN(auto vw, DatasetWriter::Create(dir + "/val.bin", spec));
          constexpr uint64_t kBlock = 65536;
          const uint64_t split = n - n_val;
          for (uint64_t i = 0; i < n; i += kBlock) {
            const uint64_t end = std::min(n, i + kBlock);
            if (i < split) CEMB_RETURN_IF_ERROR(tw->AppendRecords(all->record(i), std::min(end, split) - i));
            if (end > split) {
              const uint64_t from = std::max(i, split);
              CEMB_RETURN_IF_ERROR(vw->AppendRecords(all->record(from), end - from));
            }
          }
          CEMB_RETURN_IF_ERROR(tw->Finish());
          CEMB_RETURN_IF_ERROR(vw->Finish());
          return std::vector<std::string>{"train.bin", "val.bin"};
        }));
    CEMB_ASSIGN_OR_RETURN(out_->train, OpenDataset(made.dir + "/train.bin", Verify::kHeader));
    CEMB_ASSIGN_OR_RETURN(out_->validation, OpenDataset(made.dir + "/val.bin", Verify::kHeader));
    return absl::OkStatus();
  }

  const PrepareOptions& o_;
  const DataConfig& d_;
  PreparedData* out_;
};

}  // namespace

PreparedData& PreparedData::operator=(PreparedData&& other) noexcept {
  std::swap(train, other.train);
  std::swap(validation, other.validation);
  std::swap(work_dir, other.work_dir);
  std::swap(temporary_work_dir, other.temporary_work_dir);
  std::swap(vocabulary, other.vocabulary);
  return *this;
}

PreparedData::~PreparedData() {
  if (temporary_work_dir && !work_dir.empty()) {
    std::error_code ec;
    fs::remove_all(work_dir, ec);
  }
}

absl::StatusOr<InputFile> InputFile::Stat(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return base::ErrnoStatus(errno, path, "stat");
  std::error_code ec;
  InputFile f;
  f.path = fs::absolute(path, ec).lexically_normal().string();
  f.bytes = static_cast<uint64_t>(st.st_size);
  f.modified_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
  return f;
}

absl::StatusOr<std::vector<PreparedFile>> ReuseCheck(const std::string& dir, const Recipe& recipe) {
  const std::string path = absl::StrCat(dir, "/", kRecipeFile);
  std::error_code ec;
  if (!fs::exists(path, ec)) return absl::NotFoundError(absl::StrCat(path, ": nothing prepared yet"));
  CEMB_ASSIGN_OR_RETURN(const std::string text, base::ReadWholeFile(path));
  Recipe was;
  std::vector<PreparedFile> outputs;
  CEMB_RETURN_IF_ERROR(ParseRecipe(path, text, &was, &outputs));
  if (const std::string why = Difference(was, recipe); !why.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": ", why));
  }
  for (const PreparedFile& f : outputs) {
    const std::string file = absl::StrCat(dir, "/", f.name);
    absl::StatusOr<std::unique_ptr<Dataset>> d = Dataset::Open(file, {.verify = Verify::kHeader});
    if (!d.ok()) return absl::FailedPreconditionError(d.status().message());
    if ((*d)->num_samples() != f.samples || (*d)->payload_checksum() != f.payload_checksum) {
      return absl::FailedPreconditionError(
          absl::StrFormat("%s holds %d samples (payload checksum %016x), %s recorded %d (%016x)", file,
                          (*d)->num_samples(), (*d)->payload_checksum(), path, f.samples, f.payload_checksum));
    }
  }
  return outputs;
}

absl::StatusOr<std::vector<PreparedFile>> WriteRecipe(const std::string& dir, const Recipe& recipe,
                                                      const std::vector<std::string>& outputs) {
  std::vector<PreparedFile> files;
  for (const std::string& name : outputs) {
    CEMB_ASSIGN_OR_RETURN(std::unique_ptr<Dataset> d,
                          Dataset::Open(absl::StrCat(dir, "/", name), {.verify = Verify::kHeader}));
    files.push_back({.name = name, .samples = d->num_samples(), .payload_checksum = d->payload_checksum()});
  }
  CEMB_RETURN_IF_ERROR(base::WriteFileAtomically(absl::StrCat(dir, "/", kRecipeFile), FormatRecipe(recipe, files)));
  return files;
}

absl::StatusOr<PreparedData> PrepareData(const PrepareOptions& options) {
  PreparedData out;  // removes a temporary work directory on failure
  CEMB_RETURN_IF_ERROR(Preparer(options, &out).Run());
  return out;
}

}  // namespace cemb::data
