#include "server/scheduler/scheduler.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "server/grammar/matcher.h"
#include "server/tokenizer/byte_tokenizer.h"
#include "server/tokenizer/sentencepiece_tokenizer.h"
#include "tests/testing/spm_model.h"
#include "tests/testing/tiny_model.h"

namespace attnserve::scheduler {
namespace {

std::shared_ptr<const catalogue::ServedModel> TinyModel(const std::string& module,
                                                      int64_t max_context = 1 << 20) {
  return attnserve::test_util::TinyServedModel(module, max_context);
}

// Records tokens; can hold back the engine (Full) to act as a slow reader.
class RecordingSink : public TurnSink {
 public:
  void OnToken(TokenEvent token) override {
    std::lock_guard<std::mutex> lock(mu_);
    tokens_.push_back(token);
    cv_.notify_all();
  }
  bool Full() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return int(tokens_.size()) >= capacity_;
  }
  void OnFinish(TurnResult result) override {
    std::lock_guard<std::mutex> lock(mu_);
    EXPECT_FALSE(result_.has_value()) << "OnFinish called twice";
    result_ = result;
    cv_.notify_all();
  }
  void SetCapacity(int n) {
    std::lock_guard<std::mutex> lock(mu_);
    capacity_ = n;
  }
  TurnResult WaitFinish() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return result_.has_value(); });
    return *result_;
  }
  void WaitTokens(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return tokens_.size() >= n; });
  }
  std::vector<int32_t> ids() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<int32_t> out;
    for (const auto& t : tokens_) out.push_back(t.id);
    return out;
  }
  std::string text() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::string out;
    for (const auto& t : tokens_) out += t.bytes;
    return out;
  }
  std::vector<TokenEvent> tokens() const {
    std::lock_guard<std::mutex> lock(mu_);
    return tokens_;
  }
  bool finished() const {
    std::lock_guard<std::mutex> lock(mu_);
    return result_.has_value();
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<TokenEvent> tokens_;
  std::optional<TurnResult> result_;
  int capacity_ = 1 << 30;
};

TurnRequest Greedy(const std::string& prompt, int max_tokens) {
  TurnRequest r;
  r.prompt = test_util::ByteIds(prompt);
  r.sampling.temperature = 0;
  r.max_tokens = max_tokens;
  r.arrival = absl::Now();
  return r;
}

class SchedulerTest : public testing::Test {
 protected:
  void SetUp() override {
    metrics_ = std::move(metrics::Metrics::Create("")).value();  // recorded, not served
    session::SessionStore::Options o;
    o.max_sessions = 100;
    store_ = std::make_unique<session::SessionStore>(std::move(o));
    Scheduler::Options so;
    so.store = store_.get();
    so.metrics = metrics_.get();
    so.prefill_chunk_tokens = 16;
    scheduler_ = std::make_unique<Scheduler>(so);
  }

  // Creates a session and runs one turn on it to completion.
  std::pair<std::shared_ptr<session::Session>, std::shared_ptr<RecordingSink>> Run(
      std::shared_ptr<const catalogue::ServedModel> model, TurnRequest request,
      std::shared_ptr<session::Session> session = nullptr) {
    if (!session) session = store_->Create(kDefaultTenant, model, absl::ZeroDuration()).value();
    auto lease = store_->BeginTurn(kDefaultTenant, session->id());
    EXPECT_TRUE(lease.ok());
    auto sink = std::make_shared<RecordingSink>();
    scheduler_->Submit(std::move(*lease), std::move(request), sink);
    sink->WaitFinish();
    return {session, sink};
  }

  std::unique_ptr<metrics::Metrics> metrics_;
  std::unique_ptr<session::SessionStore> store_;
  std::unique_ptr<Scheduler> scheduler_;
  std::shared_ptr<const catalogue::ServedModel> taylor_ = TinyModel("taylor");
};

// RunBatch's grouping: in order, as many segments per Model::Batch call as fit in the
// row limit; a segment over the limit alone; nothing dropped.
TEST(RowGroups, FillEachCallUpToTheLimitInOrder) {
  using Groups = std::vector<std::pair<size_t, size_t>>;
  EXPECT_EQ(RowGroups({}, 2048), Groups{});
  EXPECT_EQ(RowGroups({1, 1, 1}, 2048), (Groups{{0, 3}}));
  EXPECT_EQ(RowGroups({1500, 1500, 1}, 2048), (Groups{{0, 1}, {1, 3}}));
  EXPECT_EQ(RowGroups({1000, 1048, 1}, 2048), (Groups{{0, 2}, {2, 3}}));
  EXPECT_EQ(RowGroups({5000, 1, 3000}, 2048), (Groups{{0, 1}, {1, 2}, {2, 3}}));
}

TEST_F(SchedulerTest, StreamsTokensThenFinishesWithUsage) {
  auto [session, sink] = Run(taylor_, Greedy("In the beginning", 12));
  TurnResult r = sink->WaitFinish();
  EXPECT_EQ(r.reason, FinishReason::kLength);
  EXPECT_EQ(r.prompt_tokens, 16);
  EXPECT_EQ(r.generated_tokens, 12);
  EXPECT_EQ(sink->ids().size(), 12u);
  EXPECT_EQ(r.session_position, 16 + 12);
  EXPECT_GT(r.time_to_first_token, absl::ZeroDuration());
  EXPECT_FALSE(store_->Get(kDefaultTenant, session->id())->busy);
  // The engine counts the turn out just after it tells the sink.
  EXPECT_TRUE(scheduler_->WaitIdle(absl::Seconds(10)));
  EXPECT_EQ(scheduler_->active_turns(), 0);
}

