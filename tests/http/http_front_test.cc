// The HTTP front of an in-process AttnServer (tiny byte-level model) over loopback:
// routes, SSE framing, errors with their statuses, admission, draining, and a client that
// leaves mid-stream. Turns are held open by a reader that stops reading (a raw socket with
// a small receive buffer against a turn far longer than any socket buffer), never by
// timing.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include <grpcpp/create_channel.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "attnserve/v1/attnserve.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "server/http/answer_stops.h"
#include "server/http/turn_queue.h"
#include "server/service/server.h"
#include "tests/testing/tiny_model.h"

namespace attnserve::http {
namespace {

using nlohmann::json;

constexpr char kKey[] = "test-key-0123456789abcdef";

// A client that sends one request and then reads only when told: with a 4 KiB receive
// buffer, the server's writes stall once its send buffer (at most 4 MiB) is full, and a
// turn of 100000 tokens (~15 MB of events) cannot finish while it does not read.
class SlowReader {
 public:
  SlowReader(int port, const std::string& path, const std::string& body,
             const std::string& extra_headers = "") {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int small = 4096;
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(uint16_t(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    const std::string request =
        absl::StrCat("POST ", path, " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n",
                     extra_headers, "Content-Length: ", body.size(), "\r\n\r\n", body);
    EXPECT_EQ(::write(fd_, request.data(), request.size()), ssize_t(request.size()));
  }
  ~SlowReader() { Close(); }
  // Reads until `needle` has arrived; returns everything read so far.
  std::string ReadUntil(const std::string& needle) {
    char buffer[512];
    while (read_.find(needle) == std::string::npos) {
      const ssize_t n = ::read(fd_, buffer, sizeof(buffer));
      if (n <= 0) break;
      read_.append(buffer, size_t(n));
    }
    return read_;
  }
  // Closes with unread data, which resets the connection: the server's next writes fail.
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  std::string read_;
};

// A turn that outlasts any socket buffer: it ends only when cancelled.
std::string EndlessCompletion() {
  return R"({"prompt":"In the beginning","max_tokens":100000,"ignore_eos":true,"stream":true,"temperature":0})";
}

class HttpFrontTest : public testing::Test {
 protected:
  void SetUp() override { StartServer(config::ServerOptions{}); }

  // `max_prompt_tokens`: 100 by default, so that a few hundred bytes are over the limit.
  void StartServer(config::ServerOptions o, int max_prompt_tokens = 100) {
    server_.reset();
    o.listen_address = "127.0.0.1:0";
    o.http_listen = "127.0.0.1:0";
    o.metrics_address = "";
    o.max_prompt_tokens = max_prompt_tokens;
    o.max_generated_tokens = 100000;
    auto s = service::AttnServer::Start(
        o, std::make_unique<catalogue::ModelCatalogue>(
               std::vector<std::shared_ptr<const catalogue::ServedModel>>{
                   test_util::TinyServedModel("taylor")}));
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(s).value();
    ASSERT_GT(server_->http_port(), 0);
    stub_ = v1::AttnServe::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(server_->port()), grpc::InsecureChannelCredentials()));
  }

  std::unique_ptr<httplib::Client> Client() const {
    auto c = std::make_unique<httplib::Client>("127.0.0.1", server_->http_port());
    c->set_read_timeout(120);
    return c;
  }
  httplib::Result Post(const std::string& path, const json& body,
                       const httplib::Headers& headers = {}) const {
    return Client()->Post(path.c_str(), headers, body.dump(), "application/json");
  }

  std::string CreateSession() {
    grpc::ClientContext context;
    v1::CreateSessionRequest request;
    request.set_model("tiny-taylor");
    if (!key_.empty()) context.AddMetadata("authorization", std::string("Bearer ") + key_);
    v1::Session session;
    EXPECT_TRUE(stub_->CreateSession(&context, request, &session).ok());
    return session.id();
  }
  int64_t Position(const std::string& id) {
    grpc::ClientContext context;
    v1::GetSessionRequest request;
    request.set_session_id(id);
    v1::Session session;
    EXPECT_TRUE(stub_->GetSession(&context, request, &session).ok());
    return session.position();
  }

