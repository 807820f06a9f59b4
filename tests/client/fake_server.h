// Test helpers for the client: a scripted fake AttnServe + health server on an
// ephemeral port, and a way to run the client's commands in-process and capture
// what they print.
#pragma once

#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "attnserve/v1/attnserve.grpc.pb.h"
#include "client/commands.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace attnserve::client::test {

namespace v1 = ::attnserve::v1;
namespace health = ::grpc::health::v1;

// One AttnServe call as the fake received it.
struct Call {
  std::string method;                         // "Generate", "GetSession", ...
  std::optional<std::string> session_header;  // x-session-id, if sent
  std::optional<std::string> authorization;   // authorization, if sent
};

// Answers every AttnServe method from a script and records the requests.
class FakeAttnServe final : public v1::AttnServe::Service {
 public:
  // Script (set before the client runs).
  std::vector<std::string> tokens = {"Hel", "lo", "\xff", std::string(1, '\0')};
  grpc::Status
      generate_status;  // returned after the tokens; OK sends a Final first
  v1::FinishReason reason = v1::FINISH_REASON_LENGTH;
  std::string final_error;
  // What the next Generate calls do, first first; once they are used up,
  // calls follow `tokens`, `generate_status` and `reason`.
  struct GenerateScript {
    std::vector<std::string> tokens;
    grpc::Status status;  // after the tokens; OK sends a Final first
    v1::FinishReason reason = v1::FINISH_REASON_LENGTH;
  };
  std::deque<GenerateScript> generate_scripts;
  // The next `refusals` calls of any method answer `refusal` at once (after
  // being recorded in calls()), as a draining replica does.
  int refusals = 0;
  grpc::Status refusal = {grpc::StatusCode::UNAVAILABLE,
                          "the server is shutting down; no new turns"};
  // What ExportSession streams for a known session, in chunks of at most
  // `export_chunk_bytes`, the first announcing `export_total_bytes` (-1: the
  // size of `snapshot`). A non-OK `export_status` ends the call after the
  // first chunk.
  std::string snapshot;
  size_t export_chunk_bytes = size_t{1} << 20;
  int64_t export_total_bytes = -1;
  grpc::Status export_status;
  // Returned by ImportSession after reading every message.
  grpc::Status import_status;

