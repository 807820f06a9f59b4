// Sessions and the store that owns them: 128-bit random ids, TTL expiry, a memory
// budget for all session state, at most one turn in flight per session, and (with a
// durable backend from server/store/) snapshots written after turns, on idle spill and
// at drain, and loaded back on demand.
//
// Every session belongs to the tenant that created (or imported, or forked) it; the
// methods that name a session take the caller's tenant and answer NOT_FOUND, exactly as
// for an id that never existed, when the session is another tenant's. The tenant is
// kept in the session's snapshot, so it survives the durable store.
//
// Thread-safety: every SessionStore method may be called from any thread. A Session's
// state and pending token belong to whoever holds its TurnLease: the scheduler's engine
// thread for a turn, or the store itself while it exports, forks or spills the session.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/metrics/metrics.h"
#include "server/session/clock.h"
#include "server/session/lease_keeper.h"
#include "server/session/model_catalogue.h"
#include "server/session/served_model.h"
#include "server/session/snapshot.h"
#include "server/store/snapshot_store.h"

namespace attnserve::session {

// A tenant's share of this server's memory, on top of the server-wide limits. Zero
// means no limit of the tenant's own.
struct TenantLimits {
  // Most sessions of the tenant in memory at once.
  int max_sessions = 0;
  // Most bytes of session state of the tenant in memory at once.
  int64_t max_state_bytes = 0;
};

// What Get/List report about a session.
struct SessionInfo {
  std::string id;
  std::string owner;  // the tenant
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
  // The tenant the session belongs to; fixed before the store shares the session.
  const std::string& owner() const { return owner_; }
  const ServedModel& served() const { return *model_; }
  const model::Model& model() const { return *model_->model; }

  // --- Lease holder only (see the file comment). ---
  // The recurrent state: restored from the snapshot the session was loaded from, or
  // fresh, on first use (so handlers never make tensors).
  model::DecodeState& state();
  // The last token sampled in the previous turn, not yet appended to the state: the
  // next turn prefills it before its prompt, so the session text is exactly what the
  // client has seen.
  std::optional<int32_t>& pending_token() { return pending_token_; }
  // Publishes position and nominal state bytes for Get/List (any thread reads them).
  void PublishProgress();
  // The session as snapshot bytes (proto/attnserve/v1/SNAPSHOT.md).
  std::shared_ptr<const std::string> Snapshot();

  // Tokens in the state (plus the pending one) as last published.
  int64_t position() const { return position_.load(); }
  // True once Close() or expiry removed the session; a running turn stops at its next
  // step.
  bool closed() const { return closed_.load(); }

 private:
  friend class SessionStore;

  const std::string id_;
  std::string owner_ = kDefaultTenant;
  const std::shared_ptr<const ServedModel> model_;
  std::unique_ptr<model::DecodeState> state_;
  // Set when the session came from a snapshot and its state is not materialised yet.
  std::shared_ptr<const VerifiedSnapshot> restore_;
  std::optional<int32_t> pending_token_;
  std::atomic<int64_t> position_{0};
  std::atomic<bool> closed_{false};
  // A one-turn session (Generate without a session id): never written to the store.
  bool ephemeral_ = false;
  // Durable store bookkeeping, lease holder only: the generation of the stored copy this
  // state matches, the store lease this process holds on the session (empty: none), and
  // whether the state is newer than the stored copy (then the store lease is kept, so no
  // other server runs a turn from the older copy).
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
  int64_t charged_bytes_ = 0;
};

class SessionStore;

// The right to run one turn (or an export, fork or spill) on a session: obtained from
// SessionStore::BeginTurn, released exactly once, by Release() or the destructor.
// Movable, not copyable.
class TurnLease {
 public:
  TurnLease() = default;
  TurnLease(TurnLease&& other) noexcept { *this = std::move(other); }
  TurnLease& operator=(TurnLease&& other) noexcept;
  ~TurnLease() { Release(); }

