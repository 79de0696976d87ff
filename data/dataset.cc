#include "data/dataset.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"

namespace cemb::data {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the dataset format is little-endian; add byte swapping for this host");

constexpr size_t kWriteBuffer = size_t{1} << 20;
constexpr uint32_t kMaxTables = 1 << 16;
constexpr uint32_t kMaxDense = 1 << 16;
// Keeps a record's bytes, 4 * (1 + D + S), well inside 32 bits.
constexpr uint64_t kMaxIndicesPerSample = uint64_t{1} << 26;

// The header bytes of a file of `version` with `tables` tables.
uint64_t HeaderBytes(uint32_t version, uint64_t tables) {
  const uint64_t raw = kDatasetFixedHeaderBytes + (version == 1 ? 8 : 12) * tables;
  return (raw + 63) / 64 * 64;
}

template <typename T>
void Put(std::vector<unsigned char>& h, size_t at, T v) {
  std::memcpy(h.data() + at, &v, sizeof v);
}
template <typename T>
T Get(const unsigned char* h, size_t at) {
  T v;
  std::memcpy(&v, h + at, sizeof v);
  return v;
}

std::vector<unsigned char> EncodeHeader(const DatasetSpec& spec, uint64_t num_samples,
                                        uint64_t payload_checksum) {
  std::vector<unsigned char> h(spec.header_bytes(), 0);
  std::memcpy(h.data(), kDatasetMagic, 8);
  Put<uint32_t>(h, 8, kDatasetVersion);
  Put<uint32_t>(h, 12, spec.header_bytes());
  Put<uint64_t>(h, 16, num_samples);
  Put<uint32_t>(h, 24, spec.num_dense);
  Put<uint32_t>(h, 28, spec.num_tables());
  Put<uint32_t>(h, 32, spec.indices_per_sample());
  Put<uint32_t>(h, 36, spec.record_bytes());
  Put<uint64_t>(h, 40, payload_checksum);
  Put<uint32_t>(h, 56, static_cast<uint32_t>(spec.part));
  const uint32_t tables = spec.num_tables();
  for (uint32_t t = 0; t < tables; ++t) Put<uint64_t>(h, 64 + 8 * t, spec.table_sizes[t]);
  for (uint32_t t = 0; t < tables; ++t) Put<uint32_t>(h, 64 + 8 * tables + 4 * t, spec.hotness[t]);
  Checksum64 c;
  c.Update(h.data(), h.size());  // field 48 is still 0
  Put<uint64_t>(h, 48, c.Digest());
  return h;
}

absl::Status ValidateSpec(const DatasetSpec& spec) {
  if (spec.table_sizes.empty() || spec.table_sizes.size() > kMaxTables) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset: number of tables ", spec.table_sizes.size(), " not in [1, ", kMaxTables, "]"));
  }
  if (spec.num_dense > kMaxDense) {
    return absl::InvalidArgumentError(absl::StrCat("dataset: num_dense ", spec.num_dense, " > ", kMaxDense));
  }
  if (spec.hotness.size() != spec.table_sizes.size()) {
    return absl::InvalidArgumentError(absl::StrCat("dataset: ", spec.hotness.size(), " hotness values for ",
                                                   spec.table_sizes.size(), " tables"));
  }
  uint64_t indices = 0;
  for (size_t t = 0; t < spec.hotness.size(); ++t) {
    if (spec.hotness[t] == 0 || spec.hotness[t] > kMaxHotness) {
      return absl::InvalidArgumentError(
          absl::StrCat("dataset: table ", t, " has hotness ", spec.hotness[t], ", not in [1, ", kMaxHotness, "]"));
    }
    indices += spec.hotness[t];
  }
  if (indices > kMaxIndicesPerSample) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset: ", indices, " indices per sample (the sum of the hotness) > ", kMaxIndicesPerSample));
  }
  for (size_t t = 0; t < spec.table_sizes.size(); ++t) {
    if (spec.table_sizes[t] == 0 || spec.table_sizes[t] > (uint64_t{1} << 31)) {
      return absl::InvalidArgumentError(absl::StrCat("dataset: table ", t, " has size ",
                                                     spec.table_sizes[t], ", not in [1, 2^31]"));
    }
  }
  if (static_cast<uint64_t>(spec.part) > 3) {
    return absl::InvalidArgumentError("dataset: unknown part");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<uint32_t>> ExpandHotness(std::span<const uint32_t> given, size_t tables,
                                                    const std::string& key) {
  if (given.size() != 1 && given.size() != tables) {
    return absl::InvalidArgumentError(absl::StrCat(key, ": ", given.size(), " entries for ", tables,
                                                   " tables (give one per table, or one for every table)"));
  }
  for (size_t t = 0; t < given.size(); ++t) {
    if (given[t] == 0 || given[t] > kMaxHotness) {
      return absl::InvalidArgumentError(absl::StrCat(key, ": ", given[t], given.size() > 1 ? absl::StrCat(" (table ", t, ")") : "",
                                                     " not in [1, ", kMaxHotness, "]"));
    }
  }
  return given.size() == tables ? std::vector<uint32_t>(given.begin(), given.end()) : UniformHotness(tables, given[0]);
}

std::string HotnessText(std::span<const uint32_t> hotness) {
  if (!hotness.empty() && std::ranges::all_of(hotness, [&](uint32_t k) { return k == hotness[0]; })) {
    return absl::StrCat(hotness[0]);
  }
  return absl::StrJoin(hotness, ",");
}

const char* PartName(Part part) {
  switch (part) {
    case Part::kAll: return "all";
    case Part::kTrain: return "train";
    case Part::kValidation: return "validation";
    case Part::kTest: return "test";
  }
  return "unknown";
}

uint32_t DatasetSpec::indices_per_sample() const {
  uint32_t s = 0;
  for (uint32_t k : hotness) s += k;
  return s;
}

std::vector<uint32_t> DatasetSpec::IndexOffsets() const {
  std::vector<uint32_t> offsets(hotness.size() + 1, 0);
  for (size_t t = 0; t < hotness.size(); ++t) offsets[t + 1] = offsets[t] + hotness[t];
  return offsets;
}

uint32_t DatasetSpec::header_bytes() const { return static_cast<uint32_t>(HeaderBytes(kDatasetVersion, num_tables())); }

// ---------------------------------------------------------------- writer

DatasetWriter::DatasetWriter(std::string path, DatasetSpec spec, base::AtomicFile file)
    : path_(std::move(path)), spec_(std::move(spec)), file_(std::move(file)), index_offsets_(spec_.IndexOffsets()) {
  buffer_.resize(std::max<size_t>(kWriteBuffer, spec_.record_bytes()));
}

DatasetWriter::~DatasetWriter() = default;

absl::StatusOr<std::unique_ptr<DatasetWriter>> DatasetWriter::Create(const std::string& path,
                                                                     const DatasetSpec& spec) {
  CEMB_RETURN_IF_ERROR(ValidateSpec(spec));
  CEMB_ASSIGN_OR_RETURN(base::AtomicFile file, base::AtomicFile::Create(path));
  // A placeholder header; Finish() writes the real one.
  std::vector<unsigned char> zeros(spec.header_bytes(), 0);
  CEMB_RETURN_IF_ERROR(file.Append(zeros.data(), zeros.size()));
  return std::unique_ptr<DatasetWriter>(new DatasetWriter(path, spec, std::move(file)));
}

absl::Status DatasetWriter::Flush() {
  if (buffered_ == 0) return absl::OkStatus();
  checksum_.Update(buffer_.data(), buffered_);
  CEMB_RETURN_IF_ERROR(file_.Append(buffer_.data(), buffered_));
  buffered_ = 0;
  return absl::OkStatus();
}

absl::Status DatasetWriter::Append(float label, std::span<const float> dense,
                                   std::span<const int32_t> indices) {
  if (dense.size() != spec_.num_dense || indices.size() != spec_.indices_per_sample()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path_, ": sample ", num_samples_, " has ", dense.size(), " dense values and ",
        indices.size(), " indices; the dataset takes ", spec_.num_dense, " and ",
        spec_.indices_per_sample()));
  }
  for (size_t t = 0; t < spec_.table_sizes.size(); ++t) {
    for (uint32_t j = index_offsets_[t]; j < index_offsets_[t + 1]; ++j) {
      if (indices[j] < 0 || static_cast<uint64_t>(indices[j]) >= spec_.table_sizes[t]) {
        return absl::InvalidArgumentError(absl::StrCat(path_, ": sample ", num_samples_, ", table ", t, ", index ",
                                                       j - index_offsets_[t], ": row ", indices[j], " not in [0, ",
                                                       spec_.table_sizes[t], ")"));
      }
    }
  }
  const size_t r = spec_.record_bytes();
  if (buffered_ + r > buffer_.size()) CEMB_RETURN_IF_ERROR(Flush());
  unsigned char* p = buffer_.data() + buffered_;
  std::memcpy(p, &label, 4);
  std::memcpy(p + 4, dense.data(), dense.size_bytes());
  std::memcpy(p + 4 + dense.size_bytes(), indices.data(), indices.size_bytes());
  buffered_ += r;
  ++num_samples_;
  return absl::OkStatus();
}

