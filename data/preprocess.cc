#include "data/preprocess.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/checksum.h"
#include "base/file.h"
#include "base/parallel.h"
#include "base/status_macros.h"

namespace cemb::data {
namespace {

constexpr uint32_t kRecordFloats = 1 + kNumDense + kNumCategorical;
// Rows per parallel_for item when records are built from a block.
constexpr int64_t kRowsPerItem = 1024;

// Which part line `index` (0-based) of input `input` belongs to.
class Splitter {
 public:
  static absl::StatusOr<Splitter> Create(const PreprocessOptions& o) {
    Splitter s;
    s.mode_ = o.split;
    s.format_ = o.format;
    s.num_inputs_ = o.inputs.size();
    if (o.split == SplitMode::kNone) return s;
    if (o.format == CriteoFormat::kKaggle) {
      if (o.inputs.size() != 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the Kaggle split takes one input (train.txt), got ", o.inputs.size(),
            "; use the Terabyte format or no split"));
      }
      CEMB_ASSIGN_OR_RETURN(uint64_t lines, CountLines(o.inputs[0]));
      s.points_ = KaggleSplit(lines);
    } else {
      CEMB_ASSIGN_OR_RETURN(uint64_t lines, CountLines(o.inputs.back()));
      s.points_ = {0, (lines + 1) / 2};
    }
    return s;
  }
  Part PartOf(size_t input, uint64_t index) const {
    if (mode_ == SplitMode::kNone) return Part::kAll;
    if (format_ == CriteoFormat::kTerabyte && input + 1 < num_inputs_) return Part::kTrain;
    if (index < points_.train_end) return Part::kTrain;
    if (index < points_.test_end) return Part::kTest;
    return Part::kValidation;
  }
  std::vector<Part> Parts() const {
    if (mode_ == SplitMode::kNone) return {Part::kAll};
    return {Part::kTrain, Part::kValidation, Part::kTest};
  }

 private:
  SplitMode mode_ = SplitMode::kNone;
  CriteoFormat format_ = CriteoFormat::kKaggle;
  size_t num_inputs_ = 0;
  SplitPoints points_;
};

std::string OutputName(Part part) {
  switch (part) {
    case Part::kTrain: return "train.bin";
    case Part::kValidation: return "val.bin";
    case Part::kTest: return "test.bin";
    case Part::kAll: break;
  }
  return "all.bin";
}

absl::StatusOr<uint64_t> TotalBytes(const std::vector<std::string>& inputs) {
  uint64_t total = 0;
  for (const std::string& path : inputs) {
    CEMB_ASSIGN_OR_RETURN(base::File f, base::File::OpenForReading(path));
    total += f.size();
  }
  return total;
}

