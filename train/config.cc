#include "train/config.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <unistd.h>
#include <functional>
#include <set>
#include <type_traits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "base/file.h"
#include "base/status_macros.h"
#include "data/criteo.h"
#include "yaml-cpp/yaml.h"

namespace cemb::train {
namespace {

// ---------------------------------------------------------------------------
// Scalar parsing (our own, so that "12abc" or "1.5" for an integer is an
// error rather than whatever yaml-cpp's conversions make of it).

std::string Quote(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return "nothing";
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a map";
  return absl::StrCat("'", node.Scalar(), "'");
}

bool ParseInt(absl::string_view text, int64_t* out) {
  std::string s(absl::StripAsciiWhitespace(text));
  s.erase(std::remove(s.begin(), s.end(), '_'), s.end());  // 10_000_000
  return !s.empty() && absl::SimpleAtoi(s, out);
}

bool ParseDouble(absl::string_view text, double* out) {
  std::string s(absl::StripAsciiWhitespace(text));
  s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
  return !s.empty() && absl::SimpleAtod(s, out) && std::isfinite(*out);
}

bool ParseBool(absl::string_view text, bool* out) {
  const std::string s = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  if (s == "true" || s == "yes" || s == "on") return *out = true, true;
  if (s == "false" || s == "no" || s == "off") return *out = false, true;
  return false;
}

// A cache size: a fraction in [0, 1] ("0.25", "25%") or bytes ("0", "4096",
// "512MiB", "2GiB", "1.5GB"). Whole numbers above 1 are bytes; zero (a
// fraction or a percentage) is CacheSize::Bytes(0).
bool ParseCacheSize(absl::string_view text, CacheSize* out) {
  std::string s(absl::StripAsciiWhitespace(text));
  if (s.empty()) return false;
  if (s.back() == '%') {
    double p;
    if (!ParseDouble(absl::string_view(s).substr(0, s.size() - 1), &p) || p < 0 || p > 100) return false;
    *out = p == 0 ? CacheSize::Bytes(0) : CacheSize::Fraction(p / 100);
    return true;
  }
  size_t unit_at = s.size();
  while (unit_at > 0 && std::isalpha(static_cast<unsigned char>(s[unit_at - 1]))) --unit_at;
  const std::string unit = absl::AsciiStrToLower(s.substr(unit_at));
  double v;
  if (!ParseDouble(absl::string_view(s).substr(0, unit_at), &v) || v < 0) return false;
  if (unit.empty()) {
    if (v <= 1.0) {
      *out = v == 0 ? CacheSize::Bytes(0) : CacheSize::Fraction(v);
      return true;
    }
    if (v != std::floor(v)) return false;
    *out = CacheSize::Bytes(static_cast<int64_t>(v));
    return true;
  }
  static const std::pair<const char*, double> kUnits[] = {
      {"b", 1},           {"k", 1e3},          {"kb", 1e3},         {"m", 1e6},
      {"mb", 1e6},        {"g", 1e9},          {"gb", 1e9},         {"t", 1e12},
      {"tb", 1e12},       {"kib", 1024.0},     {"mib", 1048576.0},  {"gib", 1073741824.0},
      {"tib", 1099511627776.0}};
  for (const auto& [name, scale] : kUnits) {
    if (unit == name) {
      *out = CacheSize::Bytes(static_cast<int64_t>(v * scale));
      return true;
    }
  }
  return false;
}

// ---------------------------------------------------------------------------
// Walking the YAML tree with the key path and the file in every message.

struct Context {
  std::string file;
  std::set<std::string> overridden;  // key paths set by --set
  // Every key a getter read, with the value it took (the default when
  // absent), in reading order: TrainConfig::settings.
  std::vector<std::pair<std::string, std::string>>* read = nullptr;
};

// data.hotness as messages name it: "<file>: data.hotness".
std::string HotnessKey(const std::string& file) { return absl::StrCat(file, ": data.hotness"); }

// A double as the shortest text that reads back as the same value.
std::string ShortestDouble(double v) {
  for (int digits = 6; digits < 17; ++digits) {
    std::string s = absl::StrFormat("%.*g", digits, v);
    double back;
    if (absl::SimpleAtod(s, &back) && back == v) return s;
  }
  return absl::StrFormat("%.17g", v);
}
std::string Text(int64_t v) { return absl::StrCat(v); }
std::string Text(double v) { return ShortestDouble(v); }
std::string Text(bool v) { return v ? "true" : "false"; }
std::string Text(const std::string& v) { return v; }
std::string Text(const CacheSize& v) {
  return v.bytes >= 0 ? absl::StrCat(v.bytes) : absl::StrCat(ShortestDouble(v.fraction * 100), "%");
}
template <typename T>
std::string Text(const std::vector<T>& v) {
  std::vector<std::string> parts;
  for (const T& x : v) parts.push_back(Text(static_cast<std::conditional_t<std::is_integral_v<T>, int64_t, T>>(x)));
  return absl::StrJoin(parts, ",");
}

class MapReader {
 public:
  MapReader(const Context& ctx, YAML::Node node, std::string path)
      : ctx_(ctx), node_(std::move(node)), path_(std::move(path)) {}

  absl::Status Error(absl::string_view key, absl::string_view message) const {
    return ErrorAt(Path(key), message, Child(key));
  }
  absl::Status ErrorAt(const std::string& path, absl::string_view message, const YAML::Node& node) const {
    std::string where = ctx_.file;
    std::string suffix;
    if (ctx_.overridden.count(path)) {
      suffix = " (from --set)";
    } else if (node.IsDefined() && !node.Mark().is_null()) {
      suffix = absl::StrCat(" (line ", node.Mark().line + 1, ")");
    }
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", path, ": ", message, suffix));
  }