  explicit operator bool() const { return session_ != nullptr; }
  Session& session() const { return *session_; }
  Session* operator->() const { return session_.get(); }
  const std::shared_ptr<Session>& shared() const { return session_; }

  // Close the session when the lease is released (a one-turn session).
  void CloseOnRelease() { close_on_release_ = true; }
  bool close_on_release() const { return close_on_release_; }

  // Ends the turn now: publishes progress, frees the session for the next turn,
  // refreshes its last-used time, and closes it if asked. Idempotent.
  void Release();

 private:
  friend class SessionStore;
  TurnLease(SessionStore* store, std::shared_ptr<Session> session)
      : store_(store), session_(std::move(session)) {}

  SessionStore* store_ = nullptr;
  std::shared_ptr<Session> session_;
  bool close_on_release_ = false;
};

// When sessions are written to the durable store besides spill and drain.
enum class PersistMode {
  kNone,      // only on idle spill, memory pressure and drain
  kEachTurn,  // also after every completed turn (a crash loses at most the turn in flight)
};

class SessionStore {
 public:
  struct Options {
    // Most sessions in memory at once; more is RESOURCE_EXHAUSTED (with a durable store,
    // idle sessions are spilled first).
    int max_sessions = 256;
    // Bytes of session state across all sessions in memory (fixed states at creation,
    // KV caches as they grow).
    int64_t memory_budget_bytes = int64_t{2} << 30;
    // TTL when a request leaves it at zero, and the most a request may ask for.
    absl::Duration default_ttl = absl::Minutes(30);
    absl::Duration max_ttl = absl::Hours(24);
    // Not owned; must outlive the store.
    const Clock* clock = RealClock::Get();
    // The models snapshots may belong to. Not owned; required for import and loading.
    const ModelCatalogue* catalogue = nullptr;
    // Where snapshots go; null keeps sessions in memory only (they die with the process).
    std::unique_ptr<store::SnapshotStore> durable;
    PersistMode persist = PersistMode::kNone;
    // Idle time after which a session leaves memory for the durable store (SpillIdle);
    // infinite: never. Needs a durable store.
    absl::Duration spill_after = absl::InfiniteDuration();
    // Store leases (one writer per session across servers sharing the store).
    LeaseKeeper::Options leases;
    // Not owned; may be null.
    metrics::Metrics* metrics = nullptr;
    // Limits of each tenant, by name; a tenant not listed has only the server's.
    std::map<std::string, TenantLimits, std::less<>> tenant_limits;
  };

  // INVALID_ARGUMENT when persist or spill_after is set without a durable store.
  static absl::StatusOr<std::unique_ptr<SessionStore>> Create(Options options);
  explicit SessionStore(Options options);  // options already checked
  ~SessionStore();                         // waits for queued writes

  // A new idle session with a fresh 128-bit random id. A fixed-state module is charged
  // its whole state now. ttl <= 0 means the default; over max_ttl is INVALID_ARGUMENT.
  // With a durable store the session is written at once, so any server sharing the
  // store can find it; an `ephemeral` session (one turn, then closed) never is. The
  // session belongs to `tenant`; over the tenant's limits is RESOURCE_EXHAUSTED naming
  // the limit (with a durable store, the tenant's own idle sessions are spilled first).
  absl::StatusOr<std::shared_ptr<Session>> Create(std::shared_ptr<const ServedModel> model,
                                                  absl::Duration ttl, bool ephemeral = false,
                                                  std::string_view tenant = kDefaultTenant);

  // Claims the session for one turn, loading it from the durable store if it is not in
  // memory: NOT_FOUND if unknown (or expired or closed), FAILED_PRECONDITION if a turn
  // is already in flight here, UNAVAILABLE naming the store if it cannot be read, while
  // draining, or while another server sharing the store runs a turn on it (after a
  // short wait). With a durable store the claim holds the session's store lease, and a
  // copy in memory older than the stored one is replaced by it first. Another tenant's
  // session is NOT_FOUND (this holds for every method below that takes a tenant).
  absl::StatusOr<TurnLease> BeginTurn(const std::string& id,
                                      std::string_view tenant = kDefaultTenant);

