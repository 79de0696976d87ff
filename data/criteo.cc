#include "data/criteo.h"

#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/escaping.h"

namespace cemb::data {
namespace {

// 0..15 for a hex digit, 0xff otherwise.
constexpr std::array<uint8_t, 256> MakeHexTable() {
  std::array<uint8_t, 256> t{};
  for (auto& v : t) v = 0xff;
  for (int c = '0'; c <= '9'; ++c) t[c] = static_cast<uint8_t>(c - '0');
  for (int c = 'a'; c <= 'f'; ++c) t[c] = static_cast<uint8_t>(c - 'a' + 10);
  for (int c = 'A'; c <= 'F'; ++c) t[c] = static_cast<uint8_t>(c - 'A' + 10);
  return t;
}
constexpr std::array<uint8_t, 256> kHex = MakeHexTable();

// The field text for an error message: escaped, cut to 24 bytes.
std::string Shown(std::string_view s) {
  constexpr size_t kMax = 24;
  const std::string_view head = s.substr(0, kMax);
  std::string out = absl::CHexEscape(absl::string_view(head.data(), head.size()));
  if (s.size() > kMax) absl::StrAppend(&out, "...");
  return out;
}

absl::Status FieldError(int field, size_t offset, std::string_view text, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("field ", field + 1, " (", FieldName(field),
                                                 "), byte ", offset, ": '", Shown(text), "' ",
                                                 absl::string_view(what.data(), what.size())));
}

}  // namespace

std::string FieldName(int f) {
  if (f == 0) return "label";
  if (f <= kNumDense) return absl::StrCat("I", f);
  return absl::StrCat("C", f - kNumDense);
}

absl::Status ParseCriteoLine(std::string_view line, CriteoRow& row, size_t max_line_bytes) {
  if (line.size() > max_line_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("line is ", line.size(),
                                                   " bytes, longer than the limit of ",
                                                   max_line_bytes));
  }
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  const char* const begin = line.data();
  const char* const end = begin + line.size();
  const char* p = begin;
  uint64_t missing = 0;

  for (int f = 0; f < kNumFields; ++f) {
    // The field is [p, q).
    const char* q =
        p == end ? nullptr
                 : static_cast<const char*>(std::memchr(p, '\t', static_cast<size_t>(end - p)));
    const bool last = (f == kNumFields - 1);
    if (q == nullptr) {
      if (!last) {
        return absl::InvalidArgumentError(
            absl::StrCat("expected ", kNumFields, " tab-separated fields, found ", f + 1));
      }
      q = end;
    } else if (last) {
      int extra = 1;
      for (const char* r = q + 1; r < end; ++r) extra += (*r == '\t');
      return absl::InvalidArgumentError(
          absl::StrCat("expected ", kNumFields, " tab-separated fields, found ", kNumFields + extra));
    }
    const std::string_view text(p, static_cast<size_t>(q - p));
    const size_t offset = static_cast<size_t>(p - begin);

    if (f == 0) {
      if (text.size() != 1 || (text[0] != '0' && text[0] != '1')) {
        return FieldError(f, offset, text, "is not a label (0 or 1)");
      }
      row.label = static_cast<uint8_t>(text[0] - '0');
    } else if (f <= kNumDense) {
      int64_t value = 0;
      if (text.empty()) {
        missing |= uint64_t{1} << f;
      } else {
        size_t i = 0;
        const bool negative = text[0] == '-';
        if (negative) i = 1;
        if (i == text.size()) return FieldError(f, offset, text, "is not an integer");
        uint64_t magnitude = 0;
        constexpr uint64_t kLimit = uint64_t{std::numeric_limits<int64_t>::max()};
        for (; i < text.size(); ++i) {
          const unsigned d = static_cast<unsigned char>(text[i]) - '0';
          if (d > 9) return FieldError(f, offset, text, "is not an integer");
          if (magnitude > (kLimit - d) / 10) {
            return FieldError(f, offset, text, "is out of the 64-bit integer range");
          }
          magnitude = magnitude * 10 + d;
        }
        value = negative ? -static_cast<int64_t>(magnitude) : static_cast<int64_t>(magnitude);
      }
      row.dense[f - 1] = value;
    } else {
      uint32_t id = 0;
      if (text.empty()) {
        missing |= uint64_t{1} << f;
      } else {
        if (text.size() > 8) {
          return FieldError(f, offset, text, "is longer than 8 hex digits");
        }
        for (char c : text) {
          const uint8_t d = kHex[static_cast<unsigned char>(c)];
          if (d == 0xff) return FieldError(f, offset, text, "is not a hexadecimal id");
          id = (id << 4) | d;
        }
      }
      row.categorical[f - 1 - kNumDense] = id;
    }
    p = q + 1;
  }
  row.missing = missing;
  return absl::OkStatus();
}

}  // namespace cemb::data