  std::string Path(absl::string_view key) const {
    return path_.empty() ? std::string(key) : absl::StrCat(path_, ".", key);
  }
  YAML::Node Child(absl::string_view key) const {
    if (!node_.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
    for (const auto& kv : node_) {
      if (kv.first.IsScalar() && kv.first.Scalar() == key) return kv.second;
    }
    return YAML::Node(YAML::NodeType::Undefined);
  }
  // Records the value `key` took (Context::read).
  template <typename T>
  absl::Status Note(absl::string_view key, const T& value) {
    if (ctx_.read != nullptr) ctx_.read->emplace_back(Path(key), Text(value));
    return absl::OkStatus();
  }

  // The value of `key`, or an undefined node when absent or null (a key
  // with no value keeps its default).
  YAML::Node Get(absl::string_view key) {
    known_.insert(std::string(key));
    YAML::Node n = Child(key);
    if (n.IsDefined() && n.IsNull()) return YAML::Node(YAML::NodeType::Undefined);
    return n;
  }

  absl::Status Int(absl::string_view key, int64_t* out, int64_t min, int64_t max = INT64_MAX) {
    YAML::Node n = Get(key);
    if (!n.IsDefined()) return Note(key, *out);
    int64_t v;
    if (!n.IsScalar() || !ParseInt(n.Scalar(), &v)) {
      return Error(key, absl::StrCat("expected an integer, got ", Quote(n)));
    }
    if (v < min || v > max) {
      return Error(key, max == INT64_MAX
                            ? absl::StrCat("expected an integer >= ", min, ", got ", v)
                            : absl::StrCat("expected an integer in [", min, ", ", max, "], got ", v));
    }
    *out = v;
    return Note(key, *out);
  }
  template <typename T>
  absl::Status Integer(absl::string_view key, T* out, int64_t min, int64_t max = INT64_MAX) {
    int64_t v = static_cast<int64_t>(*out);
    CEMB_RETURN_IF_ERROR(Int(key, &v, min, max));  // notes v
    *out = static_cast<T>(v);
    return absl::OkStatus();
  }
  // A number in [min, max] (open at min when min_open).
  absl::Status Double(absl::string_view key, double* out, double min, double max, bool min_open = false) {
    YAML::Node n = Get(key);
    if (!n.IsDefined()) return Note(key, *out);
    double v;
    if (!n.IsScalar() || !ParseDouble(n.Scalar(), &v)) {
      return Error(key, absl::StrCat("expected a number, got ", Quote(n)));
    }
    if (v < min || (min_open && v == min) || v > max) {
      std::string range = std::isinf(max) ? absl::StrCat(min_open ? "> " : ">= ", min)
                                          : absl::StrCat("in ", min_open ? "(" : "[", min, ", ", max, "]");
      return Error(key, absl::StrCat("expected a number ", range, ", got ", n.Scalar()));
    }
    *out = v;
    return Note(key, *out);
  }
  absl::Status Bool(absl::string_view key, bool* out) {
    YAML::Node n = Get(key);
    if (n.IsDefined() && (!n.IsScalar() || !ParseBool(n.Scalar(), out))) {
      return Error(key, absl::StrCat("expected true or false, got ", Quote(n)));
    }
    return Note(key, *out);
  }
  absl::Status String(absl::string_view key, std::string* out) {
    YAML::Node n = Get(key);
    if (n.IsDefined()) {
      if (!n.IsScalar()) return Error(key, absl::StrCat("expected a string, got ", Quote(n)));
      *out = n.Scalar();
    }
    return Note(key, *out);
  }
  // Noted by name: "model.interaction=dot", never the enum's number.
  template <typename T, size_t N>
  absl::Status Enum(absl::string_view key, T* out, const EnumName<T> (&names)[N]) {
    YAML::Node n = Get(key);
    auto note = [&]() { return Note(key, std::string(NameOf(names, *out))); };
    if (!n.IsDefined()) return note();
    for (const EnumName<T>& name : names) {
      if (n.IsScalar() && absl::AsciiStrToLower(n.Scalar()) == name.name) {
        *out = name.value;
        return note();
      }
    }
    return Error(key, absl::StrCat("expected one of ", JoinNames(names), "; got ", Quote(n)));
  }
  absl::Status CacheSizeValue(absl::string_view key, CacheSize* out) {
    YAML::Node n = Get(key);
    if (n.IsDefined() && (!n.IsScalar() || !ParseCacheSize(n.Scalar(), out))) {
      return Error(key, absl::StrCat("expected a fraction in [0, 1] (0.25, 25%) or a size in bytes "
                                     "(4096, 512MiB, 2GB), got ",
                                     Quote(n)));
    }
    return Note(key, *out);
  }
  // A list of integers in [min, max]; a single integer is a list of one.
  template <typename T>
  absl::Status IntList(absl::string_view key, std::vector<T>* out, int64_t min, int64_t max,
                       absl::string_view what) {
    YAML::Node n = Get(key);
    if (!n.IsDefined()) return Note(key, *out);
    std::vector<T> values;
    auto bad = [&](const YAML::Node& item) -> absl::Status {
      return Error(key, absl::StrCat("expected a list of ", what, ", got ", Quote(item)));
    };
    if (!n.IsSequence()) {
      int64_t v;
      if (!n.IsScalar() || !ParseInt(n.Scalar(), &v) || v < min || v > max) return bad(n);
      values.push_back(static_cast<T>(v));
    } else {
      for (const YAML::Node& item : n) {
        int64_t v;
        if (!item.IsScalar() || !ParseInt(item.Scalar(), &v) || v < min || v > max) return bad(item);
        values.push_back(static_cast<T>(v));
      }
      if (values.empty()) return Error(key, absl::StrCat("expected a list of ", what, ", got an empty list"));
    }
    *out = std::move(values);
    return Note(key, *out);
  }
  absl::Status StringList(absl::string_view key, std::vector<std::string>* out) {
    YAML::Node n = Get(key);
    if (!n.IsDefined()) return Note(key, *out);
    std::vector<std::string> values;
    if (n.IsScalar()) {
      values.push_back(n.Scalar());
    } else if (n.IsSequence()) {
      for (const YAML::Node& item : n) {
        if (!item.IsScalar()) return Error(key, absl::StrCat("expected a list of paths, got ", Quote(item)));
        values.push_back(item.Scalar());
      }
    } else {
      return Error(key, absl::StrCat("expected a path or a list of paths, got ", Quote(n)));
    }
    *out = std::move(values);
    return Note(key, *out);
  }
  // A sub-map; absent is fine (every key keeps its default). An absent
  // section is parsed as an empty one, so that its keys' defaults are noted
  // (and fingerprinted) as when the section is given.
  absl::Status Section(absl::string_view key, const std::function<absl::Status(MapReader&)>& parse) {
    YAML::Node n = Get(key);
    if (!n.IsDefined()) n = YAML::Node(YAML::NodeType::Map);
    if (!n.IsMap()) return Error(key, absl::StrCat("expected a map of keys, got ", Quote(n)));
    MapReader sub(ctx_, n, Path(key));
    CEMB_RETURN_IF_ERROR(parse(sub));
    return sub.Finish();
  }
  // Every key of the map that no getter asked for is an error.
  absl::Status Finish() const {
    if (!node_.IsMap()) return absl::OkStatus();
    for (const auto& kv : node_) {
      const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "?";
      if (!known_.count(key)) {
        std::vector<std::string> known(known_.begin(), known_.end());
        return ErrorAt(Path(key),
                       absl::StrCat("unknown key (known keys", path_.empty() ? "" : absl::StrCat(" of ", path_),
                                    ": ", absl::StrJoin(known, ", "), ")"),
                       kv.first);
      }
    }
    return absl::OkStatus();
  }

  const YAML::Node& node() const { return node_; }
  const Context& ctx() const { return ctx_; }

 private:
  const Context& ctx_;
  YAML::Node node_;
  std::string path_;
  std::set<std::string> known_;
};

// ---------------------------------------------------------------------------
// The sections.

absl::Status ParseData(MapReader& r, DataConfig& d) {
  CEMB_RETURN_IF_ERROR(r.Enum("source", &d.source, data::kDataSourceNames));
  std::vector<std::string> path, paths;
  CEMB_RETURN_IF_ERROR(r.StringList("path", &path));
  CEMB_RETURN_IF_ERROR(r.StringList("paths", &paths));
  if (!path.empty() && !paths.empty()) return r.Error("paths", "give either data.path or data.paths, not both");
  d.paths = path.empty() ? paths : path;
  CEMB_RETURN_IF_ERROR(r.String("validation_path", &d.validation_path));
  CEMB_RETURN_IF_ERROR(r.Double("validation_fraction", &d.validation_fraction, 0.0, 0.9));
  CEMB_RETURN_IF_ERROR(r.Enum("split", &d.split, data::kDataSplitNames));
  CEMB_RETURN_IF_ERROR(r.Integer("samples", &d.samples, 1));
  CEMB_RETURN_IF_ERROR(r.Enum("distribution", &d.distribution, data::kIndexDistributionNames));
  CEMB_RETURN_IF_ERROR(r.Double("alpha", &d.alpha, 0.0, INFINITY, /*min_open=*/true));
  if (r.Get("hotness").IsDefined()) {
    CEMB_RETURN_IF_ERROR(r.IntList("hotness", &d.hotness, 1, data::kMaxHotness,
                                   absl::StrCat("integers in [1, ", data::kMaxHotness, "] (one, or one per table)")));
  } else {
    r.Note("hotness", std::string("1")).IgnoreError();  // synthetic: 1; binary: the dataset's
  }
  CEMB_RETURN_IF_ERROR(r.Integer("seed", &d.seed, 0));
  CEMB_RETURN_IF_ERROR(r.Enum("format", &d.format, data::kCriteoFormatNames));
  CEMB_RETURN_IF_ERROR(r.Enum("index_mode", &d.index_mode, data::kIndexModeNames));
  CEMB_RETURN_IF_ERROR(r.Integer("frequency_threshold", &d.frequency_threshold, 1, UINT32_MAX));
  static constexpr EnumName<bool> kBadLinesNames[] = {{false, "fail"}, {true, "skip"}};
  CEMB_RETURN_IF_ERROR(r.Enum("bad_lines", &d.skip_bad_lines, kBadLinesNames));
  CEMB_RETURN_IF_ERROR(r.Integer("max_ind_range", &d.max_ind_range, 0, int64_t{1} << 31));
  CEMB_RETURN_IF_ERROR(r.String("work_dir", &d.work_dir));

  if (d.source != DataSource::kSynthetic && d.paths.empty()) {
    return r.Error("path", absl::StrCat("required when data.source is ", DataSourceName(d.source)));
  }
  if (d.source == DataSource::kSynthetic && !d.paths.empty()) {
    return r.Error(path.empty() ? "paths" : "path", "not used when data.source is synthetic");
  }
  if (d.source == DataSource::kBinary && d.paths.size() != 1) {
    return r.Error("paths", "data.source binary takes one file or directory");
  }
  if (d.source == DataSource::kTsv && d.format == data::CriteoFormat::kKaggle && d.paths.size() != 1) {
    return r.Error("paths", "the Kaggle format takes one file (train.txt)");
  }
  if (d.source == DataSource::kTsv && std::ranges::any_of(d.hotness, [](uint32_t k) { return k != 1; })) {
    return r.Error("hotness", "Criteo TSV data has one index per table (hotness 1)");
  }
  if (d.split == DataSplit::kNone && !d.validation_path.empty()) {
    return r.Error("validation_path", "not used with data.split none (every sample trains, none validates)");
  }
  if (d.source == DataSource::kSynthetic && d.split == DataSplit::kAuto && d.validation_fraction <= 0) {
    return r.Error("validation_fraction", "synthetic data needs a validation fraction > 0 (or data.split: none)");
  }
  return absl::OkStatus();
}

absl::Status ParseStorage(MapReader& r, TableStorageConfig& s) {
  CEMB_RETURN_IF_ERROR(r.Enum("kind", &s.kind, kStorageKindNames));
  s.cache_size_given |= r.Child("cache_lower").IsDefined() || r.Child("cache_slack").IsDefined();
  CEMB_RETURN_IF_ERROR(r.CacheSizeValue("cache_lower", &s.cache_lower));
  CEMB_RETURN_IF_ERROR(r.CacheSizeValue("cache_slack", &s.cache_slack));
  CEMB_RETURN_IF_ERROR(r.Integer("admit_after", &s.admit_after, 0, 1000000));
  CEMB_RETURN_IF_ERROR(r.String("slow_tier", &s.slow_tier));
  CEMB_RETURN_IF_ERROR(r.Integer("ssd_queue_depth", &s.ssd_queue_depth, 1, 4096));
  CEMB_RETURN_IF_ERROR(r.Double("ssd_file_space", &s.ssd_file_space, 1.1, 100));
  if (s.cache_lower.bytes == 0 &&
      (s.kind == StorageKind::kStatic || s.kind == StorageKind::kDynamic)) {
    return r.Error("cache_lower", "a cached table needs a cache: expected a size > 0");
  }
  return absl::OkStatus();
}

absl::Status ParseModel(MapReader& r, ModelConfig& m) {
  CEMB_RETURN_IF_ERROR(r.Int("embedding_dim", &m.embedding_dim, 1, 4096));
  CEMB_RETURN_IF_ERROR(r.IntList("bottom_mlp", &m.bottom_mlp, 1, 1 << 20, "positive integers"));
  CEMB_RETURN_IF_ERROR(r.IntList("top_mlp", &m.top_mlp, 1, 1 << 20, "positive integers"));
  CEMB_RETURN_IF_ERROR(r.Enum("interaction", &m.interaction, dlrm::kInteractionKindNames));
  CEMB_RETURN_IF_ERROR(r.Bool("self_interaction", &m.self_interaction));
  if (m.interaction == dlrm::InteractionKind::kDcn) {
    CEMB_RETURN_IF_ERROR(r.Int("dcn_layers", &m.dcn_layers, 1, 64));
    CEMB_RETURN_IF_ERROR(r.Int("dcn_rank", &m.dcn_rank, 0, 1 << 20));
  } else {
    for (const char* key : {"dcn_layers", "dcn_rank"}) {
      if (r.Child(key).IsDefined()) return r.Error(key, "only with model.interaction: dcn");
    }
  }
  CEMB_RETURN_IF_ERROR(r.Enum("mlp_precision", &m.mlp_precision, dlrm::kPrecisionNames));
  CEMB_RETURN_IF_ERROR(r.Enum("table_dtype", &m.bf16_tables, kTableDtypeNames));
  CEMB_RETURN_IF_ERROR(r.String("init_from", &m.init_from));
  CEMB_RETURN_IF_ERROR(r.Section("tables", [&](MapReader& t) -> absl::Status {
    CEMB_RETURN_IF_ERROR(t.IntList("sizes", &m.table_sizes, 1, int64_t{1} << 31,
                                   "table sizes (integers in [1, 2^31])"));
    CEMB_RETURN_IF_ERROR(t.Int("count", &m.table_count, 1, 100000));
    CEMB_RETURN_IF_ERROR(t.Integer("rows", &m.table_rows, 1, int64_t{1} << 31));
    if (m.table_count > 0 && m.table_rows == 0) return t.Error("rows", "required with model.tables.count");
    if (m.table_rows > 0 && m.table_count == 0) return t.Error("count", "required with model.tables.rows");
    if (m.table_count > 0 && !m.table_sizes.empty()) {
      return t.Error("sizes", "give either model.tables.sizes or model.tables.count and rows, not both");
    }
    return absl::OkStatus();
  }));
  if (r.Child("dram_budget").IsDefined()) {
    CacheSize budget;
    CEMB_RETURN_IF_ERROR(r.CacheSizeValue("dram_budget", &budget));
    if (budget.bytes == 0) return r.Error("dram_budget", "expected a size > 0 (6GiB) or a fraction of memory (25%)");
    m.dram_budget = budget;
  } else {
    r.Get("dram_budget");
    r.Note("dram_budget", std::string("none")).IgnoreError();
  }
  CEMB_RETURN_IF_ERROR(r.Section("storage", [&](MapReader& s) { return ParseStorage(s, m.storage); }));
  // Per-table overrides start from the default storage, which is therefore
  // parsed first whatever the order in the file.
  CEMB_RETURN_IF_ERROR(r.Section("table_storage", [&](MapReader& s) -> absl::Status {
    for (const auto& kv : s.node()) {
      const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "?";
      int64_t t;
      if (!ParseInt(key, &t) || t < 0) {
        return s.ErrorAt(s.Path(key), "expected a table index (0, 1, ...) as the key", kv.first);
      }
      TableStorageConfig ts = m.storage;
      CEMB_RETURN_IF_ERROR(s.Section(key, [&](MapReader& one) { return ParseStorage(one, ts); }));
      m.table_storage[static_cast<int>(t)] = ts;
    }
    return absl::OkStatus();
  }));
  if (m.bottom_mlp.back() != m.embedding_dim && m.interaction != dlrm::InteractionKind::kConcat) {
    return r.Error("bottom_mlp", absl::StrCat("the last layer (", m.bottom_mlp.back(),
                                              ") must equal model.embedding_dim (", m.embedding_dim,
                                              ") for the dot and dcn interactions"));
  }
  if (m.top_mlp.back() != 1) {
    return r.Error("top_mlp", absl::StrCat("the last layer must be 1 (the logit), got ", m.top_mlp.back()));
  }
  return absl::OkStatus();
}

absl::Status ParseOptimizer(MapReader& r, OptimizerConfig& o) {
  CEMB_RETURN_IF_ERROR(r.Enum("embedding", &o.embedding, kEmbeddingOptimizerNames));
  CEMB_RETURN_IF_ERROR(r.Enum("dense", &o.dense, dlrm::kDenseOptimizerNames));
  CEMB_RETURN_IF_ERROR(r.Double("learning_rate", &o.learning_rate, 0.0, 1e6, /*min_open=*/true));
  CEMB_RETURN_IF_ERROR(r.Double("adagrad_eps", &o.adagrad_eps, 0.0, 1.0, /*min_open=*/true));
  CEMB_RETURN_IF_ERROR(r.Int("warmup_steps", &o.warmup_steps, 0));
  CEMB_RETURN_IF_ERROR(r.Int("decay_start", &o.decay_start, 0));
  CEMB_RETURN_IF_ERROR(r.Int("decay_steps", &o.decay_steps, 0));
  if (o.decay_steps > 0 && o.decay_start < o.warmup_steps) {
    return r.Error("decay_start", absl::StrCat("must not be before the end of the warm-up (",
                                               o.warmup_steps, " steps), got ", o.decay_start));
  }
  return absl::OkStatus();
}

absl::Status ParseTrain(MapReader& r, TrainSettings& t) {
  CEMB_RETURN_IF_ERROR(r.Int("batch_size", &t.batch_size, 1, int64_t{1} << 24));
  CEMB_RETURN_IF_ERROR(r.Int("steps", &t.steps, 0));
  CEMB_RETURN_IF_ERROR(r.Int("epochs", &t.epochs, 1, 1000000));
  CEMB_RETURN_IF_ERROR(r.Int("eval_every", &t.eval_every, 0));
  CEMB_RETURN_IF_ERROR(r.Int("eval_batches", &t.eval_batches, 0));
  CEMB_RETURN_IF_ERROR(r.Integer("threads", &t.threads, 0, 4096));
  CEMB_RETURN_IF_ERROR(r.Integer("seed", &t.seed, 0));
  CEMB_RETURN_IF_ERROR(r.Bool("shuffle", &t.shuffle));
  CEMB_RETURN_IF_ERROR(r.Integer("shuffle_block", &t.shuffle_block, 1, UINT32_MAX));
  CEMB_RETURN_IF_ERROR(r.String("checkpoint_dir", &t.checkpoint_dir));
  CEMB_RETURN_IF_ERROR(r.Int("checkpoint_every", &t.checkpoint_every, 0));
  CEMB_RETURN_IF_ERROR(r.Int("keep_checkpoints", &t.keep_checkpoints, 1));
  CEMB_RETURN_IF_ERROR(r.String("log_jsonl", &t.log_jsonl));
  CEMB_RETURN_IF_ERROR(r.Int("log_every", &t.log_every, 0));
  CEMB_RETURN_IF_ERROR(r.String("export_dir", &t.export_dir));
  CEMB_RETURN_IF_ERROR(r.Bool("progress", &t.progress));
  CEMB_RETURN_IF_ERROR(r.Integer("prefetch_batches", &t.prefetch_batches, 0, 64));
  if (t.checkpoint_every > 0 && t.checkpoint_dir.empty()) {
    return r.Error("checkpoint_every", "needs train.checkpoint_dir");
  }
  return absl::OkStatus();
}

// Applies "a.b.c=value" to the tree.
absl::Status ApplyOverride(YAML::Node& root, const std::string& text, Context& ctx) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0) {
    return absl::InvalidArgumentError(absl::StrCat("--set ", text, ": expected key=value (e.g. train.batch_size=4096)"));
  }
  const std::string key(absl::StripAsciiWhitespace(text.substr(0, eq)));
  const std::string value = text.substr(eq + 1);
  std::vector<std::string> parts = absl::StrSplit(key, '.');
  for (const std::string& p : parts) {
    if (p.empty()) return absl::InvalidArgumentError(absl::StrCat("--set ", text, ": empty part in key '", key, "'"));
  }
  YAML::Node parsed;
  try {
    parsed = YAML::Load(value);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("--set ", key, ": cannot parse value '", value, "': ", e.msg));
  }
  YAML::Node cur = root;
  std::string path;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    path = path.empty() ? parts[i] : absl::StrCat(path, ".", parts[i]);
    YAML::Node next = cur[parts[i]];
    if (next.IsDefined() && !next.IsNull() && !next.IsMap()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--set ", key, ": ", path, " is not a map in ", ctx.file));
    }
    if (!next.IsDefined() || next.IsNull()) cur[parts[i]] = YAML::Node(YAML::NodeType::Map);
    cur.reset(cur[parts[i]]);  // rebind, not assign
  }
  cur[parts.back()] = parsed;
  ctx.overridden.insert(key);
  return absl::OkStatus();
}

}  // namespace

