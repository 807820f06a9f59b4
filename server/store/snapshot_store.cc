#include "server/store/snapshot_store.h"

#include "server/common/random_id.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "server/store/dir_store.h"
#include "server/store/record_kind.h"
#include "server/store/redis_store.h"

namespace attnserve::store {
namespace {

constexpr size_t kMaxIdLength = 128;
constexpr char kAcceptedForms[] =
    "expected \"dir:PATH\" or \"redis://HOST:PORT[/DB]\" (\"memory\" means no durable "
    "store)";

// True if `s` is 1..9 decimal digits (no sign, no spaces) with a value <= max.
bool ParseDigits(absl::string_view s, int max, int* out) {
  if (s.empty() || s.size() > 9) return false;
  int value = 0;
  for (char c : s) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
    value = value * 10 + (c - '0');
  }
  if (value > max) return false;
  *out = value;
  return true;
}

absl::Status BadSpec(const std::string& spec, absl::string_view why = "") {
  return absl::InvalidArgumentError(absl::StrCat("session store \"", spec, "\": ", why,
                                                 why.empty() ? "" : "; ", kAcceptedForms));
}

// Parses "HOST:PORT[/DB]" (the part after "redis://"); HOST may be a bracketed IPv6
// address.
absl::StatusOr<RedisSnapshotStore::Address> ParseRedisAddress(const std::string& spec,
                                                              absl::string_view rest) {
  RedisSnapshotStore::Address address;
  if (size_t slash = rest.find('/'); slash != absl::string_view::npos) {
    if (!ParseDigits(rest.substr(slash + 1), 999999999, &address.db)) {
      return BadSpec(spec, "DB must be a non-negative integer");
    }
    rest = rest.substr(0, slash);
  }
  size_t colon = rest.rfind(':');
  if (colon == absl::string_view::npos) return BadSpec(spec, "missing :PORT");
  absl::string_view host = rest.substr(0, colon);
  absl::string_view port = rest.substr(colon + 1);
  if (absl::ConsumePrefix(&host, "[") && !absl::ConsumeSuffix(&host, "]")) {
    return BadSpec(spec, "unterminated [IPv6 address]");
  }
  if (host.empty()) return BadSpec(spec, "missing HOST");
  if (!ParseDigits(port, 65535, &address.port) || address.port == 0) {
    return BadSpec(spec, "PORT must be 1..65535");
  }
  address.host = std::string(host);
  return address;
}

absl::Status NoPages(const std::string& store_name) {
  return absl::UnimplementedError(absl::StrCat("session store ", store_name,
                                               " keeps no shared pages"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<SnapshotStore>> OpenSnapshotStore(const std::string& spec,
                                                                 const Clock* clock) {
  absl::string_view rest = spec;
  if (absl::ConsumePrefix(&rest, "dir:")) {
    if (rest.empty()) return BadSpec(spec, "empty PATH");
    auto store = DirSnapshotStore::Create(std::string(rest), clock);
    if (!store.ok()) return store.status();
    return std::unique_ptr<SnapshotStore>(std::move(*store));
  }
  if (absl::ConsumePrefix(&rest, "redis://")) {
    auto address = ParseRedisAddress(spec, rest);
    if (!address.ok()) return address.status();
    return std::unique_ptr<SnapshotStore>(RedisSnapshotStore::Create(*std::move(address)));
  }
  return BadSpec(spec);
}

absl::Status ValidateSnapshotId(const std::string& id) {
  bool ok = !id.empty() && id.size() <= kMaxIdLength;
  for (char c : id) {
    ok = ok && (absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-');
  }
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("invalid session id \"", absl::CHexEscape(id.substr(0, kMaxIdLength)),
                   "\": expected 1..128 characters of [0-9a-zA-Z_-]"));
}

absl::StatusOr<int64_t> SnapshotStore::PutPages(const std::vector<PageWrite>&, absl::Duration) {
  return NoPages(name());
}

absl::StatusOr<std::vector<std::optional<std::string>>> SnapshotStore::GetPages(
    const std::vector<std::string>&) {
  return NoPages(name());
}

absl::StatusOr<std::vector<bool>> SnapshotStore::ExtendPages(const std::vector<std::string>&,
                                                             absl::Duration) {
  return NoPages(name());
}

absl::Status ValidatePageIds(const std::vector<std::string>& ids) {
  for (const std::string& id : ids) {
    if (KindOf(id) != RecordKind::kPage) {
      return absl::InvalidArgumentError(absl::StrCat(
          "invalid page id \"", absl::CHexEscape(id.substr(0, kMaxIdLength)),
          "\": expected \"page_\" and 64 lowercase hex digits"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidatePageIds(const std::vector<SnapshotStore::PageWrite>& pages) {
  std::vector<std::string> ids;
  ids.reserve(pages.size());
  for (const SnapshotStore::PageWrite& page : pages) ids.push_back(page.id);
  return ValidatePageIds(ids);
}

absl::Status ValidateSnapshotTtl(absl::Duration ttl) {
  if (ttl > absl::ZeroDuration()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("snapshot ttl must be positive, got ", absl::FormatDuration(ttl)));
}

absl::Status ValidateGeneration(int64_t generation) {
  if (generation >= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("generation must not be negative, got ", generation));
}

absl::Duration RoundTtl(absl::Duration ttl) {
  return absl::Ceil(ttl, absl::Milliseconds(1));
}

absl::Status StoreUnavailable(const std::string& store_name, absl::string_view what) {
  return absl::UnavailableError(absl::StrCat("session store ", store_name, ": ", what));
}

std::string NewLeaseToken() { return RandomId128(); }

absl::Status LeaseHeldError(const std::string& id) {
  return absl::AbortedError(absl::StrCat("session ", id, " is leased by another writer"));
}

absl::Status LeaseLostError(const std::string& id) {
  return absl::AbortedError(absl::StrCat("session ", id, ": lease lost"));
}

absl::Status StaleGenerationError(const std::string& id, int64_t generation,
                                  int64_t stored) {
  return absl::AbortedError(absl::StrCat("session ", id, ": stale generation ", generation,
                                         ", the store has ", stored));
}

}  // namespace attnserve::store
