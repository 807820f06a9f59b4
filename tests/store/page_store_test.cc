// The page methods every SnapshotStore backend shares (state pages, state_pages.h), run
// against a real directory, a real redis-server and the memory store.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "server/store/dir_store.h"
#include "server/store/record_kind.h"
#include "server/store/redis_store.h"
#include "server/store/snapshot_store.h"
#include "tests/store/store_testing.h"

namespace attnserve::store {
namespace {

using ::attnserve::store::testing::Backend;
using ::attnserve::store::testing::BackendName;
using ::attnserve::store::testing::ConnectRaw;
using ::attnserve::store::testing::RawCommand;
using ::attnserve::store::testing::RedisContextPtr;
using ::attnserve::store::testing::RedisReplyPtr;
using ::testing::ElementsAre;

using PageStoreTest = ::attnserve::store::testing::BackendTest;

std::string PageId(char c) { return "page_" + std::string(64, c); }

// The page's expiry as the backend keeps it, from now; nullopt where it cannot be seen
// from outside (the memory store).
std::optional<absl::Duration> PageTtl(Backend backend, const std::string& spec,
                                      int redis_port, const std::string& id) {
  if (backend == Backend::kRedis) {
    RedisContextPtr raw = ConnectRaw(redis_port);
    RedisReplyPtr pttl =
        RawCommand(raw.get(), "PTTL %s", RedisSnapshotStore::PageKey(id).c_str());
    return absl::Milliseconds(pttl->integer);
  }
  if (backend == Backend::kDir) {
    struct stat st;
    const std::string file = spec.substr(4) + "/" + id + ".page";
    if (stat(file.c_str(), &st) != 0) return absl::ZeroDuration();
    return absl::TimeFromTimespec(st.st_mtim) - absl::Now();
  }
  return std::nullopt;
}

TEST_P(PageStoreTest, PutWritesAbsentPagesOnceAndGetReadsThem) {
  std::string binary;
  for (int i = 0; i < 3 * 256; ++i) binary.push_back(char(i % 256));
  const std::vector<SnapshotStore::PageWrite> pages = {{PageId('a'), binary},
                                                       {PageId('b'), "bb"}};
  absl::StatusOr<int64_t> written = store_->PutPages(pages, absl::Hours(1));
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(*written, int64_t(binary.size()) + 2);
  // Immutable: written again, nothing is (and another connection sees them).
  std::unique_ptr<SnapshotStore> other = OpenAnother();
  written = other->PutPages(pages, absl::Hours(1));
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(*written, 0);
  auto got = other->GetPages({PageId('b'), PageId('c'), PageId('a')});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_THAT(*got, ElementsAre(std::optional<std::string>("bb"), std::nullopt,
                                std::optional<std::string>(binary)));
  // Pages are not snapshots: a session id never reads one.
  EXPECT_TRUE(absl::IsNotFound(store_->Get(PageId('a')).status()));
}

TEST_P(PageStoreTest, ExtendSaysWhichExistAndNeverShortensAnExpiry) {
  ASSERT_TRUE(store_->PutPages({{PageId('a'), "a"}}, absl::Hours(10)).ok());
  auto exists = store_->ExtendPages({PageId('a'), PageId('b')}, absl::Hours(1));
  ASSERT_TRUE(exists.ok()) << exists.status();
  EXPECT_THAT(*exists, ElementsAre(true, false));
  const int port = redis_ ? redis_->port() : 0;
  if (auto ttl = PageTtl(GetParam(), spec_, port, PageId('a'))) {
    EXPECT_GT(*ttl, absl::Hours(9));
  }
  ASSERT_TRUE(store_->ExtendPages({PageId('a')}, absl::Hours(20)).ok());
  if (auto ttl = PageTtl(GetParam(), spec_, port, PageId('a'))) {
    EXPECT_GT(*ttl, absl::Hours(19));
  }
  // Put of a stored page extends it the same way.
  ASSERT_TRUE(store_->PutPages({{PageId('a'), "a"}}, absl::Hours(30)).ok());
  if (auto ttl = PageTtl(GetParam(), spec_, port, PageId('a'))) {
    EXPECT_GT(*ttl, absl::Hours(29));
  }
  ASSERT_TRUE(store_->PutPages({{PageId('a'), "a"}}, absl::Hours(1)).ok());
  if (auto ttl = PageTtl(GetParam(), spec_, port, PageId('a'))) {
    EXPECT_GT(*ttl, absl::Hours(29));
  }
}

TEST_P(PageStoreTest, RefusesIdsThatAreNoPagesAndTtlsThatAreNotPositive) {
  const std::string session = "0123456789abcdef0123456789abcdef";
  EXPECT_TRUE(absl::IsInvalidArgument(store_->PutPages({{session, "x"}}, absl::Hours(1)).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(store_->GetPages({"../etc"}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(store_->ExtendPages({session}, absl::Hours(1)).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      store_->PutPages({{PageId('a'), "x"}}, absl::ZeroDuration()).status()));
}

TEST_P(PageStoreTest, ManyPagesInOneCallCrossTheBatchBounds) {
  std::vector<std::string> bytes;
  std::vector<SnapshotStore::PageWrite> pages;
  std::vector<std::string> ids;
  for (int i = 0; i < 40; ++i) {
    bytes.push_back(std::string(1 << 20, char('a' + i % 26)));
    std::string hex = std::to_string(i);
    ids.push_back("page_" + std::string(64 - hex.size(), '0') + hex);
  }
  for (int i = 0; i < 40; ++i) pages.push_back({ids[i], bytes[i]});
  absl::StatusOr<int64_t> written = store_->PutPages(pages, absl::Hours(1));
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(*written, int64_t{40} << 20);
  auto got = store_->GetPages(ids);
  ASSERT_TRUE(got.ok()) << got.status();
  for (int i = 0; i < 40; ++i) EXPECT_TRUE((*got)[i] == bytes[i]) << i;
  auto exists = store_->ExtendPages(ids, absl::Hours(2));
  ASSERT_TRUE(exists.ok()) << exists.status();
  EXPECT_EQ(std::count(exists->begin(), exists->end(), true), 40);
}

INSTANTIATE_TEST_SUITE_P(Backends, PageStoreTest,
                         ::testing::Values(Backend::kDir, Backend::kRedis, Backend::kMemory),
                         BackendName);

// The directory's pages expire by their mtime: an expired one is absent to every method,
// written again by a Put (over the expired file), and swept by RemoveExpired.
TEST(DirPageStoreTest, AnExpiredPageIsAbsentRewrittenAndSwept) {
  testing::TempDir dir;
  testing::ManualClock clock;
  auto store = DirSnapshotStore::Create(dir.path() + "/s", &clock);
  ASSERT_TRUE(store.ok()) << store.status();
  const std::string a = PageId('a'), b = PageId('b');
  ASSERT_TRUE((*store)->PutPages({{a, "old"}, {b, "b"}}, absl::Minutes(1)).ok());
  clock.Advance(absl::Minutes(2));
  auto got = (*store)->GetPages({a});
  ASSERT_TRUE(got.ok());
  EXPECT_EQ((*got)[0], std::nullopt);
  EXPECT_THAT(*(*store)->ExtendPages({a}, absl::Hours(1)), ElementsAre(false));
  absl::StatusOr<int64_t> written = (*store)->PutPages({{a, "new"}}, absl::Hours(1));
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(*written, 3);
  EXPECT_EQ((*(*store)->GetPages({a}))[0], std::optional<std::string>("new"));
  ASSERT_TRUE((*store)->RemoveExpired().ok());
  struct stat st;
  EXPECT_NE(stat((*store)->PagePath(b).c_str(), &st), 0);  // swept
  EXPECT_EQ(stat((*store)->PagePath(a).c_str(), &st), 0);  // live
}

// Pages travel on a connection of their own: a record write and a lease renewal never
// queue behind a page upload.
TEST(RedisPageStoreTest, PagesUseAConnectionOfTheirOwn) {
  auto redis = testing::RedisServer::Start();
  ASSERT_TRUE(redis.ok()) << redis.status();
  auto store = OpenSnapshotStore((*redis)->spec());
  ASSERT_TRUE(store.ok());
  RedisContextPtr raw = ConnectRaw((*redis)->port());
  auto clients = [&] {
    RedisReplyPtr list = RawCommand(raw.get(), "CLIENT LIST");
    const std::string text(list->str, list->len);
    return std::count(text.begin(), text.end(), '\n');
  };
  ASSERT_TRUE((*store)->Put("0123456789abcdef0123456789abcdef", "x", absl::Hours(1)).ok());
  EXPECT_EQ(clients(), 2);  // the raw one and the store's
  ASSERT_TRUE((*store)->PutPages({{PageId('a'), "a"}}, absl::Hours(1)).ok());
  EXPECT_EQ(clients(), 3);
  RedisReplyPtr policy = RawCommand(raw.get(), "CONFIG GET maxmemory-policy");
  ASSERT_EQ(policy->elements, 2u);
  EXPECT_EQ(std::string(policy->element[1]->str), "noeviction");  // what pages need
}

}  // namespace
}  // namespace attnserve::store
