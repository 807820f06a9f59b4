// SessionStore with a real durable backend (a dir: store in a temporary directory):
// import, fork, export, persist after a turn, spill (idle and under memory pressure),
// load on demand, drain, expiry, and a store that fails.
#include <gtest/gtest.h>

#include <filesystem>
#include <cstring>
#include <fstream>

#include "absl/synchronization/notification.h"

#include "server/common/crc32c.h"
#include "server/session/session_store.h"
#include "tests/testing/tiny_model.h"

namespace attnserve::session {
namespace {

using catalogue::ModelCatalogue;
using catalogue::ServedModel;
using namespace snapshot;  // the codec under test and its types

namespace fs = std::filesystem;

class DurableSessionStoreTest : public testing::Test {
 protected:
  DurableSessionStoreTest()
      : dir_(fs::path(testing::TempDir()) /
             ("attnserve_durable_" + std::to_string(::getpid()) + "_" +
              testing::UnitTest::GetInstance()->current_test_info()->name())) {
    fs::remove_all(dir_);
    catalogue_ = std::make_unique<ModelCatalogue>(
        std::vector<std::shared_ptr<const ServedModel>>{taylor_, softmax_});
  }
  ~DurableSessionStoreTest() override { fs::remove_all(dir_); }

  std::unique_ptr<SessionStore> MakeStore(PersistMode persist = PersistMode::kNone,
                                          int64_t budget = int64_t{1} << 30,
                                          absl::Duration spill_after = absl::InfiniteDuration(),
                                          absl::Duration lease_wait = absl::Seconds(2),
                                          int64_t page_target_bytes = store::kPageTargetBytes) {
    SessionStore::Options o;
    o.page_target_bytes = page_target_bytes;
    o.leases.wait = lease_wait;
    o.clock = &clock_;
    o.catalogue = catalogue_.get();
    o.durable = store::OpenSnapshotStore("dir:" + dir_.string()).value();
    o.persist = persist;
    o.memory_budget_bytes = budget;
    o.spill_after = spill_after;
    o.tenant_limits = tenant_limits_;
    return SessionStore::Create(std::move(o)).value();
  }
  // Runs a "turn" by hand: prefill `n` tokens and leave `pending` waiting.
  static void Advance(TurnClaim& lease, int n, int32_t pending) {
    std::vector<int32_t> tokens(n);
    for (int i = 0; i < n; ++i) tokens[i] = 66 + i % 13;  // rows that differ page to page
    ASSERT_TRUE(lease->model().Prefill(lease->state(), tokens).ok());
    lease->pending_token() = pending;
  }
  // A whole hand-run turn, ended the way the scheduler ends turns.
  static void Turn(SessionStore& store, const std::string& id, int n, int32_t pending,
                   std::string_view tenant = kDefaultTenant) {
    auto lease = store.BeginTurn(tenant, id);
    ASSERT_TRUE(lease.ok()) << lease.status();
    Advance(*lease, n, pending);
    ASSERT_TRUE(store.Charge(lease->session(),
                             (*lease)->model().StateBytes((*lease)->state().position())).ok());
    absl::Notification done;
    store.FinishTurn(std::move(*lease), [&](absl::Status) { done.Notify(); });
    ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  }
  bool Stored(const std::string& id) const { return fs::exists(dir_ / (id + ".snap")); }
  // The page files in the store, by name, with their sizes.
  std::map<std::string, int64_t> Pages() const {
    std::map<std::string, int64_t> pages;
    if (!fs::exists(dir_)) return pages;
    for (const auto& entry : fs::recursive_directory_iterator(dir_)) {
      if (entry.path().extension() == ".page") {
        pages[entry.path().filename().string()] = int64_t(entry.file_size());
      }
    }
    return pages;
  }
  // A store that cuts pages of 16 tokens (the smallest page) out of the tiny models.
  std::unique_ptr<SessionStore> MakePagedStore(PersistMode persist = PersistMode::kEachTurn) {
    return MakeStore(persist, int64_t{1} << 30, absl::InfiniteDuration(), absl::Seconds(2),
                     /*page_target_bytes=*/1);
  }

