#include "server/http/http_front.h"

#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <cstdio>
#include <random>
#include <thread>

#include <httplib.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "server/attention/options.h"
#include "server/common/random_id.h"
#include "server/common/sha256.h"
#include "server/http/connection_guard.h"
#include "server/http/http_errors.h"
#include "server/http/openai_request.h"
#include "server/http/openai_response.h"
#include "server/http/own_session.h"
#include "server/http/response_format.h"
#include "server/http/turn_queue.h"
#include "server/service/start_turn.h"

namespace attnserve::http {
namespace {

using nlohmann::json;
// A request's own session lives in this server's memory only: what outlives the request
// is the stored response or kept chat (CheckpointStore), never the session itself.
constexpr auto kLocal = session::SessionStore::Durability::kLocal;

constexpr char kJson[] = "application/json";
constexpr int kSendBufferBytes = 64 << 10;  // per HTTP connection; see Start

// The OpenAI model object of `m`, with attnserve's fields beside OpenAI's.
json ModelObject(const catalogue::ServedModel& m, int64_t created) {
  const model::ModelConfig& c = m.model->config();
  // A hybrid's state by layer kind: its attention layers grow, its recurrent ones do not.
  json by_mixer = json::array();
  const auto at_32k = m.model->StateBytesByMixer(32768);
  for (const model::Model::MixerBytes& k : m.model->StateBytesByMixer(1024)) {
    json entry = {{"mixer", k.mixer}, {"layers", k.layers}, {"bytes_at_1k", k.bytes}};
    for (const auto& big : at_32k) {
      if (big.mixer == k.mixer) entry["bytes_at_32k"] = big.bytes;
    }
    by_mixer.push_back(std::move(entry));
  }
  return {{"id", m.name},
          {"object", "model"},
          {"created", created},
          {"owned_by", "attnserve"},
          {"attention", m.attention()},
          {"order", m.attention_order()},
          {"max_context", c.max_context},
          // At max_context: the most one session can hold (the same at every length for
          // a fixed-size state; a KV cache's bound).
          {"state_bytes_per_session", m.model->StateBytes(c.max_context)},
          {"state_bytes_per_session_at_1k", m.model->StateBytes(1024)},
          {"state_bytes_per_session_at_16k", m.model->StateBytes(16384)},
          // What a softmax KV cache of the same shape (layers, KV heads, head sizes; in
          // the server's --kv_cache_type) holds per token: the growth a fixed-size state
          // does not have.
          {"kv_cache_type", attention::KvCacheTypeName(c.attention.kv_cache_type)},
          {"kv_cache_bytes_per_token",
           c.num_layers * attention::KvBytesPerToken(c.attention)},
          {"state_bytes_by_mixer", std::move(by_mixer)},
          // From this context on a session holds less than a KV cache of every layer would.
          {"break_even_context", m.model->BreakEvenContext()},
          {"weight_bytes", m.model->WeightBytes()},
          {"weight_types", m.model->WeightTypes()}};
}

}  // namespace

void HttpFront::Answer(httplib::Response& res, int status, const nlohmann::json& body) {
  res.status = status;
  res.set_content(Dump(body), kJson);
}

std::optional<absl::string_view> HttpFront::Header(const httplib::Request& req, const char* name) {
  auto it = req.headers.find(name);
  if (it == req.headers.end()) return std::nullopt;
  return absl::string_view(it->second);
}

uint64_t HttpFront::RandomSeed() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return rng();
}

// One generating request's stream slot, held until its turn's session is released.
class HttpFront::Slot {
 public:
  explicit Slot(HttpFront* front) : front_(front) {}
  ~Slot() { front_->Release(); }
  Slot(const Slot&) = delete;
  Slot& operator=(const Slot&) = delete;

 private:
  HttpFront* const front_;
};

HttpFront::HttpFront(HttpFrontOptions options, HttpFrontDeps deps)
    : options_(std::move(options)),
      deps_(std::move(deps)),
      created_(absl::ToUnixSeconds(absl::Now())),
      page_(options_.web_dir) {}

