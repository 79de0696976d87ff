#include "server/protocol.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"
#include "simdjson.h"

namespace cemb::server {
namespace {

namespace dom = simdjson::dom;

// One tensor of the request's "inputs", its fields found and typed.
struct Tensor {
  std::string name;
  std::string datatype;
  std::vector<int64_t> shape;
  dom::array data;
  int64_t elements = 0;  // the product of shape
};

// Debian's Abseil has its own string_view: StrCat takes std::string_view
// through this.
absl::string_view A(std::string_view s) { return {s.data(), s.size()}; }

absl::Status Invalid(const Tensor& t, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("input '", t.name, "': ", what));
}

std::string ShapeString(std::span<const int64_t> shape) { return absl::StrCat("[", absl::StrJoin(shape, ", "), "]"); }

const char* TypeName(dom::element e) {
  switch (e.type()) {
    case dom::element_type::ARRAY: return "an array";
    case dom::element_type::OBJECT: return "an object";
    case dom::element_type::INT64:
    case dom::element_type::UINT64: return "an integer";
    case dom::element_type::DOUBLE: return "a number with a fraction or an exponent";
    case dom::element_type::STRING: return "a string";
    case dom::element_type::BOOL: return "a boolean";
    case dom::element_type::NULL_VALUE: return "null";
  }
  return "a value";
}

// The fields of inputs[position]. Every element takes at least one byte of
// the body, so a shape whose product exceeds the body's size cannot be
// matched by its data: refused before anything is allocated for it.
absl::StatusOr<Tensor> ReadTensor(dom::element e, size_t position, size_t body_bytes) {
  Tensor t;
  dom::object o;
  if (e.get_object().get(o) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError(absl::StrCat("inputs[", position, "] is ", TypeName(e), ", not an object"));
  }
  std::string_view name;
  if (o["name"].get_string().get(name) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError(absl::StrCat("inputs[", position, "] has no string 'name'"));
  }
  t.name = std::string(name);
  std::string_view datatype;
  if (o["datatype"].get_string().get(datatype) != simdjson::SUCCESS) {
    return Invalid(t, "has no string 'datatype'");
  }
  t.datatype = std::string(datatype);
  dom::array shape;
  if (o["shape"].get_array().get(shape) != simdjson::SUCCESS) return Invalid(t, "has no array 'shape'");
  t.elements = 1;
  for (dom::element d : shape) {
    int64_t v = 0;
    if (d.get_int64().get(v) != simdjson::SUCCESS || v < 0) {
      return Invalid(t, "'shape' holds something other than non-negative integers");
    }
    if (t.shape.size() == 2) return Invalid(t, "'shape' has more than 2 dimensions");
    t.shape.push_back(v);
    if (v != 0 && t.elements > static_cast<int64_t>(body_bytes) / v) {
      return Invalid(t, absl::StrCat("'shape' ", ShapeString(t.shape), "... holds more elements than the body has bytes"));
    }
    t.elements *= v;
  }
  if (t.shape.empty()) return Invalid(t, "'shape' is empty");
  if (o["data"].get_array().get(t.data) != simdjson::SUCCESS) return Invalid(t, "has no array 'data'");
  return t;
}

// Calls f(k, element) for the tensor's elements in row-major order, k = 0,
// 1, ..., elements - 1: "data" flat, or nested as its [rows, columns] shape.
// f returns a Status; the first error stops the walk.
template <typename F>
absl::Status ForEachElement(const Tensor& t, F&& f) {
  const auto count_error = [&](const std::string& what) {
    return Invalid(t, absl::StrCat("'data' ", what, " for shape ", ShapeString(t.shape)));
  };
  bool nested = false;
  for (dom::element first : t.data) {
    nested = first.type() == dom::element_type::ARRAY && t.shape.size() == 2;
    break;
  }
  int64_t k = 0;
  if (!nested) {
    for (dom::element e : t.data) {
      if (k == t.elements) return count_error(absl::StrCat("holds more than ", t.elements, " elements"));
      CEMB_RETURN_IF_ERROR(f(k++, e));
    }
    if (k != t.elements) return count_error(absl::StrCat("holds ", k, " elements, not ", t.elements));
    return absl::OkStatus();
  }
  int64_t row = 0;
  for (dom::element r : t.data) {
    dom::array columns;
    if (r.get_array().get(columns) != simdjson::SUCCESS) {
      return count_error(absl::StrCat("mixes nested and flat elements (row ", row, " is ", TypeName(r), ")"));
    }
    if (row == t.shape[0]) return count_error(absl::StrCat("has more than ", t.shape[0], " rows"));
    int64_t c = 0;
    for (dom::element e : columns) {
      if (c == t.shape[1]) return count_error(absl::StrCat("row ", row, " has more than ", t.shape[1], " elements"));
      CEMB_RETURN_IF_ERROR(f(k++, e));
      ++c;
    }
    if (c != t.shape[1]) return count_error(absl::StrCat("row ", row, " has ", c, " elements, not ", t.shape[1]));
    ++row;
  }
  if (row != t.shape[0]) return count_error(absl::StrCat("has ", row, " rows, not ", t.shape[0]));
  return absl::OkStatus();
}

bool IsIntegerType(std::string_view datatype) { return datatype == "INT64" || datatype == "INT32"; }

absl::Status RequireDatatype(const Tensor& t, const std::string& expected) {
  const bool ok = expected == "INT64" ? IsIntegerType(t.datatype) : t.datatype == expected;
  if (ok) return absl::OkStatus();
  return Invalid(t, absl::StrCat("datatype ", t.datatype, ", expected ", expected,
                                 expected == "INT64" ? " (or INT32)" : ""));
}

// Requires shape [samples, columns] (samples < 0: any), and returns samples.
absl::StatusOr<int64_t> RequireMatrix(const Tensor& t, int64_t samples, int64_t columns,
                                      const char* samples_from) {
  if (t.shape.size() != 2 || t.shape[1] != columns) {
    return Invalid(t, absl::StrCat("shape ", ShapeString(t.shape), ", expected [n, ", columns, "]"));
  }
  if (samples >= 0 && t.shape[0] != samples) {
    return Invalid(t, absl::StrCat("shape ", ShapeString(t.shape), " holds ", t.shape[0], " samples, input '",
                                   samples_from, "' ", samples));
  }
  return t.shape[0];
}

absl::Status CheckSamples(const Tensor& t, const RequestLimits& limits) {
  if (t.shape[0] == 0) return Invalid(t, "shape [0, ...]: a request holds at least one sample");
  if (t.shape[0] > limits.max_samples) {
    return absl::ResourceExhaustedError(absl::StrCat("input '", t.name, "': ", t.shape[0],
                                                     " samples, more than a request may hold (",
                                                     limits.max_samples, ")"));
  }
  return absl::OkStatus();
}

// An integer element (int64, or uint64 within int64), or nullopt.
std::optional<int64_t> Integer(dom::element e) {
  int64_t v = 0;
  if (e.get_int64().get(v) == simdjson::SUCCESS) return v;
  return std::nullopt;
}

absl::Status NotAnInteger(const Tensor& t, const std::string& where, dom::element e) {
  uint64_t big = 0;
  if (e.get_uint64().get(big) == simdjson::SUCCESS) return Invalid(t, absl::StrCat(where, ": ", big, " is beyond int64"));
  return Invalid(t, absl::StrCat(where, ": ", TypeName(e), ", not an integer"));
}

std::string SampleTable(int64_t sample, int64_t table) { return absl::StrCat("sample ", sample, ", table ", table); }

// A row index of sample `sample`'s bag of table `table` (its id `id` of a
// multi-hot bag; -1: one id per table). A row below 0 or at or past the
// table's rows (model.table_rows, when given) is refused here, named by
// sample and table: the predictor checks again, but names only its own
// batch's bags. The name is made only for an error: this runs for every id.
absl::StatusOr<int32_t> RowIndex(const Tensor& t, dom::element e, const ModelInputs& model, int64_t sample,
                                 int64_t table, int64_t id = -1) {
  const auto where = [&] {
    return id < 0 ? SampleTable(sample, table) : absl::StrCat(SampleTable(sample, table), ", id ", id);
  };
  const std::optional<int64_t> v = Integer(e);
  if (!v) return NotAnInteger(t, where(), e);
  if (*v < 0) return Invalid(t, absl::StrCat(where(), ": row ", *v, " is negative"));
  const uint64_t rows = static_cast<size_t>(table) < model.table_rows.size()
                            ? model.table_rows[static_cast<size_t>(table)]
                            : uint64_t{std::numeric_limits<int32_t>::max()} + 1;
  if (static_cast<uint64_t>(*v) >= rows) {
    return Invalid(t, absl::StrCat(where(), ": row ", *v, " is out of range (the table has ", rows, " rows)"));
  }
  return static_cast<int32_t>(*v);
}

absl::Status ParsePreprocessed(const Tensor* dense, const Tensor* sparse, const Tensor* lengths,
                               const ModelInputs& model, const RequestLimits& limits, InferRequest& r) {
  if (dense == nullptr) return absl::InvalidArgumentError("missing input 'dense' (FP32 [n, num_dense])");
  if (sparse == nullptr) return absl::InvalidArgumentError("missing input 'sparse' (INT64 [n, tables])");
  const int64_t nd = model.num_dense, nt = model.num_tables;
  CEMB_RETURN_IF_ERROR(RequireDatatype(*dense, "FP32"));
  CEMB_ASSIGN_OR_RETURN(const int64_t n, RequireMatrix(*dense, -1, nd, ""));
  CEMB_RETURN_IF_ERROR(CheckSamples(*dense, limits));
  CEMB_RETURN_IF_ERROR(RequireDatatype(*sparse, "INT64"));
  r.form = InputForm::kPreprocessed;
  r.size = n;
  r.dense.resize(static_cast<size_t>(n * nd));
  CEMB_RETURN_IF_ERROR(ForEachElement(*dense, [&](int64_t k, dom::element e) -> absl::Status {
    double v = 0;
    if (e.get_double().get(v) != simdjson::SUCCESS) {
      return Invalid(*dense, absl::StrCat("sample ", k / nd, ", feature ", k % nd, ": ", TypeName(e), ", not a number"));
    }
    const float f = static_cast<float>(v);
    if (!std::isfinite(f)) {
      return Invalid(*dense, absl::StrCat("sample ", k / nd, ", feature ", k % nd, ": ", v, " is not a finite FP32"));
    }
    r.dense[k] = f;
    return absl::OkStatus();
  }));
  r.offsets.assign(nt, std::vector<int32_t>(static_cast<size_t>(n + 1), 0));
  r.indices.assign(nt, {});
  if (lengths == nullptr) {
    CEMB_RETURN_IF_ERROR(RequireMatrix(*sparse, n, nt, kDenseInput).status());
    for (int64_t t = 0; t < nt; ++t) {
      r.indices[t].resize(static_cast<size_t>(n));
      for (int64_t i = 0; i <= n; ++i) r.offsets[t][i] = static_cast<int32_t>(i);
    }
    return ForEachElement(*sparse, [&](int64_t k, dom::element e) -> absl::Status {
      CEMB_ASSIGN_OR_RETURN(r.indices[k % nt][k / nt], RowIndex(*sparse, e, model, k / nt, k % nt));
      return absl::OkStatus();
    });
  }
  // Multi-hot: lengths [n, tables], then every sample's ids in order.
  CEMB_RETURN_IF_ERROR(RequireDatatype(*lengths, "INT64"));
  CEMB_RETURN_IF_ERROR(RequireMatrix(*lengths, n, nt, kDenseInput).status());
  std::vector<int64_t> length(static_cast<size_t>(n * nt));
  int64_t total = 0;
  CEMB_RETURN_IF_ERROR(ForEachElement(*lengths, [&](int64_t k, dom::element e) -> absl::Status {
    const std::optional<int64_t> v = Integer(e);
    if (!v) return NotAnInteger(*lengths, SampleTable(k / nt, k % nt), e);
    if (*v < 0) return Invalid(*lengths, absl::StrCat(SampleTable(k / nt, k % nt), ": negative length ", *v));
    if (*v > sparse->elements) {
      return Invalid(*lengths, absl::StrCat(SampleTable(k / nt, k % nt), ": length ", *v,
                                            " is more than input 'sparse' holds (", sparse->elements, ")"));
    }
    length[k] = *v;
    total += *v;  // at most n * tables * elements of 'sparse': no overflow
    return absl::OkStatus();
  }));
  if (sparse->shape.size() != 1 || sparse->shape[0] != total) {
    return Invalid(*sparse, absl::StrCat("shape ", ShapeString(sparse->shape), "; with 'sparse_lengths' it is [",
                                         total, "] (the lengths' sum): every sample's ids, table by table"));
  }
  if (total > std::numeric_limits<int32_t>::max()) return Invalid(*sparse, "holds more ids than an int32 offset");
  for (int64_t t = 0; t < nt; ++t) {
    for (int64_t i = 0; i < n; ++i) {
      r.offsets[t][i + 1] = static_cast<int32_t>(r.offsets[t][i] + length[i * nt + t]);
    }
    r.indices[t].resize(static_cast<size_t>(r.offsets[t][n]));
  }
  // Element k belongs to sample i, table t, position j of that bag.
  int64_t i = 0, t = 0, j = 0;
  return ForEachElement(*sparse, [&](int64_t, dom::element e) -> absl::Status {
    while (j == length[i * nt + t]) {  // the next non-empty bag (the walk holds exactly `total` ids)
      j = 0;
      if (++t == nt) t = 0, ++i;
    }
    CEMB_ASSIGN_OR_RETURN(r.indices[t][r.offsets[t][i] + j],
                          RowIndex(*sparse, e, model, i, t, j));
    ++j;
    return absl::OkStatus();
  });
}

// A categorical field as the TSV writes it: empty (missing) or 1..8 hex digits.
bool ParseHexId(std::string_view s, uint32_t* id) {
  if (s.size() > 8) return false;
  uint32_t v = 0;
  for (char c : s) {
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) return false;
    v = v << 4 | static_cast<uint32_t>(d);
  }
  *id = v;
  return true;
}

