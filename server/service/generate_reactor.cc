#include "server/service/generate_reactor.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/service/start_turn.h"
#include "server/service/status_map.h"

namespace attnserve::service {
namespace {

// ATTNSERVE_STREAM_TRACE=1: every stream records, per token message, when the engine
// handed it over (OnToken), when its write was started and returned (and on which
// side: the WriteStarter or gRPC's OnWriteDone), and when gRPC reported it written;
// OnDone prints one line of medians and 90th percentiles to stderr. Off: one branch.
class StreamTrace {
 public:
  static bool Enabled() {
    static const bool enabled = [] {
      const char* v = std::getenv("ATTNSERVE_STREAM_TRACE");
      return v != nullptr && *v != 0 && *v != '0';
    }();
    return enabled;
  }
  void Sampled() {
    std::lock_guard<std::mutex> lock(mu_);
    sampled_.push_back(Now());
  }
  // Returns the write's index for WriteStarted.
  size_t WriteStarting(bool from_starter) {
    std::lock_guard<std::mutex> lock(mu_);
    start_.push_back(Now());
    started_.push_back(0);
    from_starter_ += from_starter ? 1 : 0;
    return start_.size() - 1;
  }
  void WriteStarted(size_t index) {
    const double now = Now();
    std::lock_guard<std::mutex> lock(mu_);
    started_[index] = now;
  }
  void WriteDone() {
    std::lock_guard<std::mutex> lock(mu_);
    done_.push_back(Now());
  }
  void Print(const std::string& session_id) {
    std::lock_guard<std::mutex> lock(mu_);
    const size_t n = std::min({sampled_.size(), start_.size(), started_.size(), done_.size()});
    std::vector<double> wait, inline_start, written, period;
    for (size_t i = 0; i < n; ++i) {
      wait.push_back(start_[i] - sampled_[i]);
      inline_start.push_back(started_[i] - start_[i]);
      written.push_back(done_[i] - start_[i]);
      if (i > 0) period.push_back(sampled_[i] - sampled_[i - 1]);
    }
    std::fprintf(stderr,
                 "stream trace %s: %zu tokens, %zu writes (%d started by the WriteStarter, the "
                 "others by OnWriteDone); us "
                 "p50/p90: engine period %s, handed->write started %s, StartWrite call %s, "
                 "StartWrite->written %s\n",
                 session_id.c_str(), sampled_.size(), start_.size(), from_starter_,
                 Quantiles(period).c_str(), Quantiles(wait).c_str(),
                 Quantiles(inline_start).c_str(), Quantiles(written).c_str());
  }

 private:
  static double Now() {
    return std::chrono::duration<double, std::micro>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  static std::string Quantiles(std::vector<double> v) {
    if (v.empty()) return "-";
    std::sort(v.begin(), v.end());
    return absl::StrCat(int(v[v.size() / 2]), "/", int(v[v.size() * 9 / 10]));
  }
  std::mutex mu_;
  std::vector<double> sampled_, start_, started_, done_;
  int from_starter_ = 0;
};

}  // namespace

class StreamSink;

namespace {

// Starts streams' writes off the engine thread. gRPC's StartWrite does the transport's
// work inline in the calling thread (HTTP/2 framing, the socket write and, on loopback,
// the receiving side's TCP processing): ~85 us a token at the mid shape, 8% of a one
// session step, measured with ATTNSERVE_STREAM_TRACE. The engine queues the stream
// here and goes on; this thread starts the write on the other core. Later writes of a
// stream start from its OnWriteDone, on gRPC's threads, as before.
//
// One thread for the process, started on first use and never stopped: a stream queued
// here holds its write slot (`writing_`), so its call cannot finish, and the server
// cannot shut down, before this thread has started the write.
class WriteStarter {
 public:
  static WriteStarter& Get() {
    static WriteStarter* const starter = new WriteStarter;  // never destroyed
    return *starter;
  }
  void Post(std::shared_ptr<StreamSink> sink) {
    bool wake;
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(sink));
      wake = waiting_;
    }
    if (wake) cv_.notify_one();
  }

