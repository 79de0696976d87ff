// The Open Inference Protocol's (KServe v2) JSON, as dlrm-serve speaks it
// over HTTP/REST: an infer request's body parsed and checked into the batch
// a predictor scores, and the answers written back. No HTTP here and no
// model: a pure function of the body and the model's shape, so that tests
// and the libFuzzer target (fuzz/infer_request_fuzzer.cc) call it alone.
//
// A request holds one of two forms of the same samples (docs/serving.md has
// examples):
//   preprocessed  "dense"  FP32 [n, num_dense]          the dense features, as trained
//                 "sparse" INT64 [n, num_tables]         one row index per table per sample
//                 or, multi-hot, "sparse_lengths" INT64 [n, num_tables] (ids per table per
//                 sample) and "sparse" INT64 [total]: every sample's ids, sample by
//                 sample, table by table within a sample
//   raw Criteo    "int_features" INT64 [n, 13]           I1..I13 as in the TSV (null: missing)
//                 "cat_features" BYTES [n, 26]           C1..C26 as in the TSV: up to 8 hex
//                                                        digits ("": missing), or INT64 ids
//                                                        in [0, 2^32)
// INT32 is accepted wherever INT64 is. "data" is flat (row-major) or nested
// as the shape. Row indices are checked against the tables' rows here
// (ModelInputs::table_rows), so that a row out of range is named by the
// request's sample and table.
//
// Errors are a Status whose message names the input, the sample and the
// table (or feature) at fault: InvalidArgument for a malformed body, a
// wrong datatype, shape or value (HTTP 400; malformed JSON names the byte,
// line and column where it breaks); ResourceExhausted for more
// samples than the limit (HTTP 413).
//
// Thread safety: every function may be called from any number of threads
// (the parser keeps one simdjson parser per thread).
//
//   CEMB_ASSIGN_OR_RETURN(InferRequest r, ParseInferRequest(body, {.num_dense = 13, .num_tables = 26}));
//   std::vector<float> p(r.size);
//   ... score r ...
//   std::string answer = InferResponseJson("dlrm", "1000", r.id, p);
#ifndef CEMB_SERVER_PROTOCOL_H_
#define CEMB_SERVER_PROTOCOL_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/criteo.h"

namespace cemb::server {

// The names of the protocol's tensors.
inline constexpr char kDenseInput[] = "dense";
inline constexpr char kSparseInput[] = "sparse";
inline constexpr char kSparseLengthsInput[] = "sparse_lengths";
inline constexpr char kIntFeaturesInput[] = "int_features";
inline constexpr char kCatFeaturesInput[] = "cat_features";
inline constexpr char kProbabilitiesOutput[] = "probabilities";

// What a model takes.
struct ModelInputs {
  int64_t num_dense = 0;
  int num_tables = 0;
  // Each table's rows: told in the metadata; a row index is below them
  // (empty: below 2^31).
  std::vector<uint64_t> table_rows;
  // The model takes raw Criteo features (Predictor::PredictCriteo works:
  // trained on Criteo TSV, with its id mapping at hand).
  bool criteo = false;
};

struct RequestLimits {
  int64_t max_samples = 4096;  // per request (ResourceExhausted beyond)
};

enum class InputForm { kPreprocessed, kCriteo };

// One request's samples, in the form the predictor takes.
struct InferRequest {
  std::string id;  // the request's "id", echoed in the answer ("" when it had none)
  InputForm form = InputForm::kPreprocessed;
  int64_t size = 0;  // samples, >= 1
  // kPreprocessed: dense [size x num_dense]; per table, CSR offsets
  // (size + 1) and row indices.
  std::vector<float> dense;
  std::vector<std::vector<int32_t>> offsets;
  std::vector<std::vector<int32_t>> indices;
  // kCriteo: one row per sample (labels 0).
  std::vector<data::CriteoRow> rows;
};

// Parses and checks an infer request's body (the JSON text, any bytes).
[[nodiscard]] absl::StatusOr<InferRequest> ParseInferRequest(std::string_view body, const ModelInputs& model,
                                                             const RequestLimits& limits = {});

// The answer to an infer request: the output "probabilities" FP32 [n].
std::string InferResponseJson(std::string_view model_name, std::string_view model_version, std::string_view id,
                              std::span<const float> probabilities);

// The model metadata answer: its name, version, the inputs of both forms
// (the raw Criteo ones when model.criteo), the output, and
// "parameters": {"table_rows": [...]}.
std::string ModelMetadataJson(std::string_view model_name, std::string_view model_version, const ModelInputs& model);

// {"error": message}: the protocol's error object.
std::string ErrorJson(std::string_view message);

// `s` as a JSON string literal, quotes included.
std::string JsonQuote(std::string_view s);

}  // namespace cemb::server

#endif  // CEMB_SERVER_PROTOCOL_H_
