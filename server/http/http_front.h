// The OpenAI-compatible HTTP/1.1 edge of attnserve_server (cpp-httplib): /health,
// /v1/models, /v1/completions, /v1/chat/completions and /v1/responses (stored responses
// continued with previous_response_id: responses_api.h), streamed as server-sent events
// or answered whole. Requests go through the same API keys, admission (ParseGenerate),
// session store and scheduler as gRPC (service::StartTurn).
//
// Threads: cpp-httplib serves each open connection on one thread of a fixed pool, for
// as long as the connection lives (a stream pins its thread until it ends), and its queue
// of accepted connections never refuses. So generating requests are admitted by our own
// counter: at most max_streams at once (waiting for their session included); one more is
// answered 429 with retry-after at once. The pool has more threads than max_streams, so
// /health, /v1/models and the refusals are answered while every stream slot is busy. An
// idle keep-alive connection holds a thread for at most 5 s (and 100 requests), so idle
// clients cannot keep the spare threads forever; connections beyond the pool wait in the
// accept queue until a thread is free.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "server/catalogue/model_catalogue.h"
#include "server/config/defaults.h"
#include "server/http/answer_stops.h"
#include "server/http/chat_template.h"
#include "server/http/connection_limits.h"
#include "server/http/conversation_store.h"
#include "server/http/openai_request.h"
#include "server/http/own_session.h"
#include "server/http/prefix_cache.h"
#include "server/http/web_page.h"
#include "server/metrics/metrics.h"
#include "server/scheduler/scheduler.h"
#include "server/service/admission.h"
#include "server/service/api_keys.h"
#include "server/session/session_store.h"
#include "server/store/checkpoint_store.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace attnserve::http {

class TurnQueue;

struct HttpFrontOptions {
  // HOST:PORT; port 0 binds an ephemeral port (see HttpFront::port).
  std::string listen;
  // Generating requests in flight at once (ServerOptions::http_max_streams).
  int max_streams = 64;
  // cpp-httplib's threads; must exceed max_streams and connections.max_connections.
  int threads = 72;
  // Caps on open connections and the deadline of one request's arrival
  // (connection_guard.h); its write_timeout is write_timeout below.
  ConnectionLimits connections;
  // A write that cannot proceed this long (the client stopped reading) fails, which
  // cancels the turn.
  absl::Duration write_timeout = absl::Seconds(60);
  // A stream with nothing to send this long (a long prefill, a paused turn) sends a
  // ": ping" comment, which clients ignore; a failed ping is a client gone.
  absl::Duration ping_interval = absl::Seconds(2);
  // How long a stored response lives (ServerOptions::response_ttl).
  absl::Duration response_ttl = config::defaults::kResponseTtl;
  // How long a chat state kept for a client that resends its history lives.
  absl::Duration prefix_ttl = config::defaults::kDefaultTtl;
  // The playground page's files: empty, the ones built in; else this directory's.
  std::string web_dir;
  // PEM files as for gRPC (ServerOptions::tls_cert, tls_key, tls_client_ca): with a
  // certificate, HTTPS only; with client CAs, a client certificate signed by one of them
  // is required.
  std::string tls_cert;
  std::string tls_key;
  std::string tls_client_ca;
};

// What the front serves with; not owned, all must outlive it. metrics may be null.
struct HttpFrontDeps {
  const catalogue::ModelCatalogue* models = nullptr;
  session::SessionStore* store = nullptr;
  scheduler::Scheduler* scheduler = nullptr;
  metrics::Metrics* metrics = nullptr;
  const service::ApiKeys* keys = nullptr;
  // Stored responses (/v1/responses); null turns them off (404).
  store::CheckpointStore* checkpoints = nullptr;
  // The chat states kept for clients that resend their history (prefix_cache.h); null
  // turns the prefix cache off.
  store::CheckpointStore* prefix_states = nullptr;
  // Conversations (/v1/conversations, `conversation` on /v1/responses); needs
  // checkpoints (their states are stored responses). Null turns them off (404).
  ConversationStore* conversations = nullptr;
  service::RequestLimits limits;
};

