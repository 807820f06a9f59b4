// The streaming snapshot RPCs at their edges: an export's chunking, and an import whose
// client cancels instead of closing its side. The service runs on its own gRPC server
// here, so the test holds the session store and can shut the server down to wait for
// the call to be over.
#include "server/service/session_transfer.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>
#include <gtest/gtest.h>

#include "server/service/attnserve_service.h"
#include "tests/testing/tiny_model.h"

namespace attnserve::service {
namespace {

using Chunks = std::vector<std::pair<size_t, size_t>>;

// Every byte once, in order, in chunks of 1 to kSnapshotChunkBytes; an empty snapshot
// has no chunk (an export of one ends instead of writing empty chunks forever).
TEST(SnapshotChunks, CoverEveryByteOnceAndNeverAreEmpty) {
  constexpr size_t k = kSnapshotChunkBytes;
  EXPECT_EQ(SnapshotChunks(0), Chunks{});
  EXPECT_EQ(SnapshotChunks(1), (Chunks{{0, 1}}));
  EXPECT_EQ(SnapshotChunks(k), (Chunks{{0, k}}));
  EXPECT_EQ(SnapshotChunks(k + 1), (Chunks{{0, k}, {k, 1}}));
  EXPECT_EQ(SnapshotChunks(2 * k), (Chunks{{0, k}, {k, k}}));
}

class ImportTest : public testing::Test {
 protected:
  void SetUp() override {
    catalogue_ = std::make_unique<catalogue::ModelCatalogue>(
        std::vector<std::shared_ptr<const catalogue::ServedModel>>{model_});
    session::SessionStore::Options o;
    o.catalogue = catalogue_.get();
    store_ = std::make_unique<session::SessionStore>(std::move(o));
    scheduler::Scheduler::Options so;
    so.store = store_.get();
    scheduler_ = std::make_unique<scheduler::Scheduler>(so);
    pool_ = std::make_unique<BlockingPool>(2, 16);
    service_ = std::make_unique<AttnServeService>(catalogue_.get(), store_.get(),
                                                  scheduler_.get(), nullptr, RequestLimits{},
                                                  pool_.get());
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = v1::AttnServe::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                                       grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
    pool_.reset();
  }

  std::shared_ptr<const catalogue::ServedModel> model_ =
      test_util::TinyServedModel("softmax");
  std::unique_ptr<catalogue::ModelCatalogue> catalogue_;
  std::unique_ptr<session::SessionStore> store_;
  std::unique_ptr<scheduler::Scheduler> scheduler_;
  std::unique_ptr<BlockingPool> pool_;
  std::unique_ptr<AttnServeService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::AttnServe::Stub> stub_;
};

// A client that sends a whole snapshot and then cancels has not asked for the session:
// nothing is created or charged. The same bytes, half-closed, import.
TEST_F(ImportTest, ACancelledImportCreatesNothing) {
  auto source = store_->Create(kDefaultTenant, model_, absl::ZeroDuration());
  ASSERT_TRUE(source.ok()) << source.status();
  auto snapshot = store_->Export(kDefaultTenant, (*source)->id());
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  ASSERT_TRUE(store_->Close(kDefaultTenant, (*source)->id()).ok());
  ASSERT_EQ(store_->size(), 0);
  v1::ImportSessionRequest request;
  request.set_data(**snapshot);
  {
    grpc::ClientContext context;
    v1::Session session;
    auto writer = stub_->ImportSession(&context, &session);
    ASSERT_TRUE(writer->Write(request));
    context.TryCancel();
    EXPECT_EQ(writer->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  server_->Shutdown();  // returns once the call is over on the server too
  server_.reset();
  EXPECT_EQ(store_->size(), 0) << "a cancelled import created a session";
  EXPECT_EQ(store_->charged_bytes(), 0);
}

TEST_F(ImportTest, AHalfClosedImportCreatesTheSession) {
  auto source = store_->Create(kDefaultTenant, model_, absl::ZeroDuration());
  ASSERT_TRUE(source.ok()) << source.status();
  auto snapshot = store_->Export(kDefaultTenant, (*source)->id());
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  v1::ImportSessionRequest request;
  request.set_data(**snapshot);
  grpc::ClientContext context;
  v1::Session session;
  auto writer = stub_->ImportSession(&context, &session);
  ASSERT_TRUE(writer->Write(request));
  ASSERT_TRUE(writer->WritesDone());
  ASSERT_TRUE(writer->Finish().ok());
  EXPECT_TRUE(store_->Get(kDefaultTenant, session.id()).ok());
  EXPECT_EQ(store_->size(), 2);
}

}  // namespace
}  // namespace attnserve::service