StorageConfig TableStorageConfig::ToStorageConfig() const {
  StorageConfig c;
  c.kind = kind;
  std::string dir = slow_tier;
  if (dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    dir = tmp && *tmp ? tmp : "/tmp";
  }
  c.slow_tier = TierOptions::Pmem(dir);
  c.ssd.file.directory = dir;
  c.ssd.file.queue_depth = ssd_queue_depth;
  c.ssd.file_space = ssd_file_space;
  c.cache.lower = cache_lower;
  c.cache.slack = cache_slack;
  c.cache.admit_after = admit_after;
  return c;
}

const TableStorageConfig& ModelConfig::StorageOf(int t) const {
  auto it = table_storage.find(t);
  return it == table_storage.end() ? storage : it->second;
}

float OptimizerConfig::LearningRate(int64_t step) const {
  double scale = 1.0;
  if (step < warmup_steps) {
    scale = static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  } else if (decay_steps > 0 && step >= decay_start) {
    const int64_t decay_end = decay_start + decay_steps;
    if (step >= decay_end) {
      scale = 0.0;
    } else {
      const double f = static_cast<double>(decay_end - step) / static_cast<double>(decay_steps);
      scale = f * f;
    }
  }
  return static_cast<float>(learning_rate * scale);
}

absl::StatusOr<TrainConfig> TrainConfig::Load(const std::string& path, std::span<const std::string> overrides) {
  absl::StatusOr<std::string> text = base::ReadWholeFile(path);
  if (!text.ok()) {
    // "config file <path>: cannot open: No such file or directory", with the
    // errno's code (NotFound, PermissionDenied, FailedPrecondition).
    return absl::Status(text.status().code(), absl::StrCat("config file ", text.status().message()));
  }
  return Parse(*text, path, overrides);
}

