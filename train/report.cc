#include "train/report.h"

#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/checksum.h"
#include "base/file.h"
#include "base/human.h"

namespace cemb::train {

std::string JsonNumber(double v) {
  if (!std::isfinite(v)) return "null";
  return absl::StrFormat("%.17g", v);
}

std::string JsonString(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

TableBytes TableBytesOf(const dlrm::DlrmOptions& mo, bool bf16_tables) {
  TableBytes b;
  const double row_bytes = static_cast<double>(EmbeddingRowBytes(mo.embeddings.dim, bf16_tables, mo.embeddings.optimizer));
  for (const EmbeddingTableSpec& spec : mo.embeddings.tables) {
    const double bytes = static_cast<double>(spec.rows) * row_bytes;
    (spec.storage.kind == StorageKind::kSsd ? b.ssd : spec.storage.kind == StorageKind::kDram ? b.dram : b.slow) +=
        bytes;
  }
  return b;
}

std::string DramBudgetText(const TrainConfig& config, const DramSplit& split, int rank, int ranks) {
  if (!config.model.dram_budget) return "";
  const int64_t budget = config.model.dram_budget->Resolve(PhysicalMemoryBytes());
  const std::string whose = ranks > 1 ? absl::StrCat("rank ", rank, "'s ") : "";
  if (split.shares.empty()) {
    return absl::StrCat("warning: ", whose, "model.dram_budget (", HumanBytes(static_cast<double>(budget)),
                        ") has no effect: no table", ranks > 1 ? " of the rank's" : "",
                        " is ssd, or static/dynamic without a cache size\n");
  }
  std::vector<std::string> shares;  // "emb2 1.2 MiB (0.91)": the sampled lookups its rows would serve
  double rows_dram = 0;
  for (const DramShare& d : split.shares) {
    rows_dram += static_cast<double>(d.bytes);
    shares.push_back(
        absl::StrCat("emb", d.table, " ", HumanBytes(static_cast<double>(d.bytes)),
                     std::isnan(d.sampled_hit_rate) ? "" : absl::StrFormat(" (%.2f)", d.sampled_hit_rate)));
  }
  return absl::StrCat(
      whose, "dram_budget: ", HumanBytes(static_cast<double>(budget)), ", ",
      HumanBytes(static_cast<double>(split.used)), " used, ", HumanBytes(rows_dram),
      " of it for rows: ", absl::StrJoin(shares, ", "),
      split.sampled > 0
          ? absl::StrCat("; split by the lookups of the first ", split.sampled,
                         " samples (in parentheses: the share of them the rows in DRAM would serve), then by size")
          : "; split by size",
      "\n");
}

std::string PlanText(const TrainConfig& config, const dlrm::DlrmOptions& mo, const TableBytes& tables,
                     const std::string& budget_lines, const dlrm::MlpPrecisionChoice& precision, const data::Dataset& train,
                     const data::Dataset* validation, int64_t total_steps, int64_t total_samples) {
  const TrainSettings& t = config.train;
  std::string ssd_line;
  if (tables.ssd > 0) {
    ssd_line = absl::StrCat(", ", HumanBytes(tables.ssd), " on ssd (",
                            config.model.storage.slow_tier.empty() ? "$TMPDIR" : config.model.storage.slow_tier,
                            "; prefetch ", t.prefetch_batches, " batches)");
  }
  const uint64_t train_n = train.num_samples();
  std::string text = absl::StrFormat("data: %s, %d train / %d validation samples, %d tables, hotness %s\n",
                                     DataSourceName(config.data.source), train_n,
                                     validation ? validation->num_samples() : 0, train.num_tables(),
                                     data::HotnessText(train.hotness()));
  absl::StrAppendFormat(
      &text,
      "model: dim %d, bottom %d-%s, top %s, %s interaction%s, %s MLPs%s, %s tables%s: %s in DRAM, %s on the slow "
      "tier%s\n",
      mo.embeddings.dim, mo.num_dense, absl::StrJoin(mo.bottom_mlp, "-"), absl::StrJoin(mo.top_mlp, "-"),
      dlrm::InteractionKindName(mo.interaction),
      mo.self_interaction                        ? " (with self)"
      : mo.interaction == dlrm::InteractionKind::kDcn ? absl::StrFormat(" (%d layers, %s, %s)", mo.dcn_layers,
                                                                   mo.dcn_rank > 0 ? absl::StrCat("rank ", mo.dcn_rank)
                                                                                   : std::string("full rank"),
                                                                   dlrm::PrecisionName(mo.mlp_precision))
                                                 : "",
      dlrm::PrecisionName(mo.mlp_precision), precision.reason.empty() ? "" : absl::StrCat(" (", precision.reason, ")"),
      NameOf(kTableDtypeNames, config.model.bf16_tables),
      RowStateFloats(1, config.optimizer.embedding) > 0 ? " with their fp32 Adagrad accumulators" : "",
      HumanBytes(tables.dram), HumanBytes(tables.slow), ssd_line);
  absl::StrAppend(&text, budget_lines);
  if (!precision.warning.empty()) absl::StrAppend(&text, "warning: ", precision.warning, "\n");
  absl::StrAppendFormat(
      &text, "train: %d steps of %d samples (%d samples, %.2f epochs), lr %g (%s embeddings, %s dense), %s threads\n",
      total_steps, t.batch_size, total_samples, static_cast<double>(total_samples) / static_cast<double>(train_n),
      config.optimizer.learning_rate,
      EmbeddingOptimizerName(config.optimizer.embedding), dlrm::DenseOptimizerName(config.optimizer.dense),
      t.threads > 0 ? absl::StrCat(t.threads) : std::string("all"));
  return text;
}

std::string EvalText(const EvalRecord& r, double samples_per_s) {
  const MetricsResult& m = r.metrics;
  return absl::StrFormat(
      "step %7d  epoch %6.2f  train loss %.5f  val loss %.5f  auc %.4f  accuracy %.4f  (%s samples/s)\n", r.step,
      r.epoch, r.train_loss, m.log_loss, m.auc, m.accuracy, HumanCount(samples_per_s));
}

std::string EvalJson(const EvalRecord& r, double samples_per_s) {
  const MetricsResult& m = r.metrics;
  return absl::StrCat("{\"type\":\"eval\",\"step\":", r.step, ",\"epoch\":", JsonNumber(r.epoch),
                      ",\"samples\":", r.samples, ",\"lr\":", JsonNumber(r.lr),
                      ",\"train_loss\":", JsonNumber(r.train_loss), ",\"val_log_loss\":", JsonNumber(m.log_loss),
                      ",\"val_auc\":", JsonNumber(m.auc), ",\"val_accuracy\":", JsonNumber(m.accuracy),
                      ",\"val_samples\":", m.samples, ",\"elapsed_s\":", JsonNumber(r.elapsed_seconds),
                      ",\"samples_per_s\":", JsonNumber(samples_per_s), "}");
}

std::string SummaryText(const TrainSummary& summary, const RunFacts& facts) {
  std::string text;
  const int64_t steps_run = summary.steps - summary.first_step;
  const double total = summary.train_times.total();
  absl::StrAppendFormat(&text, "\ntraining: %d steps in %.2f s, %s samples/s; evaluation %.2f s; checkpoints %.2f s\n",
                        steps_run, summary.train_seconds, HumanCount(summary.samples_per_second), summary.eval_seconds,
                        summary.checkpoint_seconds);
  absl::StrAppendFormat(&text, "%-24s %10s %7s %10s\n", "phase", "seconds", "share", "ms/step");
  for (int p = 0; p < dlrm::kNumPhases; ++p) {
    const double s = summary.train_times.seconds[static_cast<size_t>(p)];
    // One process never communicates: no lines of zeros for it.
    const bool communication = p == static_cast<int>(dlrm::Phase::kAllToAll) || p == static_cast<int>(dlrm::Phase::kAllreduce);
    if (communication && s == 0) continue;
    absl::StrAppendFormat(&text, "%-24s %10.3f %6.1f%% %10.3f\n", dlrm::PhaseName(static_cast<dlrm::Phase>(p)), s,
                          total > 0 ? 100 * s / total : 0.0,
                          steps_run > 0 ? 1e3 * s / static_cast<double>(steps_run) : 0.0);
  }
  absl::StrAppendFormat(&text, "%-24s %10.3f %6.1f%% %10.3f\n", "total", total, 100.0,
                        steps_run > 0 ? 1e3 * total / static_cast<double>(steps_run) : 0.0);

  bool any_cached = false, any_ssd = false;
  for (const TableReport& r : summary.tables) any_cached |= r.cached, any_ssd |= r.ssd;
  bool header = false;
  for (size_t i = 0; i < summary.tables.size(); ++i) {
    const TableReport& r = summary.tables[i];
    if ((any_cached || any_ssd) && !r.cached && r.storage == "dram") continue;  // the report is about the slow tier
    if (r.ssd) continue;                                                        // below
    if (!header) {
      absl::StrAppendFormat(&text, "\n%-8s %11s %-8s %9s %12s %12s %8s %12s %12s\n", "table", "rows", "storage",
                            "hit rate", "lookups", "migrations", "flushes", "slow read", "slow written");
      header = true;
    }
    const CacheStats& c = r.stats;
    absl::StrAppendFormat(
        &text, "%-8s %11d %-8s %9s %12d %12d %8d %12s %12s\n", r.name.empty() ? absl::StrCat(i) : r.name,
        r.rows, r.storage,
        r.cached ? absl::StrFormat("%.2f%%", 100 * c.hit_rate()) : std::string("-"), c.lookups(), c.migrations(),
        c.flushes(), r.cached || r.storage != "dram" ? HumanBytes(c.slow_bytes_read()) : "-",
        r.cached || r.storage != "dram" ? HumanBytes(c.slow_bytes_written()) : "-");
  }
  if (any_ssd) {
    // hit rate: distinct rows of the prefetched batches already in DRAM;
    // computed: rows first used (lazy initialisation, no read); rows read:
    // from the log (or a write buffer); rows wrtn: dirty rows appended to the
    // log; w.ampl.: bytes written (segments, the collector's moves) per byte
    // of those rows; moved: rows the collector appended again; file/live:
    // the file against the bytes of the rows it holds; req/step: requests;
    // cpu: the tier's thread CPU per request; waited: in WaitResident.
    const double steps = static_cast<double>(std::max<int64_t>(1, summary.steps - summary.first_step));
    absl::StrAppendFormat(&text, "\n%-8s %11s %10s %9s %10s %10s %10s %10s %10s %7s %9s %15s %8s %8s %9s\n", "ssd",
                          "rows", "DRAM", "hit rate", "computed", "rows read", "bytes read", "rows wrtn",
                          "bytes wrtn", "w.ampl.", "moved", "file / live", "req/step", "cpu/req", "waited");
    for (size_t i = 0; i < summary.tables.size(); ++i) {
      const TableReport& r = summary.tables[i];
      if (!r.ssd) continue;
      const SsdStats& s = r.ssd_stats;
      absl::StrAppendFormat(
          &text, "%-8s %11d %10s %8.2f%% %10d %10d %10s %10d %10s %6.2fx %9d %15s %8.0f %6.1fus %8.3fs\n",
          r.name.empty() ? absl::StrCat(i) : r.name, r.rows, HumanBytes(static_cast<double>(r.dram_bytes)),
          100 * s.hit_rate(), s.lazy_rows, s.fetched_rows, HumanBytes(static_cast<double>(s.io.bytes_read)),
          s.rows_written, HumanBytes(static_cast<double>(s.io.bytes_written)), s.write_amplification(r.row_bytes),
          s.gc_rows_moved,
          absl::StrCat(HumanBytes(static_cast<double>(s.file_bytes)), " / ",
                       HumanBytes(static_cast<double>(s.live_rows * r.row_bytes))),
          static_cast<double>(s.requests()) / steps, s.cpu_us_per_request(), absl::ToDoubleSeconds(s.waited));
    }
  }
  if (any_cached || any_ssd) absl::StrAppendFormat(&text, "(tables in DRAM without a cache are not listed)\n");
  if (facts.has_validation) {
    const MetricsResult& f = summary.final_metrics;
    absl::StrAppendFormat(&text, "\nfinal validation (%d samples): log loss %.5f, AUC %.4f, accuracy %.4f\n", f.samples,
                          f.log_loss, f.auc, f.accuracy);
  }

  return text;
}

std::string SummaryJson(const TrainSummary& summary, const RunFacts& facts) {
  std::string phases;
  for (int p = 0; p < dlrm::kNumPhases; ++p) {
    absl::StrAppend(&phases, p ? "," : "", JsonString(dlrm::PhaseName(static_cast<dlrm::Phase>(p))), ":",
                    JsonNumber(summary.train_times.seconds[static_cast<size_t>(p)]));
  }
  std::string tables;
  for (size_t i = 0; i < summary.tables.size(); ++i) {
    const TableReport& r = summary.tables[i];
    const CacheStats& c = r.stats;
    absl::StrAppend(&tables, i ? "," : "", "{\"table\":", r.id, ",\"name\":", JsonString(r.name),
                    ",\"rows\":", r.rows,
                    ",\"storage\":", JsonString(r.storage), ",\"kernel\":", JsonString(r.kernel),
                    ",\"cached\":", r.cached ? "true" : "false", ",\"lookups\":", c.lookups(), ",\"hits\":", c.hits(),
                    ",\"hit_rate\":", JsonNumber(r.cached ? c.hit_rate() : NAN), ",\"migrations\":", c.migrations(),
                    ",\"flushes\":", c.flushes(), ",\"rows_written_back\":", c.rows_written_back(),
                    ",\"slow_bytes_read\":", c.slow_bytes_read(), ",\"slow_bytes_written\":", c.slow_bytes_written());
    if (r.ssd) {
      const SsdStats& d = r.ssd_stats;
      absl::StrAppend(&tables, ",\"ssd\":{\"dram_bytes\":", r.dram_bytes, ",\"hit_rate\":", JsonNumber(d.hit_rate()),
                      ",\"rows_asked\":", d.prefetch_rows, ",\"rows_read\":", d.fetched_rows,
                      ",\"rows_computed\":", d.lazy_rows, ",\"bytes_read\":", d.io.bytes_read,
                      ",\"rows_written\":", d.rows_written, ",\"bytes_written\":", d.io.bytes_written,
                      ",\"read_amplification\":", JsonNumber(d.read_amplification(r.row_bytes)),
                      ",\"average_queue_depth\":", JsonNumber(d.io.average_queue_depth()),
                      ",\"evictions\":", d.evictions, ",\"dirty_evictions\":", d.dirty_evictions,
                      ",\"sync_fetches\":", d.sync_fetches, ",\"reads\":", d.io.reads, ",\"writes\":", d.io.writes,
                      ",\"registered_requests\":", d.io.registered,
                      ",\"fetch_reads\":", d.fetch_reads, ",\"fetch_rereads\":", d.fetch_rereads,
                      ",\"shared_rows\":", d.shared_rows,
                      ",\"rows_from_write_buffers\":", d.buffer_rows,
                      ",\"segments_written\":", d.segments_written,
                      ",\"write_amplification\":", JsonNumber(d.write_amplification(r.row_bytes)),
                      ",\"collector_segments_read\":", d.gc_segments, ",\"collector_segments_freed_unread\":",
                      d.gc_freed, ",\"collector_rows_moved\":", d.gc_rows_moved,
                      ",\"collector_bytes_moved\":", d.gc_rows_moved * r.row_bytes,
                      ",\"collector_bytes_read\":", d.gc_bytes_read, ",\"file_bytes\":", d.file_bytes,
                      ",\"live_bytes\":", d.live_rows * r.row_bytes,
                      ",\"cpu_s\":", JsonNumber(absl::ToDoubleSeconds(d.cpu)),
                      ",\"cpu_us_per_request\":", JsonNumber(d.cpu_us_per_request()),
                      ",\"waited_s\":", JsonNumber(absl::ToDoubleSeconds(d.waited)), "}");
    }
    absl::StrAppend(&tables, "}");
  }
  const MetricsResult& f = summary.final_metrics;
  // Two runs trained the same model step for step when their digests of
  // every step's loss (the bits of the doubles) are equal.
  Checksum64 losses_digest;
  losses_digest.Update(summary.losses.data(), summary.losses.size() * sizeof(double));
  return absl::StrCat(
      "{\"type\":\"summary\",\"config\":", JsonString(facts.config_name), ",\"first_step\":", summary.first_step,
      ",\"steps\":", summary.steps, ",\"batch_size\":", facts.batch_size,
      ",\"mlp_precision\":", JsonString(dlrm::PrecisionName(facts.mlp_precision)),
      ",\"mlp_precision_requested\":", JsonString(dlrm::PrecisionName(facts.mlp_precision_requested)),
      ",\"train_seconds\":", JsonNumber(summary.train_seconds),
      ",\"samples_per_s\":", JsonNumber(summary.samples_per_second),
      ",\"slowest_step\":", summary.slowest_step,
      ",\"slowest_step_seconds\":", JsonNumber(summary.slowest_step_seconds),
      ",\"losses_digest\":\"",
      absl::StrFormat("%016x", losses_digest.Digest()), "\"", ",\"eval_seconds\":", JsonNumber(summary.eval_seconds),
      ",\"checkpoint_seconds\":", JsonNumber(summary.checkpoint_seconds),
      ",\"export_seconds\":", JsonNumber(summary.export_seconds),
      ",\"val_log_loss\":", JsonNumber(facts.has_validation ? f.log_loss : NAN),
      ",\"val_auc\":", JsonNumber(facts.has_validation ? f.auc : NAN),
      ",\"val_accuracy\":", JsonNumber(facts.has_validation ? f.accuracy : NAN), ",\"phases\":{", phases,
      "},\"tables\":[", tables, "]}");
}

ProgressBar::ProgressBar(FILE* stream, bool wanted)
    : stream_(stream), enabled_(wanted && stream && ::isatty(::fileno(stream))) {}

void ProgressBar::Update(int64_t step, int64_t total, double samples_per_s, double loss, double eta_s) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (step < total && drawn_ && now - last_ < std::chrono::milliseconds(200)) return;
  last_ = now;
  drawn_ = true;
  constexpr int kWidth = 24;
  const double f = total > 0 ? static_cast<double>(step) / static_cast<double>(total) : 1.0;
  std::string bar(static_cast<size_t>(f * kWidth), '=');
  bar.resize(kWidth, ' ');
  std::fprintf(stream_, "\r\033[Kstep %" PRId64 "/%" PRId64 " [%s] %5.1f%% %s samples/s loss %.4f ETA %s", step, total,
               bar.c_str(), 100 * f, HumanCount(samples_per_s).c_str(), loss, HumanTime(eta_s).c_str());
  std::fflush(stream_);
}

void ProgressBar::Clear() {
  if (!enabled_ || !drawn_) return;
  std::fprintf(stream_, "\r\033[K");
  std::fflush(stream_);
  drawn_ = false;
}

Report::~Report() {
  if (log_) std::fclose(log_);
}

absl::Status Report::OpenLog(const std::string& path, bool append) {
  if (log_) std::fclose(log_);
  log_ = std::fopen(path.c_str(), append ? "a" : "w");
  if (!log_) return base::ErrnoStatus(errno, path, "open for writing");
  return absl::OkStatus();
}

void Report::Log(const std::string& record) {
  if (!log_) return;
  std::fputs(record.c_str(), log_);
  std::fputc('\n', log_);
  std::fflush(log_);
}

void Report::Step(int64_t step, double loss, float lr, double seconds) {
  if (!log_) return;
  // Through Log: flushed, so that a long run's records can be followed as they come.
  Log(absl::StrFormat("{\"type\":\"step\",\"step\":%d,\"loss\":%.17g,\"lr\":%.9g,\"seconds\":%.6g}", step, loss,
                      static_cast<double>(lr), seconds));
}

void Report::Eval(const EvalRecord& r, double samples_per_s) {
  Print("%s", EvalText(r, samples_per_s));
  Log(EvalJson(r, samples_per_s));
}

void Report::Summary(const TrainSummary& summary, const RunFacts& facts) {
  Print("%s", SummaryText(summary, facts));
  Log(SummaryJson(summary, facts));
}

}  // namespace cemb::train
