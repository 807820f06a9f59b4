// SessionStore's races and edges, driven by a store with hooks (tests/session/
// hooked_store.h) rather than by sleeps: concurrent loads, a close racing a save,
// refused creates and imports, one-turn sessions under tenant limits, and which thread
// waits on the store.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "absl/synchronization/notification.h"
#include "server/session/session_store.h"
#include "tests/session/hooked_store.h"
#include "tests/testing/tiny_model.h"

namespace attnserve::session {
namespace {

using catalogue::ModelCatalogue;
using catalogue::ServedModel;
using testing::Gate;
using testing::HookedStore;

class SessionStoreRacesTest : public ::testing::Test {
 protected:
  SessionStoreRacesTest()
      : catalogue_(std::vector<std::shared_ptr<const ServedModel>>{taylor_}) {}

  // A store over a HookedStore (kept in `hooked_`).
  std::unique_ptr<SessionStore> MakeStore(SessionStore::Options o = {}) {
    auto hooked = std::make_unique<HookedStore>();
    hooked_ = hooked.get();
    o.clock = &clock_;
    o.catalogue = &catalogue_;
    o.durable = std::move(hooked);
    o.spill_after = absl::Minutes(1);
    o.tenant_limits = limits_;
    return SessionStore::Create(std::move(o)).value();
  }
  // A hand-run turn that leaves the session newer than its stored copy (dirty).
  static void Turn(SessionStore& store, std::string_view tenant, const std::string& id) {
    auto claim = store.BeginTurn(tenant, id);
    ASSERT_TRUE(claim.ok()) << claim.status();
    std::vector<int32_t> tokens(5, 66);
    ASSERT_TRUE((*claim)->model().Prefill((*claim)->state(), tokens).ok());
    (*claim)->pending_token() = 70;
    absl::Notification done;
    store.FinishTurn(*std::move(claim), [&](absl::Status) { done.Notify(); });
    done.WaitForNotification();
  }
  int64_t Charge() const { return taylor_->model->StateBytes(0); }

