#include "data/criteo_reader.h"

#include <array>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/data/test_util.h"

namespace cemb::data {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;
using testing::ValidLine;
using testing::WriteFile;

struct Stats {
  uint64_t rows = 0, positives = 0, negative_values = 0;
  int64_t max_value = 0;
  std::array<uint64_t, kNumFields> missing{};
  uint64_t last_four_missing_together = 0;
  std::vector<uint64_t> lines;
};

absl::StatusOr<Stats> ReadAll(const std::string& path, CriteoReaderOptions options = {}) {
  auto reader = CriteoReader::Open(path, options);
  if (!reader.ok()) return reader.status();
  Stats st;
  while (true) {
    absl::StatusOr<const RowBlock*> block = (*reader)->Next();
    if (!block.ok()) return block.status();
    if (*block == nullptr) break;
    EXPECT_EQ((*block)->rows.size(), (*block)->lines.size());
    for (size_t i = 0; i < (*block)->rows.size(); ++i) {
      const CriteoRow& row = (*block)->rows[i];
      st.lines.push_back((*block)->lines[i]);
      ++st.rows;
      st.positives += row.label;
      for (int f = 0; f < kNumFields; ++f) st.missing[f] += (row.missing >> f) & 1;
      for (int64_t v : row.dense) {
        st.negative_values += v < 0;
        st.max_value = std::max(st.max_value, v);
      }
      const bool all4 = row.categorical_missing(18) && row.categorical_missing(19) &&
                        row.categorical_missing(24) && row.categorical_missing(25);
      st.last_four_missing_together += all4;
    }
  }
  EXPECT_EQ((*reader)->bytes_done(), (*reader)->file_bytes());
  return st;
}

// The counts below are those of /work/shared/data/criteo/README.md.
TEST(CriteoReaderRealRows, KaggleSampleMatchesItsReadme) {
  for (int threads : {1, 2}) {
    CriteoReaderOptions options;
    options.threads = threads;
    options.chunk_bytes = 16 << 10;  // many chunks, so their seams are exercised
    absl::StatusOr<Stats> st = ReadAll(testing::KaggleSample(), options);
    ASSERT_TRUE(st.ok()) << st.status();
    EXPECT_EQ(st->rows, 1999u);
    EXPECT_EQ(st->positives, 418u);
    EXPECT_EQ(st->missing[0], 0u);
    EXPECT_EQ(st->missing[1], 889u);    // I1
    EXPECT_EQ(st->missing[12], 1554u);  // I12
    EXPECT_EQ(st->last_four_missing_together, 965u);
    EXPECT_EQ(st->negative_values, 217u);
    EXPECT_EQ(st->max_value, 1015215);
    for (uint64_t i = 0; i < st->lines.size(); ++i) ASSERT_EQ(st->lines[i], i + 1);
  }
}

TEST(CriteoReaderRealRows, TerabyteSampleMatchesItsReadme) {
  absl::StatusOr<Stats> st = ReadAll(testing::TerabyteSample());
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->rows, 1000u);
  EXPECT_EQ(st->positives, 21u);
  EXPECT_EQ(st->negative_values, 55u);
  EXPECT_EQ(st->max_value, 1005389);
}

TEST(CriteoReaderRealRows, FirstKaggleRowIsTheKnownOne) {
  auto reader = CriteoReader::Open(testing::KaggleSample(), {});
  ASSERT_TRUE(reader.ok());
  absl::StatusOr<const RowBlock*> block = (*reader)->Next();
  ASSERT_TRUE(block.ok() && *block != nullptr);
  const CriteoRow& row = (*block)->rows[0];
  // "0 1 1 5 0 1382 4 15 2 181 1 2 _ 2 68fd1e64 80e26c9b ..."
  EXPECT_EQ(row.label, 0);
  const std::array<int64_t, 13> dense = {1, 1, 5, 0, 1382, 4, 15, 2, 181, 1, 2, 0, 2};
  EXPECT_EQ(row.dense, dense);
  EXPECT_TRUE(row.dense_missing(11));
  EXPECT_EQ(row.categorical[0], 0x68fd1e64u);
  EXPECT_EQ(row.categorical[1], 0x80e26c9bu);
  EXPECT_EQ(row.categorical[25], 0x9727dd16u);
}

TEST(CriteoReaderRealRows, CountLinesMatchesRowCounts) {
  EXPECT_EQ(*CountLines(testing::KaggleSample()), 1999u);
  EXPECT_EQ(*CountLines(testing::TerabyteSample()), 1000u);
}

TEST(CriteoReader, LastLineWithoutNewlineIsRead) {
  TempDir dir;
  WriteFile(dir.File("a.tsv"), ValidLine(1) + "\n" + ValidLine(0));
  absl::StatusOr<Stats> st = ReadAll(dir.File("a.tsv"));
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->rows, 2u);
  EXPECT_EQ(*CountLines(dir.File("a.tsv")), 2u);
}

