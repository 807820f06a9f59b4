// The Redis backend against a real redis-server this test starts, stops, restarts and
// pauses.
#include "server/store/redis_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "tests/store/store_testing.h"

namespace attnserve::store {
namespace {

using ::attnserve::store::testing::ConnectRaw;
using ::attnserve::store::testing::RawCommand;
using ::attnserve::store::testing::RedisContextPtr;
using ::attnserve::store::testing::RedisReplyPtr;
using ::attnserve::store::testing::RedisServer;
using ::testing::HasSubstr;
using ::testing::Pair;

constexpr char kId[] = "0123456789abcdef0123456789abcdef";
constexpr absl::Duration kTtl = absl::Hours(1);

class RedisSnapshotStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto redis = RedisServer::Start();
    ASSERT_TRUE(redis.ok()) << redis.status();
    redis_ = *std::move(redis);
    store_ = Open(redis_->spec());
    ASSERT_NE(store_, nullptr);
    raw_ = ConnectRaw(redis_->port());
    ASSERT_NE(raw_, nullptr);
  }

  static std::unique_ptr<SnapshotStore> Open(const std::string& spec) {
    auto store = OpenSnapshotStore(spec);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }

  // Expects `status` to be UNAVAILABLE naming this store.
  void ExpectUnavailable(const absl::Status& status) {
    EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
    EXPECT_THAT(std::string(status.message()),
                HasSubstr("session store redis://127.0.0.1:" +
                          std::to_string(redis_->port()) + ": "));
  }

  // A command's reply as a string (bulk, status or error) or integer, "nil" for nil.
  std::string RawValue(const char* format, const std::string& key) {
    RedisReplyPtr reply = RawCommand(raw_.get(), format, key.c_str());
    if (reply == nullptr) return "no reply";
    if (reply->type == REDIS_REPLY_INTEGER) return std::to_string(reply->integer);
    if (reply->type == REDIS_REPLY_NIL) return "nil";
    return std::string(reply->str, reply->len);
  }
  int64_t RawInteger(const char* format, const std::string& key) {
    RedisReplyPtr reply = RawCommand(raw_.get(), format, key.c_str());
    EXPECT_TRUE(reply != nullptr && reply->type == REDIS_REPLY_INTEGER);
    return reply != nullptr && reply->type == REDIS_REPLY_INTEGER ? reply->integer : -999;
  }

  // How many staging keys ("attnserve:staging:*") Redis holds.
  int64_t StagingKeys() {
    RedisReplyPtr reply = RawCommand(raw_.get(), "KEYS attnserve:staging:*");
    EXPECT_TRUE(reply != nullptr && reply->type == REDIS_REPLY_ARRAY);
    return reply != nullptr && reply->type == REDIS_REPLY_ARRAY ? int64_t(reply->elements) : -1;
  }

  std::unique_ptr<RedisServer> redis_;
  std::unique_ptr<SnapshotStore> store_;
  RedisContextPtr raw_{nullptr, redisFree};  // looks behind the store's back
};

TEST_F(RedisSnapshotStoreTest, StoresBytesUnderNamespacedKey) {
  const std::string bytes("a\0b\r\n$3\r\n", 9);
  ASSERT_TRUE(store_->Put(kId, bytes, absl::Hours(1)).ok());
  EXPECT_EQ(RedisSnapshotStore::Key(kId), std::string("attnserve:session:") + kId);
  RedisReplyPtr reply = RawCommand(raw_.get(), "GET attnserve:session:%s", kId);
  ASSERT_NE(reply, nullptr);
  ASSERT_EQ(reply->type, REDIS_REPLY_STRING);
  EXPECT_EQ(std::string(reply->str, reply->len), bytes);
}

TEST_F(RedisSnapshotStoreTest, PutSetsTheTtlAsAMillisecondExpiry) {
  ASSERT_TRUE(store_->Put(kId, "x", absl::Milliseconds(200)).ok());
  RedisReplyPtr pttl = RawCommand(raw_.get(), "PTTL attnserve:session:%s", kId);
  ASSERT_NE(pttl, nullptr);
  ASSERT_EQ(pttl->type, REDIS_REPLY_INTEGER);
  EXPECT_GT(pttl->integer, 0);
  EXPECT_LE(pttl->integer, 200);
  EXPECT_EQ(store_->RemoveExpired().value_or(-1), 0);
}

