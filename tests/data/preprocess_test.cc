#include "data/preprocess.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/data/test_util.h"

namespace cemb::data {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::ReadFile;
using testing::TempDir;
using testing::ValidLine;
using testing::WriteFile;

// An independent reading of a TSV file: split on tabs, std::stoll, std::stoul.
struct RefRow {
  float label;
  std::vector<float> dense;
  std::vector<uint32_t> ids;
};
std::vector<RefRow> ReferenceRows(const std::string& path) {
  std::ifstream in(path);
  std::vector<RefRow> rows;
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> f = absl::StrSplit(line, '\t');
    EXPECT_EQ(f.size(), 40u);
    RefRow r;
    r.label = std::stof(f[0]);
    for (int i = 1; i <= 13; ++i) {
      const double x = f[i].empty() ? 0.0 : static_cast<double>(std::stoll(f[i]));
      r.dense.push_back(static_cast<float>(std::log(1.0 + std::max(x, 0.0))));
    }
    for (int i = 14; i < 40; ++i) r.ids.push_back(f[i].empty() ? 0u : uint32_t(std::stoul(f[i], nullptr, 16)));
    rows.push_back(r);
  }
  return rows;
}

TEST(KaggleSplit, FollowsTheReferenceSevenDayCut) {
  // 1999 = 7 * 285 + 4: days of 286, 286, 286, 286, 285, 285 | 285.
  SplitPoints p = KaggleSplit(1999);
  EXPECT_EQ(p.train_end, 1714u);
  EXPECT_EQ(p.test_end, 1714u + 143u);
  // The full Kaggle set: 45840617 = 7 * 6548659 + 4.
  p = KaggleSplit(45840617);
  EXPECT_EQ(p.train_end, 6u * 6548659u + 4u);
  EXPECT_EQ(p.test_end, p.train_end + 3274330u);
  p = KaggleSplit(0);
  EXPECT_EQ(p.train_end, 0u);
  EXPECT_EQ(p.test_end, 0u);
}

TEST(PreprocessRealRows, KaggleRoundTripReturnsTheSameValues) {
  TempDir dir;
  PreprocessOptions o;
  o.inputs = {testing::KaggleSample()};
  o.output_dir = dir.File("out");
  o.max_index_range = 100000;
  o.reader.chunk_bytes = 64 << 10;
  absl::StatusOr<PreprocessSummary> s = Preprocess(o);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->lines, 1999u);
  EXPECT_EQ(s->samples, 1999u);
  EXPECT_EQ(s->positives, 418u);
  EXPECT_THAT(s->output_samples, ElementsAre(1714u, 142u, 143u));  // train, val, test

  const std::vector<RefRow> ref = ReferenceRows(testing::KaggleSample());
  ASSERT_EQ(ref.size(), 1999u);
  std::vector<uint64_t> sizes(kKaggleCardinalities.begin(), kKaggleCardinalities.end());
  for (uint64_t& size : sizes) size = std::min<uint64_t>(size, 100000);
  // Lines [0, 1714) train, [1714, 1857) test, [1857, 1999) validation.
  const std::vector<std::pair<std::string, uint64_t>> parts = {
      {"train.bin", 0}, {"test.bin", 1714}, {"val.bin", 1857}};
  uint64_t positives = 0;
  for (const auto& [name, first] : parts) {
    auto d = Dataset::Open(o.output_dir + "/" + name);
    ASSERT_TRUE(d.ok()) << d.status();
    ASSERT_TRUE((*d)->CheckTableSizes(sizes).ok());
    for (uint64_t i = 0; i < (*d)->num_samples(); ++i) {
      const RefRow& r = ref[first + i];
      ASSERT_EQ((*d)->label(i), r.label) << name << " " << i;
      positives += r.label;
      for (int j = 0; j < 13; ++j) ASSERT_EQ((*d)->dense(i)[j], r.dense[j]) << name << " " << i;
      for (int t = 0; t < 26; ++t) {
        ASSERT_EQ((*d)->indices(i, t)[0], int32_t(r.ids[t] % sizes[t])) << name << " " << i;
      }
    }
  }
  EXPECT_EQ(positives, 418u);
}

TEST(PreprocessRealRows, TerabyteLastDayIsCutIntoTestAndValidation) {
  TempDir dir;
  PreprocessOptions o;
  o.format = CriteoFormat::kTerabyte;
  o.inputs = {testing::TerabyteSample(), testing::TerabyteSample()};  // "day 0" and "day 1"
  o.output_dir = dir.File("tb");
  absl::StatusOr<PreprocessSummary> s = Preprocess(o);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->positives, 42u);
  EXPECT_THAT(s->output_samples, ElementsAre(1000u, 500u, 500u));
  auto train = Dataset::Open(o.output_dir + "/train.bin");
  auto test = Dataset::Open(o.output_dir + "/test.bin");
  ASSERT_TRUE(train.ok() && test.ok());
  // Test is the first half of the last day, i.e. the file's first 500 rows.
  for (uint64_t i = 0; i < 500; ++i) {
    ASSERT_EQ(0, std::memcmp((*train)->record(i), (*test)->record(i), (*test)->spec().record_bytes()));
  }
}

