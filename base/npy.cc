#include "base/npy.h"

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/file.h"
#include "base/status_macros.h"

namespace cemb {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;

template <typename T>
struct Dtype;
template <>
struct Dtype<float> {
  static constexpr char kCode[] = "f4";
};
template <>
struct Dtype<int32_t> {
  static constexpr char kCode[] = "i4";
};
template <>
struct Dtype<int64_t> {
  static constexpr char kCode[] = "i8";
};

absl::Status Bad(const std::string& name, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(name, ": not a valid .npy file: ", what));
}

// Finds the value of 'key' in a Python dict literal of the .npy header and
// returns it (text up to the next top-level ',' or '}').
bool FindValue(absl::string_view header, absl::string_view key, absl::string_view& value) {
  const std::string quoted1 = absl::StrCat("'", key, "'");
  const std::string quoted2 = absl::StrCat("\"", key, "\"");
  size_t pos = header.find(quoted1);
  size_t len = quoted1.size();
  if (pos == absl::string_view::npos) {
    pos = header.find(quoted2);
    len = quoted2.size();
  }
  if (pos == absl::string_view::npos) return false;
  absl::string_view rest = header.substr(pos + len);
  rest = absl::StripLeadingAsciiWhitespace(rest);
  if (rest.empty() || rest[0] != ':') return false;
  rest.remove_prefix(1);
  rest = absl::StripLeadingAsciiWhitespace(rest);
  int depth = 0;
  size_t end = 0;
  for (; end < rest.size(); ++end) {
    const char c = rest[end];
    if (c == '(' || c == '[') ++depth;
    if (c == ')' || c == ']') --depth;
    if (depth == 0 && (c == ',' || c == '}')) break;
    if (depth < 0) return false;
  }
  if (end == rest.size()) return false;
  value = absl::StripTrailingAsciiWhitespace(rest.substr(0, end));
  return true;
}

// The parsed header of a .npy image: its descr (without quotes), shape,
// element count and where the data starts.
struct Header {
  std::string descr;
  std::vector<int64_t> shape;
  uint64_t count = 1;
  size_t data_offset = 0;
};

// Parses the header at the start of `bytes` (which must hold at least the
// whole header; the data may follow or not).
absl::StatusOr<Header> ParseHeader(absl::string_view bytes, const std::string& name) {
  if (bytes.size() < kMagicLen + 2 || std::memcmp(bytes.data(), kMagic, kMagicLen) != 0) {
    return Bad(name, "missing the \\x93NUMPY magic (truncated or another format)");
  }
  const int major = static_cast<unsigned char>(bytes[6]);
  size_t header_len = 0, prefix = 0;
  if (major == 1) {
    if (bytes.size() < 10) return Bad(name, "truncated in the header length");
    header_len = static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8);
    prefix = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return Bad(name, "truncated in the header length");
    for (int i = 3; i >= 0; --i) header_len = (header_len << 8) | static_cast<unsigned char>(bytes[8 + i]);
    prefix = 12;
  } else {
    return Bad(name, absl::StrCat("unsupported format version ", major));
  }
  if (bytes.size() - prefix < header_len) return Bad(name, "truncated in the header");
  const absl::string_view header = bytes.substr(prefix, header_len);

  absl::string_view descr, fortran, shape_text;
  if (!FindValue(header, "descr", descr) || !FindValue(header, "fortran_order", fortran) ||
      !FindValue(header, "shape", shape_text)) {
    return Bad(name, absl::StrCat("header is not a dict with descr, fortran_order and shape: ", header));
  }
  if (descr.size() < 2 || (descr.front() != '\'' && descr.front() != '"') || descr.back() != descr.front()) {
    return Bad(name, absl::StrCat("bad descr ", descr));
  }
  if (fortran != "False") {
    return absl::InvalidArgumentError(absl::StrCat(name, ": fortran_order ", fortran, " is not supported"));
  }
  if (shape_text.size() < 2 || shape_text.front() != '(' || shape_text.back() != ')') {
    return Bad(name, absl::StrCat("bad shape ", shape_text));
  }
  Header h;
  h.descr = std::string(descr.substr(1, descr.size() - 2));
  for (absl::string_view part : absl::StrSplit(shape_text.substr(1, shape_text.size() - 2), ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (part.empty()) continue;  // "(3,)" and "()"
    int64_t dim = 0;
    if (!absl::SimpleAtoi(part, &dim) || dim < 0) return Bad(name, absl::StrCat("bad shape ", shape_text));
    // At most 8 bytes an element: the byte count fits in 64 bits.
    if (dim != 0 && h.count > std::numeric_limits<uint64_t>::max() / 8 / static_cast<uint64_t>(dim)) {
      return Bad(name, absl::StrCat("shape too large ", shape_text));
    }
    h.count *= static_cast<uint64_t>(dim);
    h.shape.push_back(dim);
  }
  h.data_offset = prefix + header_len;
  return h;
}

