// The service through a real gRPC channel on loopback: streaming, sessions, errors,
// health and reflection.
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "attnserve/v1/attnserve.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "server/tokenizer/byte_tokenizer.h"
#include "server/tokenizer/sentencepiece_tokenizer.h"
#include "tests/testing/spm_model.h"
#include "server/service/server.h"
#include "tests/testing/tiny_model.h"

namespace attnserve::service {
namespace {

std::shared_ptr<const catalogue::ServedModel> TinyModel(const std::string& module) {
  return attnserve::test_util::TinyServedModel(module);
}

struct Stream {
  std::vector<v1::Token> tokens;
  std::optional<v1::Final> final;
  grpc::Status status;
  std::string text() const {
    std::string s;
    for (const auto& t : tokens) s += t.text();
    return s;
  }
  std::vector<int32_t> ids() const {
    std::vector<int32_t> v;
    for (const auto& t : tokens) v.push_back(t.id());
    return v;
  }
};

class ServiceTest : public testing::Test {
 protected:
  void SetUp() override { StartServer(config::ServerOptions{}); }

  void StartServer(config::ServerOptions o) {
    server_.reset();
    o.listen_address = "127.0.0.1:0";
    o.http_listen = "";  // no HTTP front: tests must not collide on port 8000
    o.metrics_address = "";  // recorded, not served: stopping civetweb can take 2 s
    o.max_prompt_tokens = 100;
    o.max_generated_tokens = 5000;
    o.threads = 1;
    auto s = AttnServer::Start(
        o, std::make_unique<catalogue::ModelCatalogue>(
               std::vector<std::shared_ptr<const catalogue::ServedModel>>{taylor_, softmax_}));
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(s).value();
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()),
                                   grpc::InsecureChannelCredentials());
    stub_ = v1::AttnServe::NewStub(channel_);
  }

  // A stub on its own channel whose flow-control window stays small: once its reader
  // stops reading, the turn pauses (the server's buffer fills) and stays in flight,
  // however fast the engine is.
  std::unique_ptr<v1::AttnServe::Stub> SmallWindowStub() const {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
    args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 1024);
    return v1::AttnServe::NewStub(grpc::CreateCustomChannel(
        "127.0.0.1:" + std::to_string(server_->port()), grpc::InsecureChannelCredentials(),
        args));
  }

  Stream Generate(const v1::GenerateRequest& request) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    auto reader = stub_->Generate(&context, request);
    Stream out;
    v1::GenerateResponse m;
    while (reader->Read(&m)) {
      EXPECT_FALSE(out.final.has_value()) << "a message after the final one";
      if (m.has_token()) out.tokens.push_back(m.token());
      if (m.has_final()) out.final = m.final();
    }
    out.status = reader->Finish();
    return out;
  }

  static v1::GenerateRequest Greedy(const std::string& text, int max_tokens,
                                    const std::string& session = "",
                                    const std::string& model = "") {
    v1::GenerateRequest r;
    r.set_text(text);
    r.set_session_id(session);
    r.set_model(model);
    r.mutable_sampling()->set_max_tokens(max_tokens);
    return r;
  }

  std::string CreateSession(const std::string& model) {
    grpc::ClientContext context;
    v1::CreateSessionRequest request;
    request.set_model(model);
    v1::Session session;
    EXPECT_TRUE(stub_->CreateSession(&context, request, &session).ok());
    return session.id();
  }

  v1::Session GetSession(const std::string& id) {
    grpc::ClientContext context;
    v1::GetSessionRequest request;
    request.set_session_id(id);
    v1::Session session;
    EXPECT_TRUE(stub_->GetSession(&context, request, &session).ok());
    return session;
  }

  std::shared_ptr<const catalogue::ServedModel> taylor_ = TinyModel("taylor");
  std::shared_ptr<const catalogue::ServedModel> softmax_ = TinyModel("softmax");
  std::unique_ptr<AttnServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::AttnServe::Stub> stub_;
};

// Greedy decode straight on the model, for comparison.
std::vector<int32_t> DirectGreedy(const model::Model& m, const std::string& prompt, int n) {
  auto state = m.NewState();
  at::Tensor logits = m.Prefill(*state, test_util::ByteIds(prompt)).value()[-1];
  std::vector<int32_t> out;
  model::DecodeState* states[] = {state.get()};
  for (int i = 0; i < n; ++i) {
    const int32_t id = int32_t(logits.argmax().item<int64_t>());
    if (id == tokenizer::kByteEos) break;
    out.push_back(id);
    logits = m.Step(states, {id}).value()[0];
  }
  return out;
}

