// A session, one conversation's state on one model, and the turn claim: the in-process
// right to run one turn (or an export, fork, spill or save) on it. Sessions are made and
// owned by SessionStore (server/session/session_store.h).
//
// Thread-safety: a Session's state, pending token and replication bookkeeping belong to
// whoever holds its TurnClaim: the scheduler's engine thread for a turn, or the store
// while it exports, forks, spills or saves the session. id, owner and model are fixed at
// construction; position and closed() may be read from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/catalogue/served_model.h"
#include "server/model/model.h"
#include "server/snapshot/snapshot.h"

namespace attnserve::session {

class Session {
 public:
  Session(std::string id, std::string owner, std::shared_ptr<const catalogue::ServedModel> model,
          absl::Time now, absl::Duration ttl);

  const std::string& id() const { return id_; }
  // The tenant the session belongs to.
  const std::string& owner() const { return owner_; }
  const catalogue::ServedModel& served() const { return *model_; }
  const model::Model& model() const { return *model_->model; }
  // A one-turn session (Generate without a session id): closed when its turn ends,
  // never written to a durable store.
  bool one_turn() const { return one_turn_; }

  // --- Claim holder only (see the file comment). ---
  // Makes the recurrent state's tensors: restored from the snapshot the session was
  // loaded from, or fresh. RESOURCE_EXHAUSTED when they cannot be allocated (the session
  // is unchanged; a later turn may try again). Idempotent. The scheduler calls it before
  // a turn touches state().
  absl::Status Materialize();
  // The recurrent state. Materializes it first if needed, and crashes if that fails:
  // callers that can fail call Materialize() first.
  model::DecodeState& state();
  // The last token sampled in the previous turn, not yet appended to the state: the
  // next turn prefills it before its prompt, so the session text is exactly what the
  // client has seen.
  std::optional<int32_t>& pending_token() { return pending_token_; }
  // Publishes position for Get/List (any thread reads them).
  void PublishProgress();
  // The session as snapshot bytes (proto/attnserve/v1/SNAPSHOT.md); RESOURCE_EXHAUSTED as
  // Materialize when the state must be made first.
  absl::StatusOr<std::shared_ptr<const std::string>> Snapshot();

  // Tokens in the state (plus the pending one) as last published.
  int64_t position() const { return position_.load(); }
  // True once Close() or expiry removed the session; a running turn stops at its next
  // step, and the session is never written again.
  bool closed() const { return closed_.load(); }

 private:
  friend class SessionStore;

  const std::string id_;
  const std::string owner_;
  const std::shared_ptr<const catalogue::ServedModel> model_;
  std::unique_ptr<model::DecodeState> state_;
  // Set when the session came from a snapshot and its state is not materialised yet.
  std::shared_ptr<const snapshot::VerifiedSnapshot> restore_;
  std::optional<int32_t> pending_token_;
  std::atomic<int64_t> position_{0};
  std::atomic<bool> closed_{false};
  // Set by Close while it deletes the stored copy: a save in progress then writes
  // nothing more, and deletes what it wrote meanwhile (so a close never races a save
  // into resurrecting the session).
  std::atomic<bool> closing_{false};
  bool one_turn_ = false;
  // Kept in this process's memory only (SessionStore::Durability::kLocal): never
  // written to, spilled to or loaded from a durable store.
  bool local_ = false;
  // Neither written nor spilled: a one-turn or a local session.
  bool memory_only() const { return one_turn_ || local_; }
  // Replication bookkeeping, claim holder only (server/session/session_store_durable.cc):
  // the generation of the stored copy this state matches, the store lease this process
  // holds on the session (empty: none), and whether the state is newer than the stored
  // copy (then the store lease is kept, so no other server runs a turn from the older
  // copy).
  int64_t generation_ = 0;
  std::string store_token_;
  bool dirty_ = false;
  // Fenced writes whose outcome is unknown (no reply, a timeout, a resent script): the
  // generation each would have made and its bytes, latest last (a few at most). If the
  // store later holds one of them exactly, that write was ours.
  std::vector<std::pair<int64_t, std::shared_ptr<const std::string>>> uncertain_;
  // Guarded by the store's mutex.
  absl::Time created_;
  absl::Time last_used_;
  absl::Duration ttl_;
  bool busy_ = false;
};

class SessionStore;

// The right to run one turn (or an export, fork, spill or save) on a session, in this
// process: obtained from SessionStore::BeginTurn or BeginOneTurn, released exactly once,
// by Release() or the destructor. Not the store lease (server/store/lease_keeper.h), which
// is the right across servers sharing a durable store. Movable, not copyable.
class TurnClaim {
 public:
  TurnClaim() = default;
  TurnClaim(TurnClaim&& other) noexcept { *this = std::move(other); }
  TurnClaim& operator=(TurnClaim&& other) noexcept;
  ~TurnClaim() { Release(); }

  explicit operator bool() const { return session_ != nullptr; }
  Session& session() const { return *session_; }
  Session* operator->() const { return session_.get(); }
  const std::shared_ptr<Session>& shared() const { return session_; }

  // Ends the claim now: publishes progress and frees the session for its next turn; a
  // one-turn session is closed. Gives the store lease up when the stored copy is
  // current (a store round trip): the engine thread ends turns through
  // SessionStore::FinishTurn instead, which never waits on the store. Idempotent.
  void Release();

 private:
  friend class SessionStore;
  TurnClaim(SessionStore* store, std::shared_ptr<Session> session)
      : store_(store), session_(std::move(session)) {}

  SessionStore* store_ = nullptr;
  std::shared_ptr<Session> session_;
};

}  // namespace attnserve::session