absl::StatusOr<TrainConfig> TrainConfig::Parse(std::string_view yaml, std::string_view name,
                                               std::span<const std::string> overrides) {
  Context ctx;
  ctx.file = std::string(name);
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(ctx.file, ":", e.mark.line + 1, ":", e.mark.column + 1, ": YAML syntax error: ", e.msg));
  }
  if (root.IsNull() || !root.IsDefined()) root = YAML::Node(YAML::NodeType::Map);
  if (!root.IsMap()) {
    return absl::InvalidArgumentError(
        absl::StrCat(ctx.file, ": expected a map with the sections data, model, optimizer, train"));
  }
  try {
    for (const std::string& o : overrides) CEMB_RETURN_IF_ERROR(ApplyOverride(root, o, ctx));
    TrainConfig c;
    c.source_name = ctx.file;
    ctx.read = &c.settings;
    MapReader r(ctx, root, "");
    CEMB_RETURN_IF_ERROR(r.Section("data", [&](MapReader& s) { return ParseData(s, c.data); }));
    CEMB_RETURN_IF_ERROR(r.Section("model", [&](MapReader& s) { return ParseModel(s, c.model); }));
    if (const size_t tables = c.model.table_sizes.empty() ? static_cast<size_t>(c.model.table_count)
                                                           : c.model.table_sizes.size();
        tables > 0 && !c.data.hotness.empty()) {
      CEMB_RETURN_IF_ERROR(data::ExpandHotness(c.data.hotness, tables, HotnessKey(ctx.file)).status());
    }
    CEMB_RETURN_IF_ERROR(r.Section("optimizer", [&](MapReader& s) { return ParseOptimizer(s, c.optimizer); }));
    CEMB_RETURN_IF_ERROR(r.Section("train", [&](MapReader& s) { return ParseTrain(s, c.train); }));
    CEMB_RETURN_IF_ERROR(r.Finish());
    return c;
  } catch (const YAML::Exception& e) {  // defensive: yaml-cpp throws on odd trees
    return absl::InvalidArgumentError(absl::StrCat(ctx.file, ": ", e.what()));
  }
}