absl::StatusOr<std::unique_ptr<HttpFront>> HttpFront::Start(HttpFrontOptions options,
                                                            HttpFrontDeps deps) {
  std::signal(SIGPIPE, SIG_IGN);
  const size_t colon = options.listen.rfind(':');
  int port = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(options.listen.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--http_listen: expected HOST:PORT, got \"", options.listen, "\""));
  }
  std::string host = options.listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  std::unique_ptr<HttpFront> f(new HttpFront(std::move(options), std::move(deps)));
  for (const auto& m : f->deps_.models->all()) {
    auto kind = ChatTemplateForDirectory(m->directory, m->tokenizer->kind());
    f->templates_.emplace_back(m->name, kind);
    for (const auto& v : m->variants) f->templates_.emplace_back(v->name, kind);
  }
  if (f->deps_.prefix_states != nullptr) {
    f->prefix_cache_ =
        std::make_unique<PrefixCache>(f->deps_.prefix_states, f->options_.prefix_ttl);
  }
  if (!f->options_.web_dir.empty() &&
      !std::filesystem::is_regular_file(f->options_.web_dir + "/index.html")) {
    return absl::InvalidArgumentError(
        absl::StrCat("--web_dir ", f->options_.web_dir, ": no index.html there"));
  }
  ConnectionLimits limits = f->options_.connections;
  limits.write_timeout = f->options_.write_timeout;
  if (limits.max_connections >= f->options_.threads) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the HTTP front's ", f->options_.threads, " threads must exceed its ",
        limits.max_connections, " connections"));
  }
  auto server = GuardedServer::Create(
      limits, {f->options_.tls_cert, f->options_.tls_key, f->options_.tls_client_ca});
  if (!server.ok()) return server.status();
  f->server_ = *std::move(server);
  httplib::Server& s = *f->server_;
  const int threads = f->options_.threads;
  s.new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
  // (Keep-alive and reads are GuardedServer's: ConnectionLimits.)
  const int64_t write_seconds =
      std::max<int64_t>(1, absl::ToInt64Seconds(f->options_.write_timeout));
  s.set_write_timeout(time_t(write_seconds));
  s.set_tcp_nodelay(true);  // each SSE event is its own small write
  s.set_payload_max_length(size_t(f->deps_.limits.max_prompt_tokens) * 64 + (1 << 20));
  // Debian's library listens with a backlog of 5; a burst of clients would wait for SYN
  // retries. Listening again on the bound socket raises it (Linux updates the backlog).
  int listen_socket = -1;
  // SO_SNDBUF: Linux would autotune a connection's send buffer up to tcp_wmem's maximum
  // (4 MiB), so a client that stops reading lets a whole turn (~200 bytes an event)
  // run into the kernel instead of pausing it, and pins that memory per connection.
  // 64 KiB (set on the listener, inherited by every accepted socket) is a few hundred
  // events: then the turn's queue fills and the turn pauses (attnserve_waiting_turns).
  s.set_socket_options([&listen_socket](int sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    int send_buffer = kSendBufferBytes;
    ::setsockopt(sock, SOL_SOCKET, SO_SNDBUF, &send_buffer, sizeof(send_buffer));
    listen_socket = sock;
  });
  f->AddRoutes();
  int bound = port == 0 ? s.bind_to_any_port(host) : (s.bind_to_port(host, port) ? port : -1);
  if (bound <= 0) {
    return absl::UnavailableError(absl::StrCat(
        "--http_listen: cannot listen on ", f->options_.listen,
        " (address in use or not valid for this machine?)"));
  }
  if (listen_socket >= 0) ::listen(listen_socket, 1024);
  f->port_ = bound;
  auto ended = std::make_shared<std::atomic<bool>>(false);
  f->listener_ = std::thread([raw = f.get(), ended] {
    raw->server_->listen_after_bind();
    ended->store(true);
  });
  // httplib's stop() does nothing until the listener has started running (it marks
  // itself running on entry): a front stopped right after Start would leave the listener
  // accepting forever and Stop() joining it forever. Wait until it runs (or has ended).
  while (!f->server_->is_running() && !ended->load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::fprintf(stderr, "attnserve: HTTP on %s:%d\n", host.c_str(), bound);
  return f;
}