TEST(PreprocessRealRows, OutputBytesDoNotDependOnThreadsOrChunks) {
  TempDir dir;
  std::string first;
  for (int threads : {1, 2}) {
    PreprocessOptions o;
    o.inputs = {testing::KaggleSample()};
    o.output_dir = dir.File(absl::StrCat("t", threads));
    o.reader.threads = threads;
    o.reader.chunk_bytes = threads == 1 ? (size_t{4} << 20) : (size_t{16} << 10);
    o.split = SplitMode::kNone;
    ASSERT_TRUE(Preprocess(o).ok());
    const std::string bytes = ReadFile(o.output_dir + "/all.bin");
    EXPECT_EQ(bytes.size(), 384 + 1999u * 160);  // header 64 + 26 * (8 + 4) rounded to 64
    if (first.empty()) first = bytes;
    EXPECT_EQ(bytes, first) << threads << " threads";
  }
}

TEST(PreprocessRealRows, VocabularyGivesFrequentIdsTheirOwnRows) {
  TempDir dir;
  for (uint32_t threshold : {1u, 3u}) {
    PreprocessOptions o;
    o.inputs = {testing::KaggleSample()};
    o.output_dir = dir.File(absl::StrCat("v", threshold));
    o.index_mode = IndexMode::kVocabulary;
    o.frequency_threshold = threshold;
    o.split = SplitMode::kNone;
    absl::StatusOr<PreprocessSummary> s = Preprocess(o);
    ASSERT_TRUE(s.ok()) << s.status();
    // Reference: count ids with std::map, rows 1..n by increasing id.
    const std::vector<RefRow> ref = ReferenceRows(testing::KaggleSample());
    std::vector<std::map<uint32_t, int>> counts(26);
    for (const RefRow& r : ref) {
      for (int t = 0; t < 26; ++t) ++counts[t][r.ids[t]];
    }
    std::vector<std::map<uint32_t, int32_t>> rows(26);
    for (int t = 0; t < 26; ++t) {
      for (const auto& [id, c] : counts[t]) {
        if (c >= int(threshold)) rows[t].emplace(id, int32_t(rows[t].size() + 1));
      }
      EXPECT_EQ(s->table_sizes[t], rows[t].size() + 1) << "table " << t;
    }
    auto d = Dataset::Open(o.output_dir + "/all.bin");
    ASSERT_TRUE(d.ok());
    ASSERT_EQ((*d)->num_samples(), 1999u);
    for (uint64_t i = 0; i < 1999; ++i) {
      for (int t = 0; t < 26; ++t) {
        auto it = rows[t].find(ref[i].ids[t]);
        ASSERT_EQ((*d)->indices(i, t)[0], it == rows[t].end() ? 0 : it->second) << i << " " << t;
      }
    }
    if (threshold == 3) {
      EXPECT_LT(s->table_sizes[2], 1999u);  // C3 has many rare ids
    }
    // The vocabulary written beside the dataset maps every id as the dataset did.
    EXPECT_EQ(s->vocabulary, o.output_dir + "/vocabulary.bin");
    absl::StatusOr<Vocabulary> v = Vocabulary::Load(s->vocabulary);
    ASSERT_TRUE(v.ok()) << v.status();
    for (int t = 0; t < 26; ++t) {
      EXPECT_EQ(v->table_size(t), s->table_sizes[t]);
      for (const auto& [id, count] : counts[t]) {
        auto it = rows[t].find(id);
        ASSERT_EQ(v->Row(t, id), it == rows[t].end() ? 0 : it->second) << t << " " << id;
      }
    }
    EXPECT_EQ(v->Row(0, 0xfffffffe), 0);  // an id never seen
  }
}

TEST(Vocabulary, ACutOrCorruptFileIsDataLossNamingIt) {
  TempDir dir;
  Vocabulary v(2);
  for (uint32_t id : {7u, 7u, 9u, 3u, 3u}) v.Count(0, id);
  v.Count(1, 5);
  v.Finalize(2);
  const std::string path = dir.File("vocabulary.bin");
  ASSERT_TRUE(v.Save(path).ok());
  absl::StatusOr<Vocabulary> back = Vocabulary::Load(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->Row(0, 3), 1);
  EXPECT_EQ(back->Row(0, 7), 2);
  EXPECT_EQ(back->Row(0, 9), 0);
  EXPECT_EQ(back->table_size(1), 1u);
  const std::string bytes = ReadFile(path);
  for (const std::string& bad : {bytes.substr(0, bytes.size() - 3), std::string("x") + bytes.substr(1),
                                 bytes.substr(0, 30) + "\x01" + bytes.substr(31)}) {
    WriteFile(path, bad);
    absl::StatusOr<Vocabulary> r = Vocabulary::Load(path);
    EXPECT_TRUE(absl::IsDataLoss(r.status())) << r.status();
    EXPECT_THAT(r.status().message(), HasSubstr(path));
  }
}

