#include "server/session/session_store.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "server/common/random_id.h"
#include "server/session/session_store_internal.h"
#include "server/store/record_kind.h"

namespace attnserve::session {
using internal::ChargeFor;
using internal::Draining;
using internal::NotFound;
namespace {

// How long a turn waits for the session's previous turn to end (SessionStore::Claim).
constexpr absl::Duration kBusyWait = absl::Milliseconds(500);

absl::Status CheckTtl(absl::Duration ttl, absl::Duration max_ttl) {
  if (ttl <= max_ttl) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("ttl_seconds: ", absl::FormatDuration(ttl),
                                                 " is over the server's maximum of ",
                                                 absl::FormatDuration(max_ttl)));
}

}  // namespace

// --- TurnClaim ---

TurnClaim& TurnClaim::operator=(TurnClaim&& other) noexcept {
  if (this != &other) {
    Release();
    store_ = other.store_;
    session_ = std::move(other.session_);
    other.store_ = nullptr;
    other.session_ = nullptr;
  }
  return *this;
}

void TurnClaim::Release() {
  if (!session_) return;
  std::shared_ptr<Session> s = std::move(session_);
  session_ = nullptr;
  store_->EndTurn(s);
}

// --- SessionStore ---

absl::StatusOr<std::unique_ptr<SessionStore>> SessionStore::Create(Options options) {
  if (options.durable == nullptr) {
    if (options.persist != PersistMode::kNone) {
      return absl::InvalidArgumentError(
          "persist: each_turn needs a durable session_store (dir:PATH or redis://HOST:PORT)");
    }
    if (options.spill_after != absl::InfiniteDuration()) {
      return absl::InvalidArgumentError(
          "spill_after: spilling needs a durable session_store (dir:PATH or "
          "redis://HOST:PORT)");
    }
  }
  if (options.spill_after <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("spill_after must be positive");
  }
  return std::make_unique<SessionStore>(std::move(options));
}

namespace {

// The durable store as the registry sees it: sessions and the pages their records name.
// The store holds other records beside them (stored responses, conversations, ...) under
// ids anyone can compute; named as a session, each must answer as an id that never
// existed, in every method, without being read.
SessionStore::Options OnlySessions(SessionStore::Options options) {
  options.durable = store::ForKinds({store::RecordKind::kSession, store::RecordKind::kPage},
                                    std::move(options.durable));
  return options;
}

}  // namespace

SessionStore::SessionStore(Options options)
    : options_(OnlySessions(std::move(options))),
      residency_(Residency::Limits{options_.max_sessions, options_.memory_budget_bytes,
                                   options_.tenant_limits}) {
  // A snapshot may hold its KV rows in f32 (one from a server with --kv_cache_type=f32, or
  // from before 16-bit caches) whatever this server stores them as: the limit is the
  // largest state counted with 4-byte KV elements (a hybrid's fixed parts, counted alike,
  // only loosen it).
  int64_t largest = 0;
  auto widest = [](const model::Model& m) {
    const attention::KvCacheType type = m.config().attention.kv_cache_type;
    return m.StateBytes(m.config().max_context) * attention::KvRowBytes(
               attention::KvCacheType::kF32, attention::kQ8_0BlockValues) /
           attention::KvRowBytes(type, attention::kQ8_0BlockValues);
  };
  if (options_.catalogue != nullptr) {
    for (const auto& m : options_.catalogue->all()) {
      largest = std::max(largest, widest(*m->model));
      for (const auto& v : m->variants) largest = std::max(largest, widest(*v->model));
    }
  }
  max_snapshot_bytes_ = uint64_t(largest) + 64 * 1024;
  if (options_.durable) {
    if (options_.metrics) store_metrics_ = &options_.metrics->ForStore(options_.durable->name());
    leases_ = std::make_unique<store::LeaseKeeper>(options_.durable.get(), options_.leases,
                                                   store_metrics_);
    writer_ = std::thread([this] { WriterLoop(); });
  }
}

