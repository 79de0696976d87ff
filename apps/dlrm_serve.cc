// dlrm-serve: serves a checkpoint that dlrm-train wrote over HTTP, in the
// Open Inference Protocol (KServe v2, REST), docs/serving.md.
//
//   dlrm-serve --checkpoint runs/ck                      # its LATEST, reloaded when it moves
//   dlrm-serve --checkpoint runs/ck/step-000001000 --port 9000 --max_batch 128 --max_wait_us 200
//   curl -s localhost:8000/v2/models/dlrm/infer -d @request.json
//
// Prints "dlrm-serve: listening on http://HOST:PORT" on stdout once it
// accepts connections (--port 0: a free port, the line says which).
// SIGTERM or SIGINT: stops accepting, answers every request in flight,
// exits 0. Exit status 1: the checkpoint cannot be served or the address
// bound (the message says why); 2: a usage error.
#include <pthread.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <string>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "server/server.h"

namespace cemb::server {
namespace {

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "dlrm-serve: %s\n", std::string(status.message()).c_str());
  return 1;
}

int Main(int argc, char** argv) {
  CLI::App app{"dlrm-serve: serve a DLRM checkpoint over HTTP (the Open Inference Protocol, KServe v2)"};
  ServerOptions o;
  int64_t ssd_cache_bytes = o.predictor.ssd_cache_bytes;
  bool no_verify = false;
  bool dram_tables = false;
  int score_delay_ms = 0;
  app.add_option("--checkpoint", o.checkpoint,
                 "the checkpoint directory (its LATEST is served and reloaded when it moves), a LATEST file or a "
                 "step-N directory")
      ->required();
  app.add_option("--model_name", o.model_name, "the model's name in the protocol's paths")->capture_default_str();
  app.add_option("--host", o.host, "the address to listen on (0.0.0.0: every interface)")->capture_default_str();
  app.add_option("--port", o.port, "the port (0: any free port)")->capture_default_str();
  app.add_option("--max_batch", o.max_batch, "samples one scoring holds at most (dynamic batching)")
      ->capture_default_str();
  app.add_option("--max_wait_us", o.max_wait_us,
                 "how long the oldest request of a batch waits for others (0: no wait)")
      ->capture_default_str();
  app.add_option("--max_queue", o.max_queue, "infer requests waiting to be scored, at most (beyond: 503)")
      ->capture_default_str();
  app.add_option("--http_threads", o.http_threads,
                 "HTTP threads (each holds one connection, idle keep-alive ones included)")
      ->capture_default_str();
  app.add_option("--http_queue", o.http_queue,
                 "accepted connections waiting for an HTTP thread, at most (beyond: 503 at once)")
      ->capture_default_str();
  app.add_option("--max_body_bytes", o.max_body_bytes, "the largest request body (beyond: 413)")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  app.add_option("--max_request_samples", o.max_request_samples, "samples one request holds at most (beyond: 413)")
      ->capture_default_str();
  app.add_option("--read_timeout_s", o.read_timeout_s, "reading a request")->capture_default_str();
  app.add_option("--write_timeout_s", o.write_timeout_s, "writing an answer")->capture_default_str();
  app.add_option("--keep_alive_s", o.keep_alive_timeout_s, "how long an idle connection is kept")
      ->capture_default_str();
  app.add_option("--reload_poll_s", o.reload_poll_s,
                 "how often the checkpoint directory's LATEST is read (0: never reload)")
      ->capture_default_str();
  app.add_option("--contexts", o.predictor.contexts,
                 "inference contexts: batches scored at once (0: one per hardware thread)")
      ->capture_default_str();
  app.add_option("--threads_per_context", o.predictor.threads_per_context,
                 "OpenMP threads of one scoring (0: 1)")
      ->capture_default_str();
  app.add_option("--ssd_cache_bytes", ssd_cache_bytes, "DRAM for the rows of the tables served from ssd snapshots")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  app.add_flag("--dram_tables", dram_tables,
               "load the tables that trained on ssd into DRAM instead of serving them in place from their snapshots");
  app.add_flag("--no_verify", no_verify, "do not verify the checkpoint's checksums");
  app.add_option("--debug_score_delay_ms", score_delay_ms,
                 "for tests: sleep this long before each scoring (holds requests in flight)")
      ->group("");  // not in --help
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help: 0; a usage error: its message and 2
  }
  o.predictor.ssd_cache_bytes = ssd_cache_bytes;
  o.predictor.verify_checksums = !no_verify;
  o.predictor.serve_in_place = !dram_tables;
  o.log = [](std::string_view line) {
    std::fprintf(stderr, "dlrm-serve: %.*s\n", static_cast<int>(line.size()), line.data());
  };
  if (score_delay_ms > 0) {
    o.before_score = [score_delay_ms](int64_t) {
      std::this_thread::sleep_for(std::chrono::milliseconds(score_delay_ms));
    };
  }

  // SIGTERM and SIGINT go to one thread, which shuts the server down: every
  // thread made from here on inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  absl::StatusOr<std::unique_ptr<Server>> server = Server::Create(o);
  if (!server.ok()) return Fail(server.status());
  std::thread waiter([&signals, s = server->get()] {
    int signal = 0;
    sigwait(&signals, &signal);
    s->Shutdown();
  });
  std::fprintf(stdout, "dlrm-serve: listening on %s\n", (*server)->url().c_str());
  std::fflush(stdout);
  const absl::Status run = (*server)->Run();
  pthread_kill(waiter.native_handle(), SIGTERM);  // ends its sigwait when no signal came (a failed Run)
  waiter.join();
  if (!run.ok()) return Fail(run);
  std::fprintf(stderr, "dlrm-serve: stopped; every request in flight was answered\n");
  return 0;
}

}  // namespace
}  // namespace cemb::server

int main(int argc, char** argv) {
  try {
    return cemb::server::Main(argc, argv);
  } catch (const std::exception& e) {  // a last line of defence: a message, never a crash
    std::fprintf(stderr, "dlrm-serve: internal error: %s\n", e.what());
    return 1;
  }
}
