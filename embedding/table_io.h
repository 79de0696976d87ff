// Initialisation, save and load of the rows of any RowTable.
//
//   InitUniform(table, seed)   every element uniform in [-a, a), a = sqrt(1 / nvectors)
//                              (the DLRM reference's initialisation); each row comes
//                              from its own generator, seeded with (seed, row)
//                              (InitRowUniform), so the same seed gives the same rows
//                              whatever the thread count, and one row can be made alone.
//   SaveRows(table, path)      writes a rows file atomically (temporary file, fsync,
//                              rename): a 64-byte header (magic "CEMBROWS", version,
//                              element type, nvectors, featuresize, checksum,
//                              state_floats) + rows, each its features and then
//                              its optimizer state (fp32; none in older files).
//   LoadRows(table, path)      reads a rows file into the table (float <-> bfloat16
//                              converted). The file is checked completely (header,
//                              size, checksum) before the first row is written, so a
//                              bad file leaves the table untouched.
//
// The rows are written through rowpointer(row, Access::kWrite) and read
// through rowpointer(row, Access::kRead), so these work for every table type
// and are not training traffic: a CachedTable counts no lookups, updates or
// slow-tier bytes for them (its statistics describe training only). On a
// persistent tier the written rows are persisted.
// NOTE: not thread-safe against concurrent kernels on the same table.
#ifndef CEMB_EMBEDDING_TABLE_IO_H_
#define CEMB_EMBEDDING_TABLE_IO_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "base/random.h"
#include "embedding/bfloat16.h"
#include "base/parallel.h"
#include "embedding/simple_table.h"

namespace cemb {

namespace table_io_internal {

enum class ElementType : uint32_t { kFloat = 0, kBfloat16 = 1 };

template <typename T>
constexpr ElementType ElementTypeOf() {
  return std::is_same_v<T, float> ? ElementType::kFloat : ElementType::kBfloat16;
}

struct RowsHeader {
  char magic[8];
  uint32_t version;
  ElementType type;
  int64_t nvectors;
  int64_t featuresize;
  uint64_t checksum;  // Checksum64 of the row bytes
  int64_t state_floats;  // fp32 optimizer state after each row's features (0 in files of before)
  uint8_t reserved[16];
};
static_assert(sizeof(RowsHeader) == 64);

// Streams rows out to `path` atomically. `fill(row_begin, row_end, buffer)`
// writes rows' raw bytes into buffer.
class RowsWriter {
 public:
  static absl::StatusOr<RowsWriter> Open(const std::string& path, ElementType type, int64_t nvectors,
                                         int64_t featuresize, int64_t state_floats = 0);
  RowsWriter(RowsWriter&&) noexcept;
  ~RowsWriter();
  absl::Status Append(const void* data, size_t bytes);
  absl::Status Commit();  // header with checksum, fsync, rename

 private:
  RowsWriter() = default;
  struct State;
  std::unique_ptr<State> state_;
};

// Opens and fully verifies a rows file (header against the table, size,
// checksum); then Read() streams the payload.
class RowsReader {
 public:
  static absl::StatusOr<RowsReader> Open(const std::string& path, const std::string& table_name,
                                         int64_t nvectors, int64_t featuresize, int64_t state_floats = 0);
  RowsReader(RowsReader&&) noexcept;
  ~RowsReader();
  ElementType type() const;
  absl::Status Read(void* data, size_t bytes);

