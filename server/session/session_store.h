// The session registry: the sessions in this process's memory by 128-bit random id, TTL
// expiry, residency (server/session/residency.h: the memory budget and each tenant's
// limits), at most one turn in flight per session (TurnClaim), and, with a durable
// backend from server/store/, snapshots written after turns, on idle spill and at drain,
// and loaded back on demand (session_store_durable.cc).
//
// Every session belongs to the tenant that created (or imported, or forked) it; every
// method that names a session takes the caller's tenant and answers NOT_FOUND, exactly
// as for an id that never existed, when the session is another tenant's. The tenant is
// kept in the session's snapshot, so it survives the durable store.
//
// Thread-safety: every SessionStore method may be called from any thread. Methods that
// may wait (on the durable store, on a store lease, or up to 0.5 s for a session's
// previous turn to end) say so; gRPC callback threads and the engine thread call only
// those that do not (FinishTurn, Charge, List).
#pragma once

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

#include "server/config/defaults.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/catalogue/model_catalogue.h"
#include "server/common/clock.h"
#include "server/common/tenant.h"
#include "server/metrics/metrics.h"
#include "server/session/residency.h"
#include "server/session/session.h"
#include "server/store/lease_keeper.h"
#include "server/store/snapshot_store.h"
#include "server/store/state_pages.h"

namespace attnserve::session {

// What Get/List report about a session.
struct SessionInfo {
  std::string id;
  std::string owner;  // the tenant
  // The model or variant the session runs on (never null; catalogue-owned).
  const catalogue::ServedModel* served = nullptr;
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
    int max_sessions = config::defaults::kMaxSessions;
    // Bytes of session state across all sessions in memory (fixed states at creation,
    // KV caches as they grow).
    int64_t memory_budget_bytes = config::defaults::kMemoryBudgetBytes;
    // TTL when a request leaves it at zero, and the most a request may ask for.
    absl::Duration default_ttl = config::defaults::kDefaultTtl;
    absl::Duration max_ttl = config::defaults::kMaxTtl;
    // Not owned; must outlive the store.
    const Clock* clock = RealClock::Get();
    // The models snapshots may belong to. Not owned; required for import and loading.
    const catalogue::ModelCatalogue* catalogue = nullptr;
    // Where snapshots go; null keeps sessions in memory only (they die with the process).
    std::unique_ptr<store::SnapshotStore> durable;
    // The size a stored session's KV pages aim at (store/state_pages.h; tests use less).
    int64_t page_target_bytes = store::kPageTargetBytes;
    PersistMode persist = PersistMode::kNone;
    // Idle time after which a session leaves memory for the durable store (SpillIdle);
    // infinite: never. Needs a durable store.
    absl::Duration spill_after = absl::InfiniteDuration();
    // Store leases (one writer per session across servers sharing the store).
    store::LeaseKeeper::Options leases;
    // Not owned; may be null.
    metrics::Metrics* metrics = nullptr;
    // Limits of each tenant, by name; a tenant not listed has only the server's.
    TenantLimitMap tenant_limits;
  };

  // Where a session lives. kShared: in the durable store too (when there is one), written
  // at once and after turns as Options::persist says, so any server sharing the store can
  // find, continue or take it over. kLocal: in this process's memory only, never written,
  // spilled or loaded: the per-request sessions of the HTTP fronts (a Responses turn, a
  // chat completion), whose state is kept, if at all, as a stored response or kept chat
  // (CheckpointStore), not as a session. Writing those would store the whole state once
  // more before every such turn's first token.
  enum class Durability { kShared, kLocal };

  // INVALID_ARGUMENT when persist or spill_after is set without a durable store.
  static absl::StatusOr<std::unique_ptr<SessionStore>> Create(Options options);
  explicit SessionStore(Options options);  // options already checked
  ~SessionStore();                         // waits for queued writes

