#include "server/server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "checkpoint/checkpoint.h"
#include "httplib.h"
#include "server/batcher.h"
#include "server/metrics.h"
#include "server/protocol.h"

namespace cemb::server {
namespace {

using Clock = std::chrono::steady_clock;
constexpr char kJson[] = "application/json";

// True on the accepting thread while it answers a connection itself (every
// HTTP thread busy, the connection queue full).
thread_local bool t_shedding = false;

// cpp-httplib's task queue, bounded: `threads` threads take accepted
// connections; at most `capacity` wait beyond the idle threads; when full, the
// accepting thread runs the connection itself with t_shedding set, and the
// handlers answer an infer request 503 at once (the library's own
// ThreadPool queues without bound).
class BoundedPool final : public httplib::TaskQueue {
 public:
  BoundedPool(int threads, int capacity, Metrics* metrics) : capacity_(capacity), metrics_(metrics) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Work(); });
  }

  void enqueue(std::function<void()> fn) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (static_cast<int>(jobs_.size()) < idle_ + capacity_) {
        jobs_.push_back(std::move(fn));
        cv_.notify_one();
        return;
      }
    }
    metrics_->CountShed();
    t_shedding = true;
    fn();
    t_shedding = false;
  }

  // Runs every queued connection, then joins the threads.
  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

 private:
  void Work() {
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> lock(mu_);
        ++idle_;
        cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
        --idle_;
        if (jobs_.empty()) return;  // stopping, nothing left
        fn = std::move(jobs_.front());
        jobs_.pop_front();
      }
      fn();
    }
  }

  const int capacity_;
  Metrics* const metrics_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  int idle_ = 0;  // threads waiting for a connection
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

// A model being served: the predictor, its checkpoint's step and its inputs.
struct Model {
  std::unique_ptr<serve::Predictor> predictor;
  std::string path;  // the step-N directory
  int64_t step = 0;
  std::string version;  // the step, as the protocol's model_version
  ModelInputs inputs;
};

// One infer request on its way through the batcher.
struct Job {
  const InferRequest* request = nullptr;
  std::vector<float> probabilities;
  absl::Status status;
  std::shared_ptr<const Model> model;  // the model that scored it
};

int HttpStatus(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kOk: return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition: return 400;
    case absl::StatusCode::kNotFound: return 404;
    case absl::StatusCode::kResourceExhausted: return 413;
    case absl::StatusCode::kUnavailable: return 503;
    default: return 500;
  }
}

Endpoint EndpointOf(const std::string& path) {
  if (path.starts_with("/v2/models/")) return path.ends_with("/infer") ? Endpoint::kInfer : Endpoint::kMetadata;
  if (path.starts_with("/v2/health/")) return Endpoint::kHealth;
  if (path == "/v2") return Endpoint::kMetadata;
  if (path == "/metrics") return Endpoint::kMetrics;
  return Endpoint::kOther;
}

}  // namespace

struct Server::Impl {
  ServerOptions options;
  Metrics metrics;
  httplib::Server http;
  int port = 0;
  int bound_fd = -1;               // the listening socket
  std::atomic<int> listen_fd{-1};  // the same, until Shutdown shuts it down
  bool ran = false;                // Run() listened (the library then closes the socket)
  std::atomic<bool> shutting_down{false};

  mutable std::mutex model_mu;
  std::shared_ptr<const Model> model;  // null until open
  std::unique_ptr<Batcher> batcher;     // published with the first model (model_mu)

  std::mutex stop_mu;
  std::condition_variable stop_cv;
  std::thread watcher;

  explicit Impl(const ServerOptions& o) : options(o), metrics(o.max_batch) {}

  void Log(std::string_view line) const {
    if (options.log) options.log(line);
  }

  std::shared_ptr<const Model> Current() const {
    std::lock_guard<std::mutex> lock(model_mu);
    return model;
  }

  bool Ready(const Model* m) const {
    return m != nullptr && !shutting_down.load() && !absl::IsDataLoss(m->predictor->verification());
  }

