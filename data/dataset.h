// The binary dataset format: what `dlrm-data preprocess` and the synthetic
// generator write and what training memory-maps.
//
// A dataset file is one split (train, validation, test, or all) of fixed-size
// sample records behind a header. All integers are little-endian.
//
//   offset  bytes  field
//   0       8      magic "CEMBDSET"
//   8       4      version (kDatasetVersion)
//   12      4      header_bytes H = 64 + 8 * num_tables, rounded up to 64
//   16      8      num_samples N
//   24      4      num_dense D (13 for Criteo)
//   28      4      num_tables T (26 for Criteo)
//   32      4      hotness K: indices per table per sample (1 = one-hot)
//   36      4      record_bytes R = 4 * (1 + D + T * K)
//   40      8      payload checksum: Checksum64 of bytes [H, H + N * R)
//   48      8      header checksum: Checksum64 of bytes [0, H), this field as 0
//   56      4      part: 0 all, 1 train, 2 validation, 3 test
//   60      4      reserved, 0
//   64      8 * T  table sizes (rows per table)
//   ...            zero padding up to H
//   H       N * R  records; record i is
//                    float32 label (0 or 1)
//                    float32 dense[D]           (log(1 + max(x, 0)) for Criteo)
//                    int32   index[T][K]        (0 <= index[t][k] < table_size[t])
//
// The file size is exactly H + N * R. The bytes depend only on the content:
// writing the same samples twice gives identical files.
//
// Thread safety: a DatasetWriter is used by one thread. A Dataset is
// immutable after Open() and may be read from any number of threads.
//
//   DatasetSpec spec{.table_sizes = {1000, 50}, .hotness = 1};
//   CEMB_ASSIGN_OR_RETURN(auto w, DatasetWriter::Create("d.bin", spec));
//   CEMB_RETURN_IF_ERROR(w->Append(1.0f, dense13, {{7, 3}}));
//   CEMB_RETURN_IF_ERROR(w->Finish());
//   CEMB_ASSIGN_OR_RETURN(auto d, Dataset::Open("d.bin", {}));
//   float y = d->label(0);  std::span<const int32_t> idx = d->indices(0, 1);
#ifndef CEMB_DATA_DATASET_H_
#define CEMB_DATA_DATASET_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/checksum.h"
#include "base/file.h"

namespace cemb::data {

inline constexpr char kDatasetMagic[8] = {'C', 'E', 'M', 'B', 'D', 'S', 'E', 'T'};
inline constexpr uint32_t kDatasetVersion = 1;
inline constexpr uint32_t kDatasetFixedHeaderBytes = 64;

// Which part of a split a file holds.
enum class Part : uint32_t { kAll = 0, kTrain = 1, kValidation = 2, kTest = 3 };
const char* PartName(Part part);

// The shape of a dataset.
struct DatasetSpec {
  uint32_t num_dense = 13;
  std::vector<uint64_t> table_sizes;  // REQUIRES: each in [1, 2^31]
  uint32_t hotness = 1;               // REQUIRES: >= 1
  Part part = Part::kAll;

  uint32_t num_tables() const { return static_cast<uint32_t>(table_sizes.size()); }
  uint32_t indices_per_sample() const { return num_tables() * hotness; }
  uint32_t record_floats() const { return 1 + num_dense + indices_per_sample(); }
  uint32_t record_bytes() const { return 4 * record_floats(); }
  uint32_t header_bytes() const;
};

// Writes a dataset file. The data goes to "<path>.tmp", which Finish()
// renames to `path`; a writer destroyed before Finish() removes it, so `path`
// is never left half-written.
class DatasetWriter {
 public:
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<DatasetWriter>> Create(
      const std::string& path, const DatasetSpec& spec);
  ~DatasetWriter();
  DatasetWriter(const DatasetWriter&) = delete;
  DatasetWriter& operator=(const DatasetWriter&) = delete;