SessionStore::~SessionStore() {
  {
    std::lock_guard<std::mutex> lock(writer_mu_);
    writer_stop_ = true;
  }
  writer_cv_.notify_all();
  if (writer_.joinable()) writer_.join();
}

std::string SessionStore::store_name() const {
  return options_.durable ? options_.durable->name() : "memory";
}

std::shared_ptr<Session> SessionStore::FromSnapshot(std::string id, std::string owner,
                                                   snapshot::VerifiedSnapshot verified,
                                                   absl::Duration ttl) const {
  auto session = std::make_shared<Session>(std::move(id), std::move(owner), verified.model,
                                           options_.clock->Now(), ttl);
  session->pending_token_ = verified.info.pending_token;
  session->restore_ = std::make_shared<const snapshot::VerifiedSnapshot>(std::move(verified));
  session->PublishProgress();
  return session;
}

absl::StatusOr<std::shared_ptr<Session>> SessionStore::Admit(std::shared_ptr<Session> session,
                                                             int64_t bytes) {
  while (true) {
    Residency::Refusal refusal;
    absl::Status refused;
    {
      absl::MutexLock lock(&mu_);
      if (!accepting_) return Draining();
      if (auto it = sessions_.find(session->id()); it != sessions_.end()) {
        return it->second;  // loaded by another call meanwhile: charged once, shared
      }
      refused = residency_.Admit(session->id(), session->owner(), bytes,
                                 session->served().name, &refusal);
      if (refused.ok()) {
        sessions_[session->id()] = session;
        return session;
      }
      if (!options_.durable || (refusal == Residency::Refusal::kServer && sessions_.empty())) {
        return refused;
      }
    }
    // With a durable store, memory is a cache: make room by spilling the least recently
    // used idle session (the tenant's own when its limits are in the way), then look
    // again.
    if (refusal == Residency::Refusal::kTenant) {
      if (!SpillOne(session->owner())) return refused;
      continue;
    }
    if (!SpillOne()) {
      return absl::ResourceExhaustedError(absl::StrCat(
          refused.message(), "; every session in memory is busy or could not be saved to ",
          store_name()));
    }
  }
}

absl::StatusOr<std::shared_ptr<Session>> SessionStore::AdmitNew(std::shared_ptr<Session> session,
                                                                int64_t bytes) {
  auto admitted = Admit(session, bytes);
  if (!admitted.ok()) return admitted.status();
  if (options_.durable && !session->local_) {
    // Written at once, so that every server sharing the store can find it. Nobody else
    // knows the fresh id yet, so nothing can claim it before the write.
    if (absl::Status s = Publish(*session); !s.ok()) {
      absl::MutexLock lock(&mu_);
      RemoveLocked(session, /*closed=*/true);
      return s;
    }
  }
  return session;
}

absl::StatusOr<std::shared_ptr<Session>> SessionStore::Create(
    std::string_view tenant, std::shared_ptr<const catalogue::ServedModel> model,
    absl::Duration ttl, Durability durability) {
  if (ttl <= absl::ZeroDuration()) ttl = options_.default_ttl;
  if (absl::Status s = CheckTtl(ttl, options_.max_ttl); !s.ok()) return s;
  const int64_t bytes = ChargeFor(*model, 0);
  auto session = std::make_shared<Session>(RandomId128(), std::string(tenant), std::move(model),
                                           options_.clock->Now(), ttl);
  session->local_ = durability == Durability::kLocal;
  return AdmitNew(std::move(session), bytes);
}

absl::StatusOr<TurnClaim> SessionStore::BeginOneTurn(
    std::string_view tenant, std::shared_ptr<const catalogue::ServedModel> model) {
  const int64_t bytes = ChargeFor(*model, 0);
  auto session = std::make_shared<Session>(RandomId128(), std::string(tenant), std::move(model),
                                           options_.clock->Now(), options_.default_ttl);
  session->one_turn_ = true;
  session->busy_ = true;  // claimed before anyone could see it
  auto admitted = Admit(session, bytes);
  if (!admitted.ok()) return admitted.status();
  return TurnClaim(this, session);
}