TEST_F(SchedulerTest, TurnsContinueExactlyWhereTheLastStopped) {
  for (const std::string module : {"taylor", "softmax"}) {
    auto model = TinyModel(module);
    auto [session, first] = Run(model, Greedy("Genesis: ", 7));
    auto second = Run(model, Greedy(" and then", 9), session).second;
    auto third = Run(model, Greedy("!", 5), session).second;
    // One greedy decode of the concatenated text gives the same continuation.
    const std::string history =
        "Genesis: " + first->text() + " and then" + second->text() + "!";
    auto fresh = Run(model, Greedy(history, 5)).second;
    EXPECT_EQ(fresh->ids(), third->ids()) << module;
    EXPECT_EQ(third->WaitFinish().session_position, int64_t(history.size()) + 5);
  }
}

TEST_F(SchedulerTest, BatchesDecodeAcrossSessions) {
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  std::vector<std::vector<int32_t>> alone;
  for (int i = 0; i < 6; ++i) {
    alone.push_back(Run(taylor_, Greedy("prompt " + std::to_string(i), 20)).second->ids());
  }
  const std::string before = metrics_->Serialize();
  // The engine is idle; six turns submitted back to back decode together.
  for (int i = 0; i < 6; ++i) {
    auto s = store_->Create(kDefaultTenant, taylor_, absl::ZeroDuration()).value();
    auto lease = store_->BeginTurn(kDefaultTenant, s->id());
  ASSERT_TRUE(lease.ok());
    sinks.push_back(std::make_shared<RecordingSink>());
    scheduler_->Submit(std::move(*lease), Greedy("prompt " + std::to_string(i), 20), sinks.back());
  }
  for (int i = 0; i < 6; ++i) {
    sinks[i]->WaitFinish();
    EXPECT_EQ(sinks[i]->ids(), alone[i]) << "session " << i;  // batching changes nothing
  }
  // Some engine step ran more than 4 sessions at once.
  const std::string after = metrics_->Serialize();
  auto bucket4 = [](const std::string& text) {
    const std::string key = "attnserve_batch_size_bucket{attention=\"taylor\",le=\"4\",model=\"tiny-taylor\"} ";
    auto pos = text.find(key);
    return pos == std::string::npos ? -1.0 : std::stod(text.substr(pos + key.size()));
  };
  auto count = [](const std::string& text) {
    const std::string key = "attnserve_batch_size_count{attention=\"taylor\",model=\"tiny-taylor\"} ";
    auto pos = text.find(key);
    return pos == std::string::npos ? -1.0 : std::stod(text.substr(pos + key.size()));
  };
  ASSERT_GE(count(after), 0) << after;
  const double steps = count(after) - count(before);
  const double small_steps = bucket4(after) - bucket4(before);
  EXPECT_GT(steps - small_steps, 0) << "no decode step batched more than 4 sessions";
  EXPECT_LT(steps, 6 * 19);  // fewer steps than decoding each session alone
}

TEST_F(SchedulerTest, CancelMidStreamFreesTheTurnAndKeepsTheSessionUsable) {
  auto session = store_->Create(kDefaultTenant, taylor_, absl::ZeroDuration()).value();
  auto lease = store_->BeginTurn(kDefaultTenant, session->id());
  ASSERT_TRUE(lease.ok());
  auto sink = std::make_shared<RecordingSink>();
  sink->SetCapacity(3);  // the reader stops reading after 3 tokens
  auto control = scheduler_->Submit(std::move(*lease), Greedy("abc", 100), sink).value();
  sink->WaitTokens(3);
  EXPECT_FALSE(sink->finished());
  control->Cancel();
  scheduler_->Wake();
  TurnResult r = sink->WaitFinish();
  EXPECT_EQ(r.reason, FinishReason::kCancelled);
  EXPECT_EQ(r.generated_tokens, 3);
  EXPECT_EQ(r.session_position, 3 + 3);
  EXPECT_TRUE(scheduler_->WaitIdle(absl::Seconds(10)));
  // The session continues from the consistent point: same as a fresh greedy decode.
  auto next = Run(taylor_, Greedy("", 4), session).second;
  auto fresh = Run(taylor_, Greedy("abc" + sink->text(), 4)).second;
  EXPECT_EQ(next->ids(), fresh->ids());
}

TEST_F(SchedulerTest, DeadlineStopsTheTurn) {
  auto session = store_->Create(kDefaultTenant, taylor_, absl::ZeroDuration()).value();
  auto lease = store_->BeginTurn(kDefaultTenant, session->id());
  ASSERT_TRUE(lease.ok());
  auto sink = std::make_shared<RecordingSink>();
  sink->SetCapacity(3);  // the reader stalls; nobody cancels; the deadline must end it
  TurnRequest r = Greedy("abc", 100);
  r.deadline = absl::Now() + absl::Milliseconds(200);
  scheduler_->Submit(std::move(*lease), r, sink);
  TurnResult result = sink->WaitFinish();
  EXPECT_EQ(result.reason, FinishReason::kCancelled);
  EXPECT_EQ(result.generated_tokens, 3);
  EXPECT_GE(absl::Now(), r.deadline);
}

TEST_F(SchedulerTest, SlowReaderPausesOnlyItsOwnSession) {
  auto slow_session = store_->Create(kDefaultTenant, taylor_, absl::ZeroDuration()).value();
  auto lease = store_->BeginTurn(kDefaultTenant, slow_session->id());
  ASSERT_TRUE(lease.ok());
  auto slow = std::make_shared<RecordingSink>();
  slow->SetCapacity(2);
  scheduler_->Submit(std::move(*lease), Greedy("slow", 30), slow);
  slow->WaitTokens(2);
  auto fast = Run(taylor_, Greedy("fast", 30)).second;  // completes while slow is paused
  EXPECT_EQ(fast->ids().size(), 30u);
  EXPECT_EQ(slow->ids().size(), 2u);
  EXPECT_FALSE(slow->finished());
  slow->SetCapacity(1 << 30);
  scheduler_->Wake();
  EXPECT_EQ(slow->WaitFinish().generated_tokens, 30);
}