  absl::StatusOr<std::shared_ptr<const Model>> Open(const std::string& path) const {
    serve::PredictorOptions po = options.predictor;
    po.max_batch = options.max_batch;
    if (!po.log) po.log = options.log;
    auto m = std::make_shared<Model>();
    CEMB_ASSIGN_OR_RETURN(m->predictor, serve::Predictor::Open(path, po));
    m->path = m->predictor->checkpoint();
    // The step from the MANIFEST (its own checksum verified; no file re-read).
    CEMB_ASSIGN_OR_RETURN(CheckpointState state, ReadCheckpoint(m->path, [](const std::string&) { return false; }));
    m->step = state.step;
    m->version = absl::StrCat(state.step);
    m->inputs = {.num_dense = m->predictor->num_dense(),
                 .num_tables = m->predictor->num_tables(),
                 .table_rows = m->predictor->manifest().table_rows,
                 .criteo = m->predictor->TakesRawCriteo().ok()};
    return std::shared_ptr<const Model>(std::move(m));
  }

  // Opens the model to serve first and its batcher, and publishes both.
  absl::Status OpenFirst() {
    CEMB_ASSIGN_OR_RETURN(std::shared_ptr<const Model> m, Open(options.checkpoint));
    Log(absl::StrCat("serving ", m->path, " as model '", options.model_name, "' version ", m->version));
    auto b = std::make_unique<Batcher>(
        Batcher::Options{.max_batch = options.max_batch,
                         .max_wait = std::chrono::microseconds(options.max_wait_us),
                         .max_queue = options.max_queue,
                         .threads = m->predictor->contexts()},
        [this](std::span<Batcher::Request* const> batch) { ScoreOrFail(batch); });
    std::lock_guard<std::mutex> lock(model_mu);  // whoever sees the model sees the batcher
    batcher = std::move(b);
    model = std::move(m);
    return absl::OkStatus();
  }

  // --- scoring (the batcher's threads) -----------------------------------

  // Scores one request alone, in pieces of max_batch, so that a failure
  // (the parser checked the rows: a failed read, say) is its own.
  void ScoreAlone(const Model& m, Job& job) {
    const InferRequest& r = *job.request;
    job.probabilities.resize(static_cast<size_t>(r.size));
    const int64_t step = options.max_batch;
    for (int64_t s = 0; s < r.size; s += step) {
      const int64_t n = std::min(step, r.size - s);
      const std::span<float> out(job.probabilities.data() + s, static_cast<size_t>(n));
      absl::Status status;
      if (r.form == InputForm::kCriteo) {
        status = m.predictor->PredictCriteo(std::span(r.rows).subspan(s, n), out);
      } else {
        const int64_t nd = m.inputs.num_dense;
        std::vector<Bags<int32_t>> bags(r.offsets.size());
        for (size_t t = 0; t < bags.size(); ++t) {
          bags[t] = {.offsets = std::span(r.offsets[t]).subspan(s, n + 1), .indices = r.indices[t]};
        }
        status = m.predictor->Predict(
            {.size = n, .dense = std::span(r.dense).subspan(s * nd, n * nd), .bags = bags}, out);
      }
      if (absl::IsOutOfRange(status) || absl::IsInvalidArgument(status)) {
        // The parser checked every row against the tables: not expected,
        // but named by input and the samples scored.
        const std::string input = r.form == InputForm::kCriteo ? kCatFeaturesInput : kSparseInput;
        job.status = absl::Status(status.code(), absl::StrCat("input '", input, "', samples ", s, " to ", s + n - 1,
                                                              " (the predictor's bag b is sample ", s, " + b): ",
                                                              status.message()));
        return;
      }
      if (!status.ok()) {  // the model's (a failed read, a corrupt file): as the predictor says
        job.status = status;
        return;
      }
    }
  }