  grpc::Status Generate(
      grpc::ServerContext* context, const v1::GenerateRequest* request,
      grpc::ServerWriter<v1::GenerateResponse>* writer) override {
    Record(&generate_requests_, *request);
    if (grpc::Status status = Arrive("Generate", context); !status.ok()) {
      return status;
    }
    GenerateScript script{tokens, generate_status, reason};
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!generate_scripts.empty()) {
        script = generate_scripts.front();
        generate_scripts.pop_front();
      }
    }
    for (size_t i = 0; i < script.tokens.size(); ++i) {
      v1::GenerateResponse response;
      response.mutable_token()->set_text(script.tokens[i]);
      response.mutable_token()->set_id(100 + static_cast<int>(i));
      if (request->logprobs()) response.mutable_token()->set_logprob(-0.5f);
      for (int k = 0; k < request->top_logprobs(); ++k) {
        v1::TopLogprob* a = response.mutable_token()->add_top_logprobs();
        a->set_id(100 + static_cast<int>(i) + k);
        a->set_text(k == 0 ? script.tokens[i] : std::string(1, 'a' + k));
        a->set_logprob(-0.5f - k);
      }
      writer->Write(response);
    }
    if (!script.status.ok()) return script.status;
    v1::GenerateResponse response;
    v1::Final* final = response.mutable_final();
    final->set_reason(script.reason);
    final->set_error(final_error);
    final->set_session_id(request->session_id());
    final->mutable_usage()->set_prompt_tokens(
        static_cast<int>(request->text().size()));
    final->mutable_usage()->set_generated_tokens(
        static_cast<int>(script.tokens.size()));
    final->mutable_usage()->set_session_position(70 + request->text().size());
    final->mutable_usage()->set_time_to_first_token_ms(1.5);
    writer->Write(response);
    return grpc::Status::OK;
  }

  grpc::Status CreateSession(grpc::ServerContext* context,
                             const v1::CreateSessionRequest* request,
                             v1::Session* session) override {
    if (grpc::Status status = Arrive("CreateSession", context); !status.ok()) {
      return status;
    }
    std::lock_guard<std::mutex> lock(mu_);
    create_requests_.push_back(*request);
    session->set_id("s" + std::to_string(create_requests_.size()));
    session->set_model(request->model().empty() ? "tiny" : request->model());
    session->set_attention_module("taylor");
    session->set_attention_order(2);
    session->set_position(76);
    session->set_state_bytes(3 << 20);
    session->set_created_unix_ms(1700000000000);
    session->set_last_used_unix_ms(1700000060000);
    session->set_ttl_seconds(600);
    sessions_[session->id()] = *session;
    return grpc::Status::OK;
  }

  grpc::Status GetSession(grpc::ServerContext* context,
                          const v1::GetSessionRequest* request,
                          v1::Session* session) override {
    if (grpc::Status status = Arrive("GetSession", context); !status.ok()) {
      return status;
    }
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sessions_.find(request->session_id());
    if (it == sessions_.end()) return NotFound(request->session_id());
    *session = it->second;
    return grpc::Status::OK;
  }

  grpc::Status CloseSession(grpc::ServerContext* context,
                            const v1::CloseSessionRequest* request,
                            v1::CloseSessionResponse*) override {
    if (grpc::Status status = Arrive("CloseSession", context); !status.ok()) {
      return status;
    }
    std::lock_guard<std::mutex> lock(mu_);
    closed_.push_back(request->session_id());
    if (sessions_.erase(request->session_id()) == 0)
      return NotFound(request->session_id());
    return grpc::Status::OK;
  }

  grpc::Status ListSessions(grpc::ServerContext* context,
                            const v1::ListSessionsRequest*,
                            v1::ListSessionsResponse* response) override {
    if (grpc::Status status = Arrive("ListSessions", context); !status.ok()) {
      return status;
    }
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, session] : sessions_)
      *response->add_sessions() = session;
    return grpc::Status::OK;
  }

  grpc::Status ExportSession(
      grpc::ServerContext* context, const v1::ExportSessionRequest* request,
      grpc::ServerWriter<v1::SnapshotChunk>* writer) override {
    if (grpc::Status status = Arrive("ExportSession", context); !status.ok()) {
      return status;
    }
    if (!HasSession(request->session_id())) {
      return NotFound(request->session_id());
    }
    for (size_t offset = 0; offset < snapshot.size();
         offset += export_chunk_bytes) {
      v1::SnapshotChunk chunk;
      chunk.set_data(snapshot.substr(offset, export_chunk_bytes));
      if (offset == 0) {
        chunk.set_total_bytes(export_total_bytes >= 0
                                  ? export_total_bytes
                                  : static_cast<int64_t>(snapshot.size()));
      }
      writer->Write(chunk);
      Record(&export_chunks_, chunk.data().size());
      if (!export_status.ok()) return export_status;
    }
    return export_status;
  }

  grpc::Status ImportSession(
      grpc::ServerContext* context,
      grpc::ServerReader<v1::ImportSessionRequest>* reader,
      v1::Session* session) override {
    if (grpc::Status status = Arrive("ImportSession", context); !status.ok()) {
      return status;
    }
    v1::ImportSessionRequest request;
    while (reader->Read(&request)) Record(&import_requests_, request);
    if (!import_status.ok()) return import_status;
    std::lock_guard<std::mutex> lock(mu_);
    session->set_id("i" + std::to_string(++imported_));
    session->set_position(76);
    sessions_[session->id()] = *session;
    return grpc::Status::OK;
  }

  grpc::Status ForkSession(grpc::ServerContext* context,
                           const v1::ForkSessionRequest* request,
                           v1::Session* session) override {
    if (grpc::Status status = Arrive("ForkSession", context); !status.ok()) {
      return status;
    }
    std::lock_guard<std::mutex> lock(mu_);
    fork_requests_.push_back(*request);
    auto it = sessions_.find(request->session_id());
    if (it == sessions_.end()) return NotFound(request->session_id());
    *session = it->second;
    session->set_id("f" + std::to_string(fork_requests_.size()));
    sessions_[session->id()] = *session;
    return grpc::Status::OK;
  }

  grpc::Status ListModels(grpc::ServerContext*, const v1::ListModelsRequest*,
                          v1::ListModelsResponse* response) override {
    *response->add_models() = Model();
    return grpc::Status::OK;
  }

  grpc::Status DescribeModel(grpc::ServerContext*,
                             const v1::DescribeModelRequest* request,
                             v1::ModelInfo* info) override {
    if (request->name() == "tiny-hybrid") {
      *info = HybridModel();
      return grpc::Status::OK;
    }
    if (request->name() != "tiny") {
      return {grpc::StatusCode::NOT_FOUND,
              "unknown model '" + request->name() + "'"};
    }
    *info = Model();
    return grpc::Status::OK;
  }

  // Byte tokens, one per byte of the text, after a BOS (256) for a model; a session
  // other than "s1" is unknown.
  grpc::Status Tokenize(grpc::ServerContext*, const v1::TokenizeRequest* request,
                        v1::TokenizeResponse* response) override {
    if (!request->session_id().empty() && request->session_id() != "s1") {
      return NotFound(request->session_id());
    }
    if (request->session_id().empty()) response->add_tokens()->set_id(256);
    for (unsigned char c : request->text()) {
      auto* token = response->add_tokens();
      token->set_id(c);
      token->set_text(std::string(1, char(c)));
    }
    response->set_model("tiny");
    return grpc::Status::OK;
  }

  std::vector<v1::GenerateRequest> generate_requests() {
    return Copy(generate_requests_);
  }
  std::vector<v1::CreateSessionRequest> create_requests() {
    return Copy(create_requests_);
  }
  std::vector<std::string> closed() { return Copy(closed_); }
  // Sizes of the chunks ExportSession wrote.
  std::vector<size_t> export_chunks() { return Copy(export_chunks_); }
  std::vector<v1::ImportSessionRequest> import_requests() {
    return Copy(import_requests_);
  }
  std::vector<v1::ForkSessionRequest> fork_requests() {
    return Copy(fork_requests_);
  }
  // Every call of a session method, refused ones included, in order.
  std::vector<Call> calls() { return Copy(calls_); }

  // Adds a session as if created earlier.
  void AddSession(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    sessions_[id].set_id(id);
  }
  bool HasSession(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    return sessions_.count(id) > 0;
  }

 private:
  static grpc::Status NotFound(const std::string& id) {
    return {grpc::StatusCode::NOT_FOUND, "session '" + id + "' not found"};
  }
  static v1::ModelInfo Model() {
    v1::ModelInfo info;
    info.set_name("tiny");
    info.set_attention_module("taylor");
    info.set_parameter_count(1234567);
    info.set_state_bytes_per_session_at_1k(313344);
    info.set_state_bytes_per_session_at_16k(313344);
    info.set_break_even_context(82);
    info.set_num_kv_heads(4);
    v1::TokenizerInfo* tokenizer = info.mutable_tokenizer();
    tokenizer->set_kind("bytes");
    tokenizer->set_vocab_size(259);
    tokenizer->set_bos_id(256);
    tokenizer->add_eos_ids(257);
    v1::ModelConfig* config = info.mutable_config();
    config->set_vocab_size(259);
    config->set_dim(64);
    config->set_num_layers(2);
    config->set_num_heads(4);
    config->set_head_dim(16);
    config->set_mlp_hidden(172);
    config->mutable_attention()->set_module("taylor");
    config->mutable_attention()->set_order(2);
    return info;
  }
  // A hybrid (described, not listed): 4 Mamba-2 layers of fixed state beside 2 attention
  // layers whose KV caches grow.
  static v1::ModelInfo HybridModel() {
    v1::ModelInfo info = Model();
    info.set_name("tiny-hybrid");
    info.set_attention_module("softmax");
    info.set_break_even_context(142);
    for (const auto& [mixer, layers, at_1k, at_32k] :
         {std::tuple<const char*, int, int64_t, int64_t>{"mamba2", 4, 289792, 289792},
          {"attention", 2, 1048576, 33554432}}) {
      v1::MixerStateBytes* k = info.add_state_bytes_by_mixer();
      k->set_mixer(mixer);
      k->set_layers(layers);
      k->set_bytes_at_1k(at_1k);
      k->set_bytes_at_32k(at_32k);
    }
    return info;
  }
  // Records the call and its x-session-id header; returns the refusal while
  // refusals remain, OK otherwise.
  grpc::Status Arrive(const char* method, grpc::ServerContext* context) {
    Call call{method, std::nullopt};
    const auto& metadata = context->client_metadata();
    if (auto it = metadata.find("x-session-id"); it != metadata.end()) {
      call.session_header = std::string(it->second.data(), it->second.size());
    }
    if (auto it = metadata.find("authorization"); it != metadata.end()) {
      call.authorization = std::string(it->second.data(), it->second.size());
    }
    std::lock_guard<std::mutex> lock(mu_);
    calls_.push_back(std::move(call));
    if (refusals == 0) return grpc::Status::OK;
    --refusals;
    return refusal;
  }
  template <typename T>
  void Record(std::vector<T>* log, const T& value) {
    std::lock_guard<std::mutex> lock(mu_);
    log->push_back(value);
  }
  template <typename T>
  std::vector<T> Copy(const std::vector<T>& log) {
    std::lock_guard<std::mutex> lock(mu_);
    return log;
  }

  std::mutex mu_;
  std::vector<v1::GenerateRequest> generate_requests_;
  std::vector<v1::CreateSessionRequest> create_requests_;
  std::vector<std::string> closed_;
  std::vector<size_t> export_chunks_;
  std::vector<v1::ImportSessionRequest> import_requests_;
  std::vector<v1::ForkSessionRequest> fork_requests_;
  std::vector<Call> calls_;
  int imported_ = 0;
  std::map<std::string, v1::Session> sessions_;
};