HttpFront::~HttpFront() { Stop(); }

void HttpFront::Stop() {
  if (server_) server_->stop();
  if (listener_.joinable()) listener_.join();
}

int HttpFront::streams_in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return streams_;
}

bool HttpFront::WaitForNoStreams(absl::Duration timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_.wait_for(lock, absl::ToChronoNanoseconds(timeout), [this] { return streams_ == 0; });
}

absl::StatusOr<std::shared_ptr<HttpFront::Slot>> HttpFront::TakeSlot() {
  if (draining_.load()) {
    return absl::UnavailableError("the server is draining; retry on another replica");
  }
  if (!Acquire()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "server busy: ", options_.max_streams,
        " generating requests are in flight (--http_max_streams); retry"));
  }
  return std::make_shared<Slot>(this);
}

absl::StatusOr<ChatTemplateKind> HttpFront::TemplateOf(const std::string& name) const {
  for (const auto& [model, kind] : templates_) {
    if (model != name) continue;
    if (kind.ok()) return *kind;
    return InvalidParam("model", std::string(kind.status().message()));
  }
  return InvalidParam("model", absl::StrCat("no chat template for '", name, "'"));
}

bool HttpFront::Acquire() {
  std::lock_guard<std::mutex> lock(mu_);
  if (streams_ >= options_.max_streams) return false;
  ++streams_;
  return true;
}

void HttpFront::Release() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    --streams_;
  }
  idle_.notify_all();
}

void HttpFront::Record(const std::string& route_name, int status, const std::string& model) const {
  if (deps_.metrics == nullptr) return;
  std::string attention;
  if (!model.empty()) {
    if (auto m = deps_.models->Find(model); m.ok()) attention = (*m)->attention();
  }
  deps_.metrics->RecordRequest(route_name, std::to_string(status), model, attention);
}

void HttpFront::Fail(const std::string& route_name, const absl::Status& status,
                     httplib::Response& res, const std::string& model) const {
  const HttpError e = ToHttpError(status);
  if (e.retry_after_seconds > 0) {
    res.set_header("retry-after", std::to_string(e.retry_after_seconds));
    // A refused client comes back later: its idle keep-alive connection would hold one
    // of the pool's threads for the keep-alive timeout, and a burst of them would starve
    // /health and every request behind them in the accept queue.
    res.set_header("connection", "close");
  }
  Answer(res, e.status, e.body);
  Record(route_name, e.status, model);
}

