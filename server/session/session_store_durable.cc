// SessionStore's durable half: loading sessions from the store, the store lease that
// makes one server at a time the writer of a session (server/DESIGN.md §7), fenced writes
// after turns, spills and the drain.
//
// The invariant, for every session in memory (one-turn sessions aside) with a durable store: either
// it is clean (the store holds its state at `generation_`), or it is dirty and this
// process holds its store lease, renewed in the background, so no other server can run a
// turn on it from the older stored copy. A claim takes the lease (waiting briefly for
// another server's turn to end) and replaces the copy in memory if the store's
// generation is newer. A closing or closed session is never written: Close marks it
// closing before it deletes the stored copy, and a save that wrote meanwhile deletes
// what it wrote.
#include <cstdio>
#include <set>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/session/session_store.h"

#include "server/common/random_id.h"
#include "server/session/session_store_internal.h"

namespace attnserve::session {
using internal::ChargeFor;
using internal::NotFound;
using snapshot::SnapshotOwner;

namespace {

std::string Message(const absl::Status& s) { return std::string(s.message()); }

// How long a session's pages outlive its record (as CheckpointStore's do): a record written
// just before its pages' expiry never names a page that is gone.
constexpr absl::Duration kPageGrace = absl::Minutes(1);

}  // namespace

absl::StatusOr<std::string> SessionStore::EncodeStored(std::string_view tenant,
                                                       const std::string& bytes,
                                                       absl::Duration ttl, int64_t* written) {
  *written = int64_t(bytes.size());
  absl::StatusOr<store::SplitState> split =
      store::SplitSnapshot(tenant, bytes, options_.page_target_bytes);
  if (!split.ok() || split->pages.empty()) return bytes;  // stored whole
  std::vector<std::string> ids;
  ids.reserve(split->pages.size());
  for (const store::StatePage& page : split->pages) ids.push_back(page.id);
  // Every page outlives the record: extended (or written) before the record names it.
  absl::StatusOr<std::vector<bool>> stored =
      options_.durable->ExtendPages(ids, ttl + kPageGrace);
  if (absl::IsUnimplemented(stored.status())) return bytes;  // a store without pages
  if (!stored.ok()) return stored.status();
  std::vector<store::SnapshotStore::PageWrite> missing;
  std::set<std::string_view> queued;  // a page repeated within the state is written once
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!(*stored)[i] && queued.insert(ids[i]).second) {
      missing.push_back({ids[i], split->pages[i].bytes});
    }
  }
  int64_t page_bytes = 0;
  if (!missing.empty()) {
    absl::StatusOr<int64_t> put = options_.durable->PutPages(missing, ttl + kPageGrace);
    if (!put.ok()) return put.status();
    page_bytes = *put;
  }
  std::string record = store::EncodePagedRecord("", split->stub, "");
  *written = page_bytes + int64_t(record.size());
  return record;
}

absl::StatusOr<std::pair<std::string, int64_t>> SessionStore::ReadStored(
    std::string_view tenant, const std::string& id, int64_t* read) {
  *read = 0;
  auto got = options_.durable->GetWithGeneration(id);
  if (!got.ok()) return got.status();
  *read = int64_t(got->first.size());
  if (!store::IsPagedRecord(got->first)) return got;
  auto damaged = [&](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat("session '", id, "' in ", store_name(), ": ",
                                               s.message()));
  };
  absl::StatusOr<store::PagedRecordView> record = store::ParsePagedRecord(got->first);
  if (!record.ok()) return damaged(record.status());
  // Another tenant's session does not exist for this caller: no page is read for it.
  if (!store::StubIsTenants(record->stub, tenant)) return NotFound(id);
  absl::StatusOr<std::vector<std::string>> ids = store::StubPageIds(record->stub);
  if (!ids.ok()) return damaged(ids.status());
  auto pages = options_.durable->GetPages(*ids);
  if (!pages.ok()) return pages.status();
  std::vector<std::string_view> views;
  views.reserve(pages->size());
  for (size_t i = 0; i < pages->size(); ++i) {
    // A page gone (expired early, or a store that lost it) takes the record with it: the
    // session is absent, never corrupt.
    if (!(*pages)[i].has_value()) {
      std::fprintf(stderr, "attnserve: session %s in %s names page %s, which is gone; "
                   "the session reads as absent\n", id.c_str(), store_name().c_str(),
                   (*ids)[i].c_str());
      return NotFound(id);
    }
    *read += int64_t((*pages)[i]->size());
    views.push_back(*(*pages)[i]);
  }
  absl::StatusOr<std::string> joined = store::JoinSnapshot(record->stub, views, tenant);
  if (absl::IsNotFound(joined.status())) return NotFound(id);
  if (!joined.ok()) return damaged(joined.status());
  return std::make_pair(*std::move(joined), got->second);
}

