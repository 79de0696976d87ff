#include "bench/http_connection.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace cemb::bench {

HttpConnection::~HttpConnection() { Close(); }

void HttpConnection::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  state_ = kIdle;
  in_.clear();
}

bool HttpConnection::Connect(const std::string& host, int port) {
  Close();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int e = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); e != 0) {
    error_ = absl::StrCat(host, ":", port, ": ", ::gai_strerror(e));
    return false;
  }
  for (addrinfo* a = found; a != nullptr && fd_ < 0; a = a->ai_next) {
    fd_ = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd_ < 0) continue;
    if (::connect(fd_, a->ai_addr, a->ai_addrlen) != 0) {
      error_ = absl::StrCat(host, ":", port, ": connect: ", std::strerror(errno));
      ::close(fd_);
      fd_ = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd_ < 0) return false;
  const int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) | O_NONBLOCK);
  return true;
}

HttpConnection::State HttpConnection::Fail(std::string why) {
  error_ = std::move(why);
  Close();
  state_ = kFailed;
  return kFailed;
}

HttpConnection::State HttpConnection::Send(std::string_view request_line, std::string_view content_type,
                                           std::string_view body) {
  if (fd_ < 0) return Fail("not connected");
  head_.assign(request_line);
  head_ += " HTTP/1.1\r\nHost: bench\r\nContent-Type: ";
  head_ += content_type;
  absl::StrAppend(&head_, "\r\nContent-Length: ", body.size(), "\r\n\r\n");
  body_ = body;
  sent_ = 0;
  in_.clear();
  head_end_ = 0;
  content_length_ = -1;
  status_ = 0;
  state_ = kPending;
  return Progress();
}

HttpConnection::State HttpConnection::Progress() {
  if (state_ != kPending) return state_;
  while (wants_write()) {
    iovec parts[2];
    int n = 0;
    if (sent_ < head_.size()) parts[n++] = {head_.data() + sent_, head_.size() - sent_};
    const size_t body_sent = sent_ > head_.size() ? sent_ - head_.size() : 0;
    parts[n++] = {const_cast<char*>(body_.data()) + body_sent, body_.size() - body_sent};
    msghdr message{};
    message.msg_iov = parts;
    message.msg_iovlen = static_cast<size_t>(n);
    const ssize_t w = ::sendmsg(fd_, &message, MSG_NOSIGNAL);  // a closed peer is an error, not SIGPIPE
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return Fail(absl::StrCat("write: ", std::strerror(errno)));
    sent_ += static_cast<size_t>(w);
  }
  char buf[65536];
  for (;;) {
    const ssize_t r = ::recv(fd_, buf, sizeof buf, 0);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Fail(absl::StrCat("read: ", std::strerror(errno)));
    if (r == 0) return Fail("the server closed the connection");
    in_.append(buf, static_cast<size_t>(r));
    if (static_cast<size_t>(r) < sizeof buf) break;
  }
  if (!Parsed()) return state_;
  if (close_after_) Close();  // the server ends the connection: the next request needs a new one
  state_ = kIdle;
  return kAnswered;
}

bool HttpConnection::Parsed() {
  if (head_end_ == 0) {
    const size_t blank = in_.find("\r\n\r\n");
    if (blank == std::string::npos) return false;
    head_end_ = blank + 4;
    // "HTTP/1.1 200 OK"
    const size_t space = in_.find(' ');
    status_ = space < blank ? std::atoi(in_.c_str() + space + 1) : 0;
    content_length_ = 0;
    close_after_ = false;
    for (size_t line = in_.find("\r\n") + 2; line < blank;) {
      const size_t next = in_.find("\r\n", line);
      auto is = [&](std::string_view header) {
        return next - line >= header.size() && ::strncasecmp(in_.data() + line, header.data(), header.size()) == 0;
      };
      if (is("content-length:")) content_length_ = std::atoll(in_.c_str() + line + 15);
      if (is("connection: close")) close_after_ = true;
      line = next + 2;
    }
  }
  if (in_.size() < head_end_ + static_cast<size_t>(content_length_)) return false;
  answer_body_.assign(in_, head_end_, static_cast<size_t>(content_length_));
  in_.clear();
  return true;
}

}  // namespace cemb::bench
