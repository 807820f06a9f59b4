#include "server/http/turn_queue.h"

namespace attnserve::http {

void TurnQueue::OnToken(scheduler::TokenEvent token) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_text_stops_.has_value() && !free_text_stops_->stopped()) {
      free_text_stops_->Pass(token.bytes);
      if (free_text_stops_->stopped()) {
        // The engine thread is running this turn: it sees the cancel at its next step,
        // before it plans the turn's next token, and needs no wake.
        cancel_requested_ = true;
        if (control_) control_->Cancel();
      }
    }
    tokens_.push_back(std::move(token));
  }
  cv_.notify_all();
}

bool TurnQueue::Full() const {
  std::lock_guard<std::mutex> lock(mu_);
  // Past a stop string in its free text the turn takes no further step, even before its
  // control is there to cancel it.
  return int(tokens_.size()) >= kMaxQueuedTokens ||
         (free_text_stops_.has_value() && free_text_stops_->stopped());
}

void TurnQueue::OnFinish(scheduler::TurnResult result) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Ended by a stop string in its free text: whether the cancel or the turn's own end
    // (max_tokens, the same token) came first, it stopped there.
    const bool cancelled_here = result.reason == scheduler::FinishReason::kCancelled &&
                                result.error.ok() && !result.reader_stalled;
    if (free_text_stops_.has_value() && free_text_stops_->stopped() &&
        (cancelled_here || result.reason == scheduler::FinishReason::kLength)) {
      result.reason = scheduler::FinishReason::kStop;
    }
    result_ = std::move(result);
    finished_ = true;
  }
  cv_.notify_all();
}

void TurnQueue::SetControl(std::shared_ptr<scheduler::TurnControl> control) {
  bool cancel;
  {
    std::lock_guard<std::mutex> lock(mu_);
    control_ = std::move(control);
    cancel = cancel_requested_;
  }
  if (cancel) Cancel();
}

void TurnQueue::Cancel() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancel_requested_ = true;
    if (control_) control_->Cancel();
  }
  scheduler_->Wake();
}

TurnQueue::Batch TurnQueue::Take(absl::Duration timeout) {
  Batch batch;
  bool was_full;
  {
    std::unique_lock<std::mutex> lock(mu_);
    auto ready = [this] { return !tokens_.empty() || result_.has_value(); };
    // An infinite timeout as a chrono duration would overflow the clock's deadline.
    if (timeout == absl::InfiniteDuration()) {
      cv_.wait(lock, ready);
    } else {
      cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout), ready);
    }
    was_full = int(tokens_.size()) >= kMaxQueuedTokens;
    batch.tokens.swap(tokens_);
    batch.result = std::move(result_);
    result_.reset();
  }
  if (was_full) scheduler_->Wake();  // the engine skipped this turn while it was full
  return batch;
}

void TurnQueue::WaitFinished() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return finished_; });
}

}  // namespace attnserve::http
