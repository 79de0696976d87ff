// An open-loop (Poisson) HTTP load generator for dlrm-serve: requests are
// sent at exponentially distributed intervals whose mean is 1 / --qps,
// whatever the answers' latencies, and each latency is measured from the
// time the request was due (so a server that falls behind is charged for
// the wait, as wrk2 does; wrk, Debian's, is closed-loop and cannot say
// what a given arrival rate gets).
//
// The arrivals are split over --connections keep-alive connections, each a
// thread with its own Poisson schedule at qps / connections; a connection
// sends its next request when it is due, or at once when the previous
// answer came late. Give it enough connections that one is seldom still
// waiting when its next request is due (connections >= qps x the p99
// latency); "late sends" in the report counts those that were, and their
// latency includes the lag. Each connection needs an HTTP thread of the
// server (dlrm-serve --http_threads).
//
// The bodies: --body FILE (one infer request, sent as is), or --bodies
// distinct random requests of --samples samples in the preprocessed form,
// made from the model's metadata (its dense width and tables' rows) before
// the clock starts, sent in turn (they repeat after --bodies requests: give
// at least qps x (warmup + seconds) to send every row draw once). A
// sample's row of table t ~ Zipf(--alpha) over the table's rows, the hot
// ranks spread by the LFSR bijection of seed 0x5eed + t (bench_util.h's
// FillZipf), uniform with --alpha 0: the distribution, and the hot rows,
// that bench/serve_load_bench draws for the in-process predictor, so that
// the two are compared on the same traffic (ssd hit rates included). Dense
// features uniform in [0, 5).
//
//   serve_http_load --url http://127.0.0.1:8000 --qps 2000 --seconds 10 [--connections 32]
//                   [--samples 1] [--alpha 0] [--bodies 20000] [--warmup_seconds 1] [--model dlrm]
//                   [--body FILE] [--seed 1]
//
// Prints one line a script can parse:
//   serve_http_load: offered_qps Q achieved_qps A ok N p50_ms .. p90_ms .. p99_ms .. p999_ms .. max_ms ..
//     status_503 N p99_503_ms .. other_errors N failed N late_sends N samples_per_request S alpha A connections C
// (achieved: answers 200 per second of the measured window).
#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/random.h"
#include "bench/bench_util.h"
#include "httplib.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string model = "dlrm";
  double qps = 1000;
  double seconds = 10;
  double warmup_seconds = 1;
  int connections = 32;
  int64_t samples = 1;
  double alpha = 0;
  int bodies = 20000;
  std::string body_file;
  uint64_t seed = 1;
};

// Per connection: what its measured requests got.
struct Tally {
  std::vector<double> ok_ms, shed_ms;
  int64_t other = 0, failed = 0, late = 0;
};

