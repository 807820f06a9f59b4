#include "server/session/session_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace attnserve::session {
namespace {

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

absl::Status NotFound(const std::string& id) {
  return absl::NotFoundError(
      absl::StrCat("session_id: no session '", id, "' (never created, closed, or expired)"));
}

absl::Status Draining() {
  return absl::UnavailableError(
      "the server is shutting down; sessions are being saved, retry on another server");
}

// Bytes a session of `model` at `position` is charged: fixed states at once, KV caches
// as they grow.
int64_t ChargeFor(const ServedModel& model, int64_t position) {
  const model::Model& m = *model.model;
  return m.BreakEvenContext() > 0 ? m.StateBytes(0) : m.StateBytes(position);
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
      restore_->info.ttl == ttl_) {
    return restore_->bytes;  // unchanged since it was loaded
  }
  SnapshotInfo info;
  info.pending_token = pending_token_;
  info.ttl = ttl_;
  return std::make_shared<const std::string>(EncodeSnapshot(*model_, &state(), info));
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

absl::Status SessionStore::Admit(const std::shared_ptr<Session>& session, int64_t bytes) {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (!accepting_) return Draining();
      const bool over_count = int(sessions_.size()) >= options_.max_sessions;
      const bool over_bytes = charged_bytes_ + bytes > options_.memory_budget_bytes;
      if (!over_count && !over_bytes) {
        session->charged_bytes_ = bytes;
        charged_bytes_ += bytes;
        sessions_[session->id()] = session;
        return absl::OkStatus();
      }
      if (!options_.durable || sessions_.empty()) {
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
    // used idle session, then look again.
    if (!SpillOne()) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "memory budget: every session in memory is busy or could not be saved to ",
          store_name(), "; a '", session->served().name, "' session needs ", bytes,
          " bytes of state"));
    }
  }
}

absl::StatusOr<std::shared_ptr<Session>> SessionStore::Create(
    std::shared_ptr<const ServedModel> model, absl::Duration ttl) {
  if (ttl <= absl::ZeroDuration()) ttl = options_.default_ttl;
  if (ttl > options_.max_ttl) {
    return absl::InvalidArgumentError(absl::StrCat("ttl_seconds: ", absl::FormatDuration(ttl),
                                                   " is over the server's maximum of ",
                                                   absl::FormatDuration(options_.max_ttl)));
  }
  const int64_t bytes = ChargeFor(*model, 0);
  auto session = std::make_shared<Session>(NewSessionId(), model, options_.clock->Now(), ttl);
  if (absl::Status s = Admit(session, bytes); !s.ok()) return s;
  return session;
}

absl::StatusOr<std::shared_ptr<Session>> SessionStore::Load(const std::string& id) {
  if (!options_.durable || options_.catalogue == nullptr) return NotFound(id);
  const absl::Time start = absl::Now();
  auto bytes = options_.durable->Get(id);
  const bool found = bytes.ok();
  if (store_metrics_) {
    const bool ok = bytes.ok() || absl::IsNotFound(bytes.status());
    store_metrics_->ObserveRead(absl::Now() - start, found ? int64_t(bytes->size()) : 0, ok,
                                found);
  }
  if (absl::IsNotFound(bytes.status())) return NotFound(id);
  if (!bytes.ok()) return bytes.status();
  auto verified = VerifySnapshot(std::make_shared<const std::string>(*std::move(bytes)),
                                 *options_.catalogue, max_snapshot_bytes_);
  if (!verified.ok()) {
    return absl::Status(verified.status().code(),
                        absl::StrCat("session '", id, "' in ", store_name(), ": ",
                                     verified.status().message()));
  }
  absl::Duration ttl = verified->info.ttl;
  if (ttl <= absl::ZeroDuration() || ttl > options_.max_ttl) ttl = options_.default_ttl;
  auto session = std::make_shared<Session>(id, verified->model, options_.clock->Now(), ttl);
  session->pending_token_ = verified->info.pending_token;
  const int64_t charge = ChargeFor(*verified->model, verified->info.position);
  session->restore_ = std::make_shared<const VerifiedSnapshot>(*std::move(verified));
  session->PublishProgress();
  {
    absl::MutexLock lock(&mu_);
    auto it = sessions_.find(id);  // another thread loaded it meanwhile
    if (it != sessions_.end()) return it->second;
  }
  if (absl::Status s = Admit(session, charge); !s.ok()) return s;
  return session;
}