void HttpFront::AddRoutes() {
  httplib::Server& s = *server_;
  // A connection over a cap (connection_guard.h) is answered only on /health.
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!GuardedServer::OverLimit() || (req.method == "GET" && req.path == "/health")) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    res.set_header("connection", "close");
    Fail("connection", absl::UnavailableError(
                           "too many connections (from this address or in total); retry"),
         res);
    return httplib::Server::HandlerResponse::Handled;
  });
  s.Get("/health", [this](const httplib::Request& req, httplib::Response& res) {
    Health(req, res);
  });
  s.Get(R"(/([A-Za-z0-9_.-]*))", [this](const httplib::Request& req, httplib::Response& res) {
    Page(req, res);
  });
  s.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
    Models(req, res);
  });
  s.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
    Models(req, res);
  });
  s.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    Generate("POST /v1/completions", int(Route::kCompletions), req, res);
  });
  s.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    Generate("POST /v1/chat/completions", int(Route::kChat), req, res);
  });
  if (deps_.checkpoints != nullptr) {
    s.Post("/v1/responses", [this](const httplib::Request& req, httplib::Response& res) {
      CreateResponse(req, res);
    });
    s.Get(R"(/v1/responses/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
      GetResponse(req, res);
    });
    s.Delete(R"(/v1/responses/([^/]+))",
             [this](const httplib::Request& req, httplib::Response& res) {
               DeleteResponse(req, res);
             });
  }
  if (deps_.checkpoints != nullptr && deps_.conversations != nullptr) {
    using Handler = void (HttpFront::*)(const httplib::Request&, httplib::Response&);
    auto route = [this](Handler h) {
      return [this, h](const httplib::Request& req, httplib::Response& res) { (this->*h)(req, res); };
    };
    s.Post("/v1/conversations", route(&HttpFront::CreateConversation));
    s.Get("/v1/conversations", route(&HttpFront::ListConversations));
    s.Get(R"(/v1/conversations/([^/]+))", route(&HttpFront::GetConversation));
    s.Post(R"(/v1/conversations/([^/]+))", route(&HttpFront::UpdateConversation));
    s.Delete(R"(/v1/conversations/([^/]+))", route(&HttpFront::DeleteConversation));
    s.Get(R"(/v1/conversations/([^/]+)/items)", route(&HttpFront::ListConversationItems));
    s.Post(R"(/v1/conversations/([^/]+)/fork)", route(&HttpFront::ForkConversation));
  }
  // Unknown routes (and cpp-httplib's own refusals: a body over the limit is 413) get an
  // OpenAI error body too.
  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    const std::string message =
        res.status == 404 ? absl::StrCat("no route ", req.method, " ", req.path)
        : res.status == 413 ? std::string("the request body is too large")
                            : absl::StrCat("HTTP ", res.status);
    json body = {{"error",
                  {{"message", message},
                   {"type", "invalid_request_error"},
                   {"param", nullptr},
                   {"code", nullptr}}}};
    res.set_content(Dump(body), kJson);
  });
}

void HttpFront::Health(const httplib::Request&, httplib::Response& res) {
  if (draining_.load()) {
    res.set_header("retry-after", "1");
    Answer(res, 503, {{"status", "draining"}});
  } else {
    Answer(res, 200, {{"status", "ok"}});
  }
  Record("GET /health", res.status, "");
}

void HttpFront::Page(const httplib::Request& req, httplib::Response& res) {
  const std::string route_name = "GET /{page}";
  auto file = page_.Find(req.matches[1].str());
  if (!file.ok()) return Fail(route_name, file.status(), res);
  res.status = 200;
  // The page runs only its own files and talks only to this server.
  res.set_header("content-security-policy",
                 "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'");
  res.set_header("x-content-type-options", "nosniff");
  res.set_header("cache-control", "no-cache");
  res.set_content(std::move(file->body), file->content_type);
  Record(route_name, 200, "");
}

void HttpFront::Models(const httplib::Request& req, httplib::Response& res) {
  const bool one = req.matches.size() > 1;
  const std::string route_name = one ? "GET /v1/models/{id}" : "GET /v1/models";
  auto tenant = deps_.keys->AuthenticateHeader(Header(req, "authorization"));
  if (!tenant.ok()) return Fail(route_name, tenant.status(), res);
  if (one) {
    const std::string id = req.matches[1];
    auto m = deps_.models->Find(id);
    if (!m.ok() || id.empty()) {
      return Fail(route_name, absl::NotFoundError(absl::StrCat("model '", id, "' is not served here")),
                  res);
    }
    Answer(res, 200, ModelObject(**m, created_));
    return Record(route_name, 200, (*m)->name);
  }
  json data = json::array();
  for (const auto& m : deps_.models->all()) {
    data.push_back(ModelObject(*m, created_));
    for (const auto& v : m->variants) data.push_back(ModelObject(*v, created_));
  }
  Answer(res, 200, {{"object", "list"}, {"data", data}});
  Record(route_name, 200, "");
}

