#include "server/session/session_store.h"

#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "tests/testing/tiny_model.h"

namespace attnserve::session {
namespace {

using catalogue::ModelCatalogue;
using catalogue::ServedModel;
using namespace snapshot;  // the codec under test and its types

std::shared_ptr<const ServedModel> TinyModel(const std::string& module) {
  return attnserve::test_util::TinyServedModel(module);
}

class SessionStoreTest : public testing::Test {
 protected:
  SessionStore::Options Opts() {
    SessionStore::Options o;
    o.clock = &clock_;
    o.default_ttl = absl::Minutes(10);
    o.max_ttl = absl::Hours(1);
    return o;
  }
  ManualClock clock_;
  std::shared_ptr<const ServedModel> taylor_ = TinyModel("taylor");
  std::shared_ptr<const ServedModel> softmax_ = TinyModel("softmax");
};

TEST_F(SessionStoreTest, IdsAre128BitHexAndUnique) {
  SessionStore store(Opts());
  std::set<std::string> ids;
  for (int i = 0; i < 100; ++i) {
    auto s = store.Create(kDefaultTenant, taylor_, absl::ZeroDuration());
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ((*s)->id().size(), 32u);
    EXPECT_EQ((*s)->id().find_first_not_of("0123456789abcdef"), std::string::npos);
    ids.insert((*s)->id());
  }
  EXPECT_EQ(ids.size(), 100u);
}

TEST_F(SessionStoreTest, EvictsIdleSessionsAfterTtl) {
  SessionStore store(Opts());
  auto short_lived = store.Create(kDefaultTenant, taylor_, absl::Minutes(1)).value();
  auto defaulted = store.Create(kDefaultTenant, taylor_, absl::ZeroDuration()).value();
  EXPECT_EQ(store.Get(kDefaultTenant, defaulted->id())->ttl, absl::Minutes(10));
  clock_.Advance(absl::Seconds(59));
  EXPECT_EQ(store.ExpireIdle(), 0);
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(store.ExpireIdle(), 1);
  EXPECT_TRUE(short_lived->closed());
  EXPECT_EQ(store.Get(kDefaultTenant, short_lived->id()).status().code(), absl::StatusCode::kNotFound);
  // Using a session refreshes its idle timer.
  clock_.Advance(absl::Minutes(9));
  ASSERT_TRUE(store.BeginTurn(kDefaultTenant, defaulted->id()).ok());  // the lease ends at once
  clock_.Advance(absl::Minutes(9));
  EXPECT_EQ(store.ExpireIdle(), 0);
  clock_.Advance(absl::Minutes(1));
  EXPECT_EQ(store.ExpireIdle(), 1);
  EXPECT_EQ(store.size(), 0);
  EXPECT_EQ(store.charged_bytes(), 0);
}

TEST_F(SessionStoreTest, BusySessionsDoNotExpire) {
  SessionStore store(Opts());
  auto s = store.Create(kDefaultTenant, taylor_, absl::Minutes(1)).value();
  auto lease = store.BeginTurn(kDefaultTenant, s->id());
  ASSERT_TRUE(lease.ok());
  clock_.Advance(absl::Hours(2));
  EXPECT_EQ(store.ExpireIdle(), 0);
  lease->Release();
  clock_.Advance(absl::Minutes(1));
  EXPECT_EQ(store.ExpireIdle(), 1);
}

TEST_F(SessionStoreTest, RejectsTtlOverMaximum) {
  SessionStore store(Opts());
  auto s = store.Create(kDefaultTenant, taylor_, absl::Hours(2));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("ttl_seconds"), std::string::npos);
}

TEST_F(SessionStoreTest, OneTurnAtATime) {
  SessionStore store(Opts());
  auto s = store.Create(kDefaultTenant, taylor_, absl::ZeroDuration()).value();
  auto lease = store.BeginTurn(kDefaultTenant, s->id());
  ASSERT_TRUE(lease.ok());
  EXPECT_TRUE(store.Get(kDefaultTenant, s->id())->busy);
  auto second = store.BeginTurn(kDefaultTenant, s->id());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  lease->Release();
  lease->Release();  // exactly once: a second release changes nothing
  EXPECT_FALSE(store.Get(kDefaultTenant, s->id())->busy);
  EXPECT_TRUE(store.BeginTurn(kDefaultTenant, s->id()).ok());
  EXPECT_EQ(store.BeginTurn(kDefaultTenant, "0123").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(SessionStoreTest, FixedStateIsChargedAtCreationAgainstTheBudget) {
  const int64_t bytes = taylor_->model->StateBytes(0);
  ASSERT_GT(bytes, 0);
  SessionStore::Options o = Opts();
  o.memory_budget_bytes = 3 * bytes;
  SessionStore store(std::move(o));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(store.Create(kDefaultTenant, taylor_, absl::ZeroDuration()).ok());
  EXPECT_EQ(store.charged_bytes(), 3 * bytes);
  auto over = store.Create(kDefaultTenant, taylor_, absl::ZeroDuration());
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(over.status().message().find("memory budget"), std::string::npos);
  EXPECT_EQ(store.Get(kDefaultTenant, store.ListAll()[0].id)->state_bytes, bytes);
  ASSERT_TRUE(store.Close(kDefaultTenant, store.ListAll()[0].id).ok());
  EXPECT_TRUE(store.Create(kDefaultTenant, taylor_, absl::ZeroDuration()).ok());
}

TEST_F(SessionStoreTest, KvCachesAreChargedAsTheyGrow) {
  SessionStore::Options o = Opts();
  o.memory_budget_bytes = softmax_->model->StateBytes(1000);
  SessionStore store(std::move(o));
  auto a = store.Create(kDefaultTenant, softmax_, absl::ZeroDuration()).value();
  auto b = store.Create(kDefaultTenant, softmax_, absl::ZeroDuration()).value();
  EXPECT_EQ(store.charged_bytes(), 0);
  EXPECT_TRUE(store.Charge(*a, softmax_->model->StateBytes(600)).ok());
  auto over = store.Charge(*b, softmax_->model->StateBytes(500));
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(over.message().find("memory budget"), std::string::npos);
  EXPECT_TRUE(store.Charge(*b, softmax_->model->StateBytes(400)).ok());
  EXPECT_EQ(store.charged_bytes(), softmax_->model->StateBytes(1000));
  ASSERT_TRUE(store.Close(kDefaultTenant, a->id()).ok());
  EXPECT_EQ(store.charged_bytes(), softmax_->model->StateBytes(400));
}

TEST_F(SessionStoreTest, MaxSessionsSaysWhichLimit) {
  SessionStore::Options o = Opts();
  o.max_sessions = 2;
  SessionStore store(std::move(o));
  ASSERT_TRUE(store.Create(kDefaultTenant, taylor_, absl::ZeroDuration()).ok());
  ASSERT_TRUE(store.Create(kDefaultTenant, taylor_, absl::ZeroDuration()).ok());
  auto s = store.Create(kDefaultTenant, taylor_, absl::ZeroDuration());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.status().message().find("max_sessions"), std::string::npos);
}

TEST_F(SessionStoreTest, AnotherTenantsSessionIsNotFoundExactlyLikeANeverCreatedOne) {
  SessionStore store(Opts());
  auto mine = store.Create("alice", taylor_, absl::ZeroDuration()).value();
  EXPECT_EQ(mine->owner(), "alice");
  const std::string never = "00000000000000000000000000000000";
  // What bob is told about alice's session is what anyone is told about an id that never
  // existed (the message names the id it was given).
  std::string want(store.Get("alice", never).status().message());
  want.replace(want.find(never), never.size(), mine->id());
  auto same = [&](const absl::Status& got) {
    EXPECT_EQ(got.code(), absl::StatusCode::kNotFound) << got;
    EXPECT_EQ(got.message(), want);
  };
  same(store.Get("bob", mine->id()).status());
  same(store.BeginTurn("bob", mine->id()).status());
  same(store.Export("bob", mine->id()).status());
  same(store.Fork("bob", mine->id(), absl::ZeroDuration()).status());
  same(store.Close("bob", mine->id()));
  // Even while a turn runs on it (no FAILED_PRECONDITION that would tell it apart).
  auto lease = store.BeginTurn("alice", mine->id());
  ASSERT_TRUE(lease.ok()) << lease.status();
  same(store.BeginTurn("bob", mine->id()).status());
  lease->Release();
  EXPECT_TRUE(store.List("bob").empty());
  ASSERT_EQ(store.List("alice").size(), 1u);
  EXPECT_EQ(store.List("alice")[0].owner, "alice");
  EXPECT_EQ(store.ListAll().size(), 1u);  // every tenant's, for the server itself
  // Nothing bob did touched it.
  EXPECT_FALSE(mine->closed());
  EXPECT_TRUE(store.Get("alice", mine->id()).ok());
  EXPECT_TRUE(store.Close("alice", mine->id()).ok());
}

TEST_F(SessionStoreTest, ForksAndImportsBelongToTheCaller) {
  SessionStore::Options o = Opts();
  std::vector<std::shared_ptr<const ServedModel>> models = {taylor_};
  ModelCatalogue catalogue(models);
  o.catalogue = &catalogue;
  SessionStore store(std::move(o));
  auto a = store.Create("alice", taylor_, absl::ZeroDuration()).value();
  auto fork = store.Fork("alice", a->id(), absl::ZeroDuration()).value();
  EXPECT_EQ(fork->owner(), "alice");
  auto bytes = store.Export("alice", a->id()).value();
  auto imported = store.Import("bob", bytes, absl::ZeroDuration()).value();
  EXPECT_EQ(imported->owner(), "bob");
  EXPECT_EQ(store.Get("alice", imported->id()).status().code(), absl::StatusCode::kNotFound);
  // Its snapshot now names bob, not the exporter.
  EXPECT_EQ(SnapshotOwner(*store.Export("bob", imported->id()).value()).value(), "bob");
}

// A hybrid (server/DESIGN.md §11): a Mamba-2 layer's fixed state beside an attention
// layer's KV cache. An imported session is charged what its position holds, as a grown
// one is: the KV cache too, not only the fixed part.
TEST_F(SessionStoreTest, ImportedHybridSessionsAreChargedTheirKvCaches) {
  model::ModelConfig c;
  c.name = "tiny-hybrid";
  c.dim = 32;
  c.num_layers = 2;
  c.mixers = {model::kMamba2Mixer, model::kAttentionMixer};
  c.mlp_hidden = 64;
  c.max_context = 4096;
  c.attention.module = "softmax";
  c.attention.num_heads = 2;
  c.attention.num_kv_heads = 2;
  c.attention.head_dim = 16;
  c.attention.value_dim = 16;
  c.ssm_inner = 64;
  c.ssm_state = 16;
  c.ssm_heads = 4;
  c.ssm_groups = 1;
  c.conv_kernel = 4;
  auto m = model::Model::Create(c, 3);
  ASSERT_TRUE(m.ok()) << m.status();
  auto hybrid = std::make_shared<ServedModel>(ServedModel{
      c.name, "", std::move(m).value(), {}, std::make_shared<tokenizer::ByteTokenizer>()});
  ASSERT_GT(hybrid->model->BreakEvenContext(), 0);
  ASSERT_GT(hybrid->model->StateBytes(300), hybrid->model->StateBytes(0));

  SessionStore::Options o = Opts();
  std::vector<std::shared_ptr<const ServedModel>> models = {hybrid};
  ModelCatalogue catalogue(models);
  o.catalogue = &catalogue;
  SessionStore store(std::move(o));
  auto a = store.Create(kDefaultTenant, hybrid, absl::ZeroDuration()).value();
  const std::vector<int32_t> ids(300, 65);
  ASSERT_TRUE(hybrid->model->Prefill(a->state(), ids).ok());
  auto bytes = store.Export(kDefaultTenant, a->id()).value();
  ASSERT_TRUE(store.Close(kDefaultTenant, a->id()).ok());
  EXPECT_EQ(store.charged_bytes(), 0);
  auto imported = store.Import(kDefaultTenant, bytes, absl::ZeroDuration()).value();
  EXPECT_EQ(store.Get(kDefaultTenant, imported->id())->position, 300);
  EXPECT_EQ(store.Get(kDefaultTenant, imported->id())->state_bytes, hybrid->model->StateBytes(300));
  EXPECT_EQ(store.charged_bytes(), hybrid->model->StateBytes(300));
}

TEST_F(SessionStoreTest, TenantLimitsNameTheLimitAndLeaveOtherTenantsAlone) {
  const int64_t bytes = taylor_->model->StateBytes(0);
  SessionStore::Options o = Opts();
  o.tenant_limits["small"] = TenantLimits{2, 0};
  o.tenant_limits["thin"] = TenantLimits{0, bytes + bytes / 2};
  SessionStore store(std::move(o));
  auto s1 = store.Create("small", taylor_, absl::ZeroDuration()).value();
  ASSERT_TRUE(store.Create("small", taylor_, absl::ZeroDuration()).ok());
  auto over = store.BeginOneTurn("small", taylor_);  // one-turn sessions too
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(over.status().message().find("max_sessions: tenant 'small'"), std::string::npos)
      << over.status();
  EXPECT_TRUE(store.Create("other", taylor_, absl::ZeroDuration()).ok());
  ASSERT_TRUE(store.Close("small", s1->id()).ok());
  EXPECT_TRUE(store.Create("small", taylor_, absl::ZeroDuration()).ok());

  ASSERT_TRUE(store.Create("thin", taylor_, absl::ZeroDuration()).ok());
  auto thin = store.Create("thin", taylor_, absl::ZeroDuration());
  EXPECT_EQ(thin.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(thin.status().message().find("max_state_bytes: tenant 'thin'"), std::string::npos)
      << thin.status();
  EXPECT_EQ(store.size(), 4);
}

TEST_F(SessionStoreTest, TenantStateBytesLimitStopsAGrowingKvCache) {
  SessionStore::Options o = Opts();
  o.tenant_limits["t"] = TenantLimits{0, softmax_->model->StateBytes(100)};
  SessionStore store(std::move(o));
  auto a = store.Create("t", softmax_, absl::ZeroDuration()).value();
  EXPECT_TRUE(store.Charge(*a, softmax_->model->StateBytes(100)).ok());
  auto over = store.Charge(*a, softmax_->model->StateBytes(101));
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(over.message().find("max_state_bytes"), std::string::npos) << over;
  EXPECT_EQ(store.charged_bytes(), softmax_->model->StateBytes(100));
  // Shrinking and closing give the tenant its room back.
  ASSERT_TRUE(store.Close("t", a->id()).ok());
  auto b = store.Create("t", softmax_, absl::ZeroDuration()).value();
  EXPECT_TRUE(store.Charge(*b, softmax_->model->StateBytes(100)).ok());
}

TEST_F(SessionStoreTest, CloseMarksARunningTurnAndFreesItsCharge) {
  SessionStore store(Opts());
  auto s = store.Create(kDefaultTenant, taylor_, absl::ZeroDuration()).value();
  auto lease = store.BeginTurn(kDefaultTenant, s->id());
  ASSERT_TRUE(lease.ok());
  ASSERT_TRUE(store.Close(kDefaultTenant, s->id()).ok());
  EXPECT_TRUE(s->closed());
  EXPECT_EQ(store.charged_bytes(), 0);
  EXPECT_EQ(store.Close(kDefaultTenant, s->id()).code(), absl::StatusCode::kNotFound);
  lease->Release();  // the engine still ends its turn safely
  EXPECT_EQ(store.size(), 0);
}

TEST_F(SessionStoreTest, ConcurrentCreateTurnCloseKeepsCountsConsistent) {
  SessionStore::Options o = Opts();
  o.max_sessions = 1000;
  SessionStore store(std::move(o));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        auto s = store.Create(kDefaultTenant, taylor_, absl::ZeroDuration()).value();
        auto turn = store.BeginTurn(kDefaultTenant, s->id());
        EXPECT_TRUE(turn.ok());
        store.ListAll();
        turn->Release();
        if (i % 2 == 0) {
          EXPECT_TRUE(store.Close(kDefaultTenant, s->id()).ok());
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(store.size(), 400);
  EXPECT_EQ(store.charged_bytes(), 400 * taylor_->model->StateBytes(0));
}

}  // namespace
}  // namespace attnserve::session
