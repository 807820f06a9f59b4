// Sessions and the store that owns them: 128-bit random ids, TTL expiry, a memory
// budget for all session state, and at most one turn in flight per session.
//
// Thread-safety: every SessionStore method may be called from any thread. A Session's
// state, pending token and sampler belong to whoever holds its turn (BeginTurn ..
// EndTurn): the scheduler's engine thread in the server.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/session/clock.h"
#include "server/session/served_model.h"

namespace attnserve::session {

// A snapshot for Get/List.
struct SessionInfo {
  std::string id;
  std::string model;
  std::string attention;
  int attention_order = 0;
  int64_t position = 0;
  int64_t state_bytes = 0;
  absl::Time created;
  absl::Time last_used;
  absl::Duration ttl;
  bool busy = false;
};

class Session {
 public:
  Session(std::string id, std::shared_ptr<const ServedModel> model, absl::Time now,
          absl::Duration ttl);

  const std::string& id() const { return id_; }
  const ServedModel& served() const { return *model_; }
  const model::Model& model() const { return *model_->model; }

  // --- Turn holder only (see the file comment). ---
  // The recurrent state, created on first use (so handlers never allocate tensors).
  model::DecodeState& state();
  // The last token sampled in the previous turn, not yet appended to the state: the
  // next turn prefills it before its prompt, so the session text is exactly what the
  // client has seen.
  std::optional<int32_t>& pending_token() { return pending_token_; }
  // Publishes position and nominal state bytes for Get/List (any thread reads them).
  void PublishProgress();

  // Tokens in the state (plus the pending one) as last published.
  int64_t position() const { return position_.load(); }
  // True once Close() or expiry removed the session; a running turn stops at its next
  // step.
  bool closed() const { return closed_.load(); }

 private:
  friend class SessionStore;

  const std::string id_;
  const std::shared_ptr<const ServedModel> model_;
  std::unique_ptr<model::DecodeState> state_;
  std::optional<int32_t> pending_token_;
  std::atomic<int64_t> position_{0};
  std::atomic<bool> closed_{false};
  // Guarded by the store's mutex.
  absl::Time created_;
  absl::Time last_used_;
  absl::Duration ttl_;
  bool busy_ = false;
  int64_t charged_bytes_ = 0;
};

class SessionStore {
 public:
  struct Options {
    // Most sessions open at once; more is RESOURCE_EXHAUSTED.
    int max_sessions = 256;
    // Bytes of session state across all sessions (fixed states at creation, KV caches
    // as they grow).
    int64_t memory_budget_bytes = int64_t{2} << 30;
    // TTL when a request leaves it at zero, and the most a request may ask for.
    absl::Duration default_ttl = absl::Minutes(30);
    absl::Duration max_ttl = absl::Hours(24);
    // Not owned; must outlive the store.
    const Clock* clock = RealClock::Get();
  };

  explicit SessionStore(Options options);

  // A new idle session with a fresh 128-bit random id. A fixed-state module is charged
  // its whole state now. ttl <= 0 means the default; over max_ttl is INVALID_ARGUMENT.
  absl::StatusOr<std::shared_ptr<Session>> Create(std::shared_ptr<const ServedModel> model,
                                                  absl::Duration ttl);

  // Claims the session for one turn: NOT_FOUND if unknown (or expired or closed),
  // FAILED_PRECONDITION if a turn is already in flight.
  absl::StatusOr<std::shared_ptr<Session>> BeginTurn(const std::string& id);

  // Charges the session at `bytes` of state (its nominal size after growing), or
  // RESOURCE_EXHAUSTED naming the budget, leaving the charge unchanged.
  absl::Status Charge(Session& session, int64_t bytes);

  // Releases the turn and refreshes last-used time.
  void EndTurn(Session& session);

  // Removes the session and frees its charge; NOT_FOUND if unknown. A turn in flight
  // sees closed() and stops at its next step.
  absl::Status Close(const std::string& id);

  absl::StatusOr<SessionInfo> Get(const std::string& id) const;
  std::vector<SessionInfo> List() const;

  // Closes every idle session whose TTL has passed; returns how many.
  int ExpireIdle();

  int size() const;
  int64_t charged_bytes() const;

 private:
  SessionInfo Info(const Session& s) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void RemoveLocked(Session& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  mutable absl::Mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<Session>> sessions_ ABSL_GUARDED_BY(mu_);
  int64_t charged_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace attnserve::session