void HttpFront::Generate(const std::string& route_name, int route_number,
                         const httplib::Request& req, httplib::Response& res) {
  const absl::Time arrival = absl::Now();
  const Route route = Route(route_number);
  auto tenant = deps_.keys->AuthenticateHeader(Header(req, "authorization"));
  if (!tenant.ok()) return Fail(route_name, tenant.status(), res);
  auto slot = TakeSlot();
  if (!slot.ok()) return Fail(route_name, slot.status(), res);
  auto request = ParseOpenAiRequest(route, req.body, RandomSeed());
  if (!request.ok()) return Fail(route_name, request.status(), res);
  v1::GenerateRequest& generate = request->generate;
  if (auto session = Header(req, "x-session-id")) generate.set_session_id(std::string(*session));
  std::shared_ptr<KeptChat> chat;  // a stateless chat turn, on a session of its own
  if (route == Route::kChat) {
    // The template of the requested model (of the default model when none is named).
    auto model = deps_.models->Find(generate.model());
    if (!model.ok()) return Fail(route_name, model.status(), res);
    auto kind = TemplateOf((*model)->name);
    if (!kind.ok()) return Fail(route_name, kind.status(), res, (*model)->name);
    // The calls in the model's own envelope; its answer is read back in the same one.
    auto format = ConstrainToolCalls(request->tools, *kind, "response_format", &generate);
    if (!format.ok()) return Fail(route_name, format.status(), res, (*model)->name);
    request->tool_format = *format;
    auto text = RenderChat(*kind, request->messages, request->tools.definitions);
    if (!text.ok()) return Fail(route_name, text.status(), res, (*model)->name);
    generate.set_text(*std::move(text));
    if (generate.session_id().empty() && prefix_cache_) {
      auto kept = StartKeptChat(*tenant, *model, *kind, request->messages,
                                request->tools.definitions, &generate);
      if (!kept.ok()) return Fail(route_name, kept.status(), res, (*model)->name);
      chat = *std::move(kept);
    }
  }

  auto free_text_stops = TakeFreeTextStops(*request, &generate);
  if (!free_text_stops.ok()) return Fail(route_name, free_text_stops.status(), res, generate.model());
  auto started = StartQueuedTurn(*tenant, generate, arrival, *std::move(free_text_stops));
  if (!started.ok()) {
    return Fail(route_name, NameConstraintError(started.status(), "response_format"), res,
                generate.model());
  }
  std::shared_ptr<TurnQueue> queue = *std::move(started);

  const std::string id =
      absl::StrCat(route == Route::kChat ? "chatcmpl-" : "cmpl-", RandomId128());
  auto answer = std::make_shared<OpenAiAnswer>(*request, id, arrival, queue->model_name());
  if (chat) answer->set_cached_tokens(int64_t(chat->cached));
  // The generated ids join the prompt's in the kept state's key.
  auto add = [chat](std::vector<scheduler::TokenEvent>& tokens) {
    if (chat) {
      for (const scheduler::TokenEvent& t : tokens) chat->ids.push_back(t.id);
    }
  };
  if (!request->stream) {
    const scheduler::TurnResult result = CollectTurn(*queue, [&](std::vector<scheduler::TokenEvent> t) {
      add(t);
      answer->Add(std::move(t));
    });
    if (chat) KeepChat(*chat, result);
    absl::Status error;
    const std::optional<std::string> reason = FinishReasonOf(result, &error);
    if (!reason.has_value()) return Fail(route_name, error, res, queue->model_name());
    Answer(res, 200, answer->Body(result, *reason));
    return Record(route_name, 200, queue->model_name());
  }
  TurnWriter writer;
  writer.start = [answer] { return answer->Start(); };
  writer.tokens = [answer, add](std::vector<scheduler::TokenEvent> t) {
    add(t);
    return answer->Tokens(std::move(t));
  };
  writer.finish = [this, answer, chat](const scheduler::TurnResult& r) {
    if (chat) KeepChat(*chat, r);  // before [DONE]: a client that resends at once finds it
    return answer->Finish(r);
  };
  if (chat) writer.after = [chat] { chat->session->Close(); };
  StreamTurn(route_name, std::move(queue), std::move(writer), *std::move(slot), res);
}