  // A new idle session of `tenant` with a fresh 128-bit random id. A fixed-state module
  // is charged its whole state now. ttl <= 0 means the default; over max_ttl is
  // INVALID_ARGUMENT. Admission comes first: over a limit is RESOURCE_EXHAUSTED naming
  // it (with a durable store, idle sessions are spilled first: the tenant's own when its
  // limits are in the way), and UNAVAILABLE while draining; nothing is written then.
  // With a durable store the admitted session is written at once, so any server sharing
  // the store can find it. May wait on the store.
  absl::StatusOr<std::shared_ptr<Session>> Create(std::string_view tenant,
                                                  std::shared_ptr<const catalogue::ServedModel> model,
                                                  absl::Duration ttl,
                                                  Durability durability = Durability::kShared);

  // A one-turn session of `tenant` (Generate without a session id), created and claimed
  // at once: admitted like any other, never written to the store, and closed when the
  // claim is released. May wait on the store (spilling to make room).
  absl::StatusOr<TurnClaim> BeginOneTurn(std::string_view tenant,
                                         std::shared_ptr<const catalogue::ServedModel> model);

  // Claims session `id` of `tenant` for one turn, loading it from the durable store if it
  // is not in memory: NOT_FOUND if unknown (or expired or closed, or another tenant's),
  // FAILED_PRECONDITION if a turn is already in flight here (after waiting up to 0.5 s for
  // it to end), UNAVAILABLE naming the store if it cannot be read, while draining, or
  // while another server sharing the store runs a turn on it (after a short wait). With a
  // durable store the claim holds the session's store lease, and a copy in memory older
  // than the stored one is replaced by it first. May wait.
  absl::StatusOr<TurnClaim> BeginTurn(std::string_view tenant, const std::string& id);

  // Charges the session at `bytes` of state (its nominal size after growing), or
  // RESOURCE_EXHAUSTED naming the budget (the server's, or its tenant's
  // max_state_bytes), leaving the charge unchanged. Never waits.
  absl::Status Charge(Session& session, int64_t bytes);

  // Ends the turn `claim` holds. Never waits on the store: the engine thread calls it.
  // With a durable store, under PersistMode::kEachTurn or while draining (StopAccepting),
  // the session's snapshot is encoded here (the caller holds the claim) and written on
  // the store's writer thread; then the claim is released and `then` runs (on the writer
  // thread, or here when nothing is written), so a client told the turn is over finds it
  // saved. `then` receives ABORTED when the turn's state was lost because another server
  // took the session over meanwhile (its newer copy is now the session's); other save
  // failures (the store unreachable, its lease held elsewhere) leave the session working
  // in memory and pass OK. `broken`: the turn left the session's state in an unknown
  // condition (a failed engine step); the session is closed, never served again.
  void FinishTurn(TurnClaim claim, std::function<void(absl::Status)> then,
                  bool broken = false);

  // Removes session `id` of `tenant` (from memory and the durable store) and frees its
  // charge; NOT_FOUND if unknown. A turn in flight sees closed() and stops at its next
  // step; a save in progress writes nothing more. If the stored copy cannot be deleted,
  // UNAVAILABLE and nothing changes. May wait on the store.
  absl::Status Close(std::string_view tenant, const std::string& id);

  // Close for a session nobody else names (the HTTP front's own, OwnSession): the
  // session leaves memory and its charge is freed even when its stored copy cannot be
  // deleted now (a store blip), so an outage cannot hold a tenant's limits for a TTL;
  // that delete is then retried by ExpireIdle until it succeeds or the copy has expired
  // by itself, and the id never loads again meanwhile. Returns Close's status. May wait
  // on the store.
  absl::Status Discard(std::string_view tenant, const std::string& id);

  // Loads the session if it is not in memory (errors as BeginTurn). With a durable
  // store, a copy in memory that another server has since written past is replaced by
  // the stored one first (one generation read). May wait on the store.
  absl::StatusOr<SessionInfo> Get(std::string_view tenant, const std::string& id);
  // `tenant`'s sessions in this process's memory (spilled ones are not listed). Never
  // waits.
  std::vector<SessionInfo> List(std::string_view tenant) const;
  // Every tenant's (for metrics). Never waits.
  std::vector<SessionInfo> ListAll() const;

