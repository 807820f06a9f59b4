// CheckpointStore keeping records by pages (checkpoint_store.h, state_pages.h), in memory,
// in a directory and in a real redis-server: what a chain of growing states stores and
// charges, what a reader gets back, and what it gets when a page is gone.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <iostream>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "server/store/checkpoint_store.h"
#include "server/store/dir_store.h"
#include "server/store/record_kind.h"
#include "server/store/redis_store.h"
#include "server/store/state_pages.h"
#include "tests/store/fake_snapshot.h"
#include "tests/store/store_testing.h"

namespace attnserve::store {
namespace {

using ::attnserve::store::testing::Backend;
using ::attnserve::store::testing::BackendName;
using ::attnserve::store::testing::ConnectRaw;
using ::attnserve::store::testing::FakeModel;
using ::attnserve::store::testing::FakeSnapshot;
using ::attnserve::store::testing::ManualClock;
using ::attnserve::store::testing::RawCommand;
using ::attnserve::store::testing::RedisContextPtr;
using ::attnserve::store::testing::RedisReplyPtr;
using ::attnserve::store::testing::RedisServer;
using ::attnserve::store::testing::TempDir;

constexpr absl::Duration kTtl = absl::Hours(1);
// 1 KiB per token (2 layers, 2 tensors, 4 heads, 16 dims, float32) and 16 KiB pages:
// P = 16, so a short chain crosses many pages.
constexpr int64_t kPageTarget = 16 << 10;

FakeModel Model(uint64_t seed = 1) {
  FakeModel m;
  m.heads = 4;
  m.dim = 16;
  m.fixed_layers = 1;
  m.seed = seed;
  return m;
}

std::string Resp(int i) {
  std::string hex = std::to_string(i);
  return "resp_" + std::string(32 - hex.size(), '0') + hex;
}

// A stored response as the HTTP front writes one: its own header, then the snapshot.
struct Record {
  std::shared_ptr<const std::string> bytes;
  size_t state_bytes = 0;
};
Record MakeRecord(int turn, const std::string& snapshot) {
  auto bytes = std::make_shared<std::string>("RESPONSE{\"turn\":" + std::to_string(turn) + "}");
  *bytes += snapshot;
  return Record{bytes, snapshot.size()};
}

class CheckpointPagesTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    if (GetParam() == Backend::kRedis) {
      auto redis = RedisServer::Start();
      ASSERT_TRUE(redis.ok()) << redis.status();
      redis_ = *std::move(redis);
    }
    store_ = Open();
  }

  // A store (another replica, for durable backends) on this test's place.
  std::unique_ptr<CheckpointStore> Open(int64_t tenant_max_bytes = 0) {
    CheckpointStore::Options o;
    o.kind = RecordKind::kResponse;
    o.memory_bytes = int64_t{1} << 30;
    o.tenant_max_bytes = tenant_max_bytes;
    o.bytes_flag = "--tenant_response_bytes";
    o.page_target_bytes = kPageTarget;
    o.clock = &clock_;
    o.durable = OpenDurable();
    return std::make_unique<CheckpointStore>(std::move(o));
  }

  // Another replica on the durable place; in memory, the one store there is.
  CheckpointStore* Replica() {
    if (GetParam() == Backend::kMemory) return store_.get();
    replicas_.push_back(Open());
    return replicas_.back().get();
  }

  std::unique_ptr<SnapshotStore> OpenDurable() {
    std::unique_ptr<SnapshotStore> base;
    if (GetParam() == Backend::kDir) {
      auto dir = DirSnapshotStore::Create(dir_.path() + "/cp", &clock_);
      EXPECT_TRUE(dir.ok()) << dir.status();
      base = *std::move(dir);
    } else if (GetParam() == Backend::kRedis) {
      auto redis = OpenSnapshotStore(redis_->spec());
      EXPECT_TRUE(redis.ok()) << redis.status();
      base = *std::move(redis);
    }
    return ForKinds({RecordKind::kResponse, RecordKind::kPage}, std::move(base));
  }

  // Bytes the backend holds: record values and pages.
  int64_t StoredBytes() {
    if (GetParam() == Backend::kMemory) return store_->memory_bytes_used();
    int64_t total = 0;
    if (GetParam() == Backend::kDir) {
      for (const auto& entry : std::filesystem::directory_iterator(dir_.path() + "/cp")) {
        const std::string ext = entry.path().extension();
        if (ext == ".snap" || ext == ".page") total += int64_t(entry.file_size());
      }
      return total;
    }
    RedisContextPtr raw = ConnectRaw(redis_->port());
    for (const char* pattern : {"attnserve:session:*", "attnserve:page:*"}) {
      RedisReplyPtr keys = RawCommand(raw.get(), "KEYS %s", pattern);
      for (size_t i = 0; i < keys->elements; ++i) {
        RedisReplyPtr len = RawCommand(raw.get(), "STRLEN %s", keys->element[i]->str);
        total += len->integer;
      }
    }
    return total;
  }

