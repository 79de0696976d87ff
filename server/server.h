// Server: dlrm-serve's HTTP server. It speaks the Open Inference Protocol
// (KServe v2) over HTTP/REST (cpp-httplib) in front of a predictor
// (serve/predictor.h), and adds what a service needs around it: dynamic
// batching (server/batcher.h), bounded queues that answer 503 at once when
// full, Prometheus metrics, a reload of the newer checkpoint when the
// trainer's LATEST moves, and a shutdown that finishes what is in flight.
//
//   GET  /v2/health/live                 200 while the process serves
//   GET  /v2/health/ready                200 once the model is open and no file of it was found
//                                        corrupt (Predictor::verification); 400 before, and while
//                                        shutting down
//   GET  /v2                             server metadata
//   GET  /v2/models/<name>[/versions/<v>]          model metadata (server/protocol.h)
//   GET  /v2/models/<name>[/versions/<v>]/ready    200 when ready
//   POST /v2/models/<name>[/versions/<v>]/infer    scores (server/protocol.h); 4xx {"error": ...}
//   GET  /metrics                        Prometheus text (server/metrics.h)
//
// Threads: HTTP threads (http_threads) read a connection's requests, parse
// them and wait for their batch; scoring threads (the predictor's contexts)
// score batches; a watcher polls the checkpoint directory's LATEST. An
// accepted connection waits for an HTTP thread in a queue of http_queue;
// when that is full, the accepting thread answers the connection itself:
// infer requests get 503 and "Connection: close" (health, metadata and
// metrics are answered as usual). A request that finds max_queue requests
// waiting to be scored gets 503 at once.
//
// Reload: the newer checkpoint is opened beside the one serving (both take
// memory until the swap: docs/serving.md), its background verification
// awaited, then swapped in (a shared_ptr): each batch is scored whole by
// the model it took; the old model is freed when its last batch ends.
//
// Thread safety: Shutdown from any thread (a signal handler's thread);
// the rest from the thread that created the server.
//
//   CEMB_ASSIGN_OR_RETURN(std::unique_ptr<Server> s, Server::Create({.checkpoint = "/runs/ck", .port = 8000}));
//   std::thread stop([&] { WaitForSigterm(); s->Shutdown(); });
//   CEMB_RETURN_IF_ERROR(s->Run());   // returns after Shutdown, with every request in flight answered
#ifndef CEMB_SERVER_SERVER_H_
#define CEMB_SERVER_SERVER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "serve/predictor.h"

namespace cemb::server {

struct ServerOptions {
  // The model: a checkpoint directory (watched for reloads), its LATEST or a step-N.
  std::string checkpoint;
  std::string model_name = "dlrm";
  // The predictor's options; its max_batch is set to max_batch below.
  serve::PredictorOptions predictor;

  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (port() says which)

  // Dynamic batching: a batch holds at most max_batch samples; the oldest
  // request of a batch waits at most max_wait_us for others.
  int64_t max_batch = 256;
  int64_t max_wait_us = 500;
  // Infer requests waiting to be scored, at most (503 beyond).
  int64_t max_queue = 256;
  // HTTP threads (each holds one connection at a time, idle keep-alive ones
  // included), and accepted connections waiting for one (beyond: 503).
  int http_threads = 64;
  int http_queue = 64;

  // Limits of a request.
  int64_t max_body_bytes = int64_t{16} << 20;
  int64_t max_request_samples = 4096;
  int read_timeout_s = 5;
  int write_timeout_s = 5;
  int keep_alive_timeout_s = 5;
  int keep_alive_max_requests = 1000;

  // Poll the checkpoint directory's LATEST every reload_poll_s seconds
  // (0: never reload).
  double reload_poll_s = 10.0;

  // Lines for people (start, reloads, failures); none when empty.
  std::function<void(std::string_view line)> log;
  // For tests: called on a scoring thread before each batch is scored,
  // with its samples.
  std::function<void(int64_t samples)> before_score;
};

class Server {
 public:
  // Binds the port (port() is known from here). Errors: InvalidArgument
  // (options), Unavailable (the address cannot be bound).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Server>> Create(const ServerOptions& options);
  ~Server();

  int port() const;
  std::string url() const;  // http://host:port

  // Accepts connections at once (live; infer 503 and not ready until the
  // model is open), opens the model, serves until Shutdown(); then returns
  // once every request in flight was answered and every thread joined.
  // Errors: what Predictor::Open says of the checkpoint (the server then
  // stops without serving).
  [[nodiscard]] absl::Status Run();

  // Stops accepting connections (the listening socket is shut down), marks
  // the server not ready, and lets Run() finish what is in flight: queued
  // connections and requests are still answered ("Connection: close"); an
  // idle keep-alive connection is closed after keep_alive_timeout_s at most.
  void Shutdown();

  // The checkpoint step served now (-1 before one is open).
  int64_t model_version() const;

 private:
  struct Impl;
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cemb::server

#endif  // CEMB_SERVER_SERVER_H_