class FakeHealth final : public health::Health::Service {
 public:
  health::HealthCheckResponse::ServingStatus status =
      health::HealthCheckResponse::SERVING;
  grpc::Status Check(grpc::ServerContext*, const health::HealthCheckRequest*,
                     health::HealthCheckResponse* response) override {
    response->set_status(status);
    return grpc::Status::OK;
  }
};

// Time for the client's retries that passes only when the client waits: now()
// is the real time plus every wait so far, and a wait returns at once. Records
// the waits. Thread-safe (bench waits from several threads).
class FakeClock {
 public:
  RetryClock clock() {
    RetryClock clock;
    clock.now = [this] {
      std::lock_guard<std::mutex> lock(mu_);
      return absl::Now() + slept_;
    };
    clock.sleep = [this](absl::Duration wait) {
      std::lock_guard<std::mutex> lock(mu_);
      waits_.push_back(wait);
      slept_ += wait;
    };
    return clock;
  }
  std::vector<absl::Duration> waits() {
    std::lock_guard<std::mutex> lock(mu_);
    return waits_;
  }

 private:
  std::mutex mu_;
  std::vector<absl::Duration> waits_;
  absl::Duration slept_;
};

// What a command printed and returned.
struct Outcome {
  int code;
  std::string out;
  std::string err;
};