// The model's own distributions, decoded directly: log_softmax (double, through ATen) of
// its logits after `prompt` and after each of `ids` in turn, so row i is the one token i
// was drawn from.
std::vector<at::Tensor> ModelLogSoftmax(const model::Model& m, const std::string& prompt,
                                        const std::vector<int32_t>& ids) {
  auto state = m.NewState();
  at::Tensor logits = m.Prefill(*state, test_util::ByteIds(prompt)).value()[-1];
  model::DecodeState* states[] = {state.get()};
  std::vector<at::Tensor> out;
  for (int32_t id : ids) {
    out.push_back(logits.to(at::kDouble).log_softmax(-1));
    logits = m.Step(states, {id}).value()[0];
  }
  return out;
}

// Near enough for the scheduler's batched logits against the direct decode's, and ten
// times tighter than the error of dropping the end-of-sequence token from the
// normaliser (ignore_eos) on this model.
void ExpectLogprobNear(float logprob, const at::Tensor& reference, int32_t id,
                       const std::string& where) {
  const double expected = reference[id].item<double>();
  EXPECT_NEAR(logprob, expected, 1e-4 + 1e-5 * std::abs(expected)) << where;
}

TEST_F(SchedulerTest, GreedyLogprobsAreTheModelsLogSoftmaxNotZero) {
  const std::string prompt = "In the beginning";
  TurnRequest r = Greedy(prompt, 12);
  r.logprobs = true;
  r.top_logprobs = 4;
  auto sink = Run(taylor_, r).second;
  const std::vector<TokenEvent> tokens = sink->tokens();
  ASSERT_EQ(tokens.size(), 12u);
  const auto reference = ModelLogSoftmax(*taylor_->model, prompt, sink->ids());
  double lowest = 0;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string where = "token " + std::to_string(i);
    ASSERT_TRUE(tokens[i].logprob.has_value()) << where;
    ExpectLogprobNear(*tokens[i].logprob, reference[i], tokens[i].id, where);
    lowest = std::min(lowest, double(*tokens[i].logprob));
    // The alternatives: the four most likely under the model, the greedy token first.
    ASSERT_EQ(tokens[i].top_logprobs.size(), 4u) << where;
    EXPECT_EQ(tokens[i].top_logprobs[0].id, tokens[i].id) << where;
    EXPECT_EQ(tokens[i].top_logprobs[0].logprob, *tokens[i].logprob) << where;
    const at::Tensor top_ids = std::get<1>(reference[i].topk(4));
    for (int k = 0; k < 4; ++k) {
      const auto& alt = tokens[i].top_logprobs[k];
      ExpectLogprobNear(alt.logprob, reference[i], alt.id, where + " alternative " +
                                                              std::to_string(k));
      if (k > 0) EXPECT_LE(alt.logprob, tokens[i].top_logprobs[k - 1].logprob) << where;
      EXPECT_EQ(alt.id, top_ids[k].item<int64_t>()) << where << " alternative " << k;
    }
  }
  // Greedy is not certainty: the old sampling-distribution logprob was 0 throughout.
  EXPECT_LT(lowest, -0.01);
}

TEST_F(SchedulerTest, SampledLogprobsIgnoreTemperatureTopKAndIgnoreEos) {
  const std::string prompt = "And the earth";
  TurnRequest r = Greedy(prompt, 16);
  r.sampling = {/*temperature=*/0.5f, /*top_k=*/3, /*top_p=*/0.9f, /*seed=*/5};
  r.ignore_eos = true;
  r.logprobs = true;
  auto sink = Run(taylor_, r).second;
  const std::vector<TokenEvent> tokens = sink->tokens();
  ASSERT_EQ(tokens.size(), 16u);
  const auto reference = ModelLogSoftmax(*taylor_->model, prompt, sink->ids());
  for (size_t i = 0; i < tokens.size(); ++i) {
    ASSERT_TRUE(tokens[i].logprob.has_value());
    ExpectLogprobNear(*tokens[i].logprob, reference[i], tokens[i].id,
                      "token " + std::to_string(i));
    EXPECT_TRUE(tokens[i].top_logprobs.empty());  // none asked for
  }
}

TEST_F(SchedulerTest, NoLogprobsUnlessAsked) {
  auto sink = Run(taylor_, Greedy("In the beginning", 4)).second;
  for (const TokenEvent& t : sink->tokens()) {
    EXPECT_FALSE(t.logprob.has_value());
    EXPECT_TRUE(t.top_logprobs.empty());
  }
}

TEST_F(SchedulerTest, StopStringEndsTheTurnAfterItIsStreamed) {
  auto probe = Run(taylor_, Greedy("Stop here", 16)).second;
  const std::string text = probe->text();
  const std::string stop = text.substr(5, 2);
  const size_t expected = text.find(stop) + stop.size();  // first place it completes
  TurnRequest r = Greedy("Stop here", 16);
  r.stop = {"never-matches", stop};
  auto sink = Run(taylor_, r).second;
  EXPECT_EQ(sink->WaitFinish().reason, FinishReason::kStop);
  EXPECT_EQ(sink->text(), text.substr(0, expected));
}

