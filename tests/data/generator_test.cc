#include "data/generator.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <cmath>
#include <map>
#include <numeric>
#include <set>
#include <vector>

#include "data/preprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/data/test_util.h"

namespace cemb::data {
namespace {

using ::testing::HasSubstr;
using testing::ReadFile;
using testing::TempDir;

// ROC AUC of `score` for the 0/1 `labels` (ties count one half).
double Auc(const std::vector<double>& score, const std::vector<float>& labels) {
  std::vector<size_t> order(score.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return score[a] < score[b]; });
  double rank_sum = 0, positives = 0;
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j < order.size() && score[order[j]] == score[order[i]]) ++j;
    const double mid_rank = (i + j + 1) / 2.0;  // 1-based average rank of the tie group
    for (size_t m = i; m < j; ++m) {
      if (labels[order[m]] != 0) rank_sum += mid_rank, positives += 1;
    }
    i = j;
  }
  const double negatives = static_cast<double>(score.size()) - positives;
  return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives);
}

TEST(Auc, HandWrittenValues) {
  EXPECT_DOUBLE_EQ(Auc({1, 2, 3, 4}, {0, 0, 1, 1}), 1.0);
  EXPECT_DOUBLE_EQ(Auc({1, 2, 3, 4}, {1, 1, 0, 0}), 0.0);
  EXPECT_DOUBLE_EQ(Auc({1, 1, 1, 1}, {1, 0, 1, 0}), 0.5);
  EXPECT_DOUBLE_EQ(Auc({1, 3, 2, 4}, {0, 0, 1, 1}), 0.75);
}

GeneratorOptions SmallOptions() {
  GeneratorOptions o;
  o.num_samples = 20000;
  o.seed = 42;
  return o;
}

TEST(SyntheticGenerator, OutputDoesNotDependOnThreadCount) {
  TempDir dir;
  GeneratorOptions o = SmallOptions();
  o.distribution = IndexDistribution::kZipf;
  o.threads = 1;
  ASSERT_TRUE(GenerateDataset(o, dir.File("a.bin")).ok());
  o.threads = 2;
  ASSERT_TRUE(GenerateDataset(o, dir.File("b.bin")).ok());
  EXPECT_EQ(ReadFile(dir.File("a.bin")), ReadFile(dir.File("b.bin")));
  o.seed = 43;
  ASSERT_TRUE(GenerateDataset(o, dir.File("c.bin")).ok());
  EXPECT_NE(ReadFile(dir.File("a.bin")), ReadFile(dir.File("c.bin")));
}

// The split files hold GenerateDataset's records, the last
// validation_samples of them in the validation file (20000 samples span
// several chunks; the split falls inside one); 0 writes the training file
// alone; a split that leaves nothing to train on is refused.
TEST(SyntheticGenerator, SplitDatasetHoldsTheSameRecordsSplitAtTheEnd) {
  TempDir dir;
  const GeneratorOptions o = SmallOptions();
  ASSERT_TRUE(GenerateDataset(o, dir.File("all.bin")).ok());
  ASSERT_TRUE(GenerateSplitDataset(o, 1234, dir.File("t.bin"), dir.File("v.bin")).ok());
  auto all = Dataset::Open(dir.File("all.bin"));
  auto t = Dataset::Open(dir.File("t.bin"));
  auto v = Dataset::Open(dir.File("v.bin"));
  ASSERT_TRUE(all.ok() && t.ok() && v.ok());
  ASSERT_EQ((*t)->num_samples(), 20000u - 1234u);
  ASSERT_EQ((*v)->num_samples(), 1234u);
  EXPECT_EQ((*t)->part(), Part::kTrain);
  EXPECT_EQ((*v)->part(), Part::kValidation);
  const size_t bytes = (*all)->spec().record_bytes();
  for (uint64_t i = 0; i < 20000; ++i) {
    const float* want = (*all)->record(i);
    const float* got = i < 18766 ? (*t)->record(i) : (*v)->record(i - 18766);
    ASSERT_EQ(std::memcmp(want, got, bytes), 0) << "sample " << i;
  }
  ASSERT_TRUE(GenerateSplitDataset(o, 0, dir.File("t0.bin"), dir.File("v0.bin")).ok());
  auto t0 = Dataset::Open(dir.File("t0.bin"));
  ASSERT_TRUE(t0.ok());
  EXPECT_EQ((*t0)->num_samples(), 20000u);
  EXPECT_FALSE(std::filesystem::exists(dir.File("v0.bin")));
  const absl::Status none = GenerateSplitDataset(o, 20000, dir.File("t1.bin"), dir.File("v1.bin"));
  EXPECT_EQ(none.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(none.message()), HasSubstr("20000 validation samples of 20000"));
}