inline std::string ReadAll(std::FILE* file) {
  std::string text;
  std::rewind(file);
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), file)) > 0)
    text.append(buffer, n);
  std::fclose(file);
  return text;
}

// Runs the client with `args`, stdin `input`, no environment, and `clock` for
// its retries.
inline Outcome RunArgs(const std::vector<std::string>& args,
                       const std::string& input = "",
                       RetryClock clock = RetryClock()) {
  std::istringstream in(input);
  Io io;
  io.out = std::tmpfile();
  io.err = std::tmpfile();
  io.in = &in;
  io.env = [](const std::string&) -> std::optional<std::string> { return std::nullopt; };
  io.clock = std::move(clock);
  const int code = RunClient(args, io);
  return Outcome{code, ReadAll(io.out), ReadAll(io.err)};
}

// A loopback port with nothing listening on it.
inline int UnusedPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  close(fd);
  return ntohs(addr.sin_port);
}

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(&service_);
    builder.RegisterService(&health_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    server_flag_ = "--server=127.0.0.1:" + std::to_string(port);
  }
  void TearDown() override { server_->Shutdown(); }

  // Runs `args` against the fake server (the --server flag goes first), with
  // clock_ for its retries.
  Outcome Client(std::vector<std::string> args, const std::string& input = "") {
    args.insert(args.begin(), server_flag_);
    return RunArgs(args, input, clock_.clock());
  }

  FakeClock clock_;
  FakeAttnServe service_;
  FakeHealth health_;
  std::unique_ptr<grpc::Server> server_;
  std::string server_flag_;
};

}  // namespace attnserve::client::test