  // The session's snapshot (loads it if needed; FAILED_PRECONDITION while a turn runs).
  // May wait.
  absl::StatusOr<std::shared_ptr<const std::string>> Export(std::string_view tenant,
                                                            const std::string& id);
  // Verifies `bytes` completely (SNAPSHOT.md), then creates a session from it, charged
  // like any other and belonging to `tenant` (whoever the snapshot names). ttl <= 0: the
  // snapshot's TTL (or the default). Nothing is charged, created or written when
  // verification or admission fails. May wait on the store.
  absl::StatusOr<std::shared_ptr<Session>> Import(std::string_view tenant,
                                                  snapshot::SnapshotBytes bytes,
                                                  absl::Duration ttl,
                                                  Durability durability = Durability::kShared);
  // A new session of `tenant` holding a copy of `id`'s state and pending token; the
  // original is untouched. ttl <= 0: the original's. May wait.
  absl::StatusOr<std::shared_ptr<Session>> Fork(std::string_view tenant, const std::string& id,
                                                absl::Duration ttl);

  // Closes every idle session whose TTL has passed, and retries the deletes Discard
  // could not finish; returns how many sessions left memory. Their
  // stored copies expire by themselves (a copy's TTL runs from its last write, never
  // later than the session's last use), so a session another server still uses is not
  // deleted from under it. May wait on the store.
  int ExpireIdle();
  // Writes every session idle for spill_after to the durable store and frees its memory;
  // returns how many left. No-op without a durable store. May wait on the store.
  int SpillIdle();

  // Draining: Create, Import, Fork and BeginTurn answer UNAVAILABLE from now on.
  void StopAccepting();
  // Writes every session in memory to the durable store (drain); waits for sessions
  // still claimed up to `timeout`. Returns how many were written, or the first error.
  absl::StatusOr<int> SaveAll(absl::Duration timeout);

  // Largest snapshot an import may declare: the biggest state any served model can
  // hold, plus headers.
  uint64_t max_snapshot_bytes() const { return max_snapshot_bytes_; }
  bool durable() const { return options_.durable != nullptr; }
  // "memory", or the durable store's name.
  std::string store_name() const;

  int size() const;
  int64_t charged_bytes() const;
  // Sessions and bytes `tenant` holds in memory.
  Residency::Usage usage(std::string_view tenant) const;

 private:
  friend class TurnClaim;

