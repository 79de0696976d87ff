#include "serve/predictor.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <limits>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "checkpoint/checkpoint.h"
#include "data/preprocess.h"
#include "dlrm/precision.h"
#include "serve/embedding_source.h"

namespace cemb::serve {
namespace {

// The OpenMP threads of the calling thread's parallel regions, for a scope.
class ScopedOmpThreads {
 public:
  explicit ScopedOmpThreads(int threads) : saved_(omp_get_max_threads()) { omp_set_num_threads(threads); }
  ~ScopedOmpThreads() { omp_set_num_threads(saved_); }

 private:
  int saved_;
};

// The sizes a context plans: 1, 2, 3, 4, 6, 8, 12, ... (2^k and 3 x 2^k)
// below max_batch, and max_batch. A batch is padded to the next one, so at
// most a third of a scoring is padding (dlrm-serve's batches of several
// 64-sample requests: 192 is planned, not padded to 256).
std::vector<int64_t> PlannedSizes(int64_t max_batch) {
  std::vector<int64_t> sizes;
  for (int64_t b = 1; b < max_batch; b *= 2) {
    sizes.push_back(b);
    if (b >= 2 && b + b / 2 < max_batch) sizes.push_back(b + b / 2);
  }
  sizes.push_back(max_batch);
  return sizes;
}

// Where table t is served from: the model's layer (loaded, stored as the
// options say), its snapshot in place, or its converted snapshot read whole
// into DRAM or a slow tier (with a DRAM cache when the options say static
// or dynamic).
enum class Held { kLayer, kInPlace, kResident };

bool Converted(const ServingManifest& m) { return m.table_rows_format == "converted"; }

// The storage the options give table t: its own, else the default. A
// dynamic cache evicts by CLOCK beside the readers: nobody flushes between
// requests, and a cache that only flushes would stop admitting once full.
StorageConfig StorageOf(const PredictorOptions& options, int t) {
  auto it = options.table_storage.find(t);
  StorageConfig storage = it != options.table_storage.end() ? it->second : options.storage;
  if (storage.kind == StorageKind::kDynamic) storage.cache.eviction = CacheEviction::kClock;
  return storage;
}

// The format of the rows the source reads: a converted checkpoint's
// table_dtype (any RowFormat); a trained one's, fp32 or bf16.
absl::StatusOr<RowFormat> SourceRowFormat(const ServingManifest& m) {
  CEMB_ASSIGN_OR_RETURN(const RowFormat format, ParseName(kRowFormatNames, m.table_dtype, "SERVING: table_dtype"));
  if (!Converted(m) && format != RowFormat::kFp32 && format != RowFormat::kBf16) {
    return absl::DataLossError(absl::StrCat("SERVING: table_dtype '", m.table_dtype,
                                            "' of trained tables is neither fp32 nor bf16"));
  }
  return format;
}

// The model the manifest describes, holding the tables held in its layer,
// stored as `options` says.
absl::StatusOr<dlrm::DlrmOptions> ModelOptions(const ServingManifest& m, const PredictorOptions& options,
                                               dlrm::Precision precision, const std::vector<Held>& held) {
  dlrm::DlrmOptions o;
  o.num_dense = m.num_dense;
  o.bottom_mlp = m.bottom_mlp;
  o.top_mlp = m.top_mlp;
  CEMB_ASSIGN_OR_RETURN(o.interaction, ParseName(dlrm::kInteractionKindNames, m.interaction, "SERVING: interaction"));
  o.self_interaction = m.self_interaction;
  o.dcn_layers = static_cast<int>(m.dcn_layers);
  o.dcn_rank = m.dcn_rank;
  o.mlp_precision = precision;
  o.embeddings.dim = m.dim;
  CEMB_ASSIGN_OR_RETURN(const RowFormat format, SourceRowFormat(m));
  o.embeddings.bf16_rows = !Converted(m) && format == RowFormat::kBf16;
  CEMB_ASSIGN_OR_RETURN(o.embeddings.optimizer,
                        ParseName(kEmbeddingOptimizerNames, m.embedding_optimizer, "SERVING: embedding_optimizer"));
  o.embeddings.seed = m.table_seed;
  o.num_tables = static_cast<int64_t>(m.table_rows.size());
  for (size_t t = 0; t < m.table_rows.size(); ++t) {
    if (held[t] != Held::kLayer) continue;
    o.embeddings.tables.push_back({.rows = static_cast<int64_t>(m.table_rows[t]),
                                   .id = static_cast<int>(t),
                                   .storage = StorageOf(options, static_cast<int>(t))});
  }
  o.seed = m.seed;
  o.batch_size = 1;  // the model scores nothing itself: its contexts do
  o.threads = 1;
  return o;
}

// The checkpoint file of table t's ssd snapshot, relative to the checkpoint.
std::string SnapshotFile(size_t t) { return "model/" + dlrm::Dlrm::TableFileName(static_cast<int>(t), "ssd"); }

// Table t is served in place when it trained on ssd, the checkpoint holds
// its snapshot, and the options name no storage for it. A converted
// checkpoint's other tables are read whole into DRAM, or into the slow tier
// of a `simple` override, or copied to the slow tier of a `static` or
// `dynamic` one with a DRAM cache in front (an ssd override is
// InvalidArgument: that is the training's tier); a trained one's are loaded
// into the model's layer.
absl::StatusOr<std::vector<Held>> WhereTables(const std::string& checkpoint, const ServingManifest& m,
                                              const PredictorOptions& options) {
  std::vector<Held> held(m.table_rows.size());
  for (size_t t = 0; t < held.size(); ++t) {
    std::error_code ec;
    const bool in_place = options.serve_in_place && t < m.table_storage.size() && m.table_storage[t] == "ssd" &&
                          !options.table_storage.contains(static_cast<int>(t)) &&
                          std::filesystem::exists(absl::StrCat(checkpoint, "/", SnapshotFile(t)), ec);
    const StorageKind kind = StorageOf(options, static_cast<int>(t)).kind;
    if (Converted(m) && !in_place && kind == StorageKind::kSsd) {
      return absl::InvalidArgumentError(absl::StrCat(
          "predictor: table ", t, " of ", checkpoint, " holds rows converted to ", m.table_dtype,
          " for serving: it is served in place from its snapshot, or read whole into DRAM (dram), a slow tier "
          "(simple) or a slow tier with a DRAM cache (static, dynamic), not stored as ssd"));
    }
    held[t] = in_place ? Held::kInPlace : Converted(m) ? Held::kResident : Held::kLayer;
  }
  return held;
}

// The rows one sample of table t pools at most (1 where the manifest says none).
int64_t Hotness(const ServingManifest& m, int t) {
  return t < static_cast<int>(m.hotness.size()) ? std::max<int64_t>(int64_t{m.hotness[static_cast<size_t>(t)]}, 1) : 1;
}

// Where a converted table read whole is held: the slow tier of a `simple`,
// `static` or `dynamic` storage for it, else DRAM.
TierOptions SlowTierOf(const PredictorOptions& options, int t) {
  const StorageConfig storage = StorageOf(options, t);
  return storage.kind == StorageKind::kDram ? TierOptions{} : storage.slow_tier;
}

// Where the pooled rows come from: the model's layer (the tables loaded)
// and the snapshots served in place, which share ssd_cache_bytes by rows.
absl::StatusOr<std::unique_ptr<EmbeddingSource>> MakeSource(const std::string& checkpoint, dlrm::Dlrm& model,
                                                            const ServingManifest& m,
                                                            const PredictorOptions& options,
                                                            const std::vector<Held>& held) {
  const dlrm::DlrmOptions& o = model.options();
  CEMB_ASSIGN_OR_RETURN(const RowFormat format, SourceRowFormat(m));
  EmbeddingSourceOptions s{.num_tables = static_cast<int>(m.table_rows.size()),
                           .dim = o.embeddings.dim,
                           .row_format = format,
                           .state_floats = Converted(m) ? 0 : RowStateFloats(o.embeddings.dim, o.embeddings.optimizer),
                           .layer = &model.embeddings()};
  for (const EmbeddingTableSpec& table : o.embeddings.tables) s.layer_ids.push_back(table.id);
  double in_place_rows = 0;
  for (size_t t = 0; t < held.size(); ++t) {
    in_place_rows += held[t] == Held::kInPlace ? static_cast<double>(m.table_rows[t]) : 0;
  }
  for (size_t t = 0; t < held.size(); ++t) {
    if (held[t] == Held::kLayer) continue;
    const double share = held[t] == Held::kInPlace ? static_cast<double>(m.table_rows[t]) / in_place_rows : 0;
    s.snapshots.push_back({.table = static_cast<int>(t),
                           .path = absl::StrCat(checkpoint, "/", SnapshotFile(t)),
                           .rows = static_cast<int64_t>(m.table_rows[t]),
                           .capacity_bytes = static_cast<int64_t>(static_cast<double>(options.ssd_cache_bytes) * share),
                           .resident = held[t] == Held::kResident,
                           .resident_tier = SlowTierOf(options, static_cast<int>(t)),
                           .cache = held[t] == Held::kResident ? CacheOptionsOf(StorageOf(options, static_cast<int>(t)))
                                                              : std::nullopt});
  }
  return MakeEmbeddingSource(s);
}

}  // namespace

// One scoring's own state: the dense part and its buffers.
struct Context {
  std::unique_ptr<dlrm::DlrmForward> forward;
  std::unique_ptr<EmbeddingReader> reader;
  std::vector<float> dense;                   // [max_batch x num_dense], padded with zeros
  std::vector<std::vector<int32_t>> offsets;  // per table, max_batch + 1
  std::vector<Bags<int32_t>> bags;            // per table, over offsets and the request's indices
  std::vector<float> probabilities;           // max_batch
};

struct Predictor::Impl {
  PredictorOptions options;
  std::string checkpoint;
  ServingManifest manifest;
  dlrm::Precision precision = dlrm::Precision::kFp32;
  std::string warning;
  int threads = 1;
  std::vector<int64_t> planned;
  std::optional<data::Vocabulary> vocabulary;  // ids=vocabulary: how raw ids became rows
  std::unique_ptr<dlrm::Dlrm> model;
  std::unique_ptr<EmbeddingSource> source;  // after model: it reads the model's layer
  std::vector<std::unique_ptr<Context>> contexts;

