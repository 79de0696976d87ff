// Predictor: a model that dlrm-train wrote, opened read-only and scored from
// any number of threads at once.
//
// Open(path) resolves a checkpoint (a step-N directory, the checkpoint
// directory, or its LATEST: checkpoint/checkpoint.h), verifies its files
// against its MANIFEST, reads its SERVING manifest
// (checkpoint/serving_manifest.h) and builds the same model the trainer ran
// (dlrm/model.h: every interaction, the MLPs' precision, the tables' rows,
// dim, row type and optimizer state), then loads the checkpoint into it
// (Dlrm::Load: tables of every storage kind, an ssd snapshot included, load
// into tables of the kind PredictorOptions::storage says; DRAM by default).
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

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "checkpoint/serving_manifest.h"
#include "data/criteo.h"
#include "dlrm/model.h"
#include "tables/storage.h"

namespace cemb::serve {

struct PredictorOptions {
  // Where every table's rows live while serving, and per-table overrides
  // (by table number). An ssd table needs storage.ssd.capacity_bytes and
  // a directory for its log (ssd.file.directory).
  StorageConfig storage;
  std::map<int, StorageConfig> table_storage;
  // The largest batch one scoring runs (buffers and plans are made for
  // 1, 2, 4, ..., max_batch); a larger request is scored in pieces.
  int64_t max_batch = 256;
  // Inference contexts (concurrent scorings) and the OpenMP threads each
  // uses. 0, 0: the measured default (docs/serving.md): one context per
  // hardware thread, one thread each.
  int contexts = 0;
  int threads_per_context = 0;
  // Verify every file's checksum at Open (a pass over the whole checkpoint).
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

  // probabilities[i] = the model's probability for sample i of `batch`
  // (batch.labels are not read). Errors: InvalidArgument naming what is
  // malformed (sizes, offsets); OutOfRange naming the table, bag and index
  // of a row out of range.
  [[nodiscard]] absl::Status Predict(const dlrm::BatchView& batch, std::span<float> probabilities) const;

  // As Predict, from raw Criteo features (13 integers and 26 categorical
  // ids per sample, data/criteo.h's CriteoRow; labels not read) through the
  // training's preprocessing (data::CriteoTransform: the dense transform
  // and the id mapping the manifest names). FailedPrecondition for a model
  // not trained on Criteo TSV (its manifest says ids=none) or whose ids
  // were mapped by a vocabulary that the checkpoint does not hold.
  [[nodiscard]] absl::Status PredictCriteo(std::span<const data::CriteoRow> rows,
                                           std::span<float> probabilities) const;

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
