// A synthetic Criteo-shaped dataset with a planted label model.
//
// Sample i has 13 dense features, a bag of K_t indices into each table t
// (its hotness) and a label drawn from a hidden logistic model:
//
//   raw_j   = floor(exp(mu_j + g_j)) - 1,  g_j ~ N(0, 1), mu_j = 1 + 0.5 (j % 4)
//   x_j     = log(1 + max(raw_j, 0))                    (the stored dense value)
//   row_tk  ~ Uniform[0, n_t)  or  lfsr_t(Zipf(alpha) rank over [0, n_t)),
//             k < K_t, drawn independently (a bag may repeat a row)
//   D       = dense_signal * sum_j v_j (x_j - mu_j)     (|v| = 1, v from the seed)
//   E       = embedding_signal / sqrt(T) * sum_t mean_{k < K_t} w_t(row_tk)
//             (w_t(r) uniform with variance 1, a hash of (seed, t, r): no memory)
//   label   ~ Bernoulli(sigmoid(bias + D + E))
//
// lfsr_t is the maximum-length LFSR bijection of thesis 5.4.1.1 (base/random.h)
// with a per-table seed, so the hot rows of a Zipf table are spread over it.
// D alone is a linear function of the stored dense features, so a model can
// learn it whatever the table sizes: with the defaults, the AUC of D alone on
// the labels is about 0.79 and that of the full logit about 0.85 (checked by
// tests/data/generator_test.cc); E is learnable where rows repeat (small
// tables, Zipf).
//
// Samples are generated in chunks of kGeneratorChunk, chunk c from a stream
// seeded by (seed, c): the output depends on the options only, never on the
// number of threads.
//
// Thread safety: a SyntheticGenerator is immutable; GenerateChunk() may run
// concurrently on different chunks.
//
//   GeneratorOptions o;
//   o.num_samples = 1'000'000;
//   o.distribution = IndexDistribution::kZipf;
//   CEMB_RETURN_IF_ERROR(GenerateDataset(o, "synthetic.bin"));
#ifndef CEMB_DATA_GENERATOR_H_
#define CEMB_DATA_GENERATOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/enum_names.h"
#include "base/random.h"
#include "data/criteo.h"
#include "data/dataset.h"

namespace cemb::data {

enum class IndexDistribution { kUniform, kZipf };
inline constexpr EnumName<IndexDistribution> kIndexDistributionNames[] = {{IndexDistribution::kUniform, "uniform"},
                                                                          {IndexDistribution::kZipf, "zipf"}};
inline const char* IndexDistributionName(IndexDistribution d) { return NameOf(kIndexDistributionNames, d); }

inline constexpr uint64_t kGeneratorChunk = 8192;

struct GeneratorOptions {
  uint64_t num_samples = 1 << 16;
  std::vector<uint64_t> table_sizes{kKaggleCardinalities.begin(), kKaggleCardinalities.end()};
  // Indices per table per sample: one entry per table, or one for every
  // table (ExpandHotness).
  std::vector<uint32_t> hotness = {1};
  IndexDistribution distribution = IndexDistribution::kUniform;
  double zipf_alpha = 1.0;  // REQUIRES: > 0
  uint64_t seed = 1;
  double dense_signal = 1.5;      // standard deviation of D (about)
  double embedding_signal = 1.0;  // standard deviation of E
  double bias = -1.5;             // positive rate about 0.3 with the defaults
  int threads = 0;                // 0 = all hardware threads
};

class SyntheticGenerator {
 public:
  [[nodiscard]] static absl::StatusOr<SyntheticGenerator> Create(const GeneratorOptions& options);

  const GeneratorOptions& options() const { return options_; }
  // The dataset shape (13 dense features, the table sizes, the hotness).
  DatasetSpec spec() const;
  uint64_t num_chunks() const { return (options_.num_samples + kGeneratorChunk - 1) / kGeneratorChunk; }

  // Fills the records (DatasetSpec layout) of chunk c: samples
  // [c * kGeneratorChunk, min((c + 1) * kGeneratorChunk, num_samples)). When
  // `raw_dense` is not null it receives the 13 raw integers of each sample.
  void GenerateChunk(uint64_t c, std::vector<float>& records,
                     std::vector<int64_t>* raw_dense = nullptr) const;

  // The planted model's logit for a record, and its dense part D alone.
  double Logit(const float* record) const;
  double DenseLogit(const float* record) const;
  double RowWeight(uint32_t table, uint64_t row) const;

 private:
  SyntheticGenerator(const GeneratorOptions& options, std::vector<uint32_t> hotness);
  GeneratorOptions options_;
  std::vector<uint32_t> hotness_;        // per table
  std::vector<uint32_t> index_offsets_;  // DatasetSpec::IndexOffsets
  std::vector<ZipfSampler> zipf_;
  std::vector<LfsrScrambler> lfsr_;
  std::vector<uint64_t> weight_seed_;
  double dense_weight_[kNumDense];
  double dense_mu_[kNumDense];
};

// Writes options.num_samples samples as a dataset file (part: kAll).
[[nodiscard]] absl::Status GenerateDataset(const GeneratorOptions& options, const std::string& path);

// Writes the same samples split in two: the first num_samples -
// validation_samples as a kTrain file at `train_path`, the rest as a
// kValidation file at `validation_path` (records as GenerateDataset's); with
// validation_samples 0 only the kTrain file, of every sample.
// REQUIRES: validation_samples < num_samples (else InvalidArgument).
[[nodiscard]] absl::Status GenerateSplitDataset(const GeneratorOptions& options, uint64_t validation_samples,
                                                const std::string& train_path, const std::string& validation_path);

// Writes the same samples as Criteo TSV: label, the 13 raw integers, and each
// row index as 8 hex digits, so that preprocessing the TSV with IndexMode::kModulo,
// the same table sizes and SplitMode::kNone gives the bytes GenerateDataset()
// writes. REQUIRES: hotness 1 for every table (TSV has one id per table); 26 tables.
[[nodiscard]] absl::Status GenerateCriteoTsv(const GeneratorOptions& options, const std::string& path);

}  // namespace cemb::data

#endif  // CEMB_DATA_GENERATOR_H_