  // The background verification of the files served in place: Unavailable
  // while it runs, then its result; `failed` is what a request reads.
  mutable std::mutex verified_mu;
  mutable std::condition_variable verified_cv;  // the pass ended
  absl::Status verified;
  std::atomic<bool> failed{false};
  std::atomic<bool> stop_verifying{false};
  std::thread verifier;

  ~Impl() {
    stop_verifying = true;
    if (verifier.joinable()) verifier.join();
  }
  absl::Status Verified() const {
    std::lock_guard<std::mutex> lock(verified_mu);
    return verified;
  }
  // Verifies the snapshot tables' files against the manifest's entries.
  void StartVerifying(std::vector<std::pair<SnapshotTableInfo, CheckpointFile>> files) {
    if (files.empty()) return;
    verified = absl::UnavailableError(absl::StrCat("verifying ", files.size(), " snapshot file(s) in the background"));
    verifier = std::thread([this, files = std::move(files)] {
      absl::Status s;
      for (const auto& [table, expected] : files) {
        s = VerifyOpenFile(table.fd, table.path, expected, &stop_verifying);
        if (!s.ok()) break;
      }
      if (absl::IsCancelled(s)) return;
      if (!s.ok() && options.log) options.log(absl::StrCat("error: ", s.message(), ": every request now fails"));
      if (s.ok() && options.log) options.log(absl::StrCat("predictor: ", files.size(), " snapshot file(s) verified"));
      {
        std::lock_guard<std::mutex> lock(verified_mu);
        verified = s;
        failed.store(!s.ok(), std::memory_order_release);
      }
      verified_cv.notify_all();
    });
  }