class HttpFront {
 public:
  // Binds `options.listen` and starts serving. UNAVAILABLE if the address cannot be bound.
  // Ignores SIGPIPE for the process: cpp-httplib writes to sockets without MSG_NOSIGNAL,
  // and a client that closes its connection must not end the server.
  static absl::StatusOr<std::unique_ptr<HttpFront>> Start(HttpFrontOptions options,
                                                          HttpFrontDeps deps);
  ~HttpFront();  // Stop()

  int port() const { return port_; }
  // From now on /health answers 503 {"status":"draining"} and generating routes 503 with
  // retry-after; streams in flight go on. Any thread.
  void StartDraining() { draining_.store(true); }
  // Stops listening and waits for every connection's thread; streams still open end
  // (the scheduler should have finished their turns first).
  void Stop();

  // Generating requests holding a slot now; a slot is freed only after its turn's
  // session is released.
  int streams_in_flight() const;
  // Waits until no request holds a slot, at most `timeout`; false on timeout. For tests
  // and drains.
  bool WaitForNoStreams(absl::Duration timeout) const;

 private:
  class Slot;
  struct Model;
  HttpFront(HttpFrontOptions options, HttpFrontDeps deps);
  void AddRoutes();
  void Health(const httplib::Request& req, httplib::Response& res);
  void Models(const httplib::Request& req, httplib::Response& res);
  // GET / and GET /{file}: the playground page (web_page.h), open to everyone like
  // /health; what it calls needs the key.
  void Page(const httplib::Request& req, httplib::Response& res);
  void Generate(const std::string& route_name, int route, const httplib::Request& req,
                httplib::Response& res);
  // POST /v1/responses, GET and DELETE /v1/responses/{id} (responses_front.cc).
  void CreateResponse(const httplib::Request& req, httplib::Response& res);
  void GetResponse(const httplib::Request& req, httplib::Response& res);
  void DeleteResponse(const httplib::Request& req, httplib::Response& res);
  // /v1/conversations and its items, list and fork routes (conversations_front.cc).
  void CreateConversation(const httplib::Request& req, httplib::Response& res);
  void ListConversations(const httplib::Request& req, httplib::Response& res);
  void GetConversation(const httplib::Request& req, httplib::Response& res);
  void UpdateConversation(const httplib::Request& req, httplib::Response& res);
  void DeleteConversation(const httplib::Request& req, httplib::Response& res);
  void ListConversationItems(const httplib::Request& req, httplib::Response& res);
  void ForkConversation(const httplib::Request& req, httplib::Response& res);
  // The chat template of model `name`, or why it has none (INVALID_ARGUMENT, param
  // "model").
  absl::StatusOr<ChatTemplateKind> TemplateOf(const std::string& name) const;

  // A chat turn on no session of the client's: it runs on a session of its own, from
  // the longest kept state its history extends (PrefixCache), and its state is kept in
  // turn when it ends cleanly.
  struct KeptChat {
    PrefixKey key;
    std::vector<int32_t> ids;  // the prompt's, then the generated ones as they come
    size_t cached = 0;         // prompt ids already in the state at the start
    bool stop_strings = false;  // the request has stop strings
    std::shared_ptr<OwnSession> session;
  };
  // Looks the prompt up, makes the turn's session (imported or new) and sets
  // `generate`'s session and prompt ids (the part not in the state). `tools`: the
  // definitions the prompt was rendered with.
  absl::StatusOr<std::shared_ptr<KeptChat>> StartKeptChat(
      const std::string& tenant, const std::shared_ptr<const catalogue::ServedModel>& model,
      ChatTemplateKind kind, const std::vector<ChatMessage>& messages,
      const std::vector<std::string>& tools, v1::GenerateRequest* generate);
  // After the turn (its session released): keeps the state if it ended cleanly, then
  // closes the session.
  void KeepChat(KeptChat& chat, const scheduler::TurnResult& result);