TEST(SyntheticGenerator, WritesTheKaggleShapeByDefault) {
  TempDir dir;
  const GeneratorOptions o = SmallOptions();
  ASSERT_TRUE(GenerateDataset(o, dir.File("d.bin")).ok());
  auto d = Dataset::Open(dir.File("d.bin"));  // Verify::kFull checks every index's range
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ((*d)->num_samples(), 20000u);
  EXPECT_EQ((*d)->num_dense(), 13u);
  EXPECT_TRUE((*d)->CheckTableSizes(std::vector<uint64_t>(kKaggleCardinalities.begin(),
                                                           kKaggleCardinalities.end())).ok());
  for (uint64_t i = 0; i < 20000; ++i) {
    ASSERT_TRUE((*d)->label(i) == 0.0f || (*d)->label(i) == 1.0f);
    for (float x : (*d)->dense(i)) ASSERT_GE(x, 0.0f);
  }
}

TEST(SyntheticGenerator, MultiHotWritesHotnessIndicesPerTable) {
  TempDir dir;
  GeneratorOptions o = SmallOptions();
  o.num_samples = 1000;
  o.hotness = {4};
  o.table_sizes = {100, 7, 1};
  ASSERT_TRUE(GenerateDataset(o, dir.File("m.bin")).ok());
  auto d = Dataset::Open(dir.File("m.bin"));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_THAT((*d)->hotness(), ::testing::ElementsAre(4, 4, 4));
  std::set<int32_t> seen;
  for (uint64_t i = 0; i < 1000; ++i) {
    for (int32_t r : (*d)->indices(i, 0)) seen.insert(r);
    EXPECT_THAT((*d)->indices(i, 2), ::testing::Each(0));
  }
  EXPECT_EQ(seen.size(), 100u);  // 4000 uniform draws over 100 rows reach all of them
}

// MLPerf DLRM-DCNv2's hotness per table, on small tables: every bag has its
// table's size, Zipf and uniform draws stay in range, the output does not
// depend on the threads, and one number equals the same number per table.
TEST(SyntheticGenerator, PerTableHotnessAsMlperfMakesIt) {
  const std::vector<uint32_t> mlperf = {3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1};
  TempDir dir;
  GeneratorOptions o = SmallOptions();
  o.num_samples = 9000;  // two chunks
  o.table_sizes.assign(26, 500);
  o.hotness = mlperf;
  for (IndexDistribution dist : {IndexDistribution::kZipf, IndexDistribution::kUniform}) {
    o.distribution = dist;
    o.threads = 1;
    ASSERT_TRUE(GenerateDataset(o, dir.File("a.bin")).ok());
    o.threads = 2;
    ASSERT_TRUE(GenerateDataset(o, dir.File("b.bin")).ok());
    EXPECT_EQ(ReadFile(dir.File("a.bin")), ReadFile(dir.File("b.bin")));
    auto d = Dataset::Open(dir.File("a.bin"));  // Verify::kFull: every index in range
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_THAT((*d)->hotness(), ::testing::ElementsAreArray(mlperf));
    EXPECT_EQ((*d)->spec().record_floats(), 1u + 13 + 214);  // 214 indices a sample
    for (uint32_t t = 0; t < 26; ++t) EXPECT_EQ((*d)->indices(8999, t).size(), mlperf[t]);
    // The 100-row bags are draws, not one row repeated.
    std::set<int32_t> bag((*d)->indices(0, 20).begin(), (*d)->indices(0, 20).end());
    EXPECT_GT(bag.size(), 10u) << IndexDistributionName(dist);
  }
  o.hotness = {2};
  ASSERT_TRUE(GenerateDataset(o, dir.File("one.bin")).ok());
  o.hotness.assign(26, 2);
  ASSERT_TRUE(GenerateDataset(o, dir.File("list.bin")).ok());
  EXPECT_EQ(ReadFile(dir.File("one.bin")), ReadFile(dir.File("list.bin")));
}