// The dtype a descr names, if it is one of ours.
bool DtypeOfDescr(absl::string_view descr, NpyDtype* dtype) {
  if (descr == "bfloat16" || descr == "<V2" || descr == "|V2") return *dtype = NpyDtype::kBfloat16, true;
  if (descr.empty() || (descr[0] != '<' && descr[0] != '|' && descr[0] != '=')) return false;
  const absl::string_view code = descr.substr(1);
  if (code == "f4") return *dtype = NpyDtype::kFloat32, true;
  if (code == "i4") return *dtype = NpyDtype::kInt32, true;
  if (code == "i8") return *dtype = NpyDtype::kInt64, true;
  return false;
}

size_t ItemSize(NpyDtype dtype) {
  switch (dtype) {
    case NpyDtype::kBfloat16: return 2;
    case NpyDtype::kFloat32:
    case NpyDtype::kInt32: return 4;
    case NpyDtype::kInt64: return 8;
  }
  return 1;
}

std::string ShapeText(std::span<const int64_t> shape) {
  std::string text = "(";
  for (size_t i = 0; i < shape.size(); ++i) absl::StrAppend(&text, i ? ", " : "", shape[i]);
  return absl::StrCat(text, shape.size() == 1 ? ",)" : ")");
}

absl::Status SizeError(const std::string& name, const Header& h, size_t item, uint64_t available) {
  const uint64_t data_bytes = h.count * item;
  return Bad(name, absl::StrCat("shape ", ShapeText(h.shape), " needs ", data_bytes, " data bytes, the file has ",
                                available, available < data_bytes ? " (truncated)" : ""));
}

// The header of a .npy file: magic and version, then the whole header.
std::string HeaderBytes(absl::string_view descr, std::span<const int64_t> shape) {
  std::string header = absl::StrCat("{'descr': '", descr, "', 'fortran_order': False, 'shape': ", ShapeText(shape), ", }");
  // Pad with spaces and a newline so that the data starts 64-byte aligned.
  const bool v2 = header.size() + 1 + 10 > 65535;
  const size_t prefix = v2 ? 12 : 10;
  const size_t total = (prefix + header.size() + 1 + 63) / 64 * 64;
  header.append(total - prefix - header.size() - 1, ' ');
  header += '\n';
  std::string out(kMagic, kMagicLen);
  out += static_cast<char>(v2 ? 2 : 1);
  out += '\0';
  const size_t len = header.size();
  out += static_cast<char>(len & 0xff);
  out += static_cast<char>((len >> 8) & 0xff);
  if (v2) {
    out += static_cast<char>((len >> 16) & 0xff);
    out += static_cast<char>((len >> 24) & 0xff);
  }
  return out + header;
}

}  // namespace

const char* NpyDtypeName(NpyDtype dtype) {
  switch (dtype) {
    case NpyDtype::kFloat32: return "float32";
    case NpyDtype::kBfloat16: return "bfloat16";
    case NpyDtype::kInt32: return "int32";
    case NpyDtype::kInt64: return "int64";
  }
  return "?";
}