  // The pages the backend holds.
  int StoredPages() {
    if (GetParam() == Backend::kMemory) return store_->memory_pages();
    if (GetParam() == Backend::kDir) {
      int n = 0;
      for (const auto& entry : std::filesystem::directory_iterator(dir_.path() + "/cp")) {
        n += entry.path().extension() == ".page";
      }
      return n;
    }
    RedisContextPtr raw = ConnectRaw(redis_->port());
    RedisReplyPtr keys = RawCommand(raw.get(), "KEYS attnserve:page:*");
    return int(keys->elements);
  }

  // Removes page `id` behind the store's back.
  void LosePage(const std::string& id) {
    if (GetParam() == Backend::kDir) {
      ASSERT_EQ(unlink((dir_.path() + "/cp/" + id + ".page").c_str()), 0);
    } else {
      RedisContextPtr raw = ConnectRaw(redis_->port());
      RedisReplyPtr n =
          RawCommand(raw.get(), "DEL %s", RedisSnapshotStore::PageKey(id).c_str());
      ASSERT_EQ(n->integer, 1);
    }
  }

  ManualClock clock_;
  TempDir dir_;
  std::unique_ptr<RedisServer> redis_;
  std::unique_ptr<CheckpointStore> store_;
  std::vector<std::unique_ptr<CheckpointStore>> replicas_;
};

// The measure: 20 turns of one conversation, each storing its whole state, used
// to cost the sum of the states (O(turns x context)); by pages they cost about the last
// one, and each turn is charged its new pages plus its stub.
TEST_P(CheckpointPagesTest, AChainOfGrowingStatesStoresAboutOneFinalState) {
  const FakeModel model = Model();
  std::vector<Record> records;
  std::set<std::string> pages_before;
  int64_t sum = 0;
  std::string final_state;
  for (int turn = 0; turn < 20; ++turn) {
    final_state = FakeSnapshot(model, 101 * (turn + 1));
    records.push_back(MakeRecord(turn, final_state));
    sum += int64_t(records.back().bytes->size());
    // What this Put should cost: the stub record and the pages the chain lacked.
    absl::StatusOr<SplitState> split = SplitSnapshot("alice", final_state, kPageTarget);
    ASSERT_TRUE(split.ok());
    const size_t prefix = records.back().bytes->size() - final_state.size();
    int64_t expected = int64_t(
        EncodePagedRecord(std::string_view(*records.back().bytes).substr(0, prefix),
                          split->stub, "").size());
    for (const StatePage& page : split->pages) {
      if (pages_before.insert(page.id).second) expected += int64_t(page.bytes.size());
    }
    const int64_t charged = store_->usage("alice").bytes;
    const int64_t held = StoredBytes();
    ASSERT_TRUE(store_->Put("alice", Resp(turn), records.back().bytes, kTtl,
                            records.back().state_bytes).ok());
    EXPECT_EQ(store_->usage("alice").bytes - charged, expected) << "turn " << turn;
    // And that is all the turn wrote: its new pages and its stub record.
    EXPECT_EQ(StoredBytes() - held, expected) << "turn " << turn;
  }
  const int64_t stored = StoredBytes();
  std::cout << "20-record chain on " << store_->name() << ": final state "
            << final_state.size() << " bytes, sum of records " << sum << ", stored "
            << stored << " (" << double(stored) / double(final_state.size())
            << " x the final state)\n";
  EXPECT_LE(stored, int64_t(1.3 * double(final_state.size())));
  EXPECT_EQ(store_->usage("alice").bytes, stored);
  // This process's memory holds the chain as the store does: stubs and shared pages
  // (a durable store's cache too), not 20 whole records.
  EXPECT_LE(store_->memory_bytes_used(), int64_t(1.3 * double(final_state.size())));
  // Every record reads back byte for byte, here and on another replica.
  CheckpointStore* replica = Replica();
  for (int turn = 0; turn < 20; ++turn) {
    for (CheckpointStore* reader : {store_.get(), replica}) {
      auto got = reader->Get("alice", Resp(turn));
      ASSERT_TRUE(got.ok()) << turn << ": " << got.status();
      EXPECT_TRUE(**got == *records[turn].bytes) << "turn " << turn;
    }
  }
  // The replica cached what it read the same way.
  EXPECT_LE(replica->memory_bytes_used(), int64_t(1.3 * double(final_state.size())));
}