absl::Status ParseCriteo(const Tensor* ints, const Tensor* cats, const ModelInputs& model,
                         const RequestLimits& limits, InferRequest& r) {
  if (!model.criteo) {
    return absl::InvalidArgumentError(
        "the model takes no raw Criteo features ('int_features', 'cat_features'): it was not trained on Criteo TSV, "
        "or its id mapping is not in the checkpoint; send 'dense' and 'sparse'");
  }
  if (ints == nullptr) return absl::InvalidArgumentError("missing input 'int_features' (INT64 [n, 13])");
  if (cats == nullptr) return absl::InvalidArgumentError("missing input 'cat_features' (BYTES [n, 26])");
  constexpr int64_t nd = data::kNumDense, nc = data::kNumCategorical;
  CEMB_RETURN_IF_ERROR(RequireDatatype(*ints, "INT64"));
  CEMB_ASSIGN_OR_RETURN(const int64_t n, RequireMatrix(*ints, -1, nd, ""));
  CEMB_RETURN_IF_ERROR(CheckSamples(*ints, limits));
  if (cats->datatype != "BYTES" && cats->datatype != "UINT32" && !IsIntegerType(cats->datatype)) {
    return Invalid(*cats, absl::StrCat("datatype ", cats->datatype,
                                       ", expected BYTES (hex ids as in the TSV) or INT64 (ids)"));
  }
  CEMB_RETURN_IF_ERROR(RequireMatrix(*cats, n, nc, kIntFeaturesInput).status());
  r.form = InputForm::kCriteo;
  r.size = n;
  r.rows.assign(static_cast<size_t>(n), data::CriteoRow{});
  CEMB_RETURN_IF_ERROR(ForEachElement(*ints, [&](int64_t k, dom::element e) -> absl::Status {
    data::CriteoRow& row = r.rows[k / nd];
    if (e.is_null()) {
      row.missing |= uint64_t{1} << (1 + k % nd);
      return absl::OkStatus();
    }
    const std::optional<int64_t> v = Integer(e);
    if (!v) return NotAnInteger(*ints, absl::StrCat("sample ", k / nd, ", feature I", k % nd + 1), e);
    row.dense[k % nd] = *v;
    return absl::OkStatus();
  }));
  const bool hex = cats->datatype == "BYTES";
  return ForEachElement(*cats, [&](int64_t k, dom::element e) -> absl::Status {
    data::CriteoRow& row = r.rows[k / nc];
    const int64_t c = k % nc;
    const std::string where = absl::StrCat("sample ", k / nc, ", table ", c, " (C", c + 1, ")");
    uint32_t id = 0;
    if (hex) {
      std::string_view s;
      if (e.get_string().get(s) != simdjson::SUCCESS) {
        return Invalid(*cats, absl::StrCat(where, ": ", TypeName(e), ", not a string of hex digits"));
      }
      if (!ParseHexId(s, &id)) {
        return Invalid(*cats, absl::StrCat(where, ": '", A(s.substr(0, 16)), "' is not an id of 1 to 8 hex digits"));
      }
      if (s.empty()) row.missing |= uint64_t{1} << (1 + nd + c);
    } else {
      const std::optional<int64_t> v = Integer(e);
      if (!v) return NotAnInteger(*cats, where, e);
      if (*v < 0 || *v > std::numeric_limits<uint32_t>::max()) {
        return Invalid(*cats, absl::StrCat(where, ": id ", *v, " is not in [0, 2^32)"));
      }
      id = static_cast<uint32_t>(*v);
    }
    row.categorical[c] = id;
    return absl::OkStatus();
  });
}