absl::StatusOr<TurnClaim> SessionStore::Claim(std::string_view tenant, const std::string& id) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::shared_ptr<Session> found;
    {
      absl::MutexLock lock(&mu_);
      if (!accepting_) return Draining();
      auto it = sessions_.find(id);
      if (it != sessions_.end()) {
        Session& s = *it->second;
        // Before anything that tells it apart; a one-turn session has no id to claim by.
        if (s.owner() != tenant || s.one_turn_) return NotFound(id);
        if (s.busy_) {
          // The turn in flight may be ending (its client cancelled it or its deadline
          // passed, and the engine stops it at its next step): a client that sends its
          // next turn at once should not be refused for that. Wait a little (callers run
          // on a thread whose job is waiting, never a gRPC callback thread).
          std::shared_ptr<Session> busy = it->second;
          auto idle = [](Session* session) { return !session->busy_; };
          if (!mu_.AwaitWithTimeout(absl::Condition(+idle, busy.get()), kBusyWait)) {
            return absl::FailedPreconditionError(absl::StrCat(
                "session '", id, "' already has a turn in flight; wait for it to end"));
          }
          // Closed, spilled or replaced meanwhile: look again.
          auto again = sessions_.find(id);
          if (again == sessions_.end() || again->second != busy || !accepting_) continue;
        }
        s.busy_ = true;
        s.last_used_ = options_.clock->Now();
        found = it->second;
      }
    }
    if (found) {
      TurnClaim claim(this, found);
      // Across servers: take the store lease, and catch up if another server wrote.
      if (options_.durable && !found->local_) {
        // ABORTED: unsaved turns here were overtaken by another server's; the session
        // now holds that newer copy, which is what this turn must run from.
        if (absl::Status s = Sync(*found, /*wait=*/true); !s.ok() && !absl::IsAborted(s)) {
          return s;
        }
      }
      return claim;
    }
    auto loaded = Load(tenant, id);
    if (!loaded.ok()) return loaded.status();
    // Loaded and admitted: claim it on the next pass (it may have been claimed or
    // spilled again meanwhile, in which case that pass says so or loads it again).
  }
  return absl::UnavailableError(absl::StrCat("session '", id, "' is moving between memory and ",
                                             store_name(), "; retry"));
}

absl::StatusOr<TurnClaim> SessionStore::BeginTurn(std::string_view tenant,
                                                  const std::string& id) {
  return Claim(tenant, id);
}

absl::Status SessionStore::Charge(Session& s, int64_t bytes) {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(s.id());
  if (it == sessions_.end() || it->second.get() != &s) {
    // Closed (or replaced) meanwhile: not charged again, but no budget is overrun either.
    if (bytes > residency_.limits().budget_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "memory budget: session '", s.id(), "' would grow to ", bytes,
          " bytes of state; the server's budget is ", residency_.limits().budget_bytes));
    }
    return absl::OkStatus();
  }
  return residency_.Resize(s.id(), bytes);
}

void SessionStore::EndTurn(const std::shared_ptr<Session>& s) {
  s->PublishProgress();
  if (options_.durable && !s->memory_only()) ReleaseIfClean(*s);
  absl::MutexLock lock(&mu_);
  s->busy_ = false;
  s->last_used_ = options_.clock->Now();
  if (s->one_turn_) RemoveLocked(s, /*closed=*/true);
}

void SessionStore::RemoveLocked(const std::shared_ptr<Session>& s, bool closed) {
  if (closed) s->closed_.store(true);
  auto it = sessions_.find(s->id());
  if (it == sessions_.end() || it->second != s) return;  // already removed
  residency_.Release(s->id());
  sessions_.erase(it);
}

