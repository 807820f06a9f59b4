// Start-up policy for where the server may listen in the clear: a non-loopback address
// needs TLS, API keys, or an explicit --insecure. Torch-free; depends only on abseil.
#pragma once

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "server/config/server_options.h"

namespace attnserve::config {

// True for an address only this machine can connect to: "unix:..." and
// "unix-abstract:..." sockets, 127.0.0.0/8, ::1 (also as ::ffff:127.x.y.z) and
// "localhost", with a port ("127.0.0.1:50051", "[::1]:0", "localhost:50051"). False for
// the wildcard ("0.0.0.0", "[::]", ":50051"), every other address and every other host
// name (which the server does not resolve here).
bool IsLoopbackAddress(absl::string_view address);

// True when --tls_cert and --tls_key are set.
bool TlsConfigured(const ServerOptions& options);

// True when callers must present an API key. The one place that decides it: the
// listen policy below asks it.
bool AuthConfigured(const ServerOptions& options);

// OK when options.listen_address is loopback, or TLS or API keys are configured, or
// options.insecure is set; and options.http_listen is empty, loopback, or API keys or
// insecure are set (HTTP has no TLS). Otherwise FailedPrecondition whose message says why the
// server will not start and which flags to pass; main() prints it and exits non-zero.
absl::Status CheckListenSecurity(const ServerOptions& options);

}  // namespace attnserve::config