absl::Status SessionStore::Write(Session& s, const std::string& bytes) {
  const absl::Time start = absl::Now();
  int64_t written = 0;
  absl::StatusOr<std::string> record = EncodeStored(s.owner(), bytes, s.ttl_, &written);
  absl::Status st = record.status();
  if (record.ok()) st = options_.durable->Put(s.id(), *record, s.ttl_);
  if (store_metrics_) store_metrics_->ObserveWrite(absl::Now() - start, written, st.ok());
  return st;
}

absl::Status SessionStore::DeleteStored(const std::string& id) {
  if (!options_.durable) return absl::OkStatus();
  const absl::Time start = absl::Now();
  absl::Status s = options_.durable->Delete(id);
  if (store_metrics_) store_metrics_->ObserveDelete(absl::Now() - start, s.ok());
  return s;
}

absl::Status SessionStore::Publish(Session& s) {
  // A fresh random id: nobody else can be writing it, so no lease is needed.
  auto bytes = s.Snapshot();
  if (!bytes.ok()) return bytes.status();
  if (absl::Status st = Write(s, **bytes); !st.ok()) return st;
  s.generation_ = 1;
  s.dirty_ = false;
  return absl::OkStatus();
}

absl::StatusOr<bool> SessionStore::StoredIsTenants(std::string_view tenant,
                                                   const std::string& id) {
  if (!options_.durable) return NotFound(id);
  auto got = options_.durable->GetWithGeneration(id);
  if (absl::IsNotFound(got.status())) return NotFound(id);
  if (!got.ok()) return got.status();
  if (store::IsPagedRecord(got->first)) {
    auto record = store::ParsePagedRecord(got->first);
    if (record.ok()) return store::StubIsTenants(record->stub, tenant);
    return absl::Status(record.status().code(), absl::StrCat("session '", id, "' in ",
                                                             store_name(), ": ",
                                                             record.status().message()));
  }
  auto owner = SnapshotOwner(got->first);
  if (!owner.ok()) {
    return absl::Status(owner.status().code(), absl::StrCat("session '", id, "' in ",
                                                            store_name(), ": ",
                                                            owner.status().message()));
  }
  return *owner == tenant;
}

absl::StatusOr<std::shared_ptr<Session>> SessionStore::Load(std::string_view tenant,
                                                            const std::string& id) {
  if (!options_.durable || options_.catalogue == nullptr) return NotFound(id);
  // The store holds other records beside sessions (stored responses): only a session's
  // id form names a session.
  if (!IsRandomId128(id)) return NotFound(id);
  {
    // Discarded here; its stored copy awaits deletion.
    absl::ReaderMutexLock lock(&mu_);
    if (pending_deletes_.count(id) != 0) return NotFound(id);
  }
  // No lease: stored copies are replaced atomically, and a claim compares generations
  // under the lease before it runs anything.
  const absl::Time start = absl::Now();
  int64_t read = 0;
  auto got = ReadStored(tenant, id, &read);
  if (store_metrics_) {
    const bool ok = got.ok() || absl::IsNotFound(got.status());
    store_metrics_->ObserveRead(absl::Now() - start, read, ok, got.ok());
  }
  if (absl::IsNotFound(got.status())) return NotFound(id);
  if (!got.ok()) return got.status();
  // Another tenant's session does not exist for this caller: decided from the header,
  // before verification could say anything else about it.
  if (auto owner = SnapshotOwner(got->first); owner.ok() && *owner != tenant) {
    return NotFound(id);
  }
  auto verified = snapshot::VerifySnapshot(
      std::make_shared<const std::string>(std::move(got->first)), *options_.catalogue,
      max_snapshot_bytes_);
  if (!verified.ok()) {
    return absl::Status(verified.status().code(),
                        absl::StrCat("session '", id, "' in ", store_name(), ": ",
                                     verified.status().message()));
  }
  if (verified->info.owner != tenant) return NotFound(id);
  absl::Duration ttl = verified->info.ttl;
  if (ttl <= absl::ZeroDuration() || ttl > options_.max_ttl) ttl = options_.default_ttl;
  const int64_t charge = ChargeFor(*verified->model, verified->info.position);
  auto session = FromSnapshot(id, std::string(tenant), *std::move(verified), ttl);
  session->generation_ = got->second;
  // Another call may be loading it too: Admit keeps the first and charges it once.
  auto admitted = Admit(session, charge);
  if (!admitted.ok()) return admitted.status();
  if (*admitted == session) {
    bool migrated;
    {
      absl::MutexLock lock(&mu_);
      migrated = spilled_.erase(id) == 0;
    }
    if (store_metrics_) store_metrics_->AddLoaded(migrated);
  }
  return admitted;
}

