#include "ssd/served_snapshot.h"

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "embedding/cpu.h"
#include "embedding/row_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ssd/internal/resolved_rows.h"
#include "ssd/internal/snapshot_format.h"
#include "ssd/snapshot_table.h"
#include "tests/ssd/snapshot_test_util.h"
#include "tests/ssd/test_util.h"

namespace cemb {
namespace {

using ::testing::HasSubstr;
using ssd_internal::SnapshotHeader;

constexpr float kSentinel = -12345.0f;

// A directory of its own on the disk file system (O_DIRECT works there).
std::string FreshDir(const std::string& name) {
  const std::string dir = absl::StrCat(testing::DiskDir(), "/served_", name, "_", ::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// n x d fp32 rows of several kinds (a row's kind from its number): uniform
// around zero, negative only, large, tiny (fp16 subnormals), constant (an
// int8 row of range 0), and values of a few steps.
std::vector<float> SourceRows(int64_t n, int64_t d, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> rows(static_cast<size_t>(n * d));
  for (int64_t r = 0; r < n; ++r) {
    const float constant = u(rng);
    for (int64_t c = 0; c < d; ++c) {
      float& x = rows[static_cast<size_t>(r * d + c)];
      switch (r % 7) {
        case 0:
        case 1: x = u(rng); break;
        case 2: x = -0.5f - 4.0f * std::abs(u(rng)); break;
        case 3: x = 300.0f * u(rng); break;
        case 4: x = 1e-6f * u(rng); break;
        case 5: x = constant; break;
        case 6: x = static_cast<float>(static_cast<int>(rng() % 9) - 4) * 0.125f; break;
      }
    }
  }
  return rows;
}

// What the file must hold: the rows, each through EncodeRow, and each of
// those decoded again (DecodeRow).
struct Converted {
  int64_t n = 0, d = 0, row_bytes = 0;
  RowFormat format = RowFormat::kFp32;
  std::vector<float> source;
  std::vector<std::byte> encoded;  // n x row_bytes
  std::vector<float> decoded;      // n x d
  const std::byte* row(int64_t r) const { return encoded.data() + r * row_bytes; }
  const float* values(int64_t r) const { return decoded.data() + r * d; }
};

Converted Convert(RowFormat format, int64_t n, int64_t d, uint64_t seed) {
  Converted c{n, d, RowFormatBytes(format, d), format, SourceRows(n, d, seed), {}, {}};
  c.encoded.resize(static_cast<size_t>(n * c.row_bytes));
  c.decoded.resize(static_cast<size_t>(n * d));
  for (int64_t r = 0; r < n; ++r) {
    EncodeRow(format, std::span<const float>(c.source.data() + r * d, static_cast<size_t>(d)),
              c.encoded.data() + r * c.row_bytes);
    DecodeRow(format, c.row(r), std::span<float>(c.decoded.data() + r * d, static_cast<size_t>(d)));
  }
  return c;
}

absl::Status Write(const std::string& path, const std::string& name, const Converted& c) {
  return WriteServedSnapshot(path, {.name = name, .nvectors = c.n, .dim = c.d, .format = c.format},
                             [&](int64_t first, std::span<float> rows) {
                               EXPECT_EQ(rows.size() % static_cast<size_t>(c.d), 0u);
                               EXPECT_LE(first * c.d + static_cast<int64_t>(rows.size()), c.n * c.d);
                               std::memcpy(rows.data(), c.source.data() + first * c.d, rows.size() * sizeof(float));
                               return absl::OkStatus();
                             });
}

// A slot: a power of two up to a cache line, else the row rounded to 8
// bytes (ssd/snapshot_table.cc).
int64_t SlotBytesOf(int64_t row_bytes) {
  return row_bytes <= 64 ? static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(row_bytes))) : (row_bytes + 7) / 8 * 8;
}

// The file itself, read back with the layout computed here: its header, the
// ids 0 .. n-1, each row whole in one 4 KiB block at the place the packing
// gives it, equal byte for byte to EncodeRow's; the padding zeros.
void ExpectFileLayout(const std::string& path, const Converted& c) {
  const std::string bytes = ReadFile(path);
  ASSERT_GE(bytes.size(), sizeof(SnapshotHeader));
  SnapshotHeader h;
  std::memcpy(&h, bytes.data(), sizeof h);
  EXPECT_EQ(std::string(h.magic, 8), "CEMBSSDS");
  EXPECT_EQ(h.version, 2u);
  EXPECT_EQ(h.header_bytes, sizeof h);
  EXPECT_EQ(h.nvectors, c.n);
  EXPECT_EQ(h.row_bytes, c.row_bytes);
  EXPECT_EQ(h.row_format, static_cast<uint32_t>(c.format));
  EXPECT_EQ(h.rows, c.n);
  EXPECT_EQ(h.ids_offset, 4096u);
  const uint64_t data_offset = (4096 + 4 * static_cast<uint64_t>(c.n) + 4095) / 4096 * 4096;
  ASSERT_EQ(h.data_offset, data_offset);
  const auto rb = static_cast<uint64_t>(c.row_bytes);
  const uint64_t per_block = 4096 / rb;
  const uint64_t blocks = (static_cast<uint64_t>(c.n) + per_block - 1) / per_block;
  ASSERT_EQ(bytes.size(), data_offset + blocks * 4096);
  const ssd_internal::SnapshotRows layout = ssd_internal::SnapshotRowsOf(h.row_format, h.data_offset, rb);
  EXPECT_EQ(layout.per_block, per_block);
  EXPECT_EQ(layout.end(static_cast<uint64_t>(c.n)), bytes.size());
  for (int64_t r = 0; r < c.n; ++r) {
    uint32_t id;
    std::memcpy(&id, bytes.data() + 4096 + 4 * r, 4);
    ASSERT_EQ(id, static_cast<uint32_t>(r));
  }
  std::vector<bool> used(bytes.size() - data_offset, false);
  for (int64_t r = 0; r < c.n; ++r) {
    const auto p = static_cast<uint64_t>(r);
    const uint64_t at = data_offset + p / per_block * 4096 + p % per_block * rb;
    ASSERT_EQ(layout.offset(p), at) << "row " << r;
    ASSERT_EQ(at / 4096, (at + rb - 1) / 4096) << "row " << r << " crosses a 4 KiB block";
    ASSERT_EQ(std::memcmp(bytes.data() + at, c.row(r), rb), 0) << "row " << r;
    std::fill(used.begin() + static_cast<int64_t>(at - data_offset),
              used.begin() + static_cast<int64_t>(at - data_offset + rb), true);
  }
  for (size_t i = 0; i < used.size(); ++i) {
    if (!used[i]) {
      ASSERT_EQ(bytes[data_offset + i], '\0') << "padding byte at offset " << data_offset + i;
    }
  }
  const uint64_t pads = bytes.size() - data_offset - static_cast<uint64_t>(c.n) * rb;
  EXPECT_EQ(pads, blocks * (4096 - per_block * rb) + (blocks * per_block - static_cast<uint64_t>(c.n)) * rb);
}

// Writes 5000 rows of `d` features in T's format, then checks the file, the
// rows ServedTable<T> loads and those SnapshotTable<T, D> serves through a
// pool of 100 slots (evicting and reading all along).
template <RowElement T, int64_t D>
void ExpectWrittenRowsServedAsEncoded(int64_t d) {
  constexpr RowFormat kFormat = kRowFormatOf<T>;
  constexpr int64_t kN = 5000;
  constexpr uint64_t kSeed = 31;
  SCOPED_TRACE(absl::StrCat(RowFormatName(kFormat), ", dim ", d, D == kDynamic ? " (dynamic)" : " (static)",
                            ", seed ", kSeed));
  const Converted c = Convert(kFormat, kN, d, kSeed + static_cast<uint64_t>(d));
  const std::string path = FreshDir(absl::StrCat("rows_", RowFormatName(kFormat), "_", d)) + "/t.ssd";
  ASSERT_TRUE(Write(path, "t", c).ok());
  ExpectFileLayout(path, c);

  auto served = ServedTable<T>::Load(path, {.name = "t", .nvectors = kN, .featuresize = d});
  ASSERT_TRUE(served.ok()) << served.status();
  EXPECT_EQ(served->featuresize(), d);
  EXPECT_EQ(served->nvectors(), kN);
  const int64_t per_block = 4096 / c.row_bytes;
  EXPECT_EQ(static_cast<int64_t>(served->bytes()), (kN + per_block - 1) / per_block * 4096);
  std::vector<float> values(static_cast<size_t>(d));
  for (int64_t r = 0; r < kN; ++r) {
    const auto* p = reinterpret_cast<const std::byte*>(served->rowpointer(r));
    ASSERT_EQ(std::memcmp(p, c.row(r), static_cast<size_t>(c.row_bytes)), 0) << "row " << r;
    DecodeRow(kFormat, p, values);
    ASSERT_EQ(std::memcmp(values.data(), c.values(r), static_cast<size_t>(d) * 4), 0) << "row " << r;
  }

  auto t = SnapshotTable<T, D>::Open({.name = "t", .nvectors = kN, .featuresize = d},
                                     {.path = path, .capacity_bytes = 100 * SlotBytesOf(c.row_bytes)});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->capacity_rows(), 100);
  EXPECT_EQ(static_cast<int64_t>(t->slot_bytes()), SlotBytesOf(c.row_bytes));
  EXPECT_EQ(t->snapshot_rows(), kN);
  EXPECT_TRUE(t->direct());
  std::mt19937_64 rng(kSeed);
  std::vector<int64_t> order(static_cast<size_t>(kN));
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  std::shuffle(order.begin(), order.end(), rng);
  SnapshotPins pins;
  for (size_t at = 0; at < order.size(); at += 30) {
    std::vector<int64_t> rows(order.begin() + static_cast<int64_t>(at),
                              order.begin() + static_cast<int64_t>(std::min(order.size(), at + 30)));
    for (int k = 0; k < 7; ++k) rows.push_back(order[rng() % order.size()]);  // repeats, hits
    std::vector<const T*> out(rows.size(), nullptr);
    absl::Status s = t->Resolve(rows, &pins, out);
    ASSERT_TRUE(s.ok()) << s;
    for (size_t i = 0; i < rows.size(); ++i) {
      ASSERT_EQ(std::memcmp(out[i], c.row(rows[i]), static_cast<size_t>(c.row_bytes)), 0) << "row " << rows[i];
    }
    t->Release(&pins);
  }
  const SnapshotStats s = t->stats();
  EXPECT_GT(s.evictions, 0);
  EXPECT_GE(s.rows_read, kN);  // every row came from the file
  EXPECT_EQ(s.lazy_rows, 0);
  EXPECT_GT(s.hits, 0);
  EXPECT_EQ(s.failed_reads, 0);
  EXPECT_EQ(s.io.bytes_read % 4096, 0);
}

template <int64_t D>
void ExpectEveryFormat(int64_t d) {
  ExpectWrittenRowsServedAsEncoded<float, D>(d);
  ExpectWrittenRowsServedAsEncoded<bfloat16, D>(d);
  ExpectWrittenRowsServedAsEncoded<float16, D>(d);
  ExpectWrittenRowsServedAsEncoded<int8_rowwise, D>(d);
}

TEST(ServedSnapshot, RowsArePackedInBlocksAndServedAsEncodeRowWroteThem) {
  ExpectEveryFormat<16>(16);
  ExpectEveryFormat<64>(64);
  ExpectEveryFormat<kDynamic>(24);   // not a specialised size
  ExpectEveryFormat<kDynamic>(100);  // int8: 108 bytes, 37 a block
  ExpectEveryFormat<kDynamic>(64);   // a specialised size through the dynamic table
}

TEST(ServedSnapshot, ARowOfAWholeBlockIsOneRowABlock) {
  for (auto [format, d] : {std::pair{RowFormat::kFp32, int64_t{1024}}, std::pair{RowFormat::kInt8, int64_t{4088}},
                           std::pair{RowFormat::kFp16, int64_t{2048}}}) {
    SCOPED_TRACE(RowFormatName(format));
    const Converted c = Convert(format, 7, d, 5);
    ASSERT_EQ(c.row_bytes, 4096);
    const std::string path = FreshDir(absl::StrCat("whole_", RowFormatName(format))) + "/t.ssd";
    ASSERT_TRUE(Write(path, "t", c).ok());
    ExpectFileLayout(path, c);
    WithRowElement(format, [&]<typename T>() {
      auto served = ServedTable<T>::Load(path, {.name = "t", .nvectors = 7, .featuresize = d});
      ASSERT_TRUE(served.ok()) << served.status();
      for (int64_t r = 0; r < 7; ++r) ASSERT_EQ(std::memcmp(served->rowpointer(r), c.row(r), 4096), 0);
      auto t = SnapshotTable<T>::Open({.name = "t", .nvectors = 7, .featuresize = d},
                                      {.path = path, .capacity_bytes = 2 * 4096});
      ASSERT_TRUE(t.ok()) << t.status();
      SnapshotPins pins;
      for (int64_t r : {6, 0, 3, 5, 1}) {
        const int64_t rows[] = {r};
        const T* out[1] = {nullptr};
        ASSERT_TRUE(t->Resolve(rows, &pins, out).ok());
        ASSERT_EQ(std::memcmp(out[0], c.row(r), 4096), 0) << "row " << r;
        t->Release(&pins);
      }
      EXPECT_GT(t->stats().evictions, 0);
    });
  }
}

// --- pooled lookups of converted rows ----------------------------------------

// An obviously correct sum: each column in index order, fp32.
void PlainPooled(std::span<const float* const> rows, std::span<const int64_t> offsets, int64_t d, Pooling pooling,
                 float* out, int64_t ld) {
  for (size_t b = 0; b + 1 < offsets.size(); ++b) {
    float* o = out + static_cast<int64_t>(b) * ld;
    for (int64_t c = 0; c < d; ++c) o[c] = 0.0f;
    for (int64_t j = offsets[b]; j < offsets[b + 1]; ++j) {
      for (int64_t c = 0; c < d; ++c) o[c] += rows[static_cast<size_t>(j)][c];
    }
    if (pooling == Pooling::kMean && offsets[b + 1] > offsets[b]) {
      const float s = 1.0f / static_cast<float>(offsets[b + 1] - offsets[b]);
      for (int64_t c = 0; c < d; ++c) o[c] *= s;
    }
  }
}

// Converted rows (as ServedTable holds them, and as SnapshotTable resolves
// them) pooled by each ISA's kernel equal bit for bit the same ISA's float
// kernel over fp32 rows holding DecodeRow of them; the padding columns of
// the output untouched.
template <RowElement T>
void ExpectPooledEqualsPooledOfDecodedRows(int64_t d) {
  constexpr RowFormat kFormat = kRowFormatOf<T>;
  constexpr int64_t kN = 600;
  constexpr uint64_t kSeed = 17;
  SCOPED_TRACE(absl::StrCat(RowFormatName(kFormat), ", dim ", d, ", seed ", kSeed));
  const Converted c = Convert(kFormat, kN, d, kSeed + static_cast<uint64_t>(d));
  const std::string path = FreshDir(absl::StrCat("pool_", RowFormatName(kFormat), "_", d)) + "/t.ssd";
  ASSERT_TRUE(Write(path, "t", c).ok());
  auto served = ServedTable<T>::Load(path, {.name = "t", .nvectors = kN, .featuresize = d});
  ASSERT_TRUE(served.ok()) << served.status();
  auto snapshot = SnapshotTable<T>::Open({.name = "t", .nvectors = kN, .featuresize = d},
                                         {.path = path, .capacity_bytes = kN * SlotBytesOf(c.row_bytes)});
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();

  std::mt19937_64 rng(kSeed);
  std::uniform_real_distribution<float> weight(-3.0f, 3.0f);
  std::vector<int64_t> offsets = {0}, indices;
  std::vector<float> weights;
  const int sizes[] = {0, 1, 2, 3, 7, 0, 16, 31, 64, 65, 129, 300, 5, 0, 40, 1, 200, 9};
  for (int n : sizes) {
    for (int j = 0; j < n; ++j) {
      indices.push_back(static_cast<int64_t>(rng() % kN));
      weights.push_back(weight(rng));
    }
    offsets.push_back(static_cast<int64_t>(indices.size()));
  }
  const auto nbags = static_cast<int64_t>(std::size(sizes));
  const int64_t ld = d + 5;
  std::vector<const T*> rows(indices.size()), resolved(indices.size());
  std::vector<const float*> decoded(indices.size());
  for (size_t j = 0; j < indices.size(); ++j) {
    rows[j] = served->rowpointer(indices[j]);
    decoded[j] = c.values(indices[j]);
  }
  SnapshotPins pins;
  ASSERT_TRUE(snapshot->Resolve(indices, &pins, resolved).ok());

  for (Isa isa : {Isa::kAuto, Isa::kGeneric, Isa::kAvx2, Isa::kAvx512}) {
    if (isa != Isa::kAuto && !IsaAvailable(isa)) continue;
    for (bool weighted : {false, true}) {
      for (Pooling pooling : {Pooling::kSum, Pooling::kMean}) {
        SCOPED_TRACE(absl::StrCat(isa == Isa::kAuto ? "auto (PooledSumResolved)" : IsaName(isa),
                                  weighted ? ", weighted" : "", pooling == Pooling::kMean ? ", mean" : ", sum"));
        const std::span<const float> w = weighted ? std::span<const float>(weights) : std::span<const float>();
        std::vector<float> want(static_cast<size_t>(nbags * ld), kSentinel);
        std::vector<float> got = want, got_resolved = want, plain = want;
        if (isa == Isa::kAuto) {
          PooledSumResolved<float>(decoded, offsets, d, pooling, w, want.data(), ld);
          PooledSumResolved<T>(rows, offsets, d, pooling, w, got.data(), ld);
          PooledSumResolved<T>(resolved, offsets, d, pooling, w, got_resolved.data(), ld);
        } else {
          ssd_internal::PoolResolvedRows<float>(ssd_internal::ResolvedPooledKernelOf<float>(isa, d), decoded, offsets,
                                                d, pooling, w, want.data(), ld);
          ssd_internal::PoolResolvedRows<T>(ssd_internal::ResolvedPooledKernelOf<T>(isa, d), rows, offsets, d,
                                            pooling, w, got.data(), ld);
          ssd_internal::PoolResolvedRows<T>(ssd_internal::ResolvedPooledKernelOf<T>(isa, d), resolved, offsets, d,
                                            pooling, w, got_resolved.data(), ld);
        }
        PlainPooled(decoded, offsets, d, pooling, plain.data(), ld);
        for (int64_t b = 0; b < nbags; ++b) {
          for (int64_t col = 0; col < ld; ++col) {
            const auto i = static_cast<size_t>(b * ld + col);
            if (col >= d) {
              ASSERT_EQ(got[i], kSentinel) << "bag " << b << ", padding column " << col;
              ASSERT_EQ(want[i], kSentinel) << "bag " << b << ", padding column " << col;
              continue;
            }
            ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
                << "bag " << b << " (" << offsets[b + 1] - offsets[b] << " rows), column " << col << ": " << got[i]
                << " vs " << want[i];
            ASSERT_EQ(std::bit_cast<uint32_t>(got_resolved[i]), std::bit_cast<uint32_t>(want[i]))
                << "resolved, bag " << b << ", column " << col;
            if (!weighted) {
              ASSERT_EQ(got[i], plain[i]) << "bag " << b << ", column " << col;
            }
            if (offsets[b + 1] == offsets[b]) {
              ASSERT_EQ(got[i], 0.0f) << "empty bag " << b;
            }
          }
        }
      }
    }
  }
  snapshot->Release(&pins);
}

template <RowElement T>
void ExpectPooledForEveryDim() {
  for (int64_t d : {16, 64, 128, 256, 24, 100, 33}) ExpectPooledEqualsPooledOfDecodedRows<T>(d);
}

TEST(ServedSnapshot, PooledFp32RowsEqualTheFloatKernelsBitForBit) { ExpectPooledForEveryDim<float>(); }
TEST(ServedSnapshot, PooledBf16RowsEqualTheFloatKernelsOverDecodedRowsBitForBit) {
  ExpectPooledForEveryDim<bfloat16>();
}
TEST(ServedSnapshot, PooledFp16RowsEqualTheFloatKernelsOverDecodedRowsBitForBit) {
  ExpectPooledForEveryDim<float16>();
}
TEST(ServedSnapshot, PooledInt8RowsEqualTheFloatKernelsOverDecodedRowsBitForBit) {
  ExpectPooledForEveryDim<int8_rowwise>();
}

// --- refusals ------------------------------------------------------------------

TEST(ServedSnapshot, ATrainedSnapshotIsNotAServedTable) {
  auto trained = testing::TrainedSnapshot<float>::Make<16>("served_trained", 1000, 16, 0, 1, 1000);
  ASSERT_TRUE(trained.ok()) << trained.status();
  absl::Status s = ServedTable<float>::Load(trained->path, {.name = "t", .nvectors = 1000, .featuresize = 16}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("not rows converted for serving"));
  s = ServedTable<bfloat16>::Load(trained->path, {.name = "t", .nvectors = 1000, .featuresize = 32}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  s = ServedTable<float16>::Load(trained->path, {.name = "t", .nvectors = 1000, .featuresize = 32}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("trained rows"));
  // SnapshotTable of a served-only type refuses trained rows of the same bytes.
  s = SnapshotTable<float16>::Open({.name = "t", .nvectors = 1000, .featuresize = 32},
                                   {.path = trained->path, .capacity_bytes = 1 << 16})
          .status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  s = SnapshotTable<int8_rowwise>::Open({.name = "t", .nvectors = 1000, .featuresize = 56},
                                        {.path = trained->path, .capacity_bytes = 1 << 16})
          .status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  // And the trained table's own type still serves it.
  EXPECT_TRUE(SnapshotTable<float>::Open({.name = "t", .nvectors = 1000, .featuresize = 16},
                                         {.path = trained->path, .capacity_bytes = 1 << 16})
                  .ok());
}

TEST(ServedSnapshot, AnotherFormatOfTheSameRowBytesIsInvalidArgument) {
  // fp16 of 16 features and int8 of 24 are both 32-byte rows: only the format differs.
  const Converted c = Convert(RowFormat::kFp16, 300, 16, 3);
  const std::string path = FreshDir("format") + "/t.ssd";
  ASSERT_TRUE(Write(path, "t", c).ok());
  ASSERT_TRUE(ServedTable<float16>::Load(path, {.name = "t", .nvectors = 300, .featuresize = 16}).ok());
  absl::Status s = ServedTable<int8_rowwise>::Load(path, {.name = "t", .nvectors = 300, .featuresize = 24}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("format 3"));
  s = SnapshotTable<int8_rowwise>::Open({.name = "t", .nvectors = 300, .featuresize = 24},
                                        {.path = path, .capacity_bytes = 1 << 16})
          .status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  s = SnapshotTable<bfloat16>::Open({.name = "t", .nvectors = 300, .featuresize = 16},
                                    {.path = path, .capacity_bytes = 1 << 16})
          .status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  s = ServedTable<float>::Load(path, {.name = "t", .nvectors = 300, .featuresize = 8}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  // Another shape of the right format.
  s = ServedTable<float16>::Load(path, {.name = "t", .nvectors = 301, .featuresize = 16}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  s = ServedTable<float16>::Load(path, {.name = "t", .nvectors = 300, .featuresize = 17}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  // Optimizer state on a served-only type.
  s = SnapshotTable<float16>::Open({.name = "t", .nvectors = 300, .featuresize = 16, .state_floats = 1},
                                   {.path = path, .capacity_bytes = 1 << 16})
          .status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

TEST(ServedSnapshot, ATruncatedOrCorruptServedSnapshotIsDataLoss) {
  const Converted c = Convert(RowFormat::kInt8, 1000, 100, 4);  // 37 rows a block, 28 blocks
  const std::string dir = FreshDir("truncated");
  const std::string path = dir + "/t.ssd";
  ASSERT_TRUE(Write(path, "t", c).ok());
  const std::string bytes = ReadFile(path);
  auto load = [&](const std::string& p) {
    return ServedTable<int8_rowwise>::Load(p, {.name = "t", .nvectors = 1000, .featuresize = 100}).status();
  };
  auto open = [&](const std::string& p) {
    return SnapshotTable<int8_rowwise>::Open({.name = "t", .nvectors = 1000, .featuresize = 100},
                                             {.path = p, .capacity_bytes = 1 << 16})
        .status();
  };
  ASSERT_TRUE(load(path).ok());
  ASSERT_TRUE(open(path).ok());
  const std::string bad = dir + "/bad.ssd";
  for (size_t keep : {bytes.size() - 1, bytes.size() - 4096, bytes.size() - 5000, size_t{8192}, size_t{100}}) {
    SCOPED_TRACE(absl::StrCat("the first ", keep, " of ", bytes.size(), " bytes"));
    WriteFile(bad, bytes.substr(0, keep));
    absl::Status s = load(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_THAT(s.message(), HasSubstr("truncated"));
    s = open(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_THAT(s.message(), HasSubstr("truncated"));
  }
  WriteFile(bad, bytes + std::string(4096, '\0'));  // a block too many
  EXPECT_EQ(load(bad).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(open(bad).code(), absl::StatusCode::kDataLoss);
  std::string ids = bytes;
  const uint32_t seven = 7;
  std::memcpy(ids.data() + 4096 + 4 * 9, &seven, 4);  // row 9's id says 7
  WriteFile(bad, ids);
  absl::Status s = load(bad);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(s.message(), HasSubstr("offset 4132"));
  EXPECT_EQ(open(bad).code(), absl::StatusCode::kDataLoss);
}

TEST(ServedSnapshot, SnapshotTableOfFloatServesAConvertedFp32Snapshot) {
  const Converted c = Convert(RowFormat::kFp32, 2000, 24, 6);  // 96-byte rows, 42 a block, 64 bytes of padding
  const std::string path = FreshDir("fp32") + "/t.ssd";
  ASSERT_TRUE(Write(path, "t", c).ok());
  for (int pass = 0; pass < 2; ++pass) {
    auto t = SnapshotTable<float>::Open({.name = "t", .nvectors = 2000, .featuresize = 24},
                                        {.path = path, .capacity_bytes = 50 * 128});
    ASSERT_TRUE(t.ok()) << t.status();
    SnapshotPins pins;
    for (int64_t first = pass; first < 2000; first += 40) {
      std::vector<int64_t> rows;
      for (int64_t r = first; r < std::min<int64_t>(2000, first + 40); r += 1 + pass) rows.push_back(r);
      std::vector<const float*> out(rows.size());
      ASSERT_TRUE(t->Resolve(rows, &pins, out).ok());
      for (size_t i = 0; i < rows.size(); ++i) {
        ASSERT_EQ(std::memcmp(out[i], c.source.data() + rows[i] * 24, 96), 0) << "row " << rows[i];
      }
      t->Release(&pins);
    }
    EXPECT_GT(t->stats().evictions, 0);
    EXPECT_EQ(t->stats().lazy_rows, 0);
  }
}

TEST(ServedSnapshot, ABadShapeOrAFailingSourceIsAnErrorAndLeavesNoFile) {
  const std::string dir = FreshDir("shape");
  const std::string path = dir + "/t.ssd";
  auto zeros = [](int64_t, std::span<float> rows) {
    std::fill(rows.begin(), rows.end(), 0.0f);
    return absl::OkStatus();
  };
  auto write = [&](int64_t n, int64_t d, RowFormat f) {
    return WriteServedSnapshot(path, {.name = "t", .nvectors = n, .dim = d, .format = f}, zeros);
  };
  EXPECT_EQ(write(10, 0, RowFormat::kFp32).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(write(0, 8, RowFormat::kFp32).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(write(10, 1025, RowFormat::kFp32).code(), absl::StatusCode::kInvalidArgument);  // 4100 bytes a row
  EXPECT_EQ(write(10, 4089, RowFormat::kInt8).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(write(10, 2049, RowFormat::kBf16).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(path));
  absl::Status s = WriteServedSnapshot(path, {.name = "t", .nvectors = 100000, .dim = 8, .format = RowFormat::kFp16},
                                       [](int64_t first, std::span<float> rows) {
                                         if (first > 0) return absl::InternalError("the source broke");
                                         std::fill(rows.begin(), rows.end(), 1.0f);
                                         return absl::OkStatus();
                                       });
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_THAT(s.message(), HasSubstr("the source broke"));
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_TRUE(std::filesystem::is_empty(dir));  // nor its temporary
}

}  // namespace
}  // namespace cemb