absl::StatusOr<std::shared_ptr<HttpFront::KeptChat>> HttpFront::StartKeptChat(
    const std::string& tenant, const std::shared_ptr<const catalogue::ServedModel>& model,
    ChatTemplateKind kind, const std::vector<ChatMessage>& messages,
    const std::vector<std::string>& tools, v1::GenerateRequest* generate) {
  auto chat = std::make_shared<KeptChat>();
  // Keyed by what the state belongs to (weights, config, attention), not the model's
  // name: a replica on other weights of the same name misses instead of failing.
  chat->key = PrefixKey{tenant, DigestHex(model->model->Fingerprint()), ChatTemplateName(kind)};
  // The prompt's ids exactly as admission would encode the text at a session's start.
  auto ids = model->tokenizer->Encode(generate->text(), /*continuation=*/false);
  if (!ids.ok()) return ids.status();
  // A history the context cannot hold is refused before anything is looked up or made.
  if (absl::Status s = service::CheckFitsContext(0, ids->size(), *model); !s.ok()) return s;
  // Where the history's assistant turns end, in ids: the states an earlier turn may
  // have kept. Only the prefixes of the prompt's own ids count.
  // The latest few are enough: a client resending its history extends the state its
  // previous call kept, and each candidate costs an encode of the history so far.
  // (Up to two ends per assistant message: with and without its end-of-turn marker.)
  constexpr size_t kMaxCandidates = 8;
  std::vector<std::string> ends = AssistantTurnEnds(kind, messages, kMaxCandidates / 2, tools);
  std::vector<size_t> lengths;
  for (const std::string& end : ends) {
    auto end_ids = model->tokenizer->Encode(end, /*continuation=*/false);
    if (!end_ids.ok() || end_ids->size() >= ids->size()) continue;
    if (std::equal(end_ids->begin(), end_ids->end(), ids->begin())) {
      lengths.push_back(end_ids->size());
    }
  }
  std::optional<PrefixCache::Hit> hit = prefix_cache_->Lookup(chat->key, *ids, lengths);
  // The part not in a kept state is the turn's prompt: admission's limit, checked before
  // a session is made or imported for it.
  const size_t cached = hit.has_value() ? hit->tokens : 0;
  if (absl::Status s = service::CheckPromptSize(ids->size() - cached, deps_.limits); !s.ok()) {
    return s;
  }
  auto session = hit.has_value()
                     ? deps_.store->Import(tenant, hit->state, options_.prefix_ttl, kLocal)
                     : deps_.store->Create(tenant, model, options_.prefix_ttl, kLocal);
  if (hit.has_value() && absl::IsFailedPrecondition(session.status())) {
    // A kept state this server cannot import (a model it does not serve) is a miss.
    hit.reset();
    session = deps_.store->Create(tenant, model, options_.prefix_ttl, kLocal);
  }
  if (!session.ok()) return session.status();
  chat->session = std::make_shared<OwnSession>(deps_.store, tenant, (*session)->id());
  chat->cached = hit.has_value() ? hit->tokens : 0;
  chat->stop_strings = generate->sampling().stop_size() > 0;
  // The rest of the prompt as ids (a session's later turns would encode text as a
  // continuation, which need not split the same way).
  generate->set_session_id(chat->session->id());
  generate->clear_text();
  for (size_t i = chat->cached; i < ids->size(); ++i) generate->mutable_tokens()->add_ids((*ids)[i]);
  chat->ids = *std::move(ids);
  return chat;
}

void HttpFront::KeepChat(KeptChat& chat, const scheduler::TurnResult& result) {
  // A turn that did not end normally may have stopped anywhere; a stop string leaves
  // tokens in the state that the client will not resend. Neither is kept.
  const bool clean = result.reason == scheduler::FinishReason::kLength ||
                     (result.reason == scheduler::FinishReason::kStop && !chat.stop_strings);
  if (clean) {
    if (auto state = chat.session->Export(); state.ok()) {
      // A state not kept costs a later request time, never correctness.
      (void)prefix_cache_->Save(chat.key, chat.ids, *std::move(state));
    }
  }
  chat.session->Close();
}