  ManualClock clock_;
  std::shared_ptr<const ServedModel> taylor_ = test_util::TinyServedModel("taylor");
  ModelCatalogue catalogue_;
  TenantLimitMap limits_;
  HookedStore* hooked_ = nullptr;
};

// Two calls load the same spilled session while memory is full: each has to spill
// something first, and the first is held inside its spill while the second loads and
// admits the session. The session is charged once.
TEST_F(SessionStoreRacesTest, ConcurrentLoadsOfOneSessionChargeItOnce) {
  SessionStore::Options o;
  o.max_sessions = 2;
  auto store = MakeStore(std::move(o));
  const std::string target = store->Create(kDefaultTenant, taylor_, absl::ZeroDuration()).value()->id();
  clock_.Advance(absl::Minutes(2));
  ASSERT_EQ(store->SpillIdle(), 1);
  const std::string x = store->Create(kDefaultTenant, taylor_, absl::ZeroDuration()).value()->id();
  Turn(*store, kDefaultTenant, x);  // dirty: spilling it writes
  clock_.Advance(absl::Seconds(1));
  const std::string y = store->Create(kDefaultTenant, taylor_, absl::ZeroDuration()).value()->id();
  Turn(*store, kDefaultTenant, y);
  ASSERT_EQ(store->size(), 2);

  Gate gate;
  std::atomic<bool> gated{false};
  hooked_->set_hook([&](const std::string& op, const std::string& id) {
    if (op == "PutFenced" && id == x && !gated.exchange(true)) gate.Wait();
  });
  std::thread first([&] { EXPECT_TRUE(store->Get(kDefaultTenant, target).ok()); });
  gate.AwaitReached();  // the first load is spilling x (the least recently used)
  ASSERT_TRUE(store->Get(kDefaultTenant, target).ok());  // spills y, loads the target
  gate.Open();
  first.join();

  EXPECT_EQ(store->size(), 1);
  EXPECT_EQ(store->charged_bytes(), Charge());
  EXPECT_EQ(store->usage(kDefaultTenant).sessions, 1);
  ASSERT_TRUE(store->Close(kDefaultTenant, target).ok());
  EXPECT_EQ(store->charged_bytes(), 0);
  EXPECT_EQ(store->usage(kDefaultTenant).sessions, 0);
}

// Close runs while a spill of the same session waits before its fenced write. The
// session stays closed: nothing is written back, and the tenant is released once.
TEST_F(SessionStoreRacesTest, CloseDuringASpillDoesNotResurrectTheSession) {
  limits_["alice"] = TenantLimits{2, 0};
  auto store = MakeStore();
  const std::string id = store->Create("alice", taylor_, absl::ZeroDuration()).value()->id();
  const std::string other = store->Create("alice", taylor_, absl::ZeroDuration()).value()->id();
  Turn(*store, "alice", id);  // dirty: the spill writes it
  clock_.Advance(absl::Minutes(2));
  ASSERT_TRUE(store->BeginTurn("alice", other).ok());  // `other` is used: not spilled

  Gate gate;
  std::atomic<bool> gated{false};
  hooked_->set_hook([&](const std::string& op, const std::string& key) {
    if (op == "PutFenced" && key == id && !gated.exchange(true)) gate.Wait();
  });
  std::thread spill([&] { store->SpillIdle(); });
  gate.AwaitReached();
  EXPECT_TRUE(store->Close("alice", id).ok());
  gate.Open();
  spill.join();

  EXPECT_FALSE(hooked_->has(id));
  EXPECT_EQ(store->Get("alice", id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store->usage("alice").sessions, 1);  // `other` only
  EXPECT_EQ(store->usage("alice").bytes, Charge());
  // Its count was not decremented twice: one more session makes two, its limit.
  EXPECT_TRUE(store->Create("alice", taylor_, absl::ZeroDuration()).ok());
  EXPECT_EQ(store->usage("alice").sessions, 2);
}

// A close while a write-through save after a turn waits on the writer thread: the save
// writes nothing more, and what it wrote is gone.
TEST_F(SessionStoreRacesTest, CloseDuringAWriteThroughLeavesNothingStored) {
  SessionStore::Options o;
  o.persist = PersistMode::kEachTurn;
  auto store = MakeStore(std::move(o));
  const std::string id = store->Create(kDefaultTenant, taylor_, absl::ZeroDuration()).value()->id();
  Gate gate;
  std::atomic<bool> gated{false};
  hooked_->set_hook([&](const std::string& op, const std::string& key) {
    if (op == "PutFenced" && key == id && !gated.exchange(true)) gate.Wait();
  });
  auto claim = store->BeginTurn(kDefaultTenant, id);
  ASSERT_TRUE(claim.ok());
  std::vector<int32_t> tokens(3, 66);
  ASSERT_TRUE((*claim)->model().Prefill((*claim)->state(), tokens).ok());
  absl::Notification saved;
  store->FinishTurn(*std::move(claim), [&](absl::Status) { saved.Notify(); });
  gate.AwaitReached();
  EXPECT_TRUE(store->Close(kDefaultTenant, id).ok());
  gate.Open();
  saved.WaitForNotification();
  EXPECT_FALSE(hooked_->has(id));
  EXPECT_EQ(store->size(), 0);
}

// Refused creates and imports write nothing to the store.
TEST_F(SessionStoreRacesTest, RefusedCreatesAndImportsLeaveNothingStored) {
  limits_["alice"] = TenantLimits{1, 0};
  auto store = MakeStore();
  auto kept = store->Create("alice", taylor_, absl::ZeroDuration());
  ASSERT_TRUE(kept.ok());
  auto kept_claim = store->BeginTurn("alice", (*kept)->id());  // busy: cannot be spilled
  ASSERT_TRUE(kept_claim.ok());
  ASSERT_EQ(hooked_->stored(), 1u);
  EXPECT_EQ(store->Create("alice", taylor_, absl::ZeroDuration()).status().code(),
            absl::StatusCode::kResourceExhausted);
  auto bytes = (*kept_claim)->Snapshot();
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(store->Import("alice", *bytes, absl::ZeroDuration()).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(hooked_->stored(), 1u);
  store->StopAccepting();
  EXPECT_EQ(store->Create("bob", taylor_, absl::ZeroDuration()).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(store->Import("bob", *bytes, absl::ZeroDuration()).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(hooked_->stored(), 1u);
  EXPECT_EQ(hooked_->count("Put"), 1);
}

// One-turn sessions are freed when their claim ends, under the caller's tenant: a tenant
// at max_sessions=5 can make any number of one-turn calls.
TEST_F(SessionStoreRacesTest, OneTurnSessionsAreReleasedUnderTheirTenant) {
  limits_["alice"] = TenantLimits{5, 0};
  SessionStore::Options o;
  o.tenant_limits = limits_;
  o.clock = &clock_;
  SessionStore store(std::move(o));  // the memory store: where the leak was seen
  for (int i = 0; i < 12; ++i) {
    auto claim = store.BeginOneTurn("alice", taylor_);
    ASSERT_TRUE(claim.ok()) << "call " << i << ": " << claim.status();
    EXPECT_TRUE(store.List("alice").empty());  // not a session anyone can name
    claim->Release();
    EXPECT_FALSE(static_cast<bool>(*claim));
    EXPECT_EQ(store.usage("alice").sessions, 0);
  }
  EXPECT_EQ(store.size(), 0);
}

// The writer thread never sleeps waiting for a store lease another server holds: the
// save after the turn asks once and gives up (the session stays dirty in memory), so the
// final messages queued behind it are not delayed.
TEST_F(SessionStoreRacesTest, WriterAsksForALeaseOnceAndDoesNotWait) {
  SessionStore::Options o;
  o.persist = PersistMode::kEachTurn;
  o.leases.wait = absl::Seconds(30);  // a waiting writer would hold the test for 30 s
  auto store = MakeStore(std::move(o));
  const std::string id = store->Create(kDefaultTenant, taylor_, absl::ZeroDuration()).value()->id();
  auto claim = store->BeginTurn(kDefaultTenant, id);
  ASSERT_TRUE(claim.ok());
  hooked_->HoldLeaseElsewhere(id);  // the lease is lost mid-turn: another server has it
  const int before = hooked_->count("AcquireLease");
  absl::Notification done;
  absl::Status result;
  store->FinishTurn(*std::move(claim), [&](absl::Status s) {
    result = s;
    done.Notify();
  });
  done.WaitForNotification();
  EXPECT_TRUE(result.ok()) << result;  // not saved; the session works on in memory
  EXPECT_EQ(hooked_->count("AcquireLease") - before, 1);
}

// A session closed while its turn runs holds a store lease when the turn ends: FinishTurn
// (on the engine thread) hands giving it up to the writer thread.
TEST_F(SessionStoreRacesTest, FinishTurnOfAClosedSessionMakesNoStoreCallOnItsThread) {
  auto store = MakeStore();
  const std::string id = store->Create(kDefaultTenant, taylor_, absl::ZeroDuration()).value()->id();
  auto claim = store->BeginTurn(kDefaultTenant, id);  // takes the store lease
  ASSERT_TRUE(claim.ok());
  std::thread client([&] { EXPECT_TRUE(store->Close(kDefaultTenant, id).ok()); });
  client.join();
  const size_t before = hooked_->calls().size();
  absl::Notification done;
  store->FinishTurn(*std::move(claim), [&](absl::Status) { done.Notify(); });
  done.WaitForNotification();
  const auto calls = hooked_->calls();
  int releases = 0;
  for (size_t i = before; i < calls.size(); ++i) {
    EXPECT_NE(calls[i].thread, std::this_thread::get_id()) << calls[i].op;
    releases += calls[i].op == "ReleaseLease";
  }
  EXPECT_EQ(releases, 1);
}

}  // namespace
}  // namespace attnserve::session
