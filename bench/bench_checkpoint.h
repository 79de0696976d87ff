// A checkpoint for the predictor's benchmarks to open when they are given
// none: the Kaggle-shaped DLRM (the 26 Kaggle cardinalities capped at
// `rows`, dim 16, bottom 512-256-64-16, top 512-256-1, dot, fp32 MLPs, DRAM
// tables) trained one step by the trainer on synthetic data, in a temporary
// directory removed when the TempCheckpoint goes. With ssd_tables: the same
// MLPs over 4 tables of `rows` rows trained on the ssd tier, so that a
// predictor serves them in place from their snapshots (the rows never
// written are not in them).
//
//   absl::StatusOr<std::unique_ptr<TempCheckpoint>> ck = TempCheckpoint::Train({.rows = 100000}, "predictor_bench");
//   Predictor::Open((*ck)->path(), {});
//
// Thread safety: none needed (made once, before the measurement).
#ifndef CEMB_BENCH_BENCH_CHECKPOINT_H_
#define CEMB_BENCH_BENCH_CHECKPOINT_H_

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "train/config.h"
#include "train/trainer.h"

namespace cemb::bench {

class TempCheckpoint {
 public:
  struct Options {
    int64_t rows = 100000;
    bool ssd_tables = false;
  };
  // Trains it under $TMPDIR (or /tmp) in "<program>_XXXXXX".
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<TempCheckpoint>> Train(const Options& o, const char* program) {
    const char* base = std::getenv("TMPDIR");
    std::string dir = absl::StrCat(base != nullptr && *base != '\0' ? base : "/tmp", "/", program, "_XXXXXX");
    if (::mkdtemp(dir.data()) == nullptr) return absl::InternalError(absl::StrCat("mkdtemp ", dir, " failed"));
    std::unique_ptr<TempCheckpoint> ck(new TempCheckpoint(dir));
    absl::StatusOr<train::TrainConfig> c = train::TrainConfig::Parse(
        absl::StrCat("data: {source: synthetic, samples: 4096, max_ind_range: ", o.rows, ", work_dir: ", dir,
                     "/data}\nmodel: {embedding_dim: 16, bottom_mlp: [512, 256, 64, 16], top_mlp: [512, 256, 1], "
                     "mlp_precision: fp32",
                     o.ssd_tables ? absl::StrCat(", tables: {count: 4, rows: ", o.rows,
                                                 "}, storage: {kind: ssd, slow_tier: ", dir, "}, dram_budget: 64MiB")
                                  : "",
                     "}\ntrain: {batch_size: 1024, steps: 1, progress: false, checkpoint_dir: ", ck->path(), "}\n"),
        program);
    if (!c.ok()) return c.status();
    absl::StatusOr<std::unique_ptr<train::Trainer>> t = train::Trainer::Create(*c, {.out = nullptr});
    if (!t.ok()) return t.status();
    if (absl::StatusOr<train::TrainSummary> s = (*t)->Run(); !s.ok()) return s.status();
    return ck;
  }
  ~TempCheckpoint() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  TempCheckpoint(const TempCheckpoint&) = delete;
  TempCheckpoint& operator=(const TempCheckpoint&) = delete;

  // The checkpoint directory (Predictor::Open resolves its LATEST).
  std::string path() const { return dir_ + "/ck"; }

 private:
  explicit TempCheckpoint(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
};

}  // namespace cemb::bench

#endif  // CEMB_BENCH_BENCH_CHECKPOINT_H_