 private:
  RowsReader() = default;
  struct State;
  std::unique_ptr<State> state_;
};

constexpr int64_t kRowsPerChunk = 4096;

template <RowTable Table>
void PersistRows(const Table& table, int64_t begin, int64_t end) {
  if constexpr (requires { table.persist_rows(begin, end); }) table.persist_rows(begin, end);
}

}  // namespace table_io_internal

// Row `row` of InitUniform(table, seed) for a table of `nvectors` rows: every
// element uniform in [-a, a), a = sqrt(1 / nvectors), drawn from a generator
// seeded with (seed, row) alone. So a row can be computed by itself, when it
// is first needed (the ssd tier's lazy initialisation), and equals what
// InitUniform writes, bit for bit, by construction.
template <StorageType T>
void InitRowUniform(uint64_t seed, int64_t nvectors, int64_t row, std::span<T> out) {
  const double a = std::sqrt(1.0 / static_cast<double>(nvectors));
  Xoshiro256pp rng(SplitMix64::Mix(seed, static_cast<uint64_t>(row)));
  for (T& x : out) x = FromFloat<T>(static_cast<float>((2.0 * rng.Uniform() - 1.0) * a));
}

template <RowTable Table>
void InitUniform(const Table& table, uint64_t seed, int threads = 0) {
  using T = typename Table::value_type;
  const int64_t n = table.nvectors();
  const size_t d = static_cast<size_t>(table.featuresize());
  const int64_t chunks = (n + table_io_internal::kRowsPerChunk - 1) / table_io_internal::kRowsPerChunk;
  parallel_for(chunks, threads, [&](int64_t c) {
    const int64_t begin = c * table_io_internal::kRowsPerChunk;
    const int64_t end = std::min(n, begin + table_io_internal::kRowsPerChunk);
    [[maybe_unused]] const auto scope = ReadScopeOf(table);
    for (int64_t r = begin; r < end; ++r) InitRowUniform(seed, n, r, std::span<T>(table.rowpointer(r, Access::kWrite), d));
    table_io_internal::PersistRows(table, begin, end);
  });
}

template <RowTable Table>
[[nodiscard]] absl::Status SaveRows(const Table& table, const std::string& path) {
  using T = typename Table::value_type;
  namespace ti = table_io_internal;
  absl::StatusOr<ti::RowsWriter> writer =
      ti::RowsWriter::Open(path, ti::ElementTypeOf<T>(), table.nvectors(), table.featuresize(), StateFloatsOf(table));
  if (!writer.ok()) return writer.status();
  const size_t row_bytes =
      static_cast<size_t>(table.featuresize()) * sizeof(T) + static_cast<size_t>(StateFloatsOf(table)) * sizeof(float);
  std::vector<char> buffer(ti::kRowsPerChunk * row_bytes);
  for (int64_t begin = 0; begin < table.nvectors(); begin += ti::kRowsPerChunk) {
    const int64_t end = std::min(table.nvectors(), begin + ti::kRowsPerChunk);
    [[maybe_unused]] const auto scope = ReadScopeOf(table);
    for (int64_t r = begin; r < end; ++r) {
      std::memcpy(buffer.data() + (r - begin) * row_bytes, table.rowpointer(r, Access::kRead), row_bytes);
    }
    if (absl::Status s = writer->Append(buffer.data(), (end - begin) * row_bytes); !s.ok()) return s;
  }
  return writer->Commit();
}

template <RowTable Table>
[[nodiscard]] absl::Status LoadRows(const Table& table, const std::string& path) {
  using T = typename Table::value_type;
  namespace ti = table_io_internal;
  const int64_t state = StateFloatsOf(table);
  absl::StatusOr<ti::RowsReader> reader =
      ti::RowsReader::Open(path, table.name(), table.nvectors(), table.featuresize(), state);
  if (!reader.ok()) return reader.status();
  const int64_t d = table.featuresize();
  const size_t elem = reader->type() == ti::ElementType::kFloat ? sizeof(float) : sizeof(bfloat16);
  const size_t feature_bytes = static_cast<size_t>(d) * elem, state_bytes = static_cast<size_t>(state) * sizeof(float);
  const size_t src_bytes = feature_bytes + state_bytes;
  std::vector<char> buffer(ti::kRowsPerChunk * src_bytes);
  for (int64_t begin = 0; begin < table.nvectors(); begin += ti::kRowsPerChunk) {
    const int64_t end = std::min(table.nvectors(), begin + ti::kRowsPerChunk);
    if (absl::Status s = reader->Read(buffer.data(), (end - begin) * src_bytes); !s.ok()) return s;
    [[maybe_unused]] const auto scope = ReadScopeOf(table);
    for (int64_t r = begin; r < end; ++r) {
      T* row = table.rowpointer(r, Access::kWrite);
      const char* src = buffer.data() + (r - begin) * src_bytes;
      if (elem == sizeof(T)) {
        std::memcpy(row, src, feature_bytes);
      } else if (reader->type() == ti::ElementType::kFloat) {
        for (int64_t j = 0; j < d; ++j) row[j] = FromFloat<T>(reinterpret_cast<const float*>(src)[j]);
      } else {
        for (int64_t j = 0; j < d; ++j) row[j] = FromFloat<T>(ToFloat(reinterpret_cast<const bfloat16*>(src)[j]));
      }
      std::memcpy(RowState(row, d), src + feature_bytes, state_bytes);
    }
    ti::PersistRows(table, begin, end);
  }
  return absl::OkStatus();
}

}  // namespace cemb

#endif  // CEMB_EMBEDDING_TABLE_IO_H_