  std::unique_ptr<service::AttnServer> server_;
  std::unique_ptr<v1::AttnServe::Stub> stub_;
  std::string key_;
};

// The data of each event of an SSE body, keep-alive comments dropped; fails on anything
// that is not "data: ...\n\n".
std::vector<std::string> Events(const std::string& body) {
  std::vector<std::string> out;
  EXPECT_TRUE(body.size() >= 2 && body.substr(body.size() - 2) == "\n\n") << body;
  for (absl::string_view event : absl::StrSplit(body, "\n\n", absl::SkipEmpty())) {
    if (event == ": ping") continue;
    EXPECT_EQ(event.substr(0, 6), "data: ") << event;
    out.emplace_back(event.substr(6));
  }
  return out;
}

TEST_F(HttpFrontTest, HealthAndModels) {
  auto health = Client()->Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(json::parse(health->body), json({{"status", "ok"}}));
  auto list = Client()->Get("/v1/models");
  ASSERT_TRUE(list);
  ASSERT_EQ(list->status, 200);
  json models = json::parse(list->body);
  EXPECT_EQ(models["object"], "list");
  ASSERT_EQ(models["data"].size(), 1u);
  EXPECT_EQ(models["data"][0]["id"], "tiny-taylor");
  EXPECT_EQ(models["data"][0]["object"], "model");
  EXPECT_EQ(models["data"][0]["owned_by"], "attnserve");
  EXPECT_EQ(models["data"][0]["attention"], "taylor");
  EXPECT_GT(models["data"][0]["state_bytes_per_session"].get<int64_t>(), 0);
  auto one = Client()->Get("/v1/models/tiny-taylor");
  ASSERT_TRUE(one);
  EXPECT_EQ(one->status, 200);
  EXPECT_EQ(json::parse(one->body), models["data"][0]);
  auto missing = Client()->Get("/v1/models/no-such-model");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(json::parse(missing->body)["error"]["type"], "invalid_request_error");
}

TEST_F(HttpFrontTest, ChatStreamedAndNotAndTheRenderedCompletionGiveTheSameText) {
  const json messages = json::array({{{"role", "user"}, {"content", "Hi"}}});
  auto whole = Post("/v1/chat/completions",
                    {{"model", "tiny-taylor"}, {"messages", messages}, {"max_tokens", 12},
                     {"temperature", 0}});
  ASSERT_TRUE(whole);
  ASSERT_EQ(whole->status, 200) << whole->body;
  json body = json::parse(whole->body);
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["model"], "tiny-taylor");
  EXPECT_EQ(body["choices"][0]["message"]["role"], "assistant");
  const std::string text = body["choices"][0]["message"]["content"];
  EXPECT_EQ(body["usage"]["prompt_tokens"], std::string("User: Hi\nAssistant: ").size());

  auto streamed = Post("/v1/chat/completions", {{"messages", messages}, {"max_tokens", 12},
                                                {"temperature", 0}, {"stream", true}});
  ASSERT_TRUE(streamed);
  ASSERT_EQ(streamed->status, 200);
  EXPECT_EQ(streamed->get_header_value("content-type"), "text/event-stream");
  std::string joined;
  for (const std::string& e : Events(streamed->body)) {
    if (e == "[DONE]") continue;
    json chunk = json::parse(e);
    for (const json& c : chunk["choices"]) {
      if (c["delta"].contains("content")) joined += c["delta"]["content"].get<std::string>();
    }
  }
  EXPECT_EQ(joined, text);