absl::Status DatasetWriter::AppendRecords(const void* records, uint64_t n) {
  CEMB_RETURN_IF_ERROR(Flush());
  const size_t bytes = n * spec_.record_bytes();
  checksum_.Update(records, bytes);
  CEMB_RETURN_IF_ERROR(file_.Append(records, bytes));
  num_samples_ += n;
  return absl::OkStatus();
}

absl::Status DatasetWriter::Finish() {
  if (finished_) return absl::FailedPreconditionError(absl::StrCat(path_, ": Finish() called twice"));
  CEMB_RETURN_IF_ERROR(Flush());
  const std::vector<unsigned char> header = EncodeHeader(spec_, num_samples_, checksum_.Digest());
  CEMB_RETURN_IF_ERROR(file_.WriteAt(header.data(), header.size(), 0));
  // Unsynced: a dataset is checksummed when opened and can be made again.
  CEMB_RETURN_IF_ERROR(file_.Commit(base::AtomicFile::Durability::kUnsynced));
  finished_ = true;
  return absl::OkStatus();
}

// ---------------------------------------------------------------- reader

absl::StatusOr<std::unique_ptr<Dataset>> Dataset::Open(const std::string& path,
                                                       const DatasetOpenOptions& options) {
  std::unique_ptr<Dataset> d(new Dataset());
  d->path_ = path;
  CEMB_ASSIGN_OR_RETURN(d->map_, base::MappedFile::Open(path));
  const unsigned char* h = d->map_.data();
  const uint64_t size = d->map_.size();
  auto data_loss = [&](auto&&... parts) {
    return absl::DataLossError(absl::StrCat(path, ": ", parts...));
  };
  if (size < kDatasetFixedHeaderBytes) {
    return data_loss("file is ", size, " bytes, shorter than the ", kDatasetFixedHeaderBytes,
                     "-byte header (truncated?)");
  }
  if (std::memcmp(h, kDatasetMagic, 8) != 0) {
    return data_loss("not a dataset file (bad magic at byte 0)");
  }
  const uint32_t version = Get<uint32_t>(h, 8);
  if (version != 1 && version != kDatasetVersion) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": dataset format version ", version,
                                                      ", this build reads versions 1 and ", kDatasetVersion));
  }
  const uint32_t header_bytes = Get<uint32_t>(h, 12);
  const uint32_t num_tables = Get<uint32_t>(h, 28);
  const uint32_t field32 = Get<uint32_t>(h, 32);  // v1: the hotness; v2: the indices per sample
  DatasetSpec& spec = d->spec_;
  spec.num_dense = Get<uint32_t>(h, 24);
  if (num_tables == 0 || num_tables > kMaxTables || header_bytes != HeaderBytes(version, num_tables)) {
    return data_loss("corrupt header: ", num_tables, " tables (byte 28) with a header of ", header_bytes,
                     " bytes (byte 12)");
  }
  if (size < header_bytes) {
    return data_loss("file is ", size, " bytes, shorter than its ", header_bytes,
                     "-byte header (truncated?)");
  }
  {
    std::vector<unsigned char> copy(h, h + header_bytes);
    std::memset(copy.data() + 48, 0, 8);
    Checksum64 c;
    c.Update(copy.data(), copy.size());
    if (c.Digest() != Get<uint64_t>(h, 48)) {
      return data_loss("header checksum mismatch (bytes 0..", header_bytes, ")");
    }
  }
  spec.table_sizes.resize(num_tables);
  for (uint32_t t = 0; t < num_tables; ++t) spec.table_sizes[t] = Get<uint64_t>(h, 64 + 8 * t);
  if (version == 1) {
    spec.hotness = UniformHotness(num_tables, field32);
  } else {
    spec.hotness.resize(num_tables);
    uint64_t sum = 0;
    for (uint32_t t = 0; t < num_tables; ++t) {
      const uint32_t at = 64 + 8 * num_tables + 4 * t;
      spec.hotness[t] = Get<uint32_t>(h, at);
      if (spec.hotness[t] == 0 || spec.hotness[t] > kMaxHotness) {
        return data_loss("corrupt header: table ", t, " has hotness ", spec.hotness[t], " (byte ", at,
                         "), not in [1, ", kMaxHotness, "]");
      }
      sum += spec.hotness[t];
    }
    if (sum != field32) {
      return data_loss("corrupt header: the hotness list (bytes ", 64 + 8 * num_tables, "..",
                       64 + 12 * num_tables, ") sums to ", sum, " indices per sample, but byte 32 says ", field32);
    }
  }
  spec.part = static_cast<Part>(Get<uint32_t>(h, 56));
  if (absl::Status s = ValidateSpec(spec); !s.ok()) return data_loss("corrupt header: ", s.message());
  if (Get<uint32_t>(h, 36) != spec.record_bytes()) {
    return data_loss("corrupt header: record size ", Get<uint32_t>(h, 36), " (byte 36), expected ",
                     spec.record_bytes(), " = 4 * (1 + ", spec.num_dense, " dense + ", spec.indices_per_sample(),
                     " indices)");
  }
  d->version_ = version;
  d->header_bytes_ = header_bytes;
  d->index_offsets_ = spec.IndexOffsets();
  d->record_bytes_ = spec.record_bytes();
  d->num_samples_ = Get<uint64_t>(h, 16);
  d->payload_checksum_ = Get<uint64_t>(h, 40);
  const uint64_t r = spec.record_bytes();
  const uint64_t payload = size - header_bytes;
  if (d->num_samples_ > payload / r || payload != d->num_samples_ * r) {
    const unsigned __int128 expected = static_cast<unsigned __int128>(d->num_samples_) * r + header_bytes;
    return data_loss("file is ", size, " bytes but its header promises ", d->num_samples_,
                     " samples of ", r, " bytes, ",
                     expected > ~uint64_t{0} ? std::string("over 2^64")
                                             : absl::StrCat(static_cast<uint64_t>(expected)),
                     " bytes in all (", size < expected ? "truncated at sample " : "extra bytes after sample ",
                     payload / r, ")");
  }
  d->records_ = h + header_bytes;
  if (options.verify == Verify::kFull && d->num_samples_ > 0) {
    Checksum64 c;
    c.Update(d->records_, payload);
    if (c.Digest() != d->payload_checksum_) {
      return data_loss("payload checksum mismatch over bytes ", header_bytes, "..", size,
                       " (the file is corrupt)");
    }
    const std::vector<uint32_t>& offsets = d->index_offsets_;
    for (uint64_t i = 0; i < d->num_samples_; ++i) {
      std::span<const int32_t> idx = d->indices(i);
      for (uint32_t t = 0; t < num_tables; ++t) {
        for (uint32_t j = offsets[t]; j < offsets[t + 1]; ++j) {
          if (idx[j] < 0 || static_cast<uint64_t>(idx[j]) >= spec.table_sizes[t]) {
            return data_loss("sample ", i, ", table ", t, ": row ", idx[j], " not in [0, ", spec.table_sizes[t],
                             ") at byte ", header_bytes + i * r + 4 * (1 + spec.num_dense + j));
          }
        }
      }
    }
  }
  return d;
}

