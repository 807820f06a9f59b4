#include "server/http/connection_guard.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"
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

// One TLS operation (SSL_accept, SSL_read, SSL_write) on a non-blocking socket, retried
// while OpenSSL wants the socket readable or writable, until `deadline`. Returns the
// operation's result (> 0), 0 for a clean close, -1 for an error or the deadline.
template <typename Op>
int TlsRetry(SSL* ssl, socket_t sock, absl::Time deadline, bool* timed_out, Op op) {
  while (true) {
    ERR_clear_error();
    const int r = op();
    if (r > 0) return r;
    const int error = SSL_get_error(ssl, r);
    if (error == SSL_ERROR_ZERO_RETURN) return 0;
    if (error != SSL_ERROR_WANT_READ && error != SSL_ERROR_WANT_WRITE) return -1;
    if (!WaitFor(sock, error == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline)) {
      *timed_out = true;
      return -1;
    }
  }
}

}  // namespace

// A connection as cpp-httplib's Stream, over its socket or (with `ssl`) TLS on it:
// reads buffered and bounded by the current request's deadline, writes bounded by the
// write timeout.
class GuardedServer::DeadlineStream : public httplib::Stream {
 public:
  DeadlineStream(socket_t sock, SSL* ssl, absl::Duration write_timeout)
      : sock_(sock), ssl_(ssl), write_timeout_(write_timeout) {}

  // Every read from now on must be done by `deadline`.
  void set_read_deadline(absl::Time deadline) { read_deadline_ = deadline; }
  // Bytes already read from the socket and not yet consumed (a pipelined request).
  bool has_buffered() const { return begin_ < end_; }
  // A read found the deadline passed: the connection is to be closed, and nothing more
  // is written to it (cpp-httplib would answer the cut request 400 and read on).
  bool timed_out() const { return timed_out_; }

  bool is_readable() const override {
    return has_buffered() || (ssl_ != nullptr && SSL_pending(ssl_) > 0) ||
           WaitFor(sock_, POLLIN, read_deadline_);
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
      const ssize_t n = ReadSome();
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
    if (timed_out_ || size == 0) return timed_out_ ? -1 : 0;
    const absl::Time deadline = absl::Now() + write_timeout_;
    if (ssl_ != nullptr) {
      bool stuck = false;  // a write timeout is a failed write, not a cut request
      return TlsRetry(ssl_, sock_, deadline, &stuck,
                      [&] { return SSL_write(ssl_, ptr, int(std::min<size_t>(size, 1 << 30))); });
    }
    if (!WaitFor(sock_, POLLOUT, deadline)) return -1;
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
  // Reads what has arrived into buffer_, waiting at most until the read deadline.
  ssize_t ReadSome() {
    if (ssl_ != nullptr) {
      return TlsRetry(ssl_, sock_, read_deadline_, &timed_out_,
                      [&] { return SSL_read(ssl_, buffer_, int(sizeof(buffer_))); });
    }
    if (!WaitFor(sock_, POLLIN, read_deadline_)) {
      timed_out_ = true;
      return -1;
    }
    ssize_t n;
    do {
      n = ::recv(sock_, buffer_, sizeof(buffer_), 0);
    } while (n < 0 && errno == EINTR);
    return n;
  }

  const socket_t sock_;
  SSL* const ssl_;  // null: plain HTTP
  const absl::Duration write_timeout_;
  absl::Time read_deadline_ = absl::InfinitePast();
  char buffer_[4096];
  size_t begin_ = 0, end_ = 0;
  bool timed_out_ = false;
};

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

GuardedServer::~GuardedServer() {
  if (tls_ != nullptr) SSL_CTX_free(tls_);
}

absl::StatusOr<std::unique_ptr<GuardedServer>> GuardedServer::Create(ConnectionLimits limits,
                                                                      const TlsFiles& tls) {
  std::unique_ptr<GuardedServer> server(new GuardedServer(limits));
  if (tls.cert.empty()) return server;
  // As cpp-httplib's SSLServer sets its context up: TLS 1.1 at least, no compression;
  // with client CAs, a client certificate signed by one of them is required.
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  server->tls_ = ctx;
  const auto refused = [&tls] {
    return absl::InvalidArgumentError(absl::StrCat(
        "the HTTP API cannot use --tls_cert ", tls.cert, " and --tls_key ", tls.key,
        tls.client_ca.empty() ? "" : absl::StrCat(" and --tls_client_ca ", tls.client_ca)));
  };
  if (ctx == nullptr) return refused();
  SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_SESSION_RESUMPTION_ON_RENEGOTIATION);
  SSL_CTX_set_min_proto_version(ctx, TLS1_1_VERSION);
  if (SSL_CTX_use_certificate_chain_file(ctx, tls.cert.c_str()) != 1 ||
      SSL_CTX_use_PrivateKey_file(ctx, tls.key.c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_check_private_key(ctx) != 1) {
    return refused();
  }
  if (!tls.client_ca.empty()) {
    if (SSL_CTX_load_verify_locations(ctx, tls.client_ca.c_str(), nullptr) != 1) return refused();
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }
  return server;
}

bool GuardedServer::process_and_close_socket(socket_t sock) {
  const absl::Time accepted = absl::Now();
  std::string peer;
  int port = 0;
  Address(sock, /*peer=*/true, peer, port);
  const bool admitted = Admit(peer);
  over_limit = !admitted;
  const absl::Time first_deadline =
      accepted + (admitted ? limits_.request_timeout : limits_.over_limit_timeout);
  bool ok = false;
  if (tls_ == nullptr) {
    DeadlineStream stream(sock, nullptr, limits_.write_timeout);
    ok = Serve(stream, admitted, first_deadline);
  } else if (SSL* ssl = SSL_new(tls_); ssl != nullptr) {
    // Non-blocking, so that the handshake and every read keep to their deadline.
    ::fcntl(sock, F_SETFL, ::fcntl(sock, F_GETFL) | O_NONBLOCK);
    SSL_set_fd(ssl, sock);
    bool timed_out = false;
    if (TlsRetry(ssl, sock, first_deadline, &timed_out, [ssl] { return SSL_accept(ssl); }) > 0) {
      DeadlineStream stream(sock, ssl, limits_.write_timeout);
      ok = Serve(stream, admitted, first_deadline);
      if (!stream.timed_out()) SSL_shutdown(ssl);  // one try: the close follows anyway
    }
    SSL_free(ssl);
  }
  over_limit = false;
  if (admitted) Leave(peer);
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ok;
}

bool GuardedServer::Serve(DeadlineStream& stream, bool admitted, absl::Time first_deadline) {
  bool ok = false;
  // Over a cap: one request, which must arrive soon after the accept.
  const int requests = admitted ? limits_.max_requests_per_connection : 1;
  for (int i = 0; i < requests && svr_sock_ != INVALID_SOCKET; ++i) {
    // The first request's deadline counts from the accept; a later one's from its
    // first byte, which must come within the idle timeout.
    absl::Time deadline = first_deadline;
    if (i > 0) {
      stream.set_read_deadline(absl::Now() + limits_.idle_timeout);
      if (!stream.is_readable()) break;
      deadline = absl::Now() + limits_.request_timeout;
    }
    stream.set_read_deadline(deadline);
    bool closed = false;
    ok = process_request(stream, /*close_connection=*/i + 1 == requests, closed, nullptr);
    if (!ok || closed || stream.timed_out()) break;
  }
  return ok;
}

}  // namespace attnserve::http
