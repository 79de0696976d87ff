#include "dlrm/npy.h"

#include <cstring>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/file.h"
#include "base/status_macros.h"

namespace cemb::dlrm {
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

}  // namespace

template <typename T>
absl::StatusOr<NpyArray<T>> ParseNpy(std::string_view image, const std::string& name) {
  // Debian's Abseil has its own string_view type.
  const absl::string_view bytes(image.data(), image.size());
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
  descr = descr.substr(1, descr.size() - 2);
  const absl::string_view want(Dtype<T>::kCode);
  const bool order_ok = !descr.empty() && (descr[0] == '<' || descr[0] == '|' || descr[0] == '=');
  if (!order_ok || descr.substr(1) != want) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": dtype '", descr, "' where '<", want, "' was expected"));
  }
  if (fortran != "False") {
    return absl::InvalidArgumentError(absl::StrCat(name, ": fortran_order ", fortran, " is not supported"));
  }
  if (shape_text.size() < 2 || shape_text.front() != '(' || shape_text.back() != ')') {
    return Bad(name, absl::StrCat("bad shape ", shape_text));
  }
  NpyArray<T> array;
  uint64_t count = 1;
  for (absl::string_view part : absl::StrSplit(shape_text.substr(1, shape_text.size() - 2), ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (part.empty()) continue;  // "(3,)" and "()"
    int64_t dim = 0;
    if (!absl::SimpleAtoi(part, &dim) || dim < 0) return Bad(name, absl::StrCat("bad shape ", shape_text));
    if (dim != 0 && count > std::numeric_limits<uint64_t>::max() / sizeof(T) / static_cast<uint64_t>(dim)) {
      return Bad(name, absl::StrCat("shape too large ", shape_text));
    }
    count *= static_cast<uint64_t>(dim);
    array.shape.push_back(dim);
  }
  const uint64_t data_bytes = count * sizeof(T);
  const uint64_t available = bytes.size() - prefix - header_len;
  if (available != data_bytes) {
    return Bad(name, absl::StrCat("shape ", shape_text, " needs ", data_bytes, " data bytes, the file has ",
                                  available, available < data_bytes ? " (truncated)" : ""));
  }
  array.data.resize(count);
  if (count > 0) std::memcpy(array.data.data(), bytes.data() + prefix + header_len, data_bytes);
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
  std::string shape_text = "(";
  for (int64_t d : shape) {
    if (d < 0) return absl::InvalidArgumentError(absl::StrCat(path, ": negative dimension"));
    count *= static_cast<uint64_t>(d);
    absl::StrAppend(&shape_text, d, shape.size() == 1 ? "," : ", ");
  }
  if (shape.size() > 1) shape_text.resize(shape_text.size() - 2);
  shape_text += ")";
  if (count != data.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": shape ", shape_text, " has ", count, " elements, data has ", data.size()));
  }
  std::string header = absl::StrCat("{'descr': '<", Dtype<T>::kCode,
                                    "', 'fortran_order': False, 'shape': ", shape_text, ", }");
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
  out += header;

  CEMB_ASSIGN_OR_RETURN(base::AtomicFile file, base::AtomicFile::Create(path));
  CEMB_RETURN_IF_ERROR(file.Append(out.data(), out.size()));
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

}  // namespace cemb::dlrm
