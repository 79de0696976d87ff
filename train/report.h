// Report: what a training run tells people and scripts, and the one owner
// of its formats. Three channels:
//
//   text         the plan, one line per evaluation, the summary (phase
//                times, the cache and ssd reports, the final validation)
//                on a stream (dlrm-train: stdout)
//   progress bar one line redrawn on a terminal (stderr), erased before
//                any text is printed
//   JSON lines   train.log_jsonl: "eval", "step" and "summary" records
//                (docs/training.md shows them; scripts/plot_run.py and the
//                tests read them). Undefined numbers (NaN, inf) are null.
//
// The text and the records are made by free functions (PlanText, EvalText,
// EvalJson, SummaryText, SummaryJson) that tests call; Report sends them.
//
// Thread safety: one thread (the trainer's) uses a Report.
//
//   Report report(stdout, stderr, /*progress=*/true);
//   CEMB_RETURN_IF_ERROR(report.OpenLog("run.jsonl", /*append=*/false));
//   report.Print("checkpoint: %s\n", path);
//   report.Progress(step, total_steps, samples_per_s, loss, eta_s);
//   report.Eval(record, samples_per_s);
#ifndef CEMB_TRAIN_REPORT_H_
#define CEMB_TRAIN_REPORT_H_

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "data/dataset.h"
#include "dlrm/model.h"
#include "dlrm/precision.h"
#include "tables/embedding_layer.h"
#include "train/config.h"
#include "train/dram_budget.h"
#include "train/metrics.h"

namespace cemb::train {

struct EvalRecord {
  int64_t step = 0;       // steps done when evaluated
  int64_t samples = 0;    // samples those steps trained (a partial last batch of an epoch counts its own)
  double epoch = 0;       // samples / train samples
  float lr = 0;           // the learning rate of the last step
  double train_loss = 0;  // mean step loss since the previous record
  MetricsResult metrics;  // on the validation set
  double elapsed_seconds = 0;
};

struct TrainSummary {
  int64_t first_step = 0;         // where this run started (0, or the checkpoint's step)
  int64_t steps = 0;              // steps done at the end
  std::vector<double> losses;     // the mean loss of each step in [first_step, steps)
  std::vector<EvalRecord> evals;  // including the final one (when there is validation data)
  MetricsResult final_metrics;
  dlrm::PhaseTimes train_times;  // data, model phases, cache flush, other
  dlrm::PhaseTimes eval_times;
  double train_seconds = 0, eval_seconds = 0, checkpoint_seconds = 0, export_seconds = 0;
  double samples_per_second = 0;
  double slowest_step_seconds = 0;  // the longest training step, from loading its batch to its End
  int64_t slowest_step = -1;
  std::vector<TableReport> tables;
  std::string last_checkpoint;  // empty when none was written
};

// What the summary says beside a TrainSummary.
struct RunFacts {
  std::string config_name;  // TrainConfig::source_name
  int64_t batch_size = 0;
  bool has_validation = false;  // false: the val_* numbers are null
  dlrm::Precision mlp_precision = dlrm::Precision::kFp32;
  dlrm::Precision mlp_precision_requested = dlrm::Precision::kFp32;
};

// A JSON number, %.17g (a double reads back exactly); NaN and inf as null.
std::string JsonNumber(double v);
// A JSON string: quoted, with ", \, newline, tab and control characters escaped.
std::string JsonString(std::string_view s);

// Bytes of embedding rows by where they live (the model line of the plan).
struct TableBytes {
  double dram = 0, slow = 0, ssd = 0;
};
// Of the tables in `model` (several processes: this rank's; the trainer
// sums every rank's).
TableBytes TableBytesOf(const dlrm::DlrmOptions& model, bool bf16_tables);

// model.dram_budget's split among the tables in `dram_split` (one rank's),
// a line ending in a newline: "dram_budget: 8.0 GiB, ..." (several
// processes: "rank 1's dram_budget: ...", each rank's budget its own), or a
// warning when no table shares it; "" without a budget.
std::string DramBudgetText(const TrainConfig& config, const DramSplit& dram_split, int rank, int ranks);
// The plan printed before training: the data, the model and where its
// tables live (`tables`: the whole model's), the budget's lines
// (DramBudgetText of every rank, in rank order), a precision warning, the
// length.
std::string PlanText(const TrainConfig& config, const dlrm::DlrmOptions& model, const TableBytes& tables,
                     const std::string& budget_lines, const dlrm::MlpPrecisionChoice& precision, const data::Dataset& train,
                     const data::Dataset* validation, int64_t total_steps, int64_t total_samples);
// One evaluation: the text line and the "eval" record.
std::string EvalText(const EvalRecord& r, double samples_per_s);
std::string EvalJson(const EvalRecord& r, double samples_per_s);
// The end of a run: the phase table, the cache and ssd reports, the final
// validation; and the "summary" record.
std::string SummaryText(const TrainSummary& summary, const RunFacts& facts);
std::string SummaryJson(const TrainSummary& summary, const RunFacts& facts);

// A one-line progress bar on a terminal, redrawn at most 5 times a second.
class ProgressBar {
 public:
  // Draws only when `wanted` and `stream` is a terminal.
  ProgressBar(FILE* stream, bool wanted);
  void Update(int64_t step, int64_t total, double samples_per_s, double loss, double eta_s);
  // Erases the bar so that a report line can be printed.
  void Clear();

 private:
  FILE* stream_;
  bool enabled_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_{};
};

class Report {
 public:
  // `out`: the text (nullptr: none); the bar on `progress_stream` when
  // `progress` and it is a terminal.
  Report(FILE* out, FILE* progress_stream, bool progress) : out_(out), bar_(progress_stream, progress) {}
  ~Report();
  Report(const Report&) = delete;
  Report& operator=(const Report&) = delete;

  // The JSON-lines log, truncated or (resume) appended to. Errors name it.
  [[nodiscard]] absl::Status OpenLog(const std::string& path, bool append);

  template <typename... Args>
  void Print(const absl::FormatSpec<Args...>& format, const Args&... args) {
    if (out_ == nullptr) return;
    bar_.Clear();
    std::fputs(absl::StrFormat(format, args...).c_str(), out_);
    std::fflush(out_);
  }
  void Progress(int64_t step, int64_t total, double samples_per_s, double loss, double eta_s) {
    bar_.Update(step, total, samples_per_s, loss, eta_s);
  }
  void ClearProgress() { bar_.Clear(); }

  // The "step" record, printed straight into the log: a training step
  // builds no string. Nothing without a log.
  void Step(int64_t step, double loss, float lr, double seconds);
  void Eval(const EvalRecord& r, double samples_per_s);
  void Summary(const TrainSummary& summary, const RunFacts& facts);

 private:
  void Log(const std::string& record);

  FILE* out_;
  ProgressBar bar_;
  FILE* log_ = nullptr;
};

}  // namespace cemb::train

#endif  // CEMB_TRAIN_REPORT_H_
