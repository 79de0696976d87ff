// libFuzzer target for dlrm-serve's request parser (server/protocol.h):
// any bytes as an infer request's body, parsed for a small model (3 dense
// features, 2 tables) and for the Criteo-shaped one (raw features too).
//
// Build (clang only):  cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++
//                        -DCEMB_BUILD_FUZZERS=ON && cmake --build build-fuzz --target infer_request_fuzzer
// Run:                 build-fuzz/fuzz/infer_request_fuzzer -max_total_time=60 NEW_DIR fuzz/corpus/infer_request
// (scripts/test.sh runs it for 60 seconds.)
//
// Properties checked on every input:
//   - the parser never crashes, reads out of bounds, leaks or overflows (ASan, UBSan);
//   - a request it accepts is a batch the predictor can take: 1 <= size <= the limit, dense
//     [size x num_dense], per table size + 1 offsets from 0, never decreasing, ending at
//     its indices' count; or size raw Criteo rows;
//   - a request it refuses gets InvalidArgument or ResourceExhausted with a message, and
//     the error answer made of that message is valid JSON (whatever bytes the body held).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "server/protocol.h"
#include "simdjson.h"

namespace {

using cemb::server::InferRequest;
using cemb::server::InputForm;
using cemb::server::ModelInputs;

constexpr cemb::server::RequestLimits kLimits{.max_samples = 64};

void Check(std::string_view body, const ModelInputs& model) {
  absl::StatusOr<InferRequest> r = cemb::server::ParseInferRequest(body, model, kLimits);
  if (!r.ok()) {
    if ((!absl::IsInvalidArgument(r.status()) && !absl::IsResourceExhausted(r.status())) ||
        r.status().message().empty()) {
      std::abort();
    }
    const std::string answer =
        cemb::server::ErrorJson(std::string_view(r.status().message().data(), r.status().message().size()));
    simdjson::dom::parser parser;
    simdjson::dom::element e;
    if (parser.parse(answer).get(e) != simdjson::SUCCESS) std::abort();
    return;
  }
  if (r->size < 1 || r->size > kLimits.max_samples) std::abort();
  const size_t n = static_cast<size_t>(r->size);
  if (r->form == InputForm::kCriteo) {
    if (!model.criteo || r->rows.size() != n) std::abort();
    return;
  }
  if (r->dense.size() != n * static_cast<size_t>(model.num_dense)) std::abort();
  if (r->offsets.size() != static_cast<size_t>(model.num_tables) || r->indices.size() != r->offsets.size()) {
    std::abort();
  }
  for (size_t t = 0; t < r->offsets.size(); ++t) {
    const auto& o = r->offsets[t];
    if (o.size() != n + 1 || o[0] != 0 || static_cast<size_t>(o.back()) != r->indices[t].size()) std::abort();
    for (size_t i = 0; i < n; ++i) {
      if (o[i + 1] < o[i]) std::abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  Check(body, {.num_dense = 3, .num_tables = 2});
  Check(body, {.num_dense = 13, .num_tables = 26, .criteo = true});
  return 0;
}
