// SessionStore::Discard and the retry of the deletes it could not finish.
#include <string>
#include <vector>

#include "server/session/session_store.h"

namespace attnserve::session {

absl::Status SessionStore::Discard(std::string_view tenant, const std::string& id) {
  absl::Status closed = Close(tenant, id);
  if (closed.ok() || absl::IsNotFound(closed)) return closed;
  // The stored copy could not be deleted (a store blip): the session leaves memory
  // anyway, so a short outage cannot hold a tenant's limits for a whole TTL, and the
  // delete is retried until the copy would have expired by itself.
  std::string token;
  {
    absl::MutexLock lock(&mu_);
    auto it = sessions_.find(id);
    if (it == sessions_.end() || it->second->owner() != tenant) return closed;
    std::shared_ptr<Session> s = it->second;
    s->closing_.store(true);  // a save in progress writes nothing more
    if (!s->busy_) std::swap(token, s->store_token_);
    pending_deletes_[id] = options_.clock->Now() + s->ttl_;
    spilled_.erase(id);
    RemoveLocked(s, /*closed=*/true);
  }
  if (!token.empty()) leases_->Release(id, token);
  return closed;
}

void SessionStore::RetryDeletes() {
  const absl::Time now = options_.clock->Now();
  std::vector<std::string> ids;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = pending_deletes_.begin(); it != pending_deletes_.end();) {
      if (it->second <= now) {
        it = pending_deletes_.erase(it);  // the stored copy has expired by itself
      } else {
        ids.push_back(it->first);
        ++it;
      }
    }
  }
  for (const std::string& id : ids) {
    if (!DeleteStored(id).ok()) continue;  // still down: next time
    absl::MutexLock lock(&mu_);
    pending_deletes_.erase(id);
  }
}

}  // namespace attnserve::session