  // A started turn's server-sent events, made on the connection's thread.
  struct TurnWriter {
    std::function<std::string()> start;
    std::function<std::string(std::vector<scheduler::TokenEvent>)> tokens;
    std::function<std::string(const scheduler::TurnResult&)> finish;  // the last events
    // Runs once the turn's session is released, however the stream ended (may be null).
    std::function<void()> after;
  };
  // Streams the turn whose tokens `queue` receives as `writer`'s events, after the
  // handler returns; pings while nothing comes; a client gone cancels the turn. `slot`
  // is freed once the turn's session is.
  void StreamTurn(const std::string& route_name, std::shared_ptr<TurnQueue> queue,
                  TurnWriter writer, std::shared_ptr<Slot> slot, httplib::Response& res);
  // Submits `generate` for `tenant` (service::StartTurn: may wait for its session) with a
  // TurnQueue as its sink, named after the model the turn runs on; `free_text_stops`: stop
  // strings the queue applies itself (TurnQueue::StopInFreeText).
  absl::StatusOr<std::shared_ptr<TurnQueue>> StartQueuedTurn(
      const std::string& tenant, const v1::GenerateRequest& generate, absl::Time arrival,
      std::optional<AnswerStops> free_text_stops = std::nullopt);
  // A chat whose tool calls start lazily (tool_choice "auto") with stop strings: they end
  // only the text before a call, so the scheduler is not given them (it would match them
  // inside a call); they are checked as admission checks any (INVALID_ARGUMENT naming
  // them), then taken out of `generate`, and returned for the turn's queue to apply.
  absl::StatusOr<std::optional<AnswerStops>> TakeFreeTextStops(const OpenAiRequest& request,
                                                               v1::GenerateRequest* generate) const;
  // Waits for the whole turn, passing its tokens to `add`; returns its result.
  static scheduler::TurnResult CollectTurn(
      TurnQueue& queue, const std::function<void(std::vector<scheduler::TokenEvent>)>& add);

  // `body` as the JSON answer with HTTP `status`.
  static void Answer(httplib::Response& res, int status, const nlohmann::json& body);
  // The request header `name` (lowercase), if sent.
  static std::optional<absl::string_view> Header(const httplib::Request& req, const char* name);
  // A seed for a request that names none.
  static uint64_t RandomSeed();
  // Counts one answered request in requests_total (method = route, code = HTTP status).
  void Record(const std::string& route_name, int status, const std::string& model) const;
  // Answers `status` as an OpenAI error and counts it.
  void Fail(const std::string& route_name, const absl::Status& status, httplib::Response& res,
            const std::string& model = "") const;
  // A stream slot for a generating request: UNAVAILABLE while draining,
  // RESOURCE_EXHAUSTED (429, retry-after) when all max_streams are taken.
  absl::StatusOr<std::shared_ptr<Slot>> TakeSlot();
  // Takes a stream slot; false when all max_streams are taken.
  bool Acquire();
  void Release();

  const HttpFrontOptions options_;
  const HttpFrontDeps deps_;
  const int64_t created_;  // the models' "created": when the server started
  // Each model's and variant's chat template (or why it has none), by name.
  std::vector<std::pair<std::string, absl::StatusOr<ChatTemplateKind>>> templates_;
  std::unique_ptr<PrefixCache> prefix_cache_;  // null without deps_.checkpoints
  const WebPage page_;
  std::unique_ptr<httplib::Server> server_;
  std::thread listener_;
  int port_ = 0;
  std::atomic<bool> draining_{false};
  mutable std::mutex mu_;
  mutable std::condition_variable idle_;
  int streams_ = 0;  // guarded by mu_
};

}  // namespace attnserve::http