// A Put that names no snapshot keeps the record whole, as before pages: the same chain
// then costs the sum of its records.
TEST_P(CheckpointPagesTest, WithoutAStateOffsetRecordsAreKeptWhole) {
  const FakeModel model = Model();
  int64_t sum = 0;
  for (int turn = 0; turn < 20; ++turn) {
    Record r = MakeRecord(turn, FakeSnapshot(model, 101 * (turn + 1)));
    sum += int64_t(r.bytes->size());
    ASSERT_TRUE(store_->Put("alice", Resp(turn), r.bytes, kTtl).ok());
  }
  std::cout << "20-record chain kept whole on " << store_->name() << ": stored "
            << StoredBytes() << " bytes, sum of records " << sum << "\n";
  EXPECT_EQ(StoredBytes(), sum);
  EXPECT_EQ(StoredPages(), 0);
}

TEST_P(CheckpointPagesTest, TwoTenantsStoringTheSameStateShareNoPage) {
  const std::string state = FakeSnapshot(Model(), 200);
  Record a = MakeRecord(0, state), b = MakeRecord(0, state);
  ASSERT_TRUE(store_->Put("alice", Resp(1), a.bytes, kTtl, a.state_bytes).ok());
  const int pages = StoredPages();
  ASSERT_EQ(pages, 200 / 16);
  ASSERT_TRUE(store_->Put("bob", Resp(2), b.bytes, kTtl, b.state_bytes).ok());
  EXPECT_EQ(StoredPages(), 2 * pages);
  // Bob's write cost him all of it: nothing of Alice's counted as his.
  EXPECT_EQ(store_->usage("bob").bytes, store_->usage("alice").bytes);
  CheckpointStore* replica = Replica();
  for (auto [tenant, key] : {std::pair<std::string, std::string>{"alice", Resp(1)},
                             {"bob", Resp(2)}}) {
    auto got = replica->Get(tenant, key);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(**got == *a.bytes);
  }
  // Alice's record read by Bob (were he to name its key) does not exist for him.
  auto crossed = Replica()->Get("bob", Resp(1));
  EXPECT_TRUE(absl::IsNotFound(crossed.status())) << crossed.status();
}

TEST_P(CheckpointPagesTest, RecordsWrittenBeforePagesStillRead) {
  Record old = MakeRecord(0, FakeSnapshot(Model(), 100));
  auto looks_paged = std::make_shared<const std::string>("ATTNPREC and then anything");
  if (GetParam() == Backend::kMemory) {
    ASSERT_TRUE(store_->Put("alice", Resp(1), old.bytes, kTtl).ok());
  } else {
    // Written as a server before pages wrote it: the whole record under its key.
    ASSERT_TRUE(OpenDurable()->Put(Resp(1), *old.bytes, kTtl).ok());
  }
  ASSERT_TRUE(store_->Put("alice", Resp(2), looks_paged, kTtl).ok());
  for (auto [key, want] : {std::pair<std::string, std::shared_ptr<const std::string>>{
                               Resp(1), old.bytes},
                           {Resp(2), looks_paged}}) {
    auto got = store_->Get("alice", key);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(**got == *want);
    ASSERT_TRUE(store_->Renew(key, kTtl).ok());
  }
  // Bytes that say they end with a snapshot but do not are kept whole too.
  auto not_a_state = std::make_shared<const std::string>(1000, 'x');
  ASSERT_TRUE(store_->Put("alice", Resp(3), not_a_state, kTtl, 500).ok());
  EXPECT_TRUE(**store_->Get("alice", Resp(3)) == *not_a_state);
}

TEST_P(CheckpointPagesTest, AMissingPageMakesItsRecordAbsent) {
  if (GetParam() == Backend::kMemory) GTEST_SKIP() << "memory holds its pages itself";
  const std::string state = FakeSnapshot(Model(), 100);
  Record r = MakeRecord(0, state);
  ASSERT_TRUE(store_->Put("alice", Resp(1), r.bytes, kTtl, r.state_bytes).ok());
  absl::StatusOr<SplitState> split = SplitSnapshot("alice", state, kPageTarget);
  ASSERT_TRUE(split.ok());
  LosePage(split->pages[2].id);
  std::unique_ptr<CheckpointStore> replica = Open();  // nothing cached
  auto got = replica->Get("alice", Resp(1));
  EXPECT_TRUE(absl::IsNotFound(got.status())) << got.status();
  absl::Status renewed = replica->Renew(Resp(1), kTtl);
  EXPECT_TRUE(absl::IsNotFound(renewed)) << renewed;
  // Written again, the page is put back and the record reads.
  ASSERT_TRUE(replica->Put("alice", Resp(1), r.bytes, kTtl, r.state_bytes).ok());
  EXPECT_TRUE(**Open()->Get("alice", Resp(1)) == *r.bytes);
}