  // The plain template by hand, as a completion: the same greedy text.
  auto completion = Post("/v1/completions", {{"prompt", "User: Hi\nAssistant: "},
                                             {"max_tokens", 12}, {"temperature", 0}});
  ASSERT_TRUE(completion);
  ASSERT_EQ(completion->status, 200) << completion->body;
  json c = json::parse(completion->body);
  EXPECT_EQ(c["object"], "text_completion");
  EXPECT_EQ(c["choices"][0]["text"], text);
}

TEST_F(HttpFrontTest, SseFramingIsByteExact) {
  auto whole = Post("/v1/completions", {{"prompt", "abc"}, {"max_tokens", 5}, {"temperature", 0}});
  ASSERT_TRUE(whole);
  const std::string text = json::parse(whole->body)["choices"][0]["text"];
  auto streamed = Post("/v1/completions",
                       {{"prompt", "abc"}, {"max_tokens", 5}, {"temperature", 0},
                        {"stream", true}, {"stream_options", {{"include_usage", true}}}});
  ASSERT_TRUE(streamed);
  ASSERT_EQ(streamed->status, 200);
  std::vector<std::string> events = Events(streamed->body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  events.pop_back();
  // Every event is compact JSON, exactly as re-serialised; one id and created throughout.
  const json first = json::parse(events[0]);
  std::string joined;
  for (size_t i = 0; i < events.size(); ++i) {
    const json chunk = json::parse(events[i]);
    EXPECT_EQ(chunk.dump(), events[i]);
    EXPECT_EQ(chunk["id"], first["id"]);
    EXPECT_EQ(chunk["created"], first["created"]);
    EXPECT_EQ(chunk["object"], "text_completion");
    const bool last = i + 1 == events.size();
    if (last) {
      EXPECT_EQ(chunk["choices"], json::array());
      EXPECT_EQ(chunk["usage"]["completion_tokens"], 5);
      EXPECT_EQ(chunk["usage"]["prompt_tokens"], 3);  // "abc", one byte a token
      EXPECT_EQ(chunk["usage"]["total_tokens"], 8);
      EXPECT_EQ(chunk["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    } else {
      EXPECT_TRUE(chunk["usage"].is_null());
      ASSERT_EQ(chunk["choices"].size(), 1u);
      joined += chunk["choices"][0]["text"].get<std::string>();
      const bool finishing = i + 2 == events.size();
      EXPECT_EQ(chunk["choices"][0]["finish_reason"], finishing ? json("length") : json(nullptr));
    }
  }
  EXPECT_EQ(first["id"].get<std::string>().substr(0, 5), "cmpl-");
  EXPECT_EQ(joined, text);
}

TEST_F(HttpFrontTest, ChatStreamStartsWithTheRoleDelta) {
  auto streamed = Post("/v1/chat/completions",
                       {{"messages", json::array({{{"role", "user"}, {"content", "x"}}})},
                        {"max_tokens", 3}, {"stream", true}});
  ASSERT_TRUE(streamed);
  std::vector<std::string> events = Events(streamed->body);
  ASSERT_GE(events.size(), 3u);
  const json first = json::parse(events[0]);
  EXPECT_EQ(first["choices"][0]["delta"], json({{"role", "assistant"}, {"content", ""}}));
  EXPECT_EQ(first["id"].get<std::string>().substr(0, 9), "chatcmpl-");
  const json finish = json::parse(events[events.size() - 2]);
  EXPECT_EQ(finish["choices"][0]["delta"], json::object());
  EXPECT_EQ(finish["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(events.back(), "[DONE]");
}

TEST_F(HttpFrontTest, ErrorsHaveTheirStatusesAndBodies) {
  auto expect = [&](const char* path, const std::string& body, int status, const json& param) {
    auto r = Client()->Post(path, body, "application/json");
    ASSERT_TRUE(r) << body;
    EXPECT_EQ(r->status, status) << body << " -> " << r->body;
    json error = json::parse(r->body)["error"];
    EXPECT_TRUE(error["message"].is_string()) << r->body;
    EXPECT_TRUE(error["type"].is_string()) << r->body;
    EXPECT_EQ(error["param"], param) << r->body;
  };
  expect("/v1/completions", "{not json", 400, nullptr);
  expect("/v1/completions", R"({"prompt":"x","model":"nope"})", 404, nullptr);
  expect("/v1/completions", R"({"prompt":"x","n":2})", 400, "n");
  expect("/v1/chat/completions", R"({"messages":[{"role":"user","content":"x"}],"n":3})", 400, "n");
  expect("/v1/completions", json({{"prompt", std::string(200, 'a')}}).dump(), 413, nullptr);
  expect("/v1/completions", R"({"prompt":"x","temperature":-1})", 400, nullptr);
  expect("/v1/chat/completions", R"({"messages":[{"role":"tool","content":"x"}]})", 400,
         "messages[0].tool_call_id");  // a tool result names the call it answers
  // A session that does not exist.
  auto r = Post("/v1/completions", {{"prompt", "x"}}, {{"x-session-id", "no-such-session"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
}

TEST_F(HttpFrontTest, ApiKeysGuardEveryRouteButHealth) {
  const std::string dir = testing::TempDir() + "/http_keys";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/keys.txt") << kKey << " acme\n";
  config::ServerOptions o;
  o.api_keys_file = dir + "/keys.txt";
  StartServer(o);
  EXPECT_EQ(Client()->Get("/health")->status, 200);
  EXPECT_EQ(Client()->Get("/v1/models")->status, 401);
  auto bad = Post("/v1/completions", {{"prompt", "x"}}, {{"Authorization", "Bearer wrong-key-0123456789"}});
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 401);
  EXPECT_EQ(json::parse(bad->body)["error"]["code"], "invalid_api_key");
  const httplib::Headers good = {{"Authorization", std::string("Bearer ") + kKey}};
  EXPECT_EQ(Client()->Get("/v1/models", good)->status, 200);
  auto ok = Post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 2}}, good);
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
}

TEST_F(HttpFrontTest, BusySessionIs409AndALeavingClientFreesIt) {
  const std::string id = CreateSession();
  SlowReader reader(server_->http_port(), "/v1/completions", EndlessCompletion(),
                    "x-session-id: " + id + "\r\n");
  const std::string start = reader.ReadUntil("\"text\":");  // the turn is generating
  ASSERT_NE(start.find("200 OK"), std::string::npos) << start;
  auto busy = Post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 1}}, {{"x-session-id", id}});
  ASSERT_TRUE(busy);
  EXPECT_EQ(busy->status, 409) << busy->body;
  EXPECT_EQ(server_->http()->streams_in_flight(), 1);

  // The client leaves: the server's next write fails, the turn is cancelled, and its slot
  // is freed only after the session is.
  reader.Close();
  ASSERT_TRUE(server_->http()->WaitForNoStreams(absl::Seconds(60)));
  const int64_t position = Position(id);
  EXPECT_LT(position, 100000);  // cancelled, not run to its end
  auto next = Post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 2}}, {{"x-session-id", id}});
  ASSERT_TRUE(next);
  EXPECT_EQ(next->status, 200) << next->body;
  EXPECT_EQ(Position(id), position + 1 + 2);
}

