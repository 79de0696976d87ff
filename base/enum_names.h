// EnumName: the names of an enum's values, in one list per enum, the one
// place each name is spelled. The enum's Name function, config parsing, its
// error messages and anything that prints or reads the names use that list.
//
//   enum class Color { kRed, kGreen };
//   inline constexpr EnumName<Color> kColorNames[] = {{Color::kRed, "red"}, {Color::kGreen, "green"}};
//   inline const char* ColorName(Color c) { return NameOf(kColorNames, c); }
//   CEMB_ASSIGN_OR_RETURN(Color c, ParseName(kColorNames, "green", "color"));
#ifndef CEMB_BASE_ENUM_NAMES_H_
#define CEMB_BASE_ENUM_NAMES_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace cemb {

template <typename E>
struct EnumName {
  E value;
  const char* name;
};

// The name of `value`; "?" when the list lacks it.
template <typename E, size_t N>
constexpr const char* NameOf(const EnumName<E> (&names)[N], E value) {
  for (const EnumName<E>& n : names) {
    if (n.value == value) return n.name;
  }
  return "?";
}

// "a, b, c", in the list's order.
template <typename E, size_t N>
std::string JoinNames(const EnumName<E> (&names)[N]) {
  std::string out;
  for (const EnumName<E>& n : names) absl::StrAppend(&out, out.empty() ? "" : ", ", n.name);
  return out;
}

// The value called `name` exactly; InvalidArgument "unknown <what> 'x'
// (expected one of a, b, c)" otherwise.
template <typename E, size_t N>
absl::StatusOr<E> ParseName(const EnumName<E> (&names)[N], std::string_view name, std::string_view what) {
  for (const EnumName<E>& n : names) {
    if (name == n.name) return n.value;
  }
  // (Debian's Abseil has its own string_view: std::string crosses over.)
  return absl::InvalidArgumentError(absl::StrCat("unknown ", std::string(what), " '", std::string(name),
                                                 "' (expected one of ", JoinNames(names), ")"));
}

}  // namespace cemb

#endif  // CEMB_BASE_ENUM_NAMES_H_
