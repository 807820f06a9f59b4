#include "server/store/checkpoint_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "server/store/dir_store.h"
#include "tests/store/store_testing.h"

namespace attnserve::store {
namespace {

using ::attnserve::store::testing::ManualClock;
using ::attnserve::store::testing::TempDir;
using ::testing::HasSubstr;

std::shared_ptr<const std::string> Bytes(size_t n, char c) {
  return std::make_shared<const std::string>(n, c);
}

// Keys of each kind: a stored response's ("resp_" + 32 hex) and a kept chat state's
// ("pfx_" + 64 hex), numbered.
std::string Resp(int i) {
  std::string hex = std::to_string(i);
  return "resp_" + std::string(32 - hex.size(), '0') + hex;
}
std::string Pfx(int i) {
  std::string hex = std::to_string(i);
  return "pfx_" + std::string(64 - hex.size(), '0') + hex;
}

CheckpointStore::Options Memory(const Clock* clock, int64_t bytes, bool disposable) {
  CheckpointStore::Options o;
  o.kind = disposable ? RecordKind::kPrefixState : RecordKind::kResponse;
  o.disposable = disposable;
  o.memory_bytes = bytes;
  o.memory_flag = "--checkpoint_memory_bytes";
  o.records_flag = "--tenant_max_responses";
  o.bytes_flag = "--tenant_response_bytes";
  o.clock = clock;
  return o;
}

TEST(CheckpointStoreTest, DisposableRecordsLeaveLeastRecentlyUsedFirst) {
  ManualClock clock;
  CheckpointStore store(Memory(&clock, 300, /*disposable=*/true));
  EXPECT_EQ(store.name(), "memory");
  ASSERT_TRUE(store.Put("t", Pfx(1), Bytes(100, 'a'), absl::Hours(1)).ok());
  ASSERT_TRUE(store.Put("t", Pfx(2), Bytes(100, 'b'), absl::Hours(1)).ok());
  ASSERT_TRUE(store.Put("t", Pfx(3), Bytes(100, 'c'), absl::Hours(1)).ok());
  ASSERT_TRUE(store.Get("t", Pfx(1)).ok());  // now the most recently used
  ASSERT_TRUE(store.Put("t", Pfx(4), Bytes(100, 'd'), absl::Hours(1)).ok());
  EXPECT_TRUE(absl::IsNotFound(store.Get("t", Pfx(2)).status()));
  EXPECT_EQ(**store.Get("t", Pfx(1)), std::string(100, 'a'));
  EXPECT_EQ(store.memory_bytes_used(), 300);
  EXPECT_EQ(store.memory_records(), 3);
  EXPECT_EQ(store.usage("t").records, 3);
  absl::Status big = store.Put("t", Pfx(5), Bytes(301, 'e'), absl::Hours(1));
  EXPECT_TRUE(absl::IsResourceExhausted(big)) << big;
  EXPECT_THAT(big.message(), HasSubstr("--checkpoint_memory_bytes"));
  clock.Advance(absl::Hours(2));
  EXPECT_TRUE(absl::IsNotFound(store.Get("t", Pfx(1)).status()));
  ASSERT_TRUE(store.Put("t", Pfx(6), Bytes(10, 'f'), absl::Hours(1)).ok());
  ASSERT_TRUE(store.Delete(Pfx(6)).ok());
  EXPECT_TRUE(absl::IsNotFound(store.Get("t", Pfx(6)).status()));
  EXPECT_TRUE(store.Delete(Pfx(7)).ok());
}

TEST(CheckpointStoreTest, AKeyOfAnotherKindIsAbsentAndCannotBeWritten) {
  ManualClock clock;
  CheckpointStore store(Memory(&clock, 300, /*disposable=*/false));
  ASSERT_TRUE(store.Put("t", Resp(1), Bytes(10, 'a'), absl::Hours(1)).ok());
  for (const std::string key : {Pfx(1), std::string("../x"), std::string("0123456789abcdef0123456789abcdef")}) {
    EXPECT_TRUE(absl::IsInvalidArgument(store.Put("t", key, Bytes(1, 'x'), absl::Hours(1))));
    EXPECT_TRUE(absl::IsNotFound(store.Get("t", key).status()));
    EXPECT_TRUE(store.Delete(key).ok());
  }
}

// A tenant's burst of disposable records takes its own out, never another tenant's
// share; durable records kept only in memory are never evicted, a write that does not
// fit is refused.
TEST(CheckpointStoreTest, OneTenantCannotEvictAnothers) {
  ManualClock clock;
  CheckpointStore states(Memory(&clock, 400, /*disposable=*/true));
  ASSERT_TRUE(states.Put("a", Pfx(1), Bytes(100, 'a'), absl::Hours(1)).ok());
  for (int i = 2; i < 50; ++i) {
    ASSERT_TRUE(states.Put("b", Pfx(i), Bytes(100, 'b'), absl::Hours(1)).ok());
  }
  EXPECT_TRUE(states.Get("a", Pfx(1)).ok());
  EXPECT_EQ(states.usage("b").records, 3);

  CheckpointStore responses(Memory(&clock, 300, /*disposable=*/false));
  ASSERT_TRUE(responses.Put("a", Resp(1), Bytes(100, 'a'), absl::Hours(1)).ok());
  ASSERT_TRUE(responses.Put("b", Resp(2), Bytes(100, 'b'), absl::Hours(1)).ok());
  ASSERT_TRUE(responses.Put("b", Resp(3), Bytes(100, 'b'), absl::Hours(1)).ok());
  absl::Status full = responses.Put("b", Resp(4), Bytes(100, 'b'), absl::Hours(1));
  EXPECT_TRUE(absl::IsResourceExhausted(full)) << full;
  EXPECT_THAT(full.message(), HasSubstr("--checkpoint_memory_bytes"));
  EXPECT_TRUE(responses.Get("a", Resp(1)).ok());
  // Expired ones make room.
  clock.Advance(absl::Hours(2));
  EXPECT_TRUE(responses.Put("b", Resp(4), Bytes(100, 'b'), absl::Hours(1)).ok());
}

TEST(CheckpointStoreTest, TenantQuotasRefuseDurableAndRecycleDisposableRecords) {
  ManualClock clock;
  CheckpointStore::Options o = Memory(&clock, 1 << 20, /*disposable=*/false);
  o.tenant_max_records = 2;
  o.tenant_max_bytes = 250;
  o.remedy = "delete some";
  CheckpointStore responses(std::move(o));
  ASSERT_TRUE(responses.Put("b", Resp(1), Bytes(100, 'b'), absl::Hours(1)).ok());
  ASSERT_TRUE(responses.Put("b", Resp(2), Bytes(100, 'b'), absl::Hours(1)).ok());
  EXPECT_TRUE(absl::IsResourceExhausted(responses.CheckRoom("b")));
  EXPECT_TRUE(responses.CheckRoom("a").ok());
  absl::Status count = responses.Put("b", Resp(3), Bytes(10, 'b'), absl::Hours(1));
  EXPECT_TRUE(absl::IsResourceExhausted(count)) << count;
  EXPECT_THAT(count.message(), HasSubstr("--tenant_max_responses=2"));
  EXPECT_THAT(count.message(), HasSubstr("delete some"));
  ASSERT_TRUE(responses.Delete(Resp(2)).ok());
  absl::Status bytes = responses.Put("b", Resp(3), Bytes(200, 'b'), absl::Hours(1));
  EXPECT_TRUE(absl::IsResourceExhausted(bytes)) << bytes;
  EXPECT_THAT(bytes.message(), HasSubstr("--tenant_response_bytes=250"));
  EXPECT_TRUE(responses.Put("a", Resp(4), Bytes(200, 'a'), absl::Hours(1)).ok());
  EXPECT_TRUE(responses.Get("b", Resp(1)).ok());

  CheckpointStore::Options p = Memory(&clock, 1 << 20, /*disposable=*/true);
  p.tenant_max_bytes = 250;
  CheckpointStore states(std::move(p));
  for (int i = 1; i <= 5; ++i) {
    ASSERT_TRUE(states.Put("b", Pfx(i), Bytes(100, 'b'), absl::Hours(1) + absl::Seconds(i)).ok());
  }
  EXPECT_EQ(states.usage("b").records, 2);
  EXPECT_TRUE(states.Get("b", Pfx(5)).ok());
  EXPECT_TRUE(absl::IsNotFound(states.Get("b", Pfx(1)).status()));
}

// Two processes' stores over one durable backend: what one writes the other reads; a
// delete on one is seen by the other even though it cached the record.
TEST(CheckpointStoreTest, ReplicasShareTheDurableCopyAndSeeDeletes) {
  TempDir dir;
  ManualClock clock;
  auto open = [&](int64_t memory) {
    CheckpointStore::Options o = Memory(&clock, memory, /*disposable=*/false);
    auto durable = DirSnapshotStore::Create(dir.path() + "/cp", &clock);
    EXPECT_TRUE(durable.ok()) << durable.status();
    o.durable = *std::move(durable);
    return std::make_unique<CheckpointStore>(std::move(o));
  };
  auto a = open(1 << 20), b = open(1 << 20);
  EXPECT_TRUE(a->durable());
  ASSERT_TRUE(a->Put("t", Resp(1), Bytes(1000, 'x'), absl::Hours(1)).ok());
  auto got = b->Get("t", Resp(1));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(**got, std::string(1000, 'x'));
  EXPECT_EQ(b->memory_records(), 1);  // cached
  ASSERT_TRUE(a->Delete(Resp(1)).ok());
  EXPECT_TRUE(absl::IsNotFound(b->Get("t", Resp(1)).status()));
  EXPECT_EQ(b->memory_records(), 0);
  // A record larger than memory is still kept in the durable store.
  auto c = open(10);
  ASSERT_TRUE(c->Put("t", Resp(2), Bytes(100, 'y'), absl::Hours(1)).ok());
  EXPECT_EQ(c->memory_records(), 0);
  EXPECT_EQ(**c->Get("t", Resp(2)), std::string(100, 'y'));
  // Expired in the store: gone from both, cached or not.
  clock.Advance(absl::Hours(2));
  EXPECT_TRUE(absl::IsNotFound(a->Get("t", Resp(2)).status()));
  EXPECT_TRUE(absl::IsNotFound(c->Get("t", Resp(2)).status()));
}

}  // namespace
}  // namespace attnserve::store
