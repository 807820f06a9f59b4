// ConversationStore on a MemorySnapshotStore seen through a counting wrapper: which keys
// another tenant's requests touch, and what each turn and each creation writes.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/http/conversation_store.h"
#include "server/common/clock.h"
#include "server/store/memory_store.h"

namespace attnserve::http {
namespace {

using nlohmann::json;

// Forwards to a MemorySnapshotStore, recording every key each call names and the bytes
// each write carries; `hook` (if set) runs after each such call, on the caller's thread.
class CountingStore : public store::SnapshotStore {
 public:
  struct Log {
    absl::Mutex mu;
    std::vector<std::string> keys;     // every call's key, in order
    std::map<std::string, int64_t> written;  // bytes written per key
    int64_t bytes = 0;                 // bytes written in all
    std::function<void(const std::string& key)> hook;
  };
  explicit CountingStore(std::shared_ptr<Log> log) : log_(std::move(log)) {}

  absl::Status Put(const std::string& id, std::string_view bytes, absl::Duration ttl) override {
    auto result = inner_.Put(id, bytes, ttl);
    Note(id, bytes.size());
    return result;
  }
  absl::StatusOr<std::string> Get(const std::string& id) override {
    auto result = inner_.Get(id);
    Note(id, 0);
    return result;
  }
  absl::Status Delete(const std::string& id) override {
    auto result = inner_.Delete(id);
    Note(id, 0);
    return result;
  }
  absl::StatusOr<int> RemoveExpired() override { return inner_.RemoveExpired(); }
  absl::StatusOr<store::LeaseGrant> AcquireLease(const std::string& id,
                                                 absl::Duration ttl) override {
    auto result = inner_.AcquireLease(id, ttl);
    Note(id, 0);
    return result;
  }
  absl::Status RenewLease(const std::string& id, const std::string& token,
                          absl::Duration ttl) override {
    return inner_.RenewLease(id, token, ttl);
  }
  absl::Status ReleaseLease(const std::string& id, const std::string& token) override {
    return inner_.ReleaseLease(id, token);
  }
  absl::StatusOr<int64_t> PutFenced(const std::string& id, std::string_view bytes,
                                    absl::Duration ttl, const std::string& token,
                                    int64_t generation) override {
    auto result = inner_.PutFenced(id, bytes, ttl, token, generation);
    Note(id, bytes.size());
    return result;
  }
  absl::StatusOr<std::pair<std::string, int64_t>> GetWithGeneration(
      const std::string& id) override {
    auto result = inner_.GetWithGeneration(id);
    Note(id, 0);
    return result;
  }
  absl::StatusOr<int64_t> GetGeneration(const std::string& id) override {
    auto result = inner_.GetGeneration(id);
    Note(id, 0);
    return result;
  }
  const std::string& name() const override { return inner_.name(); }

 private:
  void Note(const std::string& id, size_t bytes) {
    std::function<void(const std::string&)> hook;
    {
      absl::MutexLock lock(&log_->mu);
      log_->keys.push_back(id);
      log_->written[id] += int64_t(bytes);
      log_->bytes += int64_t(bytes);
      hook = log_->hook;
    }
    if (hook) hook(id);
  }

  std::shared_ptr<Log> log_;
  store::MemorySnapshotStore inner_;
};

// The id of the `n`th conversation a test creates.
std::string IdOf(uint64_t n) {
  return absl::StrCat("conv_", std::string(16, '0'), absl::Hex(n, absl::kZeroPad16));
}

class ConversationStoreTest : public testing::Test {
 protected:
  ConversationStoreTest()
      : log_(std::make_shared<CountingStore::Log>()),
        store_(std::make_unique<CountingStore>(log_), Options()) {}

  static ConversationStore::Options Options() {
    ConversationStore::Options o;
    o.ttl = absl::Hours(24);
    return o;
  }