TEST_P(CheckpointPagesTest, DeletedRecordsGiveBackTheirPagesInMemory) {
  if (GetParam() != Backend::kMemory) GTEST_SKIP() << "durable pages expire by themselves";
  for (int turn = 0; turn < 5; ++turn) {
    Record r = MakeRecord(turn, FakeSnapshot(Model(), 50 * (turn + 1)));
    ASSERT_TRUE(store_->Put("alice", Resp(turn), r.bytes, kTtl, r.state_bytes).ok());
  }
  EXPECT_EQ(store_->memory_pages(), 250 / 16);
  for (int turn = 4; turn >= 1; --turn) ASSERT_TRUE(store_->Delete(Resp(turn)).ok());
  EXPECT_EQ(store_->memory_pages(), 50 / 16);
  EXPECT_TRUE(store_->Get("alice", Resp(0)).ok());
  clock_.Advance(2 * kTtl);
  EXPECT_TRUE(absl::IsNotFound(store_->Get("alice", Resp(0)).status()));
  EXPECT_EQ(store_->memory_pages(), 0);
  EXPECT_EQ(store_->memory_bytes_used(), 0);
  EXPECT_EQ(store_->usage("alice").bytes, 0);
}

// The quota counts what is new: a chain whose states sum past the quota fits when its
// pages are shared, and CheckRoom refuses ahead of a turn its estimate would not fit.
TEST_P(CheckpointPagesTest, QuotasCountNewPagesAndStubs) {
  const FakeModel model = Model();
  const int64_t final_bytes = int64_t(FakeSnapshot(model, 101 * 10).size());
  store_ = Open(/*tenant_max_bytes=*/final_bytes * 3 / 2);
  for (int turn = 0; turn < 10; ++turn) {
    Record r = MakeRecord(turn, FakeSnapshot(model, 101 * (turn + 1)));
    absl::Status put = store_->Put("alice", Resp(turn), r.bytes, kTtl, r.state_bytes);
    ASSERT_TRUE(put.ok()) << "turn " << turn << ": " << put;
  }
  EXPECT_TRUE(store_->CheckRoom("alice", final_bytes / 10).ok());
  absl::Status full = store_->CheckRoom("alice", final_bytes);
  EXPECT_TRUE(absl::IsResourceExhausted(full)) << full;
  EXPECT_THAT(full.message(), ::testing::HasSubstr("--tenant_response_bytes"));
  EXPECT_TRUE(store_->CheckRoom("bob", final_bytes).ok());
  // Another conversation's whole state does not fit beside the first.
  Record other = MakeRecord(0, FakeSnapshot(Model(/*seed=*/2), 101 * 10));
  EXPECT_TRUE(absl::IsResourceExhausted(
      store_->Put("alice", Resp(99), other.bytes, kTtl, other.state_bytes)));
}

// Replicas writing records of one conversation at once race to put the same pages:
// each page is written once (put if absent), and every record reads back whole.
TEST_P(CheckpointPagesTest, ConcurrentWritersOfOneConversationShareItsPages) {
  const FakeModel model = Model();
  constexpr int kWriters = 4, kTurns = 5;
  std::vector<Record> records;
  for (int i = 0; i < kWriters * kTurns; ++i) {
    records.push_back(MakeRecord(i, FakeSnapshot(model, 64 + 16 * (i % kTurns) + i)));
  }
  std::vector<CheckpointStore*> writers;
  for (int w = 0; w < kWriters; ++w) writers.push_back(Replica());
  std::vector<std::thread> threads;
  std::vector<absl::Status> results(kWriters);
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      for (int t = 0; t < kTurns; ++t) {
        const int i = t * kWriters + w;
        absl::Status s = writers[w]->Put("alice", Resp(i), records[i].bytes, kTtl,
                                         records[i].state_bytes);
        if (!s.ok() && results[w].ok()) results[w] = s;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << s;
  // Every state starts with the same 64 + rows: 4 pages in common, then its own.
  std::set<std::string> pages;
  for (const Record& r : records) {
    absl::StatusOr<SplitState> split = SplitSnapshot(
        "alice", std::string_view(*r.bytes).substr(r.bytes->size() - r.state_bytes),
        kPageTarget);
    ASSERT_TRUE(split.ok());
    for (const StatePage& page : split->pages) pages.insert(page.id);
  }
  EXPECT_EQ(StoredPages(), int(pages.size()));
  CheckpointStore* reader = Replica();
  for (int i = 0; i < kWriters * kTurns; ++i) {
    auto got = reader->Get("alice", Resp(i));
    ASSERT_TRUE(got.ok()) << i << ": " << got.status();
    EXPECT_TRUE(**got == *records[i].bytes) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, CheckpointPagesTest,
                         ::testing::Values(Backend::kMemory, Backend::kDir, Backend::kRedis),
                         BackendName);

}  // namespace
}  // namespace attnserve::store