TEST(CriteoReader, EmptyFileHasNoRows) {
  TempDir dir;
  WriteFile(dir.File("e.tsv"), "");
  absl::StatusOr<Stats> st = ReadAll(dir.File("e.tsv"));
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->rows, 0u);
  EXPECT_EQ(*CountLines(dir.File("e.tsv")), 0u);
}

TEST(CriteoReader, MissingFileIsNotFound) {
  auto reader = CriteoReader::Open("/nonexistent/x.tsv", {});
  EXPECT_EQ(reader.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(reader.status().message(), HasSubstr("/nonexistent/x.tsv"));
}

TEST(CriteoReader, BadLineFailsWithFileLineAndByteOffset) {
  TempDir dir;
  const std::string good = ValidLine() + "\n";
  std::string bad = ValidLine();
  bad[0] = '7';
  WriteFile(dir.File("b.tsv"), good + good + bad + "\n" + good);
  absl::StatusOr<Stats> st = ReadAll(dir.File("b.tsv"));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.status().message(),
              HasSubstr(dir.File("b.tsv") + ":3 (byte " + std::to_string(2 * good.size()) +
                        "): field 1 (label)"));
}

TEST(CriteoReader, SkipModeCountsBadLinesAndKeepsTheFirstMessages) {
  TempDir dir;
  std::string content;
  for (int i = 0; i < 30; ++i) content += (i % 3 == 1 ? std::string("garbage") : ValidLine()) + "\n";
  WriteFile(dir.File("s.tsv"), content);
  CriteoReaderOptions options;
  options.bad_lines = BadLines::kSkip;
  options.max_reported_bad_lines = 4;
  options.chunk_bytes = 8192;
  options.max_line_bytes = 1024;
  auto reader = CriteoReader::Open(dir.File("s.tsv"), options);
  ASSERT_TRUE(reader.ok());
  std::vector<uint64_t> lines;
  while (true) {
    absl::StatusOr<const RowBlock*> block = (*reader)->Next();
    ASSERT_TRUE(block.ok()) << block.status();
    if (*block == nullptr) break;
    lines.insert(lines.end(), (*block)->lines.begin(), (*block)->lines.end());
  }
  EXPECT_EQ(lines.size(), 20u);
  EXPECT_EQ(lines[0], 1u);
  EXPECT_EQ(lines[1], 3u);  // line 2 was skipped
  EXPECT_EQ((*reader)->bad_lines(), 10u);
  EXPECT_EQ((*reader)->lines(), 30u);
  ASSERT_EQ((*reader)->bad_line_messages().size(), 4u);
  EXPECT_THAT((*reader)->bad_line_messages()[0], HasSubstr("s.tsv:2 (byte "));
  EXPECT_THAT((*reader)->bad_line_messages()[3], HasSubstr("s.tsv:11 (byte "));
}

TEST(CriteoReader, LineLongerThanAChunkIsReportedAndSkipped) {
  TempDir dir;
  const std::string good = ValidLine() + "\n";
  WriteFile(dir.File("l.tsv"), good + std::string(50000, '1') + "\n" + good);
  CriteoReaderOptions options;
  options.chunk_bytes = 8192;
  options.max_line_bytes = 1024;
  absl::StatusOr<Stats> st = ReadAll(dir.File("l.tsv"), options);
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.status().message(), HasSubstr("l.tsv:2 (byte " + std::to_string(good.size()) +
                                               "): line is longer than the limit of 1024"));
  options.bad_lines = BadLines::kSkip;
  st = ReadAll(dir.File("l.tsv"), options);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->rows, 2u);
  EXPECT_EQ(st->lines, (std::vector<uint64_t>{1, 3}));
}

TEST(CriteoReader, LineLongerThanTheLimitButShorterThanAChunkIsAnError) {
  TempDir dir;
  WriteFile(dir.File("m.tsv"), ValidLine() + std::string(2000, '1') + "\n");
  CriteoReaderOptions options;
  options.chunk_bytes = 8192;
  options.max_line_bytes = 1024;
  absl::StatusOr<Stats> st = ReadAll(dir.File("m.tsv"), options);
  EXPECT_THAT(st.status().message(), HasSubstr("m.tsv:1 (byte 0): line is"));
}

TEST(CriteoReader, RejectsChunkSmallerThanTwoLines) {
  CriteoReaderOptions options;
  options.chunk_bytes = 1000;
  options.max_line_bytes = 4096;
  EXPECT_EQ(CriteoReader::Open(testing::KaggleSample(), options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace cemb::data
