#include "server/session/session_store.h"

#include "server/session/session_store_internal.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace attnserve::session {
using internal::ChargeFor;
using internal::Draining;
using internal::NotFound;
namespace {

// How long a turn waits for the session's previous turn to end (SessionStore::Claim).
constexpr absl::Duration kBusyWait = absl::Milliseconds(500);

// 128 bits from the kernel's CSPRNG, as 32 lowercase hex digits. Session ids are the
// only handle on a session, so they must not be guessable from earlier ones.
std::string NewSessionId() {
  uint64_t words[2] = {0, 0};
  size_t got = 0;
  const int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    while (got < sizeof words) {
      const ssize_t n = ::read(fd, reinterpret_cast<char*>(words) + got, sizeof words - got);
      if (n <= 0) break;
      got += size_t(n);
    }
    ::close(fd);
  }
  if (got != sizeof words) {
    // No usable /dev/urandom: nothing sensible to serve ids from.
    std::fprintf(stderr, "attnserve: cannot read /dev/urandom for session ids\n");
    std::abort();
  }
  return absl::StrFormat("%016x%016x", words[0], words[1]);
}

}  // namespace

// --- Session ---

Session::Session(std::string id, std::shared_ptr<const ServedModel> model, absl::Time now,
                 absl::Duration ttl)
    : id_(std::move(id)), model_(std::move(model)), created_(now), last_used_(now), ttl_(ttl) {}

model::DecodeState& Session::state() {
  if (!state_ && restore_) {
    // The snapshot was verified when the session was made from it; restoring copies
    // its values into tensors and cannot disagree with the model.
    auto restored = RestoreSnapshotState(*restore_);
    if (!restored.ok()) {
      std::fprintf(stderr, "attnserve: restoring verified session %s failed: %s\n",
                   id_.c_str(), std::string(restored.status().message()).c_str());
      std::abort();
    }
    state_ = std::move(restored).value();
    restore_.reset();
  }
  if (!state_) state_ = model_->model->NewState();
  return *state_;
}

void Session::PublishProgress() {
  const int64_t in_state =
      state_ ? state_->position() : (restore_ ? restore_->info.position : 0);
  position_.store(in_state + (pending_token_ ? 1 : 0));
}

std::shared_ptr<const std::string> Session::Snapshot() {
  if (!state_ && restore_ && restore_->info.pending_token == pending_token_ &&
      restore_->info.ttl == ttl_ && restore_->info.owner == owner_) {
    return restore_->bytes;  // unchanged since it was loaded
  }
  SnapshotInfo info;
  info.pending_token = pending_token_;
  info.ttl = ttl_;
  info.owner = owner_;
  return std::make_shared<const std::string>(EncodeSnapshot(*model_, &state(), info));
}

std::shared_ptr<Session> SessionStore::FromSnapshot(std::string id, VerifiedSnapshot verified,
                                                   absl::Duration ttl) const {
  auto session = std::make_shared<Session>(std::move(id), verified.model,
                                           options_.clock->Now(), ttl);
  session->pending_token_ = verified.info.pending_token;
  session->owner_ = verified.info.owner;
  session->restore_ = std::make_shared<const VerifiedSnapshot>(std::move(verified));
  session->PublishProgress();
  return session;
}

// --- TurnLease ---

TurnLease& TurnLease::operator=(TurnLease&& other) noexcept {
  if (this != &other) {
    Release();
    store_ = other.store_;
    session_ = std::move(other.session_);
    close_on_release_ = other.close_on_release_;
    other.store_ = nullptr;
    other.session_ = nullptr;
  }
  return *this;
}

void TurnLease::Release() {
  if (!session_) return;
  std::shared_ptr<Session> s = std::move(session_);
  session_ = nullptr;
  store_->EndTurn(*s);
  if (close_on_release_) (void)store_->Close(s->id());
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

SessionStore::SessionStore(Options options) : options_(std::move(options)) {
  int64_t largest = 0;
  if (options_.catalogue != nullptr) {
    for (const auto& m : options_.catalogue->all()) {
      largest = std::max(largest, m->model->StateBytes(m->model->config().max_context));
      for (const auto& v : m->variants) {
        largest = std::max(largest, v->model->StateBytes(v->model->config().max_context));
      }
    }
  }
  max_snapshot_bytes_ = uint64_t(largest) + 64 * 1024;
  if (options_.durable && options_.metrics) {
    store_metrics_ = &options_.metrics->ForStore(options_.durable->name());
  }
  if (options_.durable) {
    leases_ = std::make_unique<LeaseKeeper>(options_.durable.get(), options_.leases,
                                            store_metrics_);
  }
  if (options_.durable) writer_ = std::thread([this] { WriterLoop(); });
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

absl::Status SessionStore::CheckTenantLocked(const Session& s, int sessions,
                                             int64_t bytes) const {
  auto limits = options_.tenant_limits.find(s.owner());
  if (limits == options_.tenant_limits.end()) return absl::OkStatus();
  TenantUsage used;
  if (auto it = usage_.find(s.owner()); it != usage_.end()) used = it->second;
  const TenantLimits& l = limits->second;
  if (sessions > 0 && l.max_sessions > 0 && used.sessions + sessions > l.max_sessions) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "max_sessions: tenant '", s.owner(), "' already holds ", used.sessions,
        " sessions on this server, its limit; close idle sessions or wait for their TTL"));
  }
  if (bytes > 0 && l.max_state_bytes > 0 && used.bytes + bytes > l.max_state_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "max_state_bytes: tenant '", s.owner(), "' would hold ", used.bytes + bytes,
        " bytes of session state on this server; its limit is ", l.max_state_bytes));
  }
  return absl::OkStatus();
}

