#include "server/scheduler/scheduler.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "server/common/torch_status.h"
#include "server/model/logprobs.h"
#include "server/scheduler/stop_matcher.h"
#include "server/scheduler/vocabularies.h"
#include "server/tokenizer/tokenizer.h"

namespace attnserve::scheduler {

struct Scheduler::Turn {
  session::TurnClaim claim;
  std::shared_ptr<session::Session> session;  // the claim's
  TurnRequest request;
  std::shared_ptr<TurnSink> sink;
  std::shared_ptr<TurnControl> control;
  metrics::ModelMetrics* metrics = nullptr;  // null without metrics
  std::unique_ptr<model::Sampler> sampler;
  std::vector<int32_t> to_prefill;  // the session's pending token, then the prompt
  bool had_pending = false;         // to_prefill starts with the session's pending token
  size_t prefilled = 0;
  // The session's state before the turn's first model call, until the whole prompt is
  // in, when the prompt takes several calls: a turn that ends sooner (cancel, deadline,
  // budget, model error) rewinds to it.
  std::unique_ptr<model::DecodeState> checkpoint;
  std::optional<int32_t> next_input;  // last emitted token, not yet in the state
  // The state's position when the turn's segment was planned into this step's model
  // call, until the turn takes the call's result. A turn that ends in between (the call
  // failed or threw, or the step threw before the turn's logits) finds its state as it
  // was if the position is unchanged (Model::Batch); else the state may hold any part
  // of the segment.
  std::optional<int64_t> position_before_call;
  int generated = 0;
  // The bytes of each generated token (set up with the sampler: the session's text has
  // started unless it is at position 0 with nothing but special tokens in the prompt).
  std::optional<tokenizer::StreamDecoder> decoder;
  std::optional<StopMatcher> stops;
  std::optional<grammar::ConstraintState> constraint;  // request.constraint's progress
  absl::Time first_token = absl::InfinitePast();
  absl::Time last_token = absl::InfinitePast();
  absl::Time full_since = absl::InfiniteFuture();  // when the sink was first seen full
  bool reader_stalled = false;
  bool done = false;

  bool prefilling() const { return prefilled < to_prefill.size(); }
  const model::Model& model() const { return session->model(); }
};

Scheduler::Scheduler(Options options) : options_(options) {
  engine_ = std::thread([this] { EngineLoop(); });
}

Scheduler::~Scheduler() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  engine_.join();
}

absl::StatusOr<std::shared_ptr<TurnControl>> Scheduler::Submit(session::TurnClaim claim,
                                                               TurnRequest request,
                                                               std::shared_ptr<TurnSink> sink) {
  // A session loaded from a snapshot makes its tensors here, on the submitting thread
  // that holds its claim, so the engine thread never copies a restored state (hundreds
  // of MB at real sizes) while other sessions wait for their next token. A failure is
  // left to the engine, which tries again and ends the turn with it.
  (void)claim->Materialize();
  auto turn = std::make_unique<Turn>();
  turn->control = std::make_shared<TurnControl>();
  turn->session = claim.shared();
  turn->claim = std::move(claim);
  turn->request = std::move(request);
  turn->sink = std::move(sink);
  std::shared_ptr<TurnControl> control = turn->control;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!accepting_ || stop_) {
      // Refused before anything ran: no final message (the client retries the turn);
      // the claim is released when `turn` goes.
      return absl::UnavailableError("the server is shutting down; no new turns");
    }
    queue_.push_back(std::move(turn));
    ++running_;
  }
  cv_.notify_all();
  return control;
}

void Scheduler::Wake() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    wake_ = true;
  }
  cv_.notify_all();
}

void Scheduler::StopAccepting() {
  std::lock_guard<std::mutex> lock(mu_);
  accepting_ = false;
}

bool Scheduler::WaitIdle(absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout),
                           [this] { return running_ == 0; });
}

void Scheduler::StopTurns() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_turns_ = true;
  }
  cv_.notify_all();
}

int Scheduler::active_turns() const {
  std::lock_guard<std::mutex> lock(mu_);
  return running_;
}