int64_t PhysicalMemoryBytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
}

absl::Status TrainConfig::ApplyDramBudget(std::span<const uint32_t> hotness, const TableTraffic* traffic,
                                          EmbeddingLayerOptions& emb, DramSplit* split) const {
  bool any_ssd = false, any_share = false;
  std::vector<bool> given(emb.tables.size());
  for (size_t t = 0; t < emb.tables.size(); ++t) {
    const TableStorageConfig& ts = model.StorageOf(static_cast<int>(t));
    given[t] = ts.cache_size_given;
    any_ssd |= ts.kind == StorageKind::kSsd;
    any_share |= ts.SharesDramBudget();
  }
  const std::string where = absl::StrCat(source_name, ": model.dram_budget: ");
  if (!model.dram_budget) {
    if (!any_ssd) return absl::OkStatus();  // cached tables keep their configured (or default) sizes
    return absl::InvalidArgumentError(absl::StrCat(
        where, "required when a table's storage is ssd (bytes, e.g. 6GiB, or a fraction of memory, e.g. 25%)"));
  }
  if (!any_share) return absl::OkStatus();  // the trainer warns
  const int64_t memory = PhysicalMemoryBytes();
  DramBudgetRequest request{
      .budget = model.dram_budget->Resolve(memory),
      .where = where,
      .budget_text = model.dram_budget->bytes < 0
                         ? absl::StrFormat(" = %g%% of %.2f GiB of memory", 100 * model.dram_budget->fraction,
                                           static_cast<double>(memory) / (1 << 30))
                         : "",
      .batch_size = train.batch_size,
      .hotness = std::vector<uint32_t>(hotness.begin(), hotness.end()),
      .prefetch_batches = train.prefetch_batches,
      .cache_size_given = given};
  CEMB_ASSIGN_OR_RETURN(DramSplit s, SplitDramBudget(request, traffic, emb));
  if (split != nullptr) *split = std::move(s);
  return absl::OkStatus();
}

