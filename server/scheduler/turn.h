// What one turn asks for, what it streams, and how it ends: the plain types shared by
// the scheduler and the service layer. No protobuf, no tensors.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/grammar/constraint.h"
#include "server/model/logprobs.h"
#include "server/model/sampler.h"
#include "server/session/session_store.h"

namespace attnserve::scheduler {

struct TurnRequest {
  // Prompt tokens appended to the session (may be empty when the session has a pending
  // token to continue from).
  std::vector<int32_t> prompt;
  model::SamplingParams sampling;
  // Tokens to generate at most (>= 1).
  int max_tokens = 128;
  // Generation stops after the token whose bytes complete any of these in the streamed
  // bytes (the token is streamed whole; a stop string may span tokens).
  std::vector<std::string> stop;
  // Report the model's own log p of each token (log-softmax of its logits, before
  // temperature, top_k, top_p and ignore_eos) and, with it, the top_logprobs most likely
  // alternatives (0..20; admission checks the range and that logprobs is set).
  bool logprobs = false;
  int top_logprobs = 0;
  // Never sample an end-of-sequence id (benchmarks: every turn runs to max_tokens).
  bool ignore_eos = false;
  // What the answer must match (server/DESIGN.md §12): each step's logits are masked to
  // the ids the grammar allows before sampling; the turn stops (kStop) once the grammar
  // is complete with nothing allowed after it, and end-of-sequence is allowed only where
  // it may end. logprobs stay the model's own (before the mask).
  std::optional<grammar::Constraint> constraint;
  // When the request arrived (for time to first token) and when it must be over.
  absl::Time arrival = absl::InfinitePast();
  absl::Time deadline = absl::InfiniteFuture();
};

struct TokenEvent {
  int32_t id = 0;
  // What the token adds to the session's text (tokenizer::StreamDecoder); empty for
  // special tokens.
  std::string bytes;
  std::optional<float> logprob;  // set when the turn asked for logprobs
  // The turn's top_logprobs most likely tokens at this position, by logprob descending
  // (ties: lower id first); special tokens included.
  std::vector<model::TokenLogprob> top_logprobs;
  // The bytes each of top_logprobs would have added here, in the same order.
  std::vector<std::string> top_logprob_bytes;
};

enum class FinishReason {
  kStop,
  kLength,
  kCancelled,
  kError,
  kShutdown,  // the server stopped the turn at a consistent position while draining
};

struct TurnResult {
  FinishReason reason = FinishReason::kError;
  absl::Status error;  // set when reason == kError
  // Prompt tokens appended to the session (all of them unless the turn stopped early).
  int prompt_tokens = 0;
  int generated_tokens = 0;
  int64_t session_position = 0;
  absl::Duration time_to_first_token = absl::ZeroDuration();
  // The turn ended because its sink stayed full for Options::stream_idle_timeout: the
  // client stopped reading, and the sink should end the call rather than wait for it.
  bool reader_stalled = false;
};

// Where a turn's tokens go: the gRPC stream in the server, a recorder in tests.
// Called on the engine thread; implementations must not block.
class TurnSink {
 public:
  virtual ~TurnSink() = default;
  // One generated token, in order.
  virtual void OnToken(TokenEvent token) = 0;
  // True while the sink holds as many unsent tokens as it will buffer: the engine then
  // skips this turn (a slow reader pauses only its own session) until Scheduler::Wake.
  virtual bool Full() const = 0;
  // Exactly once, last.
  virtual void OnFinish(TurnResult result) = 0;
};

// The submitter's handle on a queued or running turn. Thread-safe.
class TurnControl {
 public:
  // Stops the turn at the engine's next step (FinishReason::kCancelled).
  void Cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }

 private:
  std::atomic<bool> cancelled_{false};
};

}  // namespace attnserve::scheduler