void SessionStore::AccountLocked(const Session& s, int sessions, int64_t bytes) {
  auto it = usage_.find(s.owner());
  if (it == usage_.end()) it = usage_.emplace(s.owner(), TenantUsage{}).first;
  it->second.sessions += sessions;
  it->second.bytes += bytes;
  if (it->second.sessions == 0 && it->second.bytes == 0) usage_.erase(it);
}

absl::Status SessionStore::Admit(const std::shared_ptr<Session>& session, int64_t bytes) {
  while (true) {
    absl::Status tenant_full;
    {
      absl::MutexLock lock(&mu_);
      if (!accepting_) return Draining();
      tenant_full = CheckTenantLocked(*session, 1, bytes);
      const bool over_count = int(sessions_.size()) >= options_.max_sessions;
      const bool over_bytes = charged_bytes_ + bytes > options_.memory_budget_bytes;
      if (tenant_full.ok() && !over_count && !over_bytes) {
        session->charged_bytes_ = bytes;
        charged_bytes_ += bytes;
        sessions_[session->id()] = session;
        AccountLocked(*session, 1, bytes);
        return absl::OkStatus();
      }
      if (!tenant_full.ok() && !options_.durable) return tenant_full;
      if (tenant_full.ok() && (!options_.durable || sessions_.empty())) {
        if (over_count) {
          return absl::ResourceExhaustedError(absl::StrCat(
              "max_sessions: the server already holds ", sessions_.size(),
              " sessions (its limit); close idle sessions or wait for their TTL"));
        }
        return absl::ResourceExhaustedError(absl::StrCat(
            "memory budget: a '", session->served().name, "' session needs ", bytes,
            " bytes of state; ", charged_bytes_, " of the server's ",
            options_.memory_budget_bytes, " bytes are in use"));
      }
    }
    // With a durable store, memory is a cache: make room by spilling the least recently
    // used idle session (the tenant's own when its limits are in the way), then look
    // again.
    if (!tenant_full.ok()) {
      if (!SpillOne(session->owner())) return tenant_full;
      continue;
    }
    if (!SpillOne()) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "memory budget: every session in memory is busy or could not be saved to ",
          store_name(), "; a '", session->served().name, "' session needs ", bytes,
          " bytes of state"));
    }
  }
}

absl::StatusOr<std::shared_ptr<Session>> SessionStore::Create(
    std::shared_ptr<const ServedModel> model, absl::Duration ttl, bool ephemeral,
    std::string_view tenant) {
  if (ttl <= absl::ZeroDuration()) ttl = options_.default_ttl;
  if (ttl > options_.max_ttl) {
    return absl::InvalidArgumentError(absl::StrCat("ttl_seconds: ", absl::FormatDuration(ttl),
                                                   " is over the server's maximum of ",
                                                   absl::FormatDuration(options_.max_ttl)));
  }
  const int64_t bytes = ChargeFor(*model, 0);
  auto session = std::make_shared<Session>(NewSessionId(), model, options_.clock->Now(), ttl);
  session->ephemeral_ = ephemeral;
  session->owner_ = std::string(tenant);
  if (options_.durable && !ephemeral) {
    // Written at once, so that every server sharing the store can find it.
    if (absl::Status s = Publish(*session); !s.ok()) return s;
  }
  if (absl::Status s = Admit(session, bytes); !s.ok()) return s;
  return session;
}

