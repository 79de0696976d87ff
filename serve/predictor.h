// Predictor: a model that dlrm-train wrote, opened read-only and scored from
// any number of threads at once.
//
// Open(path) resolves a checkpoint (a step-N directory, the checkpoint
// directory, or its LATEST: checkpoint/checkpoint.h), verifies its files
// against its MANIFEST, reads its SERVING manifest
// (checkpoint/serving_manifest.h) and builds the same model the trainer ran
// (dlrm/model.h: every interaction, the MLPs' precision, the tables' rows,
// dim, row type and optimizer state), then loads the checkpoint into it.
//
// Tables: one that trained on the ssd tier (its checkpoint file is an ssd
// snapshot, model/emb_l.<t>.ssd) is served in place from that file
// (ssd/snapshot_table.h: read only, O_DIRECT, a DRAM cache of its rows out
// of PredictorOptions::ssd_cache_bytes; nothing copied, no file created,
// nothing written). Every other table, and an ssd one that
// PredictorOptions::table_storage names a storage for, is loaded
// (Dlrm::Load) into the storage the options say: DRAM by default. A
// converted checkpoint's (serve/convert.h) rows stay in their format: read
// whole into DRAM, or into the slow tier of a `simple` storage, or copied to
// the slow tier of a `static` or `dynamic` one with a DRAM cache of rows as
// stored in front (dynamic: CLOCK eviction beside the readers). The
// files served in place stay open for the predictor's life (the trainer
// may delete their checkpoint meanwhile) and are never reopened by path.
//
// Checksums (verify_checksums): the files loaded are verified before Open
// returns; the files served in place, in the background through their
// open descriptors (verification()), so that a large model is ready at
// once. A file found corrupt makes every later Predict fail with its
// DataLoss.
//
// Precision: the checkpoint's, with nothing timed. A bf16 checkpoint where
// oneDNN has no bf16 matmul is served in fp32 (its fp32 master weights),
// with a warning (warning()).
//
// Scoring: Predict takes preprocessed inputs (dense floats and each table's
// bags of row indices, as the trainer's batches); a request larger than
// max_batch is scored in pieces of max_batch. Each scoring takes an
// inference context from a pool (a DlrmForward: the dense part's weights,
// oneDNN plans and buffers of its own), looks the rows up through an
// EmbeddingSource (serve/embedding_source.h) and runs on
// threads_per_context OpenMP threads of the calling thread; the pool's lock
// is held only to take and give back a context, never while scoring. With
// more callers than contexts, callers wait for one.
//
// Exact: a batch is padded with empty samples up to the next planned size
// (1, 2, 4, ..., max_batch); a sample's score does not depend on the
// others of its batch, nor on the storage of the tables. Equal to
// Dlrm::Predict (dlrm-train's evaluation) of the same samples where oneDNN
// computes a row of a matmul alike at both batch sizes (docs/serving.md
// gives the tolerance where it does not; tests/serve/predictor_test.cc).
//
// Thread safety: Predict from any number of threads at once; the rest is
// const after Open.
//
//   CEMB_ASSIGN_OR_RETURN(std::unique_ptr<Predictor> p, Predictor::Open("/ckpt", {}));
//   std::vector<float> probabilities(n);
//   CEMB_RETURN_IF_ERROR(p->Predict({.size = n, .dense = dense, .bags = bags}, probabilities));
#ifndef CEMB_SERVE_PREDICTOR_H_
#define CEMB_SERVE_PREDICTOR_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "checkpoint/serving_manifest.h"
#include "data/criteo.h"
#include "dlrm/model.h"
#include "serve/embedding_source.h"
#include "tables/storage.h"