  // The batcher's score function: never throws (a scoring thread would end
  // the process); whatever escapes is each request's Internal error.
  void ScoreOrFail(std::span<Batcher::Request* const> batch) noexcept {
    try {
      Score(batch);
    } catch (const std::exception& e) {
      Fail(batch, e.what());
    } catch (...) {
      Fail(batch, "an unknown exception");
    }
  }
  static void Fail(std::span<Batcher::Request* const> batch, const char* what) {
    for (Batcher::Request* b : batch) {
      static_cast<Job*>(b->payload)->status = absl::InternalError(absl::StrCat("scoring failed: ", what));
    }
  }

  void Score(std::span<Batcher::Request* const> batch) {
    int64_t samples = 0;
    for (const Batcher::Request* b : batch) samples += b->samples;
    metrics.ObserveBatch(samples);
    if (options.before_score) options.before_score(samples);
    const std::shared_ptr<const Model> m = Current();
    for (Batcher::Request* b : batch) static_cast<Job*>(b->payload)->model = m;
    if (batch.size() == 1) {
      ScoreAlone(*m, *static_cast<Job*>(batch[0]->payload));
      return;
    }
    // One scoring of the requests' samples, end to end.
    const InferRequest& first = *static_cast<Job*>(batch[0]->payload)->request;
    std::vector<float> probabilities(static_cast<size_t>(samples));
    absl::Status status;
    if (first.form == InputForm::kCriteo) {
      std::vector<data::CriteoRow> rows;
      rows.reserve(static_cast<size_t>(samples));
      for (const Batcher::Request* b : batch) {
        const InferRequest& r = *static_cast<Job*>(b->payload)->request;
        rows.insert(rows.end(), r.rows.begin(), r.rows.end());
      }
      status = m->predictor->PredictCriteo(rows, probabilities);
    } else {
      const size_t tables = first.offsets.size();
      std::vector<float> dense;
      std::vector<std::vector<int32_t>> offsets(tables, std::vector<int32_t>{0}), indices(tables);
      for (const Batcher::Request* b : batch) {
        const InferRequest& r = *static_cast<Job*>(b->payload)->request;
        dense.insert(dense.end(), r.dense.begin(), r.dense.end());
        for (size_t t = 0; t < tables; ++t) {
          const int32_t base = offsets[t].back();
          for (int64_t i = 1; i <= r.size; ++i) offsets[t].push_back(base + r.offsets[t][i]);
          indices[t].insert(indices[t].end(), r.indices[t].begin(), r.indices[t].end());
        }
      }
      std::vector<Bags<int32_t>> bags(tables);
      for (size_t t = 0; t < tables; ++t) bags[t] = {.offsets = offsets[t], .indices = indices[t]};
      status = m->predictor->Predict({.size = samples, .dense = dense, .bags = bags}, probabilities);
    }
    if (!status.ok()) {
      // Each request alone, so that the requests not at fault are answered.
      for (Batcher::Request* b : batch) ScoreAlone(*m, *static_cast<Job*>(b->payload));
      return;
    }
    int64_t at = 0;
    for (Batcher::Request* b : batch) {
      Job& job = *static_cast<Job*>(b->payload);
      job.probabilities.assign(probabilities.begin() + at, probabilities.begin() + at + b->samples);
      at += b->samples;
    }
  }

  // --- HTTP handlers ------------------------------------------------------

  static void Reply(httplib::Response& res, int status, std::string body) {
    res.status = status;
    res.set_content(std::move(body), kJson);
  }
  static void ReplyError(httplib::Response& res, int status, absl::string_view message) {
    Reply(res, status, ErrorJson(std::string_view(message.data(), message.size())));
  }

