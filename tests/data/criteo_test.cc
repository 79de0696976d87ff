#include "data/criteo.h"

#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/data/test_util.h"

namespace cemb::data {
namespace {

using ::testing::HasSubstr;
using testing::ValidLine;

// Replaces field f (0-based) of a valid line.
std::string WithField(int f, const std::string& value) {
  std::vector<std::string> fields = absl::StrSplit(ValidLine(), '\t');
  fields[f] = value;
  return absl::StrJoin(fields, "\t");
}

TEST(ParseCriteoLine, ReadsAllFortyFields) {
  CriteoRow row;
  ASSERT_TRUE(ParseCriteoLine(ValidLine(1), row).ok());
  EXPECT_EQ(row.label, 1);
  for (int i = 0; i < kNumDense; ++i) EXPECT_EQ(row.dense[i], i + 1);
  for (int i = 0; i < kNumCategorical; ++i) EXPECT_EQ(row.categorical[i], uint32_t(i + 1));
  EXPECT_EQ(row.missing, 0u);
}

TEST(ParseCriteoLine, EmptyFieldsAreMissingAndReadAsZero) {
  std::string line = "0";
  for (int i = 0; i < 39; ++i) line += "\t";  // every feature empty: ends in 39 tabs
  CriteoRow row;
  row.dense.fill(7);
  row.categorical.fill(7);
  ASSERT_TRUE(ParseCriteoLine(line, row).ok());
  EXPECT_EQ(row.label, 0);
  for (int i = 0; i < kNumDense; ++i) {
    EXPECT_EQ(row.dense[i], 0);
    EXPECT_TRUE(row.dense_missing(i));
  }
  for (int i = 0; i < kNumCategorical; ++i) {
    EXPECT_EQ(row.categorical[i], 0u);
    EXPECT_TRUE(row.categorical_missing(i));
  }
}

TEST(ParseCriteoLine, TrailingEmptyFieldsCount) {
  // The last four categoricals missing, as in 965 Kaggle sample rows.
  std::vector<std::string> f = absl::StrSplit(ValidLine(), '\t');
  f[36] = f[37] = f[38] = f[39] = "";
  CriteoRow row;
  ASSERT_TRUE(ParseCriteoLine(absl::StrJoin(f, "\t"), row).ok());
  EXPECT_TRUE(row.categorical_missing(25));
  EXPECT_TRUE(row.categorical_missing(22));
  EXPECT_FALSE(row.categorical_missing(21));
}

TEST(ParseCriteoLine, NegativeAndLargeIntegers) {
  CriteoRow row;
  ASSERT_TRUE(ParseCriteoLine(WithField(1, "-2"), row).ok());
  EXPECT_EQ(row.dense[0], -2);
  ASSERT_TRUE(ParseCriteoLine(WithField(13, "9223372036854775807"), row).ok());
  EXPECT_EQ(row.dense[12], INT64_MAX);
  ASSERT_TRUE(ParseCriteoLine(WithField(13, "-9223372036854775807"), row).ok());
  EXPECT_EQ(row.dense[12], -INT64_MAX);
}

TEST(ParseCriteoLine, HexIdsInEitherCaseAndShort) {
  CriteoRow row;
  ASSERT_TRUE(ParseCriteoLine(WithField(14, "FFFFFFFF"), row).ok());
  EXPECT_EQ(row.categorical[0], 0xffffffffu);
  ASSERT_TRUE(ParseCriteoLine(WithField(14, "a"), row).ok());
  EXPECT_EQ(row.categorical[0], 0xau);
}

TEST(ParseCriteoLine, ToleratesCarriageReturn) {
  CriteoRow row;
  ASSERT_TRUE(ParseCriteoLine(ValidLine() + "\r", row).ok());
  EXPECT_EQ(row.categorical[25], 26u);
}

TEST(ParseCriteoLine, WrongFieldCountIsAnError) {
  CriteoRow row;
  const std::string line = ValidLine();
  absl::Status s = ParseCriteoLine(line.substr(0, line.rfind('\t')), row);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("expected 40 tab-separated fields, found 39"));
  s = ParseCriteoLine(line + "\t", row);
  EXPECT_THAT(s.message(), HasSubstr("found 41"));
  s = ParseCriteoLine("", row);
  EXPECT_THAT(s.message(), HasSubstr("found 1"));
}

TEST(ParseCriteoLine, BadFieldsNameFieldAndByteOffset) {
  CriteoRow row;
  struct Case {
    int field;
    std::string value;
    std::string message;
  };
  const std::vector<Case> cases = {
      {0, "2", "field 1 (label), byte 0: '2' is not a label"},
      {0, "", "field 1 (label), byte 0: '' is not a label"},
      {2, "x1", "field 3 (I2), byte 4: 'x1' is not an integer"},
      {2, "-", "field 3 (I2), byte 4: '-' is not an integer"},
      {2, "1.5", "is not an integer"},
      {2, "99999999999999999999", "out of the 64-bit integer range"},
      {2, "9223372036854775808", "out of the 64-bit integer range"},
      {14, "68fd1e6g", "field 15 (C1)"},
      {14, "68fd1e6g", "is not a hexadecimal id"},
      {14, "68fd1e640", "is longer than 8 hex digits"},
      {14, " 68fd1e6", "is not a hexadecimal id"},
  };
  for (const Case& c : cases) {
    absl::Status s = ParseCriteoLine(WithField(c.field, c.value), row);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.value;
    EXPECT_THAT(s.message(), HasSubstr(c.message)) << c.value;
  }
}

TEST(ParseCriteoLine, OverLongLineIsAnError) {
  CriteoRow row;
  const std::string line = ValidLine() + std::string(5000, '0');
  absl::Status s = ParseCriteoLine(line, row);
  EXPECT_THAT(s.message(), HasSubstr("longer than the limit of 4096"));
  EXPECT_TRUE(ParseCriteoLine(ValidLine(), row, ValidLine().size()).ok());
  EXPECT_FALSE(ParseCriteoLine(ValidLine(), row, ValidLine().size() - 1).ok());
}

TEST(ParseCriteoLine, ErrorMessagesEscapeAndShortenTheField) {
  CriteoRow row;
  absl::Status s = ParseCriteoLine(WithField(3, std::string("\x01\xff") + std::string(100, 'z')), row);
  EXPECT_THAT(s.message(), HasSubstr("\\x01\\xffzz"));
  EXPECT_THAT(s.message(), HasSubstr("...'"));
  EXPECT_LT(s.message().size(), 120u);
}

TEST(DenseTransform, IsLogOnePlusClampedValue) {
  EXPECT_EQ(DenseTransform(0), 0.0f);
  EXPECT_EQ(DenseTransform(-5), 0.0f);
  EXPECT_FLOAT_EQ(DenseTransform(1), static_cast<float>(std::log(2.0)));
  EXPECT_FLOAT_EQ(DenseTransform(1015215), static_cast<float>(std::log(1015216.0)));
}

TEST(FieldName, FollowsCriteoNames) {
  EXPECT_EQ(FieldName(0), "label");
  EXPECT_EQ(FieldName(1), "I1");
  EXPECT_EQ(FieldName(13), "I13");
  EXPECT_EQ(FieldName(14), "C1");
  EXPECT_EQ(FieldName(39), "C26");
}

}  // namespace
}  // namespace cemb::data