// The planted model's E takes the mean over each table's bag, whatever its
// size: Logit() against the formula written out here.
TEST(SyntheticGenerator, LogitAveragesEachBag) {
  GeneratorOptions o = SmallOptions();
  o.num_samples = 50;
  o.table_sizes = {50, 7, 1000};
  o.hotness = {3, 1, 10};
  auto gen = SyntheticGenerator::Create(o);
  ASSERT_TRUE(gen.ok()) << gen.status();
  std::vector<float> records;
  gen->GenerateChunk(0, records);
  const size_t width = gen->spec().record_floats();
  ASSERT_EQ(width, 1u + 13 + 14);
  for (size_t i = 0; i < records.size(); i += width) {
    const auto* idx = reinterpret_cast<const int32_t*>(&records[i + 14]);
    double e = 0;
    size_t j = 0;
    for (uint32_t t = 0; t < 3; ++t) {
      double sum = 0;
      for (uint32_t k = 0; k < o.hotness[t]; ++k, ++j) {
        ASSERT_LT(uint64_t(idx[j]), o.table_sizes[t]);
        sum += gen->RowWeight(t, uint64_t(idx[j]));
      }
      e += sum / o.hotness[t];
    }
    e *= o.embedding_signal / std::sqrt(3.0);
    EXPECT_NEAR(gen->Logit(&records[i]), o.bias + gen->DenseLogit(&records[i]) + e, 1e-12);
  }
}

TEST(SyntheticGenerator, ZipfRowsAreHotAndScrambled) {
  GeneratorOptions o = SmallOptions();
  o.table_sizes = {1000};
  o.distribution = IndexDistribution::kZipf;
  o.zipf_alpha = 1.0;
  auto gen = SyntheticGenerator::Create(o);
  ASSERT_TRUE(gen.ok());
  std::map<int32_t, int> counts;
  std::vector<float> records;
  for (uint64_t c = 0; c < gen->num_chunks(); ++c) {
    gen->GenerateChunk(c, records);
    for (size_t i = 0; i < records.size(); i += 15) {
      ++counts[*reinterpret_cast<const int32_t*>(&records[i + 14])];
    }
  }
  std::vector<std::pair<int, int32_t>> by_count;
  for (auto [row, n] : counts) by_count.push_back({n, row});
  std::sort(by_count.rbegin(), by_count.rend());
  // P(rank 0) = 1 / H(1000) = 0.1336 for alpha = 1.
  EXPECT_NEAR(by_count[0].first / 20000.0, 0.1336, 0.01);
  EXPECT_NEAR(by_count[1].first / 20000.0, 0.0668, 0.008);
  // The hottest rows are not the first rows of the table (the LFSR spread them).
  int in_first_ten = 0;
  for (int i = 0; i < 10; ++i) in_first_ten += by_count[i].second < 10;
  EXPECT_LT(in_first_ten, 5);
}

TEST(SyntheticGenerator, UniformRowsAreFlat) {
  GeneratorOptions o = SmallOptions();
  o.table_sizes = {100};
  auto gen = SyntheticGenerator::Create(o);
  ASSERT_TRUE(gen.ok());
  std::vector<int> counts(100);
  std::vector<float> records;
  for (uint64_t c = 0; c < gen->num_chunks(); ++c) {
    gen->GenerateChunk(c, records);
    for (size_t i = 0; i < records.size(); i += 15) ++counts[*reinterpret_cast<const int32_t*>(&records[i + 14])];
  }
  // Mean 200, standard deviation about 14.
  EXPECT_GT(*std::min_element(counts.begin(), counts.end()), 130);
  EXPECT_LT(*std::max_element(counts.begin(), counts.end()), 270);
}