void Scheduler::EngineLoop() {
  at::set_num_threads(std::max(1, options_.threads));
  std::vector<std::unique_ptr<Turn>> turns;
  bool progressed = true;
  while (true) {
    std::vector<std::unique_ptr<Turn>> fresh;
    bool stopping, stop_turns;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!progressed) {
        // Nothing could run (idle, or every turn waits on its reader): sleep until new
        // work, a wake-up, or a periodic look at deadlines.
        cv_.wait_for(lock, std::chrono::milliseconds(100),
                     [this] { return stop_ || stop_turns_ || wake_ || !queue_.empty(); });
      }
      wake_ = false;
      stopping = stop_;
      stop_turns = stop_turns_;
      stop_turns_ = false;
      while (!queue_.empty()) {
        fresh.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    for (auto& t : fresh) turns.push_back(std::move(t));
    if (stopping || stop_turns) {
      // Every step leaves a session consistent (whole chunks and tokens), so any turn
      // can stop here; its session keeps what it has consumed.
      for (auto& t : turns) {
        Finish(*t, stopping ? FinishReason::kCancelled : FinishReason::kShutdown);
      }
      progressed = false;
    } else {
      // LibTorch throws (an allocation that fails, a bug): a step that throws ends the
      // turns it was running with INTERNAL, rewinding those still in their prompt and
      // closing the sessions whose state it left part-way (Finish); the engine and the
      // other sessions carry on.
      absl::StatusOr<bool> stepped = CatchTorch("engine step", [&] { return Step(turns); });
      if (stepped.ok()) {
        progressed = *stepped;
      } else {
        std::fprintf(stderr, "attnserve: %s\n", std::string(stepped.status().message()).c_str());
        for (auto& t : turns) Finish(*t, FinishReason::kError, stepped.status());
        progressed = false;
      }
    }
    const size_t before = turns.size();
    turns.erase(std::remove_if(turns.begin(), turns.end(),
                               [](const std::unique_ptr<Turn>& t) { return t->done; }),
                turns.end());
    PublishGauges(turns);
    if (turns.size() != before || stopping) {
      std::lock_guard<std::mutex> lock(mu_);
      running_ -= int(before - turns.size());
      if (running_ == 0) idle_cv_.notify_all();
    }
    if (stopping) return;
  }
}

bool Scheduler::Step(std::vector<std::unique_ptr<Turn>>& turns) {
  const absl::Time now = absl::Now();
  bool progressed = false;
  // The step's prompt-token budget, spent on prefilling turns in arrival order (`turns`
  // keeps it); a turn left without budget waits for the next step.
  int64_t prefill_budget = options_.prefill_tokens_per_step > 0
                               ? options_.prefill_tokens_per_step
                               : std::numeric_limits<int64_t>::max();
  // Every turn's work this step, one batch per model: decoding turns append their next
  // token, prefilling turns a chunk of their prompt (server/DESIGN.md §4).
  std::map<const model::Model*, StepWork> work;
  for (auto& owned : turns) {
    Turn& t = *owned;
    if (t.sampler == nullptr && !t.done) {  // first sight of this turn: set it up
      auto sampler = model::Sampler::Create(t.request.sampling);
      if (!sampler.ok()) {
        Finish(t, FinishReason::kError, sampler.status());
        continue;
      }
      t.sampler = std::move(sampler).value();
      // A session loaded from a snapshot makes its tensors now: under memory pressure
      // that fails this turn (the session stays as it was), not the server.
      if (absl::Status made = t.session->Materialize(); !made.ok()) {
        Finish(t, FinishReason::kError, made);
        continue;
      }
      std::optional<int32_t>& pending = t.session->pending_token();
      if (pending) t.to_prefill.push_back(*pending);
      t.had_pending = pending.has_value();
      pending.reset();
      t.to_prefill.insert(t.to_prefill.end(), t.request.prompt.begin(),
                          t.request.prompt.end());
      // Generated bytes continue the session's text: it has started once the session
      // holds a token, and the prompt's ids (the client's own text) move the decoder on.
      const tokenizer::Tokenizer& tok = *t.session->served().tokenizer;
      t.decoder.emplace(tok, /*text_started=*/t.had_pending ||
                                 t.session->state().position() > 0);
      for (size_t i = 0; i < t.request.prompt.size() && t.decoder->at_start(); ++i) {
        t.decoder->Next(t.request.prompt[i]);
      }
      t.stops.emplace(t.request.stop);
      if (t.request.constraint) t.constraint.emplace(*t.request.constraint);
      if (options_.metrics != nullptr) {
        t.metrics = &options_.metrics->ForModel(t.session->served().name,
                                                t.session->served().attention());
        t.metrics->AddPromptTokens(int64_t(t.request.prompt.size()));
      }
      if (t.to_prefill.empty()) {
        Finish(t, FinishReason::kError,
               absl::InvalidArgumentError("prompt: empty, and the session has no token to "
                                          "continue from"));
        continue;
      }
    }
    if (t.done) continue;
    if (t.control->cancelled() || t.session->closed() || now > t.request.deadline) {
      Finish(t, FinishReason::kCancelled);
      continue;
    }
    if (t.prefilling()) {
      if (prefill_budget > 0) {
        prefill_budget -= PlanPrefill(t, prefill_budget, work[&t.model()]);
        progressed = true;
      }
    } else if (!t.sink->Full()) {
      t.full_since = absl::InfiniteFuture();
      PlanDecode(t, work[&t.model()]);
    } else if (t.full_since == absl::InfiniteFuture()) {
      t.full_since = now;
    } else if (now - t.full_since >= options_.stream_idle_timeout) {
      t.reader_stalled = true;
      Finish(t, FinishReason::kCancelled,
             absl::DeadlineExceededError(absl::StrCat(
                 "the client read nothing for ",
                 absl::FormatDuration(options_.stream_idle_timeout),
                 " (--stream_idle_timeout); the turn was stopped")));
    }
  }
  for (auto& [model, planned] : work) {
    if (planned.turns.empty()) continue;
    RunBatch(*model, planned);
    progressed = true;
  }
  return progressed;
}