absl::StatusOr<TurnLease> SessionStore::Claim(const std::string& id) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    {
      absl::MutexLock lock(&mu_);
      if (!accepting_) return Draining();
      auto it = sessions_.find(id);
      if (it != sessions_.end()) {
        Session& s = *it->second;
        if (s.busy_) {
          return absl::FailedPreconditionError(absl::StrCat(
              "session '", id, "' already has a turn in flight; wait for it to end"));
        }
        s.busy_ = true;
        s.last_used_ = options_.clock->Now();
        return TurnLease(this, it->second);
      }
    }
    auto loaded = Load(id);
    if (!loaded.ok()) return loaded.status();
    // Loaded and admitted: claim it on the next pass (it may have been claimed or
    // spilled again meanwhile, in which case that pass says so or loads it again).
  }
  return absl::UnavailableError(absl::StrCat("session '", id, "' is moving between memory and ",
                                             store_name(), "; retry"));
}

absl::StatusOr<TurnLease> SessionStore::BeginTurn(const std::string& id) { return Claim(id); }

absl::Status SessionStore::Charge(Session& s, int64_t bytes) {
  absl::MutexLock lock(&mu_);
  const int64_t total = charged_bytes_ - s.charged_bytes_ + bytes;
  if (bytes > s.charged_bytes_ && total > options_.memory_budget_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "memory budget: session '", s.id(), "' would grow to ", bytes,
        " bytes of state; the server's budget of ", options_.memory_budget_bytes,
        " bytes would be exceeded by ", total - options_.memory_budget_bytes));
  }
  if (!s.closed()) {
    charged_bytes_ = total;
    s.charged_bytes_ = bytes;
  }
  return absl::OkStatus();
}

void SessionStore::EndTurn(Session& s) {
  s.PublishProgress();
  absl::MutexLock lock(&mu_);
  s.busy_ = false;
  s.last_used_ = options_.clock->Now();
}

absl::Status SessionStore::Write(const std::string& id, const std::string& bytes,
                                 absl::Duration ttl) {
  const absl::Time start = absl::Now();
  absl::Status s = options_.durable->Put(id, bytes, ttl);
  if (store_metrics_) store_metrics_->ObserveWrite(absl::Now() - start, int64_t(bytes.size()), s.ok());
  return s;
}

absl::Status SessionStore::DeleteStored(const std::string& id) {
  if (!options_.durable) return absl::OkStatus();
  const absl::Time start = absl::Now();
  absl::Status s = options_.durable->Delete(id);
  if (store_metrics_) store_metrics_->ObserveDelete(absl::Now() - start, s.ok());
  return s;
}

void SessionStore::FinishTurn(TurnLease lease, std::function<void()> then) {
  Session& s = lease.session();
  bool draining;
  {
    absl::ReaderMutexLock lock(&mu_);
    draining = !accepting_;
  }
  const bool save = options_.durable != nullptr &&
                    (options_.persist == PersistMode::kEachTurn || draining);
  if (!save || lease.close_on_release() || s.closed()) {
    lease.Release();
    then();
    return;
  }
  auto bytes = s.Snapshot();
  const absl::Duration ttl = s.ttl_;  // fixed at creation
  auto write = [this, bytes, ttl, lease = std::make_shared<TurnLease>(std::move(lease)),
                then = std::move(then)] {
    absl::Status st = Write((*lease)->id(), *bytes, ttl);
    if (!st.ok()) {
      // The session lives on in memory; the next completed turn tries again.
      std::fprintf(stderr, "attnserve: session %s not saved after its turn: %s\n",
                   (*lease)->id().c_str(), std::string(st.message()).c_str());
    }
    lease->Release();
    then();
  };
  {
    std::lock_guard<std::mutex> lock(writer_mu_);
    writes_.push_back(std::move(write));
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

void SessionStore::RemoveLocked(Session& s) {
  s.closed_.store(true);
  charged_bytes_ -= s.charged_bytes_;
  s.charged_bytes_ = 0;
  sessions_.erase(s.id());
}

absl::Status SessionStore::Close(const std::string& id) {
  bool in_memory = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = sessions_.find(id);
    if (it != sessions_.end()) {
      std::shared_ptr<Session> keep = it->second;  // erase must not destroy it under us
      RemoveLocked(*keep);
      in_memory = true;
    }
  }
  if (!options_.durable) return in_memory ? absl::OkStatus() : NotFound(id);
  if (!in_memory) {
    // Spilled (or saved by another process): it exists if the store has it.
    auto stored = options_.durable->Get(id);
    if (absl::IsNotFound(stored.status())) return NotFound(id);
    if (!stored.ok()) return stored.status();
  }
  return DeleteStored(id);
}

SessionInfo SessionStore::Info(const Session& s) const {
  SessionInfo info;
  info.id = s.id();
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

absl::StatusOr<SessionInfo> SessionStore::Get(const std::string& id) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    {
      absl::ReaderMutexLock lock(&mu_);
      auto it = sessions_.find(id);
      if (it != sessions_.end()) return Info(*it->second);
      if (!accepting_) return NotFound(id);
    }
    auto loaded = Load(id);
    if (!loaded.ok()) return loaded.status();
  }
  return absl::UnavailableError(absl::StrCat("session '", id, "' is moving; retry"));
}