TEST_F(RedisSnapshotStoreTest, DeleteUnlinksTheKey) {
  ASSERT_TRUE(store_->Put(kId, "x", absl::Hours(1)).ok());
  ASSERT_TRUE(store_->Delete(kId).ok());
  RedisReplyPtr exists = RawCommand(raw_.get(), "EXISTS attnserve:session:%s", kId);
  ASSERT_NE(exists, nullptr);
  EXPECT_EQ(exists->integer, 0);
}

TEST_F(RedisSnapshotStoreTest, UsesTheDatabaseInTheSpec) {
  std::unique_ptr<SnapshotStore> db3 = Open(redis_->spec() + "/3");
  ASSERT_TRUE(db3->Put(kId, "in db 3", absl::Hours(1)).ok());
  EXPECT_EQ(store_->Get(kId).status().code(), absl::StatusCode::kNotFound);
  ASSERT_NE(RawCommand(raw_.get(), "SELECT 3"), nullptr);
  RedisReplyPtr reply = RawCommand(raw_.get(), "GET attnserve:session:%s", kId);
  ASSERT_NE(reply, nullptr);
  ASSERT_EQ(reply->type, REDIS_REPLY_STRING);
  EXPECT_EQ(std::string(reply->str, reply->len), "in db 3");
}

TEST_F(RedisSnapshotStoreTest, MissingDatabaseIsUnavailableNamingSelect) {
  std::unique_ptr<SnapshotStore> db999 = Open(redis_->spec() + "/999");
  absl::Status status = db999->Put(kId, "x", absl::Hours(1));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("SELECT 999: ERR DB index"));
}

TEST_F(RedisSnapshotStoreTest, ErrorReplyIsUnavailableNamingTheCommand) {
  ASSERT_NE(RawCommand(raw_.get(), "SET attnserve:session:%s 1", kId), nullptr);
  ASSERT_NE(RawCommand(raw_.get(), "CONFIG SET maxmemory 1"), nullptr);
  absl::Status status = store_->Put(kId, std::string(1000, 'x'), absl::Hours(1));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("Put: staging SET: OOM"));
  // Scripts that only read still run.
  EXPECT_EQ(store_->PutFenced(kId, "y", absl::Hours(1), "token", 0).status().code(),
            absl::StatusCode::kAborted);
  EXPECT_EQ(store_->Get(kId).value_or("error"), "1");  // the connection stays usable
  RedisReplyPtr generation = RawCommand(raw_.get(), "EXISTS attnserve:gen:%s", kId);
  ASSERT_NE(generation, nullptr);
  EXPECT_EQ(generation->integer, 0) << "a refused script wrote the generation";
  EXPECT_EQ(StagingKeys(), 0);
}

TEST_F(RedisSnapshotStoreTest, WritesLeaveNoStagedBytesBehind) {
  ASSERT_TRUE(store_->Put(kId, "put", kTtl).ok());
  auto grant = store_->AcquireLease(kId, kTtl);
  ASSERT_TRUE(grant.ok()) << grant.status();
  ASSERT_EQ(store_->PutFenced(kId, "fenced", kTtl, grant->token, 1).value_or(-1), 2);
  EXPECT_THAT(std::string(store_->PutFenced(kId, "stale", kTtl, grant->token, 1)
                              .status()
                              .message()),
              HasSubstr("stale generation"));
  EXPECT_EQ(store_->PutFenced(kId, "lost", kTtl, "not-the-token", 2).status().code(),
            absl::StatusCode::kAborted);
  EXPECT_EQ(StagingKeys(), 0);
  EXPECT_THAT(store_->GetWithGeneration(kId).value_or(std::make_pair("error", -1)),
              Pair("fenced", 2));
  // The staged copy moved into place carries the write's expiry, not its own.
  RedisReplyPtr pttl = RawCommand(raw_.get(), "PTTL attnserve:session:%s", kId);
  ASSERT_NE(pttl, nullptr);
  EXPECT_GT(pttl->integer, absl::ToInt64Milliseconds(kTtl) - 5000);
}

