#include "data/generator.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "base/parallel.h"
#include "base/status_macros.h"

namespace cemb::data {
namespace {

constexpr uint64_t kWeightSalt = 0x5eed0f1ab31ULL;
constexpr uint64_t kDenseSalt = 0xde75eULL;
constexpr uint64_t kLfsrSalt = 0x1f5a5eedULL;

double Gaussian(Xoshiro256pp& rng) {
  // Box-Muller; 1 - U is in (0, 1], so the log is finite.
  const double u1 = 1.0 - rng.Uniform();
  const double u2 = rng.Uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

// Generates the chunks in batches of `threads` in parallel and hands each
// batch to `sink` in order.
template <typename Sink>
absl::Status ForEachChunkBatch(const SyntheticGenerator& gen, bool want_raw, Sink&& sink) {
  const int threads = gen.options().threads > 0 ? gen.options().threads : DefaultThreads();
  std::vector<std::vector<float>> records(threads);
  std::vector<std::vector<int64_t>> raw(threads);
  for (uint64_t first = 0; first < gen.num_chunks(); first += threads) {
    const int n = static_cast<int>(std::min<uint64_t>(threads, gen.num_chunks() - first));
    parallel_for(n, threads, [&](int64_t i) {
      gen.GenerateChunk(first + i, records[i], want_raw ? &raw[i] : nullptr);
    });
    for (int i = 0; i < n; ++i) CEMB_RETURN_IF_ERROR(sink(records[i], raw[i]));
  }
  return absl::OkStatus();
}

}  // namespace

SyntheticGenerator::SyntheticGenerator(const GeneratorOptions& options, std::vector<uint32_t> hotness)
    : options_(options), hotness_(std::move(hotness)) {
  index_offsets_ = spec().IndexOffsets();
  const uint64_t seed = options_.seed;
  for (size_t t = 0; t < options_.table_sizes.size(); ++t) {
    zipf_.emplace_back(options_.table_sizes[t], options_.zipf_alpha);
    lfsr_.emplace_back(options_.table_sizes[t], SplitMix64::Mix(seed ^ kLfsrSalt, t));
    weight_seed_.push_back(SplitMix64::Mix(seed ^ kWeightSalt, t));
  }
  Xoshiro256pp rng(SplitMix64::Mix(seed, kDenseSalt));
  double norm = 0;
  for (int j = 0; j < kNumDense; ++j) {
    // |v_j| in [0.5, 1], random sign, then normalised.
    dense_weight_[j] = (0.5 + 0.5 * rng.Uniform()) * (rng() & 1 ? 1.0 : -1.0);
    norm += dense_weight_[j] * dense_weight_[j];
    dense_mu_[j] = 1.0 + 0.5 * (j % 4);
  }
  for (double& v : dense_weight_) v *= options_.dense_signal / std::sqrt(norm);
}

absl::StatusOr<SyntheticGenerator> SyntheticGenerator::Create(const GeneratorOptions& o) {
  if (o.table_sizes.empty()) return absl::InvalidArgumentError("generator: no tables");
  for (size_t t = 0; t < o.table_sizes.size(); ++t) {
    if (o.table_sizes[t] == 0 || o.table_sizes[t] > (uint64_t{1} << 31)) {
      return absl::InvalidArgumentError(
          absl::StrCat("generator: table ", t, " size ", o.table_sizes[t], " not in [1, 2^31]"));
    }
  }
  CEMB_ASSIGN_OR_RETURN(std::vector<uint32_t> hotness,
                        ExpandHotness(o.hotness, o.table_sizes.size(), "generator: hotness"));
  if (!(o.zipf_alpha > 0)) return absl::InvalidArgumentError("generator: zipf alpha must be > 0");
  if (o.threads < 0) return absl::InvalidArgumentError("generator: threads < 0");
  return SyntheticGenerator(o, std::move(hotness));
}

DatasetSpec SyntheticGenerator::spec() const {
  return DatasetSpec{.num_dense = kNumDense, .table_sizes = options_.table_sizes,
                     .hotness = hotness_, .part = Part::kAll};
}

double SyntheticGenerator::RowWeight(uint32_t table, uint64_t row) const {
  const double u = static_cast<double>(SplitMix64::Mix(weight_seed_[table], row) >> 11) * 0x1.0p-53;
  return (u - 0.5) * 3.4641016151377544;  // variance 1
}

double SyntheticGenerator::DenseLogit(const float* record) const {
  double d = 0;
  for (int j = 0; j < kNumDense; ++j) d += dense_weight_[j] * (record[1 + j] - dense_mu_[j]);
  return d;
}

double SyntheticGenerator::Logit(const float* record) const {
  const uint32_t tables = static_cast<uint32_t>(options_.table_sizes.size());
  const auto* idx = reinterpret_cast<const int32_t*>(record + 1 + kNumDense);
  double e = 0;
  for (uint32_t t = 0; t < tables; ++t) {
    double sum = 0;
    for (uint32_t j = index_offsets_[t]; j < index_offsets_[t + 1]; ++j) {
      sum += RowWeight(t, static_cast<uint64_t>(idx[j]));
    }
    e += sum / hotness_[t];
  }
  e *= options_.embedding_signal / std::sqrt(static_cast<double>(tables));
  return options_.bias + DenseLogit(record) + e;
}

void SyntheticGenerator::GenerateChunk(uint64_t c, std::vector<float>& records,
                                       std::vector<int64_t>* raw_dense) const {
  const uint64_t first = c * kGeneratorChunk;
  const uint64_t n = std::min(kGeneratorChunk, options_.num_samples - first);
  const uint32_t tables = static_cast<uint32_t>(options_.table_sizes.size());
  const size_t width = 1 + kNumDense + size_t{index_offsets_.back()};
  records.resize(n * width);
  if (raw_dense != nullptr) raw_dense->resize(n * kNumDense);
  Xoshiro256pp rng(SplitMix64::Mix(options_.seed, c));
  const bool zipf = options_.distribution == IndexDistribution::kZipf;
  for (uint64_t i = 0; i < n; ++i) {
    float* r = records.data() + i * width;
    for (int j = 0; j < kNumDense; ++j) {
      const double v = std::floor(std::exp(dense_mu_[j] + Gaussian(rng))) - 1.0;
      const int64_t raw = static_cast<int64_t>(std::min(v, 1e15));
      if (raw_dense != nullptr) (*raw_dense)[i * kNumDense + j] = raw;
      r[1 + j] = DenseTransform(raw);
    }
    auto* idx = reinterpret_cast<int32_t*>(r + 1 + kNumDense);
    for (uint32_t t = 0; t < tables; ++t) {
      const uint64_t size = options_.table_sizes[t];
      for (uint32_t j = index_offsets_[t]; j < index_offsets_[t + 1]; ++j) {
        const uint64_t row = zipf ? lfsr_[t](zipf_[t](rng)) : rng.Below(size);
        idx[j] = static_cast<int32_t>(row);
      }
    }
    const double p = 1.0 / (1.0 + std::exp(-Logit(r)));
    r[0] = rng.Uniform() < p ? 1.0f : 0.0f;
  }
}

absl::Status GenerateDataset(const GeneratorOptions& options, const std::string& path) {
  CEMB_ASSIGN_OR_RETURN(SyntheticGenerator gen, SyntheticGenerator::Create(options));
  CEMB_ASSIGN_OR_RETURN(std::unique_ptr<DatasetWriter> writer, DatasetWriter::Create(path, gen.spec()));
  const uint64_t width = gen.spec().record_floats();
  CEMB_RETURN_IF_ERROR(ForEachChunkBatch(gen, false, [&](const std::vector<float>& records,
                                                         const std::vector<int64_t>&) {
    return writer->AppendRecords(records.data(), records.size() / width);
  }));
  return writer->Finish();
}

absl::Status GenerateSplitDataset(const GeneratorOptions& options, uint64_t validation_samples,
                                  const std::string& train_path, const std::string& validation_path) {
  if (validation_samples >= options.num_samples) {
    return absl::InvalidArgumentError(absl::StrCat("generator: ", validation_samples, " validation samples of ",
                                                   options.num_samples, " leave nothing to train on"));
  }
  CEMB_ASSIGN_OR_RETURN(SyntheticGenerator gen, SyntheticGenerator::Create(options));
  DatasetSpec spec = gen.spec();
  spec.part = Part::kTrain;
  CEMB_ASSIGN_OR_RETURN(std::unique_ptr<DatasetWriter> train, DatasetWriter::Create(train_path, spec));
  std::unique_ptr<DatasetWriter> validation;
  if (validation_samples > 0) {
    spec.part = Part::kValidation;
    CEMB_ASSIGN_OR_RETURN(validation, DatasetWriter::Create(validation_path, spec));
  }
  const uint64_t width = spec.record_floats();
  const uint64_t n_train = options.num_samples - validation_samples;
  uint64_t written = 0;
  CEMB_RETURN_IF_ERROR(ForEachChunkBatch(gen, false, [&](const std::vector<float>& records,
                                                         const std::vector<int64_t>&) -> absl::Status {
    const uint64_t n = records.size() / width;
    const uint64_t to_train = written < n_train ? std::min(n, n_train - written) : 0;
    if (to_train > 0) CEMB_RETURN_IF_ERROR(train->AppendRecords(records.data(), to_train));
    if (n > to_train) CEMB_RETURN_IF_ERROR(validation->AppendRecords(records.data() + to_train * width, n - to_train));
    written += n;
    return absl::OkStatus();
  }));
  CEMB_RETURN_IF_ERROR(train->Finish());
  return validation ? validation->Finish() : absl::OkStatus();
}

absl::Status GenerateCriteoTsv(const GeneratorOptions& options, const std::string& path) {
  if (options.table_sizes.size() != kNumCategorical) {
    return absl::InvalidArgumentError(absl::StrCat("generator: Criteo TSV has ", kNumCategorical,
                                                   " tables, not ", options.table_sizes.size()));
  }
  CEMB_ASSIGN_OR_RETURN(SyntheticGenerator gen, SyntheticGenerator::Create(options));
  if (gen.spec().indices_per_sample() != kNumCategorical) {
    return absl::InvalidArgumentError("generator: Criteo TSV holds one id per table (hotness 1)");
  }
  CEMB_ASSIGN_OR_RETURN(base::AtomicFile file, base::AtomicFile::Create(path));  // .tmp removed on failure
  const uint64_t width = gen.spec().record_floats();
  std::string text;
  absl::Status s = ForEachChunkBatch(gen, true, [&](const std::vector<float>& records,
                                                    const std::vector<int64_t>& raw) {
    text.clear();
    const uint64_t n = records.size() / width;
    char buf[32];
    for (uint64_t i = 0; i < n; ++i) {
      const float* r = records.data() + i * width;
      text += r[0] != 0 ? '1' : '0';
      for (int j = 0; j < kNumDense; ++j) {
        const int len = std::snprintf(buf, sizeof buf, "\t%lld",
                                      static_cast<long long>(raw[i * kNumDense + j]));
        text.append(buf, static_cast<size_t>(len));
      }
      const auto* idx = reinterpret_cast<const int32_t*>(r + 1 + kNumDense);
      for (int t = 0; t < kNumCategorical; ++t) {
        const int len = std::snprintf(buf, sizeof buf, "\t%08x", static_cast<unsigned>(idx[t]));
        text.append(buf, static_cast<size_t>(len));
      }
      text += '\n';
    }
    return file.Append(text.data(), text.size());
  });
  CEMB_RETURN_IF_ERROR(s);
  return file.Commit(base::AtomicFile::Durability::kUnsynced);  // test data: made again at will
}

}  // namespace cemb::data