template <typename T>
absl::StatusOr<NpyArray<T>> ParseNpy(std::string_view image, const std::string& name) {
  // Debian's Abseil has its own string_view type.
  const absl::string_view bytes(image.data(), image.size());
  CEMB_ASSIGN_OR_RETURN(const Header h, ParseHeader(bytes, name));
  const absl::string_view want(Dtype<T>::kCode);
  const absl::string_view descr(h.descr);
  const bool order_ok = !descr.empty() && (descr[0] == '<' || descr[0] == '|' || descr[0] == '=');
  if (!order_ok || descr.substr(1) != want) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": dtype '", descr, "' where '<", want, "' was expected"));
  }
  const uint64_t available = bytes.size() - h.data_offset;
  if (available != h.count * sizeof(T)) return SizeError(name, h, sizeof(T), available);
  NpyArray<T> array;
  array.shape = h.shape;
  array.data.resize(h.count);
  if (h.count > 0) std::memcpy(array.data.data(), bytes.data() + h.data_offset, h.count * sizeof(T));
  return array;
}

template <typename T>
absl::StatusOr<NpyArray<T>> ReadNpy(const std::string& path) {
  CEMB_ASSIGN_OR_RETURN(const std::string image, base::ReadWholeFile(path));
  return ParseNpy<T>(image, path);
}

template <typename T>
absl::Status WriteNpy(const std::string& path, std::span<const T> data, std::span<const int64_t> shape) {
  uint64_t count = 1;
  for (int64_t d : shape) {
    if (d < 0) return absl::InvalidArgumentError(absl::StrCat(path, ": negative dimension"));
    count *= static_cast<uint64_t>(d);
  }
  if (count != data.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": shape ", ShapeText(shape), " has ", count, " elements, data has ", data.size()));
  }
  const std::string header = HeaderBytes(absl::StrCat("<", Dtype<T>::kCode), shape);
  CEMB_ASSIGN_OR_RETURN(base::AtomicFile file, base::AtomicFile::Create(path));
  CEMB_RETURN_IF_ERROR(file.Append(header.data(), header.size()));
  CEMB_RETURN_IF_ERROR(file.Append(data.data(), data.size_bytes()));
  return file.Commit();
}

#define CEMB_NPY_INSTANTIATE(T)                                                               \
  template absl::StatusOr<NpyArray<T>> ParseNpy<T>(std::string_view, const std::string&);    \
  template absl::StatusOr<NpyArray<T>> ReadNpy<T>(const std::string&);                       \
  template absl::Status WriteNpy<T>(const std::string&, std::span<const T>, std::span<const int64_t>);
CEMB_NPY_INSTANTIATE(float)
CEMB_NPY_INSTANTIATE(int32_t)
CEMB_NPY_INSTANTIATE(int64_t)
#undef CEMB_NPY_INSTANTIATE

absl::StatusOr<NpyReader> NpyReader::Open(const std::string& path) {
  NpyReader r;
  r.path_ = path;
  CEMB_ASSIGN_OR_RETURN(r.file_, base::File::OpenForReading(path));
  // The fixed prefix, then the header it announces.
  std::string head(12, '\0');
  CEMB_ASSIGN_OR_RETURN(size_t got, base::ReadSome(r.file_.fd(), path, head.data(), head.size()));
  while (got < head.size()) {
    CEMB_ASSIGN_OR_RETURN(size_t more, base::ReadSome(r.file_.fd(), path, head.data() + got, head.size() - got));
    if (more == 0) break;
    got += more;
  }
  head.resize(got);
  size_t header_end = head.size();
  if (head.size() >= 10 && std::memcmp(head.data(), kMagic, kMagicLen) == 0) {
    const int major = static_cast<unsigned char>(head[6]);
    uint64_t len = static_cast<unsigned char>(head[8]) | (static_cast<unsigned char>(head[9]) << 8);
    if ((major == 2 || major == 3) && head.size() == 12) {
      len |= (uint64_t{static_cast<unsigned char>(head[10])} << 16) | (uint64_t{static_cast<unsigned char>(head[11])} << 24);
      header_end = 12 + len;
    } else {
      header_end = 10 + len;
    }
  }
  // A header is at most 4 GiB by the format; a file shorter than it says is
  // caught by ParseHeader.
  header_end = std::min<uint64_t>(header_end, r.file_.size());
  if (header_end > head.size()) {
    const size_t have = head.size();
    head.resize(header_end);
    absl::Status s = base::ReadExactly(r.file_.fd(), path, head.data() + have, header_end - have);
    if (!s.ok()) return s;
  }
  CEMB_ASSIGN_OR_RETURN(const Header h, ParseHeader(head, path));
  if (!DtypeOfDescr(h.descr, &r.dtype_)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": dtype '", h.descr,
                                                   "' is not float32 ('<f4'), bfloat16 ('<V2', 'bfloat16'), "
                                                   "int32 or int64"));
  }
  const uint64_t available = r.file_.size() - h.data_offset;
  if (available != h.count * ItemSize(r.dtype_)) return SizeError(path, h, ItemSize(r.dtype_), available);
  // Position at the data (the bytes read past the header, if any, again).
  if (::lseek(r.file_.fd(), static_cast<off_t>(h.data_offset), SEEK_SET) < 0) {
    return base::ErrnoStatus(errno, path, "seek");
  }
  r.shape_ = h.shape;
  r.count_ = static_cast<int64_t>(h.count);
  return r;
}