absl::Status SessionStore::Adopt(Session& s, snapshot::VerifiedSnapshot snapshot,
                                 int64_t generation) {
  if (snapshot.model.get() != &s.served()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "session '", s.id(), "' in ", store_name(), " now belongs to another model"));
  }
  if (absl::Status c = Charge(s, ChargeFor(s.served(), snapshot.info.position)); !c.ok()) {
    return c;
  }
  s.state_.reset();
  s.pending_token_ = snapshot.info.pending_token;
  s.restore_ = std::make_shared<const snapshot::VerifiedSnapshot>(std::move(snapshot));
  s.generation_ = generation;
  s.dirty_ = false;
  s.PublishProgress();
  return absl::OkStatus();
}

absl::Status SessionStore::Sync(Session& s, bool wait) {
  if (!s.store_token_.empty() && leases_->Held(s.id(), s.store_token_)) return absl::OkStatus();
  s.store_token_.clear();
  auto grant = leases_->Acquire(s.id(), wait);
  if (absl::IsAborted(grant.status())) {  // another server's turn did not end in time
    return absl::UnavailableError(std::string(grant.status().message()));
  }
  if (absl::IsUnavailable(grant.status())) {
    // The store is unreachable: a session in memory keeps working from this copy,
    // without a lease (it cannot be written until the store is back; if another server
    // wrote it meanwhile, that newer copy wins at the next claim here).
    std::fprintf(stderr, "attnserve: session %s runs without a store lease: %s\n",
                 s.id().c_str(), Message(grant.status()).c_str());
    return absl::OkStatus();
  }
  if (!grant.ok()) return grant.status();
  s.store_token_ = grant->token;
  if (grant->generation <= s.generation_) {
    // The store holds ours, or an older copy (or none: it expired); ours is the newest,
    // and fenced writes continue from the store's numbering.
    s.generation_ = grant->generation;
    if (grant->generation == 0) s.dirty_ = true;
    return absl::OkStatus();
  }
  // The store is newer than this copy. Read it: it may be our own write whose reply was
  // lost, or another server's.
  int64_t read = 0;
  auto got = ReadStored(s.owner(), s.id(), &read);
  if (got.ok()) {
    for (const auto& [generation, bytes] : s.uncertain_) {
      if (generation == got->second && *bytes == got->first) {
        s.generation_ = generation;  // ours after all; turns since then are still unsaved
        s.uncertain_.clear();
        return absl::OkStatus();
      }
    }
  }
  absl::Status adopted = got.status();
  const bool discarded = s.dirty_;
  if (got.ok()) {
    auto verified = snapshot::VerifySnapshot(
        std::make_shared<const std::string>(std::move(got->first)), *options_.catalogue,
        max_snapshot_bytes_);
    adopted = verified.ok() ? Adopt(s, *std::move(verified), got->second) : verified.status();
  }
  if (!adopted.ok()) {
    leases_->Release(s.id(), s.store_token_);
    s.store_token_.clear();
    return absl::IsNotFound(adopted) ? NotFound(s.id()) : adopted;
  }
  s.uncertain_.clear();
  if (store_metrics_) store_metrics_->AddLoaded(/*migrated=*/true);
  if (discarded) {
    std::fprintf(stderr,
                 "attnserve: session %s: another server wrote generation %lld over this "
                 "server's unsaved state; taking its copy\n",
                 s.id().c_str(), static_cast<long long>(grant->generation));
    return absl::AbortedError(absl::StrCat(
        "session '", s.id(), "' was taken over by another server; this server's unsaved "
        "turns on it are lost"));
  }
  return absl::OkStatus();
}

