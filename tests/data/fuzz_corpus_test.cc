// Runs the line parser over the fuzz seed corpus (fuzz/corpus/criteo_line):
// files named valid_* must parse, files named bad_* must be rejected with a
// message; the reader must treat each file the same way.
#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "data/criteo.h"
#include "data/criteo_reader.h"
#include "gtest/gtest.h"
#include "tests/data/test_util.h"

namespace cemb::data {
namespace {

std::vector<std::filesystem::path> CorpusFiles() {
  std::vector<std::filesystem::path> files;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::string(CEMB_SOURCE_DIR) + "/fuzz/corpus/criteo_line")) {
    files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

TEST(FuzzCorpus, ValidSeedsParseAndBadSeedsAreRejectedWithAMessage) {
  const std::vector<std::filesystem::path> files = CorpusFiles();
  ASSERT_GE(files.size(), 15u);
  int valid = 0, bad = 0;
  for (const auto& path : files) {
    const std::string name = path.filename().string();
    const std::string line = testing::ReadFile(path.string());
    CriteoRow row;
    const absl::Status s = ParseCriteoLine(line, row);
    if (name.rfind("valid_", 0) == 0) {
      EXPECT_TRUE(s.ok()) << name << ": " << s;
      ++valid;
    } else {
      ASSERT_EQ(name.rfind("bad_", 0), 0u) << "seed names start with valid_ or bad_: " << name;
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << name;
      EXPECT_FALSE(s.message().empty()) << name;
      ++bad;
    }
  }
  EXPECT_GT(valid, 5);
  EXPECT_GT(bad, 5);
}

TEST(FuzzCorpus, ReaderAgreesWithTheParserOnEverySeed) {
  for (const auto& path : CorpusFiles()) {
    const std::string name = path.filename().string();
    CriteoReaderOptions options;
    options.bad_lines = BadLines::kSkip;
    auto reader = CriteoReader::Open(path.string(), options);
    ASSERT_TRUE(reader.ok()) << name;
    uint64_t rows = 0;
    while (true) {
      absl::StatusOr<const RowBlock*> block = (*reader)->Next();
      ASSERT_TRUE(block.ok()) << name;
      if (*block == nullptr) break;
      rows += (*block)->rows.size();
    }
    if (name.rfind("valid_", 0) == 0) {
      EXPECT_EQ(rows, 1u) << name;
      EXPECT_EQ((*reader)->bad_lines(), 0u) << name;
    } else if (name == "bad_embedded_newline.tsv") {
      EXPECT_EQ(rows, 2u) << name;  // as a file, it is two good lines
    } else if (name == "bad_empty.tsv") {
      EXPECT_EQ(rows, 0u) << name;  // as a file, it has no lines
    } else {
      EXPECT_EQ(rows, 0u) << name;
      EXPECT_EQ((*reader)->bad_lines(), 1u) << name;
    }
  }
}

}  // namespace
}  // namespace cemb::data
