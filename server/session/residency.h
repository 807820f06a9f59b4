// Residency: what the sessions in this process's memory are charged, in all and per
// tenant, against the server's limits and each tenant's. One entry per session id, so
// admitting, resizing and releasing a session are idempotent: a session is charged once
// however many paths race to load it, and released once however many paths race to drop
// it. Every path that adds a session to memory or removes it goes through here.
//
// Not thread-safe: its one owner, SessionStore, calls it under its mutex.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "absl/status/status.h"

namespace attnserve::session {

// A tenant's share of this server's memory, on top of the server-wide limits. Zero
// means no limit of the tenant's own.
struct TenantLimits {
  // Most sessions of the tenant in memory at once.
  int max_sessions = 0;
  // Most bytes of session state of the tenant in memory at once.
  int64_t max_state_bytes = 0;
};

using TenantLimitMap = std::map<std::string, TenantLimits, std::less<>>;

class Residency {
 public:
  struct Limits {
    // Most sessions in memory at once.
    int max_sessions = 0;
    // Bytes of session state across all sessions in memory.
    int64_t budget_bytes = 0;
    // Limits of each tenant, by name; a tenant not listed has only the server's.
    TenantLimitMap tenants;
  };
  // Sessions and bytes resident for one tenant (or all).
  struct Usage {
    int sessions = 0;
    int64_t bytes = 0;
  };
  // Which limit refused an admission.
  enum class Refusal { kNone, kTenant, kServer };

  explicit Residency(Limits limits) : limits_(std::move(limits)) {}

  // Whether a new session of `owner` charged `bytes` fits: OK, or RESOURCE_EXHAUSTED
  // naming the first limit in the way (the tenant's before the server's; `model` names
  // the session's model in the message) with `*refusal` saying whose it is.
  absl::Status CheckAdmit(std::string_view owner, int64_t bytes, std::string_view model,
                          Refusal* refusal) const;
  // Charges session `id` of `owner` at `bytes` if it fits (as CheckAdmit, which sets
  // `*refusal` when given). A session already resident is left as it is, and OK:
  // admission is idempotent.
  absl::Status Admit(const std::string& id, std::string_view owner, int64_t bytes,
                     std::string_view model, Refusal* refusal = nullptr);
  // Charges resident session `id` at `bytes` instead (a KV cache grew). Growing past the
  // server's budget or the tenant's max_state_bytes is RESOURCE_EXHAUSTED naming it,
  // leaving the charge as it was; shrinking always succeeds. A session not resident (it
  // was released meanwhile) is not charged again: OK.
  absl::Status Resize(const std::string& id, int64_t bytes);
  // Frees session `id`'s charge; false if it was not resident (already released).
  bool Release(const std::string& id);

  bool resident(const std::string& id) const { return entries_.count(id) != 0; }
  // Bytes session `id` is charged (0 if not resident).
  int64_t charged(const std::string& id) const;
  Usage total() const { return total_; }
  Usage usage(std::string_view tenant) const;
  const Limits& limits() const { return limits_; }

 private:
  struct Entry {
    std::string owner;
    int64_t bytes = 0;
  };
  void Add(const std::string& owner, int sessions, int64_t bytes);

  const Limits limits_;
  std::unordered_map<std::string, Entry> entries_;
  std::map<std::string, Usage, std::less<>> by_tenant_;
  Usage total_;
};

}  // namespace attnserve::session
