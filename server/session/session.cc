#include "server/session/session.h"

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "server/common/torch_status.h"

namespace attnserve::session {

Session::Session(std::string id, std::string owner,
                 std::shared_ptr<const catalogue::ServedModel> model, absl::Time now,
                 absl::Duration ttl)
    : id_(std::move(id)),
      owner_(std::move(owner)),
      model_(std::move(model)),
      created_(now),
      last_used_(now),
      ttl_(ttl) {}

absl::Status Session::Materialize() {
  if (state_) return absl::OkStatus();
  // A verified snapshot cannot disagree with its model; what can fail is allocating its
  // tensors (memory pressure). That ends this turn, not the server.
  auto made = CatchTorch("allocating the session's state", [&] {
    return restore_ ? snapshot::RestoreSnapshotState(*restore_)
                    : absl::StatusOr<std::unique_ptr<model::DecodeState>>(
                          model_->model->NewState());
  });
  if (!made.ok()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "session '", id_, "': cannot make its state: ", made.status().message()));
  }
  state_ = *std::move(made);
  restore_.reset();
  return absl::OkStatus();
}

model::DecodeState& Session::state() {
  if (absl::Status s = Materialize(); !s.ok()) {
    // A caller that cannot handle the failure: an impossible state for the server,
    // whose engine materializes every session before its turn.
    std::fprintf(stderr, "attnserve: %s\n", std::string(s.message()).c_str());
    std::abort();
  }
  return *state_;
}

void Session::PublishProgress() {
  const int64_t in_state =
      state_ ? state_->position() : (restore_ ? restore_->info.position : 0);
  position_.store(in_state + (pending_token_ ? 1 : 0));
}

absl::StatusOr<std::shared_ptr<const std::string>> Session::Snapshot() {
  if (!state_ && restore_ && restore_->info.pending_token == pending_token_ &&
      restore_->info.ttl == ttl_ && restore_->info.owner == owner_) {
    return restore_->bytes.Whole();  // unchanged since it was loaded
  }
  if (restore_) {
    if (absl::Status s = Materialize(); !s.ok()) return s;
  }
  snapshot::SnapshotInfo info;
  info.pending_token = pending_token_;
  info.ttl = ttl_;
  info.owner = owner_;
  return std::make_shared<const std::string>(
      snapshot::EncodeSnapshot(*model_, state_.get(), info));  // null: never run
}

}  // namespace attnserve::session