TEST_F(SchedulerTest, EmptyPromptWithNothingToContinueIsInvalid) {
  auto sink = Run(taylor_, Greedy("", 5)).second;
  TurnResult r = sink->WaitFinish();
  EXPECT_EQ(r.reason, FinishReason::kError);
  EXPECT_EQ(r.error.code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(SchedulerTest, ContextLimitEndsWithLength) {
  auto small = TinyModel("taylor", 20);
  auto sink = Run(small, Greedy("0123456789", 100)).second;
  TurnResult r = sink->WaitFinish();
  EXPECT_EQ(r.reason, FinishReason::kLength);
  EXPECT_EQ(r.session_position, 20);
}

TEST_F(SchedulerTest, KvCacheOverBudgetEndsWithResourceExhausted) {
  auto softmax = TinyModel("softmax");
  session::SessionStore::Options o;
  o.memory_budget_bytes = softmax->model->StateBytes(40);
  store_ = std::make_unique<session::SessionStore>(std::move(o));
  Scheduler::Options so;
  so.store = store_.get();
  scheduler_ = std::make_unique<Scheduler>(so);
  auto sink = Run(softmax, Greedy("0123456789", 100)).second;
  TurnResult r = sink->WaitFinish();
  EXPECT_EQ(r.reason, FinishReason::kError);
  EXPECT_EQ(r.error.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(r.error.message().find("memory budget"), std::string::npos);
  // The budget charges the cache's allocated blocks, not its used length: the first
  // block (16 tokens) holds the 10-token prompt, and the second (32 more, 48 in all) that
  // the 17th token needs does not fit 40 tokens' worth. So positions 0..15 run: 10 prompt
  // tokens and 6 decode steps; the token sampled from the last step is streamed and
  // waits as the pending one.
  EXPECT_EQ(r.generated_tokens, 7);
  EXPECT_EQ(r.session_position, 17);
}

TEST_F(SchedulerTest, RefusesTurnsAfterStopAccepting) {
  scheduler_->StopAccepting();
  auto session = store_->Create(kDefaultTenant, taylor_, absl::ZeroDuration()).value();
  auto lease = store_->BeginTurn(kDefaultTenant, session->id());
  ASSERT_TRUE(lease.ok());
  auto sink = std::make_shared<RecordingSink>();
  auto refused = scheduler_->Submit(std::move(*lease), Greedy("abc", 5), sink);
  // Refused without a final message, the session untouched and free again.
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(sink->finished());
  EXPECT_FALSE(store_->Get(kDefaultTenant, session->id())->busy);
  EXPECT_EQ(session->position(), 0);
  EXPECT_TRUE(scheduler_->WaitIdle(absl::Seconds(1)));
}

TEST_F(SchedulerTest, ARefusedTurnKeepsThePendingToken) {
  auto softmax = TinyModel("softmax");
  session::SessionStore::Options o;
  // The cache's first two blocks: 16 + 32 tokens.
  o.memory_budget_bytes = softmax->model->StateBytes(48);
  store_ = std::make_unique<session::SessionStore>(std::move(o));
  Scheduler::Options so;
  so.store = store_.get();
  scheduler_ = std::make_unique<Scheduler>(so);
  auto [session, first] = Run(softmax, Greedy("0123456789", 5));
  EXPECT_EQ(first->WaitFinish().session_position, 15);  // 10 + 4 decoded + 1 pending
  // A prompt the budget cannot hold: refused before anything is appended.
  TurnResult refused = Run(softmax, Greedy(std::string(40, 'x'), 5), session).second->WaitFinish();
  EXPECT_EQ(refused.error.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(refused.prompt_tokens, 0);
  EXPECT_EQ(refused.session_position, 15);
  EXPECT_TRUE(session->pending_token().has_value());
  // An empty turn still continues from the pending token.
  TurnResult next = Run(softmax, Greedy("", 3), session).second->WaitFinish();
  EXPECT_EQ(next.reason, FinishReason::kLength);
  EXPECT_EQ(next.session_position, 18);
}

TEST_F(SchedulerTest, StopTurnsEndsRunningTurnsWithShutdownAtAConsistentPosition) {
  auto session = store_->Create(kDefaultTenant, taylor_, absl::ZeroDuration()).value();
  auto lease = store_->BeginTurn(kDefaultTenant, session->id());
  ASSERT_TRUE(lease.ok());
  auto sink = std::make_shared<RecordingSink>();
  sink->SetCapacity(5);  // a reader that stalls keeps the turn running
  scheduler_->Submit(std::move(*lease), Greedy("abc", 1000), sink);
  sink->WaitTokens(5);
  scheduler_->StopTurns();
  TurnResult r = sink->WaitFinish();
  EXPECT_EQ(r.reason, FinishReason::kShutdown);
  EXPECT_EQ(r.generated_tokens, 5);
  EXPECT_EQ(r.prompt_tokens, 3);
  EXPECT_EQ(r.session_position, 3 + 5);
  EXPECT_TRUE(scheduler_->WaitIdle(absl::Seconds(10)));
  // The session continues exactly like a fresh decode of the same text.
  auto next = Run(taylor_, Greedy("", 4), session).second;
  auto fresh = Run(taylor_, Greedy("abc" + sink->text(), 4)).second;
  EXPECT_EQ(next->ids(), fresh->ids());
}


// Records, when its turn's first token arrives (on the engine thread, so nothing runs
// meanwhile), how far another session has got.
class FirstTokenProbe : public RecordingSink {
 public:
  explicit FirstTokenProbe(std::shared_ptr<session::Session> other) : other_(std::move(other)) {}
  void OnToken(TokenEvent token) override {
    if (!seen_) other_position_ = other_->position();
    seen_ = true;
    RecordingSink::OnToken(std::move(token));
  }
  int64_t other_position() const { return other_position_; }

 private:
  std::shared_ptr<session::Session> other_;
  bool seen_ = false;  // engine thread only
  std::atomic<int64_t> other_position_{-1};
};

// Two long prompts arriving together: with a budget of one chunk per step the older one
// is prefilled alone and answers first; without a budget both advance every step.
TEST_F(SchedulerTest, PrefillBudgetServesTheOldestPromptFirst) {
  for (const int budget : {16, 0}) {
    SCOPED_TRACE(absl::StrCat("prefill_tokens_per_step=", budget));
    scheduler_.reset();
    Scheduler::Options so;
    so.store = store_.get();
    so.prefill_chunk_tokens = 16;
    so.prefill_tokens_per_step = budget;
    scheduler_ = std::make_unique<Scheduler>(so);
    auto first = store_->Create(kDefaultTenant, taylor_, absl::ZeroDuration()).value();
    auto second = store_->Create(kDefaultTenant, taylor_, absl::ZeroDuration()).value();
    auto probe = std::make_shared<FirstTokenProbe>(second);
    auto other = std::make_shared<RecordingSink>();
    // 30 chunks each: the second turn is queued long before the first one's prompt is in.
    const std::string prompt(480, 'a');
    scheduler_->Submit(store_->BeginTurn(kDefaultTenant, first->id()).value(), Greedy(prompt, 1), probe)
        .IgnoreError();
    scheduler_->Submit(store_->BeginTurn(kDefaultTenant, second->id()).value(), Greedy(prompt, 1), other)
        .IgnoreError();
    EXPECT_EQ(probe->WaitFinish().reason, FinishReason::kLength);
    EXPECT_EQ(other->WaitFinish().reason, FinishReason::kLength);
    if (budget > 0) {
      EXPECT_EQ(probe->other_position(), 0) << "the younger prompt took some of the budget";
    } else {
      EXPECT_GT(probe->other_position(), 0) << "without a budget both prompts advance";
    }
  }
}

// Every way a turn can end before its prompt is in leaves the session exactly as it was:
// same position, same pending token, and the same continuation as an untouched twin
// that ran the same history.
TEST_F(SchedulerTest, TurnsThatFailBeforeTheirPromptIsInLeaveTheSessionUntouched) {
  enum class Failure { kBudget, kContext, kCancelBeforeStart, kCancelMidPrefill, kDeadline,
                       kDeadlineMidPrefill, kModelError };
  const std::pair<Failure, const char*> failures[] = {
      {Failure::kBudget, "budget"},
      {Failure::kContext, "context limit"},
      {Failure::kCancelBeforeStart, "cancel before start"},
      {Failure::kCancelMidPrefill, "cancel mid-prefill"},
      {Failure::kDeadline, "deadline passed"},
      {Failure::kDeadlineMidPrefill, "deadline mid-prefill"},
      {Failure::kModelError, "model error in a later chunk"}};
  for (const std::string module : {"taylor", "softmax"}) {
    for (const auto& entry : failures) {
      // Named copies, not a structured binding: the lambda below captures `failure`,
      // which C++17 allows only for a variable (clang refuses a binding; GCC takes it).
      const Failure failure = entry.first;
      const char* const name = entry.second;
      SCOPED_TRACE(module + ": " + name);
      auto model = TinyModel(module, /*max_context=*/4096);
      session::SessionStore::Options o;
      o.max_sessions = 10;
      // kBudget: room for the two short sessions but not for a 3,000-token prompt (KV
      // caches; a fixed state fits, and then the turn simply runs).
      o.memory_budget_bytes = failure == Failure::kBudget
                                  ? 2 * model->model->StateBytes(1024)
                                  : 4 * model->model->StateBytes(8192);
      store_ = std::make_unique<session::SessionStore>(std::move(o));
      scheduler_.reset();
      Scheduler::Options so;
      so.store = store_.get();
      so.prefill_chunk_tokens = 16;
      // Mid-prefill cancel and deadline: one prompt token per step, and the engine itself,
      // right after the failing turn's first model call, cancels the turn (once the test
      // has its control) or waits for the deadline to pass: the prompt cannot be all in
      // first, however fast or slow the machine.
      const bool mid_prefill =
          failure == Failure::kDeadlineMidPrefill || failure == Failure::kCancelMidPrefill;
      so.prefill_tokens_per_step = mid_prefill ? 1 : 16;
      std::atomic<bool> armed{false};
      std::atomic<TurnControl*> to_cancel{nullptr};
      absl::Time deadline = absl::InfiniteFuture();
      if (mid_prefill) {
        so.batch_for_testing = [&](const model::Model& m,
                                   absl::Span<const model::Model::Segment> segments) {
          auto logits = m.Batch(segments);
          if (armed.exchange(false)) {
            if (failure == Failure::kCancelMidPrefill) {
              while (to_cancel.load() == nullptr) std::this_thread::yield();
              to_cancel.load()->Cancel();
            } else {
              while (absl::Now() <= deadline) std::this_thread::yield();
            }
          }
          return logits;
        };
      }
      scheduler_ = std::make_unique<Scheduler>(so);

      auto [session, first] = Run(model, Greedy("In the beginning", 5));
      auto [twin, twin_first] = Run(model, Greedy("In the beginning", 5));
      ASSERT_EQ(first->ids(), twin_first->ids());
      const int64_t position = session->position();
      const std::optional<int32_t> pending = session->pending_token();
      ASSERT_TRUE(pending.has_value());

      // The failing turn.
      TurnRequest request = Greedy(std::string(1500, 'x'), 5);
      if (failure == Failure::kBudget) request = Greedy(std::string(3000, 'x'), 5);
      if (failure == Failure::kContext) request = Greedy(std::string(4090, 'x'), 5);
      if (failure == Failure::kDeadline) request.deadline = absl::Now() - absl::Seconds(1);
      if (mid_prefill) request = Greedy(std::string(4000, 'x'), 5);
      if (failure == Failure::kDeadlineMidPrefill) {
        deadline = absl::Now() + absl::Milliseconds(10);
        request.deadline = deadline;
      }
      if (failure == Failure::kModelError) request.prompt[900] = 1 << 20;  // no such token
      auto lease = store_->BeginTurn(kDefaultTenant, session->id());
      ASSERT_TRUE(lease.ok()) << lease.status();
      auto sink = std::make_shared<RecordingSink>();
      armed = mid_prefill;
      auto control = scheduler_->Submit(std::move(*lease), std::move(request), sink);
      ASSERT_TRUE(control.ok()) << control.status();
      if (failure == Failure::kCancelBeforeStart) (*control)->Cancel();
      if (failure == Failure::kCancelMidPrefill) to_cancel = control->get();
      TurnResult r = sink->WaitFinish();
      if (failure == Failure::kBudget && module != "softmax") {
        EXPECT_EQ(r.reason, FinishReason::kLength);  // fixed state: the prompt fits
        continue;
      }
      EXPECT_TRUE(r.reason == FinishReason::kCancelled || r.reason == FinishReason::kError)
          << int(r.reason);
      EXPECT_EQ(r.generated_tokens, 0);
      EXPECT_EQ(r.prompt_tokens, 0);
      EXPECT_EQ(r.session_position, position);
      EXPECT_EQ(session->position(), position);
      EXPECT_EQ(session->pending_token(), pending);
      if (failure == Failure::kBudget) {
        EXPECT_EQ(r.error.code(), absl::StatusCode::kResourceExhausted) << r.error;
      }
      if (failure == Failure::kContext) {
        EXPECT_EQ(r.error.code(), absl::StatusCode::kOutOfRange) << r.error;
      }
      if (failure == Failure::kModelError) {
        EXPECT_EQ(r.error.code(), absl::StatusCode::kInvalidArgument) << r.error;
      }
      // The same continuation as the twin.
      auto next = Run(model, Greedy(" and", 8), session).second->WaitFinish();
      auto twin_next_sink = Run(model, Greedy(" and", 8), twin).second;
      EXPECT_EQ(next.session_position, twin_next_sink->WaitFinish().session_position);
      auto again = Run(model, Greedy("", 6), session).second;
      auto twin_again = Run(model, Greedy("", 6), twin).second;
      EXPECT_EQ(again->ids(), twin_again->ids());
    }
  }
}

// A model call that fails or throws after the turn's state moved leaves the state
// holding an unknown part of what it was given: the session is closed (INTERNAL, then
// NOT_FOUND), never served with a token appended twice. A call that failed before the
// state moved keeps the session, which goes on exactly as one decode of the text the
// client saw.
TEST_F(SchedulerTest, AFailedModelCallClosesTheSessionOnlyIfItMovedTheState) {
  struct Fault {
    const char* name;
    bool prefill;  // fail the turn's prompt call (one call, no checkpoint), else a decode
    bool moved;    // the model appended the segments before the failure
    bool thrown;   // an exception out of the step, else an error status
  };
  const Fault faults[] = {
      {"decode, moved, error", false, true, false},
      {"decode, moved, thrown", false, true, true},
      {"prompt, moved, thrown", true, true, true},
      {"decode, untouched, error", false, false, false},
      {"decode, untouched, thrown", false, false, true},
      {"prompt, untouched, error", true, false, false},
  };
  auto greedy = [](const std::string& prompt, int max_tokens) {
    TurnRequest r = Greedy(prompt, max_tokens);
    r.ignore_eos = true;
    return r;
  };
  for (const std::string module : {"taylor", "softmax"}) {
    for (const Fault& fault : faults) {
      SCOPED_TRACE(module + ": " + fault.name);
      auto model = TinyModel(module);
      std::atomic<model::DecodeState*> target{nullptr};
      std::atomic<int> calls{0};
      scheduler_.reset();
      Scheduler::Options so;
      so.store = store_.get();
      so.prefill_chunk_tokens = 16;
      // Fails, once, the first prompt call or the third decode call on `target`.
      so.batch_for_testing = [&](const model::Model& m,
                                 absl::Span<const model::Model::Segment> segments)
          -> absl::StatusOr<at::Tensor> {
        bool hit = false;
        for (const auto& seg : segments) {
          hit = hit || (seg.state == target.load() && (seg.tokens.size() > 1) == fault.prefill);
        }
        if (!hit || ++calls != (fault.prefill ? 1 : 3)) return m.Batch(segments);
        if (fault.moved) EXPECT_TRUE(m.Batch(segments).ok());
        if (fault.thrown) throw std::runtime_error("injected fault");
        return absl::InternalError("injected fault");
      };
      scheduler_ = std::make_unique<Scheduler>(so);

      auto [session, first] = Run(model, greedy("In the beginning", 5));
      target = &session->state();
      auto failed = Run(model, greedy(" and", 8), session).second;
      const TurnResult r = failed->WaitFinish();
      EXPECT_EQ(r.reason, FinishReason::kError);
      EXPECT_EQ(r.error.code(), absl::StatusCode::kInternal) << r.error;
      EXPECT_EQ(failed->ids().size(), fault.prefill ? 0u : 3u);

      auto lease = store_->BeginTurn(kDefaultTenant, session->id());
      if (fault.moved) {
        EXPECT_EQ(lease.status().code(), absl::StatusCode::kNotFound)
            << "the session was kept after a failed call moved its state";
      } else {
        EXPECT_TRUE(lease.ok()) << lease.status();
      }
      if (!lease.ok()) continue;
      // A session that is kept holds what the client saw: the prompts it gave (the
      // failed turn's if the turn streamed) and the tokens streamed, each once.
      auto next = std::make_shared<RecordingSink>();
      ASSERT_TRUE(scheduler_->Submit(std::move(*lease), greedy("!", 6), next).ok());
      const std::string history = "In the beginning" + first->text() +
                                  (failed->ids().empty() ? "" : " and" + failed->text()) + "!";
      auto fresh = Run(model, greedy(history, 6)).second;
      EXPECT_EQ(next->WaitFinish().session_position, int64_t(history.size()) + 6);
      EXPECT_EQ(next->ids(), fresh->ids());
    }
  }
}

TEST_F(SchedulerTest, ReaderThatStopsReadingIsCutOffAfterTheIdleTimeout) {
  scheduler_.reset();
  Scheduler::Options so;
  so.store = store_.get();
  so.stream_idle_timeout = absl::Milliseconds(300);
  scheduler_ = std::make_unique<Scheduler>(so);
  auto session = store_->Create(kDefaultTenant, taylor_, absl::ZeroDuration()).value();
  auto sink = std::make_shared<RecordingSink>();
  sink->SetCapacity(3);  // reads 3 tokens, then nothing
  const absl::Time start = absl::Now();
  scheduler_->Submit(store_->BeginTurn(kDefaultTenant, session->id()).value(), Greedy("abc", 100), sink)
      .IgnoreError();
  TurnResult r = sink->WaitFinish();
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(300));
  EXPECT_EQ(r.reason, FinishReason::kCancelled);
  EXPECT_EQ(r.error.code(), absl::StatusCode::kDeadlineExceeded) << r.error;
  EXPECT_TRUE(r.reader_stalled);
  EXPECT_EQ(r.generated_tokens, 3);
  EXPECT_FALSE(store_->Get(kDefaultTenant, session->id())->busy) << "the session is still held";
  // A reader that keeps up is never cut off, however long the turn.
  auto reader = std::make_shared<RecordingSink>();
  scheduler_->Submit(store_->BeginTurn(kDefaultTenant, session->id()).value(), Greedy("", 50), reader)
      .IgnoreError();
  EXPECT_FALSE(reader->WaitFinish().reader_stalled);
}

// A model whose tokenizer is SentencePiece (a vocabulary trained here with spm_train):
// tokens of several bytes, byte-fallback pieces, a BOS at the session's start.
class SentencePieceSchedulerTest : public SchedulerTest {
 protected:
  static void SetUpTestSuite() {
    const std::string dir = test_util::MakeTempDir("spm");
    const std::string model = test_util::ReadBytes(test_util::TrainSpm(
        dir, "m", "--normalization_rule_name=identity --remove_extra_whitespaces=false"));
    tokenizer::SentencePieceTokenizer::Options options;
    options.bos_token_id = 1;
    options.eos_token_ids = {2};
    auto created = tokenizer::SentencePieceTokenizer::Create(model, options);
    tokenizer_ = new std::shared_ptr<const tokenizer::SentencePieceTokenizer>(
        created.ok() ? *created : nullptr);
  }
  static void TearDownTestSuite() { delete tokenizer_; }
  void SetUp() override {
    ATTNSERVE_SKIP_WITHOUT_SENTENCEPIECE();
    SchedulerTest::SetUp();
  }

  TurnRequest Prompt(const std::string& text, int max_tokens,
                     std::vector<std::string> stop = {}) {
    TurnRequest r;
    r.prompt = (*tokenizer_)->Encode(text, /*continuation=*/false).value();
    r.sampling.temperature = 0;
    r.max_tokens = max_tokens;
    r.stop = std::move(stop);
    r.arrival = absl::Now();
    return r;
  }

  static std::shared_ptr<const tokenizer::SentencePieceTokenizer>* tokenizer_;
  std::shared_ptr<const catalogue::ServedModel> model_ =
      test_util::TinyServedModelWith("taylor", 320, *tokenizer_);
};

std::shared_ptr<const tokenizer::SentencePieceTokenizer>* SentencePieceSchedulerTest::tokenizer_;

TEST_F(SentencePieceSchedulerTest, StreamsWhatTheTokenizerDecodes) {
  const std::string prompt = "In the beginning";
  TurnRequest request = Prompt(prompt, 40);
  const std::vector<int32_t> prompt_ids = request.prompt;
  ASSERT_EQ(prompt_ids.front(), 1);  // BOS
  auto [session, sink] = Run(model_, std::move(request));
  EXPECT_EQ(sink->WaitFinish().reason, FinishReason::kLength);
  std::vector<int32_t> all = prompt_ids;
  for (int32_t id : sink->ids()) all.push_back(id);
  // The session's text, decoded at once, is the prompt followed by the stream.
  EXPECT_EQ(tokenizer::Decode(**tokenizer_, all).value(), prompt + sink->text());
  for (const TokenEvent& t : sink->tokens()) EXPECT_EQ(t.bytes, (*tokenizer_)->TokenBytes(t.id));
}

TEST_F(SentencePieceSchedulerTest, StopStringsMatchAcrossAndInsideTokens) {
  auto [unused, full] = Run(model_, Prompt("In the", 60));
  const std::vector<TokenEvent> tokens = full->tokens();
  const std::string text = full->text();
  // Where each stop string first ends in the stream, the turn stops after that token.
  const auto expected_tokens = [&](const std::string& stop) {
    const size_t end = text.find(stop) + stop.size();
    size_t bytes = 0;
    for (size_t i = 0; i < tokens.size(); ++i) {
      bytes += tokens[i].bytes.size();
      if (bytes >= end) return i + 1;
    }
    return tokens.size();
  };
  std::vector<std::string> stops;
  size_t offset = 0;
  for (size_t i = 0; i + 1 < tokens.size() && stops.size() < 6; ++i) {
    const size_t n = tokens[i].bytes.size();
    if (n >= 2) stops.push_back(text.substr(offset, 1));             // inside a token
    if (n >= 1 && !tokens[i + 1].bytes.empty()) {
      stops.push_back(text.substr(offset + n - 1, 2));              // across two tokens
    }
    offset += n;
  }
  ASSERT_GE(stops.size(), 3u) << testing::PrintToString(text);
  for (const std::string& stop : stops) {
    auto [s, sink] = Run(model_, Prompt("In the", 60, {stop}));
    EXPECT_EQ(sink->WaitFinish().reason, FinishReason::kStop) << stop;
    EXPECT_EQ(sink->tokens().size(), expected_tokens(stop)) << testing::PrintToString(stop);
  }
}

TEST_F(SentencePieceSchedulerTest, ALaterTurnContinuesTheSessionsText) {
  // Text prompts of later turns are continuations (admission encodes them so): the
  // first generated bytes keep their leading space.
  auto [session, first] = Run(model_, Prompt("In", 3));
  TurnRequest next;
  next.prompt = (*tokenizer_)->Encode(" the", /*continuation=*/true).value();
  next.sampling.temperature = 0;
  next.max_tokens = 20;
  next.arrival = absl::Now();
  std::vector<int32_t> all = Prompt("In", 1).prompt;
  for (int32_t id : first->ids()) all.push_back(id);
  for (int32_t id : next.prompt) all.push_back(id);
  auto [again, second] = Run(model_, std::move(next), session);
  for (int32_t id : second->ids()) all.push_back(id);
  EXPECT_EQ(tokenizer::Decode(**tokenizer_, all).value(),
            "In" + first->text() + " the" + second->text());
}

// The grammar of constrained turns below: "[" digits ("," digits)* "]" with up to three
// digits a number, or the word "none".
std::shared_ptr<const grammar::Grammar> ListGrammar() {
  using grammar::Concat;
  using grammar::Literal;
  using grammar::Symbol;
  grammar::GrammarBuilder b;
  const int digits = b.Repeat("digits", {Symbol::Range('0', '9')}, 1, 3);
  const int items = b.Repeat("items", {Symbol::Ref(digits)}, 1, -1, Literal(","));
  const int root = b.NewRule("root");
  b.AddAlternative(root, Concat(Concat(Literal("["), {Symbol::Ref(items)}), Literal("]")));
  b.AddAlternative(root, Literal("none"));
  return b.Build(root).value();
}

// Whether `text` is a whole sentence of `g`.
bool Whole(const std::shared_ptr<const grammar::Grammar>& g, const std::string& text) {
  grammar::Matcher m(g);
  return m.Accept(text).ok() && m.CanEnd();
}

TEST_F(SchedulerTest, AConstrainedTurnStopsWhereItsGrammarEnds) {
  const auto g = ListGrammar();
  int stopped = 0;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    TurnRequest r = Greedy("Numbers: ", 64);
    r.sampling.temperature = 1.5f;
    r.sampling.seed = seed;
    r.constraint = grammar::Constraint{g, ""};
    auto sink = Run(taylor_, r).second;
    const TurnResult result = sink->WaitFinish();
    const std::string text = sink->text();
    if (result.reason == FinishReason::kStop) {
      ++stopped;
      EXPECT_TRUE(Whole(g, text)) << text;
    } else {
      EXPECT_EQ(result.reason, FinishReason::kLength) << result.error;
      EXPECT_EQ(result.generated_tokens, 64);
      grammar::Matcher m(g);
      EXPECT_TRUE(m.Accept(text).ok()) << text;  // a prefix of a sentence
    }
  }
  EXPECT_GT(stopped, 0);
  // max_tokens first: "length", the text a prefix.
  TurnRequest r = Greedy("Numbers: ", 2);
  r.constraint = grammar::Constraint{g, ""};
  auto sink = Run(taylor_, r).second;
  EXPECT_EQ(sink->WaitFinish().reason, FinishReason::kLength);
  grammar::Matcher m(g);
  EXPECT_TRUE(m.Accept(sink->text()).ok()) << sink->text();
  EXPECT_FALSE(m.MustEnd());
}

TEST_F(SchedulerTest, AConstraintLeavesLogprobsTheModelsOwn) {
  TurnRequest free = Greedy("In the beginning", 1);
  free.logprobs = true;
  free.top_logprobs = 3;
  auto unconstrained = Run(taylor_, free).second->tokens();
  TurnRequest r = free;
  r.constraint = grammar::Constraint{ListGrammar(), ""};
  auto constrained = Run(taylor_, r).second->tokens();
  ASSERT_EQ(constrained.size(), 1u);
  ASSERT_EQ(unconstrained.size(), 1u);
  EXPECT_TRUE(constrained[0].bytes == "[" || constrained[0].bytes == "n") << constrained[0].bytes;
  // The alternatives are the model's top three whatever the grammar allows.
  ASSERT_EQ(constrained[0].top_logprobs.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(constrained[0].top_logprobs[i].id, unconstrained[0].top_logprobs[i].id);
  }
}

TEST_F(SchedulerTest, ALazyConstraintWaitsForItsTrigger) {
  // Free text until the model writes the trigger; the probe shows where it does.
  auto probe = Run(taylor_, Greedy("In the beginning", 24)).second->text();
  ASSERT_GE(probe.size(), 8u);
  const std::string trigger = probe.substr(3, 2);
  grammar::GrammarBuilder b;
  const int root = b.RuleOf("root", grammar::Concat(grammar::Literal(trigger),
                                                     grammar::Literal("!")));
  TurnRequest r = Greedy("In the beginning", 24);
  r.constraint = grammar::Constraint{b.Build(root).value(), trigger};
  auto sink = Run(taylor_, r).second;
  EXPECT_EQ(sink->WaitFinish().reason, FinishReason::kStop);
  const size_t at = probe.find(trigger);
  EXPECT_EQ(sink->text(), probe.substr(0, at + trigger.size()) + "!");
}

TEST_F(SentencePieceSchedulerTest, AConstrainedTurnSpellsItsGrammarWithPieces) {
  const auto g = ListGrammar();
  // At the session's start (only BOS before: the first piece loses its "▁"), and later.
  for (const std::string& prompt : {std::string(), std::string("In the beginning")}) {
    int stopped = 0;
    for (uint64_t seed = 1; seed <= 6; ++seed) {
      TurnRequest r = Prompt(prompt, 48);
      r.sampling.temperature = 1.5f;
      r.sampling.seed = seed;
      r.constraint = grammar::Constraint{g, ""};
      auto sink = Run(model_, r).second;
      const TurnResult result = sink->WaitFinish();
      ASSERT_NE(result.reason, FinishReason::kError) << result.error;
      grammar::Matcher m(g);
      EXPECT_TRUE(m.Accept(sink->text()).ok()) << sink->text();
      if (result.reason == FinishReason::kStop) {
        ++stopped;
        EXPECT_TRUE(m.CanEnd()) << sink->text();
      }
    }
    EXPECT_GT(stopped, 0) << prompt;
  }
}

}  // namespace
}  // namespace attnserve::scheduler