// The one output a request may ask for.
absl::Status CheckOutputs(dom::array outputs) {
  size_t position = 0;
  for (dom::element o : outputs) {
    std::string_view name;
    if (o["name"].get_string().get(name) != simdjson::SUCCESS) {
      return absl::InvalidArgumentError(absl::StrCat("outputs[", position, "] has no string 'name'"));
    }
    if (name != kProbabilitiesOutput) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown output '", A(name), "': the model answers '", kProbabilitiesOutput, "'"));
    }
    ++position;
  }
  return absl::OkStatus();
}

// Where a body that simdjson refused breaks: simdjson's DOM errors carry
// no position, nlohmann::json's do. Its SAX parser builds nothing (no
// allocation, no recursion however deep the body nests) and runs only on a
// refused body. Empty when nlohmann accepts what simdjson did not (e.g. an
// integer beyond 64 bits).
std::string LocateSyntaxError(std::string_view body) {
  struct Locator : nlohmann::json_sax<nlohmann::json> {
    bool null() override { return true; }
    bool boolean(bool) override { return true; }
    bool number_integer(number_integer_t) override { return true; }
    bool number_unsigned(number_unsigned_t) override { return true; }
    bool number_float(number_float_t, const string_t&) override { return true; }
    bool string(string_t&) override { return true; }
    bool binary(binary_t&) override { return true; }
    bool start_object(std::size_t) override { return true; }
    bool key(string_t&) override { return true; }
    bool end_object() override { return true; }
    bool start_array(std::size_t) override { return true; }
    bool end_array() override { return true; }
    bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) override {
      // e.what(): "[json.exception.parse_error.101] parse error at line L, column C: what"
      std::string_view what = e.what();
      if (const size_t at = what.find("parse error at "); at != std::string_view::npos) what.remove_prefix(at + 15);
      const size_t colon = what.find(": ");
      where = colon == std::string_view::npos
                  ? absl::StrCat("byte ", position, ": ", A(what))
                  : absl::StrCat("byte ", position, " (", A(what.substr(0, colon)), "): ", A(what.substr(colon + 2)));
      return false;
    }
    std::string where;
  } locator;
  nlohmann::json::sax_parse(body.begin(), body.end(), &locator);
  return locator.where;
}