absl::StatusOr<TurnLease> SessionStore::Claim(const std::string& id, std::string_view tenant) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::shared_ptr<Session> found;
    {
      absl::MutexLock lock(&mu_);
      if (!accepting_) return Draining();
      auto it = sessions_.find(id);
      if (it != sessions_.end()) {
        Session& s = *it->second;
        if (s.owner() != tenant) return NotFound(id);  // before anything that tells it apart
        if (s.busy_) {
          // The turn in flight may be ending (its client cancelled it or its deadline
          // passed, and the engine stops it at its next step): a client that sends its
          // next turn at once should not be refused for that. Wait a little.
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
      TurnLease lease(this, found);
      // Across servers: take the store lease, and catch up if another server wrote.
      if (options_.durable && !found->ephemeral_) {
        // ABORTED: unsaved turns here were overtaken by another server's; the session
        // now holds that newer copy, which is what this turn must run from.
        if (absl::Status s = Sync(*found); !s.ok() && !absl::IsAborted(s)) return s;
      }
      return lease;
    }
    auto loaded = Load(id, tenant);
    if (!loaded.ok()) return loaded.status();
    // Loaded and admitted: claim it on the next pass (it may have been claimed or
    // spilled again meanwhile, in which case that pass says so or loads it again).
  }
  return absl::UnavailableError(absl::StrCat("session '", id, "' is moving between memory and ",
                                             store_name(), "; retry"));
}

absl::StatusOr<TurnLease> SessionStore::BeginTurn(const std::string& id,
                                                  std::string_view tenant) {
  return Claim(id, tenant);
}

absl::Status SessionStore::Charge(Session& s, int64_t bytes) {
  absl::MutexLock lock(&mu_);
  const int64_t total = charged_bytes_ - s.charged_bytes_ + bytes;
  if (bytes > s.charged_bytes_ && total > options_.memory_budget_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "memory budget: session '", s.id(), "' would grow to ", bytes,
        " bytes of state; the server's budget of ", options_.memory_budget_bytes,
        " bytes would be exceeded by ", total - options_.memory_budget_bytes));
  }
  if (s.closed()) return absl::OkStatus();
  if (absl::Status t = CheckTenantLocked(s, 0, bytes - s.charged_bytes_); !t.ok()) return t;
  AccountLocked(s, 0, bytes - s.charged_bytes_);
  charged_bytes_ = total;
  s.charged_bytes_ = bytes;
  return absl::OkStatus();
}

void SessionStore::EndTurn(Session& s) {
  s.PublishProgress();
  if (options_.durable && !s.ephemeral_) ReleaseIfClean(s);
  absl::MutexLock lock(&mu_);
  s.busy_ = false;
  s.last_used_ = options_.clock->Now();
}

void SessionStore::RemoveLocked(Session& s) {
  s.closed_.store(true);
  AccountLocked(s, -1, -s.charged_bytes_);
  charged_bytes_ -= s.charged_bytes_;
  s.charged_bytes_ = 0;
  sessions_.erase(s.id());
}

absl::Status SessionStore::Close(const std::string& id, std::string_view tenant) {
  bool in_memory = false, ephemeral = false;
  {
    absl::ReaderMutexLock lock(&mu_);
    auto it = sessions_.find(id);
    if (it != sessions_.end()) {
      if (it->second->owner() != tenant) return NotFound(id);
      in_memory = true;
      ephemeral = it->second->ephemeral_;
    }
  }
  if (options_.durable && !ephemeral) {
    // The stored copy goes first: if the store cannot be reached, nothing changes and
    // the client may retry, rather than the session coming back later from the store.
    if (!in_memory) {
      auto owner = StoredOwner(id);
      if (!owner.ok()) return owner.status();
      if (*owner != tenant) return NotFound(id);
    }
    if (absl::Status s = DeleteStored(id); !s.ok()) return s;
  }
  std::string token;  // a store lease to give up (a busy session's turn gives up its own)
  bool removed = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = sessions_.find(id);
    if (it != sessions_.end()) {
      std::shared_ptr<Session> keep = it->second;  // erase must not destroy it under us
      if (!keep->busy_) std::swap(token, keep->store_token_);
      RemoveLocked(*keep);
      removed = true;
    }
    spilled_.erase(id);
  }
  if (!token.empty()) leases_->Release(id, token);
  return removed || (options_.durable && !ephemeral) ? absl::OkStatus() : NotFound(id);
}

SessionInfo SessionStore::Info(const Session& s) const {
  SessionInfo info;
  info.id = s.id();
  info.owner = s.owner();
  info.model = s.served().name;
  info.attention = s.served().attention();
  info.attention_order = s.served().attention_order();
  info.position = s.position();
  info.state_bytes = s.charged_bytes_;
  info.created = s.created_;
  info.last_used = s.last_used_;
  info.ttl = s.ttl_;
  info.busy = s.busy_;
  return info;
}