absl::Status SessionStore::Save(Session& s, bool wait) {
  if (s.memory_only()) return absl::OkStatus();
  auto closing = [&s] { return s.closing_.load() || s.closed(); };
  for (int attempt = 0; attempt < 2 && s.dirty_; ++attempt) {
    if (closing()) return absl::OkStatus();  // closed: nothing to keep
    if (absl::Status st = Sync(s, wait); !st.ok()) return st;
    if (s.store_token_.empty()) {
      return absl::UnavailableError(absl::StrCat("session store ", store_name(),
                                                 " is unreachable; not saved"));
    }
    if (!s.dirty_) break;  // Sync took a newer copy another server wrote
    if (closing()) return absl::OkStatus();
    const absl::Time start = absl::Now();
    auto snapshot = s.Snapshot();
    if (!snapshot.ok()) return snapshot.status();
    std::shared_ptr<const std::string> bytes = *std::move(snapshot);
    // Pages first (only those not stored yet), then the stub, fenced.
    int64_t sent = 0;
    absl::StatusOr<std::string> record = EncodeStored(s.owner(), *bytes, s.ttl_, &sent);
    absl::StatusOr<int64_t> written =
        record.ok() ? leases_->WriteFenced(s.id(), *record, s.ttl_, s.store_token_, s.generation_)
                    : absl::StatusOr<int64_t>(record.status());
    if (store_metrics_) store_metrics_->ObserveWrite(absl::Now() - start, sent, written.ok());
    if (written.ok()) {
      s.generation_ = *written;
      s.dirty_ = false;
      s.uncertain_.clear();
      // Closed while this wrote (Close deleted the stored copy before or after the
      // write): whatever the write put there goes too.
      if (closing()) (void)DeleteStored(s.id());
      break;
    }
    // Failed, or so it seems: the script may have run with its reply lost (or run twice,
    // the second time refused as stale). Remember what it would have written.
    if (s.uncertain_.size() >= 8) s.uncertain_.erase(s.uncertain_.begin());
    s.uncertain_.emplace_back(s.generation_ + 1, bytes);
    if (!absl::IsAborted(written.status())) return written.status();
    // Our lease lapsed (a store restart, a long stall), or a resent script found its own
    // first run. Give the token up (a no-op unless it is still ours) and take the lease
    // again: if the store holds nobody's write but ours, the next pass writes on top.
    leases_->Release(s.id(), s.store_token_);
    s.store_token_.clear();
  }
  if (s.dirty_) {
    return absl::AbortedError(absl::StrCat("session '", s.id(),
                                           "': lost the store lease twice while saving"));
  }
  ReleaseIfClean(s);
  return absl::OkStatus();
}

void SessionStore::ReleaseIfClean(Session& s) {
  if (s.store_token_.empty() || (s.dirty_ && !s.closed())) return;
  leases_->Release(s.id(), s.store_token_);
  s.store_token_.clear();
}

void SessionStore::FinishTurn(TurnClaim claim, std::function<void(absl::Status)> then,
                              bool broken) {
  std::shared_ptr<Session> s = claim.shared();
  if (broken) {
    // The failed step may have moved the state part-way: the session is never served
    // again. Its stored copy (older than what the client saw) goes too, below.
    std::fprintf(stderr, "attnserve: session %s closed: a failed engine step left its state "
                 "unknown\n", s->id().c_str());
    absl::MutexLock lock(&mu_);
    s->closing_.store(true);
    RemoveLocked(s, /*closed=*/true);
  }
  if (!options_.durable || s->memory_only()) {
    claim.Release();
    then(absl::OkStatus());
    return;
  }
  bool draining;
  {
    absl::ReaderMutexLock lock(&mu_);
    draining = !accepting_;
  }
  const bool closed = s->closed() || s->closing_.load();
  if (!closed) s->dirty_ = true;  // the turn changed the state; the store lease stays held
  const bool write = !closed && (options_.persist == PersistMode::kEachTurn || draining);
  if (!write && !broken && (!closed || s->store_token_.empty())) {
    // Nothing to write, delete or give up (a dirty session keeps its store lease until
    // saved): releasing the claim makes no store call.
    claim.Release();
    then(absl::OkStatus());
    return;
  }
  // On the writer thread, so the engine never waits on the store; the claim keeps
  // everyone else off the state until then.
  Enqueue([this, claim = std::make_shared<TurnClaim>(std::move(claim)), then = std::move(then),
           write, broken] {
    Session& s = claim->session();
    absl::Status saved;
    if (write) {
      // No waiting for a lease here: every queued final message waits behind this one.
      saved = Save(s, /*wait=*/false);  // writes, fenced, and gives the store lease up
      if (absl::IsAborted(saved)) {
        // Another server took the session over while this turn ran: its copy is now the
        // session's, and this turn's tokens are not part of it.
        std::fprintf(stderr, "attnserve: session %s: %s\n", s.id().c_str(),
                     Message(saved).c_str());
      } else if (!saved.ok()) {
        // The store is down, or another server holds the lease: the session lives on in
        // memory (its lease held while it can be renewed); the next turn or the drain
        // tries again.
        std::fprintf(stderr, "attnserve: session %s not saved after its turn: %s\n",
                     s.id().c_str(), Message(saved).c_str());
        saved = absl::OkStatus();
      }
    }
    if (broken) (void)DeleteStored(s.id());
    claim->Release();  // gives the store lease up when the store is current or it closed
    then(saved);
  });
}