 private:
  WriteStarter() { std::thread([this] { Run(); }).detach(); }
  void Run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<StreamSink>> queue_;  // guarded by mu_
  bool waiting_ = false;                             // guarded by mu_
};

}  // namespace

// The turn's sink: the engine pushes token and final messages; gRPC drains them one
// write at a time. Shared by the engine (through the scheduler) and the reactor; the
// reactor detaches in OnDone, after which pushes are dropped. A push that finds no write
// in flight hands the stream to the WriteStarter, which starts the write; the next one
// starts from OnWriteDone.
class StreamSink : public scheduler::TurnSink,
                   public std::enable_shared_from_this<StreamSink> {
 public:
  StreamSink(grpc::ServerWriteReactor<v1::GenerateResponse>* reactor,
             AttnServeService* service, scheduler::Scheduler* scheduler,
             std::shared_ptr<const catalogue::ServedModel> model)
      : reactor_(reactor), service_(service), scheduler_(scheduler), model_(std::move(model)) {}

  void OnToken(scheduler::TokenEvent token) override {
    if (trace_) trace_->Sampled();
    v1::GenerateResponse m;
    v1::Token* t = m.mutable_token();
    t->set_text(std::move(token.bytes));
    t->set_id(token.id);
    if (token.logprob) t->set_logprob(*token.logprob);
    for (size_t i = 0; i < token.top_logprobs.size(); ++i) {
      const model::TokenLogprob& alternative = token.top_logprobs[i];
      v1::TopLogprob* a = t->add_top_logprobs();
      a->set_text(std::move(token.top_logprob_bytes[i]));
      a->set_id(alternative.id);
      a->set_logprob(alternative.logprob);
    }
    Push(std::move(m), /*final=*/false);
  }

  bool Full() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return unsent_tokens_ >= kMaxBufferedTokens;
  }

  void OnFinish(scheduler::TurnResult r) override {
    v1::GenerateResponse m;
    v1::Final* f = m.mutable_final();
    f->set_reason(ToProto(r.reason));
    if (!r.error.ok()) f->set_error(std::string(r.error.message()));
    f->set_session_id(session_id_);
    v1::Usage* u = f->mutable_usage();
    u->set_prompt_tokens(r.prompt_tokens);
    u->set_generated_tokens(r.generated_tokens);
    u->set_session_position(r.session_position);
    u->set_time_to_first_token_ms(absl::ToDoubleMilliseconds(r.time_to_first_token));
    {
      std::lock_guard<std::mutex> lock(mu_);
      final_status_ = ToGrpcStatus(r.error);
    }
    Push(std::move(m), /*final=*/true);
    // The client reads nothing: the final message would wait behind a write that never
    // completes. End the call, which frees it and everything it holds.
    if (r.reader_stalled) CancelCall();
  }

  // --- reactor side ---
  void set_session_id(std::string id) { session_id_ = std::move(id); }
  void SetControl(std::shared_ptr<scheduler::TurnControl> control) {
    std::lock_guard<std::mutex> lock(mu_);
    control_ = std::move(control);
    if (cancel_requested_) control_->Cancel();
  }
  void Cancel() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      cancel_requested_ = true;
      if (control_) control_->Cancel();
    }
    scheduler_->Wake();
  }
  void WriteDone(bool ok) {
    bool finish = false, wake = false;
    grpc::Status status;
    if (trace_ && ok && !current_is_final_) trace_->WriteDone();
    {
      std::lock_guard<std::mutex> lock(mu_);
      writing_ = false;
      if (!ok) {  // the client is gone: stop the turn and end the call
        cancel_requested_ = true;
        if (control_) control_->Cancel();
        wake = true;
        if (!finished_) {
          finished_ = finish = true;
          status = grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
        }
      } else if (current_is_final_) {
        finished_ = finish = true;
        status = final_status_;
      } else {
        wake = unsent_tokens_ == kMaxBufferedTokens - 1;  // it was full until now
      }
    }
    if (finish) {
      service_->Record("Generate", status, model_.get());
      reactor_->Finish(status);
      return;  // OnDone follows; no further writes
    }
    if (wake) scheduler_->Wake();
    StartNextWrite(/*from_starter=*/false);
  }
  // How to cancel the call (ServerContext::TryCancel); valid until Detach.
  void SetCallCanceller(std::function<void()> cancel_call) {
    std::lock_guard<std::mutex> lock(call_mu_);
    cancel_call_ = std::move(cancel_call);
  }
  void Detach() {
    if (trace_) trace_->Print(session_id_);
    {
      // Waits for a CancelCall in progress: the context lives until OnDone returns.
      std::lock_guard<std::mutex> lock(call_mu_);
      cancel_call_ = nullptr;
    }
    std::lock_guard<std::mutex> lock(mu_);
    detached_ = true;
  }

  // --- the WriteStarter's thread, for a stream that Push queued there ---
  void StartQueuedWrite() {
    bool traced;
    {
      std::lock_guard<std::mutex> lock(mu_);
      // The write slot is this call's (Push took it); nothing else can have ended the call.
      if (finished_ || detached_ || queue_.empty()) {
        writing_ = false;
        return;
      }
      traced = TakeNextLocked();
    }
    StartCurrentWrite(traced, /*from_starter=*/true);
  }

 private:
  void CancelCall() {
    // Not under mu_: cancelling runs the reactor's OnCancel, which takes it.
    std::lock_guard<std::mutex> lock(call_mu_);
    if (cancel_call_) cancel_call_();
  }

  void Push(v1::GenerateResponse m, bool final) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (detached_ || finished_) return;
      queue_.emplace_back(std::move(m), final);
      if (!final) ++unsent_tokens_;
      if (writing_) return;  // OnWriteDone (or the WriteStarter) will start it
      writing_ = true;       // the write slot, until the WriteStarter uses it
    }
    WriteStarter::Get().Post(shared_from_this());
  }

  // Starts the next write if none is in flight. The write itself is started outside the
  // lock; `writing_` makes sure only one thread starts it.
  void StartNextWrite(bool from_starter) {
    bool traced;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (writing_ || finished_ || detached_ || queue_.empty()) return;
      writing_ = true;
      traced = TakeNextLocked();
    }
    StartCurrentWrite(traced, from_starter);
  }

  // Moves the queue's front into current_ (the caller holds the write slot); returns
  // whether the write is traced.
  bool TakeNextLocked() {
    current_ = std::move(queue_.front().first);
    current_is_final_ = queue_.front().second;
    if (!current_is_final_) --unsent_tokens_;
    queue_.pop_front();
    return trace_ && !current_is_final_;
  }

  void StartCurrentWrite(bool traced, bool from_starter) {
    const size_t index = traced ? trace_->WriteStarting(from_starter) : 0;
    reactor_->StartWrite(&current_);
    if (traced) trace_->WriteStarted(index);
  }

  grpc::ServerWriteReactor<v1::GenerateResponse>* const reactor_;
  AttnServeService* const service_;
  scheduler::Scheduler* const scheduler_;
  const std::shared_ptr<const catalogue::ServedModel> model_;
  std::string session_id_;  // set before submission, read-only afterwards

  std::mutex call_mu_;  // guards cancel_call_; never held with mu_ by the same thread
  std::function<void()> cancel_call_;
  mutable std::mutex mu_;
  std::deque<std::pair<v1::GenerateResponse, bool>> queue_;  // (message, is final)
  int unsent_tokens_ = 0;
  v1::GenerateResponse current_;  // in flight; untouched until WriteDone
  bool current_is_final_ = false;
  bool writing_ = false;
  bool finished_ = false;   // Finish called (or about to be)
  bool detached_ = false;   // OnDone ran
  bool cancel_requested_ = false;
  grpc::Status final_status_;
  std::shared_ptr<scheduler::TurnControl> control_;
  const std::unique_ptr<StreamTrace> trace_ =
      StreamTrace::Enabled() ? std::make_unique<StreamTrace>() : nullptr;
};

