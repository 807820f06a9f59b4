// Tenants through a real gRPC channel: API keys in `authorization` metadata, sessions
// private to the tenant that made them in every RPC, per-tenant limits, and health
// open to everyone.
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "attnserve/v1/attnserve.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "server/service/server.h"
#include "server/store/snapshot_store.h"
#include "tests/testing/tiny_model.h"

namespace attnserve::service {
namespace {

constexpr char kAlice[] = "alice-key-0123456789abcdef";
constexpr char kBob[] = "bob-key-0123456789abcdef";
constexpr char kNever[] = "0123456789abcdef0123456789abcdef";  // an id nobody made

class TenantsTest : public testing::Test {
 protected:
  TenantsTest()
      : dir_(testing::TempDir() + "/attnserve_tenants_" + std::to_string(::getpid()) + "_" +
             testing::UnitTest::GetInstance()->current_test_info()->name()) {
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  ~TenantsTest() override {
    server_.reset();
    std::filesystem::remove_all(dir_);
  }

  void SetUp() override {
    StartServer(absl::StrCat("# test tenants\n", kAlice, " alice\n", kBob,
                             " bob max_sessions=2\n"));
  }

  void StartServer(const std::string& keys, const std::string& store = "memory") {
    server_.reset();
    const std::string path = dir_ + "/keys.txt";
    std::ofstream(path) << keys;
    config::ServerOptions o;
    o.listen_address = "127.0.0.1:0";
    o.http_listen = "";  // no HTTP front: tests must not collide on port 8000
    o.metrics_address = "";
    o.threads = 1;
    o.api_keys_file = path;
    o.session_store = store;
    auto s = AttnServer::Start(
        o, std::make_unique<catalogue::ModelCatalogue>(
               std::vector<std::shared_ptr<const catalogue::ServedModel>>{taylor_}));
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(s).value();
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()),
                                   grpc::InsecureChannelCredentials());
    stub_ = v1::AttnServe::NewStub(channel_);
  }

  // A context carrying `key` (none if empty).
  static std::unique_ptr<grpc::ClientContext> As(const std::string& key) {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    if (!key.empty()) context->AddMetadata("authorization", "Bearer " + key);
    return context;
  }

  grpc::Status Create(const std::string& key, v1::Session* session) {
    v1::CreateSessionRequest request;
    return stub_->CreateSession(As(key).get(), request, session);
  }
  grpc::Status Get(const std::string& key, const std::string& id, v1::Session* out = nullptr) {
    v1::GetSessionRequest request;
    request.set_session_id(id);
    v1::Session session;
    return stub_->GetSession(As(key).get(), request, out ? out : &session);
  }
  grpc::Status Close(const std::string& key, const std::string& id) {
    v1::CloseSessionRequest request;
    request.set_session_id(id);
    v1::CloseSessionResponse response;
    return stub_->CloseSession(As(key).get(), request, &response);
  }
  grpc::Status Fork(const std::string& key, const std::string& id, v1::Session* out = nullptr) {
    v1::ForkSessionRequest request;
    request.set_session_id(id);
    v1::Session session;
    return stub_->ForkSession(As(key).get(), request, out ? out : &session);
  }
  grpc::Status List(const std::string& key, v1::ListSessionsResponse* out) {
    return stub_->ListSessions(As(key).get(), {}, out);
  }
  grpc::Status Generate(const std::string& key, const std::string& id, const std::string& text,
                        std::string* output = nullptr) {
    v1::GenerateRequest request;
    request.set_session_id(id);
    request.set_text(text);
    request.mutable_sampling()->set_max_tokens(4);
    auto context = As(key);
    auto reader = stub_->Generate(context.get(), request);
    v1::GenerateResponse m;
    while (reader->Read(&m)) {
      if (m.has_token() && output) *output += m.token().text();
    }
    return reader->Finish();
  }
  grpc::Status Export(const std::string& key, const std::string& id, std::string* bytes) {
    v1::ExportSessionRequest request;
    request.set_session_id(id);
    auto context = As(key);
    auto reader = stub_->ExportSession(context.get(), request);
    v1::SnapshotChunk chunk;
    while (reader->Read(&chunk)) *bytes += chunk.data();
    return reader->Finish();
  }
  grpc::Status Import(const std::string& key, const std::string& bytes, v1::Session* session) {
    auto context = As(key);
    auto writer = stub_->ImportSession(context.get(), session);
    v1::ImportSessionRequest r;
    r.set_data(bytes);
    writer->Write(r);
    writer->WritesDone();
    return writer->Finish();
  }