  // A new conversation of `tenant` with one user item.
  std::string Create(const std::string& tenant) {
    ConversationRecord r;
    r.id = IdOf(++next_id_);
    r.tenant = tenant;
    r.items.push_back(MessageItem("msg_first", {"user", "Hello there"}, "completed"));
    EXPECT_TRUE(store_.Create(r).ok());
    return r.id;
  }
  // One turn of `tenant`'s conversation `id`: a user item and an answer, as a response
  // in it adds them.
  absl::Status Turn(const std::string& tenant, const std::string& id, int n) {
    auto change = store_.Begin(tenant, id);
    if (!change.ok()) return change.status();
    ConversationRecord next = (*change)->record();
    json added = json::array();
    added.push_back(MessageItem(absl::StrCat("msg_u", n), {"user", "And then?"}, "completed"));
    added.push_back(MessageItem(absl::StrCat("msg_a", n), {"assistant", "Then it went on."},
                                "completed", absl::StrCat("resp_", n)));
    next.head = absl::StrCat("resp_", n);
    next.in_state = next.item_count + added.size();
    return (*change)->Commit(next, added);
  }
  std::set<std::string> KeysSoFar() {
    absl::MutexLock lock(&log_->mu);
    return {log_->keys.begin(), log_->keys.end()};
  }
  size_t CallsSoFar() {
    absl::MutexLock lock(&log_->mu);
    return log_->keys.size();
  }
  int64_t BytesSoFar() {
    absl::MutexLock lock(&log_->mu);
    return log_->bytes;
  }

  std::shared_ptr<CountingStore::Log> log_;
  ConversationStore store_;
  uint64_t next_id_ = 0;
};

TEST_F(ConversationStoreTest, AnotherTenantsIdIsAbsentAndTouchesNothingOfTheOwners) {
  const std::string id = Create("acme");
  ASSERT_TRUE(Turn("acme", id, 1).ok());
  const std::set<std::string> owners = KeysSoFar();
  const size_t before = CallsSoFar();
  EXPECT_TRUE(absl::IsNotFound(store_.Get("mallory", id).status()));
  EXPECT_TRUE(absl::IsNotFound(store_.Begin("mallory", id).status()));
  EXPECT_TRUE(absl::IsNotFound(store_.Delete("mallory", id)));
  {
    absl::MutexLock lock(&log_->mu);
    for (size_t i = before; i < log_->keys.size(); ++i) {
      EXPECT_EQ(owners.count(log_->keys[i]), 0u) << "another tenant touched " << log_->keys[i];
    }
  }

  // While the owner's response runs, another tenant is told the id does not exist.
  {
    auto held = store_.Begin("acme", id);
    ASSERT_TRUE(held.ok()) << held.status();
    const absl::Status foreign = store_.Begin("mallory", id).status();
    EXPECT_TRUE(absl::IsNotFound(foreign)) << foreign;
  }
  // Another tenant's request in flight never makes the owner's own response wait.
  absl::Status owner_meanwhile = absl::UnknownError("not run");
  bool ran = false;  // the hook runs on a copy of itself: the flag lives here
  log_->hook = [&](const std::string&) {
    if (ran) return;
    ran = true;
    auto change = store_.Begin("acme", id);
    owner_meanwhile = change.status();
  };
  EXPECT_TRUE(absl::IsNotFound(store_.Begin("mallory", id).status()));
  log_->hook = nullptr;
  EXPECT_TRUE(owner_meanwhile.ok()) << owner_meanwhile;
  EXPECT_TRUE(store_.Get("acme", id).ok());
}

TEST_F(ConversationStoreTest, ATurnWritesAsMuchAtTurn100AsAtTurn1) {
  const std::string id = Create("acme");
  std::vector<int64_t> per_turn;
  for (int n = 1; n <= 100; ++n) {
    const int64_t before = BytesSoFar();
    ASSERT_TRUE(Turn("acme", id, n).ok()) << n;
    per_turn.push_back(BytesSoFar() - before);
  }
  std::printf("bytes written by turn 1: %lld, turn 10: %lld, turn 100: %lld\n",
              (long long)per_turn[0], (long long)per_turn[9], (long long)per_turn[99]);
  // A few more digits in counters and ids, nothing of the earlier turns.
  EXPECT_LE(per_turn[99], per_turn[0] + 16);
  auto record = store_.Get("acme", id);
  ASSERT_TRUE(record.ok()) << record.status();
  ASSERT_TRUE(store_.ReadItems(&*record).ok());
  ASSERT_EQ(record->items.size(), 201u);
  EXPECT_EQ(record->items[200]["id"], "msg_a100");
  EXPECT_EQ(record->in_state, 201u);
}

TEST_F(ConversationStoreTest, CreatingWritesAsMuchForTheTenants300thAsForItsFirst) {
  std::vector<int64_t> per_create;
  for (int n = 1; n <= 300; ++n) {
    const int64_t before = BytesSoFar();
    Create("acme");
    per_create.push_back(BytesSoFar() - before);
  }
  std::printf("bytes written by create 1: %lld, 100: %lld, 300: %lld\n",
              (long long)per_create[0], (long long)per_create[99], (long long)per_create[299]);
  // The tenant's list is kept in pages: a creation rewrites one page at most.
  EXPECT_LE(per_create[299], per_create[0] + 4096);
  auto listed = store_.List("acme", 100);
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 100u);
  EXPECT_EQ((*listed)[0].id, IdOf(300));
}

// Memory mode (no --session_store): a tenant's quota and the byte budget refuse new
// conversations (RESOURCE_EXHAUSTED, HTTP 429) without evicting anyone's, and expired
// records are swept, so what they held is free again.
class ConversationStoreInMemoryTest : public testing::Test {
 protected:
  std::unique_ptr<ConversationStore> Store(int max_per_tenant, int64_t memory_bytes) {
    ConversationStore::Options o;
    o.ttl = absl::Hours(1);
    o.max_per_tenant = max_per_tenant;
    o.memory_bytes = memory_bytes;
    o.clock = &clock_;
    return ConversationStore::InMemory(std::move(o));
  }
  absl::Status Create(ConversationStore& store, const std::string& tenant, size_t text_bytes) {
    ConversationRecord r;
    r.id = IdOf(++next_id_);
    r.tenant = tenant;
    r.items.push_back(MessageItem("msg_first", {"user", std::string(text_bytes, 'x')}, "completed"));
    return store.Create(r);
  }

