#include "base/npy.h"

#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace cemb {
namespace {

using ::testing::HasSubstr;

class NpyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/npy_test_" + std::to_string(::getpid());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  std::string ReadAll(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  void WriteAll(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary) << bytes;
  }
  std::string dir_;
};

// What numpy 1.24 writes for np.save(f, np.arange(6, dtype='<f4').reshape(2, 3)).
std::string NumpyImage() {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  header.append(128 - 10 - header.size() - 1, ' ');
  header += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  out += header;
  for (int i = 0; i < 6; ++i) {
    const float f = static_cast<float>(i);
    out.append(reinterpret_cast<const char*>(&f), 4);
  }
  return out;
}

TEST_F(NpyTest, ReadsWhatNumpyWrites) {
  absl::StatusOr<NpyArray<float>> a = ParseNpy<float>(NumpyImage(), "x.npy");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a->data, (std::vector<float>{0, 1, 2, 3, 4, 5}));
}

TEST_F(NpyTest, FloatRoundTripWritesANumpyHeader) {
  const std::vector<float> data = {1.5f, -2.f, 3.25f, 0.f, 1e-30f, 7.f};
  ASSERT_TRUE(WriteNpy<float>(Path("w.npy"), data, {3, 2}).ok());
  const std::string bytes = ReadAll(Path("w.npy"));
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  EXPECT_THAT(bytes, HasSubstr("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }"));
  EXPECT_EQ((bytes.size() - data.size() * 4) % 64, 0u);  // data 64-byte aligned
  EXPECT_FALSE(std::filesystem::exists(Path("w.npy.tmp")));
  absl::StatusOr<NpyArray<float>> a = ReadNpy<float>(Path("w.npy"));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->shape, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(a->data, data);
}

TEST_F(NpyTest, IntegerOneDimensionalAndEmptyRoundTrips) {
  const std::vector<int32_t> i32 = {1, -2, 2147483647};
  ASSERT_TRUE(WriteNpy<int32_t>(Path("i.npy"), i32, {3}).ok());
  EXPECT_THAT(ReadAll(Path("i.npy")), HasSubstr("'shape': (3,)"));
  absl::StatusOr<NpyArray<int32_t>> a = ReadNpy<int32_t>(Path("i.npy"));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->data, i32);
  const std::vector<int64_t> i64 = {int64_t{1} << 40, -5};
  ASSERT_TRUE(WriteNpy<int64_t>(Path("l.npy"), i64, {1, 2}).ok());
  absl::StatusOr<NpyArray<int64_t>> b = ReadNpy<int64_t>(Path("l.npy"));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->data, i64);
  ASSERT_TRUE(WriteNpy<float>(Path("e.npy"), std::span<const float>(), {0, 4}).ok());
  absl::StatusOr<NpyArray<float>> e = ReadNpy<float>(Path("e.npy"));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->shape, (std::vector<int64_t>{0, 4}));
  EXPECT_TRUE(e->data.empty());
  const float scalar = 2.5f;
  ASSERT_TRUE(WriteNpy<float>(Path("s.npy"), std::span<const float>(&scalar, 1), {}).ok());
  absl::StatusOr<NpyArray<float>> s = ReadNpy<float>(Path("s.npy"));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->shape.empty());
  EXPECT_EQ(s->data, std::vector<float>{2.5f});
}