absl::Status SessionStore::Close(std::string_view tenant, const std::string& id) {
  std::shared_ptr<Session> s;
  {
    absl::MutexLock lock(&mu_);
    auto it = sessions_.find(id);
    if (it != sessions_.end()) {
      if (it->second->owner() != tenant || it->second->one_turn_) return NotFound(id);
      s = it->second;
      // A save in progress (spill, drain, write-through) writes nothing more from now
      // on, and deletes what it wrote meanwhile.
      s->closing_.store(true);
    }
  }
  if (options_.durable && !(s != nullptr && s->local_)) {
    // The stored copy goes first: if the store cannot be reached, nothing changes and
    // the client may retry, rather than the session coming back later from the store.
    absl::Status deleted;
    if (s == nullptr) {
      auto mine = StoredIsTenants(tenant, id);
      deleted = !mine.ok() ? mine.status() : !*mine ? NotFound(id) : absl::OkStatus();
    }
    if (deleted.ok()) deleted = DeleteStored(id);
    if (!deleted.ok()) {
      if (s) s->closing_.store(false);
      return deleted;
    }
  }
  std::string token;  // a store lease to give up (a busy session's claim gives up its own)
  {
    absl::MutexLock lock(&mu_);
    spilled_.erase(id);
    if (s == nullptr) return options_.durable ? absl::OkStatus() : NotFound(id);
    if (!s->busy_) std::swap(token, s->store_token_);
    RemoveLocked(s, /*closed=*/true);
  }
  if (!token.empty()) leases_->Release(id, token);
  return absl::OkStatus();
}

SessionInfo SessionStore::Info(const Session& s) const {
  SessionInfo info;
  info.id = s.id();
  info.owner = s.owner();
  info.served = &s.served();
  info.model = s.served().name;
  info.attention = s.served().attention();
  info.attention_order = s.served().attention_order();
  info.position = s.position();
  info.state_bytes = residency_.charged(s.id());
  info.created = s.created_;
  info.last_used = s.last_used_;
  info.ttl = s.ttl_;
  info.busy = s.busy_;
  return info;
}

absl::StatusOr<SessionInfo> SessionStore::Get(std::string_view tenant, const std::string& id) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::shared_ptr<Session> check;
    int64_t generation = 0;
    {
      absl::ReaderMutexLock lock(&mu_);
      auto it = sessions_.find(id);
      if (it != sessions_.end()) {
        const Session& s = *it->second;
        if (s.owner() != tenant || s.one_turn_) return NotFound(id);
        // A copy that is clean and idle here may be stale: another server sharing the
        // store may have run turns since. Busy or dirty copies are the newest.
        if (!options_.durable || s.local_ || s.busy_ || s.dirty_) return Info(s);
        check = it->second;
        generation = s.generation_;
      } else if (!accepting_) {
        return NotFound(id);
      }
    }
    if (check) {
      auto stored = options_.durable->GetGeneration(id);
      if (!stored.ok() || *stored <= generation) {
        absl::ReaderMutexLock lock(&mu_);
        return Info(*check);  // current (or the store cannot say: what we have)
      }
      EvictIfStale(check, generation);
    }
    auto loaded = Load(tenant, id);
    if (!loaded.ok()) return loaded.status();
  }
  return absl::UnavailableError(absl::StrCat("session '", id, "' is moving; retry"));
}

void SessionStore::EvictIfStale(const std::shared_ptr<Session>& s, int64_t generation) {
  absl::MutexLock lock(&mu_);
  if (s->busy_ || s->dirty_ || s->generation_ != generation) {
    return;  // changed meanwhile: the next look decides again
  }
  RemoveLocked(s, /*closed=*/false);
}

std::vector<SessionInfo> SessionStore::ListAll() const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<SessionInfo> out;
  out.reserve(sessions_.size());
  for (const auto& [id, s] : sessions_) out.push_back(Info(*s));
  return out;
}