  // The model a /v2/models/<name>[/versions/<v>] path names, or an answer
  // (404 for another name or version, 503 before a model is open).
  std::shared_ptr<const Model> Resolve(const httplib::Request& req, httplib::Response& res) const {
    std::shared_ptr<const Model> m = Current();
    if (m == nullptr) {
      ReplyError(res, 503, "the model is being opened");
      return nullptr;
    }
    const std::string name = req.matches[1];
    if (name != options.model_name) {
      ReplyError(res, 404, absl::StrCat("unknown model '", name, "': this server serves '", options.model_name, "'"));
      return nullptr;
    }
    if (req.matches[2].matched && req.matches[2] != m->version) {
      ReplyError(res, 404, absl::StrCat("model '", name, "' has no version '", req.matches[2].str(),
                                        "': it serves version ", m->version));
      return nullptr;
    }
    return m;
  }

  void Infer(const httplib::Request& req, httplib::Response& res) {
    const Clock::time_point start = Clock::now();
    Answer(req, res);
    metrics.ObserveLatency(std::chrono::duration<double>(Clock::now() - start).count());
  }

  void Answer(const httplib::Request& req, httplib::Response& res) {
    if (t_shedding) {
      ReplyError(res, 503, "overloaded: every HTTP thread is busy and the connection queue is full");
      return;
    }
    const std::shared_ptr<const Model> m = Resolve(req, res);
    if (m == nullptr) return;
    if (absl::Status s = batcher->Admits(); !s.ok()) {  // before parsing: shedding costs little
      ReplyError(res, 503, s.message());
      return;
    }
    absl::StatusOr<InferRequest> request =
        ParseInferRequest(req.body, m->inputs, {.max_samples = options.max_request_samples});
    if (!request.ok()) {
      ReplyError(res, HttpStatus(request.status()), request.status().message());
      return;
    }
    Job job{.request = &*request};
    Batcher::Request pending(static_cast<int>(request->form), request->size, &job);
    if (absl::Status s = batcher->Submit(&pending); !s.ok()) {
      ReplyError(res, 503, s.message());
      return;
    }
    pending.Wait();
    if (!job.status.ok()) {
      ReplyError(res, HttpStatus(job.status), job.status.message());
      return;
    }
    Reply(res, 200, InferResponseJson(options.model_name, job.model->version, request->id, job.probabilities));
  }