TEST_F(HttpFrontTest, FullStreamSlotsAre429WhileHealthAnswers) {
  config::ServerOptions o;
  o.http_max_streams = 1;
  StartServer(o);
  SlowReader reader(server_->http_port(), "/v1/completions", EndlessCompletion());
  reader.ReadUntil("\"text\":");
  auto refused = Post("/v1/chat/completions",
                      {{"messages", json::array({{{"role", "user"}, {"content", "x"}}})}});
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 429);
  EXPECT_EQ(refused->get_header_value("retry-after"), "1");
  EXPECT_EQ(json::parse(refused->body)["error"]["type"], "rate_limit_error");
  auto health = Client()->Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(Client()->Get("/v1/models")->status, 200);
  reader.Close();
  ASSERT_TRUE(server_->http()->WaitForNoStreams(absl::Seconds(60)));
  auto after = Post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 1}});
  ASSERT_TRUE(after);
  EXPECT_EQ(after->status, 200);
}

// A prompt over the limit is refused before a session is made for it: with the only
// session slot taken, it is 413 (too long), not 429 (no room for its session).
TEST_F(HttpFrontTest, APromptOverTheLimitIsRefusedBeforeItsSessionIsMade) {
  config::ServerOptions o;
  o.max_sessions = 1;
  StartServer(o);
  ASSERT_FALSE(CreateSession().empty());  // the only slot
  const std::string long_text(300, 'a');  // max_prompt_tokens is 100
  auto chat = Post("/v1/chat/completions",
                   {{"messages", json::array({{{"role", "user"}, {"content", long_text}}})},
                    {"max_tokens", 1}});
  ASSERT_TRUE(chat);
  EXPECT_EQ(chat->status, 413) << chat->body;
  EXPECT_EQ(json::parse(chat->body)["error"]["code"], "prompt_too_long");
  auto response = Post("/v1/responses", {{"input", long_text}, {"max_output_tokens", 1}});
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 413) << response->body;
  // A prompt within the limit does need the slot: 429, so the setup is what it claims.
  auto small = Post("/v1/chat/completions",
                    {{"messages", json::array({{{"role", "user"}, {"content", "a"}}})},
                     {"max_tokens", 1}});
  ASSERT_TRUE(small);
  EXPECT_EQ(small->status, 429) << small->body;
}