absl::StatusOr<std::optional<AnswerStops>> HttpFront::TakeFreeTextStops(
    const OpenAiRequest& request, v1::GenerateRequest* generate) const {
  // Stop strings under any other constraint were refused (CheckStopWithConstraint).
  if (!request.tool_format.has_value() || request.stop.empty()) return std::nullopt;
  // Admission's own checks of them (count, empty, length), on a request with nothing else
  // to check: the same refusal as when the scheduler is given them.
  v1::GenerateRequest probe;
  probe.set_model(generate->model());
  probe.mutable_tokens()->add_ids(0);
  *probe.mutable_sampling() = generate->sampling();
  probe.mutable_sampling()->clear_constraint();
  if (auto checked = service::ParseGenerate(probe, *deps_.models, deps_.limits); !checked.ok()) {
    return checked.status();
  }
  generate->mutable_sampling()->clear_stop();
  return AnswerStops(request.stop, std::string(grammar::kToolCallOpening));
}

absl::StatusOr<std::shared_ptr<TurnQueue>> HttpFront::StartQueuedTurn(
    const std::string& tenant, const v1::GenerateRequest& generate, absl::Time arrival,
    std::optional<AnswerStops> free_text_stops) {
  auto queue = std::make_shared<TurnQueue>(deps_.scheduler);
  if (free_text_stops.has_value()) queue->StopInFreeText(*std::move(free_text_stops));
  auto make_sink = [&](const std::shared_ptr<session::Session>& session) {
    queue->set_model_name(session->served().name);
    return queue;
  };
  // StartTurn may wait (the session's previous turn, the durable store): this thread is
  // the connection's, and its slot counts toward max_streams meanwhile.
  auto control = service::StartTurn(service::Caller{tenant}, *deps_.models, *deps_.store,
                                    *deps_.scheduler, deps_.limits, generate, arrival,
                                    absl::InfiniteFuture(), make_sink);
  if (!control.ok()) return control.status();
  queue->SetControl(*std::move(control));
  return queue;
}

scheduler::TurnResult HttpFront::CollectTurn(
    TurnQueue& queue, const std::function<void(std::vector<scheduler::TokenEvent>)>& add) {
  std::optional<scheduler::TurnResult> result;
  while (!result.has_value()) {
    TurnQueue::Batch batch = queue.Take(absl::InfiniteDuration());
    add(std::move(batch.tokens));
    result = std::move(batch.result);
  }
  return *std::move(result);
}

void HttpFront::StreamTurn(const std::string& route_name, std::shared_ptr<TurnQueue> queue,
                           TurnWriter writer, std::shared_ptr<Slot> slot,
                           httplib::Response& res) {
  // The provider runs on this connection's thread after the handler returns, once per
  // call until it calls done() or fails. The releaser runs when the response is
  // destroyed, however it ended: a client gone cancels the turn, and the slot is freed
  // only once the session is.
  struct Stream {
    bool started = false;
    bool ended = false;  // the turn's result was written
    bool client_gone = false;
  };
  auto stream = std::make_shared<Stream>();
  auto events = std::make_shared<TurnWriter>(std::move(writer));
  const absl::Duration ping = options_.ping_interval;
  res.set_header("cache-control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [queue, events, stream, ping](size_t, httplib::DataSink& sink) {
        auto write = [&](const std::string& text) {
          if (text.empty() || sink.write(text.data(), text.size())) return true;
          stream->client_gone = true;
          queue->Cancel();
          return false;
        };
        if (!stream->started) {
          stream->started = true;
          return write(events->start());
        }
        TurnQueue::Batch batch = queue->Take(ping);
        if (batch.tokens.empty() && !batch.result.has_value()) return write(": ping\n\n");
        if (!write(events->tokens(std::move(batch.tokens)))) return false;
        if (batch.result.has_value()) {
          if (!write(events->finish(*batch.result))) return false;
          stream->ended = true;
          sink.done();
        }
        return true;
      },
      [this, queue, events, stream, slot, route_name](bool) {
        if (!stream->ended) queue->Cancel();  // the connection ended first
        queue->WaitFinished();
        if (events->after) events->after();
        // The status line said 200; a stream its client left is counted as 499.
        Record(route_name, stream->ended ? 200 : 499, queue->model_name());
      });
}

}  // namespace attnserve::http