  void Routes() {
    http.Get("/v2/health/live", [](const httplib::Request&, httplib::Response& res) { Reply(res, 200, "{}"); });
    http.Get("/v2/health/ready", [this](const httplib::Request&, httplib::Response& res) {
      ReadyAnswer(Current().get(), res);
    });
    http.Get("/v2", [this](const httplib::Request&, httplib::Response& res) {
      Reply(res, 200, absl::StrCat("{\"name\":\"dlrm-serve\",\"version\":\"", CEMB_SERVER_VERSION,
                                   "\",\"extensions\":[]}"));
    });
    http.Get(R"(/v2/models/([^/]+)(?:/versions/([^/]+))?)", [this](const httplib::Request& req,
                                                                   httplib::Response& res) {
      if (std::shared_ptr<const Model> m = Resolve(req, res)) {
        Reply(res, 200, ModelMetadataJson(options.model_name, m->version, m->inputs));
      }
    });
    http.Get(R"(/v2/models/([^/]+)(?:/versions/([^/]+))?/ready)", [this](const httplib::Request& req,
                                                                         httplib::Response& res) {
      if (std::shared_ptr<const Model> m = Resolve(req, res)) ReadyAnswer(m.get(), res);
    });
    http.Post(R"(/v2/models/([^/]+)(?:/versions/([^/]+))?/infer)",
              [this](const httplib::Request& req, httplib::Response& res) { Infer(req, res); });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      const std::shared_ptr<const Model> m = Current();
      Gauges g{.ready = Ready(m.get()),
               .model_version = m ? m->step : -1,
               .queued = m ? batcher->queued() : 0};
      if (m) g.ssd_tables = m->predictor->snapshot_tables();
      res.status = 200;
      res.set_content(metrics.Render(g), "text/plain; version=0.0.4");
    });
    // Answers the library makes itself (no route: 404; a body over the
    // limit: 413; a request it cannot read: 400) get the protocol's error
    // object too.
    http.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req,
                                                                       httplib::Response& res) {
      if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
      std::string message;
      if (res.status == 413 && absl::StartsWith(req.get_header_value("Content-Type"),
                                                "application/x-www-form-urlencoded")) {
        // cpp-httplib parses such a body as a form, and refuses one over
        // CPPHTTPLIB_FORM_URL_ENCODED_PAYLOAD_MAX_LENGTH (8192) whatever our limit.
        message = absl::StrCat("a body sent as application/x-www-form-urlencoded (curl -d's default) is limited to "
                               "8192 bytes: send it with Content-Type: application/json (up to ",
                               options.max_body_bytes, " bytes)");
      } else if (res.status == 413) {
        message = absl::StrCat("the request body is over the limit of ", options.max_body_bytes, " bytes");
      } else if (res.status == 404) {
        message = absl::StrCat("no such endpoint: ", req.method, " ", req.path);
      } else if (res.status == 400) {
        message = "the HTTP request could not be read";
      } else {
        message = absl::StrCat("HTTP status ", res.status);
      }
      res.set_content(ErrorJson(message), kJson);
      return httplib::Server::HandlerResponse::Handled;
    }));
    // While shutting down, or on the accepting thread: one request per connection.
    http.set_post_routing_handler([this](const httplib::Request&, httplib::Response& res) {
      if (t_shedding || shutting_down.load()) res.set_header("Connection", "close");
    });
    // Every request counted once, whatever answered it.
    http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      metrics.CountRequest(EndpointOf(req.path), res.status);
    });
  }

  void ReadyAnswer(const Model* m, httplib::Response& res) const {
    if (Ready(m)) {
      Reply(res, 200, "{}");
      return;
    }
    // The protocol's "not ready" is a 4xx.
    ReplyError(res, 400, m == nullptr            ? "not ready: the model is being opened"
                         : shutting_down.load() ? "not ready: shutting down"
                                                : absl::StrCat("not ready: ", m->predictor->verification().message()));
  }

  // --- reload -------------------------------------------------------------

  // Sleeps `seconds`; false when Shutdown came first.
  bool Sleep(double seconds) {
    std::unique_lock<std::mutex> lock(stop_mu);
    return !stop_cv.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return shutting_down.load(); });
  }

  void Watch() {
    std::string failed;  // a checkpoint that failed to open: tried again only once LATEST moves
    while (Sleep(options.reload_poll_s)) {
      const std::shared_ptr<const Model> serving = Current();
      absl::StatusOr<std::string> latest = ResolveCheckpoint(options.checkpoint);
      if (!latest.ok() || *latest == serving->path || *latest == failed) continue;
      Log(absl::StrCat("reload: opening ", *latest, " beside ", serving->path));
      absl::StatusOr<std::shared_ptr<const Model>> next = Open(*latest);
      absl::Status status = next.status();
      // Its files served in place verified before it answers anything.
      while (status.ok() && absl::IsUnavailable((*next)->predictor->verification())) {
        if (!Sleep(0.02)) return;  // shutting down
      }
      if (status.ok()) status = (*next)->predictor->verification();
      if (!status.ok()) {
        failed = *latest;
        metrics.CountReload(false);
        Log(absl::StrCat("reload: ", *latest, " not served, ", serving->path, " still is: ", status.message()));
        continue;
      }
      {
        std::lock_guard<std::mutex> lock(model_mu);
        model = *std::move(next);
      }
      metrics.CountReload(true);
      Log(absl::StrCat("reload: serving ", *latest, " (version ", Current()->version, ")"));
    }
  }
};

