// An open-loop (Poisson) HTTP load generator for dlrm-serve: requests are
// sent at exponentially distributed intervals whose mean is 1 / --qps,
// whatever the answers' latencies, and each latency is measured from the
// time the request was due (so a server that falls behind is charged for
// the wait, as wrk2 does; wrk, Debian's, is closed-loop and cannot say
// what a given arrival rate gets).
//
// The arrivals are split over --connections keep-alive connections, each
// with its own Poisson schedule at qps / connections, all driven by one
// thread over epoll (bench/http_connection.h: it takes the server's 2
// cores less than a thread per connection); a connection sends its next
// request when it is due, or at once when the previous answer came late.
// Give it enough connections that one is seldom still waiting when its
// next request is due (connections >= qps x the p99 latency); "late sends"
// in the report counts those that were, and their latency includes the
// lag. Each connection needs an HTTP thread of the server (dlrm-serve
// --http_threads).
//
// The bodies: --body FILE (one infer request, sent as is), or distinct
// random requests of --samples samples in the preprocessed form, made from
// the model's metadata (its dense width and tables' rows) before each
// measurement's clock starts: one for every request it sends (--bodies N:
// N, sent in turn, repeating after N), drawn afresh for each measurement,
// so that no row draw repeats and an ssd table's hit rate is the traffic's
// own. A sample's row of table t ~ Zipf(--alpha) over the table's rows,
// the hot ranks spread by the LFSR bijection of seed 0x5eed + t
// (bench_util.h's FillZipf), uniform with --alpha 0: the distribution, and
// the hot rows, that bench/serve_load_bench draws for the in-process
// predictor, so that the two are compared on the same traffic. Dense
// features uniform in [0, 5).
//
// Kept up: the 200 answers given within the measured window against the
// requests due in it (as serve_load_bench counts them). --find_max
// searches the max QPS as serve_load_bench does (bench/rate_search.h): the
// highest rate kept up (>= --min_achieved, 0.99) with p99 <= --max_p99_ms
// (25) and no failed request or 503; then one measurement at 70% of it.
//
//   serve_http_load --url http://127.0.0.1:8000 --qps 2000 --seconds 10 [--connections 32]
//                   [--samples 1] [--alpha 0] [--bodies 0] [--warmup_seconds 1] [--model dlrm]
//                   [--body FILE] [--seed 1]
//   serve_http_load --url ... --samples 64 --alpha 1.05 --find_max --start_rate 400
//
// Prints one line a script can parse per measurement:
//   serve_http_load: offered_qps Q achieved_qps A kept_up K ok N p50_ms .. p90_ms .. p99_ms .. p999_ms ..
//     max_ms .. status_503 N p99_503_ms .. other_errors N failed N late_sends N samples_per_request S
//     alpha A connections C cpu_ms_per_request M
// (achieved: 200 answers per second of the measured window; cpu: this
// process's CPU while it sends, per request sent, warm-up included), and with
// --find_max "max QPS: R requests/s ..." before the line of 70% of it.
// Exit status 1 when the server cannot be reached or a request fails
// (no answer), 2 on a usage error.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <random>
#include <queue>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/random.h"
#include "bench/bench_util.h"
#include "bench/http_connection.h"
#include "bench/rate_search.h"
#include "httplib.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string url = "http://127.0.0.1:8000";
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string model = "dlrm";
  double qps = 1000;
  double seconds = 10;
  double warmup_seconds = 1;
  int connections = 32;
  int64_t samples = 1;
  double alpha = 0;
  int bodies = 0;  // 0: one per request sent
  std::string body_file;
  uint64_t seed = 1;
  bool find_max = false;
  cemb::bench::RateSearch search;
  double min_achieved = 0.99;
  double max_p99_ms = 25;
};

// What the model's metadata says the requests hold.
struct Shape {
  std::vector<int64_t> rows;  // each table's
  int64_t num_dense = 0;
};

// Per connection: what its measured requests got.
struct Tally {
  std::vector<double> ok_ms, shed_ms;
  int64_t arrivals = 0, answered_in_window = 0, other = 0, failed = 0, late = 0;
  int64_t sent = 0;  // every request, the warm-up's too
};