TEST_F(ServiceTest, StreamsTokensInOrderThenTheFinalMessage) {
  Stream s = Generate(Greedy("In the beginning", 12));
  ASSERT_TRUE(s.status.ok()) << s.status.error_message();
  ASSERT_TRUE(s.final.has_value());
  EXPECT_EQ(s.ids(), DirectGreedy(*taylor_->model, "In the beginning", 12));
  EXPECT_EQ(s.final->reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(s.final->usage().prompt_tokens(), 16);
  EXPECT_EQ(s.final->usage().generated_tokens(), 12);
  EXPECT_EQ(s.final->usage().session_position(), 28);
  EXPECT_GT(s.final->usage().time_to_first_token_ms(), 0);
  for (const auto& t : s.tokens) EXPECT_EQ(t.text(), test_util::ByteText(t.id()));
}

TEST_F(ServiceTest, TokenIdPromptsAndLogprobs) {
  v1::GenerateRequest r = Greedy("", 5);
  for (int32_t id : test_util::ByteIds("In the beginning")) r.mutable_tokens()->add_ids(id);
  r.set_logprobs(true);
  r.mutable_sampling()->set_temperature(0.7f);
  r.mutable_sampling()->set_seed(9);
  Stream s = Generate(r);
  ASSERT_TRUE(s.status.ok());
  ASSERT_EQ(s.tokens.size(), 5u);
  for (const auto& t : s.tokens) {
    ASSERT_TRUE(t.has_logprob());
    EXPECT_LE(t.logprob(), 0);
  }
  EXPECT_EQ(Generate(r).ids(), s.ids());  // same seed, same tokens
}

TEST_F(ServiceTest, GreedyLogprobsAreTheModelsLogSoftmaxWithTheTopAlternatives) {
  const std::string prompt = "In the beginning";
  v1::GenerateRequest r = Greedy(prompt, 8);
  r.set_logprobs(true);
  r.set_top_logprobs(5);
  Stream s = Generate(r);
  ASSERT_TRUE(s.status.ok()) << s.status.error_message();
  ASSERT_EQ(s.ids(), DirectGreedy(*taylor_->model, prompt, 8));
  // The model's log-softmax (double, through ATen) before each streamed token.
  const model::Model& m = *taylor_->model;
  auto state = m.NewState();
  at::Tensor logits = m.Prefill(*state, test_util::ByteIds(prompt)).value()[-1];
  model::DecodeState* states[] = {state.get()};
  double lowest = 0;
  for (const v1::Token& t : s.tokens) {
    const at::Tensor reference = logits.to(at::kDouble).log_softmax(-1);
    const auto near = [&](float logprob, int32_t id) {
      const double expected = reference[id].item<double>();
      return std::abs(logprob - expected) <= 1e-4 + 1e-5 * std::abs(expected);
    };
    ASSERT_TRUE(t.has_logprob());
    EXPECT_TRUE(near(t.logprob(), t.id())) << t.logprob();
    lowest = std::min(lowest, double(t.logprob()));
    ASSERT_EQ(t.top_logprobs_size(), 5);
    EXPECT_EQ(t.top_logprobs(0).id(), t.id());  // greedy: the most likely
    EXPECT_EQ(t.top_logprobs(0).logprob(), t.logprob());
    for (int k = 0; k < 5; ++k) {
      const v1::TopLogprob& a = t.top_logprobs(k);
      EXPECT_TRUE(near(a.logprob(), a.id())) << k;
      EXPECT_EQ(a.text(), test_util::ByteText(a.id()));
      if (k > 0) EXPECT_LE(a.logprob(), t.top_logprobs(k - 1).logprob());
    }
    logits = m.Step(states, {t.id()}).value()[0];
  }
  EXPECT_LT(lowest, -0.01);  // not the 0 of a greedy sampling distribution
  // Without logprobs, neither field.
  for (const v1::Token& t : Generate(Greedy(prompt, 3)).tokens) {
    EXPECT_FALSE(t.has_logprob());
    EXPECT_EQ(t.top_logprobs_size(), 0);
  }
}

TEST_F(ServiceTest, ATurnContinuesExactlyWhereTheLastStopped) {
  for (const std::string model : {"tiny-taylor", "tiny-softmax"}) {
    const std::string id = CreateSession(model);
    Stream a = Generate(Greedy("Genesis: ", 7, id));
    Stream b = Generate(Greedy(" and then", 9, id));
    Stream c = Generate(Greedy("!", 6, id));
    ASSERT_TRUE(c.status.ok()) << c.status.error_message();
    const std::string history = "Genesis: " + a.text() + " and then" + b.text() + "!";
    Stream once = Generate(Greedy(history, 6, "", model));
    EXPECT_EQ(c.ids(), once.ids()) << model;
    EXPECT_EQ(GetSession(id).position(), int64_t(history.size()) + 6);
  }
}

TEST_F(ServiceTest, CancelMidStreamFreesTheTurn) {
  const std::string id = CreateSession("tiny-taylor");
  {
    // Once its reader stops reading, the turn pauses and stays in flight.
    auto slow = SmallWindowStub();
    grpc::ClientContext context;
    context.AddMetadata("x-session-id", id);
    auto reader = slow->Generate(&context, Greedy("abc", 5000, id));
    v1::GenerateResponse m;
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(reader->Read(&m));
    // A second turn on the busy session waits briefly for it, then is refused.
    const auto start = std::chrono::steady_clock::now();
    Stream second = Generate(Greedy("x", 1, id));
    EXPECT_EQ(second.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(400));
    context.TryCancel();
    while (reader->Read(&m)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  // The engine frees the turn at its next step.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (GetSession(id).busy() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  v1::Session after = GetSession(id);
  EXPECT_FALSE(after.busy());
  EXPECT_LT(after.position(), 5000);
  Stream next = Generate(Greedy("", 3, id));  // continues from a consistent point
  EXPECT_TRUE(next.status.ok()) << next.status.error_message();
  EXPECT_EQ(next.final->usage().session_position(), after.position() + 3);
}

// A client that cancels a turn and sends the next one at once is not refused because
// the engine has not yet stopped the first: the second waits for it.
TEST_F(ServiceTest, TurnSentRightAfterACancelWaitsForItInsteadOfFailing) {
  const std::string id = CreateSession("tiny-taylor");
  // Its reader reads one message before the cancel: the turn cannot run to its
  // max_tokens meanwhile, however long the cancel takes to come.
  auto slow = SmallWindowStub();
  for (int round = 0; round < 20; ++round) {
    {
      grpc::ClientContext context;
      context.AddMetadata("x-session-id", id);
      // ignore_eos: an end-of-sequence token would end the turn before the cancel and
      // leave no pending token for the empty-prompt turn below.
      v1::GenerateRequest request = Greedy("abc", 5000, id);
      request.mutable_sampling()->set_ignore_eos(true);
      auto reader = slow->Generate(&context, request);
      v1::GenerateResponse m;
      ASSERT_TRUE(reader->Read(&m));
      context.TryCancel();
      while (reader->Read(&m)) {
      }
      EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
    }
    v1::GenerateRequest again = Greedy("", 2, id);
    again.mutable_sampling()->set_ignore_eos(true);
    Stream next = Generate(again);
    ASSERT_TRUE(next.status.ok()) << "round " << round << ": " << next.status.error_message();
  }
}

TEST_F(ServiceTest, BadInputGetsItsStatusCodeNamingTheField) {
  struct Case {
    std::string name;
    v1::GenerateRequest request;
    grpc::StatusCode code;
    std::string field;
  };
  std::vector<Case> cases;
  auto add = [&](std::string name, grpc::StatusCode code, std::string field, auto edit) {
    v1::GenerateRequest r = Greedy("hello", 5);
    edit(r);
    cases.push_back({std::move(name), r, code, std::move(field)});
  };
  using C = grpc::StatusCode;
  add("empty prompt", C::INVALID_ARGUMENT, "prompt", [](auto& r) { r.clear_text(); });
  add("negative temperature", C::INVALID_ARGUMENT, "sampling.temperature",
      [](auto& r) { r.mutable_sampling()->set_temperature(-1); });
  add("infinite temperature", C::INVALID_ARGUMENT, "sampling.temperature",
      [](auto& r) { r.mutable_sampling()->set_temperature(INFINITY); });
  add("top_p over 1", C::INVALID_ARGUMENT, "sampling.top_p",
      [](auto& r) { r.mutable_sampling()->set_top_p(1.5f); });
  add("negative top_p", C::INVALID_ARGUMENT, "sampling.top_p",
      [](auto& r) { r.mutable_sampling()->set_top_p(-0.1f); });
  add("negative top_k", C::INVALID_ARGUMENT, "sampling.top_k",
      [](auto& r) { r.mutable_sampling()->set_top_k(-2); });
  add("max_tokens over limit", C::INVALID_ARGUMENT, "sampling.max_tokens",
      [](auto& r) { r.mutable_sampling()->set_max_tokens(5001); });
  add("prompt over limit", C::INVALID_ARGUMENT, "prompt",
      [](auto& r) { r.set_text(std::string(101, 'a')); });
  add("unknown stop encoding", C::INVALID_ARGUMENT, "sampling.stop_encoding", [](auto& r) {
    r.mutable_sampling()->add_stop("x");
    r.mutable_sampling()->set_stop_encoding(static_cast<v1::StopEncoding>(7));
  });
  add("bad hex stop", C::INVALID_ARGUMENT, "sampling.stop[0]", [](auto& r) {
    r.mutable_sampling()->add_stop("zz");
    r.mutable_sampling()->set_stop_encoding(v1::STOP_ENCODING_HEX);
  });
  add("token outside vocabulary", C::INVALID_ARGUMENT, "tokens.ids[1]", [](auto& r) {
    r.mutable_tokens()->add_ids(65);
    r.mutable_tokens()->add_ids(100000);
  });
  add("too many stop strings", C::INVALID_ARGUMENT, "sampling.stop: 17", [](auto& r) {
    for (int i = 0; i < 17; ++i) r.mutable_sampling()->add_stop("s" + std::to_string(i));
  });
  add("stop string too long", C::INVALID_ARGUMENT, "sampling.stop[1]: 257 bytes", [](auto& r) {
    r.mutable_sampling()->add_stop("x");
    r.mutable_sampling()->add_stop(std::string(257, 'y'));
  });
  add("token prompt over limit", C::INVALID_ARGUMENT, "prompt: 101 tokens", [](auto& r) {
    for (int i = 0; i < 101; ++i) r.mutable_tokens()->add_ids(65);
  });
  add("top_logprobs over 20", C::INVALID_ARGUMENT, "top_logprobs", [](auto& r) {
    r.set_logprobs(true);
    r.set_top_logprobs(21);
  });
  add("top_logprobs without logprobs", C::INVALID_ARGUMENT, "top_logprobs",
      [](auto& r) { r.set_top_logprobs(2); });
  add("unknown model", C::NOT_FOUND, "model", [](auto& r) { r.set_model("nope"); });
  add("an unknown long model name is not echoed whole", C::NOT_FOUND, "... (5000 bytes)",
      [](auto& r) { r.set_model(std::string(5000, 'm')); });
  add("unknown session", C::NOT_FOUND, "session_id",
      [](auto& r) { r.set_session_id("00000000000000000000000000000000"); });
  for (const Case& c : cases) {
    Stream s = Generate(c.request);
    EXPECT_LT(s.status.error_message().size(), 400u) << c.name;
    EXPECT_EQ(s.status.error_code(), c.code) << c.name << ": " << s.status.error_message();
    EXPECT_NE(s.status.error_message().find(c.field), std::string::npos)
        << c.name << ": " << s.status.error_message();
    EXPECT_TRUE(s.tokens.empty()) << c.name;
  }
  grpc::ClientContext context;
  v1::GetSessionRequest get;
  get.set_session_id("missing");
  v1::Session session;
  EXPECT_EQ(stub_->GetSession(&context, get, &session).error_code(), C::NOT_FOUND);
  grpc::ClientContext context2;
  v1::DescribeModelRequest describe;
  describe.set_name("nope");
  v1::ModelInfo info;
  EXPECT_EQ(stub_->DescribeModel(&context2, describe, &info).error_code(), C::NOT_FOUND);
  // Rejected requests leave no session behind.
  grpc::ClientContext context3;
  v1::ListSessionsResponse list;
  ASSERT_TRUE(stub_->ListSessions(&context3, {}, &list).ok());
  EXPECT_EQ(list.sessions_size(), 0);
}

TEST_F(ServiceTest, ThePromptMustFitTheContextFromTheSessionsPosition) {
  config::ServerOptions o;
  o.listen_address = "127.0.0.1:0";
  o.http_listen = "";  // no HTTP front: tests must not collide on port 8000
  o.metrics_address = "";
  server_ = std::move(AttnServer::Start(o, std::make_unique<catalogue::ModelCatalogue>(
                                               std::vector<std::shared_ptr<const catalogue::ServedModel>>{
                                                   test_util::TinyServedModel("taylor", 16)})))
                .value();
  stub_ = v1::AttnServe::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(server_->port()), grpc::InsecureChannelCredentials()));
  const std::string id = CreateSession("");
  Stream first = Generate(Greedy("0123456789", 3, id));  // position 10 + 2 + pending = 13
  ASSERT_TRUE(first.status.ok()) << first.status.error_message();
  Stream over = Generate(Greedy("abcd", 3, id));
  EXPECT_EQ(over.status.error_code(), grpc::StatusCode::OUT_OF_RANGE);
  EXPECT_NE(over.status.error_message().find("prompt"), std::string::npos);
  EXPECT_TRUE(over.tokens.empty());
  EXPECT_EQ(GetSession(id).position(), 13);  // nothing appended, pending token kept
  // 13 + 3 = 16 leaves no room for a generated token; 13 + 2 does, and the turn then
  // ends at the context, never past it.
  EXPECT_EQ(Generate(Greedy("abc", 3, id)).status.error_code(), grpc::StatusCode::OUT_OF_RANGE);
  Stream fits = Generate(Greedy("ab", 3, id));
  ASSERT_TRUE(fits.status.ok()) << fits.status.error_message();
  EXPECT_EQ(fits.final->reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(fits.final->usage().session_position(), 16);
  EXPECT_EQ(Generate(Greedy("", 3, id)).status.error_code(), grpc::StatusCode::OUT_OF_RANGE);
  EXPECT_EQ(GetSession(id).position(), 16);
}

TEST_F(ServiceTest, ExportImportAndForkContinueExactly) {
  const std::string id = CreateSession("tiny-softmax");
  ASSERT_TRUE(Generate(Greedy("In the beginning", 6, id)).status.ok());
  // Export: chunks, the first with the total.
  std::string snapshot;
  {
    grpc::ClientContext context;
    v1::ExportSessionRequest request;
    request.set_session_id(id);
    auto reader = stub_->ExportSession(&context, request);
    v1::SnapshotChunk chunk;
    int64_t total = -1;
    while (reader->Read(&chunk)) {
      if (total < 0) total = chunk.total_bytes();
      snapshot += chunk.data();
    }
    ASSERT_TRUE(reader->Finish().ok());
    EXPECT_EQ(int64_t(snapshot.size()), total);
  }
  auto import = [&](const std::string& bytes, v1::Session* session) {
    grpc::ClientContext context;
    auto writer = stub_->ImportSession(&context, session);
    for (size_t at = 0; at < bytes.size(); at += 100) {  // many small chunks
      v1::ImportSessionRequest r;
      r.set_data(bytes.substr(at, 100));
      EXPECT_TRUE(writer->Write(r));
    }
    writer->WritesDone();
    return writer->Finish();
  };
  v1::Session imported;
  ASSERT_TRUE(import(snapshot, &imported).ok());
  EXPECT_EQ(imported.position(), GetSession(id).position());
  EXPECT_EQ(imported.model(), "tiny-softmax");
  // Damaged bytes: refused, nothing created.
  std::string damaged = snapshot;
  damaged[damaged.size() / 2] ^= 1;
  v1::Session none;
  grpc::Status bad = import(damaged, &none);
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::DATA_LOSS) << bad.error_message();
  EXPECT_EQ(import(snapshot.substr(0, 200), &none).error_code(), grpc::StatusCode::DATA_LOSS);
  // Fork, then the original, the import and the fork all continue identically.
  v1::Session fork;
  {
    grpc::ClientContext context;
    v1::ForkSessionRequest request;
    request.set_session_id(id);
    ASSERT_TRUE(stub_->ForkSession(&context, request, &fork).ok());
  }
  Stream a = Generate(Greedy(" and", 8, id));
  Stream b = Generate(Greedy(" and", 8, imported.id()));
  Stream c = Generate(Greedy(" and", 8, fork.id()));
  ASSERT_TRUE(a.status.ok() && b.status.ok() && c.status.ok());
  EXPECT_EQ(a.ids(), b.ids());
  EXPECT_EQ(a.ids(), c.ids());
  grpc::ClientContext context;
  v1::ListSessionsResponse list;
  ASSERT_TRUE(stub_->ListSessions(&context, {}, &list).ok());
  EXPECT_EQ(list.sessions_size(), 3);
}

TEST_F(ServiceTest, SessionsOnADurableStoreSurviveARestart) {
  const std::string dir = testing::TempDir() + "/attnserve_service_store_" +
                          std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  const std::string reference = CreateSession("tiny-taylor");  // memory-only server
  ASSERT_TRUE(Generate(Greedy("Once", 5, reference)).status.ok());
  Stream expected = Generate(Greedy(" more", 6, reference));
  config::ServerOptions o;
  o.session_store = "dir:" + dir;
  StartServer(o);
  const std::string id = CreateSession("tiny-taylor");
  ASSERT_TRUE(Generate(Greedy("Once", 5, id)).status.ok());
  server_->Shutdown(absl::ZeroDuration());  // drain: every session is written
  StartServer(o);
  EXPECT_EQ(GetSession(id).position(), 4 + 5);  // loaded on demand
  Stream resumed = Generate(Greedy(" more", 6, id));
  ASSERT_TRUE(resumed.status.ok()) << resumed.status.error_message();
  EXPECT_EQ(resumed.ids(), expected.ids());
  server_.reset();
  std::filesystem::remove_all(dir);
}

TEST_F(ServiceTest, SessionIdMetadataMustAgreeWithTheMessage) {
  const std::string id = CreateSession("");
  const std::string other = CreateSession("");
  {
    grpc::ClientContext context;
    context.AddMetadata("x-session-id", other);
    v1::GetSessionRequest request;
    request.set_session_id(id);
    v1::Session session;
    grpc::Status s = stub_->GetSession(&context, request, &session);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(s.error_message().find("x-session-id"), std::string::npos) << s.error_message();
  }
  {
    grpc::ClientContext context;
    context.AddMetadata("x-session-id", other);
    auto reader = stub_->Generate(&context, Greedy("abc", 3, id));
    v1::GenerateResponse m;
    EXPECT_FALSE(reader->Read(&m));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  grpc::ClientContext context;
  context.AddMetadata("x-session-id", id);
  v1::GetSessionRequest request;
  request.set_session_id(id);
  v1::Session session;
  EXPECT_TRUE(stub_->GetSession(&context, request, &session).ok());
  EXPECT_EQ(session.position(), 0);
}

TEST_F(ServiceTest, OversizedRequestsAreRefusedBeforeAnyHandlerRuns) {
  // max_prompt_tokens is 100 here: the message limit is 1 MiB (a snapshot chunk) + 64 KiB.
  Stream s = Generate(Greedy(std::string(2 << 20, 'a'), 5));
  EXPECT_EQ(s.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << s.status.error_message();
  EXPECT_TRUE(s.tokens.empty());
}

TEST_F(ServiceTest, SessionLimitsSayWhichLimit) {
  config::ServerOptions o;
  o.max_sessions = 1;
  StartServer(o);
  CreateSession("tiny-taylor");
  grpc::ClientContext context;
  v1::CreateSessionRequest request;
  v1::Session session;
  grpc::Status s = stub_->CreateSession(&context, request, &session);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(s.error_message().find("max_sessions"), std::string::npos);
  // A one-turn request needs a session too.
  EXPECT_EQ(Generate(Greedy("hi", 2)).status.error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
}

TEST_F(ServiceTest, StateBytesStayFixedForTaylorAndGrowForSoftmax) {
  const std::string taylor = CreateSession("tiny-taylor");
  const std::string softmax = CreateSession("tiny-softmax");
  std::vector<int64_t> taylor_bytes, softmax_bytes;
  for (int turn = 0; turn < 10; ++turn) {
    ASSERT_TRUE(Generate(Greedy("turn " + std::to_string(turn), 8, taylor)).status.ok());
    ASSERT_TRUE(Generate(Greedy("turn " + std::to_string(turn), 8, softmax)).status.ok());
    taylor_bytes.push_back(GetSession(taylor).state_bytes());
    softmax_bytes.push_back(GetSession(softmax).state_bytes());
  }
  EXPECT_EQ(taylor_bytes.front(), taylor_->model->StateBytes(0));
  for (int64_t b : taylor_bytes) EXPECT_EQ(b, taylor_bytes.front());
  // A KV cache reports what it has allocated, which grows by doubling: never down, and
  // past what the first turn held.
  for (int i = 1; i < 10; ++i) EXPECT_GE(softmax_bytes[i], softmax_bytes[i - 1]);
  EXPECT_GT(softmax_bytes.back(), softmax_bytes.front());
}

TEST_F(ServiceTest, ModelsListAndDescribe) {
  grpc::ClientContext context;
  v1::ListModelsResponse list;
  ASSERT_TRUE(stub_->ListModels(&context, {}, &list).ok());
  ASSERT_EQ(list.models_size(), 2);
  EXPECT_EQ(list.models(0).name(), "tiny-taylor");
  const v1::ModelInfo& t = list.models(0);
  EXPECT_EQ(t.attention_module(), "taylor");
  EXPECT_EQ(t.config().dim(), 32);
  EXPECT_EQ(t.parameter_count(), taylor_->model->ParameterCount());
  EXPECT_EQ(t.state_bytes_per_session_at_1k(), t.state_bytes_per_session_at_16k());
  EXPECT_EQ(t.break_even_context(), 82);
  EXPECT_EQ(t.num_kv_heads(), 2);
  EXPECT_EQ(t.tokenizer().kind(), "bytes");
  EXPECT_EQ(t.tokenizer().vocab_size(), 259);
  EXPECT_EQ(t.tokenizer().bos_id(), 256);
  EXPECT_FALSE(t.tokenizer().add_bos());
  EXPECT_EQ(std::vector<int32_t>(t.tokenizer().eos_ids().begin(), t.tokenizer().eos_ids().end()),
            std::vector<int32_t>{257});
  const v1::ModelInfo& s = list.models(1);
  EXPECT_EQ(s.state_bytes_per_session_at_16k(), 16 * s.state_bytes_per_session_at_1k());
  EXPECT_EQ(s.break_even_context(), 0);
}

TEST_F(ServiceTest, TokenizeAModelsTextOrASessionsNextTurn) {
  const auto tokenize = [&](const std::string& text, const std::string& model,
                            const std::string& session, v1::TokenizeResponse* out) {
    grpc::ClientContext context;
    v1::TokenizeRequest request;
    request.set_text(text);
    request.set_model(model);
    request.set_session_id(session);
    return stub_->Tokenize(&context, request, out);
  };
  v1::TokenizeResponse r;
  ASSERT_TRUE(tokenize("In\xff", "", "", &r).ok());
  EXPECT_EQ(r.model(), "tiny-taylor");
  ASSERT_EQ(r.tokens_size(), 3);
  EXPECT_EQ(r.tokens(0).id(), 'I');
  EXPECT_EQ(r.tokens(1).text(), "n");
  EXPECT_EQ(r.tokens(2).id(), 255);
  EXPECT_EQ(r.tokens(2).text(), "\xff");
  const std::string id = CreateSession("tiny-softmax");
  ASSERT_TRUE(Generate(Greedy("In the", 3, id)).status.ok());
  r.Clear();
  ASSERT_TRUE(tokenize(" beginning", "", id, &r).ok());
  EXPECT_EQ(r.model(), "tiny-softmax");
  EXPECT_EQ(r.tokens_size(), 10);
  EXPECT_EQ(GetSession(id).position(), 9);  // untouched
  using C = grpc::StatusCode;
  grpc::Status st = tokenize("x", "", "nope", &r);
  EXPECT_EQ(st.error_code(), C::NOT_FOUND);
  st = tokenize("x", "tiny-taylor", id, &r);
  EXPECT_EQ(st.error_code(), C::INVALID_ARGUMENT);
  EXPECT_EQ(st.error_message(), "model: session '" + id +
                                    "' runs model 'tiny-softmax', not 'tiny-taylor'");
  st = tokenize("x", "huge", "", &r);
  EXPECT_EQ(st.error_code(), C::NOT_FOUND);
  st = tokenize(std::string(101, 'a'), "", "", &r);
  EXPECT_EQ(st.error_code(), C::INVALID_ARGUMENT);
  EXPECT_EQ(st.error_message(), "text: 101 bytes is over the server's limit of 100 prompt tokens");
}

// The catalogue loads each directory's tokenizer with its model, and its refusals.
TEST(ModelCatalogueTokenizers, LoadsTheDirectorysTokenizerOrRefuses) {
  ATTNSERVE_SKIP_WITHOUT_SENTENCEPIECE();
  const std::string dir = test_util::MakeTempDir("catalogue");
  const std::string spm = test_util::TrainSpm(dir, "m");
  model::ModelConfig c = test_util::TinyServedModel("taylor")->model->config();
  c.vocab_size = 320;
  ASSERT_TRUE(model::Model::Create(c, 4).value()->Save(dir + "/sp").ok());
  std::filesystem::copy_file(spm, dir + "/sp/tokenizer.model");
  auto models = catalogue::ModelCatalogue::Load({dir + "/sp"});
  ASSERT_TRUE(models.ok()) << models.status();
  EXPECT_EQ((*models)->all()[0]->tokenizer->kind(), "sentencepiece");
  ASSERT_TRUE(model::Model::Create(c, 4).value()->Save(dir + "/bpe").ok());
  std::ofstream(dir + "/bpe/tokenizer.json") << "{}";
  EXPECT_EQ(catalogue::ModelCatalogue::Load({dir + "/bpe"}).status().message(),
            dir + "/bpe/tokenizer.json: model: missing or not an object");
}

// A model whose tokenizer is SentencePiece (trained here with spm_train), end to end:
// Tokenize, a session's turns as text, and the streamed bytes.
TEST_F(ServiceTest, SentencePieceModelsTokenizeAndStreamTheirText) {
  ATTNSERVE_SKIP_WITHOUT_SENTENCEPIECE();
  const std::string dir = test_util::MakeTempDir("spm");
  const std::string spm = test_util::ReadBytes(test_util::TrainSpm(
      dir, "m", "--normalization_rule_name=identity --remove_extra_whitespaces=false"));
  tokenizer::SentencePieceTokenizer::Options options;
  options.bos_token_id = 1;
  options.eos_token_ids = {2};
  std::shared_ptr<const tokenizer::Tokenizer> sp =
      tokenizer::SentencePieceTokenizer::Create(spm, options).value();
  auto model = test_util::TinyServedModelWith("taylor", 320, sp);
  server_.reset();
  config::ServerOptions o;
  o.listen_address = "127.0.0.1:0";
  o.http_listen = "";  // no HTTP front: tests must not collide on port 8000
  o.metrics_address = "";
  server_ = std::move(AttnServer::Start(o, std::make_unique<catalogue::ModelCatalogue>(
                                               std::vector<std::shared_ptr<const catalogue::ServedModel>>{
                                                   model}))).value();
  stub_ = v1::AttnServe::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(server_->port()), grpc::InsecureChannelCredentials()));
  {
    grpc::ClientContext context;
    v1::ModelInfo info;
    v1::DescribeModelRequest describe;
    describe.set_name("tiny-taylor");
    ASSERT_TRUE(stub_->DescribeModel(&context, describe, &info).ok());
    EXPECT_EQ(info.tokenizer().kind(), "sentencepiece");
    EXPECT_EQ(info.tokenizer().vocab_size(), 320);
    EXPECT_TRUE(info.tokenizer().add_bos());
    EXPECT_EQ(info.tokenizer().bos_id(), 1);
  }
  const auto tokenize = [&](const std::string& text, const std::string& session) {
    grpc::ClientContext context;
    v1::TokenizeRequest request;
    request.set_text(text);
    request.set_session_id(session);
    v1::TokenizeResponse r;
    EXPECT_TRUE(stub_->Tokenize(&context, request, &r).ok());
    std::vector<int32_t> ids;
    std::string bytes;
    for (const auto& t : r.tokens()) {
      ids.push_back(t.id());
      bytes += t.text();
    }
    return std::make_pair(ids, bytes);
  };
  const auto [first_ids, first_text] = tokenize("In the", "");
  EXPECT_EQ(first_ids, sp->Encode("In the", false).value());
  EXPECT_EQ(first_ids.front(), 1);  // BOS at the start of a session
  EXPECT_EQ(first_text, "In the");
  const std::string id = CreateSession("");
  Stream one = Generate(Greedy("In the", 6, id));
  ASSERT_TRUE(one.status.ok()) << one.status.error_message();
  EXPECT_EQ(one.final->usage().prompt_tokens(), int(first_ids.size()));
  const auto [next_ids, next_text] = tokenize(" beginning", id);
  EXPECT_EQ(next_ids, sp->Encode(" beginning", true).value());  // no BOS, no "▁" prefix
  EXPECT_EQ(next_text, " beginning");
  Stream two = Generate(Greedy(" beginning", 6, id));
  ASSERT_TRUE(two.status.ok()) << two.status.error_message();
  EXPECT_EQ(two.final->usage().prompt_tokens(), int(next_ids.size()));
  std::vector<int32_t> all = first_ids;
  for (int32_t t : one.ids()) all.push_back(t);
  all.insert(all.end(), next_ids.begin(), next_ids.end());
  for (int32_t t : two.ids()) all.push_back(t);
  EXPECT_EQ(tokenizer::Decode(*sp, all).value(),
            "In the" + one.text() + " beginning" + two.text());
}

TEST_F(ServiceTest, QkNormSoftmaxCheckpointsCanBeServedAsTaylor) {
  model::ModelConfig c = softmax_->model->config();
  c.name = "qk";
  c.attention.qk_norm = true;
  c.attention.qk_temperature = 2;
  const std::string dir = testing::TempDir() + "/attnserve_service_qk";
  ASSERT_TRUE(model::Model::Create(c, 4).value()->Save(dir).ok());
  auto models = catalogue::ModelCatalogue::Load({dir});
  ASSERT_TRUE(models.ok()) << models.status();
  ASSERT_EQ((*models)->all()[0]->variants.size(), 3u);  // taylor 2, 4, 6
  // No tokenizer files: a byte model; its variants share the tokenizer.
  EXPECT_EQ((*models)->all()[0]->tokenizer->kind(), "bytes");
  EXPECT_EQ((*models)->all()[0]->variants[0]->tokenizer, (*models)->all()[0]->tokenizer);
  // Variants share the base model's weight tensors.
  const auto base = (*models)->all()[0]->model->NamedParameters();
  const auto variant = (*models)->all()[0]->variants[0]->model->NamedParameters();
  ASSERT_EQ(base.size(), variant.size());
  for (size_t i = 0; i < base.size(); ++i) {
    if (base[i].first.find(".attn.") != std::string::npos) continue;  // module parameters
    EXPECT_TRUE(base[i].second.is_same(variant[i].second)) << base[i].first;
  }
  config::ServerOptions o;
  o.listen_address = "127.0.0.1:0";
  o.http_listen = "";  // no HTTP front: tests must not collide on port 8000
  o.metrics_address = "";
  const int64_t taylor4_bytes = (*models)->all()[0]->variants[1]->model->StateBytes(0);
  server_ = std::move(AttnServer::Start(o, *std::move(models))).value();
  stub_ = v1::AttnServe::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(server_->port()), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  v1::CreateSessionRequest request;
  request.set_attention_module("taylor");
  request.set_attention_order(4);
  v1::Session session;
  ASSERT_TRUE(stub_->CreateSession(&context, request, &session).ok());
  EXPECT_EQ(session.attention_module(), "taylor");
  EXPECT_EQ(session.attention_order(), 4);
  Stream s = Generate(Greedy("abc", 5, session.id()));
  EXPECT_TRUE(s.status.ok()) << s.status.error_message();
  EXPECT_EQ(GetSession(session.id()).state_bytes(),
            taylor4_bytes);
  grpc::ClientContext context2;
  request.set_attention_module("linear");
  grpc::Status bad = stub_->CreateSession(&context2, request, &session);
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(bad.error_message().find("taylor order 6"), std::string::npos)
      << bad.error_message();
}

TEST_F(ServiceTest, HealthAnswersServing) {
  auto health = grpc::health::v1::Health::NewStub(channel_);
  grpc::ClientContext context;
  grpc::health::v1::HealthCheckResponse response;
  ASSERT_TRUE(health->Check(&context, {}, &response).ok());
  EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  // Reflection is checked against the real binary by tests/e2e (its client-side
  // messages cannot share a process with the server's reflection library).
}

}  // namespace
}  // namespace attnserve::service

namespace attnserve::service {
namespace {

// A session on a served-as variant counts under the variant's labels, and the base model
// (with no session) reads 0.
TEST(PublishSessionGauges, CountsAVariantsSessionsUnderTheVariant) {
  auto base = std::make_shared<catalogue::ServedModel>(*test_util::TinyServedModel("softmax"));
  base->name = "m";
  auto variant = std::make_shared<catalogue::ServedModel>(*test_util::TinyServedModel("taylor"));
  variant->name = "m";
  base->variants.push_back(variant);
  catalogue::ModelCatalogue models({base});
  auto metrics = metrics::Metrics::Create("").value();
  session::SessionInfo info;
  info.served = variant.get();
  info.state_bytes = 123;
  PublishSessionGauges(models, {info}, *metrics);
  const std::string text = metrics->Serialize();
  EXPECT_NE(text.find("attnserve_active_sessions{attention=\"taylor\",model=\"m\"} 1\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("attnserve_active_sessions{attention=\"softmax\",model=\"m\"} 0\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("attnserve_session_state_bytes{attention=\"taylor\",model=\"m\"} 123\n"),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace attnserve::service