void AppendTensorMetadata(std::string& s, const char* name, const char* datatype, int64_t columns) {
  absl::StrAppend(&s, s.back() == '[' ? "" : ",", "{\"name\":\"", name, "\",\"datatype\":\"", datatype,
                  "\",\"shape\":[-1", columns > 0 ? absl::StrCat(",", columns) : "", "]}");
}

}  // namespace

absl::StatusOr<InferRequest> ParseInferRequest(std::string_view body, const ModelInputs& model,
                                               const RequestLimits& limits) {
  // One parser per thread: its buffers grow to the largest body it parsed
  // and are reused.
  thread_local dom::parser parser;
  dom::element root;
  if (const simdjson::error_code error = parser.parse(body.data(), body.size()).get(root); error) {
    const std::string where = LocateSyntaxError(body);
    return absl::InvalidArgumentError(where.empty() ? absl::StrCat("malformed JSON: ", simdjson::error_message(error))
                                                    : absl::StrCat("malformed JSON at ", where));
  }
  dom::object request;
  if (root.get_object().get(request) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError(absl::StrCat("the body is ", TypeName(root), ", not a JSON object"));
  }
  InferRequest r;
  dom::array inputs;
  bool has_inputs = false;
  for (dom::key_value_pair field : request) {
    if (field.key == "id") {
      std::string_view id;
      if (field.value.get_string().get(id) != simdjson::SUCCESS) {
        return absl::InvalidArgumentError(absl::StrCat("'id' is ", TypeName(field.value), ", not a string"));
      }
      r.id = std::string(id);
    } else if (field.key == "inputs") {
      if (field.value.get_array().get(inputs) != simdjson::SUCCESS) {
        return absl::InvalidArgumentError(absl::StrCat("'inputs' is ", TypeName(field.value), ", not an array"));
      }
      has_inputs = true;
    } else if (field.key == "outputs") {
      dom::array outputs;
      if (field.value.get_array().get(outputs) != simdjson::SUCCESS) {
        return absl::InvalidArgumentError(absl::StrCat("'outputs' is ", TypeName(field.value), ", not an array"));
      }
      CEMB_RETURN_IF_ERROR(CheckOutputs(outputs));
    }  // "parameters" and anything else: not read
  }
  if (!has_inputs) return absl::InvalidArgumentError("missing 'inputs'");

  std::vector<Tensor> tensors;
  const Tensor *dense = nullptr, *sparse = nullptr, *lengths = nullptr, *ints = nullptr, *cats = nullptr;
  for (dom::element e : inputs) {
    CEMB_ASSIGN_OR_RETURN(Tensor t, ReadTensor(e, tensors.size(), body.size()));
    for (const Tensor& other : tensors) {
      if (other.name == t.name) return Invalid(t, "given twice");
    }
    if (t.name != kDenseInput && t.name != kSparseInput && t.name != kSparseLengthsInput &&
        t.name != kIntFeaturesInput && t.name != kCatFeaturesInput) {
      return Invalid(t, absl::StrCat("unknown input: the model takes 'dense' and 'sparse' (and 'sparse_lengths' for "
                                     "several ids per table)",
                                     model.criteo ? ", or 'int_features' and 'cat_features'" : ""));
    }
    tensors.push_back(std::move(t));
  }
  for (const Tensor& t : tensors) {
    (t.name == kDenseInput            ? dense
     : t.name == kSparseInput         ? sparse
     : t.name == kSparseLengthsInput  ? lengths
     : t.name == kIntFeaturesInput    ? ints
                                      : cats) = &t;
  }
  const bool preprocessed = dense || sparse || lengths;
  if (preprocessed && (ints || cats)) {
    return absl::InvalidArgumentError(
        "the request mixes the preprocessed inputs ('dense', 'sparse') with the raw Criteo ones ('int_features', "
        "'cat_features'): send one form");
  }
  if (tensors.empty()) return absl::InvalidArgumentError("'inputs' is empty");
  CEMB_RETURN_IF_ERROR(preprocessed ? ParsePreprocessed(dense, sparse, lengths, model, limits, r)
                                    : ParseCriteo(ints, cats, model, limits, r));
  return r;
}

