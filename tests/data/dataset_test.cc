#include "data/dataset.h"

#include <filesystem>
#include <fstream>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/data/test_util.h"

namespace cemb::data {
namespace {

using ::testing::HasSubstr;
using testing::ReadFile;
using testing::TempDir;
using testing::WriteFile;

DatasetSpec SmallSpec(uint32_t hotness = 1) {
  return DatasetSpec{.num_dense = 3, .table_sizes = {10, 1000, 2}, .hotness = hotness, .part = Part::kTrain};
}

// Writes n samples: label i % 2, dense {i, i + .5, -i}, index[t][k] = (i + k) % size[t].
void WriteSmall(const std::string& path, uint64_t n, uint32_t hotness = 1) {
  const DatasetSpec spec = SmallSpec(hotness);
  auto w = DatasetWriter::Create(path, spec);
  ASSERT_TRUE(w.ok()) << w.status();
  for (uint64_t i = 0; i < n; ++i) {
    const float dense[3] = {float(i), float(i) + 0.5f, -float(i)};
    std::vector<int32_t> idx;
    for (uint64_t size : spec.table_sizes) {
      for (uint32_t k = 0; k < hotness; ++k) idx.push_back(int32_t((i + k) % size));
    }
    ASSERT_TRUE((*w)->Append(float(i % 2), dense, idx).ok());
  }
  ASSERT_TRUE((*w)->Finish().ok());
}

TEST(Dataset, WrittenSamplesReadBack) {
  TempDir dir;
  const std::string path = dir.File("d.bin");
  WriteSmall(path, 100, /*hotness=*/3);
  auto d = Dataset::Open(path);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ((*d)->num_samples(), 100u);
  EXPECT_EQ((*d)->num_dense(), 3u);
  EXPECT_EQ((*d)->num_tables(), 3u);
  EXPECT_EQ((*d)->hotness(), 3u);
  EXPECT_EQ((*d)->part(), Part::kTrain);
  EXPECT_THAT((*d)->table_sizes(), ::testing::ElementsAre(10, 1000, 2));
  for (uint64_t i = 0; i < 100; ++i) {
    EXPECT_EQ((*d)->label(i), float(i % 2));
    EXPECT_THAT((*d)->dense(i), ::testing::ElementsAre(float(i), float(i) + 0.5f, -float(i)));
    EXPECT_THAT((*d)->indices(i, 1),
                ::testing::ElementsAre(int32_t(i % 1000), int32_t((i + 1) % 1000), int32_t((i + 2) % 1000)));
    EXPECT_EQ((*d)->indices(i, 2)[0], int32_t(i % 2));
  }
}

TEST(Dataset, FileSizeFollowsTheSpec) {
  TempDir dir;
  WriteSmall(dir.File("d.bin"), 7);
  const DatasetSpec spec = SmallSpec();
  EXPECT_EQ(spec.header_bytes(), 128u);  // 64 + 3 * 8, rounded up to 64
  EXPECT_EQ(spec.record_bytes(), 4u * (1 + 3 + 3));
  EXPECT_EQ(std::filesystem::file_size(dir.File("d.bin")), 128u + 7 * 28);
  const std::string bytes = ReadFile(dir.File("d.bin"));
  EXPECT_EQ(bytes.substr(0, 8), "CEMBDSET");
}

TEST(Dataset, SameSamplesGiveSameBytes) {
  TempDir dir;
  WriteSmall(dir.File("a.bin"), 50);
  WriteSmall(dir.File("b.bin"), 50);
  EXPECT_EQ(ReadFile(dir.File("a.bin")), ReadFile(dir.File("b.bin")));
}

TEST(Dataset, EmptyDatasetIsValid) {
  TempDir dir;
  WriteSmall(dir.File("e.bin"), 0);
  auto d = Dataset::Open(dir.File("e.bin"));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ((*d)->num_samples(), 0u);
}

TEST(DatasetWriter, UnfinishedWriterLeavesNoFile) {
  TempDir dir;
  {
    auto w = DatasetWriter::Create(dir.File("u.bin"), SmallSpec());
    ASSERT_TRUE(w.ok());
    const float dense[3] = {};
    const int32_t idx[3] = {};
    ASSERT_TRUE((*w)->Append(0, dense, idx).ok());
  }
  EXPECT_FALSE(std::filesystem::exists(dir.File("u.bin")));
  EXPECT_FALSE(std::filesystem::exists(dir.File("u.bin.tmp")));
}

TEST(DatasetWriter, RejectsIndexOutsideItsTable) {
  TempDir dir;
  auto w = DatasetWriter::Create(dir.File("x.bin"), SmallSpec());
  ASSERT_TRUE(w.ok());
  const float dense[3] = {};
  const int32_t bad[3] = {0, 1000, 0};
  absl::Status s = (*w)->Append(0, dense, bad);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("sample 0, table 1, index 0: row 1000 not in [0, 1000)"));
  const int32_t negative[3] = {-1, 0, 0};
  EXPECT_FALSE((*w)->Append(0, dense, negative).ok());
  const int32_t too_few[2] = {0, 0};
  EXPECT_FALSE((*w)->Append(0, dense, too_few).ok());
}

TEST(DatasetWriter, RejectsBadSpecs) {
  TempDir dir;
  DatasetSpec spec = SmallSpec();
  spec.table_sizes.clear();
  EXPECT_FALSE(DatasetWriter::Create(dir.File("s.bin"), spec).ok());
  spec = SmallSpec(0);
  EXPECT_FALSE(DatasetWriter::Create(dir.File("s.bin"), spec).ok());
  spec = SmallSpec();
  spec.table_sizes[1] = (uint64_t{1} << 31) + 1;
  EXPECT_FALSE(DatasetWriter::Create(dir.File("s.bin"), spec).ok());
}

TEST(DatasetOpen, MissingFileIsNotFound) {
  EXPECT_EQ(Dataset::Open("/nonexistent/d.bin").status().code(), absl::StatusCode::kNotFound);
}

TEST(DatasetOpen, TruncatedFileNamesExpectedAndActualSizes) {
  TempDir dir;
  const std::string path = dir.File("t.bin");
  WriteSmall(path, 10);
  std::filesystem::resize_file(path, 128 + 5 * 28 + 3);
  absl::Status s = Dataset::Open(path, {.verify = Verify::kHeader}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("t.bin: file is 271 bytes but its header promises 10 samples of 28 bytes, 408 bytes in all (truncated at sample 5)"));
  std::filesystem::resize_file(path, 20);
  EXPECT_THAT(Dataset::Open(path).status().message(), HasSubstr("shorter than the 64-byte header"));
}

TEST(DatasetOpen, FlippedPayloadByteIsAChecksumMismatch) {
  TempDir dir;
  const std::string path = dir.File("c.bin");
  WriteSmall(path, 10);
  std::string bytes = ReadFile(path);
  bytes[128 + 4 * 28 + 5] ^= 0x10;
  WriteFile(path, bytes);
  EXPECT_TRUE(Dataset::Open(path, {.verify = Verify::kHeader}).ok());  // header only: not seen
  absl::Status s = Dataset::Open(path).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("c.bin: payload checksum mismatch"));
}

