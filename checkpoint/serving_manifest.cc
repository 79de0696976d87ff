#include "checkpoint/serving_manifest.h"

#include <filesystem>
#include <functional>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/file.h"

namespace cemb {
namespace {

constexpr char kHeader[] = "cemb-serving v1";

// One key of the file: how its value is written and read. The one list of
// the keys (Serialize and Parse both walk it).
struct Field {
  const char* key;
  std::function<std::string(const ServingManifest&)> write;
  std::function<bool(absl::string_view, ServingManifest&)> read;
  // The value a file without the key means (a key added after the files
  // that lack it were written); null: the key is required.
  const char* absent = nullptr;
};

template <typename Int>
bool ParseInt(absl::string_view s, Int* out) {
  if constexpr (std::is_same_v<Int, bool>) {
    if (s != "0" && s != "1") return false;
    *out = s == "1";
    return true;
  } else {
    return absl::SimpleAtoi(s, out);
  }
}

template <typename Int>
bool ParseList(absl::string_view s, std::vector<Int>* out) {
  out->clear();
  if (s.empty()) return true;
  for (absl::string_view part : absl::StrSplit(s, ',')) {
    Int v{};
    if (!ParseInt(part, &v)) return false;
    out->push_back(v);
  }
  return true;
}

template <typename Int>
Field IntField(const char* key, Int ServingManifest::*member) {
  return {key, [member](const ServingManifest& m) { return absl::StrCat(m.*member); },
          [member](absl::string_view s, ServingManifest& m) { return ParseInt(s, &(m.*member)); }};
}
template <typename Int>
Field ListField(const char* key, std::vector<Int> ServingManifest::*member) {
  return {key, [member](const ServingManifest& m) { return absl::StrJoin(m.*member, ","); },
          [member](absl::string_view s, ServingManifest& m) { return ParseList(s, &(m.*member)); }};
}
Field TextField(const char* key, std::string ServingManifest::*member) {
  return {key, [member](const ServingManifest& m) { return m.*member; },
          [member](absl::string_view s, ServingManifest& m) {
            m.*member = std::string(s);
            return !s.empty() && s.find(',') == absl::string_view::npos;
          }};
}
Field NamesField(const char* key, std::vector<std::string> ServingManifest::*member) {
  return {key, [member](const ServingManifest& m) { return absl::StrJoin(m.*member, ","); },
          [member](absl::string_view s, ServingManifest& m) {
            m.*member = s.empty() ? std::vector<std::string>{} : absl::StrSplit(s, ',');
            return true;
          }};
}

const std::vector<Field>& Fields() {
  static const std::vector<Field> fields = {
      IntField("num_dense", &ServingManifest::num_dense),
      IntField("dim", &ServingManifest::dim),
      ListField("bottom_mlp", &ServingManifest::bottom_mlp),
      ListField("top_mlp", &ServingManifest::top_mlp),
      TextField("interaction", &ServingManifest::interaction),
      IntField("self_interaction", &ServingManifest::self_interaction),
      IntField("dcn_layers", &ServingManifest::dcn_layers),
      IntField("dcn_rank", &ServingManifest::dcn_rank),
      TextField("mlp_precision", &ServingManifest::mlp_precision),
      TextField("table_dtype", &ServingManifest::table_dtype),
      [] {
        Field f = TextField("table_rows_format", &ServingManifest::table_rows_format);
        f.absent = "trained";
        return f;
      }(),
      TextField("embedding_optimizer", &ServingManifest::embedding_optimizer),
      IntField("seed", &ServingManifest::seed),
      IntField("table_seed", &ServingManifest::table_seed),
      ListField("table_rows", &ServingManifest::table_rows),
      NamesField("table_storage", &ServingManifest::table_storage),
      ListField("hotness", &ServingManifest::hotness),
      IntField("batch_size", &ServingManifest::batch_size),
      TextField("dense_transform", &ServingManifest::dense_transform),
      TextField("ids", &ServingManifest::ids),
      IntField("max_ind_range", &ServingManifest::max_ind_range),
      TextField("data_source", &ServingManifest::data_source),
  };
  return fields;
}

}  // namespace

std::string SerializeServingManifest(const ServingManifest& m) {
  std::string text = absl::StrCat(kHeader, "\n");
  for (const Field& f : Fields()) absl::StrAppend(&text, f.key, "=", f.write(m), "\n");
  return text;
}

absl::StatusOr<ServingManifest> ParseServingManifest(absl::string_view text, absl::string_view name) {
  auto bad = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat("serving manifest ", name, ": ", why));
  };
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n', absl::SkipEmpty());
  if (lines.empty() || lines[0] != kHeader) return bad(absl::StrCat("unknown format (expected '", kHeader, "')"));
  std::map<std::string, absl::string_view> values;
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t eq = lines[i].find('=');
    if (eq == absl::string_view::npos) return bad(absl::StrCat("line ", i + 1, " is not key=value: '", lines[i], "'"));
    if (!values.emplace(std::string(lines[i].substr(0, eq)), lines[i].substr(eq + 1)).second) {
      return bad(absl::StrCat("key '", lines[i].substr(0, eq), "' twice"));
    }
  }
  ServingManifest m;
  for (const Field& f : Fields()) {
    auto it = values.find(f.key);
    if (it == values.end() && f.absent != nullptr) {
      f.read(f.absent, m);
      continue;
    }
    if (it == values.end()) return bad(absl::StrCat("no key '", f.key, "'"));
    if (!f.read(it->second, m)) return bad(absl::StrCat(f.key, ": bad value '", it->second, "'"));
    values.erase(it);
  }
  if (!values.empty()) return bad(absl::StrCat("unknown key '", values.begin()->first, "'"));
  if (m.table_rows_format != "trained" && m.table_rows_format != "converted") {
    return bad(absl::StrCat("table_rows_format: '", m.table_rows_format, "' is neither trained nor converted"));
  }
  if (m.table_storage.size() != m.table_rows.size() || m.hotness.size() != m.table_rows.size()) {
    return bad(absl::StrCat(m.table_rows.size(), " table_rows, ", m.table_storage.size(), " table_storage and ",
                            m.hotness.size(), " hotness: one per table each"));
  }
  return m;
}

absl::StatusOr<ServingManifest> ReadServingManifest(const std::string& checkpoint) {
  const std::string path = absl::StrCat(checkpoint, "/", kServingManifest);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return absl::FailedPreconditionError(absl::StrCat(
        checkpoint, " has no ", kServingManifest,
        " manifest (it was written by a dlrm-train older than the predictor): re-save it by resuming training "
        "from it with this dlrm-train (one more step, e.g. --set train.steps=<its step + 1>), which writes "
        "the manifest into its next checkpoint"));
  }
  absl::StatusOr<std::string> text = base::ReadWholeFile(path);
  if (!text.ok()) return text.status();
  return ParseServingManifest(*text, path);
}

}  // namespace cemb