  // Charges the session at `bytes` of state (its nominal size after growing), or
  // RESOURCE_EXHAUSTED naming the budget (the server's, or its tenant's
  // max_state_bytes), leaving the charge unchanged.
  absl::Status Charge(Session& session, int64_t bytes);

  // Ends the turn `lease` holds. With a durable store, under PersistMode::kEachTurn or
  // while draining (StopAccepting), the session's snapshot is encoded here (the caller
  // holds the lease) and written on the store's writer thread; then the lease is
  // released and `then` runs (on the writer thread, or here when nothing is written), so
  // a client told the turn is over finds it saved. `then` receives ABORTED when the
  // turn's state was lost because another server took the session over meanwhile (its
  // newer copy is now the session's); other save failures (the store unreachable) leave
  // the session working in memory and pass OK.
  void FinishTurn(TurnLease lease, std::function<void(absl::Status)> then);

  // Removes the session (from memory and the durable store) and frees its charge;
  // NOT_FOUND if unknown. A turn in flight sees closed() and stops at its next step.
  absl::Status Close(const std::string& id, std::string_view tenant = kDefaultTenant);

  // Loads the session if it is not in memory (errors as BeginTurn). With a durable
  // store, a copy in memory that another server has since written past is replaced by
  // the stored one first (one generation read).
  absl::StatusOr<SessionInfo> Get(const std::string& id,
                                  std::string_view tenant = kDefaultTenant);
  // Sessions in this process's memory (spilled ones are not listed): every tenant's, or
  // `tenant`'s only.
  std::vector<SessionInfo> List() const;
  std::vector<SessionInfo> List(std::string_view tenant) const;

  // The session's snapshot (loads it if needed; FAILED_PRECONDITION while a turn runs).
  absl::StatusOr<std::shared_ptr<const std::string>> Export(
      const std::string& id, std::string_view tenant = kDefaultTenant);
  // Verifies `bytes` completely (SNAPSHOT.md), then creates a session from it, charged
  // like any other and belonging to `tenant` (whoever the snapshot names). ttl <= 0: the
  // snapshot's TTL (or the default). Nothing is charged or created when verification
  // fails.
  absl::StatusOr<std::shared_ptr<Session>> Import(std::shared_ptr<const std::string> bytes,
                                                  absl::Duration ttl,
                                                  std::string_view tenant = kDefaultTenant);
  // A new session of `tenant` holding a copy of `id`'s state and pending token; the
  // original is untouched. ttl <= 0: the original's.
  absl::StatusOr<std::shared_ptr<Session>> Fork(const std::string& id, absl::Duration ttl,
                                                std::string_view tenant = kDefaultTenant);

  // Closes every idle session whose TTL has passed; returns how many left memory. Their
  // stored copies expire by themselves (a copy's TTL runs from its last write, never
  // later than the session's last use), so a session another server still uses is not
  // deleted from under it.
  int ExpireIdle();
  // Writes every session idle for spill_after to the durable store and frees its memory;
  // returns how many left. No-op without a durable store.
  int SpillIdle();

  // Draining: Create, Import, Fork and BeginTurn answer UNAVAILABLE from now on.
  void StopAccepting();
  // Writes every session in memory to the durable store (drain); waits for sessions
  // still leased up to `timeout`. Returns how many were written, or the first error.
  absl::StatusOr<int> SaveAll(absl::Duration timeout);

  // Largest snapshot an import may declare: the biggest state any served model can
  // hold, plus headers.
  uint64_t max_snapshot_bytes() const { return max_snapshot_bytes_; }
  bool durable() const { return options_.durable != nullptr; }
  // "memory", or the durable store's name.
  std::string store_name() const;

  int size() const;
  int64_t charged_bytes() const;

 private:
  friend class TurnLease;

