#include "server/session/session_store.h"

#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "tests/testing/tiny_model.h"

namespace attnserve::session {
namespace {

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
    auto s = store.Create(taylor_, absl::ZeroDuration());
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ((*s)->id().size(), 32u);
    EXPECT_EQ((*s)->id().find_first_not_of("0123456789abcdef"), std::string::npos);
    ids.insert((*s)->id());
  }
  EXPECT_EQ(ids.size(), 100u);
}

TEST_F(SessionStoreTest, EvictsIdleSessionsAfterTtl) {
  SessionStore store(Opts());
  auto short_lived = store.Create(taylor_, absl::Minutes(1)).value();
  auto defaulted = store.Create(taylor_, absl::ZeroDuration()).value();
  EXPECT_EQ(store.Get(defaulted->id())->ttl, absl::Minutes(10));
  clock_.Advance(absl::Seconds(59));
  EXPECT_EQ(store.ExpireIdle(), 0);
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(store.ExpireIdle(), 1);
  EXPECT_TRUE(short_lived->closed());
  EXPECT_EQ(store.Get(short_lived->id()).status().code(), absl::StatusCode::kNotFound);
  // Using a session refreshes its idle timer.
  clock_.Advance(absl::Minutes(9));
  ASSERT_TRUE(store.BeginTurn(defaulted->id()).ok());  // the lease ends at once
  clock_.Advance(absl::Minutes(9));
  EXPECT_EQ(store.ExpireIdle(), 0);
  clock_.Advance(absl::Minutes(1));
  EXPECT_EQ(store.ExpireIdle(), 1);
  EXPECT_EQ(store.size(), 0);
  EXPECT_EQ(store.charged_bytes(), 0);
}

TEST_F(SessionStoreTest, BusySessionsDoNotExpire) {
  SessionStore store(Opts());
  auto s = store.Create(taylor_, absl::Minutes(1)).value();
  auto lease = store.BeginTurn(s->id());
  ASSERT_TRUE(lease.ok());
  clock_.Advance(absl::Hours(2));
  EXPECT_EQ(store.ExpireIdle(), 0);
  lease->Release();
  clock_.Advance(absl::Minutes(1));
  EXPECT_EQ(store.ExpireIdle(), 1);
}

TEST_F(SessionStoreTest, RejectsTtlOverMaximum) {
  SessionStore store(Opts());
  auto s = store.Create(taylor_, absl::Hours(2));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("ttl_seconds"), std::string::npos);
}

TEST_F(SessionStoreTest, OneTurnAtATime) {
  SessionStore store(Opts());
  auto s = store.Create(taylor_, absl::ZeroDuration()).value();
  auto lease = store.BeginTurn(s->id());
  ASSERT_TRUE(lease.ok());
  EXPECT_TRUE(store.Get(s->id())->busy);
  auto second = store.BeginTurn(s->id());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  lease->Release();
  lease->Release();  // exactly once: a second release changes nothing
  EXPECT_FALSE(store.Get(s->id())->busy);
  EXPECT_TRUE(store.BeginTurn(s->id()).ok());
  EXPECT_EQ(store.BeginTurn("0123").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(SessionStoreTest, FixedStateIsChargedAtCreationAgainstTheBudget) {
  const int64_t bytes = taylor_->model->StateBytes(0);
  ASSERT_GT(bytes, 0);
  SessionStore::Options o = Opts();
  o.memory_budget_bytes = 3 * bytes;
  SessionStore store(std::move(o));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(store.Create(taylor_, absl::ZeroDuration()).ok());
  EXPECT_EQ(store.charged_bytes(), 3 * bytes);
  auto over = store.Create(taylor_, absl::ZeroDuration());
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(over.status().message().find("memory budget"), std::string::npos);
  EXPECT_EQ(store.Get(store.List()[0].id)->state_bytes, bytes);
  ASSERT_TRUE(store.Close(store.List()[0].id).ok());
  EXPECT_TRUE(store.Create(taylor_, absl::ZeroDuration()).ok());
}

TEST_F(SessionStoreTest, KvCachesAreChargedAsTheyGrow) {
  SessionStore::Options o = Opts();
  o.memory_budget_bytes = softmax_->model->StateBytes(1000);
  SessionStore store(std::move(o));
  auto a = store.Create(softmax_, absl::ZeroDuration()).value();
  auto b = store.Create(softmax_, absl::ZeroDuration()).value();
  EXPECT_EQ(store.charged_bytes(), 0);
  EXPECT_TRUE(store.Charge(*a, softmax_->model->StateBytes(600)).ok());
  auto over = store.Charge(*b, softmax_->model->StateBytes(500));
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(over.message().find("memory budget"), std::string::npos);
  EXPECT_TRUE(store.Charge(*b, softmax_->model->StateBytes(400)).ok());
  EXPECT_EQ(store.charged_bytes(), softmax_->model->StateBytes(1000));
  ASSERT_TRUE(store.Close(a->id()).ok());
  EXPECT_EQ(store.charged_bytes(), softmax_->model->StateBytes(400));
}

TEST_F(SessionStoreTest, MaxSessionsSaysWhichLimit) {
  SessionStore::Options o = Opts();
  o.max_sessions = 2;
  SessionStore store(std::move(o));
  ASSERT_TRUE(store.Create(taylor_, absl::ZeroDuration()).ok());
  ASSERT_TRUE(store.Create(taylor_, absl::ZeroDuration()).ok());
  auto s = store.Create(taylor_, absl::ZeroDuration());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.status().message().find("max_sessions"), std::string::npos);
}

TEST_F(SessionStoreTest, CloseMarksARunningTurnAndFreesItsCharge) {
  SessionStore store(Opts());
  auto s = store.Create(taylor_, absl::ZeroDuration()).value();
  auto lease = store.BeginTurn(s->id());
  ASSERT_TRUE(lease.ok());
  ASSERT_TRUE(store.Close(s->id()).ok());
  EXPECT_TRUE(s->closed());
  EXPECT_EQ(store.charged_bytes(), 0);
  EXPECT_EQ(store.Close(s->id()).code(), absl::StatusCode::kNotFound);
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
        auto s = store.Create(taylor_, absl::ZeroDuration()).value();
        auto turn = store.BeginTurn(s->id());
        EXPECT_TRUE(turn.ok());
        store.List();
        turn->Release();
        if (i % 2 == 0) {
          EXPECT_TRUE(store.Close(s->id()).ok());
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