namespace {

// What the memory budget charges a session before a step appends `extra` tokens: the
// memory its state will actually hold (a KV cache's capacity grows by doubling), and
// never less than the nominal size.
int64_t ChargeAfter(const model::Model& m, const model::DecodeState& state, int64_t extra) {
  return std::max(m.StateBytes(state.position() + extra), state.BytesAfter(extra));
}

}  // namespace

int64_t Scheduler::PlanPrefill(Turn& t, int64_t max_tokens, StepWork& work) {
  const model::Model& m = t.model();
  const size_t n = std::min({t.to_prefill.size() - t.prefilled,
                             size_t(std::max(1, options_.prefill_chunk_tokens)),
                             size_t(std::max<int64_t>(1, max_tokens))});
  model::DecodeState& state = t.session->state();
  const auto chunk = absl::MakeConstSpan(t.to_prefill).subspan(t.prefilled, n);
  // Checked here, alone, so a bad chunk ends only its own turn, before any state moves.
  if (absl::Status s = m.CheckAppend(state, chunk); !s.ok()) {
    Finish(t, FinishReason::kError, s);
    return int64_t(n);
  }
  if (absl::Status s = options_.store->Charge(*t.session, ChargeAfter(m, state, int64_t(n)));
      !s.ok()) {
    Finish(t, FinishReason::kError, s);
    return 0;
  }
  // Only a prompt that takes several calls can end half-way in (a cancel, a deadline, the
  // budget, a failed step in a later chunk); a prompt done in one call is checked above
  // before it touches the state (a call that then fails part-way costs the session:
  // Finish). Skipping the copy there keeps it off the time to first token of short turns
  // (about 1 ms at 3.5 MB of state).
  if (t.prefilled == 0 && n < t.to_prefill.size()) t.checkpoint = state.Checkpoint();
  t.position_before_call = state.position();
  work.turns.push_back(&t);
  work.segments.push_back({&state, chunk});
  return int64_t(n);
}

void Scheduler::PlanDecode(Turn& t, StepWork& work) {
  model::DecodeState& state = t.session->state();
  const auto token = absl::MakeConstSpan(&*t.next_input, 1);
  if (absl::Status s = t.model().CheckAppend(state, token); !s.ok()) {
    Finish(t, FinishReason::kError, s);
    return;
  }
  if (absl::Status s = options_.store->Charge(*t.session, ChargeAfter(t.model(), state, 1));
      !s.ok()) {
    Finish(t, FinishReason::kError, s);
    return;
  }
  t.position_before_call = state.position();
  work.turns.push_back(&t);
  work.segments.push_back({&state, token});
}

std::vector<std::pair<size_t, size_t>> RowGroups(absl::Span<const int64_t> rows,
                                                 int64_t max_rows) {
  std::vector<std::pair<size_t, size_t>> groups;
  size_t begin = 0;
  while (begin < rows.size()) {
    size_t end = begin;
    int64_t sum = 0;
    while (end < rows.size() && (end == begin || sum + rows[end] <= max_rows)) sum += rows[end++];
    groups.emplace_back(begin, end);
    begin = end;
  }
  return groups;
}