TEST(DatasetOpen, FlippedHeaderByteIsDetected) {
  TempDir dir;
  const std::string path = dir.File("h.bin");
  WriteSmall(path, 10);
  for (size_t at : {16, 24, 32, 64 + 8, 56}) {
    std::string bytes = ReadFile(path);
    bytes[at] ^= 0x01;
    WriteFile(dir.File("h2.bin"), bytes);
    absl::Status s = Dataset::Open(dir.File("h2.bin"), {.verify = Verify::kHeader}).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << "byte " << at;
    EXPECT_THAT(s.message(), HasSubstr("header checksum mismatch")) << "byte " << at;
  }
}

TEST(DatasetOpen, WrongMagicAndVersionAreNamed) {
  TempDir dir;
  const std::string path = dir.File("m.bin");
  WriteSmall(path, 1);
  std::string bytes = ReadFile(path);
  bytes[0] = 'X';
  WriteFile(path, bytes);
  EXPECT_THAT(Dataset::Open(path).status().message(), HasSubstr("not a dataset file"));
  bytes[0] = 'C';
  bytes[8] = 9;
  WriteFile(path, bytes);
  absl::Status s = Dataset::Open(path).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("version 9"));
}

TEST(Dataset, CheckTableSizesNamesTheFirstDifferentTable) {
  TempDir dir;
  WriteSmall(dir.File("d.bin"), 1);
  auto d = Dataset::Open(dir.File("d.bin"));
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE((*d)->CheckTableSizes(std::vector<uint64_t>{10, 1000, 2}).ok());
  absl::Status s = (*d)->CheckTableSizes(std::vector<uint64_t>{10, 999, 2});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("d.bin: table 1 has 1000 rows in the dataset but 999 in the config"));
  EXPECT_THAT((*d)->CheckTableSizes(std::vector<uint64_t>{10}).message(),
              HasSubstr("has 3 tables but the config has 1"));
}

}  // namespace
}  // namespace cemb::data
