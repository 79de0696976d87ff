#include "server/metrics.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace cemb::server {
namespace {

constexpr std::array<const char*, kNumEndpoints> kEndpointNames = {"infer", "metadata", "health", "metrics",
                                                                        "other"};

// Seconds, 50 us to 10 s.
std::vector<double> LatencyBounds() {
  return {50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 15e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3,
          1.0,   2.5,    5.0,    10.0};
}

// 1, 2, 4, ..., max_batch.
std::vector<double> BatchBounds(int64_t max_batch) {
  std::vector<double> b;
  for (int64_t s = 1; s < max_batch; s *= 2) b.push_back(static_cast<double>(s));
  b.push_back(static_cast<double>(max_batch));
  return b;
}

void Header(std::string& out, absl::string_view name, absl::string_view help, absl::string_view type) {
  absl::StrAppend(&out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1)) {}

void Histogram::Observe(double value) {
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();  // value <= bound
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(value, std::memory_order_relaxed);
}

void Histogram::Render(std::string& out, absl::string_view name, absl::string_view help) const {
  Header(out, name, help, "histogram");
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i].load(std::memory_order_relaxed);
    const std::string le = i < bounds_.size() ? absl::StrCat(bounds_[i]) : "+Inf";
    absl::StrAppend(&out, name, "_bucket{le=\"", le, "\"} ", cumulative, "\n");
  }
  absl::StrAppend(&out, name, "_sum ", sum_.load(std::memory_order_relaxed), "\n", name, "_count ", cumulative, "\n");
}

Metrics::Metrics(int64_t max_batch) : latency_(LatencyBounds()), batch_(BatchBounds(max_batch)) {}

void Metrics::CountRequest(Endpoint endpoint, int http_status) {
  const int code = std::clamp(http_status, 0, kCodes - 1);
  requests_[static_cast<int>(endpoint)][code].fetch_add(1, std::memory_order_relaxed);
}

void Metrics::ObserveLatency(double seconds) { latency_.Observe(seconds); }
void Metrics::ObserveBatch(int64_t samples) { batch_.Observe(static_cast<double>(samples)); }

std::string Metrics::Render(const Gauges& g) const {
  std::string out;
  Header(out, "cemb_serve_requests_total", "HTTP requests answered, by endpoint and status code.", "counter");
  std::string errors;
  for (int e = 0; e < kNumEndpoints; ++e) {
    for (int code = 0; code < kCodes; ++code) {
      const uint64_t n = requests_[e][code].load(std::memory_order_relaxed);
      if (n == 0) continue;
      const std::string labels = absl::StrCat("{endpoint=\"", kEndpointNames[e], "\",code=\"", code, "\"}");
      absl::StrAppend(&out, "cemb_serve_requests_total", labels, " ", n, "\n");
      if (code >= 400) absl::StrAppend(&errors, "cemb_serve_errors_total", labels, " ", n, "\n");
    }
  }
  Header(out, "cemb_serve_errors_total", "HTTP requests answered with a 4xx or 5xx status, by endpoint and code.",
         "counter");
  out += errors;
  Header(out, "cemb_serve_shed_total",
         "Connections answered 503 at once because every HTTP thread was busy and the connection queue full.",
         "counter");
  absl::StrAppend(&out, "cemb_serve_shed_total ", shed_.load(std::memory_order_relaxed), "\n");
  latency_.Render(out, "cemb_serve_request_duration_seconds",
                  "Infer requests' time from the request read to the answer written into the response (any status).");
  batch_.Render(out, "cemb_serve_batch_samples", "Samples per scoring (a dynamic batch of one or more requests).");
  Header(out, "cemb_serve_queued_requests", "Infer requests waiting to be scored.", "gauge");
  absl::StrAppend(&out, "cemb_serve_queued_requests ", g.queued, "\n");
  Header(out, "cemb_serve_ready", "1 when the model is open and its files not found corrupt.", "gauge");
  absl::StrAppend(&out, "cemb_serve_ready ", g.ready ? 1 : 0, "\n");
  Header(out, "cemb_serve_model_version", "The step of the checkpoint served.", "gauge");
  absl::StrAppend(&out, "cemb_serve_model_version ", g.model_version, "\n");
  Header(out, "cemb_serve_reloads_total", "Newer checkpoints opened and swapped in.", "counter");
  absl::StrAppend(&out, "cemb_serve_reloads_total ", reloads_.load(std::memory_order_relaxed), "\n");
  Header(out, "cemb_serve_reload_failures_total", "Newer checkpoints that could not be opened (the old model stays).",
         "counter");
  absl::StrAppend(&out, "cemb_serve_reload_failures_total ", reload_failures_.load(std::memory_order_relaxed), "\n");

  // The tables served in place from ssd snapshots (the model's now: they
  // start again from zero when a reload swaps the model).
  struct SsdMetric {
    absl::string_view name, help, type;
    double (*value)(const SnapshotStats&);
  };
  static constexpr SsdMetric kSsd[] = {
      {"cemb_serve_ssd_lookups_total", "Rows looked up in a table served in place.", "counter",
       [](const SnapshotStats& s) { return static_cast<double>(s.lookups); }},
      {"cemb_serve_ssd_hits_total", "Of those, rows found in its DRAM cache.", "counter",
       [](const SnapshotStats& s) { return static_cast<double>(s.hits); }},
      {"cemb_serve_ssd_hit_rate", "hits / lookups of a table served in place.", "gauge",
       [](const SnapshotStats& s) { return s.hit_rate(); }},
      {"cemb_serve_ssd_reads_total", "Reads from the snapshot file (each a run of adjacent 4 KiB blocks).", "counter",
       [](const SnapshotStats& s) { return static_cast<double>(s.reads); }},
      {"cemb_serve_ssd_rows_read_total", "Rows installed from the snapshot file.", "counter",
       [](const SnapshotStats& s) { return static_cast<double>(s.rows_read); }},
      {"cemb_serve_ssd_failed_reads_total", "Reads of the snapshot file that failed.", "counter",
       [](const SnapshotStats& s) { return static_cast<double>(s.failed_reads); }},
      {"cemb_serve_ssd_evictions_total", "Rows evicted from the DRAM cache.", "counter",
       [](const SnapshotStats& s) { return static_cast<double>(s.evictions); }},
  };
  if (!g.ssd_tables.empty()) {
    for (const SsdMetric& m : kSsd) {
      Header(out, m.name, m.help, m.type);
      for (const serve::SnapshotTableInfo& t : g.ssd_tables) {
        absl::StrAppend(&out, m.name, "{table=\"", t.table, "\"} ", m.value(t.stats), "\n");
      }
    }
  }
  return out;
}

}  // namespace cemb::server