double Percentile(std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

// The numbers after `"key":[` in a JSON text (the metadata's table_rows).
std::vector<int64_t> JsonInts(const std::string& text, const std::string& key) {
  std::vector<int64_t> out;
  const size_t at = text.find("\"" + key + "\":[");
  if (at == std::string::npos) return out;
  const size_t begin = at + key.size() + 4, end = text.find(']', begin);
  for (absl::string_view v : absl::StrSplit(text.substr(begin, end - begin), ',', absl::SkipEmpty())) {
    int64_t x = 0;
    if (absl::SimpleAtoi(v, &x)) out.push_back(x);
  }
  return out;
}

// Random preprocessed requests for the model the server answers for.
std::vector<std::string> MakeBodies(const Options& o) {
  if (!o.body_file.empty()) {
    std::ifstream in(o.body_file);
    std::stringstream s;
    s << in.rdbuf();
    if (!in) {
      std::fprintf(stderr, "serve_http_load: cannot read %s\n", o.body_file.c_str());
      std::exit(1);
    }
    return {s.str()};
  }
  httplib::Client c(o.host, o.port);
  httplib::Result meta = c.Get("/v2/models/" + o.model);
  if (!meta || meta->status != 200) {
    std::fprintf(stderr, "serve_http_load: GET /v2/models/%s: %s\n", o.model.c_str(),
                 meta ? meta->body.c_str() : httplib::to_string(meta.error()).c_str());
    std::exit(1);
  }
  const std::vector<int64_t> rows = JsonInts(meta->body, "table_rows");
  // "dense" is [-1, num_dense]: the first input's second dimension.
  const size_t shape = meta->body.find("\"shape\":[-1,");
  const int64_t num_dense = shape == std::string::npos ? 0 : std::atoll(meta->body.c_str() + shape + 12);
  if (rows.empty() || num_dense <= 0) {
    std::fprintf(stderr, "serve_http_load: the metadata has no table_rows or dense shape: %s\n", meta->body.c_str());
    std::exit(1);
  }
  std::vector<cemb::ZipfSampler> zipf;
  std::vector<cemb::LfsrScrambler> scramble;
  for (size_t t = 0; t < rows.size(); ++t) {
    zipf.emplace_back(static_cast<uint64_t>(rows[t]), o.alpha > 0 ? o.alpha : 1.0);
    scramble.emplace_back(static_cast<uint64_t>(rows[t]), 0x5eed + t);
  }
  std::mt19937_64 rng(o.seed);
  std::uniform_real_distribution<float> x(0.f, 5.f);
  std::vector<std::string> bodies;
  std::vector<int64_t> ids(static_cast<size_t>(o.samples) * rows.size());  // table t's rows: [t * samples, ...)
  char buf[32];
  for (int b = 0; b < o.bodies; ++b) {
    std::string s = absl::StrCat(R"({"inputs":[{"name":"dense","datatype":"FP32","shape":[)", o.samples, ",",
                                 num_dense, R"(],"data":[)");
    for (int64_t i = 0; i < o.samples * num_dense; ++i) {
      if (i) s += ',';
      s.append(buf, std::to_chars(buf, buf + sizeof buf, x(rng)).ptr);
    }
    absl::StrAppend(&s, R"(]},{"name":"sparse","datatype":"INT64","shape":[)", o.samples, ",", rows.size(),
                    R"(],"data":[)");
    for (size_t t = 0; t < rows.size(); ++t) {
      const std::span<int64_t> ix(ids.data() + t * static_cast<size_t>(o.samples), static_cast<size_t>(o.samples));
      if (o.alpha > 0) {
        cemb::bench::FillZipf(ix, zipf[t], scramble[t], rng());
      } else {
        cemb::bench::FillUniform(ix, rows[t], rng());
      }
    }
    for (int64_t i = 0; i < o.samples; ++i) {  // sample by sample
      for (size_t t = 0; t < rows.size(); ++t) {
        if (i || t) s += ',';
        absl::StrAppend(&s, ids[t * static_cast<size_t>(o.samples) + static_cast<size_t>(i)]);
      }
    }
    s += "]}]}";
    bodies.push_back(std::move(s));
  }
  return bodies;
}

void Connection(const Options& o, const std::vector<std::string>& bodies, int id, Clock::time_point start,
                Tally& tally) {
  httplib::Client c(o.host, o.port);
  c.set_keep_alive(true);
  c.set_tcp_nodelay(true);
  c.set_read_timeout(30, 0);
  std::mt19937_64 rng(o.seed * 1000003 + static_cast<uint64_t>(id));
  std::exponential_distribution<double> gap(o.qps / o.connections);
  const Clock::time_point measure = start + std::chrono::duration_cast<Clock::duration>(
                                                std::chrono::duration<double>(o.warmup_seconds));
  const Clock::time_point end = measure + std::chrono::duration_cast<Clock::duration>(
                                              std::chrono::duration<double>(o.seconds));
  Clock::time_point due = start;
  const std::string path = "/v2/models/" + o.model + "/infer";
  for (size_t k = static_cast<size_t>(id);; k += static_cast<size_t>(o.connections)) {
    due += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(gap(rng)));
    if (due >= end) return;
    const Clock::time_point now = Clock::now();
    const bool late = now > due + std::chrono::milliseconds(1);
    if (now < due) std::this_thread::sleep_until(due);
    httplib::Result res = c.Post(path, bodies[k % bodies.size()], "application/json");
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - due).count();
    if (due < measure) continue;
    tally.late += late;
    if (!res) {
      ++tally.failed;
    } else if (res->status == 200) {
      tally.ok_ms.push_back(ms);
    } else if (res->status == 503) {
      tally.shed_ms.push_back(ms);
    } else {
      ++tally.other;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  cemb::bench::RequireOptimizedBuild(argv[0]);
  Options o;
  std::string url = "http://127.0.0.1:8000";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--url") url = value;
    else if (flag == "--model") o.model = value;
    else if (flag == "--qps") o.qps = std::atof(value.c_str());
    else if (flag == "--seconds") o.seconds = std::atof(value.c_str());
    else if (flag == "--warmup_seconds") o.warmup_seconds = std::atof(value.c_str());
    else if (flag == "--connections") o.connections = std::atoi(value.c_str());
    else if (flag == "--samples") o.samples = std::atoll(value.c_str());
    else if (flag == "--alpha") o.alpha = std::atof(value.c_str());
    else if (flag == "--bodies") o.bodies = std::atoi(value.c_str());
    else if (flag == "--body") o.body_file = value;
    else if (flag == "--seed") o.seed = std::strtoull(value.c_str(), nullptr, 10);
    else {
      std::fprintf(stderr, "serve_http_load: unknown flag %s (see the comment at the top of bench/serve_http_load.cc)\n",
                   flag.c_str());
      return 2;
    }
  }
  // http://host:port
  const std::string rest = url.starts_with("http://") ? url.substr(7) : url;
  const size_t colon = rest.rfind(':');
  o.host = rest.substr(0, colon);
  if (colon != std::string::npos) o.port = std::atoi(rest.c_str() + colon + 1);
  if (o.qps <= 0 || o.seconds <= 0 || o.connections <= 0 || o.samples <= 0 || o.bodies <= 0) {
    std::fprintf(stderr, "serve_http_load: --qps, --seconds, --connections, --samples and --bodies must be > 0\n");
    return 2;
  }

  const std::vector<std::string> bodies = MakeBodies(o);
  std::vector<Tally> tallies(static_cast<size_t>(o.connections));
  std::vector<std::thread> threads;
  const Clock::time_point start = Clock::now() + std::chrono::milliseconds(50);
  for (int i = 0; i < o.connections; ++i) {
    threads.emplace_back([&, i] { Connection(o, bodies, i, start, tallies[static_cast<size_t>(i)]); });
  }
  for (std::thread& t : threads) t.join();

  Tally all;
  for (Tally& t : tallies) {
    all.ok_ms.insert(all.ok_ms.end(), t.ok_ms.begin(), t.ok_ms.end());
    all.shed_ms.insert(all.shed_ms.end(), t.shed_ms.begin(), t.shed_ms.end());
    all.other += t.other;
    all.failed += t.failed;
    all.late += t.late;
  }
  const double p50 = Percentile(all.ok_ms, 0.50), p90 = Percentile(all.ok_ms, 0.90),
               p99 = Percentile(all.ok_ms, 0.99), p999 = Percentile(all.ok_ms, 0.999);
  const double max = all.ok_ms.empty() ? 0 : *std::max_element(all.ok_ms.begin(), all.ok_ms.end());
  std::printf(
      "serve_http_load: offered_qps %.0f achieved_qps %.0f ok %zu p50_ms %.3f p90_ms %.3f p99_ms %.3f p999_ms %.3f "
      "max_ms %.3f status_503 %zu p99_503_ms %.3f other_errors %lld failed %lld late_sends %lld samples_per_request "
      "%lld alpha %g connections %d\n",
      o.qps, static_cast<double>(all.ok_ms.size()) / o.seconds, all.ok_ms.size(), p50, p90, p99, p999, max,
      all.shed_ms.size(), Percentile(all.shed_ms, 0.99), static_cast<long long>(all.other),
      static_cast<long long>(all.failed), static_cast<long long>(all.late), static_cast<long long>(o.samples),
      o.alpha, o.connections);
  return 0;
}
