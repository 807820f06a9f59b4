// What the HTTP front allows one connection (connection_guard.h applies it): httplib-free,
// for the options that carry it.
#pragma once

#include "absl/time/time.h"

namespace attnserve::http {

struct ConnectionLimits {
  // Connections served at once (ServerOptions::http_max_connections); must leave some of
  // the pool's threads for connections over a cap.
  int max_connections = 64;
  // Of them from one peer address (ServerOptions::http_max_connections_per_peer). Behind
  // a proxy every client is the proxy: raise it to max_connections there.
  int max_per_peer = 32;
  // One request's head and body must have arrived this long after its first byte
  // (ServerOptions::http_request_timeout); else the connection is closed.
  absl::Duration request_timeout = absl::Seconds(30);
  // A connection over a cap must have sent its request this long after it was accepted.
  // (Short: a probe sends its request at once, and each such connection holds one of the
  // few threads left over from max_connections meanwhile.)
  absl::Duration over_limit_timeout = absl::Milliseconds(250);
  // An idle keep-alive connection is closed after this long, or after this many requests.
  absl::Duration idle_timeout = absl::Seconds(5);
  int max_requests_per_connection = 100;
  // A write that cannot proceed this long fails (the client stopped reading).
  absl::Duration write_timeout = absl::Seconds(60);
};

}  // namespace attnserve::http