absl::StatusOr<SessionInfo> SessionStore::Get(const std::string& id, std::string_view tenant) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::shared_ptr<Session> check;
    int64_t generation = 0;
    {
      absl::ReaderMutexLock lock(&mu_);
      auto it = sessions_.find(id);
      if (it != sessions_.end()) {
        const Session& s = *it->second;
        if (s.owner() != tenant) return NotFound(id);
        // A copy that is clean and idle here may be stale: another server sharing the
        // store may have run turns since. Busy or dirty copies are the newest.
        if (!options_.durable || s.ephemeral_ || s.busy_ || s.dirty_) return Info(s);
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
    auto loaded = Load(id, tenant);
    if (!loaded.ok()) return loaded.status();
  }
  return absl::UnavailableError(absl::StrCat("session '", id, "' is moving; retry"));
}

void SessionStore::EvictIfStale(const std::shared_ptr<Session>& s, int64_t generation) {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(s->id());
  if (it == sessions_.end() || it->second != s || s->busy_ || s->dirty_ ||
      s->generation_ != generation) {
    return;  // changed meanwhile: the next look decides again
  }
  AccountLocked(*s, -1, -s->charged_bytes_);
  charged_bytes_ -= s->charged_bytes_;
  s->charged_bytes_ = 0;
  sessions_.erase(it);
}

std::vector<SessionInfo> SessionStore::List() const {
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
    if (s->owner() == tenant) out.push_back(Info(*s));
  }
  return out;
}

absl::StatusOr<std::shared_ptr<const std::string>> SessionStore::Export(
    const std::string& id, std::string_view tenant) {
  auto lease = Claim(id, tenant);
  if (!lease.ok()) return lease.status();
  return (*lease)->Snapshot();  // the lease is released on return
}

absl::StatusOr<std::shared_ptr<Session>> SessionStore::Import(
    std::shared_ptr<const std::string> bytes, absl::Duration ttl, std::string_view tenant) {
  if (options_.catalogue == nullptr) {
    return absl::FailedPreconditionError("this server has no model catalogue to import into");
  }
  auto verified = VerifySnapshot(std::move(bytes), *options_.catalogue, max_snapshot_bytes_);
  if (!verified.ok()) return verified.status();
  if (ttl <= absl::ZeroDuration()) ttl = verified->info.ttl;
  if (ttl <= absl::ZeroDuration()) ttl = options_.default_ttl;
  if (ttl > options_.max_ttl) {
    return absl::InvalidArgumentError(absl::StrCat("ttl_seconds: ", absl::FormatDuration(ttl),
                                                   " is over the server's maximum of ",
                                                   absl::FormatDuration(options_.max_ttl)));
  }
  const int64_t charge = ChargeFor(*verified->model, verified->info.position);
  auto session = FromSnapshot(NewSessionId(), *std::move(verified), ttl);
  session->owner_ = std::string(tenant);  // the importer's, whoever exported it
  if (options_.durable) {
    if (absl::Status s = Publish(*session); !s.ok()) return s;
  }
  if (absl::Status s = Admit(session, charge); !s.ok()) return s;
  return session;
}

absl::StatusOr<std::shared_ptr<Session>> SessionStore::Fork(const std::string& id,
                                                            absl::Duration ttl,
                                                            std::string_view tenant) {
  std::shared_ptr<const std::string> bytes;
  absl::Duration original_ttl;
  {
    auto lease = Claim(id, tenant);
    if (!lease.ok()) return lease.status();
    bytes = (*lease)->Snapshot();
    original_ttl = (*lease)->ttl_;
  }
  // The copy goes through the snapshot codec: one path for every way a session is
  // duplicated, and the fork's tensors are made by its first turn, not here.
  return Import(std::move(bytes), ttl > absl::ZeroDuration() ? ttl : original_ttl, tenant);
}

int SessionStore::ExpireIdle() {
  const absl::Time now = options_.clock->Now();
  std::vector<std::shared_ptr<Session>> expired;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, s] : sessions_) {
      if (!s->busy_ && now - s->last_used_ >= s->ttl_) expired.push_back(s);
    }
    for (auto& s : expired) RemoveLocked(*s);
  }
  for (auto& s : expired) {
    // Nobody else can hold it now: a store lease still held (a session newer than its
    // stored copy) is given up, and the copy expires on its own.
    if (leases_ && !s->store_token_.empty()) leases_->Release(s->id(), s->store_token_);
  }
  if (options_.durable) (void)options_.durable->RemoveExpired();
  return int(expired.size());
}

int SessionStore::size() const {
  absl::ReaderMutexLock lock(&mu_);
  return int(sessions_.size());
}

int64_t SessionStore::charged_bytes() const {
  absl::ReaderMutexLock lock(&mu_);
  return charged_bytes_;
}

}  // namespace attnserve::session