TEST_F(HttpFrontTest, DrainingAnswers503WithRetryAfter) {
  SlowReader reader(server_->http_port(), "/v1/completions", EndlessCompletion());
  reader.ReadUntil("\"text\":");
  // The open stream keeps the drain waiting (its grace is long) until the client leaves.
  std::thread drain([this] { server_->Shutdown(absl::Seconds(120)); });
  auto client = Client();
  int status = 0;
  while (status != 503) {  // waits for the drain to begin
    auto health = client->Get("/health");
    ASSERT_TRUE(health);
    status = health->status;
    if (status == 503) {
      EXPECT_EQ(json::parse(health->body), json({{"status", "draining"}}));
    }
  }
  auto refused = client->Post("/v1/completions", R"({"prompt":"x"})", "application/json");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 503);
  EXPECT_EQ(refused->get_header_value("retry-after"), "1");
  reader.Close();
  drain.join();
}

// --- how constrained answers end ---

scheduler::TokenEvent Token(std::string bytes) {
  scheduler::TokenEvent t;
  t.bytes = std::move(bytes);
  return t;
}

// The queue of a turn whose stop strings end only its free text (tool_choice "auto"):
// one in the free text cancels the turn from the engine thread, which then takes no
// step, and the turn ends kStop; inside a call nothing is matched.
TEST(TurnQueueTest, AStopInTheFreeTextCancelsTheTurnAndItEndsStopped) {
  TurnQueue call(/*scheduler=*/nullptr);
  call.StopInFreeText(AnswerStops({"\"", "}"}, "<tool_call>"));
  auto call_control = std::make_shared<scheduler::TurnControl>();
  call.SetControl(call_control);
  call.OnToken(Token("Sure. <tool_call>{\"name\": \"f\", \"arguments\": {}}"));
  EXPECT_FALSE(call_control->cancelled());
  EXPECT_FALSE(call.Full());
  scheduler::TurnResult length;
  length.reason = scheduler::FinishReason::kLength;
  call.OnFinish(length);
  EXPECT_EQ(call.Take(absl::ZeroDuration()).result->reason, scheduler::FinishReason::kLength);

  TurnQueue text(/*scheduler=*/nullptr);
  text.StopInFreeText(AnswerStops({"\"", "}"}, "<tool_call>"));
  auto control = std::make_shared<scheduler::TurnControl>();
  text.SetControl(control);
  text.OnToken(Token("Sure"));
  EXPECT_FALSE(control->cancelled());
  text.OnToken(Token(". \"Q"));
  EXPECT_TRUE(control->cancelled());
  EXPECT_TRUE(text.Full());
  scheduler::TurnResult cancelled;
  cancelled.reason = scheduler::FinishReason::kCancelled;
  text.OnFinish(cancelled);
  TurnQueue::Batch batch = text.Take(absl::ZeroDuration());
  EXPECT_EQ(batch.tokens.size(), 2u);
  ASSERT_TRUE(batch.result.has_value());
  EXPECT_EQ(batch.result->reason, scheduler::FinishReason::kStop);
}