TEST(Preprocess, BadLineFailsNamingFileAndLineAndLeavesNoOutput) {
  TempDir dir;
  const std::string input = dir.File("bad.tsv");
  std::string bad = ValidLine();
  bad.replace(bad.find("\t1\t"), 3, "\tx\t");
  WriteFile(input, ValidLine() + "\n" + ValidLine() + "\n" + bad + "\n");
  PreprocessOptions o;
  o.inputs = {input};
  o.output_dir = dir.File("out");
  absl::StatusOr<PreprocessSummary> s = Preprocess(o);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("bad.tsv:3 (byte "));
  EXPECT_THAT(s.status().message(), HasSubstr("field 2 (I1)"));
  EXPECT_TRUE(std::filesystem::is_empty(o.output_dir));
}

TEST(Preprocess, EmptyInputIsAnErrorNamingItAndWritesNoDataset) {
  TempDir dir;
  const std::string input = dir.File("empty.tsv");
  WriteFile(input, "");
  for (IndexMode mode : {IndexMode::kModulo, IndexMode::kVocabulary}) {
    PreprocessOptions o;
    o.inputs = {input};
    o.output_dir = dir.File(mode == IndexMode::kModulo ? "out_modulo" : "out_vocabulary");
    o.index_mode = mode;
    absl::StatusOr<PreprocessSummary> s = Preprocess(o);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.status().message(), HasSubstr("no samples in " + input));
    EXPECT_TRUE(!std::filesystem::exists(o.output_dir) || std::filesystem::is_empty(o.output_dir))
        << "no dataset (and no .tmp) is left in " << o.output_dir;
  }
}

TEST(Preprocess, OnlySkippedBadLinesIsNoSamples) {
  TempDir dir;
  const std::string input = dir.File("all_bad.tsv");
  WriteFile(input, "nonsense\nmore nonsense\n");
  PreprocessOptions o;
  o.inputs = {input};
  o.output_dir = dir.File("out");
  o.split = SplitMode::kNone;
  o.reader.bad_lines = BadLines::kSkip;
  absl::StatusOr<PreprocessSummary> s = Preprocess(o);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("no samples in " + input + " (2 lines, 2 of them bad"));
  EXPECT_TRUE(std::filesystem::is_empty(o.output_dir));
}

TEST(Preprocess, SkipModeWritesTheGoodLinesAndCountsTheBad) {
  TempDir dir;
  const std::string input = dir.File("bad.tsv");
  WriteFile(input, ValidLine(1) + "\nnonsense\n" + ValidLine(0) + "\n\n");
  PreprocessOptions o;
  o.inputs = {input};
  o.output_dir = dir.File("out");
  o.split = SplitMode::kNone;
  o.reader.bad_lines = BadLines::kSkip;
  absl::StatusOr<PreprocessSummary> s = Preprocess(o);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->lines, 4u);
  EXPECT_EQ(s->samples, 2u);
  EXPECT_EQ(s->bad_lines, 2u);
  ASSERT_EQ(s->bad_line_messages.size(), 2u);
  EXPECT_THAT(s->bad_line_messages[0], HasSubstr("bad.tsv:2 (byte "));
  EXPECT_THAT(s->bad_line_messages[1], HasSubstr("bad.tsv:4 (byte "));
}

TEST(Preprocess, ReportsProgressUpToTheInputSize) {
  TempDir dir;
  PreprocessOptions o;
  o.inputs = {testing::KaggleSample()};
  o.output_dir = dir.File("p");
  o.reader.chunk_bytes = 64 << 10;
  o.reader.threads = 1;
  std::vector<PreprocessProgress> seen;
  o.progress = [&](const PreprocessProgress& p) { seen.push_back(p); };
  ASSERT_TRUE(Preprocess(o).ok());
  ASSERT_GT(seen.size(), 5u);
  EXPECT_EQ(seen.back().bytes_done, seen.back().bytes_total);
  EXPECT_EQ(seen.back().lines, 1999u);
  for (size_t i = 1; i < seen.size(); ++i) EXPECT_GT(seen[i].bytes_done, seen[i - 1].bytes_done);
}

TEST(Preprocess, RejectsBadOptions) {
  TempDir dir;
  PreprocessOptions o;
  o.output_dir = dir.File("o");
  EXPECT_EQ(Preprocess(o).status().code(), absl::StatusCode::kInvalidArgument);  // no inputs
  o.inputs = {testing::KaggleSample(), testing::KaggleSample()};
  EXPECT_THAT(Preprocess(o).status().message(), HasSubstr("Kaggle split takes one input"));
  o.inputs = {testing::KaggleSample()};
  o.table_sizes = {1, 2, 3};
  EXPECT_THAT(Preprocess(o).status().message(), HasSubstr("3 table sizes given"));
  o.table_sizes.clear();
  o.inputs = {dir.File("missing.tsv")};
  EXPECT_EQ(Preprocess(o).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace cemb::data