  // TurnClaim::Release: frees the session (closing a one-turn session).
  void EndTurn(const std::shared_ptr<Session>& session);
  // Durable store, claim holder only (session_store_durable.cc):
  // takes the store lease if not held (waiting up to the lease wait if `wait`) and
  // replaces a stale copy with the stored one (ABORTED if that discarded state this
  // server had not saved: another server took the session over);
  absl::Status Sync(Session& session, bool wait);
  // writes the session if it is newer than its stored copy, then gives the lease up;
  // a closing or closed session is never written (what a racing write put there is
  // deleted);
  absl::Status Save(Session& session, bool wait);
  // gives the store lease up if the stored copy is current (or the session is closed).
  void ReleaseIfClean(Session& session);
  // A session `id` of `owner` holding `verified`'s state (materialised at its first turn).
  std::shared_ptr<Session> FromSnapshot(std::string id, std::string owner,
                                        snapshot::VerifiedSnapshot verified,
                                        absl::Duration ttl) const;
  // Drops `s` from memory if it is still the idle, clean copy of `generation`.
  void EvictIfStale(const std::shared_ptr<Session>& s, int64_t generation);
  // Writes a new session (created or imported here) as generation 1 of its id.
  absl::Status Publish(Session& session);
  // Replaces the session's state with `snapshot` (of generation `generation`).
  absl::Status Adopt(Session& session, snapshot::VerifiedSnapshot snapshot, int64_t generation);
  SessionInfo Info(const Session& s) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Claims an in-memory session or loads it; see BeginTurn.
  absl::StatusOr<TurnClaim> Claim(std::string_view tenant, const std::string& id);
  // Loads a stored session of `tenant` (NOT_FOUND if the store holds another tenant's).
  absl::StatusOr<std::shared_ptr<Session>> Load(std::string_view tenant, const std::string& id);
  // Whether the stored copy of `id` is `tenant`'s, read from its header (or its stub's
  // writer tag) without reading its pages; NOT_FOUND if none is stored.
  absl::StatusOr<bool> StoredIsTenants(std::string_view tenant, const std::string& id);
  // A session's record as the store keeps it (server/DESIGN.md §13): its snapshot cut into
  // a stub and the KV pages it names. Every page is made to outlive the record first (the
  // ones this tenant stored already only have their expiry extended; only new pages are
  // written), so a session saved again after a turn writes the pages that turn completed
  // and its stub. A snapshot with no full page, or a store that keeps no pages, is stored
  // whole. `written` gets the bytes sent to the store.
  absl::StatusOr<std::string> EncodeStored(std::string_view tenant, const std::string& bytes,
                                           absl::Duration ttl, int64_t* written);
  // The stored snapshot of `id` and its generation, a paged record joined again with its
  // pages, each page's key derived anew from `tenant` (a stub of another tenant, or one
  // missing a page, reads as absent: NOT_FOUND). `read` gets the bytes read.
  absl::StatusOr<std::pair<std::string, int64_t>> ReadStored(std::string_view tenant,
                                                             const std::string& id,
                                                             int64_t* read);
  // Puts `session` in memory charged `bytes`: checks draining, its tenant's limits, the
  // session count and the budget (spilling idle sessions to make room when there is a
  // durable store). If a session of the same id is in memory already (a concurrent
  // load), nothing is charged and that one is returned.
  absl::StatusOr<std::shared_ptr<Session>> Admit(std::shared_ptr<Session> session, int64_t bytes);
  // Admits a session new to every server (a fresh id: created or imported here), then,
  // with a durable store and unless it is local, writes it as generation 1; a failed
  // write takes it out again.
  absl::StatusOr<std::shared_ptr<Session>> AdmitNew(std::shared_ptr<Session> session,
                                                    int64_t bytes);
  // Takes `s` out of memory and frees its charge, if it is still the registered copy of
  // its id (idempotent). `closed`: the session ends (a turn on it stops); otherwise it
  // lives on in the store (spilled, or evicted as stale).
  void RemoveLocked(const std::shared_ptr<Session>& s, bool closed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Spills the least recently used idle session (of `owner` only, if given); false if
  // there is none to spill.
  bool SpillOne(std::optional<std::string_view> owner = std::nullopt);
  // Writes `bytes`, a snapshot of `session`, unfenced (Publish), as EncodeStored stores it.
  absl::Status Write(Session& session, const std::string& bytes);
  absl::Status DeleteStored(const std::string& id);
  // Retries the deletes of Discard's pending_deletes_ (session_store_discard.cc).
  void RetryDeletes();
  // Runs `work` on the writer thread, after the work queued before it.
  void Enqueue(std::function<void()> work);
  void WriterLoop();

  const Options options_;
  uint64_t max_snapshot_bytes_ = 0;
  metrics::StoreMetrics* store_metrics_ = nullptr;
  std::unique_ptr<store::LeaseKeeper> leases_;  // with a durable store
  mutable absl::Mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<Session>> sessions_ ABSL_GUARDED_BY(mu_);
  // Exactly the sessions in sessions_, with their charges.
  Residency residency_ ABSL_GUARDED_BY(mu_);
  bool accepting_ ABSL_GUARDED_BY(mu_) = true;
  // Sessions this process spilled and has not loaded back (a load of any other stored
  // session is a migration in).
  std::set<std::string> spilled_ ABSL_GUARDED_BY(mu_);
  // Stored copies Discard could not delete, with the time each expires by itself.
  std::map<std::string, absl::Time> pending_deletes_ ABSL_GUARDED_BY(mu_);

  // The writer thread: saves after turns (PersistMode::kEachTurn, drain) and store-lease
  // releases the engine must not wait for, in submission order. std::mutex, not
  // absl::Mutex: it waits on a condition variable with a timeout in SaveAll.
  std::mutex writer_mu_;
  std::condition_variable writer_cv_;
  std::deque<std::function<void()>> writes_;  // guarded by writer_mu_
  bool writer_stop_ = false;                  // guarded by writer_mu_
  int writes_in_flight_ = 0;                  // guarded by writer_mu_
  std::thread writer_;
};

}  // namespace attnserve::session
