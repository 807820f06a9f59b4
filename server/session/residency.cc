#include "server/session/residency.h"

#include "absl/strings/str_cat.h"

namespace attnserve::session {

absl::Status Residency::CheckAdmit(std::string_view owner, int64_t bytes,
                                   std::string_view model, Refusal* refusal) const {
  *refusal = Refusal::kNone;
  const std::string tenant(owner), model_name(model);  // absl::StrCat takes absl::string_view
  if (auto it = limits_.tenants.find(owner); it != limits_.tenants.end()) {
    const TenantLimits& l = it->second;
    const Usage used = usage(owner);
    if (l.max_sessions > 0 && used.sessions + 1 > l.max_sessions) {
      *refusal = Refusal::kTenant;
      return absl::ResourceExhaustedError(absl::StrCat(
          "max_sessions: tenant '", tenant, "' already holds ", used.sessions,
          " sessions on this server, its limit; close idle sessions or wait for their TTL"));
    }
    if (l.max_state_bytes > 0 && used.bytes + bytes > l.max_state_bytes) {
      *refusal = Refusal::kTenant;
      return absl::ResourceExhaustedError(absl::StrCat(
          "max_state_bytes: tenant '", tenant, "' would hold ", used.bytes + bytes,
          " bytes of session state on this server; its limit is ", l.max_state_bytes));
    }
  }
  if (total_.sessions >= limits_.max_sessions) {
    *refusal = Refusal::kServer;
    return absl::ResourceExhaustedError(absl::StrCat(
        "max_sessions: the server already holds ", total_.sessions,
        " sessions (its limit); close idle sessions or wait for their TTL"));
  }
  if (total_.bytes + bytes > limits_.budget_bytes) {
    *refusal = Refusal::kServer;
    return absl::ResourceExhaustedError(
        absl::StrCat("memory budget: a '", model_name, "' session needs ", bytes, " bytes of state; ",
                     total_.bytes, " of the server's ", limits_.budget_bytes,
                     " bytes are in use"));
  }
  return absl::OkStatus();
}

absl::Status Residency::Admit(const std::string& id, std::string_view owner, int64_t bytes,
                              std::string_view model, Refusal* refusal) {
  Refusal ignored;
  if (refusal == nullptr) refusal = &ignored;
  *refusal = Refusal::kNone;
  if (resident(id)) return absl::OkStatus();
  if (absl::Status s = CheckAdmit(owner, bytes, model, refusal); !s.ok()) return s;
  entries_.emplace(id, Entry{std::string(owner), bytes});
  Add(std::string(owner), 1, bytes);
  return absl::OkStatus();
}

absl::Status Residency::Resize(const std::string& id, int64_t bytes) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return absl::OkStatus();
  Entry& e = it->second;
  const int64_t delta = bytes - e.bytes;
  if (delta > 0) {
    if (total_.bytes + delta > limits_.budget_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "memory budget: session '", id, "' would grow to ", bytes,
          " bytes of state; the server's budget of ", limits_.budget_bytes,
          " bytes would be exceeded by ", total_.bytes + delta - limits_.budget_bytes));
    }
    if (auto l = limits_.tenants.find(e.owner);
        l != limits_.tenants.end() && l->second.max_state_bytes > 0 &&
        usage(e.owner).bytes + delta > l->second.max_state_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "max_state_bytes: tenant '", e.owner, "' would hold ", usage(e.owner).bytes + delta,
          " bytes of session state on this server; its limit is ",
          l->second.max_state_bytes));
    }
  }
  e.bytes = bytes;
  Add(e.owner, 0, delta);
  return absl::OkStatus();
}

bool Residency::Release(const std::string& id) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return false;
  Add(it->second.owner, -1, -it->second.bytes);
  entries_.erase(it);
  return true;
}

int64_t Residency::charged(const std::string& id) const {
  auto it = entries_.find(id);
  return it == entries_.end() ? 0 : it->second.bytes;
}

Residency::Usage Residency::usage(std::string_view tenant) const {
  auto it = by_tenant_.find(tenant);
  return it == by_tenant_.end() ? Usage{} : it->second;
}

void Residency::Add(const std::string& owner, int sessions, int64_t bytes) {
  total_.sessions += sessions;
  total_.bytes += bytes;
  Usage& u = by_tenant_[owner];
  u.sessions += sessions;
  u.bytes += bytes;
  if (u.sessions == 0 && u.bytes == 0) by_tenant_.erase(owner);
}

}  // namespace attnserve::session