  // Appends one sample. `indices` holds T * K values, table-major
  // (index[t][k] at t * K + k). Returns InvalidArgument for wrong sizes or an
  // index outside its table, naming the sample, table and index.
  [[nodiscard]] absl::Status Append(float label, std::span<const float> dense,
                                    std::span<const int32_t> indices);
  // Appends `n` whole records laid out as in the file (R bytes each), as a
  // generator produces them. The caller guarantees the indices are in range.
  [[nodiscard]] absl::Status AppendRecords(const void* records, uint64_t n);
  // Writes the header and publishes the file. REQUIRES: called once.
  [[nodiscard]] absl::Status Finish();

  uint64_t num_samples() const { return num_samples_; }
  const DatasetSpec& spec() const { return spec_; }

 private:
  DatasetWriter(std::string path, DatasetSpec spec, base::AtomicFile file);
  absl::Status Flush();

  std::string path_;
  DatasetSpec spec_;
  base::AtomicFile file_;  // removes the .tmp unless Finish() commits it
  std::vector<unsigned char> buffer_;
  size_t buffered_ = 0;
  uint64_t num_samples_ = 0;
  Checksum64 checksum_;
  bool finished_ = false;
};

// How much Dataset::Open() checks.
enum class Verify {
  kHeader,  // magic, version, header checksum, sizes, file length: O(1)
  kFull,    // also the payload checksum and every index's range: one pass
};

struct DatasetOpenOptions {
  Verify verify = Verify::kFull;
};

// A memory-mapped dataset file.
class Dataset {
 public:
  // Errors (all name the file): NotFound; DataLoss for a bad magic, a
  // truncated or over-long file (with the expected and actual byte counts),
  // a checksum mismatch, or an index out of its table (with sample, table and
  // byte offset); FailedPrecondition for an unknown version.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Dataset>> Open(
      const std::string& path, const DatasetOpenOptions& options = {});

  const std::string& path() const { return path_; }
  const DatasetSpec& spec() const { return spec_; }
  uint64_t num_samples() const { return num_samples_; }
  uint32_t num_dense() const { return spec_.num_dense; }
  uint32_t num_tables() const { return spec_.num_tables(); }
  uint32_t hotness() const { return spec_.hotness; }
  std::span<const uint64_t> table_sizes() const { return spec_.table_sizes; }
  Part part() const { return spec_.part; }
  uint64_t payload_checksum() const { return payload_checksum_; }

  // The record of sample i: label, dense, indices (R / 4 words).
  // REQUIRES: i < num_samples().
  const float* record(uint64_t i) const {
    return reinterpret_cast<const float*>(records_ + i * spec_.record_bytes());
  }
  float label(uint64_t i) const { return record(i)[0]; }
  std::span<const float> dense(uint64_t i) const { return {record(i) + 1, spec_.num_dense}; }
  // All T * K indices of sample i, table-major.
  std::span<const int32_t> indices(uint64_t i) const {
    return {reinterpret_cast<const int32_t*>(record(i) + 1 + spec_.num_dense),
            spec_.indices_per_sample()};
  }
  // The K indices of table t for sample i. REQUIRES: t < num_tables().
  std::span<const int32_t> indices(uint64_t i, uint32_t t) const {
    return indices(i).subspan(size_t{t} * spec_.hotness, spec_.hotness);
  }

  // OK when the file's table sizes equal `expected` (a model config's);
  // otherwise InvalidArgument naming the first table that differs, e.g.
  // "train.bin: table 3 has 2202608 rows in the dataset but 1000 in the config".
  [[nodiscard]] absl::Status CheckTableSizes(std::span<const uint64_t> expected) const;

 private:
  Dataset() = default;
  std::string path_;
  base::MappedFile map_;
  DatasetSpec spec_;
  uint64_t num_samples_ = 0;
  uint64_t payload_checksum_ = 0;
  const unsigned char* records_ = nullptr;
};

}  // namespace cemb::data

#endif  // CEMB_DATA_DATASET_H_
