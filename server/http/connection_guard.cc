#include "server/http/connection_guard.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/time/clock.h"

namespace attnserve::http {
namespace {

thread_local bool over_limit = false;

// The numeric address and port of a socket's peer (`peer`) or own end.
void Address(socket_t sock, bool peer, std::string& ip, int& port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  const int rc = peer ? ::getpeername(sock, reinterpret_cast<sockaddr*>(&addr), &len)
                      : ::getsockname(sock, reinterpret_cast<sockaddr*>(&addr), &len);
  ip.clear();
  port = 0;
  if (rc != 0) return;
  char text[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&addr);
    ::inet_ntop(AF_INET, &v4->sin_addr, text, sizeof(text));
    port = ntohs(v4->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&addr);
    ::inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof(text));
    port = ntohs(v6->sin6_port);
  }
  ip = text;
}

// Waits until `sock` has `events` (POLLIN or POLLOUT), at most until `deadline`; true
// if it has them (or an error or hang-up to report, which the next call then sees).
bool WaitFor(socket_t sock, short events, absl::Time deadline) {
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return false;
    pollfd p{sock, events, 0};
    const int ms = int(std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 1 << 30));
    const int rc = ::poll(&p, 1, ms);
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) return false;
  }
}

// A connection's socket as cpp-httplib's Stream: reads buffered and bounded by the
// current request's deadline, writes bounded by the write timeout.
class DeadlineStream : public httplib::Stream {
 public:
  DeadlineStream(socket_t sock, absl::Duration write_timeout)
      : sock_(sock), write_timeout_(write_timeout) {}

  // Every read from now on must be done by `deadline`.
  void set_read_deadline(absl::Time deadline) { read_deadline_ = deadline; }
  // Bytes already read from the socket and not yet consumed (a pipelined request).
  bool has_buffered() const { return begin_ < end_; }
  // A read found the deadline passed: the connection is to be closed, and nothing more
  // is written to it (cpp-httplib would answer the cut request 400 and read on).
  bool timed_out() const { return timed_out_; }

  bool is_readable() const override {
    return has_buffered() || WaitFor(sock_, POLLIN, read_deadline_);
  }
  bool is_writable() const override {
    if (!WaitFor(sock_, POLLOUT, absl::Now() + write_timeout_)) return false;
    // Writable but closed by the peer: a pending hang-up or error reads as gone.
    pollfd p{sock_, POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) return true;
    if (p.revents & (POLLERR | POLLHUP)) return false;
    char byte;
    return ::recv(sock_, &byte, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
  }
  ssize_t read(char* ptr, size_t size) override {
    if (timed_out_) return -1;
    if (!has_buffered()) {
      if (!WaitFor(sock_, POLLIN, read_deadline_)) {
        timed_out_ = true;
        return -1;
      }
      ssize_t n;
      do {
        n = ::recv(sock_, buffer_, sizeof(buffer_), 0);
      } while (n < 0 && errno == EINTR);
      if (n <= 0) return n;
      begin_ = 0;
      end_ = size_t(n);
    }
    const size_t n = std::min(size, end_ - begin_);
    std::copy(buffer_ + begin_, buffer_ + begin_ + n, ptr);
    begin_ += n;
    return ssize_t(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (timed_out_) return -1;
    if (!WaitFor(sock_, POLLOUT, absl::Now() + write_timeout_)) return -1;
    ssize_t n;
    do {
      n = ::send(sock_, ptr, size, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    return n;
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    Address(sock_, /*peer=*/true, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    Address(sock_, /*peer=*/false, ip, port);
  }
  socket_t socket() const override { return sock_; }

 private:
  const socket_t sock_;
  const absl::Duration write_timeout_;
  absl::Time read_deadline_ = absl::InfinitePast();
  char buffer_[4096];
  size_t begin_ = 0, end_ = 0;
  bool timed_out_ = false;
};

}  // namespace

bool GuardedServer::OverLimit() { return over_limit; }

int GuardedServer::open_connections() const {
  std::lock_guard<std::mutex> lock(mu_);
  return open_;
}

int GuardedServer::open_connections_from(const std::string& peer) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = per_peer_.find(peer);
  return it == per_peer_.end() ? 0 : it->second;
}

bool GuardedServer::Admit(const std::string& peer) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = per_peer_.find(peer);
  const int from_peer = it == per_peer_.end() ? 0 : it->second;
  if (open_ >= limits_.max_connections || from_peer >= limits_.max_per_peer) return false;
  ++open_;
  ++per_peer_[peer];
  return true;
}

void GuardedServer::Leave(const std::string& peer) {
  std::lock_guard<std::mutex> lock(mu_);
  --open_;
  if (--per_peer_[peer] == 0) per_peer_.erase(peer);
}

bool GuardedServer::process_and_close_socket(socket_t sock) {
  const absl::Time accepted = absl::Now();
  std::string peer;
  int port = 0;
  Address(sock, /*peer=*/true, peer, port);
  const bool admitted = Admit(peer);
  over_limit = !admitted;
  DeadlineStream stream(sock, limits_.write_timeout);
  bool ok = false;
  // Over a cap: one request, which must arrive soon after the accept.
  const int requests = admitted ? limits_.max_requests_per_connection : 1;
  for (int i = 0; i < requests && svr_sock_ != INVALID_SOCKET; ++i) {
    // The first request's deadline counts from the accept; a later one's from its
    // first byte, which must come within the idle timeout.
    absl::Time start = accepted;
    if (i > 0) {
      stream.set_read_deadline(absl::Now() + limits_.idle_timeout);
      if (!stream.is_readable()) break;
      start = absl::Now();
    }
    stream.set_read_deadline(start + (admitted ? limits_.request_timeout
                                               : limits_.over_limit_timeout));
    bool closed = false;
    ok = process_request(stream, /*close_connection=*/i + 1 == requests, closed, nullptr);
    if (!ok || closed || stream.timed_out()) break;
  }
  over_limit = false;
  if (admitted) Leave(peer);
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ok;
}

}  // namespace attnserve::http
