// The binary dataset format: what `dlrm-data preprocess` and the synthetic
// generator write and what training memory-maps.
//
// A dataset file is one split (train, validation, test, or all) of fixed-size
// sample records behind a header. All integers are little-endian. Table t
// has a hotness K_t: every sample holds K_t indices into it (a bag; 1 =
// one-hot), pooled (summed) by the model. This build writes version 2:
//
//   offset  bytes  field
//   0       8      magic "CEMBDSET"
//   8       4      version (kDatasetVersion = 2)
//   12      4      header_bytes H = 64 + 12 * num_tables, rounded up to 64
//   16      8      num_samples N
//   24      4      num_dense D (13 for Criteo)
//   28      4      num_tables T (26 for Criteo)
//   32      4      indices per sample S = K_0 + ... + K_{T-1}
//   36      4      record_bytes R = 4 * (1 + D + S)
//   40      8      payload checksum: Checksum64 of bytes [H, H + N * R)
//   48      8      header checksum: Checksum64 of bytes [0, H), this field as 0
//   56      4      part: 0 all, 1 train, 2 validation, 3 test
//   60      4      reserved, 0
//   64      8 * T  table sizes (rows per table)
//   64 + 8T 4 * T  hotness K_t per table, each in [1, kMaxHotness]
//   ...            zero padding up to H
//   H       N * R  records; record i is
//                    float32 label (0 or 1)
//                    float32 dense[D]           (log(1 + max(x, 0)) for Criteo)
//                    int32   index[K_0]         table 0's bag, then
//                    int32   index[K_1]         table 1's bag, ... up to table T - 1
//                                               (0 <= index < table_size[t])
//
// Version 1 (still read) has one hotness K for every table: field 32 is K,
// there is no per-table list, H = 64 + 8 * T rounded up to 64, and
// R = 4 * (1 + D + T * K); its records are laid out as version 2's.
//
// The file size is exactly H + N * R. The bytes depend only on the content:
// writing the same samples twice gives identical files.
//
// Thread safety: a DatasetWriter is used by one thread. A Dataset is
// immutable after Open() and may be read from any number of threads.
//
//   DatasetSpec spec{.table_sizes = {1000, 50}, .hotness = {3, 1}};
//   CEMB_ASSIGN_OR_RETURN(auto w, DatasetWriter::Create("d.bin", spec));
//   CEMB_RETURN_IF_ERROR(w->Append(1.0f, dense13, {{7, 8, 9, 3}}));
//   CEMB_RETURN_IF_ERROR(w->Finish());
//   CEMB_ASSIGN_OR_RETURN(auto d, Dataset::Open("d.bin", {}));
//   float y = d->label(0);  std::span<const int32_t> bag = d->indices(0, 0);  // {7, 8, 9}
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
inline constexpr uint32_t kDatasetVersion = 2;
inline constexpr uint32_t kDatasetFixedHeaderBytes = 64;
// The largest hotness (indices per table per sample) a dataset may hold.
inline constexpr uint32_t kMaxHotness = 100000;

// Which part of a split a file holds.
enum class Part : uint32_t { kAll = 0, kTrain = 1, kValidation = 2, kTest = 3 };
const char* PartName(Part part);

// Hotness k for each of `tables` tables (the uniform case).
inline std::vector<uint32_t> UniformHotness(size_t tables, uint32_t k) { return std::vector<uint32_t>(tables, k); }

// The hotness of `tables` tables as a user gives it (a config's data.hotness,
// `dlrm-data generate --hotness`): one entry per table, or one entry for
// every table. InvalidArgument naming `key` when the list has another length
// (with both counts) or a value is outside [1, kMaxHotness].
[[nodiscard]] absl::StatusOr<std::vector<uint32_t>> ExpandHotness(std::span<const uint32_t> given, size_t tables,
                                                                  const std::string& key);

// For messages: "K" when every table has hotness K, else the list "3,2,1".
std::string HotnessText(std::span<const uint32_t> hotness);

// The shape of a dataset.
struct DatasetSpec {
  uint32_t num_dense = 13;
  std::vector<uint64_t> table_sizes;  // REQUIRES: each in [1, 2^31]
  // Indices per sample of each table (its bag size), one entry per table.
  // REQUIRES: hotness.size() == table_sizes.size(); each in [1, kMaxHotness].
  std::vector<uint32_t> hotness;
  Part part = Part::kAll;

