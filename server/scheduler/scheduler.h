// The engine: one thread owns every model and runs continuous batching. Each step takes
// every active turn's next piece of work (a prefill chunk, or one decode token) and runs
// all decode tokens of a model as one batched Model::Step.
//
//   Submit (any thread) -> queue -> engine thread: prefill chunks, batched decode,
//   sampling, stop checks -> TurnSink (the gRPC stream writer)
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "server/config/defaults.h"
#include "absl/types/span.h"
#include "server/grammar/vocabulary.h"
#include "server/metrics/metrics.h"
#include "server/scheduler/turn.h"
#include "server/session/session_store.h"
#include "server/tokenizer/tokenizer.h"

namespace attnserve::scheduler {

// Splits segments of rows[i] rows, in order, into consecutive groups [begin, end) of at
// most max_rows rows each, as many segments per group as fit; a segment larger than
// max_rows goes alone. Scheduler::RunBatch makes one Model::Batch call per group, so
// its workspace stays bounded when many prompts land in one step.
std::vector<std::pair<size_t, size_t>> RowGroups(absl::Span<const int64_t> rows,
                                                 int64_t max_rows);

class Scheduler {
 public:
  struct Options {
    // Prompt tokens one turn prefills per engine step (one model call).
    int prefill_chunk_tokens = config::defaults::kPrefillChunkTokens;
    // Prompt tokens all prefilling turns together prefill per engine step, oldest turn
    // first; bounds how long decoding turns wait between their tokens when many prompts
    // arrive at once. 0: no bound (every prefilling turn runs a chunk each step).
    int prefill_tokens_per_step = config::defaults::kPrefillTokensPerStep;
    // A turn whose sink stays full (its client reads nothing) this long ends with
    // DEADLINE_EXCEEDED and TurnResult::reader_stalled, releasing its session.
    absl::Duration stream_idle_timeout = config::defaults::kStreamIdleTimeout;
    // LibTorch intra-op threads for the engine.
    int threads = config::defaults::kThreads;
    // Not owned; must outlive the scheduler.
    session::SessionStore* store = nullptr;
    // Not owned; may be null (no metrics).
    metrics::Metrics* metrics = nullptr;
    // Tests only: runs each Model::Batch call instead of the model (it may call
    // Model::Batch, fail, or throw), to fail a step part-way. Null: Model::Batch.
    std::function<absl::StatusOr<at::Tensor>(const model::Model&,
                                             absl::Span<const model::Model::Segment>)>
        batch_for_testing;
  };

  // Starts the engine thread.
  explicit Scheduler(Options options);
  // Stops the engine: turns still running finish as cancelled.
  ~Scheduler();

  // Queues a turn on the session `claim` holds (SessionStore::BeginTurn). The scheduler
  // ends the turn through SessionStore::FinishTurn (which saves the session when the
  // store persists each turn and releases the claim) and then calls sink->OnFinish.
  // UNAVAILABLE once StopAccepting ran: the claim is released, the sink never called,
  // and nothing happened to the session, so a client may retry elsewhere.
  // Thread-safe; never blocks on the engine.
  absl::StatusOr<std::shared_ptr<TurnControl>> Submit(session::TurnClaim claim,
                                                      TurnRequest request,
                                                      std::shared_ptr<TurnSink> sink);

  // Re-examines paused and cancelled turns (a sink drained, a client cancelled).
  void Wake();

  // Refuses new turns (they finish at once with UNAVAILABLE), lets running ones go on.
  void StopAccepting();
  // Blocks until no turn is queued or running, or `timeout` passes; true if idle.
  bool WaitIdle(absl::Duration timeout);
  // Stops every queued or running turn at the engine's next step, at a consistent
  // position, finishing it with FinishReason::kShutdown (drain, after the grace).
  void StopTurns();

  // Turns queued or running (for metrics and shutdown).
  int active_turns() const;

 private:
  struct Turn;

  void EngineLoop();
  // One engine step over `turns`; returns false when nothing could run.
  bool Step(std::vector<std::unique_ptr<Turn>>& turns);
  // One model's share of an engine step: turns[i] appends segments[i].
  struct StepWork {
    std::vector<Turn*> turns;
    std::vector<model::Model::Segment> segments;
  };
  // Plans the turn's next prompt chunk, at most `max_tokens` (>= 1) tokens, into `work`
  // (checked, charged, checkpointed); returns how many of the budget it spent.
  int64_t PlanPrefill(Turn& turn, int64_t max_tokens, StepWork& work);
  // Plans the turn's next token into `work` (checked, charged).
  void PlanDecode(Turn& turn, StepWork& work);
  // Runs the planned segments in Model::Batch calls and hands each turn its logits: a
  // decoding turn samples; a prefilling turn samples once its prompt is all in.
  void RunBatch(const model::Model& m, StepWork& work);
  // Samples from `logits` (V; the engine's scratch copy, may be edited) and streams
  // the token; may finish the turn.
  void Emit(Turn& turn, float* logits, int64_t vocab);
  void Finish(Turn& turn, FinishReason reason, absl::Status error = absl::OkStatus());
  void PublishGauges(const std::vector<std::unique_ptr<Turn>>& turns);

  const Options options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;       // engine waits for work
  std::condition_variable idle_cv_;  // WaitIdle waits for the engine
  std::deque<std::unique_ptr<Turn>> queue_;  // guarded by mu_
  int running_ = 0;                          // guarded by mu_
  bool wake_ = false;                        // guarded by mu_
  bool stop_ = false;                        // guarded by mu_
  bool accepting_ = true;                    // guarded by mu_
  bool stop_turns_ = false;                  // guarded by mu_
  // Engine thread only: models whose turn gauges were set, so they drop back to 0.
  std::set<metrics::ModelMetrics*> gauge_models_;
  std::thread engine_;
};

}  // namespace attnserve::scheduler