  // The NOT_FOUND message for `id` had it never existed.
  std::string NeverExisted(const std::string& id) {
    std::string message = Get(kAlice, kNever).error_message();
    return message.replace(message.find(kNever), std::string(kNever).size(), id);
  }

  const std::string dir_;
  std::shared_ptr<const catalogue::ServedModel> taylor_ = test_util::TinyServedModel("taylor");
  std::unique_ptr<AttnServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::AttnServe::Stub> stub_;
};

TEST_F(TenantsTest, EveryCallWithoutAValidKeyIsUnauthenticatedButHealthIsOpen) {
  v1::Session mine;
  ASSERT_TRUE(Create(kAlice, &mine).ok());
  const std::string wrong = "not-a-key-of-this-server-000";
  for (const std::string& key : {std::string(), wrong}) {
    SCOPED_TRACE(key.empty() ? "no key" : "unknown key");
    v1::Session session;
    v1::ListSessionsResponse list;
    v1::ListModelsResponse models;
    v1::ModelInfo info;
    v1::DescribeModelRequest describe;
    describe.set_name("tiny-taylor");
    std::string bytes;
    const grpc::Status statuses[] = {
        Create(key, &session),
        Get(key, mine.id()),
        Close(key, mine.id()),
        Fork(key, mine.id()),
        List(key, &list),
        Generate(key, mine.id(), "hi"),
        Generate(key, "", "hi"),
        Export(key, mine.id(), &bytes),
        Import(key, "ATTNSNAP", &session),
        stub_->ListModels(As(key).get(), {}, &models),
        stub_->DescribeModel(As(key).get(), describe, &info),
    };
    for (const grpc::Status& s : statuses) {
      EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
      EXPECT_NE(s.error_message().find("authorization"), std::string::npos);
      EXPECT_EQ(s.error_message().find(wrong), std::string::npos) << s.error_message();
    }
    EXPECT_TRUE(bytes.empty());
  }
  v1::Session still;
  ASSERT_TRUE(Get(kAlice, mine.id(), &still).ok());
  grpc::ClientContext context;
  grpc::health::v1::HealthCheckResponse health;
  ASSERT_TRUE(
      grpc::health::v1::Health::NewStub(channel_)->Check(&context, {}, &health).ok());
  EXPECT_EQ(health.status(), grpc::health::v1::HealthCheckResponse::SERVING);
}

TEST_F(TenantsTest, AnotherTenantsSessionIsNotFoundExactlyLikeOneThatNeverExisted) {
  v1::Session mine;
  ASSERT_TRUE(Create(kAlice, &mine).ok());
  std::string first;
  ASSERT_TRUE(Generate(kAlice, mine.id(), "Once upon", &first).ok());
  v1::Session before;
  ASSERT_TRUE(Get(kAlice, mine.id(), &before).ok());
  const std::string want = NeverExisted(mine.id());
  std::string bytes;
  const grpc::Status statuses[] = {
      Get(kBob, mine.id()),        Close(kBob, mine.id()),
      Fork(kBob, mine.id()),       Generate(kBob, mine.id(), " a time"),
      Export(kBob, mine.id(), &bytes),
  };
  for (const grpc::Status& s : statuses) {
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
    EXPECT_EQ(s.error_message(), want);
  }
  EXPECT_TRUE(bytes.empty());
  v1::ListSessionsResponse bobs, alices;
  ASSERT_TRUE(List(kBob, &bobs).ok());
  EXPECT_EQ(bobs.sessions_size(), 0);
  ASSERT_TRUE(List(kAlice, &alices).ok());
  ASSERT_EQ(alices.sessions_size(), 1);
  EXPECT_EQ(alices.sessions(0).id(), mine.id());
  // Bob changed nothing: alice's session is where she left it and still hers.
  v1::Session after;
  ASSERT_TRUE(Get(kAlice, mine.id(), &after).ok());
  EXPECT_EQ(after.position(), before.position());
  EXPECT_TRUE(Generate(kAlice, mine.id(), " a time").ok());
  EXPECT_TRUE(Close(kAlice, mine.id()).ok());
}

TEST_F(TenantsTest, AForkIsTheForkersAndAnImportTheImporters) {
  v1::Session mine, fork, imported;
  ASSERT_TRUE(Create(kAlice, &mine).ok());
  ASSERT_TRUE(Generate(kAlice, mine.id(), "The river").ok());
  ASSERT_TRUE(Fork(kAlice, mine.id(), &fork).ok());
  EXPECT_TRUE(Get(kAlice, fork.id()).ok());
  EXPECT_EQ(Get(kBob, fork.id()).error_code(), grpc::StatusCode::NOT_FOUND);
  // Alice hands bob a snapshot: his import is his, and not hers.
  std::string bytes;
  ASSERT_TRUE(Export(kAlice, mine.id(), &bytes).ok());
  ASSERT_TRUE(Import(kBob, bytes, &imported).ok());
  v1::Session original;
  ASSERT_TRUE(Get(kAlice, mine.id(), &original).ok());
  EXPECT_EQ(imported.position(), original.position());
  EXPECT_EQ(Get(kAlice, imported.id()).error_message(), NeverExisted(imported.id()));
  std::string a, b;
  ASSERT_TRUE(Generate(kAlice, mine.id(), " flows", &a).ok());
  ASSERT_TRUE(Generate(kBob, imported.id(), " flows", &b).ok());
  EXPECT_EQ(a, b);  // the same state, continued by two tenants
  v1::ListSessionsResponse bobs;
  ASSERT_TRUE(List(kBob, &bobs).ok());
  ASSERT_EQ(bobs.sessions_size(), 1);
  EXPECT_EQ(bobs.sessions(0).id(), imported.id());
}

TEST_F(TenantsTest, ATenantsLimitIsResourceExhaustedNamingItAndSparesOthers) {
  v1::Session s1, s2, s3;
  ASSERT_TRUE(Create(kBob, &s1).ok());
  ASSERT_TRUE(Create(kBob, &s2).ok());
  grpc::Status over = Create(kBob, &s3);
  EXPECT_EQ(over.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(over.error_message().find("max_sessions: tenant 'bob'"), std::string::npos)
      << over.error_message();
  // A one-turn Generate needs a session of bob's too.
  EXPECT_EQ(Generate(kBob, "", "hi").error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(Fork(kBob, s1.id()).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  for (int i = 0; i < 3; ++i) {
    v1::Session other;
    EXPECT_TRUE(Create(kAlice, &other).ok());
  }
  ASSERT_TRUE(Close(kBob, s1.id()).ok());
  EXPECT_TRUE(Create(kBob, &s3).ok());
}

// Generate without a session id makes a one-turn session that is gone when the turn
// ends: a tenant with max_sessions=2 makes as many such calls as it likes.
TEST_F(TenantsTest, OneTurnCallsDoNotUseUpATenantsSessions) {
  for (int i = 0; i < 6; ++i) {
    std::string out;
    grpc::Status s = Generate(kBob, "", "In the", &out);
    ASSERT_TRUE(s.ok()) << "call " << i << ": " << s.error_message();
    EXPECT_FALSE(out.empty());
  }
  v1::ListSessionsResponse sessions;
  ASSERT_TRUE(List(kBob, &sessions).ok());
  EXPECT_EQ(sessions.sessions_size(), 0);
  v1::Session a, b;
  EXPECT_TRUE(Create(kBob, &a).ok());
  EXPECT_TRUE(Create(kBob, &b).ok());
}

TEST_F(TenantsTest, TheOwnerSurvivesARestartOnADurableStore) {
  const std::string keys = absl::StrCat(kAlice, " alice\n", kBob, " bob\n");
  StartServer(keys, "dir:" + dir_ + "/store");
  v1::Session mine;
  ASSERT_TRUE(Create(kAlice, &mine).ok());
  ASSERT_TRUE(Generate(kAlice, mine.id(), "Once").ok());
  v1::Session saved;
  ASSERT_TRUE(Get(kAlice, mine.id(), &saved).ok());
  server_->Shutdown(absl::ZeroDuration());  // drain: written to the store
  StartServer(keys, "dir:" + dir_ + "/store");  // another server: loads on demand
  EXPECT_EQ(Get(kBob, mine.id()).error_message(), NeverExisted(mine.id()));
  v1::ListSessionsResponse bobs;
  ASSERT_TRUE(List(kBob, &bobs).ok());
  EXPECT_EQ(bobs.sessions_size(), 0);
  v1::Session loaded;
  ASSERT_TRUE(Get(kAlice, mine.id(), &loaded).ok());
  EXPECT_EQ(loaded.position(), saved.position());
}

// The store holds records of other kinds beside sessions (stored responses, kept chat
// states, conversations and each tenant's list of them), under ids anyone can compute.
// Named as a session, each answers exactly like an id that never existed, and stays.
TEST_F(TenantsTest, ARecordOfAnotherKindIsNotFoundExactlyLikeOneThatNeverExisted) {
  const std::string keys = absl::StrCat(kAlice, " alice\n", kBob, " bob\n");
  const std::string spec = "dir:" + dir_ + "/store";
  StartServer(keys, spec);
  auto records = store::OpenSnapshotStore(spec);
  ASSERT_TRUE(records.ok()) << records.status();
  const std::string hex32 = "0123456789abcdef0123456789abcdef";
  const std::vector<std::string> ids = {
      "convs_" + hex32, "conv_" + hex32, "resp_" + hex32, "pfx_" + hex32 + hex32,
      "resp_" + hex32 + "_" + hex32};
  for (const std::string& id : ids) {
    ASSERT_TRUE((*records)->Put(id, "{\"tenant\":\"alice\"}", absl::Minutes(5)).ok());
  }
  // Each RPC on a record's id, and on a twin of the same form that names nothing.
  auto statuses = [&](const std::string& id, std::string* bytes) {
    return std::vector<grpc::Status>{Get(kAlice, id), Close(kAlice, id), Fork(kAlice, id),
                                     Generate(kAlice, id, " a time"),
                                     Export(kAlice, id, bytes)};
  };
  for (const std::string& id : ids) {
    std::string twin = id;
    twin.back() = twin.back() == '0' ? '1' : '0';
    std::string bytes, twin_bytes;
    const std::vector<grpc::Status> got = statuses(id, &bytes);
    const std::vector<grpc::Status> want = statuses(twin, &twin_bytes);
    for (size_t i = 0; i < got.size(); ++i) {
      std::string message = want[i].error_message();
      if (size_t at = message.find(twin); at != std::string::npos) {
        message.replace(at, twin.size(), id);
      }
      EXPECT_EQ(want[i].error_code(), grpc::StatusCode::NOT_FOUND) << message;
      EXPECT_EQ(got[i].error_code(), want[i].error_code()) << id << ": " << got[i].error_message();
      EXPECT_EQ(got[i].error_message(), message);
    }
    EXPECT_TRUE(bytes.empty());
    EXPECT_TRUE((*records)->Get(id).ok()) << id << " was touched";
  }
}

TEST_F(TenantsTest, AMalformedKeysFileStopsTheStartNamingItsLine) {
  server_.reset();
  const std::string path = dir_ + "/bad.txt";
  std::ofstream(path) << kAlice << " alice\n" << kBob << " bob max_sessions=lots\n";
  config::ServerOptions o;
  o.listen_address = "127.0.0.1:0";
  o.http_listen = "";  // no HTTP front: tests must not collide on port 8000
  o.metrics_address = "";
  o.api_keys_file = path;
  auto s = AttnServer::Start(
      o, std::make_unique<catalogue::ModelCatalogue>(
             std::vector<std::shared_ptr<const catalogue::ServedModel>>{taylor_}));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(s.status().message());
  EXPECT_NE(message.find("--api_keys_file: " + path + ":2: 'max_sessions=lots'"),
            std::string::npos)
      << message;
  EXPECT_EQ(message.find(kBob), std::string::npos) << message;
}

TEST(TenantsWithoutKeysTest, OneTenantSeesEverythingAndKeysAreIgnored) {
  config::ServerOptions o;
  o.listen_address = "127.0.0.1:0";
  o.http_listen = "";  // no HTTP front: tests must not collide on port 8000
  o.metrics_address = "";
  auto server = AttnServer::Start(
      o, std::make_unique<catalogue::ModelCatalogue>(
             std::vector<std::shared_ptr<const catalogue::ServedModel>>{
                 test_util::TinyServedModel("taylor")}));
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_FALSE((*server)->api_keys().enabled());
  auto stub = v1::AttnServe::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string((*server)->port()), grpc::InsecureChannelCredentials()));
  v1::Session a;
  {
    grpc::ClientContext context;
    context.AddMetadata("authorization", "Bearer whatever-anyone-sends-000");
    ASSERT_TRUE(stub->CreateSession(&context, {}, &a).ok());
  }
  grpc::ClientContext context;  // no key at all
  v1::ListSessionsResponse list;
  ASSERT_TRUE(stub->ListSessions(&context, {}, &list).ok());
  ASSERT_EQ(list.sessions_size(), 1);
  EXPECT_EQ(list.sessions(0).id(), a.id());
}

}  // namespace
}  // namespace attnserve::service
