// EmbeddingSource: where a predictor's pooled rows come from, behind one
// call that any number of request threads make at once. The predictor knows
// nothing of how the tables are stored; a read-only ssd tier (a snapshot
// served in place, ssd/) replaces the implementation below for ssd tables
// without the predictor changing.
//
// MakeLayerSource over an EmbeddingLayer (the one that exists today):
//   - no ssd table: EmbeddingLayer::LookupShared, no lock, on the caller's
//     threads;
//   - ssd tables (loaded from the checkpoint into a new log, as training
//     loads them): each request's rows go through the step protocol
//     (Prefetch, BeginStep, Lookup, EndStep) under one mutex, so lookups of
//     such a layer run one at a time (the dense part of scoring does not
//     wait for it).
//
// Thread safety: Lookup from any number of threads at once.
//
//   CEMB_ASSIGN_OR_RETURN(std::unique_ptr<EmbeddingSource> s, MakeLayerSource(layer));
//   CEMB_RETURN_IF_ERROR(s->Lookup(bags, out, /*threads=*/1));
#ifndef CEMB_SERVE_EMBEDDING_SOURCE_H_
#define CEMB_SERVE_EMBEDDING_SOURCE_H_

#include <memory>
#include <span>

#include "absl/status/status.h"
#include "embedding/types.h"
#include "tables/embedding_layer.h"

namespace cemb::serve {

class EmbeddingSource {
 public:
  virtual ~EmbeddingSource() = default;
  // out.row(b) columns [t*dim, (t+1)*dim) = the pooled rows of bag b of
  // table t (EmbeddingLayer::Lookup's layout), on `threads` OpenMP threads of
  // the caller. Errors name the table, bag and index of a bad row.
  [[nodiscard]] virtual absl::Status Lookup(std::span<const Bags<int32_t>> bags, MatrixView out, int threads) = 0;
  // True when Lookup takes a lock (ssd tables through the step protocol).
  virtual bool serialised() const = 0;
};

// A source over `layer`, which must outlive it and which nothing else
// changes while it is used.
std::unique_ptr<EmbeddingSource> MakeLayerSource(EmbeddingLayer& layer);

}  // namespace cemb::serve

#endif  // CEMB_SERVE_EMBEDDING_SOURCE_H_