TEST_F(RedisSnapshotStoreTest, UnavailableWhileRedisIsDownAndRecoversWhenItIsBack) {
  ASSERT_TRUE(store_->Put(kId, "before", absl::Hours(1)).ok());
  redis_->Stop();
  absl::Status put = store_->Put(kId, "x", absl::Hours(1));
  ExpectUnavailable(put);
  EXPECT_THAT(std::string(put.message()), HasSubstr("Connection refused"));
  ExpectUnavailable(store_->Get(kId).status());
  ExpectUnavailable(store_->Delete(kId));

  ASSERT_TRUE(redis_->Restart().ok());
  EXPECT_EQ(store_->Get(kId).status().code(),
            absl::StatusCode::kNotFound);  // no persistence
  ASSERT_TRUE(store_->Put(kId, "after", absl::Hours(1)).ok());
  EXPECT_EQ(store_->Get(kId).value_or("error"), "after");
}

// After a Redis restart the store's idle connection is dead, but the server is up: the
// first call must not fail for that.
TEST_F(RedisSnapshotStoreTest, ConnectionClosedByTheServerIsReplacedAtOnce) {
  ASSERT_TRUE(store_->Put(kId, "x", absl::Hours(1)).ok());
  RedisReplyPtr killed = RawCommand(raw_.get(), "CLIENT KILL TYPE normal SKIPME yes");
  ASSERT_NE(killed, nullptr);
  ASSERT_EQ(killed->type, REDIS_REPLY_INTEGER);
  ASSERT_EQ(killed->integer, 1);  // the store's connection
  EXPECT_EQ(store_->Get(kId).value_or("error"), "x");
  ASSERT_TRUE(store_->Put(kId, "y", absl::Hours(1)).ok());
  EXPECT_EQ(store_->Get(kId).value_or("error"), "y");
}

// Writing a large value to a connection the server has closed takes several write(2)
// calls; the second raises SIGPIPE, which must not kill the process.
TEST_F(RedisSnapshotStoreTest, LargePutOnAClosedConnectionDoesNotRaiseSigpipe) {
  ASSERT_TRUE(store_->Put(kId, "x", absl::Hours(1)).ok());
  RedisReplyPtr killed = RawCommand(raw_.get(), "CLIENT KILL TYPE normal SKIPME yes");
  ASSERT_NE(killed, nullptr);
  ASSERT_EQ(killed->integer, 1);
  const std::string big(4 << 20, 'b');
  absl::Status put = store_->Put(kId, big, absl::Hours(1));
  ASSERT_TRUE(put.ok()) << put;
  EXPECT_TRUE(store_->Get(kId).value_or("error") == big);
}

TEST_F(RedisSnapshotStoreTest, HungRedisTimesOutAndRecovers) {
  ASSERT_TRUE(store_->Put(kId, "x", absl::Hours(1)).ok());
  redis_->Pause();
  const absl::Time start = absl::Now();
  absl::Status get = store_->Get(kId).status();
  const absl::Duration waited = absl::Now() - start;
  redis_->Resume();
  ExpectUnavailable(get);
  EXPECT_GE(waited, RedisSnapshotStore::kCommandTimeout - absl::Milliseconds(100));
  EXPECT_LT(waited, RedisSnapshotStore::kCommandTimeout + absl::Seconds(1));
  EXPECT_EQ(store_->Get(kId).value_or("error"), "x");
}