namespace cemb::serve {

struct PredictorOptions {
  // Where the tables loaded live while serving, and per-table overrides (by
  // table number; an override of a table trained on ssd loads it instead
  // of serving its snapshot in place). Loading into the ssd tier needs
  // storage.ssd.capacity_bytes and a directory for its log.
  StorageConfig storage;
  std::map<int, StorageConfig> table_storage;
  // DRAM for the rows of the tables served in place, shared among them in
  // proportion to their rows. Each table's share must hold the rows that
  // `contexts` requests of max_batch samples pin at once (Open says how
  // much is needed when it does not).
  int64_t ssd_cache_bytes = int64_t{1} << 30;
  // The largest batch one scoring runs (buffers and plans are made for
  // 1, 2, 4, ..., max_batch); a larger request is scored in pieces.
  int64_t max_batch = 256;
  // Inference contexts (concurrent scorings) and the OpenMP threads each
  // uses. 0, 0: the measured default (docs/serving.md): one context per
  // hardware thread, one thread each; with tables served in place,
  // kSsdContextsPerThread per hardware thread (a request waiting on the
  // drive holds a context but no core), fewer where a table's share of
  // ssd_cache_bytes cannot pin that many requests' rows (never fewer than
  // one per hardware thread).
  static constexpr int kSsdContextsPerThread = 4;
  int contexts = 0;
  int threads_per_context = 0;
  // Serve the tables that trained on ssd in place from their snapshots;
  // false: load them with `storage` (DRAM by default), as table_storage
  // does table by table.
  bool serve_in_place = true;
  // Verify every file's checksum (those served in place in the background).
  bool verify_checksums = true;
  // Lines about the model and warnings (precision); none when empty.
  std::function<void(std::string_view line)> log;
};

class Predictor {
 public:
  // Errors: NotFound (no checkpoint at `path`), DataLoss (a corrupt file,
  // named), FailedPrecondition (a checkpoint without a SERVING manifest,
  // written before it existed: the message says how to save it again),
  // InvalidArgument (options).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Predictor>> Open(const std::string& path,
                                                                       const PredictorOptions& options);
  ~Predictor();

  const std::string& checkpoint() const;        // the step-N directory opened
  const ServingManifest& manifest() const;
  dlrm::Precision precision() const;            // the MLPs' precision served
  const std::string& warning() const;           // why it is not the checkpoint's; empty when it is
  int contexts() const;
  int threads_per_context() const;
  int num_tables() const;
  int64_t num_dense() const;
  // The tables served in place from their snapshots, with their counters.
  std::vector<SnapshotTableInfo> snapshot_tables() const;
  // The tables behind a DRAM cache (static or dynamic storage), with their
  // counters, in the order of the layer's and then the converted ones.
  std::vector<CachedTableInfo> cached_tables() const;
  // Runs one eviction round on each dynamic cache whose free slots ran low,
  // as its evictor thread would, and returns the rows freed: room made
  // ahead of a burst, and counts a test can rely on. Safe beside requests.
  int64_t EvictCachedRows();
  // OK once every file was verified (or verify_checksums is off);
  // Unavailable while the background pass runs; the DataLoss it found.
  absl::Status verification() const;
  // Waits for the background pass to end; then verification().
  absl::Status WaitVerified() const;

  // probabilities[i] = the model's probability for sample i of `batch`
  // (batch.labels are not read). Errors: InvalidArgument naming what is
  // malformed (sizes, offsets); OutOfRange naming the table, bag and index
  // of a row out of range; DataLoss naming the table, file and offset of
  // a failed read (or a corrupt file: verification()).
  [[nodiscard]] absl::Status Predict(const dlrm::BatchView& batch, std::span<float> probabilities) const;

  // As Predict, from raw Criteo features (13 integers and 26 categorical
  // ids per sample, data/criteo.h's CriteoRow; labels not read) through the
  // training's preprocessing (data::CriteoTransform: the dense transform
  // and the id mapping the manifest names: modulo, or the vocabulary the
  // checkpoint keeps, data::kVocabularyFile). FailedPrecondition for a
  // model not trained on Criteo TSV (its manifest says ids=none) or whose
  // ids were mapped by a vocabulary that the checkpoint does not hold (one
  // written before checkpoints kept it).
  [[nodiscard]] absl::Status PredictCriteo(std::span<const data::CriteoRow> rows,
                                           std::span<float> probabilities) const;
  // OK when PredictCriteo can score this model; else its FailedPrecondition.
  [[nodiscard]] absl::Status TakesRawCriteo() const;

  // out = rows first .. first + n - 1 of table t as the model scores them
  // (fp32, n = out.size() / dim, row-major): through the same lookups as
  // Predict, so a converted table's rows come decoded. For the converter
  // (serve/convert.h) and inspection; from any thread, as Predict.
  // Errors: InvalidArgument for a table or row out of range, a size not a
  // multiple of dim; a read's DataLoss.
  [[nodiscard]] absl::Status ReadRows(int table, int64_t first, std::span<float> out) const;

  // The model (its tables, its dense master weights) the contexts were
  // copied from: for tests and inspection; change nothing through it.
  dlrm::Dlrm& model() const;

 private:
  struct Impl;
  explicit Predictor(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cemb::serve

#endif  // CEMB_SERVE_PREDICTOR_H_