data::PrepareOptions TrainConfig::ToPrepareOptions() const {
  data::PrepareOptions o;
  o.data = data;
  if (o.data.work_dir.empty() && !train.checkpoint_dir.empty()) o.data.work_dir = train.checkpoint_dir + "/data";
  if (!model.table_sizes.empty()) {
    o.table_sizes = model.table_sizes;
  } else if (model.table_count > 0) {
    o.table_sizes.assign(static_cast<size_t>(model.table_count), model.table_rows);
  }
  o.threads = train.threads;
  o.config_name = absl::StrCat(source_name, ": data");
  return o;
}

absl::StatusOr<dlrm::DlrmOptions> TrainConfig::ToDlrmOptions(std::span<const uint64_t> table_sizes,
                                                       std::span<const uint32_t> hotness,
                                                       const TableTraffic* traffic, DramSplit* split,
                                                       const std::vector<int>* only) const {
  const std::string where = source_name;
  if (table_sizes.empty()) return absl::InvalidArgumentError(absl::StrCat(where, ": model.tables: no tables"));
  std::vector<uint32_t> per_table(hotness.begin(), hotness.end());
  if (per_table.empty()) {
    CEMB_ASSIGN_OR_RETURN(per_table, data::ExpandHotness(data.hotness.empty() ? std::vector<uint32_t>{1} : data.hotness,
                                                         table_sizes.size(), HotnessKey(source_name)));
  } else if (per_table.size() != table_sizes.size()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": a hotness for ", per_table.size(), " tables, but ",
                                                   table_sizes.size(), " tables"));
  }
  for (const auto& [t, s] : model.table_storage) {
    if (t >= static_cast<int>(table_sizes.size())) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": model.table_storage.", t, ": there are only ",
                                                     table_sizes.size(), " tables (0 to ",
                                                     table_sizes.size() - 1, ")"));
    }
  }
  dlrm::DlrmOptions o;
  o.num_dense = data::kNumDense;
  o.bottom_mlp = model.bottom_mlp;
  o.top_mlp = model.top_mlp;
  o.interaction = model.interaction;
  o.self_interaction = model.self_interaction;
  o.dcn_layers = static_cast<int>(model.dcn_layers);
  o.dcn_rank = model.dcn_rank;
  o.mlp_precision = model.mlp_precision;
  o.embeddings.dim = model.embedding_dim;
  o.embeddings.bf16_rows = model.bf16_tables;
  o.embeddings.optimizer = optimizer.embedding;
  o.embeddings.adagrad_eps = static_cast<float>(optimizer.adagrad_eps);
  o.dense_optimizer = {.kind = optimizer.dense, .adagrad_eps = static_cast<float>(optimizer.adagrad_eps)};
  o.embeddings.threads = train.threads;
  o.embeddings.seed = train.seed;
  std::vector<int> tables = only != nullptr ? *only : std::vector<int>{};
  if (only == nullptr) {
    for (size_t t = 0; t < table_sizes.size(); ++t) tables.push_back(static_cast<int>(t));
  }
  TableTraffic held;  // the traffic of `tables`, by position
  if (traffic != nullptr) held.samples = traffic->samples;
  std::vector<uint32_t> held_hotness;  // the hotness of `tables`, by position
  for (int t : tables) {
    if (t < 0 || t >= static_cast<int>(table_sizes.size())) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": table ", t, " of ", table_sizes.size()));
    }
    EmbeddingTableSpec spec;
    spec.rows = static_cast<int64_t>(table_sizes[t]);
    spec.storage = model.StorageOf(t).ToStorageConfig();
    spec.id = t;
    o.embeddings.tables.push_back(spec);
    held_hotness.push_back(per_table[static_cast<size_t>(t)]);
    if (traffic != nullptr && static_cast<size_t>(t) < traffic->counts.size()) {
      held.counts.push_back(traffic->counts[t]);
    } else {
      held.counts.emplace_back();
    }
  }
  o.num_tables = static_cast<int64_t>(table_sizes.size());
  CEMB_RETURN_IF_ERROR(ApplyDramBudget(held_hotness, traffic != nullptr ? &held : nullptr, o.embeddings, split));
  if (split != nullptr) {
    for (DramShare& share : split->shares) share.table = tables[static_cast<size_t>(share.table)];
  }
  o.batch_size = train.batch_size;
  o.threads = train.threads;
  o.seed = train.seed;
  return o;
}