void SessionStore::Enqueue(std::function<void()> work) {
  {
    std::lock_guard<std::mutex> lock(writer_mu_);
    writes_.push_back(std::move(work));
  }
  writer_cv_.notify_all();
}

void SessionStore::WriterLoop() {
  std::unique_lock<std::mutex> lock(writer_mu_);
  while (true) {
    writer_cv_.wait(lock, [this] { return writer_stop_ || !writes_.empty(); });
    if (writes_.empty()) return;  // stopping, and every queued write is done
    std::function<void()> write = std::move(writes_.front());
    writes_.pop_front();
    ++writes_in_flight_;
    lock.unlock();
    write();
    lock.lock();
    --writes_in_flight_;
    writer_cv_.notify_all();
  }
}

bool SessionStore::SpillOne(std::optional<std::string_view> owner) {
  std::shared_ptr<Session> victim;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, s] : sessions_) {
      if (s->busy_ || s->closing_.load() || s->memory_only() ||
          (owner && s->owner() != *owner)) {
        continue;
      }
      if (!victim || s->last_used_ < victim->last_used_) victim = s;
    }
    if (!victim) return false;
    victim->busy_ = true;
  }
  absl::Status saved = Save(*victim, /*wait=*/true);
  absl::MutexLock lock(&mu_);
  victim->busy_ = false;
  if (!saved.ok()) {
    std::fprintf(stderr, "attnserve: cannot spill session %s: %s\n", victim->id().c_str(),
                 Message(saved).c_str());
    return false;
  }
  if (victim->closed() || victim->closing_.load()) return true;  // Close frees it
  // Out of memory now; it lives on in the store, so it is not closed.
  RemoveLocked(victim, /*closed=*/false);
  spilled_.insert(victim->id());
  if (store_metrics_) store_metrics_->AddSpilled(1);
  return true;
}

int SessionStore::SpillIdle() {
  if (!options_.durable || options_.spill_after == absl::InfiniteDuration()) return 0;
  const absl::Time now = options_.clock->Now();
  std::vector<std::shared_ptr<Session>> idle;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, s] : sessions_) {
      if (!s->busy_ && !s->memory_only() && now - s->last_used_ >= options_.spill_after) {
        s->busy_ = true;
        idle.push_back(s);
      }
    }
  }
  int spilled = 0;
  for (auto& s : idle) {
    absl::Status saved = Save(*s, /*wait=*/true);
    absl::MutexLock lock(&mu_);
    s->busy_ = false;
    if (!saved.ok() || s->closed() || s->closing_.load()) continue;
    RemoveLocked(s, /*closed=*/false);
    spilled_.insert(s->id());
    ++spilled;
  }
  if (store_metrics_ && spilled > 0) store_metrics_->AddSpilled(spilled);
  return spilled;
}

void SessionStore::StopAccepting() {
  absl::MutexLock lock(&mu_);
  accepting_ = false;
}

absl::StatusOr<int> SessionStore::SaveAll(absl::Duration timeout) {
  if (!options_.durable) return 0;
  {  // writes queued by finished turns go first
    std::unique_lock<std::mutex> lock(writer_mu_);
    writer_cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout),
                        [this] { return writes_.empty() && writes_in_flight_ == 0; });
  }
  const absl::Time deadline = absl::Now() + timeout;
  std::vector<std::shared_ptr<Session>> all;
  {
    absl::MutexLock lock(&mu_);
    auto none_busy = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      for (const auto& [id, s] : sessions_) {
        if (s->busy_) return false;
      }
      return true;
    };
    mu_.AwaitWithDeadline(absl::Condition(&none_busy), deadline);
    for (const auto& [id, s] : sessions_) {
      if (s->busy_ || s->memory_only()) continue;
      s->busy_ = true;
      all.push_back(s);
    }
  }
  int saved = 0;
  absl::Status first_error;
  for (auto& s : all) {
    absl::Status st = Save(*s, /*wait=*/true);
    if (st.ok()) {
      ++saved;
    } else if (first_error.ok()) {
      first_error = absl::Status(st.code(), absl::StrCat("session ", s->id(), ": ", st.message()));
    }
    absl::MutexLock lock(&mu_);
    s->busy_ = false;
  }
  if (!first_error.ok()) return first_error;
  return saved;
}

}  // namespace attnserve::session