TEST_F(RedisSnapshotStoreTest, KeepsLeaseAndGenerationUnderNamespacedKeys) {
  EXPECT_EQ(RedisSnapshotStore::GenerationKey(kId), std::string("attnserve:gen:") + kId);
  EXPECT_EQ(RedisSnapshotStore::LeaseKey(kId), std::string("attnserve:lease:") + kId);
  auto grant = store_->AcquireLease(kId, absl::Seconds(10));
  ASSERT_TRUE(grant.ok()) << grant.status();
  EXPECT_EQ(RawValue("GET %s", RedisSnapshotStore::LeaseKey(kId)), grant->token);
  const int64_t lease_pttl = RawInteger("PTTL %s", RedisSnapshotStore::LeaseKey(kId));
  EXPECT_GT(lease_pttl, 9000);
  EXPECT_LE(lease_pttl, 10000);
  ASSERT_EQ(store_->PutFenced(kId, "x", kTtl, grant->token, 0).value_or(-1), 1);
  EXPECT_EQ(RawValue("GET %s", RedisSnapshotStore::GenerationKey(kId)), "1");
  ASSERT_TRUE(store_->ReleaseLease(kId, grant->token).ok());
  EXPECT_EQ(RawInteger("EXISTS %s", RedisSnapshotStore::LeaseKey(kId)), 0);
}

TEST_F(RedisSnapshotStoreTest, SnapshotAndGenerationShareOneExpiry) {
  ASSERT_TRUE(store_->Put(kId, "x", absl::Milliseconds(200)).ok());
  const int64_t at = RawInteger("PEXPIRETIME %s", RedisSnapshotStore::Key(kId));
  EXPECT_GT(at, 0);
  EXPECT_EQ(RawInteger("PEXPIRETIME %s", RedisSnapshotStore::GenerationKey(kId)), at);
  auto grant = store_->AcquireLease(kId, kTtl);
  ASSERT_TRUE(grant.ok()) << grant.status();
  ASSERT_EQ(store_->PutFenced(kId, "y", kTtl, grant->token, 1).value_or(-1), 2);
  const int64_t fenced_at = RawInteger("PEXPIRETIME %s", RedisSnapshotStore::Key(kId));
  EXPECT_GT(fenced_at, at);
  EXPECT_EQ(RawInteger("PEXPIRETIME %s", RedisSnapshotStore::GenerationKey(kId)),
            fenced_at);
}