std::string JsonQuote(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c >= 0x80) {
          // Control characters, and every byte outside ASCII (the text may
          // echo a request's invalid UTF-8): \u00XX keeps the answer valid JSON.
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
  return out;
}

std::string ErrorJson(std::string_view message) { return absl::StrCat("{\"error\":", JsonQuote(message), "}"); }

std::string InferResponseJson(std::string_view model_name, std::string_view model_version, std::string_view id,
                              std::span<const float> probabilities) {
  std::string s = absl::StrCat("{\"model_name\":", JsonQuote(model_name), ",\"model_version\":",
                               JsonQuote(model_version));
  if (!id.empty()) absl::StrAppend(&s, ",\"id\":", JsonQuote(id));
  absl::StrAppend(&s, ",\"outputs\":[{\"name\":\"", kProbabilitiesOutput, "\",\"datatype\":\"FP32\",\"shape\":[",
                  probabilities.size(), "],\"data\":[");
  s.reserve(s.size() + probabilities.size() * 14 + 8);
  char buf[32];
  for (size_t i = 0; i < probabilities.size(); ++i) {
    if (i) s += ',';
    // The shortest text that reads back as the same float.
    const std::to_chars_result end = std::to_chars(buf, buf + sizeof buf, probabilities[i]);
    s.append(buf, end.ptr);
  }
  s += "]}]}";
  return s;
}

std::string ModelMetadataJson(std::string_view model_name, std::string_view model_version, const ModelInputs& model) {
  std::string s = absl::StrCat("{\"name\":", JsonQuote(model_name), ",\"versions\":[", JsonQuote(model_version),
                               "],\"platform\":\"cemb_dlrm\",\"inputs\":[");
  AppendTensorMetadata(s, kDenseInput, "FP32", model.num_dense);
  AppendTensorMetadata(s, kSparseInput, "INT64", model.num_tables);
  AppendTensorMetadata(s, kSparseLengthsInput, "INT64", model.num_tables);
  if (model.criteo) {
    AppendTensorMetadata(s, kIntFeaturesInput, "INT64", data::kNumDense);
    AppendTensorMetadata(s, kCatFeaturesInput, "BYTES", data::kNumCategorical);
  }
  s += "],\"outputs\":[";
  AppendTensorMetadata(s, kProbabilitiesOutput, "FP32", 0);
  absl::StrAppend(&s, "],\"parameters\":{\"table_rows\":[", absl::StrJoin(model.table_rows, ","), "]}}");
  return s;
}

}  // namespace cemb::server