struct Result {
  double offered = 0;
  Tally all;
  double p99 = 0;
  double kept_up() const {
    return all.arrivals == 0 ? 1.0 : static_cast<double>(all.answered_in_window) / static_cast<double>(all.arrivals);
  }
  bool pass(const Options& o) const {
    return all.failed == 0 && all.other == 0 && all.shed_ms.empty() && kept_up() >= o.min_achieved &&
           p99 <= o.max_p99_ms;
  }
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

Shape ReadShape(const Options& o) {
  httplib::Client c(o.host, o.port);
  httplib::Result meta = c.Get("/v2/models/" + o.model);
  if (!meta || meta->status != 200) {
    std::fprintf(stderr, "serve_http_load: GET /v2/models/%s: %s\n", o.model.c_str(),
                 meta ? meta->body.c_str() : httplib::to_string(meta.error()).c_str());
    std::exit(1);
  }
  Shape shape{.rows = JsonInts(meta->body, "table_rows")};
  // "dense" is [-1, num_dense]: the first input's second dimension.
  const size_t at = meta->body.find("\"shape\":[-1,");
  shape.num_dense = at == std::string::npos ? 0 : std::atoll(meta->body.c_str() + at + 12);
  if (shape.rows.empty() || shape.num_dense <= 0) {
    std::fprintf(stderr, "serve_http_load: the metadata has no table_rows or dense shape: %s\n", meta->body.c_str());
    std::exit(1);
  }
  return shape;
}

// `count` random preprocessed requests from stream `seed`.
std::vector<std::string> MakeBodies(const Options& o, const Shape& shape, int64_t count, uint64_t seed) {
  const size_t tables = shape.rows.size();
  std::vector<cemb::ZipfSampler> zipf;
  std::vector<cemb::LfsrScrambler> scramble;
  for (size_t t = 0; t < tables; ++t) {
    zipf.emplace_back(static_cast<uint64_t>(shape.rows[t]), o.alpha > 0 ? o.alpha : 1.0);
    scramble.emplace_back(static_cast<uint64_t>(shape.rows[t]), 0x5eed + t);
  }
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> x(0.f, 5.f);
  std::vector<std::string> bodies;
  bodies.reserve(static_cast<size_t>(count));
  std::vector<int64_t> ids(static_cast<size_t>(o.samples) * tables);  // table t's rows: [t * samples, ...)
  char buf[32];
  for (int64_t b = 0; b < count; ++b) {
    std::string s = absl::StrCat(R"({"inputs":[{"name":"dense","datatype":"FP32","shape":[)", o.samples, ",",
                                 shape.num_dense, R"(],"data":[)");
    for (int64_t i = 0; i < o.samples * shape.num_dense; ++i) {
      if (i) s += ',';
      s.append(buf, std::to_chars(buf, buf + sizeof buf, x(rng)).ptr);
    }
    absl::StrAppend(&s, R"(]},{"name":"sparse","datatype":"INT64","shape":[)", o.samples, ",", tables,
                    R"(],"data":[)");
    for (size_t t = 0; t < tables; ++t) {
      const std::span<int64_t> ix(ids.data() + t * static_cast<size_t>(o.samples), static_cast<size_t>(o.samples));
      if (o.alpha > 0) {
        cemb::bench::FillZipf(ix, zipf[t], scramble[t], rng());
      } else {
        cemb::bench::FillUniform(ix, shape.rows[t], rng());
      }
    }
    for (int64_t i = 0; i < o.samples; ++i) {  // sample by sample
      for (size_t t = 0; t < tables; ++t) {
        if (i || t) s += ',';
        absl::StrAppend(&s, ids[t * static_cast<size_t>(o.samples) + static_cast<size_t>(i)]);
      }
    }
    s += "]}]}";
    bodies.push_back(std::move(s));
  }
  return bodies;
}

Clock::duration Seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// A connection's arrivals: its own Poisson schedule at qps / connections,
// and the request due (in flight, or waiting for its time).
struct Arrivals {
  std::mt19937_64 rng;
  std::exponential_distribution<double> gap;
  Clock::time_point due;
  size_t body = 0;  // bodies[body % bodies.size()]
  bool late = false;
};

// Sends every connection's arrivals of one measurement from this thread,
// over epoll: a connection sends when its request is due, or at once when
// its previous answer came late, and tallies what each request got.
Tally Drive(const Options& o, double qps, const std::vector<std::string>& bodies, Clock::time_point start,
            uint64_t seed) {
  const Clock::time_point measure = start + Seconds(o.warmup_seconds);
  const Clock::time_point end = measure + Seconds(o.seconds);
  const std::string line = "POST /v2/models/" + o.model + "/infer";
  const int n = o.connections;
  const int ep = ::epoll_create1(EPOLL_CLOEXEC);
  const int timer = ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  epoll_event ev{.events = EPOLLIN, .data = {.u64 = static_cast<uint64_t>(n)}};
  ::epoll_ctl(ep, EPOLL_CTL_ADD, timer, &ev);
  std::vector<cemb::bench::HttpConnection> conns(static_cast<size_t>(n));
  std::vector<Arrivals> arrivals(static_cast<size_t>(n));
  std::vector<char> watching_out(static_cast<size_t>(n));
  using Due = std::pair<Clock::time_point, int>;
  std::priority_queue<Due, std::vector<Due>, std::greater<>> waiting;
  // A connection the server cannot take at first ends the run; later (the
  // server closed one) it is tried again before each request, which fails
  // while it cannot be made.
  auto connect = [&](int i, bool first) {
    cemb::bench::HttpConnection& c = conns[static_cast<size_t>(i)];
    if (!c.Connect(o.host, o.port)) {
      if (!first) return;  // counted as failed requests
      std::fprintf(stderr, "serve_http_load: %s\n", c.error().c_str());
      std::exit(1);
    }
    epoll_event e{.events = EPOLLIN, .data = {.u64 = static_cast<uint64_t>(i)}};
    ::epoll_ctl(ep, EPOLL_CTL_ADD, c.fd(), &e);
    watching_out[static_cast<size_t>(i)] = false;
  };
  auto next = [&](int i) {  // the connection's next arrival
    Arrivals& a = arrivals[static_cast<size_t>(i)];
    a.due += Seconds(a.gap(a.rng));
    if (a.due < end) waiting.emplace(a.due, i);  // else: its last arrival was sent
  };
  for (int i = 0; i < n; ++i) {
    connect(i, /*first=*/true);
    Arrivals& a = arrivals[static_cast<size_t>(i)];
    a.rng.seed(seed * 1000003 + static_cast<uint64_t>(i));
    a.gap = std::exponential_distribution<double>(qps / n);
    a.due = start;
    a.body = static_cast<size_t>(i);
    next(i);
  }
  Tally tally;
  int in_flight = 0;
  auto watch = [&](int i) {  // EPOLLOUT while the request is not all written
    const bool out = conns[static_cast<size_t>(i)].wants_write();
    if (out == static_cast<bool>(watching_out[static_cast<size_t>(i)])) return;
    epoll_event e{.events = EPOLLIN | (out ? EPOLLOUT : 0u), .data = {.u64 = static_cast<uint64_t>(i)}};
    ::epoll_ctl(ep, EPOLL_CTL_MOD, conns[static_cast<size_t>(i)].fd(), &e);
    watching_out[static_cast<size_t>(i)] = out;
  };
  auto finish = [&](int i, cemb::bench::HttpConnection::State state) {
    using cemb::bench::HttpConnection;
    Arrivals& a = arrivals[static_cast<size_t>(i)];
    HttpConnection& c = conns[static_cast<size_t>(i)];
    --in_flight;
    ++tally.sent;
    const Clock::time_point answered = Clock::now();
    const bool ok = state == HttpConnection::kAnswered;
    if (ok && c.status() == 200 && answered >= measure && answered < end) ++tally.answered_in_window;
    if (a.due >= measure) {
      ++tally.arrivals;
      tally.late += a.late;
      const double ms = std::chrono::duration<double, std::milli>(answered - a.due).count();
      if (!ok) {
        ++tally.failed;
      } else if (c.status() == 200) {
        tally.ok_ms.push_back(ms);
      } else if (c.status() == 503) {
        tally.shed_ms.push_back(ms);
      } else {
        ++tally.other;
      }
    }
    if (!c.connected()) connect(i, /*first=*/false);
    a.body += static_cast<size_t>(n);
    next(i);
  };
  Clock::time_point armed{};
  std::vector<epoll_event> events(static_cast<size_t>(n) + 1);
  while (in_flight > 0 || !waiting.empty()) {
    Clock::time_point now = Clock::now();
    while (!waiting.empty() && waiting.top().first <= now) {
      const int i = waiting.top().second;
      waiting.pop();
      Arrivals& a = arrivals[static_cast<size_t>(i)];
      a.late = now > a.due + std::chrono::milliseconds(1);
      ++in_flight;
      const auto state = conns[static_cast<size_t>(i)].Send(line, "application/json", bodies[a.body % bodies.size()]);
      if (state == cemb::bench::HttpConnection::kPending) {
        watch(i);
      } else {
        finish(i, state);
      }
    }
    if (!waiting.empty() && waiting.top().first != armed) {
      armed = waiting.top().first;
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(armed.time_since_epoch()).count();
      const itimerspec at{.it_interval = {}, .it_value = {.tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000}};
      ::timerfd_settime(timer, TFD_TIMER_ABSTIME, &at, nullptr);
    }
    const int ready = ::epoll_wait(ep, events.data(), static_cast<int>(events.size()), 1000);
    for (int e = 0; e < ready; ++e) {
      const int i = static_cast<int>(events[static_cast<size_t>(e)].data.u64);
      if (i == n) {
        uint64_t expirations;
        [[maybe_unused]] ssize_t r = ::read(timer, &expirations, sizeof expirations);
        continue;
      }
      const auto state = conns[static_cast<size_t>(i)].Progress();
      if (state == cemb::bench::HttpConnection::kPending) {
        watch(i);
      } else if (state != cemb::bench::HttpConnection::kIdle) {
        finish(i, state);
      }
    }
    if (ready == 0 && in_flight > 0 && Clock::now() > end + std::chrono::seconds(30)) {
      std::fprintf(stderr, "serve_http_load: %d requests unanswered 30 s after the window\n", in_flight);
      tally.failed += in_flight;
      break;
    }
  }
  ::close(timer);
  ::close(ep);
  return tally;
}

// One measurement at `qps`: its own bodies (unless --body or --bodies), then the clock.
Result Measure(const Options& o, const Shape* shape, const std::vector<std::string>& fixed, double qps,
               uint64_t seed) {
  std::vector<std::string> fresh;
  if (fixed.empty()) {
    const double sent = qps * (o.warmup_seconds + o.seconds);
    fresh = MakeBodies(o, *shape, static_cast<int64_t>(sent + 6 * std::sqrt(sent)) + o.connections, seed);
  }
  const std::vector<std::string>& bodies = fixed.empty() ? fresh : fixed;
  const Clock::time_point start = Clock::now() + std::chrono::milliseconds(50);
  const cemb::bench::CpuClock cpu0 = cemb::bench::CpuClock::Now();
  Result r{.offered = qps, .all = Drive(o, qps, bodies, start, seed)};
  const double cpu_s = cemb::bench::CpuClock::Now().cpu - cpu0.cpu;
  Tally& all = r.all;
  const double p50 = Percentile(all.ok_ms, 0.50), p90 = Percentile(all.ok_ms, 0.90);
  r.p99 = Percentile(all.ok_ms, 0.99);
  const double p999 = Percentile(all.ok_ms, 0.999);
  const double max = all.ok_ms.empty() ? 0 : *std::max_element(all.ok_ms.begin(), all.ok_ms.end());
  std::printf(
      "serve_http_load: offered_qps %.1f achieved_qps %.1f kept_up %.4f ok %zu p50_ms %.3f p90_ms %.3f p99_ms %.3f "
      "p999_ms %.3f max_ms %.3f status_503 %zu p99_503_ms %.3f other_errors %lld failed %lld late_sends %lld "
      "samples_per_request %lld alpha %g connections %d cpu_ms_per_request %.3f\n",
      qps, static_cast<double>(all.ok_ms.size()) / o.seconds, r.kept_up(), all.ok_ms.size(), p50, p90, r.p99, p999,
      max, all.shed_ms.size(), Percentile(all.shed_ms, 0.99), static_cast<long long>(all.other),
      static_cast<long long>(all.failed), static_cast<long long>(all.late), static_cast<long long>(o.samples),
      o.alpha, o.connections,
      all.sent > 0 ? 1e3 * cpu_s / static_cast<double>(all.sent) : 0.0);
  std::fflush(stdout);
  return r;
}

int Main(int argc, char** argv) {
  Options o;
  CLI::App app{"serve_http_load: open-loop Poisson load on dlrm-serve (bench/serve_http_load.cc)"};
  app.add_option("--url", o.url, "the server")->capture_default_str();
  app.add_option("--model", o.model, "the model's name")->capture_default_str();
  app.add_option("--qps", o.qps, "the offered rate (requests/s)")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--seconds", o.seconds, "measured")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--warmup_seconds", o.warmup_seconds, "sent, not measured")->capture_default_str();
  app.add_option("--connections", o.connections, "keep-alive connections (one thread drives them)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--samples", o.samples, "samples per request")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--alpha", o.alpha, "Zipf exponent of the rows (0: uniform)")->capture_default_str();
  app.add_option("--bodies", o.bodies, "distinct requests, sent in turn (0: one per request sent)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--body", o.body_file, "one request body, sent as is");
  app.add_option("--seed", o.seed, "the rows' and arrivals' stream")->capture_default_str();
  app.add_flag("--find_max", o.find_max, "search for the max QPS (bench/rate_search.h), then measure 70% of it");
  app.add_option("--start_rate", o.search.start_rate, "--find_max's first rate")->capture_default_str();
  app.add_option("--precision", o.search.precision, "--find_max stops when the failing rate is within this")
      ->capture_default_str();
  app.add_option("--max_measurements", o.search.max_measurements, "--find_max's measurements at most")
      ->capture_default_str();
  app.add_option("--min_achieved", o.min_achieved, "kept up: answers in the window / arrivals in it, at least")
      ->capture_default_str();
  app.add_option("--max_p99_ms", o.max_p99_ms, "kept up: p99 at most")->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  // http://host:port
  const std::string rest = o.url.starts_with("http://") ? o.url.substr(7) : o.url;
  const size_t colon = rest.rfind(':');
  o.host = rest.substr(0, colon);
  if (colon != std::string::npos) o.port = std::atoi(rest.c_str() + colon + 1);