  uint32_t num_tables() const { return static_cast<uint32_t>(table_sizes.size()); }
  // S = the sum of the hotness.
  uint32_t indices_per_sample() const;
  // Where each table's bag starts among a record's indices: T + 1 entries,
  // table t's at [offsets[t], offsets[t + 1]).
  std::vector<uint32_t> IndexOffsets() const;
  uint32_t record_floats() const { return 1 + num_dense + indices_per_sample(); }
  uint32_t record_bytes() const { return 4 * record_floats(); }
  uint32_t header_bytes() const;  // of the version this build writes
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

  // Appends one sample. `indices` holds S values: table 0's K_0, then table
  // 1's K_1, and so on. Returns InvalidArgument for wrong sizes or an index
  // outside its table, naming the sample, table and index.
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
  std::vector<uint32_t> index_offsets_;  // spec_.IndexOffsets()
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
  // Reads versions 1 and 2. Errors (all name the file): NotFound; DataLoss
  // for a bad magic, a truncated or over-long file (with the expected and
  // actual byte counts), a header field out of range or inconsistent with
  // the others (naming the field and its byte offset: a hotness of 0, a
  // hotness list whose sum is not field 32 or does not fit the record size),
  // a checksum mismatch, or an index out of its table (with sample, table and
  // byte offset); FailedPrecondition for an unknown version.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Dataset>> Open(
      const std::string& path, const DatasetOpenOptions& options = {});

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }            // of the file: 1 or 2
  uint64_t header_bytes() const { return header_bytes_; }  // of the file (H)
  const DatasetSpec& spec() const { return spec_; }
  uint64_t num_samples() const { return num_samples_; }
  uint32_t num_dense() const { return spec_.num_dense; }
  uint32_t num_tables() const { return spec_.num_tables(); }
  std::span<const uint32_t> hotness() const { return spec_.hotness; }  // per table
  std::span<const uint64_t> table_sizes() const { return spec_.table_sizes; }
  Part part() const { return spec_.part; }
  uint64_t payload_checksum() const { return payload_checksum_; }

  // The record of sample i: label, dense, indices (R / 4 words).
  // REQUIRES: i < num_samples().
  const float* record(uint64_t i) const { return reinterpret_cast<const float*>(records_ + i * record_bytes_); }
  float label(uint64_t i) const { return record(i)[0]; }
  std::span<const float> dense(uint64_t i) const { return {record(i) + 1, spec_.num_dense}; }
  // All S indices of sample i: table 0's bag, then table 1's, ...
  std::span<const int32_t> indices(uint64_t i) const {
    return {reinterpret_cast<const int32_t*>(record(i) + 1 + spec_.num_dense), index_offsets_.back()};
  }
  // The K_t indices of table t for sample i. REQUIRES: t < num_tables().
  std::span<const int32_t> indices(uint64_t i, uint32_t t) const {
    return indices(i).subspan(index_offsets_[t], index_offsets_[t + 1] - index_offsets_[t]);
  }
  // Where each table's bag starts among a sample's indices (T + 1 entries;
  // DatasetSpec::IndexOffsets).
  std::span<const uint32_t> index_offsets() const { return index_offsets_; }

  // OK when the file's table sizes equal `expected` (a model config's);
  // otherwise InvalidArgument naming the first table that differs, e.g.
  // "train.bin: table 3 has 2202608 rows in the dataset but 1000 in the config".
  [[nodiscard]] absl::Status CheckTableSizes(std::span<const uint64_t> expected) const;
  // OK when the file's hotness equals `expected` (one entry per table, or
  // one for every table: ExpandHotness); otherwise InvalidArgument naming
  // `key` (how the user sets it), both lists and the first table that
  // differs, e.g.
  // "train.bin: table 20 has hotness 100 in the dataset but 1 in data.hotness
  // (dataset: 3,2,...; data.hotness: 1)".
  [[nodiscard]] absl::Status CheckHotness(std::span<const uint32_t> expected, const std::string& key) const;

 private:
  Dataset() = default;
  std::string path_;
  base::MappedFile map_;
  DatasetSpec spec_;
  uint32_t version_ = 0;
  uint64_t header_bytes_ = 0;
  std::vector<uint32_t> index_offsets_;  // spec_.IndexOffsets()
  uint64_t record_bytes_ = 0;            // spec_.record_bytes()
  uint64_t num_samples_ = 0;
  uint64_t payload_checksum_ = 0;
  const unsigned char* records_ = nullptr;
};

}  // namespace cemb::data

#endif  // CEMB_DATA_DATASET_H_