std::string NpyReader::shape_text() const { return ShapeText(shape_); }

absl::Status NpyReader::ReadFloats(std::span<float> out) {
  if (dtype_ != NpyDtype::kFloat32 && dtype_ != NpyDtype::kBfloat16) {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": dtype ", NpyDtypeName(dtype_), " where float32 or bfloat16 was expected"));
  }
  const int64_t n = static_cast<int64_t>(out.size());
  if (n > count_ - read_) {
    return absl::OutOfRangeError(absl::StrCat(path_, ": ", n, " elements asked after ", read_, " of ", count_));
  }
  if (dtype_ == NpyDtype::kFloat32) {
    CEMB_RETURN_IF_ERROR(base::ReadExactly(file_.fd(), path_, out.data(), out.size_bytes()));
  } else {
    bf16_.resize(out.size());
    CEMB_RETURN_IF_ERROR(base::ReadExactly(file_.fd(), path_, bf16_.data(), bf16_.size() * sizeof(uint16_t)));
    for (size_t i = 0; i < out.size(); ++i) out[i] = std::bit_cast<float>(uint32_t{bf16_[i]} << 16);
  }
  read_ += n;
  return absl::OkStatus();
}

absl::Status ReadNpyFloats(const std::string& path, std::span<const int64_t> shape, std::vector<float>& out) {
  CEMB_ASSIGN_OR_RETURN(NpyReader r, NpyReader::Open(path));
  if (!std::equal(r.shape().begin(), r.shape().end(), shape.begin(), shape.end())) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": shape ", r.shape_text(), " where ",
                     ShapeText(shape), " is needed"));
  }
  out.resize(static_cast<size_t>(r.count()));
  return r.ReadFloats(out);
}

absl::StatusOr<NpyWriter> NpyWriter::Create(const std::string& path, std::span<const int64_t> shape) {
  int64_t count = 1;
  for (int64_t d : shape) {
    if (d < 0) return absl::InvalidArgumentError(absl::StrCat(path, ": negative dimension"));
    count *= d;
  }
  CEMB_ASSIGN_OR_RETURN(base::AtomicFile file, base::AtomicFile::Create(path));
  const std::string header = HeaderBytes("<f4", shape);
  CEMB_RETURN_IF_ERROR(file.Append(header.data(), header.size()));
  NpyWriter w(std::move(file));
  w.count_ = count;
  return w;
}

absl::Status NpyWriter::Append(std::span<const float> values) {
  if (static_cast<int64_t>(values.size()) > count_ - written_) {
    return absl::OutOfRangeError(absl::StrCat(file_.path(), ": ", values.size(), " more values after ", written_,
                                              " of ", count_));
  }
  CEMB_RETURN_IF_ERROR(file_.Append(values.data(), values.size_bytes()));
  written_ += static_cast<int64_t>(values.size());
  return absl::OkStatus();
}

absl::Status NpyWriter::Commit() {
  if (written_ != count_) {
    return absl::FailedPreconditionError(
        absl::StrCat(file_.path(), ": ", written_, " of ", count_, " values written"));
  }
  return file_.Commit();
}

}  // namespace cemb