namespace {
// The keys a checkpoint may resume under with another value (TrainConfig::
// Fingerprint): how long to train, evaluation, logging, checkpoints, threads
// (warned about: train/trainer.cc) and where the rows live. Any other key the
// reader reads, a new one included, is fingerprinted.
constexpr std::string_view kMayChangeOnResume[] = {
    "data.work_dir",       "model.dram_budget",       "model.storage.",        "model.table_storage.",
    "train.steps",         "train.epochs",            "train.eval_every",      "train.eval_batches",
    "train.threads",       "train.checkpoint_dir",    "train.checkpoint_every", "train.keep_checkpoints",
    "train.log_jsonl",     "train.log_every",         "train.export_dir",      "train.progress",
    "train.prefetch_batches"};
}  // namespace

bool TrainConfig::MayChangeOnResume(std::string_view key) {
  for (std::string_view k : kMayChangeOnResume) {
    if (k.back() == '.' ? key.starts_with(k) : key == k) return true;
  }
  return false;
}

std::string TrainConfig::Fingerprint() const {
  std::string s = absl::StrCat(kFingerprintVersion, "\n");
  for (const auto& [key, value] : settings) {
    if (!MayChangeOnResume(key)) absl::StrAppend(&s, key, "=", value, "\n");
  }
  return s;
}

