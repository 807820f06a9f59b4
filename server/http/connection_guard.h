// The HTTP front's defence against slow and numerous clients, beneath cpp-httplib's
// request handling: a connection is admitted against a cap on open connections in
// total and per peer address, and each request on it must arrive whole (request line,
// headers and body) within a deadline, however slowly its bytes trickle in. cpp-httplib
// 0.11 has neither: its read timeout restarts with every byte, so a client sending a
// header line every 2 s holds a worker thread forever, and 80 such clients starve
// /health.
//
// A connection over a cap is not dropped unread: it gets a short deadline and only
// /health is answered on it (OverLimit() tells the routes), everything else 503 with
// retry-after. So the pool's threads beyond the total cap keep /health answerable
// whatever the clients do: their every use is bounded by that short deadline (0.25 s).
//
// With TLS the same holds, the handshake included: the server does TLS itself (OpenSSL,
// set up as cpp-httplib's SSLServer would) on a non-blocking socket, so the handshake
// and every read keep to the deadline too.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <httplib.h>

#include "absl/status/statusor.h"
#include "server/http/connection_limits.h"

typedef struct ssl_ctx_st SSL_CTX;

namespace attnserve::http {

// cpp-httplib's server with ConnectionLimits applied to every connection it accepts.
class GuardedServer : public httplib::Server {
 public:
  // PEM files as for gRPC; an empty cert serves plain HTTP.
  struct TlsFiles {
    std::string cert;
    std::string key;
    std::string client_ca;  // non-empty: a client certificate signed by it is required
  };
  // INVALID_ARGUMENT naming the files if they cannot be used.
  static absl::StatusOr<std::unique_ptr<GuardedServer>> Create(ConnectionLimits limits,
                                                               const TlsFiles& tls);
  ~GuardedServer() override;

  // True on a thread serving a connection admitted over a cap (only /health is
  // answered there). For the routes' pre-routing handler.
  static bool OverLimit();

  // Connections open now, in total and from `peer`. Any thread.
  int open_connections() const;
  int open_connections_from(const std::string& peer) const;

 private:
  // Admits the connection (or marks it over a limit), then serves its requests as
  // cpp-httplib would, through a stream that enforces the deadlines.
  bool process_and_close_socket(socket_t sock) override;
  // A connection's socket (or TLS on it) as cpp-httplib's Stream, with the deadlines.
  class DeadlineStream;
  // The requests of one admitted (or over-limit) connection, the first due by
  // `first_deadline`.
  bool Serve(DeadlineStream& stream, bool admitted, absl::Time first_deadline);
  explicit GuardedServer(ConnectionLimits limits) : limits_(limits) {}
  // Counts a connection from `peer` in; false (and nothing counted) when over a cap.
  bool Admit(const std::string& peer);
  void Leave(const std::string& peer);

  const ConnectionLimits limits_;
  SSL_CTX* tls_ = nullptr;  // owned; null: plain HTTP
  mutable std::mutex mu_;
  int open_ = 0;                         // guarded by mu_
  std::map<std::string, int> per_peer_;  // guarded by mu_; no zero entries
};

}  // namespace attnserve::http