absl::Status Dataset::CheckTableSizes(std::span<const uint64_t> expected) const {
  if (expected.size() != num_tables()) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": the dataset has ", num_tables(),
                                                   " tables but the config has ", expected.size()));
  }
  for (size_t t = 0; t < expected.size(); ++t) {
    if (expected[t] != spec_.table_sizes[t]) {
      return absl::InvalidArgumentError(absl::StrCat(path_, ": table ", t, " has ", spec_.table_sizes[t],
                                                     " rows in the dataset but ", expected[t],
                                                     " in the config"));
    }
  }
  return absl::OkStatus();
}

absl::Status Dataset::CheckHotness(std::span<const uint32_t> expected, const std::string& key) const {
  const std::span<const uint32_t> mine = spec_.hotness;
  absl::StatusOr<std::vector<uint32_t>> expanded = ExpandHotness(expected, mine.size(), key);
  if (!expanded.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": the dataset's ", mine.size(), " tables against ",
                                                   expanded.status().message()));
  }
  const std::vector<uint32_t>& want = *expanded;
  for (size_t t = 0; t < mine.size(); ++t) {
    if (mine[t] != want[t]) {
      return absl::InvalidArgumentError(absl::StrCat(path_, ": table ", t, " has hotness ", mine[t],
                                                     " in the dataset but ", want[t], " in ", key, " (dataset: ",
                                                     absl::StrJoin(mine, ","), "; ", key, ": ",
                                                     absl::StrJoin(expected, ","), ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace cemb::data