void TrainConfig::SetMlpPrecision(dlrm::Precision precision) {
  model.mlp_precision = precision;
  for (auto& [key, value] : settings) {
    if (key == "model.mlp_precision") value = dlrm::PrecisionName(precision);
  }
}

std::string TrainConfig::MayChangeOnResumeList() {
  std::string list;
  for (std::string_view k : kMayChangeOnResume) {
    absl::StrAppend(&list, list.empty() ? "" : ", ", absl::string_view(k.data(), k.size()), k.back() == '.' ? "*" : "");
  }
  return list;
}

namespace {

// A fingerprint's lines as (key, value); a line without '=' (the version) has
// an empty value.
std::vector<std::pair<std::string, std::string>> FingerprintLines(std::string_view fingerprint) {
  std::vector<std::pair<std::string, std::string>> lines;
  for (absl::string_view line :
       absl::StrSplit(absl::string_view(fingerprint.data(), fingerprint.size()), '\n', absl::SkipEmpty())) {
    const size_t eq = line.find('=');
    lines.emplace_back(std::string(line.substr(0, eq)),
                       eq == absl::string_view::npos ? "" : std::string(line.substr(eq + 1)));
  }
  return lines;
}

const std::string* FindKey(const std::vector<std::pair<std::string, std::string>>& lines, const std::string& key) {
  for (const auto& [k, v] : lines) {
    if (k == key) return &v;
  }
  return nullptr;
}

}  // namespace

std::optional<std::string> TrainConfig::FingerprintValue(std::string_view fingerprint, const std::string& key) {
  const auto lines = FingerprintLines(fingerprint);
  const std::string* value = FindKey(lines, key);
  return value != nullptr ? std::optional<std::string>(*value) : std::nullopt;
}

std::optional<TrainConfig::FingerprintDiff> TrainConfig::DiffFingerprint(std::string_view written) const {
  const std::string now = Fingerprint();
  if (written == now) return std::nullopt;
  const auto was = FingerprintLines(written), is = FingerprintLines(now);
  for (const auto& [k, v] : was) {
    const std::string* n = FindKey(is, k);
    if (n == nullptr || *n != v) return FingerprintDiff{k, v, n != nullptr ? *n : "(not set)"};
  }
  // Keys added since kFingerprintVersion, with the value every run written
  // before them had: a checkpoint that lacks one resumes under that value.
  static constexpr std::pair<std::string_view, std::string_view> kAddedKeys[] = {{"optimizer.dense", "sgd"}};
  for (const auto& [k, v] : is) {
    const std::pair<std::string_view, std::string_view> line(k, v);
    if (FindKey(was, k) == nullptr && std::ranges::find(kAddedKeys, line) == std::end(kAddedKeys)) {
      return FingerprintDiff{k, "(not set)", v};
    }
  }
  if (was.size() != is.size()) return std::nullopt;  // only added keys, at their old value
  return FingerprintDiff{};  // the same lines, other bytes (line ends)
}

ServingManifest TrainConfig::ToServingManifest(const dlrm::DlrmOptions& model, std::span<const uint64_t> table_sizes,
                                               std::span<const uint32_t> hotness) const {
  ServingManifest m;
  m.num_dense = model.num_dense;
  m.dim = model.embeddings.dim;
  m.bottom_mlp = model.bottom_mlp;
  m.top_mlp = model.top_mlp;
  m.interaction = dlrm::InteractionKindName(model.interaction);
  m.self_interaction = model.self_interaction;
  m.dcn_layers = model.dcn_layers;
  m.dcn_rank = model.dcn_rank;
  m.mlp_precision = dlrm::PrecisionName(model.mlp_precision);
  m.table_dtype = NameOf(kTableDtypeNames, model.embeddings.bf16_rows);
  m.embedding_optimizer = EmbeddingOptimizerName(model.embeddings.optimizer);
  m.seed = model.seed;
  m.table_seed = model.embeddings.seed;
  m.table_rows.assign(table_sizes.begin(), table_sizes.end());
  for (size_t t = 0; t < table_sizes.size(); ++t) {
    m.table_storage.push_back(StorageKindName(this->model.StorageOf(static_cast<int>(t)).kind));
    m.hotness.push_back(t < hotness.size() ? hotness[t] : 1);
  }
  m.batch_size = train.batch_size;
  const bool tsv = data.source == DataSource::kTsv;
  m.dense_transform = tsv ? "log1p" : "none";
  m.ids = tsv ? data::IndexModeName(data.index_mode) : "none";
  m.max_ind_range = data.max_ind_range;
  m.data_source = DataSourceName(data.source);
  return m;
}

}  // namespace cemb::train