const json kTool = {{"type", "function"}, {"function", {{"name", "f"}}}};
const json kHi = json::array({{{"role", "user"}, {"content", "Hi"}}});

// Stop strings under a constraint that applies from the first byte would cut the answer
// while it said it was complete: refused, naming `stop`, before anything runs.
TEST_F(HttpFrontTest, StopUnderAConstraintFromTheFirstByteIs400NamingStop) {
  const json schema = {{"type", "json_schema"},
                       {"json_schema", {{"name", "p"}, {"schema", {{"type", "object"}}}}}};
  const std::vector<std::pair<std::string, json>> refused = {
      {"/v1/chat/completions",
       {{"messages", kHi}, {"tools", {kTool}}, {"tool_choice", "required"}, {"stop", {"}"}}}},
      {"/v1/chat/completions", {{"messages", kHi}, {"response_format", schema}, {"stop", "\""}}},
      {"/v1/completions", {{"prompt", "a"}, {"response_format", schema}, {"stop", "\""}}},
      {"/v1/completions", {{"prompt", "a"}, {"response_format", {{"type", "json_object"}}}, {"stop", "}"}}},
  };
  for (const auto& [path, body] : refused) {
    auto r = Post(path, body);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << body << ": " << r->body;
    EXPECT_EQ(json::parse(r->body)["error"]["param"], "stop") << r->body;
  }
  // /v1/responses takes no stop strings at all.
  auto responses = Post("/v1/responses", {{"input", "a"}, {"stop", "x"}});
  ASSERT_TRUE(responses);
  EXPECT_EQ(responses->status, 400);
  EXPECT_EQ(json::parse(responses->body)["error"]["param"], "stop");
}

// A call that max_tokens cuts, anywhere in its envelope: the answer says "length" (on
// /v1/responses: incomplete, max_output_tokens), the envelope's bytes are never content,
// and a call is reported only with its arguments as far as they were written.
TEST_F(HttpFrontTest, ACallCutByMaxTokensIsLengthAndNeverContent) {
  StartServer(config::ServerOptions{}, /*max_prompt_tokens=*/1000);
  for (const int max_tokens : {3, 8, 20, 40}) {
    for (const bool stream : {false, true}) {
      const json body = {{"messages", kHi}, {"tools", {kTool}}, {"tool_choice", "required"},
                         {"max_tokens", max_tokens}, {"temperature", 0}, {"stream", stream}};
      auto r = Post("/v1/chat/completions", body);
      ASSERT_TRUE(r);
      ASSERT_EQ(r->status, 200) << r->body;
      std::string content;
      std::string finish;
      std::vector<std::string> arguments;
      if (stream) {
        for (const std::string& e : Events(r->body)) {
          if (e == "[DONE]") continue;
          const json chunk = json::parse(e);
          const json& choice = chunk["choices"][0];
          if (choice["finish_reason"].is_string()) finish = choice["finish_reason"];
          const json& d = choice["delta"];
          if (d.contains("content") && d["content"].is_string()) content += d["content"].get<std::string>();
          if (!d.contains("tool_calls")) continue;
          const size_t index = d["tool_calls"][0]["index"];
          if (index == arguments.size()) arguments.emplace_back();
          arguments[index] += d["tool_calls"][0]["function"]["arguments"].get<std::string>();
        }
      } else {
        const json answer = json::parse(r->body);
        const json& choice = answer["choices"][0];
        finish = choice["finish_reason"];
        if (choice["message"]["content"].is_string()) content = choice["message"]["content"];
        for (const json& c : choice["message"].value("tool_calls", json::array())) {
          arguments.push_back(c["function"]["arguments"]);
        }
      }
      const std::string where = absl::StrCat("max_tokens ", max_tokens, stream ? " streamed" : "");
      EXPECT_EQ(content, "") << where;  // "required": nothing but calls
      if (max_tokens < 24) {  // <tool_call>{"name": "f" is 24 bytes
        EXPECT_EQ(finish, "length") << where;
        EXPECT_TRUE(arguments.empty()) << where;
      } else if (finish == "tool_calls") {
        for (const std::string& a : arguments) EXPECT_TRUE(json::accept(a)) << where << ": " << a;
      } else {
        EXPECT_EQ(finish, "length") << where << ": " << r->body;
      }
    }
    const json body = {{"input", "Hi"}, {"tools", {{{"type", "function"}, {"name", "f"}}}},
                       {"tool_choice", "required"}, {"max_output_tokens", max_tokens},
                       {"temperature", 0}};
    auto r = Post("/v1/responses", body);
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json response = json::parse(r->body);
    for (const json& item : response["output"]) {
      if (item["type"] == "message") {
        EXPECT_EQ(item["content"][0]["text"], "") << r->body;
      }
    }
    if (max_tokens < 24) {
      EXPECT_EQ(response["status"], "incomplete") << r->body;
      EXPECT_EQ(response["incomplete_details"]["reason"], "max_output_tokens") << r->body;
    }
  }
}