  void EndTurn(Session& session);
  // Durable store, lease holder only (session_store_durable.cc):
  // takes the store lease if not held and replaces a stale copy with the stored one
  // (ABORTED if that discarded state this server had not saved: another server took the
  // session over);
  absl::Status Sync(Session& session);
  // writes the session if it is newer than its stored copy, then gives the lease up;
  absl::Status Save(Session& session);
  // gives the store lease up if the stored copy is current.
  void ReleaseIfClean(Session& session);
  // A session `id` holding `verified`'s state (materialised at its first turn).
  std::shared_ptr<Session> FromSnapshot(std::string id, VerifiedSnapshot verified,
                                        absl::Duration ttl) const;
  // Drops `s` from memory if it is still the idle, clean copy of `generation`.
  void EvictIfStale(const std::shared_ptr<Session>& s, int64_t generation);
  // Writes a new session (created or imported here) as generation 1 of its id.
  absl::Status Publish(Session& session);
  // Replaces the session's state with `snapshot` (of generation `generation`).
  absl::Status Adopt(Session& session, VerifiedSnapshot snapshot, int64_t generation);
  SessionInfo Info(const Session& s) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void RemoveLocked(Session& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Claims an in-memory session or loads it; see BeginTurn.
  absl::StatusOr<TurnLease> Claim(const std::string& id, std::string_view tenant);
  // Loads a stored session of `tenant` (NOT_FOUND if the store holds another tenant's).
  absl::StatusOr<std::shared_ptr<Session>> Load(const std::string& id, std::string_view tenant);
  // The owner of the stored copy of `id`, read from its header; NOT_FOUND if none.
  absl::StatusOr<std::string> StoredOwner(const std::string& id);
  // Admits a new session charged `bytes`: checks draining, its tenant's limits, the
  // session count and the budget (spilling idle sessions to make room when there is a
  // durable store).
  absl::Status Admit(const std::shared_ptr<Session>& session, int64_t bytes);
  // RESOURCE_EXHAUSTED naming the tenant's limit if `session` does not fit its tenant's
  // limits with `sessions` more sessions and `bytes` more bytes.
  absl::Status CheckTenantLocked(const Session& session, int sessions, int64_t bytes) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Adds to the session's tenant's usage (negative: subtracts); keeps usage_ in step
  // with sessions_ and charged_bytes_.
  void AccountLocked(const Session& s, int sessions, int64_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes a saved session from memory and frees its charge (it lives on in the store).
  void LeaveMemoryLocked(Session& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Spills the least recently used idle session (of `owner` only, if given); false if
  // there is none to spill.
  bool SpillOne(std::optional<std::string_view> owner = std::nullopt);
  absl::Status Write(const std::string& id, const std::string& bytes, absl::Duration ttl);
  absl::Status DeleteStored(const std::string& id);
  void WriterLoop();

  const Options options_;
  uint64_t max_snapshot_bytes_ = 0;
  metrics::StoreMetrics* store_metrics_ = nullptr;
  std::unique_ptr<LeaseKeeper> leases_;  // with a durable store
  mutable absl::Mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<Session>> sessions_ ABSL_GUARDED_BY(mu_);
  int64_t charged_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // Sessions in memory and their charged bytes, per tenant.
  struct TenantUsage {
    int sessions = 0;
    int64_t bytes = 0;
  };
  std::map<std::string, TenantUsage, std::less<>> usage_ ABSL_GUARDED_BY(mu_);
  bool accepting_ ABSL_GUARDED_BY(mu_) = true;
  // Sessions this process spilled and has not loaded back (a load of any other stored
  // session is a migration in).
  std::set<std::string> spilled_ ABSL_GUARDED_BY(mu_);

  // The writer thread for PersistMode::kEachTurn: writes in submission order.
  std::mutex writer_mu_;
  std::condition_variable writer_cv_;
  std::deque<std::function<void()>> writes_;  // guarded by writer_mu_
  bool writer_stop_ = false;                  // guarded by writer_mu_
  int writes_in_flight_ = 0;                  // guarded by writer_mu_
  std::thread writer_;
};

}  // namespace attnserve::session
