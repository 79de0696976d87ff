// Metrics: dlrm-serve's counters and histograms, rendered in Prometheus'
// text exposition format (version 0.0.4) for GET /metrics. Every metric's
// name starts with cemb_serve_; docs/serving.md lists them.
//
// Thread safety: Count* and Observe* from any number of threads (relaxed
// atomics, no lock); Render from any thread, a consistent-enough snapshot
// (each number is read once; a scrape may see a request counted whose
// latency is not yet observed).
//
//   Metrics m(/*max_batch=*/256);
//   m.CountRequest(Endpoint::kInfer, 200);
//   m.ObserveLatency(0.0021);
//   std::string text = m.Render({.ready = true, .model_version = 1000, .ssd_tables = p.snapshot_tables()});
#ifndef CEMB_SERVER_METRICS_H_
#define CEMB_SERVER_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "serve/embedding_source.h"

namespace cemb::server {

// A histogram of fixed upper bounds (Prometheus' cumulative buckets, +Inf last).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double value);
  // The _bucket, _sum and _count lines of `name`, with its HELP and TYPE.
  void Render(std::string& out, absl::string_view name, absl::string_view help) const;

 private:
  const std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // per bound, +Inf last (not cumulative)
  std::atomic<double> sum_{0.0};
};

enum class Endpoint { kInfer, kMetadata, kHealth, kMetrics, kOther };
inline constexpr int kNumEndpoints = 5;

// What Render reports beside the counters: the state at the scrape.
struct Gauges {
  bool ready = false;
  int64_t model_version = -1;  // the checkpoint's step; -1 before a model is open
  int64_t queued = 0;          // requests waiting to be scored
  std::vector<serve::SnapshotTableInfo> ssd_tables;  // the model's tables served in place
};

class Metrics {
 public:
  explicit Metrics(int64_t max_batch);

  void CountRequest(Endpoint endpoint, int http_status);
  void ObserveLatency(double seconds);  // an infer request, from its handler's start to its answer
  void ObserveBatch(int64_t samples);   // one scoring
  void CountShed() { shed_.fetch_add(1, std::memory_order_relaxed); }
  void CountReload(bool ok) { (ok ? reloads_ : reload_failures_).fetch_add(1, std::memory_order_relaxed); }

  std::string Render(const Gauges& gauges) const;

 private:
  static constexpr int kCodes = 600;
  std::array<std::array<std::atomic<uint64_t>, kCodes>, kNumEndpoints> requests_{};
  Histogram latency_;
  Histogram batch_;
  std::atomic<uint64_t> shed_{0}, reloads_{0}, reload_failures_{0};
};

}  // namespace cemb::server

#endif  // CEMB_SERVER_METRICS_H_