// tool_choice "auto" with a stop string in the free text: the answer ends before it, at
// the token that completed it (no token generated after), with "stop", as without tools.
TEST_F(HttpFrontTest, UnderAutoAStopStringEndsTheFreeTextAtItsToken) {
  StartServer(config::ServerOptions{}, /*max_prompt_tokens=*/1000);
  json body = {{"messages", kHi}, {"tools", {kTool}}, {"max_tokens", 40}, {"temperature", 0},
               {"logprobs", true}};
  auto plain = Post("/v1/chat/completions", body);
  ASSERT_TRUE(plain);
  ASSERT_EQ(plain->status, 200) << plain->body;
  const json answer = json::parse(plain->body);
  const json& choice = answer["choices"][0];
  ASSERT_FALSE(choice["message"].contains("tool_calls")) << plain->body;  // free text only
  const std::string text = choice["message"]["content"];
  // The stop string: the first two printable ASCII characters in a row after the start
  // (the tiny model also writes bytes that are no UTF-8: each becomes U+FFFD, whose bytes
  // hold no ASCII, so the stop string is found at the same place in bytes and in text).
  auto printable = [](char c) { return c >= 0x20 && c < 0x7f && c != '<'; };
  size_t pick = 2;
  while (pick + 1 < text.size() && !(printable(text[pick]) && printable(text[pick + 1]))) ++pick;
  ASSERT_LT(pick + 1, text.size()) << text;
  const std::string stop = text.substr(pick, 2);
  const size_t at = text.find(stop);
  // The token that completes the stop string's first occurrence.
  std::string so_far;
  int64_t tokens = 0;
  for (const json& t : choice["logprobs"]["content"]) {
    for (int b : t["bytes"]) so_far.push_back(char(b));
    ++tokens;
    if (so_far.find(stop) != std::string::npos) break;
  }
  body["stop"] = {stop};
  for (const bool stream : {false, true}) {
    body["stream"] = stream;
    body["stream_options"] = stream ? json{{"include_usage", true}} : json(nullptr);
    auto r = Post("/v1/chat/completions", body);
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    std::string content;
    std::string finish;
    json usage;
    if (stream) {
      for (const std::string& e : Events(r->body)) {
        if (e == "[DONE]") continue;
        const json chunk = json::parse(e);
        if (chunk["usage"].is_object()) usage = chunk["usage"];
        if (chunk["choices"].empty()) continue;
        const json& c = chunk["choices"][0];
        if (c["finish_reason"].is_string()) finish = c["finish_reason"];
        if (c["delta"].contains("content")) content += c["delta"]["content"].get<std::string>();
      }
    } else {
      const json b = json::parse(r->body);
      content = b["choices"][0]["message"]["content"];
      finish = b["choices"][0]["finish_reason"];
      usage = b["usage"];
    }
    EXPECT_EQ(content, text.substr(0, at)) << "stop '" << stop << "'";
    EXPECT_EQ(finish, "stop");
    EXPECT_EQ(usage["completion_tokens"], tokens) << r->body;
  }
}

}  // namespace
}  // namespace attnserve::http