void WriteStarter::Run() {
  std::vector<std::shared_ptr<StreamSink>> batch;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      waiting_ = true;
      cv_.wait(lock, [this] { return !queue_.empty(); });
      waiting_ = false;
      batch.swap(queue_);
    }
    for (auto& sink : batch) sink->StartQueuedWrite();
    batch.clear();
  }
}

class GenerateReactor : public grpc::ServerWriteReactor<v1::GenerateResponse> {
 public:
  GenerateReactor(AttnServeService* service, const catalogue::ModelCatalogue* models,
                  session::SessionStore* store, scheduler::Scheduler* scheduler,
                  const RequestLimits& limits, grpc::CallbackServerContext* context,
                  const v1::GenerateRequest* request)
      : service_(service), arrival_(absl::Now()) {
    auto caller = service_->ResolveCaller(context, request->session_id());
    if (!caller.ok()) {
      const grpc::Status status = ToGrpcStatus(caller.status());
      service_->Record("Generate", status, nullptr);
      Finish(status);
      return;
    }
    // Claiming the session may wait (loading it from a durable store, its previous turn
    // ending): off gRPC's threads.
    auto start = [=, caller = *std::move(caller)] {
      absl::Status s = Start(caller, models, store, scheduler, limits, context, *request);
      if (!s.ok()) {
        const grpc::Status status = ToGrpcStatus(s);
        service_->Record("Generate", status, model_.get());
        Finish(status);
      }
    };
    if (!service_->RunBlocking(std::move(start))) {
      const grpc::Status status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                "server busy: too many requests are waiting for the session store");
      service_->Record("Generate", status, nullptr);
      Finish(status);
    }
  }

  void OnWriteDone(bool ok) override { Sink()->WriteDone(ok); }
  void OnCancel() override {
    std::shared_ptr<StreamSink> sink;
    {
      std::lock_guard<std::mutex> lock(mu_);
      cancelled_ = true;
      sink = sink_;
    }
    if (sink) sink->Cancel();
  }
  void OnDone() override {
    if (auto sink = Sink()) sink->Detach();
    delete this;
  }

 private:
  absl::Status Start(const Caller& caller, const catalogue::ModelCatalogue* models, session::SessionStore* store,
                     scheduler::Scheduler* scheduler, const RequestLimits& limits,
                     grpc::CallbackServerContext* context, const v1::GenerateRequest& r) {
    std::shared_ptr<StreamSink> sink;
    bool cancelled = false;
    auto make_sink = [&](const std::shared_ptr<session::Session>& session) {
      model_ = std::shared_ptr<const catalogue::ServedModel>(
          session, &session->served());  // aliasing: keeps the session alive
      sink = std::make_shared<StreamSink>(this, service_, scheduler, model_);
      sink->set_session_id(session->id());
      sink->SetCallCanceller([context] { context->TryCancel(); });
      std::lock_guard<std::mutex> lock(mu_);
      sink_ = sink;
      cancelled = cancelled_;
      return sink;
    };
    auto control = StartTurn(caller, *models, *store, *scheduler, limits, r, arrival_,
                             absl::FromChrono(context->deadline()), make_sink);
    if (!control.ok()) return control.status();  // nothing ran: the client may retry
    sink->SetControl(*std::move(control));
    if (cancelled) sink->Cancel();  // OnCancel ran before the sink existed
    return absl::OkStatus();
  }

  std::shared_ptr<StreamSink> Sink() {
    std::lock_guard<std::mutex> lock(mu_);
    return sink_;
  }

  AttnServeService* const service_;
  const absl::Time arrival_;
  std::shared_ptr<const catalogue::ServedModel> model_;
  std::mutex mu_;
  std::shared_ptr<StreamSink> sink_;  // guarded by mu_; set once by Start
  bool cancelled_ = false;            // guarded by mu_
};

grpc::ServerWriteReactor<v1::GenerateResponse>* StartGenerate(
    AttnServeService* service, const catalogue::ModelCatalogue* models, session::SessionStore* store,
    scheduler::Scheduler* scheduler, const RequestLimits& limits,
    grpc::CallbackServerContext* context, const v1::GenerateRequest* request) {
  return new GenerateReactor(service, models, store, scheduler, limits, context, request);
}

}  // namespace attnserve::service