  std::vector<std::string> fixed;
  std::optional<Shape> shape;
  if (!o.body_file.empty()) {
    std::ifstream in(o.body_file);
    std::stringstream text;
    text << in.rdbuf();
    if (!in) return std::fprintf(stderr, "serve_http_load: cannot read %s\n", o.body_file.c_str()), 1;
    fixed.push_back(text.str());
  } else {
    shape = ReadShape(o);
    if (o.bodies > 0) fixed = MakeBodies(o, *shape, o.bodies, o.seed);
  }
  const Shape* s = shape ? &*shape : nullptr;
  uint64_t seed = o.seed;
  int64_t failed = 0;
  auto measure = [&](double rate) {
    Result r = Measure(o, s, fixed, rate, ++seed);
    failed += r.all.failed;
    return r;
  };
  if (!o.find_max) {
    measure(o.qps);
  } else {
    const cemb::bench::RateSearchResult r = cemb::bench::FindMaxRate(o.search, [&](double rate) -> std::optional<bool> {
      const Result m = measure(rate);
      if (m.all.failed > 0) return std::nullopt;
      return m.pass(o);
    });
    cemb::bench::PrintMaxRate(r, o.samples,
                              absl::StrFormat("answers >= %.2f x arrivals, p99 <= %.1f ms, no 503", o.min_achieved,
                                              o.max_p99_ms));
    if (r.max_rate > 0 && !r.stopped) {
      std::printf("70%% of max QPS:\n");
      measure(0.7 * r.max_rate);
    }
  }
  if (failed > 0) {
    std::fprintf(stderr, "serve_http_load: %lld requests got no answer\n", static_cast<long long>(failed));
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  cemb::bench::RequireOptimizedBuild(argv[0]);
  return Main(argc, argv);
}