// Calls fn(input_index, block) for every block of every input, reporting
// progress; accumulates the reader's counters into `summary` when given.
template <typename Fn>
absl::Status ForEachBlock(const PreprocessOptions& o, int pass, int passes, uint64_t total_bytes,
                          PreprocessSummary* summary, Fn&& fn) {
  PreprocessProgress progress{pass, passes, 0, total_bytes, 0};
  uint64_t bytes_before = 0;
  for (size_t in = 0; in < o.inputs.size(); ++in) {
    CEMB_ASSIGN_OR_RETURN(std::unique_ptr<CriteoReader> reader,
                          CriteoReader::Open(o.inputs[in], o.reader));
    while (true) {
      CEMB_ASSIGN_OR_RETURN(const RowBlock* block, reader->Next());
      if (block == nullptr) break;
      CEMB_RETURN_IF_ERROR(fn(in, *block));
      if (o.progress) {
        progress.bytes_done = bytes_before + reader->bytes_done();
        progress.lines += block->rows.size();
        o.progress(progress);
      }
    }
    bytes_before += reader->file_bytes();
    if (summary != nullptr) {
      summary->lines += reader->lines();
      summary->bad_lines += reader->bad_lines();
      for (const std::string& m : reader->bad_line_messages()) {
        if (summary->bad_line_messages.size() < o.reader.max_reported_bad_lines) {
          summary->bad_line_messages.push_back(m);
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

SplitPoints KaggleSplit(uint64_t lines) {
  constexpr uint64_t kDays = 7;
  const uint64_t per_day = lines / kDays, extras = lines % kDays;
  SplitPoints p;
  p.train_end = (kDays - 1) * per_day + std::min(extras, kDays - 1);
  const uint64_t last_day = lines - p.train_end;
  p.test_end = p.train_end + (last_day + 1) / 2;  // np.array_split: the first half is larger
  return p;
}

void Vocabulary::Finalize(uint32_t threshold) {
  for (size_t t = 0; t < counts_.size(); ++t) {
    std::vector<uint32_t> frequent;
    for (const auto& [id, count] : counts_[t]) {
      if (count >= threshold) frequent.push_back(id);
    }
    std::sort(frequent.begin(), frequent.end());
    rows_[t].clear();
    rows_[t].reserve(frequent.size());
    for (size_t i = 0; i < frequent.size(); ++i) rows_[t][frequent[i]] = static_cast<int32_t>(i + 1);
    sizes_[t] = frequent.size() + 1;
    absl::flat_hash_map<uint32_t, uint32_t>().swap(counts_[t]);
  }
}

namespace {
constexpr char kVocabularyMagic[] = "cemb-vocabulary-1\n";

template <typename T>
void Put(std::string& out, const T& v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}
}  // namespace

absl::Status Vocabulary::Save(const std::string& path) const {
  std::string bytes = kVocabularyMagic;
  Put(bytes, static_cast<uint32_t>(rows_.size()));
  for (const auto& rows : rows_) {
    std::vector<uint32_t> ids(rows.size());
    for (const auto& [id, row] : rows) ids[static_cast<size_t>(row - 1)] = id;
    Put(bytes, static_cast<uint64_t>(ids.size()));
    bytes.append(reinterpret_cast<const char*>(ids.data()), ids.size() * sizeof(uint32_t));
  }
  Checksum64 sum;
  sum.Update(bytes.data(), bytes.size());
  Put(bytes, sum.Digest());
  return base::WriteFileAtomically(path, bytes);
}

absl::StatusOr<Vocabulary> Vocabulary::Load(const std::string& path) {
  CEMB_ASSIGN_OR_RETURN(const std::string bytes, base::ReadWholeFile(path));
  auto corrupt = [&](const std::string& what) {
    return absl::DataLossError(absl::StrCat(path, ": not a vocabulary of this version, or corrupt: ", what));
  };
  const size_t magic = sizeof kVocabularyMagic - 1;
  if (bytes.size() < magic + 4 + 8 || bytes.compare(0, magic, kVocabularyMagic) != 0) {
    return corrupt("no cemb-vocabulary-1 header");
  }
  Checksum64 sum;
  sum.Update(bytes.data(), bytes.size() - 8);
  uint64_t stored;
  std::memcpy(&stored, bytes.data() + bytes.size() - 8, 8);
  if (stored != sum.Digest()) return corrupt("its checksum does not match its contents");
  size_t at = magic;
  const size_t end = bytes.size() - 8;
  auto take = [&](void* out, size_t n) {
    if (end - at < n) return false;
    std::memcpy(out, bytes.data() + at, n);
    at += n;
    return true;
  };
  uint32_t tables = 0;
  take(&tables, 4);
  Vocabulary v(static_cast<int>(tables));
  for (uint32_t t = 0; t < tables; ++t) {
    uint64_t n = 0;
    if (!take(&n, 8) || n > (end - at) / 4) return corrupt(absl::StrCat("table ", t, " is cut short"));
    v.rows_[t].reserve(n);
    uint32_t previous = 0;
    for (uint64_t k = 0; k < n; ++k) {
      uint32_t id;
      take(&id, 4);
      if (k > 0 && id <= previous) return corrupt(absl::StrCat("table ", t, ": ids not increasing at ", k));
      v.rows_[t][id] = static_cast<int32_t>(k + 1);
      previous = id;
    }
    v.sizes_[t] = n + 1;
  }
  if (at != end) return corrupt(absl::StrCat(end - at, " bytes after the last table"));
  return v;
}

absl::StatusOr<PreprocessSummary> Preprocess(const PreprocessOptions& options) {
  PreprocessOptions o = options;
  if (o.inputs.empty()) return absl::InvalidArgumentError("preprocess: no input files");
  if (o.output_dir.empty()) return absl::InvalidArgumentError("preprocess: no output directory");
  if (o.reader.threads <= 0) o.reader.threads = DefaultThreads();
  const int threads = o.reader.threads;
  PreprocessSummary summary;
  CEMB_ASSIGN_OR_RETURN(summary.input_bytes, TotalBytes(o.inputs));

  // Table sizes.
  std::unique_ptr<Vocabulary> vocabulary;
  std::vector<uint64_t> sizes;
  if (o.index_mode == IndexMode::kModulo) {
    sizes = o.table_sizes.empty()
                ? std::vector<uint64_t>(kKaggleCardinalities.begin(), kKaggleCardinalities.end())
                : o.table_sizes;
    if (sizes.size() != kNumCategorical) {
      return absl::InvalidArgumentError(absl::StrCat("preprocess: ", sizes.size(),
                                                     " table sizes given, Criteo has ", kNumCategorical));
    }
    for (size_t t = 0; t < sizes.size(); ++t) {
      if (o.max_index_range != 0) sizes[t] = std::min(sizes[t], o.max_index_range);
      if (sizes[t] == 0 || sizes[t] > (uint64_t{1} << 31)) {
        return absl::InvalidArgumentError(
            absl::StrCat("preprocess: table ", t, " size ", sizes[t], " not in [1, 2^31]"));
      }
    }
  } else {
    if (o.frequency_threshold == 0) {
      return absl::InvalidArgumentError("preprocess: frequency_threshold must be >= 1");
    }
    vocabulary = std::make_unique<Vocabulary>(kNumCategorical);
    Vocabulary* v = vocabulary.get();
    auto count = [&](size_t, const RowBlock& block) {
      parallel_for(kNumCategorical, threads, [&](int64_t t) {
        for (const CriteoRow& row : block.rows) v->Count(static_cast<int>(t), row.categorical[t]);
      });
      return absl::OkStatus();
    };
    CEMB_RETURN_IF_ERROR(ForEachBlock(o, 1, 2, summary.input_bytes, nullptr, count));
    vocabulary->Finalize(o.frequency_threshold);
    for (int t = 0; t < kNumCategorical; ++t) sizes.push_back(vocabulary->table_size(t));
  }
  summary.table_sizes = sizes;

  CEMB_ASSIGN_OR_RETURN(Splitter splitter, Splitter::Create(o));
  std::error_code ec;
  std::filesystem::create_directories(o.output_dir, ec);
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat(o.output_dir, ": cannot create the output directory: ", ec.message()));
  }
  std::unique_ptr<DatasetWriter> writers[4];
  for (Part part : splitter.Parts()) {
    DatasetSpec spec{.num_dense = kNumDense, .table_sizes = sizes, .hotness = UniformHotness(sizes.size(), 1), .part = part};
    const std::string path = o.output_dir + "/" + OutputName(part);
    CEMB_ASSIGN_OR_RETURN(writers[static_cast<int>(part)], DatasetWriter::Create(path, spec));
  }

  std::vector<float> records;
  const Vocabulary* vocab = vocabulary.get();
  const CriteoTransform transform{.table_sizes = sizes, .vocabulary = vocab};
  auto write = [&](size_t input, const RowBlock& block) -> absl::Status {
        const int64_t n = static_cast<int64_t>(block.rows.size());
        records.resize(static_cast<size_t>(n) * kRecordFloats);
        float* out = records.data();
        parallel_for((n + kRowsPerItem - 1) / kRowsPerItem, threads, [&](int64_t item) {
          for (int64_t i = item * kRowsPerItem; i < std::min(n, (item + 1) * kRowsPerItem); ++i) {
            const CriteoRow& row = block.rows[i];
            float* r = out + i * kRecordFloats;
            r[0] = static_cast<float>(row.label);
            int32_t idx[kNumCategorical];
            transform.Apply(row, r + 1, idx);
            std::memcpy(r + 1 + kNumDense, idx, sizeof idx);
          }
        });
        // Runs of consecutive rows in the same part.
        int64_t begin = 0;
        while (begin < n) {
          const Part part = splitter.PartOf(input, block.lines[begin] - 1);
          int64_t end = begin + 1;
          while (end < n && splitter.PartOf(input, block.lines[end] - 1) == part) ++end;
          CEMB_RETURN_IF_ERROR(writers[static_cast<int>(part)]->AppendRecords(
              out + begin * kRecordFloats, static_cast<uint64_t>(end - begin)));
          begin = end;
        }
        for (const CriteoRow& row : block.rows) summary.positives += row.label;
        summary.samples += static_cast<uint64_t>(n);
        return absl::OkStatus();
  };
  CEMB_RETURN_IF_ERROR(
      ForEachBlock(o, vocab ? 2 : 1, vocab ? 2 : 1, summary.input_bytes, &summary, write));
  if (summary.samples == 0) {
    // Unfinished writers remove their temporary files: no dataset is left.
    return absl::InvalidArgumentError(absl::StrCat(
        "preprocess: no samples in ", absl::StrJoin(o.inputs, ", "), " (", summary.lines, " lines, ",
        summary.bad_lines, " of them bad and skipped)"));
  }

  for (Part part : splitter.Parts()) {
    DatasetWriter& w = *writers[static_cast<int>(part)];
    CEMB_RETURN_IF_ERROR(w.Finish());
    summary.outputs.push_back(o.output_dir + "/" + OutputName(part));
    summary.output_samples.push_back(w.num_samples());
  }
  if (vocabulary != nullptr) {
    summary.vocabulary = absl::StrCat(o.output_dir, "/", kVocabularyFile);
    CEMB_RETURN_IF_ERROR(vocabulary->Save(summary.vocabulary));
  }
  return summary;
}

}  // namespace cemb::data