TEST_F(NpyTest, WriteRejectsAShapeThatDoesNotMatchTheData) {
  const std::vector<float> data(5);
  EXPECT_EQ(WriteNpy<float>(Path("bad.npy"), data, {2, 3}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(Path("bad.npy")));
}

TEST_F(NpyTest, MissingFileIsNotFound) {
  absl::StatusOr<NpyArray<float>> a = ReadNpy<float>(Path("nope.npy"));
  EXPECT_EQ(a.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(a.status().message(), HasSubstr("nope.npy"));
}

TEST_F(NpyTest, EveryTruncationIsAnError) {
  const std::string image = NumpyImage();
  for (size_t len = 0; len < image.size(); ++len) {
    absl::StatusOr<NpyArray<float>> a = ParseNpy<float>(image.substr(0, len), "t.npy");
    ASSERT_FALSE(a.ok()) << "length " << len;
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument) << len;
    EXPECT_THAT(a.status().message(), HasSubstr("t.npy")) << len;
  }
  WriteAll(Path("trunc.npy"), image.substr(0, image.size() - 3));
  absl::StatusOr<NpyArray<float>> a = ReadNpy<float>(Path("trunc.npy"));
  EXPECT_THAT(a.status().message(), HasSubstr("needs 24 data bytes, the file has 21 (truncated)"));
}

TEST_F(NpyTest, BadFilesAreErrors) {
  const std::string good = NumpyImage();
  auto parse = [](const std::string& bytes) { return ParseNpy<float>(bytes, "b.npy").status(); };
  EXPECT_THAT(parse("PK\x03\x04 this is a zip").message(), HasSubstr("magic"));
  std::string v9 = good;
  v9[6] = 9;
  EXPECT_THAT(parse(v9).message(), HasSubstr("unsupported format version 9"));
  std::string extra = good + "xx";
  EXPECT_THAT(parse(extra).message(), HasSubstr("the file has 26"));
  std::string f8 = good;
  f8.replace(f8.find("<f4"), 3, "<f8");
  EXPECT_THAT(parse(f8).message(), HasSubstr("dtype '<f8' where '<f4' was expected"));
  std::string big = good;
  big.replace(big.find("<f4"), 3, ">f4");
  EXPECT_THAT(parse(big).message(), HasSubstr("dtype '>f4'"));
  std::string fortran = good;
  fortran.replace(fortran.find("False"), 5, "True ");
  EXPECT_THAT(parse(fortran).message(), HasSubstr("fortran_order True"));
  std::string bad_shape = good;
  bad_shape.replace(bad_shape.find("(2, 3)"), 6, "(2, x)");
  EXPECT_THAT(parse(bad_shape).message(), HasSubstr("bad shape"));
  std::string huge = good;
  huge.replace(huge.find("(2, 3)"), 6, "(99999999999999, 99999999999999)");
  EXPECT_FALSE(parse(huge).ok());
  std::string no_dict = good;
  no_dict.replace(no_dict.find("'shape'"), 7, "'shapf'");
  EXPECT_THAT(parse(no_dict).message(), HasSubstr("header is not a dict"));
  // Reading as the wrong element type names both types.
  EXPECT_THAT(ParseNpy<int32_t>(good, "b.npy").status().message(), HasSubstr("where '<i4' was expected"));
}

// A .npy image with an arbitrary descr and raw data bytes.
std::string Image(const std::string& descr, const std::string& shape, const std::string& data) {
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  header.append(64 - (10 + header.size() + 1) % 64, ' ');
  header += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  return out + header + data;
}

// bfloat16 bits of 1.0, -2.5 and 0.15625 (exact in bfloat16).
std::string Bf16Bytes() {
  const uint16_t bits[] = {0x3f80, 0xc020, 0x3e20};
  return std::string(reinterpret_cast<const char*>(bits), sizeof bits);
}

TEST_F(NpyTest, ReaderReadsFloat32InPieces) {
  const std::vector<float> data = {1.5f, -2.f, 3.25f, 0.f, 1e-30f, 7.f};
  ASSERT_TRUE(WriteNpy<float>(Path("w.npy"), data, {3, 2}).ok());
  absl::StatusOr<NpyReader> r = NpyReader::Open(Path("w.npy"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->dtype(), NpyDtype::kFloat32);
  EXPECT_EQ(r->shape(), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(r->shape_text(), "(3, 2)");
  std::vector<float> a(4), b(2);
  ASSERT_TRUE(r->ReadFloats(a).ok());
  ASSERT_TRUE(r->ReadFloats(b).ok());
  EXPECT_EQ(a, std::vector<float>(data.begin(), data.begin() + 4));
  EXPECT_EQ(b, std::vector<float>(data.begin() + 4, data.end()));
  std::vector<float> more(1);
  absl::Status past = r->ReadFloats(more);
  EXPECT_EQ(past.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(past.message(), HasSubstr("w.npy"));
}

// ml_dtypes' bfloat16 saved by np.save says '<V2'; a header written from
// str(dtype) says 'bfloat16'. Both read as bfloat16, widened exactly.
TEST_F(NpyTest, ReaderReadsBfloat16AsNumpyAndMlDtypesWriteIt) {
  for (const std::string descr : {"<V2", "|V2", "bfloat16"}) {
    SCOPED_TRACE(descr);
    WriteAll(Path("b.npy"), Image(descr, "(3,)", Bf16Bytes()));
    absl::StatusOr<NpyReader> r = NpyReader::Open(Path("b.npy"));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->dtype(), NpyDtype::kBfloat16);
    std::vector<float> out(3);
    ASSERT_TRUE(r->ReadFloats(out).ok());
    EXPECT_EQ(out, (std::vector<float>{1.0f, -2.5f, 0.15625f}));
  }
}

TEST_F(NpyTest, ReaderRefusesATruncatedFileAtOpenAndOtherDtypesByName) {
  WriteAll(Path("t.npy"), Image("<V2", "(4,)", Bf16Bytes()));  // 6 of 8 bytes
  absl::StatusOr<NpyReader> t = NpyReader::Open(Path("t.npy"));
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("t.npy: not a valid .npy file: shape (4,) needs 8 data bytes, the file has 6 (truncated)"));
  WriteAll(Path("f8.npy"), Image("<f8", "(1,)", std::string(8, '\0')));
  absl::StatusOr<NpyReader> f8 = NpyReader::Open(Path("f8.npy"));
  ASSERT_FALSE(f8.ok());
  EXPECT_THAT(f8.status().message(), HasSubstr("f8.npy: dtype '<f8' is not float32"));
  const std::vector<int32_t> ints = {1, 2};
  ASSERT_TRUE(WriteNpy<int32_t>(Path("i.npy"), ints, {2}).ok());
  absl::StatusOr<NpyReader> i = NpyReader::Open(Path("i.npy"));
  ASSERT_TRUE(i.ok()) << i.status();
  std::vector<float> out(2);
  EXPECT_THAT(i->ReadFloats(out).message(), HasSubstr("i.npy: dtype int32 where float32 or bfloat16 was expected"));
  WriteAll(Path("short.npy"), "\x93NUMPY\x01\x00\x40");
  EXPECT_FALSE(NpyReader::Open(Path("short.npy")).ok());
  EXPECT_EQ(NpyReader::Open(Path("nope.npy")).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(NpyTest, WriterStreamsWhatReadNpyReadsAndPublishesOnlyWhole) {
  const int64_t shape[] = {3, 2};
  absl::StatusOr<NpyWriter> w = NpyWriter::Create(Path("s.npy"), shape);
  ASSERT_TRUE(w.ok()) << w.status();
  const std::vector<float> a = {1, 2, 3, 4}, b = {5, 6};
  ASSERT_TRUE(w->Append(a).ok());
  ASSERT_TRUE(w->Append(b).ok());
  EXPECT_EQ(w->Append(b).code(), absl::StatusCode::kOutOfRange);
  ASSERT_TRUE(w->Commit().ok());
  const std::vector<float> all = {1, 2, 3, 4, 5, 6};
  ASSERT_TRUE(WriteNpy<float>(Path("whole.npy"), all, {3, 2}).ok());
  EXPECT_EQ(ReadAll(Path("s.npy")), ReadAll(Path("whole.npy")));
  // Fewer values than the shape holds: refused, nothing published.
  absl::StatusOr<NpyWriter> short_writer = NpyWriter::Create(Path("short.npy"), shape);
  ASSERT_TRUE(short_writer.ok());
  ASSERT_TRUE(short_writer->Append(a).ok());
  EXPECT_EQ(short_writer->Commit().code(), absl::StatusCode::kFailedPrecondition);
  short_writer = absl::InternalError("dropped");  // destroys the writer: the .tmp goes
  EXPECT_FALSE(std::filesystem::exists(Path("short.npy")));
  EXPECT_FALSE(std::filesystem::exists(Path("short.npy.tmp")));
}

}  // namespace
}  // namespace cemb