  ManualClock clock_;
  uint64_t next_id_ = 0;
};

TEST_F(ConversationStoreInMemoryTest, ATenantPastItsQuotaIsRefusedAndNoOneElseLosesAny) {
  auto store = Store(/*max_per_tenant=*/3, /*memory_bytes=*/int64_t{1} << 30);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Create(*store, "acme", 10).ok()) << i;
  const absl::Status refused = Create(*store, "acme", 10);
  EXPECT_TRUE(absl::IsResourceExhausted(refused)) << refused;
  EXPECT_NE(refused.message().find("max_conversations_per_tenant"), std::string::npos) << refused;
  EXPECT_TRUE(Create(*store, "bob", 10).ok());
  auto acme = store->List("acme", 100);
  ASSERT_TRUE(acme.ok()) << acme.status();
  EXPECT_EQ(acme->size(), 3u);
  // A deleted one makes room; so does an expired one.
  ASSERT_TRUE(store->Delete("acme", (*acme)[0].id).ok());
  EXPECT_TRUE(Create(*store, "acme", 10).ok());
  clock_.Advance(absl::Hours(1) + absl::Seconds(1));
  EXPECT_TRUE(Create(*store, "acme", 10).ok());
}

TEST_F(ConversationStoreInMemoryTest, TheBudgetRefusesNewOnesAndFreesWhatExpired) {
  auto store = Store(/*max_per_tenant=*/1000, /*memory_bytes=*/64 << 10);
  int created = 0;
  absl::Status last;
  while ((last = Create(*store, "acme", 4096)).ok() && created < 100) ++created;
  EXPECT_TRUE(absl::IsResourceExhausted(last)) << last;
  EXPECT_NE(last.message().find("conversation_memory_bytes"), std::string::npos) << last;
  EXPECT_GE(created, 5);
  EXPECT_LT(created, 100);
  // Nobody's conversation was evicted for the refused one.
  auto listed = store->List("acme", 100);
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(int(listed->size()), created);
  EXPECT_TRUE(absl::IsResourceExhausted(Create(*store, "bob", 4096)));
  // Past their lifetime (and their pages' and list's), what they held is swept.
  clock_.Advance(absl::Hours(2) + absl::Seconds(1));
  EXPECT_TRUE(Create(*store, "bob", 4096).ok());
}

}  // namespace
}  // namespace attnserve::http
