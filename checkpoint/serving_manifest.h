// ServingManifest: everything a predictor needs to rebuild and feed a
// trained model, written by the trainer into every checkpoint as the text
// file SERVING (beside MANIFEST, checksummed by it like any payload file).
//
//   cemb-serving v1
//   num_dense=13
//   dim=16
//   bottom_mlp=512,256,64,16
//   top_mlp=512,256,1
//   interaction=dot                 dot | concat | dcn (dlrm/interaction.h's names)
//   self_interaction=0
//   dcn_layers=3                    read with dcn
//   dcn_rank=512
//   mlp_precision=fp32              the precision the model trained in (never auto)
//   table_dtype=fp32                fp32 | bf16 rows; converted: fp32 | bf16 | fp16 | int8
//   table_rows_format=trained       trained: the tables' files as training saved them;
//                                   converted: every table model/emb_l.<t>.ssd, a snapshot
//                                   of its rows converted for serving (dlrm-convert,
//                                   serve/convert.h), no optimizer state. Absent (files
//                                   written before the key): trained
//   embedding_optimizer=sgd         the rows' bytes depend on it (adagrad keeps state per row)
//   seed=1                          the model's seed (MLPs: seed, seed+1; cross network seed+2)
//   table_seed=1                    the tables' InitUniform seed (table t: table_seed + t)
//   table_rows=1460,583,...         one per table
//   table_storage=dram,dram,ssd,... one per table: where they trained (a predictor may differ)
//   hotness=1,1,...                 indices per bag of each table in the training data
//   batch_size=2048                 the training's (its evaluation's) batch
//   dense_transform=log1p           log1p: log(1 + max(x, 0)) of a Criteo integer; none
//   ids=modulo                      modulo: row = id % table_rows[t]; vocabulary; none
//                                   (synthetic or binary data: rows only)
//   max_ind_range=0                 data.max_ind_range (already in table_rows)
//   data_source=tsv                 synthetic | tsv | binary
//
// One key per line, "key=value"; lists are comma-separated. Keys are
// written in this order and every key is required when read (except
// table_rows_format, added later, which defaults): a file that misses one,
// repeats one or has one unknown is DataLoss naming the file and the key. Values are kept as text for names (this library sits below
// dlrm/ and tables/, which own the enums); serve/ turns them into options.
//
// Thread safety: plain values and free functions.
//
//   CEMB_ASSIGN_OR_RETURN(std::string path, ResolveCheckpoint("/ckpt"));
//   CEMB_ASSIGN_OR_RETURN(ServingManifest m, ReadServingManifest(path));
//   // m.table_rows.size() tables of m.dim features
#ifndef CEMB_CHECKPOINT_SERVING_MANIFEST_H_
#define CEMB_CHECKPOINT_SERVING_MANIFEST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cemb {

inline constexpr char kServingManifest[] = "SERVING";

struct ServingManifest {
  int64_t num_dense = 13;
  int64_t dim = 16;
  std::vector<int64_t> bottom_mlp;
  std::vector<int64_t> top_mlp;
  std::string interaction = "dot";
  bool self_interaction = false;
  int64_t dcn_layers = 0;
  int64_t dcn_rank = 0;
  std::string mlp_precision = "fp32";
  std::string table_dtype = "fp32";
  std::string table_rows_format = "trained";
  std::string embedding_optimizer = "sgd";
  uint64_t seed = 1;
  uint64_t table_seed = 1;
  std::vector<uint64_t> table_rows;
  std::vector<std::string> table_storage;
  std::vector<uint32_t> hotness;
  int64_t batch_size = 0;
  std::string dense_transform = "log1p";
  std::string ids = "modulo";
  uint64_t max_ind_range = 0;
  std::string data_source;

  bool operator==(const ServingManifest&) const = default;
};

// The file's text (above).
std::string SerializeServingManifest(const ServingManifest& m);
// Parses the text; `name` stands for the file in messages (DataLoss).
[[nodiscard]] absl::StatusOr<ServingManifest> ParseServingManifest(absl::string_view text, absl::string_view name);
// Reads <checkpoint>/SERVING. A checkpoint written before SERVING existed
// is FailedPrecondition: "<checkpoint> has no SERVING manifest (written
// before ...): resume it with this dlrm-train for one step to save it again".
[[nodiscard]] absl::StatusOr<ServingManifest> ReadServingManifest(const std::string& checkpoint);

}  // namespace cemb

#endif  // CEMB_CHECKPOINT_SERVING_MANIFEST_H_