absl::StatusOr<std::unique_ptr<Server>> Server::Create(const ServerOptions& options) {
  if (options.checkpoint.empty()) return absl::InvalidArgumentError("server: no checkpoint to serve");
  if (options.max_batch <= 0 || options.max_wait_us < 0 || options.max_queue <= 0 || options.http_threads <= 0 ||
      options.http_queue < 0 || options.max_body_bytes <= 0 || options.max_request_samples <= 0 ||
      options.read_timeout_s <= 0 || options.write_timeout_s <= 0 || options.keep_alive_timeout_s <= 0 ||
      options.keep_alive_max_requests <= 0 || options.reload_poll_s < 0) {
    return absl::InvalidArgumentError(
        "server: max_batch, max_queue, http_threads, max_body_bytes, max_request_samples, the timeouts and "
        "keep_alive_max_requests must be > 0; max_wait_us, http_queue and reload_poll_s >= 0");
  }
  auto impl = std::make_unique<Impl>(options);
  Impl& s = *impl;
  s.Routes();
  s.http.new_task_queue = [&s] { return new BoundedPool(s.options.http_threads, s.options.http_queue, &s.metrics); };
  s.http.set_tcp_nodelay(true);
  s.http.set_payload_max_length(static_cast<size_t>(options.max_body_bytes));
  s.http.set_read_timeout(options.read_timeout_s);
  s.http.set_write_timeout(options.write_timeout_s);
  s.http.set_keep_alive_timeout(options.keep_alive_timeout_s);
  s.http.set_keep_alive_max_count(static_cast<size_t>(options.keep_alive_max_requests));
  // The listening socket's options (the library's default: SO_REUSEADDR),
  // and its descriptor, which Shutdown shuts down.
  s.http.set_socket_options([&s](int fd) {
    const int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    s.bound_fd = fd;
    s.listen_fd.store(fd);
  });
  s.port = options.port == 0 ? s.http.bind_to_any_port(options.host)
                             : (s.http.bind_to_port(options.host, options.port) ? options.port : -1);
  if (s.port <= 0) {
    return absl::UnavailableError(absl::StrCat("server: cannot listen on ", options.host, ":", options.port,
                                               " (in use, or not an address of this machine)"));
  }
  // The library listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG, fixed
  // when Debian built it): connections beyond it would wait for a SYN
  // retransmission (a second). Listening again only sets the backlog.
  ::listen(s.bound_fd, SOMAXCONN);
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Server::~Server() {
  Shutdown();
  if (impl_->watcher.joinable()) impl_->watcher.join();
  if (impl_->batcher) impl_->batcher->Stop();
  if (!impl_->ran && impl_->bound_fd >= 0) ::close(impl_->bound_fd);
}

int Server::port() const { return impl_->port; }
std::string Server::url() const { return absl::StrCat("http://", impl_->options.host, ":", impl_->port); }

int64_t Server::model_version() const {
  const std::shared_ptr<const Model> m = impl_->Current();
  return m ? m->step : -1;
}

absl::Status Server::Run() {
  Impl& s = *impl_;
  s.ran = true;
  // Accepting from here on: live at once, ready once the model is open.
  // listen_after_bind returns false when the listening socket is shut down
  // (Shutdown), after its task queue ran every connection accepted.
  bool clean = false;
  std::thread listener([&s, &clean] { clean = s.http.listen_after_bind(); });
  const absl::Status opened = s.OpenFirst();
  if (opened.ok() && s.options.reload_poll_s > 0) s.watcher = std::thread([&s] { s.Watch(); });
  if (!opened.ok()) Shutdown();
  listener.join();
  if (s.watcher.joinable()) {
    Shutdown();  // a listener that failed on its own stops the watcher too
    s.watcher.join();
  }
  if (s.batcher) s.batcher->Stop();
  CEMB_RETURN_IF_ERROR(opened);
  if (!clean && !s.shutting_down.load()) return absl::InternalError("server: the listening socket failed");
  return absl::OkStatus();
}

void Server::Shutdown() {
  Impl& s = *impl_;
  {
    std::lock_guard<std::mutex> lock(s.stop_mu);
    s.shutting_down.store(true);
  }
  s.stop_cv.notify_all();
  // accept() fails at once on a socket shut down; the library then closes it.
  if (const int fd = s.listen_fd.exchange(-1); fd >= 0) ::shutdown(fd, SHUT_RDWR);
}

}  // namespace cemb::server