  fs::path dir_;
  ManualClock clock_;
  std::shared_ptr<const ServedModel> taylor_ = test_util::TinyServedModel("taylor");
  std::shared_ptr<const ServedModel> softmax_ = test_util::TinyServedModel("softmax");
  std::unique_ptr<ModelCatalogue> catalogue_;
  std::map<std::string, TenantLimits, std::less<>> tenant_limits_;  // for MakeStore
};

TEST_F(DurableSessionStoreTest, ForkCopiesTheSessionAndLeavesTheOriginalAlone) {
  auto store = MakeStore();
  auto s = store->Create(kDefaultTenant, taylor_, absl::ZeroDuration()).value();
  Turn(*store, s->id(), 9, 70);
  auto fork = store->Fork(kDefaultTenant, s->id(), absl::ZeroDuration());
  ASSERT_TRUE(fork.ok()) << fork.status();
  EXPECT_NE((*fork)->id(), s->id());
  EXPECT_EQ(store->Get(kDefaultTenant, (*fork)->id())->position, 10);
  EXPECT_EQ(store->Get(kDefaultTenant, s->id())->position, 10);
  EXPECT_EQ(store->charged_bytes(), 2 * taylor_->model->StateBytes(0));
  // The fork's bytes are the original's, apart from nothing: same state, same pending.
  EXPECT_EQ(*store->Export(kDefaultTenant, (*fork)->id()).value(), *store->Export(kDefaultTenant, s->id()).value());
  // Busy sessions cannot be forked or exported.
  auto lease = store->BeginTurn(kDefaultTenant, s->id()).value();
  EXPECT_EQ(store->Fork(kDefaultTenant, s->id(), absl::ZeroDuration()).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store->Export(kDefaultTenant, s->id()).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(DurableSessionStoreTest, AFailedImportChargesAndCreatesNothing) {
  auto store = MakeStore();
  auto s = store->Create(kDefaultTenant, softmax_, absl::ZeroDuration()).value();
  Turn(*store, s->id(), 5, 70);
  const std::string good = *store->Export(kDefaultTenant, s->id()).value();
  const int64_t charged = store->charged_bytes();
  for (size_t cut : {size_t(0), size_t(50), good.size() / 2, good.size() - 1}) {
    auto bad = store->Import(kDefaultTenant, std::make_shared<const std::string>(good.substr(0, cut)), absl::ZeroDuration());
    EXPECT_FALSE(bad.ok()) << cut;
    EXPECT_EQ(store->size(), 1);
    EXPECT_EQ(store->charged_bytes(), charged);
  }
  auto ok = store->Import(kDefaultTenant, std::make_shared<const std::string>(good), absl::Minutes(3));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(store->Get(kDefaultTenant, (*ok)->id())->position, 6);
  EXPECT_EQ(store->Get(kDefaultTenant, (*ok)->id())->ttl, absl::Minutes(3));
}

TEST_F(DurableSessionStoreTest, EachTurnPersistenceSavesBeforeTheClientHearsOfIt) {
  auto store = MakeStore(PersistMode::kEachTurn);
  auto s = store->Create(kDefaultTenant, taylor_, absl::ZeroDuration()).value();
  auto lease = store->BeginTurn(kDefaultTenant, s->id()).value();
  Advance(lease, 4, 71);
  absl::Notification told;
  bool stored_when_told = false, busy_when_told = true;
  store->FinishTurn(std::move(lease), [&](absl::Status) {
    stored_when_told = Stored(s->id());
    busy_when_told = store->Get(kDefaultTenant, s->id())->busy;
    told.Notify();
  });
  ASSERT_TRUE(told.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_TRUE(stored_when_told);
  EXPECT_FALSE(busy_when_told);
  // A new process on the same directory finds the session at its position.
  auto restarted = MakeStore();
  EXPECT_EQ(restarted->Get(kDefaultTenant, s->id())->position, 5);
}

TEST_F(DurableSessionStoreTest, MemoryPressureSpillsTheLeastRecentlyUsedAndLoadsItBack) {
  const int64_t one = taylor_->model->StateBytes(0);
  auto store = MakeStore(PersistMode::kNone, 2 * one);
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    auto s = store->Create(kDefaultTenant, taylor_, absl::ZeroDuration());
    ASSERT_TRUE(s.ok()) << s.status();
    Turn(*store, (*s)->id(), i + 1, 80 + i);
    ids.push_back((*s)->id());
    clock_.Advance(absl::Seconds(1));
  }
  EXPECT_EQ(store->size(), 2);
  EXPECT_EQ(store->charged_bytes(), 2 * one);
  EXPECT_TRUE(Stored(ids[0]) && Stored(ids[1]) && Stored(ids[2]));
  for (int i = 0; i < 5; ++i) {  // each comes back with its position and pending token
    auto lease = store->BeginTurn(kDefaultTenant, ids[i]);
    ASSERT_TRUE(lease.ok()) << lease.status();
    EXPECT_EQ((*lease)->position(), i + 2);
    EXPECT_EQ((*lease)->pending_token(), 80 + i);
    EXPECT_EQ((*lease)->state().position(), i + 1);
    clock_.Advance(absl::Seconds(1));
  }
  EXPECT_LE(store->charged_bytes(), 2 * one);
}

TEST_F(DurableSessionStoreTest, IdleSessionsSpillAfterTheirTime) {
  auto store = MakeStore(PersistMode::kNone, int64_t{1} << 30, absl::Minutes(1));
  auto s = store->Create(kDefaultTenant, softmax_, absl::ZeroDuration()).value();
  Turn(*store, s->id(), 30, 70);
  clock_.Advance(absl::Seconds(59));
  EXPECT_EQ(store->SpillIdle(), 0);
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(store->SpillIdle(), 1);
  EXPECT_EQ(store->size(), 0);
  EXPECT_EQ(store->charged_bytes(), 0);
  EXPECT_TRUE(store->ListAll().empty());
  auto info = store->Get(kDefaultTenant, s->id());  // loaded on demand
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->position, 31);
  EXPECT_EQ(store->charged_bytes(), softmax_->model->StateBytes(30));
}

TEST_F(DurableSessionStoreTest, DrainSavesEverySessionAndRefusesNewWork) {
  std::vector<std::string> ids;
  {
    auto store = MakeStore();
    for (int i = 0; i < 4; ++i) {
      auto s = store->Create(kDefaultTenant, i % 2 ? softmax_ : taylor_, absl::ZeroDuration()).value();
      Turn(*store, s->id(), 3 + i, 90);
      ids.push_back(s->id());
    }
    store->StopAccepting();
    EXPECT_EQ(store->Create(kDefaultTenant, taylor_, absl::ZeroDuration()).status().code(),
              absl::StatusCode::kUnavailable);
    EXPECT_EQ(store->BeginTurn(kDefaultTenant, ids[0]).status().code(), absl::StatusCode::kUnavailable);
    auto saved = store->SaveAll(absl::Seconds(5));
    ASSERT_TRUE(saved.ok()) << saved.status();
    EXPECT_EQ(*saved, 4);
  }
  auto next = MakeStore();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(next->Get(kDefaultTenant, ids[i])->position, 3 + i + 1);
}

TEST_F(DurableSessionStoreTest, ExpiryLeavesMemoryAndCloseRemovesTheStoredCopy) {
  auto store = MakeStore();
  auto a = store->Create(kDefaultTenant, taylor_, absl::Minutes(1)).value();
  auto b = store->Create(kDefaultTenant, taylor_, absl::Minutes(10)).value();
  ASSERT_TRUE(Stored(a->id()) && Stored(b->id()));  // written at creation
  clock_.Advance(absl::Minutes(1));
  EXPECT_EQ(store->ExpireIdle(), 1);
  EXPECT_EQ(store->size(), 1);
  // The stored copy expires by its own TTL (from its last write, never later than the
  // session's last use), so another server still using it would not lose it.
  ManualClock later(absl::Now() + absl::Minutes(2));
  auto stored = store::OpenSnapshotStore("dir:" + dir_.string(), &later);
  EXPECT_EQ((*stored)->Get(a->id()).status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(store->Close(kDefaultTenant, b->id()).ok());
  EXPECT_FALSE(Stored(b->id()));
  EXPECT_EQ(store->Close(kDefaultTenant, b->id()).code(), absl::StatusCode::kNotFound);
}

TEST_F(DurableSessionStoreTest, TheOwnerSurvivesTheStoreAndOtherTenantsCannotLoadOrClose) {
  std::string id;
  {
    auto first = MakeStore();
    auto s = first->Create("alice", taylor_, absl::ZeroDuration()).value();
    Turn(*first, s->id(), 5, 71, "alice");
    id = s->id();
    ASSERT_TRUE(first->SaveAll(absl::Seconds(5)).ok());
  }
  auto replica = MakeStore();  // another server sharing the store: loads on demand
  std::string want(replica->Get("bob", "ffffffffffffffffffffffffffffffff").status().message());
  want.replace(want.find("ffffffffffffffffffffffffffffffff"), 32, id);
  for (const absl::Status& s :
       {replica->Get("bob", id).status(), replica->BeginTurn("bob", id).status(),
        replica->Export("bob", id).status(),
        replica->Fork("bob", id, absl::ZeroDuration()).status(), replica->Close("bob", id)}) {
    EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
    EXPECT_EQ(s.message(), want);
  }
  EXPECT_EQ(replica->size(), 0);  // bob loaded nothing into memory
  EXPECT_TRUE(Stored(id));        // and deleted nothing
  auto info = replica->Get("alice", id);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->owner, "alice");
  EXPECT_EQ(info->position, 6);
  ASSERT_TRUE(replica->Close("alice", id).ok());
  EXPECT_FALSE(Stored(id));
}

TEST_F(DurableSessionStoreTest, AVersion1StoredSnapshotBelongsToTheDefaultTenant) {
  std::string id;
  {
    auto store = MakeStore();
    id = store->Create(kDefaultTenant, taylor_, absl::ZeroDuration()).value()->id();
  }
  // Rewrite the stored file as a version 1 snapshot (what servers before owners wrote).
  auto raw = store::OpenSnapshotStore("dir:" + dir_.string()).value();
  std::string bytes = raw->Get(id).value();
  auto header = [&](size_t at) {
    uint32_t v;
    std::memcpy(&v, bytes.data() + at, 4);
    return v;
  };
  const uint32_t header_bytes = header(12), owner_bytes = header(92);
  ASSERT_EQ(header(8), snapshot::kSnapshotVersion);  // float32 rows: also a version 1 body
  bytes.erase(header_bytes - owner_bytes, owner_bytes);
  const uint32_t one = 1, zero = 0, new_header = header_bytes - owner_bytes;
  const uint64_t total = bytes.size();
  std::memcpy(bytes.data() + 8, &one, 4);
  std::memcpy(bytes.data() + 12, &new_header, 4);
  std::memcpy(bytes.data() + 16, &total, 8);
  std::memcpy(bytes.data() + 92, &zero, 4);
  const uint32_t crc = Crc32c(0, bytes.data(), bytes.size() - 4);
  std::memcpy(bytes.data() + bytes.size() - 4, &crc, 4);
  ASSERT_TRUE(raw->Put(id, bytes, absl::Minutes(10)).ok());
  auto store = MakeStore();
  EXPECT_EQ(store->Get("alice", id).status().code(), absl::StatusCode::kNotFound);
  auto info = store->Get(kDefaultTenant, id);  // the default tenant
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->owner, kDefaultTenant);
}

// A session saved after each turn is stored as a stub naming its KV pages: a save writes
// only the pages completed since the last one (never the whole state again), a second
// server joins the pages back into exactly the state the first one had, and a page that
// is gone makes the session absent, never corrupt.
TEST_F(DurableSessionStoreTest, SessionsAreStoredByPagesAndASaveWritesOnlyWhatIsNew) {
  std::string id;
  std::shared_ptr<const std::string> exported;
  {
    auto store = MakePagedStore();
    id = store->Create(kDefaultTenant, softmax_, absl::ZeroDuration()).value()->id();
    Turn(*store, id, 40, 7);  // 40 tokens: 2 full pages of 16
    const auto first = Pages();
    ASSERT_EQ(first.size(), 2u);
    const int64_t record_then = int64_t(fs::file_size(dir_ / (id + ".snap")));
    Turn(*store, id, 40, 8);  // 80 tokens: 5 full pages, 3 of them new
    const auto second = Pages();
    ASSERT_EQ(second.size(), 5u);
    for (const auto& [name, bytes] : first) EXPECT_EQ(second.count(name), 1u) << name;
    // The record holds the fixed parts and the partial page only: it did not grow with
    // the 40 tokens now in pages, and it is far smaller than the state.
    exported = store->Export(kDefaultTenant, id).value();
    const int64_t record_now = int64_t(fs::file_size(dir_ / (id + ".snap")));
    EXPECT_LT(record_now, record_then + 256);
    int64_t paged = 0;
    for (const auto& [name, bytes] : second) paged += bytes;
    EXPECT_GT(paged, int64_t(exported->size()) / 2);
    EXPECT_LT(record_now + paged, int64_t(exported->size()) + 1024);
  }
  {
    // Another server reads it back exactly, and only its owner does.
    auto replica = MakePagedStore();
    EXPECT_EQ(replica->Get("alice", id).status().code(), absl::StatusCode::kNotFound);
    auto again = replica->Export(kDefaultTenant, id);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_TRUE(**again == *exported);
  }
  // A page gone: the session reads as absent.
  const auto pages = Pages();
  for (const auto& entry : fs::recursive_directory_iterator(dir_)) {
    if (entry.path().filename().string() == pages.begin()->first) {
      fs::remove(entry.path());
      break;
    }
  }
  auto replica = MakePagedStore();
  EXPECT_EQ(replica->Get(kDefaultTenant, id).status().code(), absl::StatusCode::kNotFound);
}

// A request's own session (the HTTP fronts' Responses turn or chat) is local: never
// written, not after its turns, not at the drain, and never spilled to make room; it is
// in memory until closed, and no other server can find it.
TEST_F(DurableSessionStoreTest, LocalSessionsAreNeverWrittenNorSpilled) {
  auto store = MakeStore(PersistMode::kEachTurn);
  auto local = store->Create(kDefaultTenant, softmax_, absl::ZeroDuration(),
                             SessionStore::Durability::kLocal);
  ASSERT_TRUE(local.ok()) << local.status();
  const std::string id = (*local)->id();
  EXPECT_FALSE(Stored(id));
  Turn(*store, id, 40, 7);
  EXPECT_FALSE(Stored(id));
  auto imported = store->Import(kDefaultTenant, store->Export(kDefaultTenant, id).value(),
                                absl::ZeroDuration(), SessionStore::Durability::kLocal);
  ASSERT_TRUE(imported.ok()) << imported.status();
  EXPECT_FALSE(Stored((*imported)->id()));
  auto shared = store->Create(kDefaultTenant, softmax_, absl::ZeroDuration());
  ASSERT_TRUE(Stored((*shared)->id()));
  EXPECT_EQ(store->SaveAll(absl::Seconds(5)).value(), 1);  // the shared one only
  EXPECT_FALSE(Stored(id));
  EXPECT_EQ(MakeStore()->Get(kDefaultTenant, id).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store->Get(kDefaultTenant, id)->position, 41);  // with the pending token
  EXPECT_TRUE(store->Close(kDefaultTenant, id).ok());
  EXPECT_EQ(store->Get(kDefaultTenant, id).status().code(), absl::StatusCode::kNotFound);
}

// A page's key is derived from its tenant: two tenants' sessions with the same tokens share
// no page, and neither can read the other's.
TEST_F(DurableSessionStoreTest, TenantsShareNoPages) {
  auto store = MakePagedStore();
  const std::string a = store->Create("alice", softmax_, absl::ZeroDuration()).value()->id();
  const std::string b = store->Create("bob", softmax_, absl::ZeroDuration()).value()->id();
  Turn(*store, a, 32, 7, "alice");
  EXPECT_EQ(Pages().size(), 2u);
  Turn(*store, b, 32, 7, "bob");  // the same rows, another tenant
  EXPECT_EQ(Pages().size(), 4u);
  auto replica = MakePagedStore();
  EXPECT_EQ(replica->Get("bob", a).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(replica->Get("alice", a).ok());
  EXPECT_TRUE(replica->Get("bob", b).ok());
}

TEST_F(DurableSessionStoreTest, ATenantAtItsLimitSpillsItsOwnIdleSessionsNotOthers) {
  tenant_limits_["alice"] = TenantLimits{2, 0};
  auto store = MakeStore();
  auto other = store->Create("bob", taylor_, absl::ZeroDuration()).value();
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(absl::Seconds(1));
    auto s = store->Create("alice", taylor_, absl::ZeroDuration());
    ASSERT_TRUE(s.ok()) << s.status();
    ids.push_back((*s)->id());
  }
  EXPECT_EQ(store->List("alice").size(), 2u);  // the oldest went to the store
  EXPECT_EQ(store->List("bob").size(), 1u);    // bob's older session stayed
  EXPECT_TRUE(store->Get("alice", ids[0]).ok());  // loaded back, spilling another
  EXPECT_EQ(store->List("alice").size(), 2u);
  // Busy sessions cannot be spilled: then the limit answers.
  auto l1 = store->BeginTurn("alice", store->List("alice")[0].id);
  auto l2 = store->BeginTurn("alice", store->List("alice")[1].id);
  ASSERT_TRUE(l1.ok() && l2.ok());
  auto over = store->Create("alice", taylor_, absl::ZeroDuration());
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(over.status().message().find("max_sessions: tenant 'alice'"), std::string::npos)
      << over.status();
  EXPECT_FALSE(other->closed());
}

TEST_F(DurableSessionStoreTest, AFailingStoreIsUnavailableAndSessionsInMemoryKeepWorking) {
  const int64_t one = taylor_->model->StateBytes(0);
  auto store = MakeStore(PersistMode::kNone, 2 * one);
  auto spilled = store->Create(kDefaultTenant, taylor_, absl::ZeroDuration()).value();
  clock_.Advance(absl::Seconds(1));
  auto kept = store->Create(kDefaultTenant, taylor_, absl::ZeroDuration()).value();
  clock_.Advance(absl::Seconds(1));
  auto third = store->Create(kDefaultTenant, taylor_, absl::ZeroDuration()).value();  // spills `spilled`
  ASSERT_TRUE(Stored(spilled->id()));
  // The directory disappears: a regular file takes its place.
  const fs::path moved = dir_.string() + ".away";
  fs::rename(dir_, moved);
  std::ofstream(dir_.string()) << "not a directory";
  auto load = store->BeginTurn(kDefaultTenant, spilled->id());
  EXPECT_EQ(load.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(load.status().message().find("dir:"), std::string::npos) << load.status();
  EXPECT_TRUE(store->BeginTurn(kDefaultTenant, kept->id()).ok());
  // The store comes back: so does the session, without a new SessionStore.
  fs::remove(dir_);
  fs::rename(moved, dir_);
  auto back = store->BeginTurn(kDefaultTenant, spilled->id());
  EXPECT_TRUE(back.ok()) << back.status();
}

// Two SessionStores on one directory stand for two servers sharing a store.
TEST_F(DurableSessionStoreTest, TurnsAlternateBetweenServersAndNeverRunFromAStaleCopy) {
  auto a = MakeStore(PersistMode::kEachTurn);
  auto b = MakeStore(PersistMode::kEachTurn);
  auto s = a->Create(kDefaultTenant, taylor_, absl::ZeroDuration()).value();
  auto turn = [&](SessionStore& store, int n, int32_t pending) {
    auto lease = store.BeginTurn(kDefaultTenant, s->id());
    ASSERT_TRUE(lease.ok()) << lease.status();
    Advance(*lease, n, pending);
    absl::Notification done;
    store.FinishTurn(std::move(*lease), [&](absl::Status) { done.Notify(); });
    ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  };
  // (The hand-run turns below append tokens and replace the pending token.)
  turn(*a, 3, 70);  // state 3 on a
  turn(*b, 2, 71);  // b loads a's write (state 3) and appends 2: state 5
  EXPECT_EQ(b->Get(kDefaultTenant, s->id())->position, 6);
  turn(*a, 1, 72);  // a's copy (state 3) is stale: it reloads b's (5) and appends 1
  EXPECT_EQ(a->Get(kDefaultTenant, s->id())->position, 7);
  {
    auto lease = a->BeginTurn(kDefaultTenant, s->id());
    ASSERT_TRUE(lease.ok());
    EXPECT_EQ((*lease)->state().position(), 6);
    EXPECT_EQ((*lease)->pending_token(), 72);
  }
  turn(*b, 1, 73);  // and b catches up with a's the same way
  EXPECT_EQ(b->Get(kDefaultTenant, s->id())->position, 8);
}

TEST_F(DurableSessionStoreTest, ASecondServerWaitsForTheTurnThenAnswersUnavailable) {
  auto a = MakeStore(PersistMode::kEachTurn);
  auto b = MakeStore(PersistMode::kEachTurn, int64_t{1} << 30, absl::InfiniteDuration(),
                     absl::Milliseconds(50));
  auto s = a->Create(kDefaultTenant, taylor_, absl::ZeroDuration()).value();
  auto held = a->BeginTurn(kDefaultTenant, s->id());
  ASSERT_TRUE(held.ok());
  const absl::Time start = absl::Now();
  auto refused = b->BeginTurn(kDefaultTenant, s->id());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable) << refused.status();
  EXPECT_NE(refused.status().message().find("another server"), std::string::npos);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(50));
  held->Release();
  EXPECT_TRUE(b->BeginTurn(kDefaultTenant, s->id()).ok());
}

TEST_F(DurableSessionStoreTest, UnsavedTurnsKeepTheLeaseUntilTheSessionIsWritten) {
  auto a = MakeStore(PersistMode::kNone);
  auto b = MakeStore(PersistMode::kNone, int64_t{1} << 30, absl::InfiniteDuration(),
                     absl::Milliseconds(20));
  auto s = a->Create(kDefaultTenant, taylor_, absl::ZeroDuration()).value();
  {
    auto lease = a->BeginTurn(kDefaultTenant, s->id());
    ASSERT_TRUE(lease.ok());
    Advance(*lease, 5, 70);
    a->FinishTurn(std::move(*lease), [](absl::Status) {});
  }
  // a's copy is newer than the store's: b must not run from the store's.
  EXPECT_EQ(b->BeginTurn(kDefaultTenant, s->id()).status().code(), absl::StatusCode::kUnavailable);
  ASSERT_TRUE(a->SaveAll(absl::Seconds(5)).ok());  // drain writes it and lets go
  auto lease = b->BeginTurn(kDefaultTenant, s->id());
  ASSERT_TRUE(lease.ok()) << lease.status();
  EXPECT_EQ((*lease)->position(), 6);
}

}  // namespace
}  // namespace attnserve::session
