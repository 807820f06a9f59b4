#include "server/config/listen_policy.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace attnserve::config {
namespace {

// The host of "host:port" or "[v6]:port"; the whole text when there is no port.
absl::string_view HostOf(absl::string_view address) {
  if (absl::StartsWith(address, "[")) {
    const size_t close = address.find(']');
    return close == absl::string_view::npos ? address.substr(1) : address.substr(1, close - 1);
  }
  const size_t colon = address.rfind(':');
  return colon == absl::string_view::npos ? address : address.substr(0, colon);
}

}  // namespace

bool IsLoopbackAddress(absl::string_view address) {
  if (absl::StartsWith(address, "unix:") || absl::StartsWith(address, "unix-abstract:")) {
    return true;
  }
  const std::string host(HostOf(address));
  if (absl::AsciiStrToLower(host) == "localhost") return true;
  in_addr v4;
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6;
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
    return IN6_IS_ADDR_LOOPBACK(&v6) || (IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127);
  }
  return false;
}

bool TlsConfigured(const ServerOptions& options) {
  return !options.tls_cert.empty() && !options.tls_key.empty();
}

bool AuthConfigured(const ServerOptions& options) {
  return !options.api_keys_file.empty();
}

absl::Status CheckListenSecurity(const ServerOptions& options) {
  // The HTTP front has no TLS of its own (yet): in the clear off loopback it needs API
  // keys or --insecure, whatever gRPC's TLS.
  if (!options.http_listen.empty() && !options.insecure && !AuthConfigured(options) &&
      !IsLoopbackAddress(options.http_listen)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "refusing to serve HTTP on ", options.http_listen,
        " without API keys: it is not a loopback address and the HTTP API has no TLS. Pass "
        "--api_keys_file=FILE, or --insecure if the network is private by design; or "
        "--http_listen=127.0.0.1:PORT, or --http_listen= to turn HTTP off."));
  }
  if (options.insecure || TlsConfigured(options) || AuthConfigured(options) ||
      IsLoopbackAddress(options.listen_address)) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "refusing to listen on ", options.listen_address,
      " with neither TLS nor API keys: it is not a loopback address, so anyone who can "
      "reach it could read every prompt and reply on the wire and use every session. "
      "Pass --tls_cert=FILE --tls_key=FILE (TLS; add --tls_client_ca=FILE for client "
      "certificates), --api_keys_file=FILE (API keys), or --insecure if the network is "
      "private by design (e.g. only a proxy that authenticates can reach it); or listen "
      "on loopback (--listen=127.0.0.1:PORT)."));
}

}  // namespace attnserve::config