std::vector<SessionInfo> SessionStore::List() const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<SessionInfo> out;
  out.reserve(sessions_.size());
  for (const auto& [id, s] : sessions_) out.push_back(Info(*s));
  return out;
}

absl::StatusOr<std::shared_ptr<const std::string>> SessionStore::Export(const std::string& id) {
  auto lease = Claim(id);
  if (!lease.ok()) return lease.status();
  return (*lease)->Snapshot();  // the lease is released on return
}

absl::StatusOr<std::shared_ptr<Session>> SessionStore::Import(
    std::shared_ptr<const std::string> bytes, absl::Duration ttl) {
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
  auto session = std::make_shared<Session>(NewSessionId(), verified->model,
                                           options_.clock->Now(), ttl);
  session->pending_token_ = verified->info.pending_token;
  const int64_t charge = ChargeFor(*verified->model, verified->info.position);
  session->restore_ = std::make_shared<const VerifiedSnapshot>(*std::move(verified));
  session->PublishProgress();
  if (absl::Status s = Admit(session, charge); !s.ok()) return s;
  return session;
}

absl::StatusOr<std::shared_ptr<Session>> SessionStore::Fork(const std::string& id,
                                                            absl::Duration ttl) {
  std::shared_ptr<const std::string> bytes;
  absl::Duration original_ttl;
  {
    auto lease = Claim(id);
    if (!lease.ok()) return lease.status();
    bytes = (*lease)->Snapshot();
    original_ttl = (*lease)->ttl_;
  }
  // The copy goes through the snapshot codec: one path for every way a session is
  // duplicated, and the fork's tensors are made by its first turn, not here.
  return Import(std::move(bytes), ttl > absl::ZeroDuration() ? ttl : original_ttl);
}

int SessionStore::ExpireIdle() {
  const absl::Time now = options_.clock->Now();
  std::vector<std::string> expired;
  {
    absl::MutexLock lock(&mu_);
    std::vector<std::shared_ptr<Session>> victims;
    for (const auto& [id, s] : sessions_) {
      if (!s->busy_ && now - s->last_used_ >= s->ttl_) victims.push_back(s);
    }
    for (auto& s : victims) {
      expired.push_back(s->id());
      RemoveLocked(*s);
    }
  }
  for (const std::string& id : expired) (void)DeleteStored(id);
  if (options_.durable) (void)options_.durable->RemoveExpired();
  return int(expired.size());
}

bool SessionStore::SpillOne() {
  std::shared_ptr<Session> victim;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, s] : sessions_) {
      if (s->busy_) continue;
      if (!victim || s->last_used_ < victim->last_used_) victim = s;
    }
    if (!victim) return false;
    victim->busy_ = true;
  }
  TurnLease lease(this, victim);
  absl::Status written = Write(victim->id(), *victim->Snapshot(), victim->ttl_);
  if (!written.ok()) {
    std::fprintf(stderr, "attnserve: cannot spill session %s: %s\n", victim->id().c_str(),
                 std::string(written.message()).c_str());
    return false;
  }
  {
    absl::MutexLock lock(&mu_);
    // Out of memory now; it lives on in the store, so it is not closed.
    charged_bytes_ -= victim->charged_bytes_;
    victim->charged_bytes_ = 0;
    sessions_.erase(victim->id());
    victim->busy_ = false;
  }
  lease.session_ = nullptr;  // nothing left to release
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
      if (!s->busy_ && now - s->last_used_ >= options_.spill_after) {
        s->busy_ = true;
        idle.push_back(s);
      }
    }
  }
  int spilled = 0;
  for (auto& s : idle) {
    absl::Status written = Write(s->id(), *s->Snapshot(), s->ttl_);
    absl::MutexLock lock(&mu_);
    s->busy_ = false;
    if (!written.ok() || s->closed()) continue;
    charged_bytes_ -= s->charged_bytes_;
    s->charged_bytes_ = 0;
    sessions_.erase(s->id());
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
      if (s->busy_) continue;
      s->busy_ = true;
      all.push_back(s);
    }
  }
  int saved = 0;
  absl::Status first_error;
  for (auto& s : all) {
    absl::Status st = Write(s->id(), *s->Snapshot(), s->ttl_);
    if (st.ok()) {
      ++saved;
    } else if (first_error.ok()) {
      first_error = st;
    }
    absl::MutexLock lock(&mu_);
    s->busy_ = false;
  }
  if (!first_error.ok()) return first_error;
  return saved;
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
