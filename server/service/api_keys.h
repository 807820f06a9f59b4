// API keys and the tenants they name: the --api_keys_file format, and the check every
// AttnServe call makes on its `authorization: Bearer KEY` metadata. Health and
// reflection are other services and never ask.
//
// The file is text, one key per line:
//
//   # comment (from `#` to the end of the line; blank lines are skipped)
//   KEY TENANT [max_sessions=N] [max_state_bytes=BYTES]
//
// KEY: at least 16 characters of A-Z a-z 0-9 - . _ ~ + / = (a bearer token). TENANT: 1 to
// 64 characters of A-Z a-z 0-9 - . _. max_sessions (>= 1) and max_state_bytes (bytes or
// with a suffix KiB/MiB/GiB/KB/MB/GB) bound the tenant's sessions in one server's memory;
// an absent limit is only the server's own. Several keys may name one tenant (rotation);
// they must then give it the same limits. A key appears once. Errors name the file and
// line, and never contain a key.
#pragma once

#include <map>
#include <optional>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include <grpcpp/support/string_ref.h>

#include "absl/status/statusor.h"
#include "server/common/sha256.h"
#include "server/session/session_store.h"

namespace attnserve::service {

class ApiKeys {
 public:
  // No keys: every caller is the one tenant attnserve::kDefaultTenant.
  ApiKeys() = default;

  // Parses keys-file text (format above); `origin` (the path) prefixes errors:
  // INVALID_ARGUMENT "ORIGIN:LINE: what is wrong". A file with no key is an error too.
  static absl::StatusOr<ApiKeys> Parse(absl::string_view text, absl::string_view origin);
  // Reads and parses the file at `path` (NOT_FOUND, with the reason, if unreadable).
  static absl::StatusOr<ApiKeys> Load(const std::string& path);

  // True when keys are configured (and so every call must carry one).
  bool enabled() const { return !keys_.empty(); }
  int key_count() const { return int(keys_.size()); }
  int tenant_count() const { return int(limits_.size()); }

  // The caller's tenant, from `authorization: Bearer KEY` in `metadata`. Without keys
  // configured: kDefaultTenant, whatever the metadata. Otherwise UNAUTHENTICATED for a
  // missing header, another scheme, or an unknown key; the message never repeats the
  // key. Every configured key is compared, in constant time, whatever matches. Any
  // thread.
  absl::StatusOr<std::string> Authenticate(
      const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) const;
  // The same from the value of an `authorization` header (nullopt: no header), for
  // edges other than gRPC (the HTTP front).
  absl::StatusOr<std::string> AuthenticateHeader(
      std::optional<absl::string_view> authorization) const;

  // Each tenant's limits, for SessionStore::Options::tenant_limits.
  const std::map<std::string, session::TenantLimits, std::less<>>& limits() const {
    return limits_;
  }

 private:
  struct Key {
    Sha256Digest digest;  // of the key: compared instead of the key itself
    std::string tenant;
  };
  std::vector<Key> keys_;
  std::map<std::string, session::TenantLimits, std::less<>> limits_;
};

}  // namespace attnserve::service
