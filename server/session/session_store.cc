#include "server/session/session_store.h"

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace attnserve::session {
namespace {

// 128 bits from a CSPRNG-seeded generator, as 32 lowercase hex digits.
std::string NewSessionId() {
  static absl::Mutex mu(absl::kConstInit);
  static absl::BitGen* gen = new absl::BitGen;
  absl::MutexLock lock(&mu);
  const uint64_t hi = absl::Uniform<uint64_t>(*gen), lo = absl::Uniform<uint64_t>(*gen);
  return absl::StrFormat("%016x%016x", hi, lo);
}

}  // namespace

Session::Session(std::string id, std::shared_ptr<const ServedModel> model, absl::Time now,
                 absl::Duration ttl)
    : id_(std::move(id)), model_(std::move(model)), created_(now), last_used_(now), ttl_(ttl) {}

model::DecodeState& Session::state() {
  if (!state_) state_ = model_->model->NewState();
  return *state_;
}

void Session::PublishProgress() {
  position_.store((state_ ? state_->position() : 0) + (pending_token_ ? 1 : 0));
}

SessionStore::SessionStore(Options options) : options_(options) {}

absl::StatusOr<std::shared_ptr<Session>> SessionStore::Create(
    std::shared_ptr<const ServedModel> model, absl::Duration ttl) {
  if (ttl <= absl::ZeroDuration()) ttl = options_.default_ttl;
  if (ttl > options_.max_ttl) {
    return absl::InvalidArgumentError(absl::StrCat("ttl_seconds: ", absl::FormatDuration(ttl),
                                                   " is over the server's maximum of ",
                                                   absl::FormatDuration(options_.max_ttl)));
  }
  // Fixed-state modules know their bytes now; KV caches start empty and are charged as
  // they grow.
  const int64_t bytes = model->model->BreakEvenContext() > 0 ? model->model->StateBytes(0) : 0;
  auto session = std::make_shared<Session>(NewSessionId(), model, options_.clock->Now(), ttl);
  absl::MutexLock lock(&mu_);
  if (int(sessions_.size()) >= options_.max_sessions) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "max_sessions: the server already holds ", sessions_.size(),
        " sessions (its limit); close idle sessions or wait for their TTL"));
  }
  if (charged_bytes_ + bytes > options_.memory_budget_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "memory budget: a '", model->name, "' session needs ", bytes,
        " bytes of state; ", charged_bytes_, " of the server's ",
        options_.memory_budget_bytes, " bytes are in use"));
  }
  session->charged_bytes_ = bytes;
  charged_bytes_ += bytes;
  sessions_[session->id()] = session;
  return session;
}

absl::StatusOr<std::shared_ptr<Session>> SessionStore::BeginTurn(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) {
    return absl::NotFoundError(absl::StrCat("session_id: no session '", id,
                                            "' (never created, closed, or expired)"));
  }
  Session& s = *it->second;
  if (s.busy_) {
    return absl::FailedPreconditionError(
        absl::StrCat("session '", id, "' already has a turn in flight; wait for it to end"));
  }
  s.busy_ = true;
  s.last_used_ = options_.clock->Now();
  return it->second;
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

void SessionStore::RemoveLocked(Session& s) {
  s.closed_.store(true);
  charged_bytes_ -= s.charged_bytes_;
  s.charged_bytes_ = 0;
  sessions_.erase(s.id());
}

absl::Status SessionStore::Close(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) {
    return absl::NotFoundError(absl::StrCat("session_id: no session '", id, "'"));
  }
  std::shared_ptr<Session> keep = it->second;  // erase must not destroy it under us
  RemoveLocked(*keep);
  return absl::OkStatus();
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

absl::StatusOr<SessionInfo> SessionStore::Get(const std::string& id) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) {
    return absl::NotFoundError(absl::StrCat("session_id: no session '", id, "'"));
  }
  return Info(*it->second);
}

std::vector<SessionInfo> SessionStore::List() const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<SessionInfo> out;
  out.reserve(sessions_.size());
  for (const auto& [id, s] : sessions_) out.push_back(Info(*s));
  return out;
}

int SessionStore::ExpireIdle() {
  const absl::Time now = options_.clock->Now();
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<Session>> expired;
  for (const auto& [id, s] : sessions_) {
    if (!s->busy_ && now - s->last_used_ >= s->ttl_) expired.push_back(s);
  }
  for (auto& s : expired) RemoveLocked(*s);
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
