// The HTTP front's TurnSink: the engine pushes tokens and the final result into a
// bounded queue; the connection's thread (cpp-httplib's content provider, or the handler
// of a non-streaming request) takes them out and writes. A full queue pauses only this
// turn (a slow reader), like the gRPC stream's kMaxBufferedTokens.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "server/http/answer_stops.h"
#include "server/scheduler/scheduler.h"
#include "server/scheduler/turn.h"

namespace attnserve::http {

// Unsent tokens one HTTP turn may hold before it pauses.
inline constexpr int kMaxQueuedTokens = 32;

class TurnQueue : public scheduler::TurnSink {
 public:
  // `scheduler` (not owned) is woken when a full queue drains and on Cancel.
  explicit TurnQueue(scheduler::Scheduler* scheduler) : scheduler_(scheduler) {}

  // --- the engine thread ---
  void OnToken(scheduler::TokenEvent token) override;
  bool Full() const override;
  void OnFinish(scheduler::TurnResult result) override;

  // --- the connection's thread ---
  // The name of the model the turn runs on; set before submission, read-only after.
  void set_model_name(std::string name) { model_name_ = std::move(name); }
  const std::string& model_name() const { return model_name_; }
  // Ends the turn at the first stop string in its answer's free text (`stops`, with the
  // call's opening tag: AnswerStops), for stop strings the scheduler is not given: those of
  // a turn whose tool calls start lazily (tool_choice "auto"), which end only the text
  // before a call and never cut one. The turn is then cancelled from OnToken (and Full
  // from then on, should its control not be set yet), so the scheduler generates no token
  // after the one that completed the stop string, and it finishes kStop, as one the
  // scheduler stopped at a stop string would. Before submission.
  void StopInFreeText(AnswerStops stops) { free_text_stops_.emplace(std::move(stops)); }
  // The submitted turn's control (after StartTurn succeeded).
  void SetControl(std::shared_ptr<scheduler::TurnControl> control);
  // Stops the turn at the engine's next step (the client went away) and wakes the
  // engine, so that the session is free within one step.
  void Cancel();

  struct Batch {
    std::vector<scheduler::TokenEvent> tokens;
    std::optional<scheduler::TurnResult> result;  // set once, with or after the last tokens
  };
  // Waits until tokens or the result are there, or `timeout` passes (an empty batch),
  // and takes them.
  Batch Take(absl::Duration timeout);
  // Waits for OnFinish (after which the session is released: the scheduler frees it
  // before it tells the sink).
  void WaitFinished();

 private:
  scheduler::Scheduler* const scheduler_;
  std::string model_name_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<scheduler::TokenEvent> tokens_;      // guarded by mu_
  std::optional<scheduler::TurnResult> result_;    // guarded by mu_; taken by Take
  bool finished_ = false;                          // guarded by mu_: OnFinish ran
  std::shared_ptr<scheduler::TurnControl> control_;  // guarded by mu_
  bool cancel_requested_ = false;                  // guarded by mu_
  std::optional<AnswerStops> free_text_stops_;     // guarded by mu_ after submission
};

}  // namespace attnserve::http
