// The Redis backend against a real redis-server this test starts, stops, restarts and
// pauses.
#include "server/store/redis_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "tests/store/store_testing.h"

namespace attnserve::store {
namespace {

using ::attnserve::store::testing::ConnectRaw;
using ::attnserve::store::testing::RawCommand;
using ::attnserve::store::testing::RedisContextPtr;
using ::attnserve::store::testing::RedisReplyPtr;
using ::attnserve::store::testing::RedisServer;
using ::testing::HasSubstr;

constexpr char kId[] = "0123456789abcdef0123456789abcdef";

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
  EXPECT_THAT(std::string(status.message()), HasSubstr("SET: OOM"));
  EXPECT_EQ(store_->Get(kId).value_or("error"), "1");  // the connection stays usable
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

}  // namespace
}  // namespace attnserve::store