void Scheduler::RunBatch(const model::Model& m, StepWork& work) {
  // One Model::Batch per group of at most kMaxRowsPerCall rows (one group unless the
  // prefill budget is off and many prompts land at once): the workspace stays bounded.
  constexpr int64_t kMaxRowsPerCall = 2048;
  std::vector<int64_t> rows;
  for (const auto& segment : work.segments) rows.push_back(int64_t(segment.tokens.size()));
  for (const auto& [first, end] : RowGroups(rows, kMaxRowsPerCall)) {
    const auto turns = absl::MakeSpan(work.turns).subspan(first, end - first);
    const auto segments = absl::MakeConstSpan(work.segments).subspan(first, end - first);
    auto logits = options_.batch_for_testing ? options_.batch_for_testing(m, segments)
                                             : m.Batch(segments);
    if (!logits.ok()) {
      for (Turn* t : turns) Finish(*t, FinishReason::kError, logits.status());
      continue;
    }
    int decoding = 0;
    for (Turn* t : turns) decoding += t->prefilling() ? 0 : 1;
    if (decoding > 0 && turns[0]->metrics != nullptr) {
      turns[0]->metrics->ObserveBatchSize(decoding);
    }
    at::Tensor out = logits->contiguous();  // (S, V)
    const int64_t vocab = out.size(1);
    for (size_t i = 0; i < turns.size(); ++i) {
      Turn& t = *turns[i];
      t.position_before_call.reset();  // the segment is in: accounted for just below
      if (t.prefilling()) {
        t.prefilled += work.segments[first + i].tokens.size();
        t.session->PublishProgress();
        if (t.prefilling()) continue;  // more prompt next step
        t.checkpoint.reset();  // the prompt is in: from here on the turn keeps what it did
      } else {
        t.next_input.reset();  // now in the state
        t.session->PublishProgress();
      }
      Emit(t, out.data_ptr<float>() + int64_t(i) * vocab, vocab);
    }
  }
}

void Scheduler::Emit(Turn& t, float* logits, int64_t vocab) {
  const auto row = absl::MakeConstSpan(logits, size_t(vocab));
  const tokenizer::Tokenizer& tok = *t.session->served().tokenizer;
  // ignore_eos keeps the sampler off every end-of-sequence id, and a constraint off every
  // id its grammar refuses; the logits are put back after, since logprobs are the
  // model's own.
  std::vector<std::pair<int32_t, float>> masked;
  std::vector<float> unmasked;
  if (t.constraint) {
    if (t.request.logprobs) unmasked.assign(logits, logits + vocab);
    const auto& tokenizer = t.session->served().tokenizer;
    // Built at admission for a turn whose model was known then (vocabularies.h).
    const std::shared_ptr<const grammar::Vocabulary> shared = SharedVocabulary(tokenizer);
    const grammar::Vocabulary& vocabulary = *shared;
    // The text's first bytes may differ from a token's mid-text bytes (SentencePiece
    // drops the first piece's leading space): that step checks id by id.
    std::function<std::string(int32_t)> peek = [&](int32_t id) { return t.decoder->Peek(id); };
    const absl::Time mask_start = absl::Now();
    absl::Status masked_ok = t.constraint->ApplyMask(logits, vocab, vocabulary,
                                                     t.decoder->at_start() ? &peek : nullptr);
    if (t.metrics && t.constraint->active()) {
      t.metrics->ObserveConstraintMask(absl::Now() - mask_start);
    }
    if (!masked_ok.ok()) {
      Finish(t, FinishReason::kError, masked_ok);
      return;
    }
  }
  if (t.request.ignore_eos) {
    for (int32_t eos : tok.eos_ids()) {
      if (eos < 0 || eos >= vocab) continue;
      masked.emplace_back(eos, logits[eos]);
      logits[eos] = -std::numeric_limits<float>::infinity();
    }
  }
  const int32_t id = t.sampler->Sample(row);
  for (const auto& [eos, logit] : masked) logits[eos] = logit;
  if (!unmasked.empty()) std::copy(unmasked.begin(), unmasked.end(), logits);
  const absl::Time now = absl::Now();
  if (t.generated == 0) {
    t.first_token = now;
    if (t.metrics) t.metrics->ObserveTimeToFirstToken(now - t.request.arrival);
  } else if (t.metrics) {
    t.metrics->ObserveInterTokenLatency(now - t.last_token);
  }
  t.last_token = now;
  if (tok.IsEos(id)) {  // end of document: not streamed, not kept
    Finish(t, FinishReason::kStop);
    return;
  }
  TokenEvent event{id, {}, std::nullopt, {}, {}};
  if (t.request.logprobs) {  // one pass over the vocabulary, only when asked
    const model::LogSoftmax log_softmax(row);
    event.logprob = log_softmax.At(id);
    event.top_logprobs = log_softmax.Top(t.request.top_logprobs);
    for (const model::TokenLogprob& a : event.top_logprobs) {
      event.top_logprob_bytes.push_back(t.decoder->Peek(a.id));
    }
  }
  event.bytes = t.decoder->Next(id);
  if (t.constraint) {
    if (absl::Status s = t.constraint->Advance(event.bytes); !s.ok()) {
      Finish(t, FinishReason::kError, s);
      return;
    }
  }
  ++t.generated;
  // Stop strings end free text only: inside a constrained part (a tool call under
  // tool_choice auto, once its trigger came) they would cut it. Admission refuses them
  // under a constraint that applies from the first byte.
  const bool stopped = !(t.constraint && t.constraint->active()) && t.stops->Add(event.bytes);
  t.sink->OnToken(std::move(event));
  if (t.metrics) t.metrics->AddGeneratedTokens(1);
  t.next_input = id;
  t.session->PublishProgress();
  // The grammar is complete and nothing may follow: the answer is over.
  if (stopped || (t.constraint && t.constraint->MustEnd())) {
    Finish(t, FinishReason::kStop);
    return;
  }
  const int64_t position = t.session->state().position() + 1;  // with next_input
  if (t.generated >= t.request.max_tokens || position >= t.model().config().max_context) {
    Finish(t, FinishReason::kLength);
  }
}