  // The pool: contexts not in use. Its lock is held to take or give one back.
  mutable std::mutex mu;
  mutable std::condition_variable freed;
  mutable std::vector<Context*> idle;

  Context* Take() const {
    std::unique_lock<std::mutex> lock(mu);
    freed.wait(lock, [&] { return !idle.empty(); });
    Context* c = idle.back();
    idle.pop_back();
    return c;
  }
  void Give(Context* c) const {
    {
      std::lock_guard<std::mutex> lock(mu);
      idle.push_back(c);
    }
    freed.notify_one();
  }

  // Scores samples [s, s + m) of `batch` (m <= max_batch) with context c.
  absl::Status ScorePiece(Context& c, const dlrm::BatchView& batch, int64_t s, int64_t m, float* out) const {
    const int64_t p = *std::lower_bound(planned.begin(), planned.end(), m);
    const int64_t nd = manifest.num_dense;
    std::copy_n(batch.dense.data() + s * nd, m * nd, c.dense.data());
    std::fill(c.dense.begin() + m * nd, c.dense.begin() + p * nd, 0.f);
    for (size_t t = 0; t < c.bags.size(); ++t) {
      const Bags<int32_t>& b = batch.bags[t];
      const int32_t first = b.offsets[s], last = b.offsets[s + m];
      if (first < 0 || last < first || static_cast<size_t>(last) > b.indices.size()) {
        return absl::InvalidArgumentError(absl::StrCat("table ", t, ": offsets[", s, "] = ", first, " and offsets[",
                                                       s + m, "] = ", last, " do not lie in its ",
                                                       b.indices.size(), " indices"));
      }
      std::vector<int32_t>& off = c.offsets[t];
      for (int64_t i = 0; i <= m; ++i) off[i] = b.offsets[s + i] - first;
      std::fill(off.begin() + m + 1, off.begin() + p + 1, last - first);  // empty bags: the padding
      c.bags[t] = {.offsets = std::span<const int32_t>(off.data(), p + 1),
                   .indices = b.indices.subspan(first, last - first),
                   .weights = b.weights.empty() ? b.weights : b.weights.subspan(first, last - first)};
    }
    CEMB_RETURN_IF_ERROR(c.reader->Lookup(c.bags, c.forward->embeddings(p), threads));
    CEMB_RETURN_IF_ERROR(c.forward->Run(p, c.dense.data(), c.probabilities));
    std::copy_n(c.probabilities.data(), m, out);
    return absl::OkStatus();
  }
};

absl::StatusOr<std::unique_ptr<Predictor>> Predictor::Open(const std::string& path, const PredictorOptions& options) {
  auto impl = std::make_unique<Impl>();
  Impl& p = *impl;
  p.options = options;
  if (options.max_batch <= 0 || options.contexts < 0 || options.threads_per_context < 0) {
    return absl::InvalidArgumentError("predictor: max_batch must be > 0, contexts and threads_per_context >= 0");
  }
  if (options.ssd_cache_bytes <= 0) return absl::InvalidArgumentError("predictor: ssd_cache_bytes must be > 0");
  CEMB_ASSIGN_OR_RETURN(p.checkpoint, ResolveCheckpoint(path));
  CEMB_ASSIGN_OR_RETURN(p.manifest, ReadServingManifest(p.checkpoint));
  CEMB_ASSIGN_OR_RETURN(const std::vector<Held> held, WhereTables(p.checkpoint, p.manifest, options));
  std::set<std::string> served_in_place;
  for (size_t t = 0; t < held.size(); ++t) {
    if (held[t] == Held::kInPlace) served_in_place.insert(SnapshotFile(t));
  }
  // The files loaded now; those served in place later, in the background.
  CEMB_ASSIGN_OR_RETURN(const CheckpointState state,
                        ReadCheckpoint(p.checkpoint, [&](const std::string& name) {
                          return options.verify_checksums && !served_in_place.contains(name);
                        }));

  // The checkpoint's precision, nothing timed; bf16 without a bf16 matmul: fp32.
  CEMB_ASSIGN_OR_RETURN(const dlrm::Precision trained,
                        ParseName(dlrm::kPrecisionNames, p.manifest.mlp_precision, "SERVING: mlp_precision"));
  p.precision = trained;
  if (trained == dlrm::Precision::kBf16 && dlrm::DetectMatmulCpu().bf16_matmul.empty()) {
    p.precision = dlrm::Precision::kFp32;
    p.warning = absl::StrCat("the checkpoint's MLPs are bf16 but oneDNN has no bf16 matmul on this CPU (",
                             dlrm::DetectMatmulCpu().isa, "): served in fp32 from the fp32 master weights; "
                             "scores differ from the training's evaluation by bf16 rounding");
  } else if (trained == dlrm::Precision::kAuto) {
    return absl::DataLossError(absl::StrCat(p.checkpoint, "/SERVING: mlp_precision is auto, never resolved"));
  }
  if (options.log && !p.warning.empty()) options.log(absl::StrCat("warning: ", p.warning));

  if (p.manifest.ids == "vocabulary") {
    const std::string path = absl::StrCat(p.checkpoint, "/", data::kVocabularyFile);
    std::error_code ec;
    if (std::filesystem::exists(path, ec)) {
      CEMB_ASSIGN_OR_RETURN(p.vocabulary, data::Vocabulary::Load(path));
      if (p.vocabulary->num_tables() != static_cast<int>(p.manifest.table_rows.size())) {
        return absl::DataLossError(absl::StrCat(path, ": ", p.vocabulary->num_tables(), " tables, the model has ",
                                                p.manifest.table_rows.size()));
      }
    }
  }
  CEMB_ASSIGN_OR_RETURN(dlrm::DlrmOptions model_options, ModelOptions(p.manifest, options, p.precision, held));
  CEMB_ASSIGN_OR_RETURN(p.model, dlrm::Dlrm::Create(model_options));
  CEMB_RETURN_IF_ERROR(p.model->Load(p.checkpoint + "/model"));
  CEMB_ASSIGN_OR_RETURN(p.source, MakeSource(p.checkpoint, *p.model, p.manifest, options, held));
  // Every context's request pins its rows at once: the contexts each
  // table's share of the cache can hold.
  int64_t fit = std::numeric_limits<int64_t>::max();
  for (const SnapshotTableInfo& info : p.source->snapshots()) {
    fit = std::min(fit, info.capacity_rows / (options.max_batch * Hotness(p.manifest, info.table)));
  }
  const int hardware = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int contexts = options.contexts > 0 ? options.contexts : hardware;
  if (options.contexts == 0 && !p.source->snapshots().empty()) {
    const int64_t most = int64_t{PredictorOptions::kSsdContextsPerThread} * hardware;
    contexts = static_cast<int>(std::clamp<int64_t>(fit, hardware, most));
  }
  for (const SnapshotTableInfo& info : p.source->snapshots()) {
    const int64_t hotness = Hotness(p.manifest, info.table);
    const int64_t needed = contexts * options.max_batch * hotness;
    if (info.capacity_rows < needed) {
      return absl::InvalidArgumentError(absl::StrCat(
          "predictor: ssd_cache_bytes (", options.ssd_cache_bytes, ") gives table emb", info.table, " ",
          info.capacity_rows, " rows of DRAM, fewer than the ", needed, " that ", contexts,
          " requests in flight at once pin (", options.max_batch, " samples of ", hotness,
          " rows each): give it more, or fewer contexts or a smaller max_batch"));
    }
  }
  if (options.verify_checksums) {
    std::vector<std::pair<SnapshotTableInfo, CheckpointFile>> files;
    for (const SnapshotTableInfo& info : p.source->snapshots()) {
      const std::string name = SnapshotFile(static_cast<size_t>(info.table));
      auto f = std::find_if(state.files.begin(), state.files.end(),
                            [&](const CheckpointFile& c) { return c.name == name; });
      if (f == state.files.end()) {
        return absl::DataLossError(absl::StrCat(p.checkpoint, "/MANIFEST does not list ", name));
      }
      files.emplace_back(info, *f);
    }
    p.StartVerifying(std::move(files));
  }

  p.threads = options.threads_per_context > 0 ? options.threads_per_context : 1;
  p.planned = PlannedSizes(options.max_batch);
  {
    ScopedOmpThreads scope(p.threads);  // oneDNN plans for the threads it will run on
    for (int i = 0; i < contexts; ++i) {
      auto c = std::make_unique<Context>();
      CEMB_ASSIGN_OR_RETURN(c->forward, p.model->MakeForward({.max_batch = options.max_batch,
                                                              .batch_sizes = p.planned,
                                                              .threads = p.threads}));
      c->dense.resize(static_cast<size_t>(options.max_batch * p.manifest.num_dense));
      c->offsets.assign(p.manifest.table_rows.size(), std::vector<int32_t>(options.max_batch + 1));
      c->bags.resize(p.manifest.table_rows.size());
      c->probabilities.resize(static_cast<size_t>(options.max_batch));
      c->reader = p.source->NewReader();
      p.idle.push_back(c.get());
      p.contexts.push_back(std::move(c));
    }
  }
  if (options.log) {
    options.log(absl::StrCat("predictor: ", p.checkpoint, ": ", p.manifest.table_rows.size(), " tables of dim ",
                             p.manifest.dim, Converted(p.manifest) ? absl::StrCat(" converted to ", p.manifest.table_dtype) : "",
                             ", ", p.manifest.interaction, " interaction, ",
                             dlrm::PrecisionName(p.precision), " MLPs; ", contexts, " context(s) of ", p.threads,
                             " thread(s), batches up to ", options.max_batch,
                             p.source->serialised() ? "; ssd tables: lookups one request at a time" : "",
                             served_in_place.empty() ? ""
                                                     : absl::StrCat("; ", served_in_place.size(),
                                                                    " table(s) served in place from their snapshots "
                                                                    "with ", options.ssd_cache_bytes >> 20,
                                                                    " MiB of DRAM")));
  }
  return std::unique_ptr<Predictor>(new Predictor(std::move(impl)));
}

absl::Status Predictor::ReadRows(int table, int64_t first, std::span<float> out) const {
  const Impl& p = *impl_;
  const int64_t dim = p.manifest.dim, tables = static_cast<int64_t>(p.manifest.table_rows.size());
  const int64_t n = static_cast<int64_t>(out.size()) / dim;
  if (table < 0 || table >= tables || first < 0 || n * dim != static_cast<int64_t>(out.size()) ||
      first + n > static_cast<int64_t>(p.manifest.table_rows[static_cast<size_t>(table)])) {
    return absl::InvalidArgumentError(absl::StrCat("predictor: ReadRows of table ", table, " rows ", first, " + ",
                                                   out.size(), " floats of a model of ", tables, " tables of dim ",
                                                   dim));
  }
  // Bags of one row each of `table`, empty bags of the others, a batch at
  // a time (what a table served in place can pin).
  const int64_t kPiece = p.options.max_batch;
  std::vector<int32_t> empty(static_cast<size_t>(kPiece + 1), 0), offsets(static_cast<size_t>(kPiece + 1));
  std::vector<int32_t> indices(static_cast<size_t>(kPiece));
  std::vector<float> pooled(static_cast<size_t>(kPiece * tables * dim));
  std::vector<Bags<int32_t>> bags(static_cast<size_t>(tables));
  Context* c = p.Take();
  absl::Status status;
  for (int64_t at = 0; at < n && status.ok(); at += kPiece) {
    const int64_t m = std::min(kPiece, n - at);
    for (int64_t i = 0; i <= m; ++i) offsets[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    for (int64_t i = 0; i < m; ++i) indices[static_cast<size_t>(i)] = static_cast<int32_t>(first + at + i);
    for (int64_t t = 0; t < tables; ++t) {
      const bool mine = t == table;
      bags[static_cast<size_t>(t)] = {std::span<const int32_t>((mine ? offsets : empty).data(), static_cast<size_t>(m + 1)),
                                      std::span<const int32_t>(indices.data(), mine ? static_cast<size_t>(m) : 0), {}};
    }
    const MatrixView view{pooled.data(), m, tables * dim, tables * dim};
    status = c->reader->Lookup(bags, view, p.threads);
    for (int64_t i = 0; i < m && status.ok(); ++i) {
      std::copy_n(view.row(i) + table * dim, dim, out.data() + (at + i) * dim);
    }
  }
  p.Give(c);
  return status;
}

Predictor::Predictor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Predictor::~Predictor() = default;

const std::string& Predictor::checkpoint() const { return impl_->checkpoint; }
const ServingManifest& Predictor::manifest() const { return impl_->manifest; }
dlrm::Precision Predictor::precision() const { return impl_->precision; }
const std::string& Predictor::warning() const { return impl_->warning; }
int Predictor::contexts() const { return static_cast<int>(impl_->contexts.size()); }
int Predictor::threads_per_context() const { return impl_->threads; }
int Predictor::num_tables() const { return static_cast<int>(impl_->manifest.table_rows.size()); }
int64_t Predictor::num_dense() const { return impl_->manifest.num_dense; }
dlrm::Dlrm& Predictor::model() const { return *impl_->model; }
std::vector<SnapshotTableInfo> Predictor::snapshot_tables() const { return impl_->source->snapshots(); }
std::vector<CachedTableInfo> Predictor::cached_tables() const { return impl_->source->cached(); }
int64_t Predictor::EvictCachedRows() { return impl_->source->EvictCached(); }
absl::Status Predictor::verification() const { return impl_->Verified(); }

absl::Status Predictor::WaitVerified() const {
  std::unique_lock<std::mutex> lock(impl_->verified_mu);
  impl_->verified_cv.wait(lock, [&] { return !absl::IsUnavailable(impl_->verified); });
  return impl_->verified;
}

absl::Status Predictor::Predict(const dlrm::BatchView& batch, std::span<float> probabilities) const {
  const Impl& p = *impl_;
  const int64_t n = batch.size;
  if (n < 0 || static_cast<int64_t>(probabilities.size()) < n) {
    return absl::InvalidArgumentError(absl::StrCat(probabilities.size(), " probabilities for ", n, " samples"));
  }
  if (static_cast<int64_t>(batch.dense.size()) != n * num_dense() ||
      static_cast<int>(batch.bags.size()) != num_tables()) {
    return absl::InvalidArgumentError(absl::StrCat("batch of ", n, " samples has ", batch.dense.size(),
                                                   " dense values and ", batch.bags.size(), " tables; expected ",
                                                   n * num_dense(), " and ", num_tables()));
  }
  for (int t = 0; t < num_tables(); ++t) {
    if (batch.bags[t].nbags() != n) {
      return absl::InvalidArgumentError(absl::StrCat("table ", t, " has ", batch.bags[t].nbags(), " bags for ", n,
                                                     " samples"));
    }
  }
  if (n == 0) return absl::OkStatus();
  if (p.failed.load(std::memory_order_acquire)) return p.Verified();
  ScopedOmpThreads scope(p.threads);
  Context* c = p.Take();
  absl::Status status;
  for (int64_t s = 0; s < n && status.ok(); s += p.options.max_batch) {
    status = p.ScorePiece(*c, batch, s, std::min(p.options.max_batch, n - s), probabilities.data() + s);
  }
  p.Give(c);
  return status;
}

absl::Status Predictor::TakesRawCriteo() const {
  const ServingManifest& m = impl_->manifest;
  const bool vocabulary = m.ids == "vocabulary" && impl_->vocabulary.has_value();
  if ((m.ids != "modulo" && !vocabulary) || m.dense_transform != "log1p") {
    return absl::FailedPreconditionError(absl::StrCat(
        impl_->checkpoint, ": raw Criteo features need the training's preprocessing, and this model's is ids=", m.ids,
        m.ids == "vocabulary" ? " (its vocabulary was not kept with the checkpoint: it was written before they were)"
                              : " (not trained on Criteo TSV)",
        ": send dense floats and row indices (Predict)"));
  }
  if (num_tables() != data::kNumCategorical || num_dense() != data::kNumDense) {
    return absl::FailedPreconditionError(absl::StrCat("the model has ", num_tables(), " tables and ", num_dense(),
                                                      " dense features, Criteo 26 and 13"));
  }
  return absl::OkStatus();
}

absl::Status Predictor::PredictCriteo(std::span<const data::CriteoRow> rows, std::span<float> probabilities) const {
  CEMB_RETURN_IF_ERROR(TakesRawCriteo());
  const ServingManifest& m = impl_->manifest;
  const int64_t n = static_cast<int64_t>(rows.size());
  const data::CriteoTransform transform{.table_sizes = m.table_rows,
                                        .vocabulary = impl_->vocabulary ? &*impl_->vocabulary : nullptr};
  std::vector<float> dense(static_cast<size_t>(n * data::kNumDense));
  std::vector<int32_t> by_sample(static_cast<size_t>(n * data::kNumCategorical));
  for (int64_t i = 0; i < n; ++i) {
    transform.Apply(rows[i], dense.data() + i * data::kNumDense, by_sample.data() + i * data::kNumCategorical);
  }
  // One index per bag: table t's indices are column t.
  std::vector<int32_t> indices(by_sample.size()), offsets(static_cast<size_t>(n + 1));
  for (int64_t i = 0; i <= n; ++i) offsets[i] = static_cast<int32_t>(i);
  std::vector<Bags<int32_t>> bags(data::kNumCategorical);
  for (int t = 0; t < data::kNumCategorical; ++t) {
    for (int64_t i = 0; i < n; ++i) indices[t * n + i] = by_sample[i * data::kNumCategorical + t];
    bags[t] = {.offsets = offsets, .indices = std::span<const int32_t>(indices).subspan(t * n, n)};
  }
  return Predict({.size = n, .dense = dense, .bags = bags}, probabilities);
}

}  // namespace cemb::serve