TEST_F(RedisSnapshotStoreTest, GenerationExpiresWithTheSnapshot) {
  ASSERT_TRUE(store_->Put(kId, "x", absl::Milliseconds(50)).ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  absl::Status read;
  while ((read = store_->GetWithGeneration(kId).status()).ok() && absl::Now() < deadline) {
    std::this_thread::yield();
  }
  ASSERT_EQ(read.code(), absl::StatusCode::kNotFound) << read;
  EXPECT_EQ(RawInteger("EXISTS %s", RedisSnapshotStore::GenerationKey(kId)), 0);
  EXPECT_EQ(store_->AcquireLease(kId, kTtl).value_or(LeaseGrant{"", -1}).generation, 0);
}

TEST_F(RedisSnapshotStoreTest, RenewExtendsTheLease) {
  auto grant = store_->AcquireLease(kId, absl::Seconds(1));
  ASSERT_TRUE(grant.ok()) << grant.status();
  ASSERT_TRUE(store_->RenewLease(kId, grant->token, absl::Seconds(100)).ok());
  EXPECT_GT(RawInteger("PTTL %s", RedisSnapshotStore::LeaseKey(kId)), 99000);
}

// The lease lapses while its holder still thinks it has it (a stalled process): whoever
// takes it next owns the session, and the stalled holder's writes are refused.
TEST_F(RedisSnapshotStoreTest, ExpiredLeaseFencesOutItsOldHolder) {
  std::unique_ptr<SnapshotStore> other = Open(redis_->spec());
  auto old = store_->AcquireLease(kId, absl::Milliseconds(100));
  ASSERT_TRUE(old.ok()) << old.status();
  ASSERT_EQ(store_->PutFenced(kId, "old", kTtl, old->token, 0).value_or(-1), 1);
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  absl::StatusOr<LeaseGrant> next;
  while (absl::IsAborted((next = other->AcquireLease(kId, kTtl)).status()) &&
         absl::Now() < deadline) {
    std::this_thread::yield();
  }
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->generation, 1);

  absl::Status late = store_->PutFenced(kId, "late", kTtl, old->token, 1).status();
  EXPECT_EQ(late.code(), absl::StatusCode::kAborted) << late;
  EXPECT_EQ(late.message(), absl::StrCat("session ", kId, ": lease lost"));
  EXPECT_EQ(store_->RenewLease(kId, old->token, kTtl).code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(store_->ReleaseLease(kId, old->token).ok());
  EXPECT_EQ(RawValue("GET %s", RedisSnapshotStore::LeaseKey(kId)), next->token);
  EXPECT_THAT(store_->GetWithGeneration(kId).value_or(std::make_pair("error", -1)),
              Pair("old", 1));
}

TEST_F(RedisSnapshotStoreTest, ScriptsTheServerForgotAreSentAgain) {
  ASSERT_TRUE(store_->Put(kId, "a", kTtl).ok());
  auto grant = store_->AcquireLease(kId, kTtl);
  ASSERT_TRUE(grant.ok()) << grant.status();
  RedisReplyPtr flushed = RawCommand(raw_.get(), "SCRIPT FLUSH");
  ASSERT_NE(flushed, nullptr);
  ASSERT_EQ(flushed->type, REDIS_REPLY_STATUS);
  ASSERT_TRUE(store_->Put(kId, "b", kTtl).ok());
  EXPECT_EQ(store_->PutFenced(kId, "c", kTtl, grant->token, 2).value_or(-1), 3);
  EXPECT_THAT(store_->GetWithGeneration(kId).value_or(std::make_pair("error", -1)),
              Pair("c", 3));
}

TEST_F(RedisSnapshotStoreTest, GenerationKeyHoldingGarbageIsUnavailable) {
  ASSERT_NE(RawCommand(raw_.get(), "SET attnserve:gen:%s junk", kId), nullptr);
  absl::Status acquire = store_->AcquireLease(kId, kTtl).status();
  ExpectUnavailable(acquire);
  EXPECT_THAT(std::string(acquire.message()),
              HasSubstr("AcquireLease script: the generation key holds \"junk\""));
  absl::Status put = store_->Put(kId, "x", kTtl);
  ExpectUnavailable(put);
  EXPECT_THAT(std::string(put.message()), HasSubstr("Put script: "));
  EXPECT_EQ(store_->Get(kId).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(StagingKeys(), 0) << "the refused write left its staged bytes";
}

TEST_F(RedisSnapshotStoreTest, LeasesAreUnavailableWhileRedisIsDownAndRecoverWhenItIsBack) {
  auto grant = store_->AcquireLease(kId, kTtl);
  ASSERT_TRUE(grant.ok()) << grant.status();
  ASSERT_EQ(store_->PutFenced(kId, "before", kTtl, grant->token, 0).value_or(-1), 1);
  redis_->Stop();
  absl::Status acquire = store_->AcquireLease("other", kTtl).status();
  ExpectUnavailable(acquire);
  EXPECT_THAT(std::string(acquire.message()), HasSubstr("Connection refused"));
  ExpectUnavailable(store_->PutFenced(kId, "x", kTtl, grant->token, 1).status());
  ExpectUnavailable(store_->GetWithGeneration(kId).status());
  ExpectUnavailable(store_->RenewLease(kId, grant->token, kTtl));
  ExpectUnavailable(store_->ReleaseLease(kId, grant->token));

  ASSERT_TRUE(redis_->Restart().ok());  // no persistence: lease and generation are gone
  EXPECT_EQ(store_->RenewLease(kId, grant->token, kTtl).code(), absl::StatusCode::kAborted);
  auto again = store_->AcquireLease(kId, kTtl);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->generation, 0);
  EXPECT_EQ(store_->PutFenced(kId, "after", kTtl, again->token, 0).value_or(-1), 1);
  EXPECT_THAT(store_->GetWithGeneration(kId).value_or(std::make_pair("error", -1)),
              Pair("after", 1));
}

}  // namespace
}  // namespace attnserve::store
