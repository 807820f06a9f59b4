// A session the HTTP front made for one request (a stored response's turn, a chat turn
// kept for the prefix cache): closed once, by whichever path ends the request first,
// or when the last holder lets go.
#pragma once

#include <atomic>
#include <string>

#include "server/session/session_store.h"

namespace attnserve::http {

class OwnSession {
 public:
  OwnSession(session::SessionStore* store, std::string tenant, std::string id)
      : store_(store), tenant_(std::move(tenant)), id_(std::move(id)) {}
  ~OwnSession() { Close(); }
  OwnSession(const OwnSession&) = delete;
  OwnSession& operator=(const OwnSession&) = delete;

  const std::string& id() const { return id_; }
  const std::string& tenant() const { return tenant_; }
  // The session's snapshot now (call between turns).
  absl::StatusOr<std::shared_ptr<const std::string>> Export() {
    return store_->Export(tenant_, id_);
  }
  // Closes it; later calls do nothing. May wait on the durable store.
  void Close() {
    if (closed_.exchange(true)) return;
    // Freed from memory whatever the store says (a failed delete is retried by the
    // store's housekeeping); NOT_FOUND: it expired, or a drain took it.
    (void)store_->Discard(tenant_, id_);
  }

 private:
  session::SessionStore* const store_;
  const std::string tenant_;
  const std::string id_;
  std::atomic<bool> closed_{false};
};

}  // namespace attnserve::http
