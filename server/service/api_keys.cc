#include "server/service/api_keys.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "server/common/excerpt.h"
#include "server/config/flag_parsers.h"

namespace attnserve::service {
namespace {

constexpr size_t kMinKeyBytes = 16;
constexpr size_t kMaxTenantBytes = 64;

Sha256Digest Digest(absl::string_view key) {
  Sha256 h;
  h.Update(key.data(), key.size());
  return h.Finish();
}

// Equal digests, in time that does not depend on where they differ.
bool SameDigest(const Sha256Digest& a, const Sha256Digest& b) {
  volatile uint8_t diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff = diff | uint8_t(a[i] ^ b[i]);
  return diff == 0;
}

// RFC 6750's token68 characters: what a bearer token may hold.
bool IsKeyChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' ||
         c == '_' || c == '~' || c == '+' || c == '/' || c == '=';
}

bool IsTenantChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' ||
         c == '_';
}

bool SameLimits(const session::TenantLimits& a, const session::TenantLimits& b) {
  return a.max_sessions == b.max_sessions && a.max_state_bytes == b.max_state_bytes;
}

// Checks one line's fields (KEY TENANT [LIMIT...]) and parses its limits. The key itself
// never appears in a message: the file is a secret.
absl::Status CheckLine(const std::vector<absl::string_view>& fields,
                       session::TenantLimits* limits) {
  auto invalid = [](absl::string_view what) { return absl::InvalidArgumentError(what); };
  if (fields.size() < 2) {
    return invalid("expected KEY TENANT [max_sessions=N] [max_state_bytes=BYTES]");
  }
  const absl::string_view key = fields[0], tenant = fields[1];
  if (!std::all_of(key.begin(), key.end(), IsKeyChar)) {
    return invalid("the key has a character outside A-Z a-z 0-9 - . _ ~ + / =");
  }
  if (key.size() < kMinKeyBytes) {
    return invalid(absl::StrCat("the key is ", key.size(), " characters; keys need at least ",
                                kMinKeyBytes));
  }
  if (tenant.size() > kMaxTenantBytes ||
      !std::all_of(tenant.begin(), tenant.end(), IsTenantChar)) {
    return invalid(absl::StrCat("tenant '", Excerpt(std::string(tenant)), "': names are 1 to ",
                                kMaxTenantBytes, " characters of A-Z a-z 0-9 - . _"));
  }
  for (size_t i = 2; i < fields.size(); ++i) {
    absl::string_view value = fields[i];
    const std::string shown = Excerpt(std::string(fields[i]));
    absl::Status s;
    if (absl::ConsumePrefix(&value, "max_sessions=")) {
      s = config::ParseIntAtLeast(value, 1, &limits->max_sessions);
    } else if (absl::ConsumePrefix(&value, "max_state_bytes=")) {
      s = config::ParseByteSize(value, &limits->max_state_bytes);
    } else {
      return invalid(absl::StrCat("unknown field '", shown,
                                  "'; expected max_sessions=N or max_state_bytes=BYTES"));
    }
    if (!s.ok()) return invalid(absl::StrCat("'", shown, "': ", s.message()));
  }
  return absl::OkStatus();
}

absl::Status Unauthenticated(absl::string_view why) {
  return absl::UnauthenticatedError(absl::StrCat(
      "authorization: ", why,
      "; this server needs 'authorization: Bearer <API key>' (gRPC metadata or an HTTP header)"));
}

}  // namespace

absl::StatusOr<ApiKeys> ApiKeys::Parse(absl::string_view text, absl::string_view origin) {
  ApiKeys out;
  std::map<std::string, int, std::less<>> tenant_line;  // first line naming each tenant
  std::vector<int> key_line;                             // line of each keys_ entry
  int number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++number;
    auto error = [&](absl::string_view what) {
      return absl::InvalidArgumentError(absl::StrCat(origin, ":", number, ": ", what));
    };
    if (size_t hash = line.find('#'); hash != absl::string_view::npos) line = line.substr(0, hash);
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    if (fields.empty()) continue;
    session::TenantLimits limits;
    if (absl::Status s = CheckLine(fields, &limits); !s.ok()) return error(s.message());
    const std::string tenant(fields[1]);
    const Sha256Digest digest = Digest(fields[0]);
    for (size_t k = 0; k < out.keys_.size(); ++k) {
      if (out.keys_[k].digest == digest) {
        return error(absl::StrCat("the same key as line ", key_line[k]));
      }
    }
    auto [it, added] = out.limits_.emplace(tenant, limits);
    if (added) {
      tenant_line[tenant] = number;
    } else if (!SameLimits(it->second, limits)) {
      return error(absl::StrCat("tenant '", tenant, "' has other limits on line ",
                                tenant_line[tenant],
                                "; give every key of a tenant the same limits"));
    }
    out.keys_.push_back(Key{digest, tenant});
    key_line.push_back(number);
  }
  if (out.keys_.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": no keys (expected lines KEY TENANT [max_sessions=N] "
                             "[max_state_bytes=BYTES])"));
  }
  return out;
}

absl::StatusOr<ApiKeys> ApiKeys::Load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat(path, ": cannot read the API keys file: ", std::strerror(errno)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  return Parse(text.str(), path);
}

absl::StatusOr<std::string> ApiKeys::Authenticate(
    const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) const {
  auto it = metadata.find("authorization");
  if (it == metadata.end()) return AuthenticateHeader(std::nullopt);
  return AuthenticateHeader(absl::string_view(it->second.data(), it->second.size()));
}

absl::StatusOr<std::string> ApiKeys::AuthenticateHeader(
    std::optional<absl::string_view> authorization) const {
  if (!enabled()) return std::string(attnserve::kDefaultTenant);
  if (!authorization.has_value()) return Unauthenticated("missing");
  absl::string_view value = *authorization;
  constexpr absl::string_view kScheme = "bearer ";
  if (value.size() <= kScheme.size() ||
      !absl::EqualsIgnoreCase(value.substr(0, kScheme.size()), kScheme)) {
    return Unauthenticated("not a Bearer credential");
  }
  value.remove_prefix(kScheme.size());
  const Sha256Digest digest = Digest(absl::StripAsciiWhitespace(value));
  const Key* found = nullptr;
  for (const Key& key : keys_) {  // every key, whatever matched before
    if (SameDigest(key.digest, digest) && found == nullptr) found = &key;
  }
  if (found == nullptr) return Unauthenticated("unknown API key");
  return found->tenant;
}

}  // namespace attnserve::service
