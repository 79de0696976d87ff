#include "data/dataset.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "base/checksum.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/data/test_util.h"

namespace cemb::data {
namespace {

using ::testing::HasSubstr;
using testing::ReadFile;
using testing::TempDir;
using testing::WriteFile;

DatasetSpec SmallSpec(std::vector<uint32_t> hotness = {1, 1, 1}) {
  return DatasetSpec{.num_dense = 3, .table_sizes = {10, 1000, 2}, .hotness = std::move(hotness), .part = Part::kTrain};
}

// The indices of sample i: index[t][k] = (i + k) % size[t], table by table.
std::vector<int32_t> SmallIndices(const DatasetSpec& spec, uint64_t i) {
  std::vector<int32_t> idx;
  for (size_t t = 0; t < spec.table_sizes.size(); ++t) {
    for (uint32_t k = 0; k < spec.hotness[t]; ++k) idx.push_back(int32_t((i + k) % spec.table_sizes[t]));
  }
  return idx;
}

// Writes n samples: label i % 2, dense {i, i + .5, -i}, SmallIndices.
void WriteSmall(const std::string& path, uint64_t n, std::vector<uint32_t> hotness = {1, 1, 1}) {
  const DatasetSpec spec = SmallSpec(std::move(hotness));
  auto w = DatasetWriter::Create(path, spec);
  ASSERT_TRUE(w.ok()) << w.status();
  for (uint64_t i = 0; i < n; ++i) {
    const float dense[3] = {float(i), float(i) + 0.5f, -float(i)};
    ASSERT_TRUE((*w)->Append(float(i % 2), dense, SmallIndices(spec, i)).ok());
  }
  ASSERT_TRUE((*w)->Finish().ok());
}

// The same samples as a version-1 file (one hotness k for every table),
// its bytes made here as that version lays them out.
void WriteSmallVersion1(const std::string& path, uint64_t n, uint32_t k) {
  const DatasetSpec spec = SmallSpec(UniformHotness(3, k));
  const uint32_t header_bytes = 128;  // 64 + 8 * 3, rounded up to 64
  std::string payload;
  for (uint64_t i = 0; i < n; ++i) {
    const float record[4] = {float(i % 2), float(i), float(i) + 0.5f, -float(i)};
    payload.append(reinterpret_cast<const char*>(record), sizeof record);
    const std::vector<int32_t> idx = SmallIndices(spec, i);
    payload.append(reinterpret_cast<const char*>(idx.data()), idx.size() * 4);
  }
  std::string h(header_bytes, '\0');
  auto put = [&](size_t at, auto v) { std::memcpy(h.data() + at, &v, sizeof v); };
  std::memcpy(h.data(), kDatasetMagic, 8);
  put(8, uint32_t{1});
  put(12, header_bytes);
  put(16, uint64_t{n});
  put(24, uint32_t{3});
  put(28, uint32_t{3});
  put(32, k);
  put(36, uint32_t{4 * (1 + 3 + 3 * k)});
  Checksum64 pc;
  pc.Update(payload.data(), payload.size());
  put(40, pc.Digest());
  put(56, uint32_t{1});
  for (uint32_t t = 0; t < 3; ++t) put(64 + 8 * t, spec.table_sizes[t]);
  Checksum64 hc;
  hc.Update(h.data(), h.size());
  put(48, hc.Digest());
  WriteFile(path, h + payload);
}

// Sets the header checksum of a file's bytes to match its header, so that a
// test can change a header field and reach the check of that field.
void Reseal(std::string& bytes) {
  uint32_t header_bytes;
  std::memcpy(&header_bytes, bytes.data() + 12, 4);
  std::memset(bytes.data() + 48, 0, 8);
  Checksum64 c;
  c.Update(bytes.data(), header_bytes);
  const uint64_t digest = c.Digest();
  std::memcpy(bytes.data() + 48, &digest, 8);
}

template <typename T>
void PutAt(std::string& bytes, size_t at, T v) {
  std::memcpy(bytes.data() + at, &v, sizeof v);
}

TEST(Dataset, WrittenSamplesReadBack) {
  TempDir dir;
  const std::string path = dir.File("d.bin");
  WriteSmall(path, 100, {3, 3, 3});
  auto d = Dataset::Open(path);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ((*d)->version(), kDatasetVersion);
  EXPECT_EQ((*d)->num_samples(), 100u);
  EXPECT_EQ((*d)->num_dense(), 3u);
  EXPECT_EQ((*d)->num_tables(), 3u);
  EXPECT_THAT((*d)->hotness(), ::testing::ElementsAre(3, 3, 3));
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

// Each table's bag has its own size: K = {2, 1, 5} reads back table by
// table, the record holds 1 + 3 + 8 words, and the header the list.
TEST(Dataset, PerTableHotnessRoundTrips) {
  TempDir dir;
  const std::string path = dir.File("p.bin");
  WriteSmall(path, 20, {2, 1, 5});
  auto d = Dataset::Open(path);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_THAT((*d)->hotness(), ::testing::ElementsAre(2, 1, 5));
  EXPECT_THAT((*d)->index_offsets(), ::testing::ElementsAre(0, 2, 3, 8));
  EXPECT_EQ((*d)->spec().record_bytes(), 4u * (1 + 3 + 8));
  EXPECT_EQ(std::filesystem::file_size(path), 128u + 20 * 48);
  for (uint64_t i = 0; i < 20; ++i) {
    EXPECT_THAT((*d)->indices(i, 0), ::testing::ElementsAre(int32_t(i % 10), int32_t((i + 1) % 10)));
    EXPECT_THAT((*d)->indices(i, 1), ::testing::ElementsAre(int32_t(i % 1000)));
    EXPECT_THAT((*d)->indices(i, 2), ::testing::ElementsAre(int32_t(i % 2), int32_t((i + 1) % 2), int32_t(i % 2),
                                                            int32_t((i + 1) % 2), int32_t(i % 2)));
    EXPECT_EQ((*d)->indices(i).size(), 8u);
  }
  const std::string bytes = ReadFile(path);
  uint32_t field32, k[3];
  std::memcpy(&field32, bytes.data() + 32, 4);
  std::memcpy(k, bytes.data() + 64 + 8 * 3, 12);
  EXPECT_EQ(field32, 8u);  // the indices per sample
  EXPECT_THAT(k, ::testing::ElementsAre(2, 1, 5));
}

// A version-1 file (uniform hotness, no list in the header) still opens and
// reads as the same samples written as version 2.
TEST(Dataset, Version1FileReadsAsBefore) {
  TempDir dir;
  WriteSmallVersion1(dir.File("v1.bin"), 30, 2);
  WriteSmall(dir.File("v2.bin"), 30, {2, 2, 2});
  auto v1 = Dataset::Open(dir.File("v1.bin"));
  ASSERT_TRUE(v1.ok()) << v1.status();
  auto v2 = Dataset::Open(dir.File("v2.bin"));
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_EQ((*v1)->version(), 1u);
  EXPECT_EQ((*v1)->header_bytes(), 128u);
  EXPECT_EQ((*v1)->part(), Part::kTrain);
  EXPECT_THAT((*v1)->hotness(), ::testing::ElementsAre(2, 2, 2));
  EXPECT_EQ((*v1)->payload_checksum(), (*v2)->payload_checksum());
  for (uint64_t i = 0; i < 30; ++i) {
    EXPECT_EQ((*v1)->label(i), (*v2)->label(i));
    for (uint32_t t = 0; t < 3; ++t) {
      EXPECT_THAT((*v1)->indices(i, t), ::testing::ElementsAreArray((*v2)->indices(i, t)));
    }
  }
}

// Header fields that disagree with one another are named, with their byte.
TEST(DatasetOpen, InconsistentHotnessListIsNamed) {
  TempDir dir;
  const std::string path = dir.File("k.bin");
  WriteSmall(path, 4, {2, 1, 5});
  const std::string good = ReadFile(path);
  auto open_with = [&](auto change) {
    std::string bytes = good;
    change(bytes);
    Reseal(bytes);
    WriteFile(dir.File("bad.bin"), bytes);
    absl::Status s = Dataset::Open(dir.File("bad.bin"), {.verify = Verify::kHeader}).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    return std::string(s.message());
  };
  EXPECT_THAT(open_with([](std::string& b) { PutAt(b, 92, uint32_t{0}); }),
              HasSubstr("bad.bin: corrupt header: table 1 has hotness 0 (byte 92), not in [1, 100000]"));
  EXPECT_THAT(open_with([](std::string& b) { PutAt(b, 96, uint32_t{100001}); }),
              HasSubstr("table 2 has hotness 100001 (byte 96)"));
  EXPECT_THAT(open_with([](std::string& b) { PutAt(b, 96, uint32_t{4}); }),
              HasSubstr("the hotness list (bytes 88..100) sums to 7 indices per sample, but byte 32 says 8"));
  EXPECT_THAT(open_with([](std::string& b) {
                PutAt(b, 96, uint32_t{4});
                PutAt(b, 32, uint32_t{7});
              }),
              HasSubstr("record size 48 (byte 36), expected 44 = 4 * (1 + 3 dense + 7 indices)"));
  EXPECT_THAT(open_with([](std::string& b) { PutAt(b, 12, uint32_t{64}); }),
              HasSubstr("3 tables (byte 28) with a header of 64 bytes (byte 12)"));
}

// A version-1 file whose K and record size disagree is named as well.
TEST(DatasetOpen, Version1RecordSizeMustFollowK) {
  TempDir dir;
  WriteSmallVersion1(dir.File("v1.bin"), 2, 2);
  std::string bytes = ReadFile(dir.File("v1.bin"));
  PutAt(bytes, 32, uint32_t{3});
  Reseal(bytes);
  WriteFile(dir.File("v1.bin"), bytes);
  EXPECT_THAT(Dataset::Open(dir.File("v1.bin")).status().message(),
              HasSubstr("record size 40 (byte 36), expected 52"));
}

TEST(Dataset, CheckHotnessNamesTheKeyAndBothLists) {
  TempDir dir;
  WriteSmall(dir.File("d.bin"), 1, {2, 1, 5});
  auto d = Dataset::Open(dir.File("d.bin"));
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE((*d)->CheckHotness(std::vector<uint32_t>{2, 1, 5}, "data.hotness").ok());
  absl::Status s = (*d)->CheckHotness(std::vector<uint32_t>{2, 1, 4}, "data.hotness");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("d.bin: table 2 has hotness 5 in the dataset but 4 in data.hotness "
                                     "(dataset: 2,1,5; data.hotness: 2,1,4)"));
  EXPECT_THAT((*d)->CheckHotness(std::vector<uint32_t>{1}, "data.hotness").message(),
              HasSubstr("table 0 has hotness 2 in the dataset but 1 in data.hotness"));
  EXPECT_THAT((*d)->CheckHotness(std::vector<uint32_t>{1, 1}, "data.hotness").message(),
              HasSubstr("data.hotness: 2 entries for 3 tables"));
}

TEST(Hotness, ExpandTakesOnePerTableOrOneForAll) {
  EXPECT_THAT(*ExpandHotness(std::vector<uint32_t>{4}, 3, "k"), ::testing::ElementsAre(4, 4, 4));
  EXPECT_THAT(*ExpandHotness(std::vector<uint32_t>{3, 2, 1}, 3, "k"), ::testing::ElementsAre(3, 2, 1));
  EXPECT_THAT(ExpandHotness(std::vector<uint32_t>{3, 2}, 3, "x.yaml: data.hotness").status().message(),
              HasSubstr("x.yaml: data.hotness: 2 entries for 3 tables"));
  EXPECT_THAT(ExpandHotness(std::vector<uint32_t>{3, 0, 1}, 3, "k").status().message(),
              HasSubstr("k: 0 (table 1) not in [1, 100000]"));
  EXPECT_FALSE(ExpandHotness(std::vector<uint32_t>{}, 3, "k").ok());
  EXPECT_EQ(HotnessText(std::vector<uint32_t>{2, 2}), "2");
  EXPECT_EQ(HotnessText(std::vector<uint32_t>{3, 2, 1}), "3,2,1");
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
  spec = SmallSpec({1, 0, 1});
  EXPECT_THAT(DatasetWriter::Create(dir.File("s.bin"), spec).status().message(),
              HasSubstr("table 1 has hotness 0, not in [1, 100000]"));
  spec = SmallSpec({1, 1});
  EXPECT_THAT(DatasetWriter::Create(dir.File("s.bin"), spec).status().message(),
              HasSubstr("2 hotness values for 3 tables"));
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
  for (size_t at : {16, 24, 32, 64 + 8, 56, 64 + 24 + 4}) {
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
  EXPECT_THAT(s.message(), HasSubstr("version 9, this build reads versions 1 and 2"));
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
