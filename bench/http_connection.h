// HttpConnection: one keep-alive HTTP/1.1 client connection for an event
// loop, a request at a time, non-blocking. It writes a request (a head and
// a body, gathered in one sendmsg) as far as the socket takes it, and reads the answer
// as it arrives; the loop calls Progress() whenever the socket is ready and
// asks wants_write() whether to wait for writability too. Used by
// bench/serve_http_load, whose one thread drives every connection this way:
// a thread per connection (cpp-httplib's blocking client) spent 0.10 ms of
// CPU a request of 64 samples on the 2 cores the server shares with it,
// one thread over epoll 0.045 (bench/history/serving.md, 2026-11-28).
//
//   HttpConnection c;
//   if (!c.Connect("127.0.0.1", 8000)) ...;
//   c.Send("POST /v2/models/dlrm/infer", "application/json", body);   // body outlives the answer
//   // epoll: EPOLLIN, and EPOLLOUT while c.wants_write()
//   switch (c.Progress()) { case HttpConnection::kAnswered: c.status(); ... }
#ifndef CEMB_BENCH_HTTP_CONNECTION_H_
#define CEMB_BENCH_HTTP_CONNECTION_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace cemb::bench {

class HttpConnection {
 public:
  enum State { kIdle, kPending, kAnswered, kFailed };

  HttpConnection() = default;
  ~HttpConnection();
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  // Connects (blocking), then makes the socket non-blocking with TCP_NODELAY.
  // False, with error() saying why, when it cannot.
  bool Connect(const std::string& host, int port);
  void Close();
  int fd() const { return fd_; }
  bool connected() const { return fd_ >= 0; }

  // Starts a request ("METHOD /path"), writing what the socket takes now.
  // `body` is not copied: it must stay alive until the answer. Requires no
  // request pending. Returns the state (kFailed when the write failed).
  State Send(std::string_view request_line, std::string_view content_type, std::string_view body);

  // Writes what is left of the request and reads what has arrived: kPending
  // until the whole answer is in, then kAnswered once (status() and body()
  // hold it; the connection is idle again, or closed when the answer said
  // "Connection: close"), or kFailed (the peer closed or an I/O error: the
  // connection is closed; error() says why).
  State Progress();

  bool wants_write() const { return state_ == kPending && sent_ < head_.size() + body_.size(); }
  int status() const { return status_; }
  std::string_view body() const { return answer_body_; }
  const std::string& error() const { return error_; }

 private:
  State Fail(std::string why);
  // Parses the answer in in_: true once it is complete.
  bool Parsed();

  int fd_ = -1;
  State state_ = kIdle;
  std::string head_;
  std::string_view body_;
  size_t sent_ = 0;
  std::string in_;
  size_t head_end_ = 0;       // in_'s bytes up to the blank line, once found
  int64_t content_length_ = -1;
  bool close_after_ = false;  // the answer said "Connection: close"
  int status_ = 0;
  std::string answer_body_;
  std::string error_;
};

}  // namespace cemb::bench

#endif  // CEMB_BENCH_HTTP_CONNECTION_H_