std::vector<SessionInfo> SessionStore::List(std::string_view tenant) const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<SessionInfo> out;
  for (const auto& [id, s] : sessions_) {
    if (s->owner() == tenant && !s->one_turn_) out.push_back(Info(*s));
  }
  return out;
}

absl::StatusOr<std::shared_ptr<const std::string>> SessionStore::Export(
    std::string_view tenant, const std::string& id) {
  auto claim = Claim(tenant, id);
  if (!claim.ok()) return claim.status();
  return (*claim)->Snapshot();  // the claim is released on return
}

absl::StatusOr<std::shared_ptr<Session>> SessionStore::Import(
    std::string_view tenant, snapshot::SnapshotBytes bytes, absl::Duration ttl,
    Durability durability) {
  if (options_.catalogue == nullptr) {
    return absl::FailedPreconditionError("this server has no model catalogue to import into");
  }
  auto verified = snapshot::VerifySnapshot(std::move(bytes), *options_.catalogue,
                                           max_snapshot_bytes_);
  if (!verified.ok()) return verified.status();
  if (ttl <= absl::ZeroDuration()) ttl = verified->info.ttl;
  if (ttl <= absl::ZeroDuration()) ttl = options_.default_ttl;
  if (absl::Status s = CheckTtl(ttl, options_.max_ttl); !s.ok()) return s;
  const int64_t charge = ChargeFor(*verified->model, verified->info.position);
  // The importer's, whoever exported it.
  auto session = FromSnapshot(RandomId128(), std::string(tenant), *std::move(verified), ttl);
  session->local_ = durability == Durability::kLocal;
  return AdmitNew(std::move(session), charge);
}

absl::StatusOr<std::shared_ptr<Session>> SessionStore::Fork(std::string_view tenant,
                                                            const std::string& id,
                                                            absl::Duration ttl) {
  std::shared_ptr<const std::string> bytes;
  absl::Duration original_ttl;
  {
    auto claim = Claim(tenant, id);
    if (!claim.ok()) return claim.status();
    auto snapshot = (*claim)->Snapshot();
    if (!snapshot.ok()) return snapshot.status();
    bytes = *std::move(snapshot);
    original_ttl = (*claim)->ttl_;
  }
  // The copy goes through the snapshot codec: one path for every way a session is
  // duplicated, and the fork's tensors are made by its first turn, not here.
  return Import(tenant, std::move(bytes), ttl > absl::ZeroDuration() ? ttl : original_ttl);
}

int SessionStore::ExpireIdle() {
  const absl::Time now = options_.clock->Now();
  std::vector<std::pair<std::string, std::string>> leases;  // (id, store lease token)
  int expired = 0;
  {
    absl::MutexLock lock(&mu_);
    std::vector<std::shared_ptr<Session>> idle;
    for (const auto& [id, s] : sessions_) {
      if (!s->busy_ && now - s->last_used_ >= s->ttl_) idle.push_back(s);
    }
    for (auto& s : idle) {
      // Nobody else can hold it now: a store lease still held (a session newer than its
      // stored copy) is given up, and the copy expires on its own.
      if (!s->store_token_.empty()) leases.emplace_back(s->id(), std::move(s->store_token_));
      s->store_token_.clear();
      RemoveLocked(s, /*closed=*/true);
      ++expired;
    }
  }
  for (const auto& [id, token] : leases) leases_->Release(id, token);
  if (options_.durable) (void)options_.durable->RemoveExpired();
  RetryDeletes();
  return expired;
}

int SessionStore::size() const {
  absl::ReaderMutexLock lock(&mu_);
  return residency_.total().sessions;
}

int64_t SessionStore::charged_bytes() const {
  absl::ReaderMutexLock lock(&mu_);
  return residency_.total().bytes;
}

Residency::Usage SessionStore::usage(std::string_view tenant) const {
  absl::ReaderMutexLock lock(&mu_);
  return residency_.usage(tenant);
}

}  // namespace attnserve::session
