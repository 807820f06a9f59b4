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

TEST(CheckpointStoreTest, MemoryOnlyKeepsTheMostRecentlyUsedWithinItsBytes) {
  ManualClock clock;
  CheckpointStore::Options o;
  o.memory_bytes = 300;
  o.clock = &clock;
  CheckpointStore store(std::move(o));
  EXPECT_EQ(store.name(), "memory");
  ASSERT_TRUE(store.Put("a", Bytes(100, 'a'), absl::Hours(1)).ok());
  ASSERT_TRUE(store.Put("b", Bytes(100, 'b'), absl::Hours(1)).ok());
  ASSERT_TRUE(store.Put("c", Bytes(100, 'c'), absl::Hours(1)).ok());
  ASSERT_TRUE(store.Get("a").ok());  // a is now the most recently used
  ASSERT_TRUE(store.Put("d", Bytes(100, 'd'), absl::Hours(1)).ok());
  EXPECT_TRUE(absl::IsNotFound(store.Get("b").status()));  // the least recently used left
  EXPECT_EQ(**store.Get("a"), std::string(100, 'a'));
  EXPECT_EQ(store.memory_bytes_used(), 300);
  EXPECT_EQ(store.memory_records(), 3);
  // Too big to keep anywhere.
  absl::Status big = store.Put("e", Bytes(301, 'e'), absl::Hours(1));
  EXPECT_TRUE(absl::IsResourceExhausted(big)) << big;
  EXPECT_THAT(big.message(), HasSubstr("--checkpoint_memory_bytes"));
  // Expiry and delete.
  clock.Advance(absl::Hours(2));
  EXPECT_TRUE(absl::IsNotFound(store.Get("a").status()));
  ASSERT_TRUE(store.Put("f", Bytes(10, 'f'), absl::Hours(1)).ok());
  ASSERT_TRUE(store.Delete("f").ok());
  EXPECT_TRUE(absl::IsNotFound(store.Get("f").status()));
  EXPECT_TRUE(store.Delete("never").ok());
  // Keys the store cannot hold.
  EXPECT_FALSE(store.Put("../x", Bytes(1, 'x'), absl::Hours(1)).ok());
  EXPECT_TRUE(absl::IsNotFound(store.Get("../x").status()));
}

// Two processes' stores over one durable backend: what one writes the other reads; a
// delete on one is seen by the other even though it cached the record.
TEST(CheckpointStoreTest, ReplicasShareTheDurableCopyAndSeeDeletes) {
  TempDir dir;
  ManualClock clock;
  auto open = [&] {
    CheckpointStore::Options o;
    o.memory_bytes = 1 << 20;
    o.clock = &clock;
    auto durable = DirSnapshotStore::Create(dir.path() + "/cp", &clock);
    EXPECT_TRUE(durable.ok()) << durable.status();
    o.durable = *std::move(durable);
    return std::make_unique<CheckpointStore>(std::move(o));
  };
  auto a = open(), b = open();
  EXPECT_TRUE(a->durable());
  ASSERT_TRUE(a->Put("resp_1", Bytes(1000, 'x'), absl::Hours(1)).ok());
  auto got = b->Get("resp_1");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(**got, std::string(1000, 'x'));
  EXPECT_EQ(b->memory_records(), 1);  // cached
  ASSERT_TRUE(a->Delete("resp_1").ok());
  EXPECT_TRUE(absl::IsNotFound(b->Get("resp_1").status()));
  EXPECT_EQ(b->memory_records(), 0);
  // A record larger than memory is still kept in the durable store.
  CheckpointStore::Options small;
  small.memory_bytes = 10;
  small.clock = &clock;
  small.durable = *DirSnapshotStore::Create(dir.path() + "/cp", &clock);
  CheckpointStore c(std::move(small));
  ASSERT_TRUE(c.Put("resp_2", Bytes(100, 'y'), absl::Hours(1)).ok());
  EXPECT_EQ(c.memory_records(), 0);
  EXPECT_EQ(**c.Get("resp_2"), std::string(100, 'y'));
  // Expired in the store: gone from both, cached or not.
  clock.Advance(absl::Hours(2));
  EXPECT_TRUE(absl::IsNotFound(a->Get("resp_2").status()));
  EXPECT_TRUE(absl::IsNotFound(c.Get("resp_2").status()));
}

}  // namespace
}  // namespace attnserve::store