void Scheduler::Finish(Turn& t, FinishReason reason, absl::Status error) {
  if (t.done) return;
  t.done = true;
  // A turn that ends before its whole prompt is in leaves the session as it found it:
  // state rewound, pending token given back, nothing consumed. After that, tokens
  // emitted stay in the session, and the last one waits as the pending token of the
  // next turn.
  if (t.checkpoint) {
    t.session->state().Rewind(std::move(t.checkpoint));
    t.prefilled = 0;
    t.position_before_call.reset();  // back to before the turn, whatever the call did
  }
  // A model call that failed after the state moved (Model::Batch) left it holding an
  // unknown part of the segment, with nothing to rewind to (decode tokens, a prompt done
  // in one call): the session's text is lost. It is closed, never served again; giving
  // back the pending token would append it twice.
  const bool state_lost = t.position_before_call.has_value() &&
                          t.session->state().position() != *t.position_before_call;
  if (state_lost) {
    reason = FinishReason::kError;
    error = absl::InternalError(
        absl::StrCat(error.ok() ? "the model step failed part-way" : error.message(),
                     "; the session's state was lost and the session is closed"));
  } else if (t.next_input) {
    t.session->pending_token() = t.next_input;
  } else if (t.had_pending && t.prefilled == 0) {
    t.session->pending_token() = t.to_prefill.front();
  }
  t.session->PublishProgress();
  TurnResult result;
  result.reason = reason;
  result.error = std::move(error);
  const size_t consumed = t.prefilled - ((t.had_pending && t.prefilled > 0) ? 1 : 0);
  result.prompt_tokens = int(t.sampler ? consumed : 0);
  result.generated_tokens = t.generated;
  result.session_position = t.session->position();
  result.reader_stalled = t.reader_stalled;
  if (t.generated > 0) result.time_to_first_token = t.first_token - t.request.arrival;
  if (t.metrics) t.metrics->ObserveRequestDuration(absl::Now() - t.request.arrival);
  // Release the session (saving it first when the store persists every turn) before
  // telling the client, so a client that starts its next turn as soon as it sees the
  // final message finds the session free.
  options_.store->FinishTurn(
      std::move(t.claim),
      [sink = t.sink, result = std::move(result)](absl::Status saved) mutable {
        if (!saved.ok()) {  // the session was taken over: this turn is not part of it
          result.reason = FinishReason::kError;
          result.error = std::move(saved);
        }
        sink->OnFinish(std::move(result));
      },
      /*broken=*/state_lost);
}

void Scheduler::PublishGauges(const std::vector<std::unique_ptr<Turn>>& turns) {
  if (options_.metrics == nullptr) return;
  std::map<metrics::ModelMetrics*, std::pair<int, int>> counts;  // running, waiting
  for (const auto& t : turns) {
    if (t->metrics == nullptr) continue;
    auto& c = counts[t->metrics];
    (t->sink->Full() ? c.second : c.first)++;
  }
  for (metrics::ModelMetrics* m : gauge_models_) counts.emplace(m, std::make_pair(0, 0));
  for (auto& [m, c] : counts) {
    m->SetRunningTurns(c.first);
    m->SetWaitingTurns(c.second);
    gauge_models_.insert(m);
  }
}

}  // namespace attnserve::scheduler
