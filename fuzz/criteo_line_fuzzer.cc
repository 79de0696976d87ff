// libFuzzer target for the Criteo line parser (data/criteo.h).
//
// Build (clang only):  cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++-14
//                        -DCEMB_BUILD_FUZZERS=ON && cmake --build build-fuzz --target criteo_line_fuzzer
// Run:                 build-fuzz/fuzz/criteo_line_fuzzer -max_len=4200 fuzz/corpus/criteo_line
//
// Properties checked on every input:
//   - the parser never crashes, reads out of bounds or overflows (ASan, UBSan);
//   - an accepted line has exactly 39 tabs and a label of 0 or 1;
//   - an accepted line, printed back in canonical form, parses to the same row;
//   - a rejected line gets a non-empty InvalidArgument message.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "data/criteo.h"

namespace {

std::string Canonical(const cemb::data::CriteoRow& row) {
  std::string s(1, static_cast<char>('0' + row.label));
  char buf[32];
  for (int i = 0; i < cemb::data::kNumDense; ++i) {
    s += '\t';
    if (!row.dense_missing(i)) {
      std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(row.dense[i]));
      s += buf;
    }
  }
  for (int i = 0; i < cemb::data::kNumCategorical; ++i) {
    s += '\t';
    if (!row.categorical_missing(i)) {
      std::snprintf(buf, sizeof buf, "%08x", row.categorical[i]);
      s += buf;
    }
  }
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view line(reinterpret_cast<const char*>(data), size);
  cemb::data::CriteoRow row;
  const absl::Status status = cemb::data::ParseCriteoLine(line, row);
  if (!status.ok()) {
    if (status.code() != absl::StatusCode::kInvalidArgument || status.message().empty()) std::abort();
    return 0;
  }
  if (row.label > 1) std::abort();
  size_t tabs = 0;
  for (char c : line) tabs += (c == '\t');
  if (tabs != 39) std::abort();
  cemb::data::CriteoRow again;
  const std::string canonical = Canonical(row);
  if (!cemb::data::ParseCriteoLine(canonical, again).ok()) std::abort();
  if (again.label != row.label || again.dense != row.dense || again.categorical != row.categorical ||
      again.missing != row.missing) {
    std::abort();
  }
  return 0;
}