// The planted model must leave a DLRM something clearly learnable: the dense
// part alone, a linear function of the stored features, separates the labels
// with AUC > 0.72 (a later trainer test aims for AUC > 0.7 on this data).
TEST(SyntheticGenerator, PlantedLabelModelIsLearnable) {
  GeneratorOptions o = SmallOptions();
  o.num_samples = 40000;
  auto gen = SyntheticGenerator::Create(o);
  ASSERT_TRUE(gen.ok());
  std::vector<double> full, dense;
  std::vector<float> labels, records;
  const size_t width = gen->spec().record_floats();
  for (uint64_t c = 0; c < gen->num_chunks(); ++c) {
    gen->GenerateChunk(c, records);
    for (size_t i = 0; i < records.size(); i += width) {
      labels.push_back(records[i]);
      full.push_back(gen->Logit(&records[i]));
      dense.push_back(gen->DenseLogit(&records[i]));
    }
  }
  const double rate = std::accumulate(labels.begin(), labels.end(), 0.0) / labels.size();
  const double auc_full = Auc(full, labels), auc_dense = Auc(dense, labels);
  RecordProperty("positive_rate", std::to_string(rate));
  RecordProperty("auc_full", std::to_string(auc_full));
  RecordProperty("auc_dense", std::to_string(auc_dense));
  EXPECT_GT(rate, 0.2);
  EXPECT_LT(rate, 0.45);
  EXPECT_GT(auc_dense, 0.72) << "seed " << o.seed;
  EXPECT_GT(auc_full, auc_dense + 0.03) << "seed " << o.seed;
  // Without signal the labels are coin flips with respect to the features.
  o.dense_signal = 0;
  o.embedding_signal = 0;
  auto flat = SyntheticGenerator::Create(o);
  std::vector<double> score;
  labels.clear();
  for (uint64_t c = 0; c < flat->num_chunks(); ++c) {
    flat->GenerateChunk(c, records);
    for (size_t i = 0; i < records.size(); i += width) {
      labels.push_back(records[i]);
      score.push_back(gen->DenseLogit(&records[i]));
    }
  }
  EXPECT_NEAR(Auc(score, labels), 0.5, 0.02);
}

TEST(SyntheticGenerator, TsvPreprocessesToTheSameBytes) {
  TempDir dir;
  GeneratorOptions o = SmallOptions();
  o.num_samples = 3000;
  o.distribution = IndexDistribution::kZipf;
  ASSERT_TRUE(GenerateDataset(o, dir.File("direct.bin")).ok());
  ASSERT_TRUE(GenerateCriteoTsv(o, dir.File("synthetic.tsv")).ok());
  PreprocessOptions p;
  p.inputs = {dir.File("synthetic.tsv")};
  p.output_dir = dir.File("pre");
  p.table_sizes = o.table_sizes;
  p.split = SplitMode::kNone;
  absl::StatusOr<PreprocessSummary> s = Preprocess(p);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->samples, 3000u);
  EXPECT_EQ(ReadFile(dir.File("pre/all.bin")), ReadFile(dir.File("direct.bin")));
}

TEST(SyntheticGenerator, RejectsBadOptions) {
  TempDir dir;
  GeneratorOptions o = SmallOptions();
  o.hotness = {2};
  EXPECT_THAT(GenerateCriteoTsv(o, dir.File("x.tsv")).message(), HasSubstr("hotness 1"));
  o.hotness = {0};
  EXPECT_FALSE(SyntheticGenerator::Create(o).ok());
  o.hotness = {1, 2};
  EXPECT_THAT(SyntheticGenerator::Create(o).status().message(),
              HasSubstr("generator: hotness: 2 entries for 26 tables"));
  o = SmallOptions();
  o.table_sizes = {10, 0};
  EXPECT_THAT(SyntheticGenerator::Create(o).status().message(), HasSubstr("table 1 size 0"));
  o = SmallOptions();
  o.zipf_alpha = 0;
  EXPECT_FALSE(SyntheticGenerator::Create(o).ok());
  o = SmallOptions();
  EXPECT_EQ(GenerateDataset(o, "/nonexistent/dir/x.bin").code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace cemb::data
