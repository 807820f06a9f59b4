// Behaviour every SnapshotStore backend shares, run against a real directory and a real
// redis-server; and OpenSnapshotStore's parsing of --session_store values.
#include "server/store/snapshot_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/store/store_testing.h"

namespace attnserve::store {
namespace {

using ::attnserve::store::testing::Backend;
using ::attnserve::store::testing::BackendName;
using ::attnserve::store::testing::FreeLoopbackPort;
using ::attnserve::store::testing::TempDir;
using ::testing::HasSubstr;

constexpr char kId[] = "0123456789abcdef0123456789abcdef";
constexpr absl::Duration kTtl = absl::Hours(1);

using SnapshotStoreTest = ::attnserve::store::testing::BackendTest;

TEST_P(SnapshotStoreTest, NameIsTheSpec) { EXPECT_EQ(store_->name(), spec_); }

TEST_P(SnapshotStoreTest, RoundTripsEveryByteValueIncludingNul) {
  std::string bytes;
  for (int i = 0; i < 3 * 256; ++i) bytes.push_back(static_cast<char>(i % 256));
  bytes.append(std::string(5, '\0'));
  ASSERT_TRUE(store_->Put(kId, bytes, kTtl).ok());
  auto got = store_->Get(kId);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, bytes);
}

TEST_P(SnapshotStoreTest, RoundTripsEmptySnapshot) {
  ASSERT_TRUE(store_->Put(kId, "", kTtl).ok());
  auto got = store_->Get(kId);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "");
}

TEST_P(SnapshotStoreTest, RoundTripsFourMebibytes) {
  std::mt19937 random(42);
  std::string bytes(4 << 20, '\0');
  for (char& c : bytes) c = static_cast<char>(random());
  absl::Status put = store_->Put(kId, bytes, kTtl);
  ASSERT_TRUE(put.ok()) << put;
  auto got = store_->Get(kId);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == bytes) << "got " << got->size() << " bytes";
}

TEST_P(SnapshotStoreTest, PutReplacesEarlierSnapshot) {
  ASSERT_TRUE(store_->Put(kId, std::string(1000, 'a'), kTtl).ok());
  ASSERT_TRUE(store_->Put(kId, "short", kTtl).ok());
  EXPECT_EQ(store_->Get(kId).value_or("error"), "short");
}

TEST_P(SnapshotStoreTest, KeepsSessionsApart) {
  ASSERT_TRUE(store_->Put("a", "first", kTtl).ok());
  ASSERT_TRUE(store_->Put("b", "second", kTtl).ok());
  EXPECT_EQ(store_->Get("a").value_or("error"), "first");
  EXPECT_EQ(store_->Get("b").value_or("error"), "second");
}

TEST_P(SnapshotStoreTest, DeleteRemovesSnapshotAndIsIdempotent) {
  ASSERT_TRUE(store_->Put(kId, "x", kTtl).ok());
  ASSERT_TRUE(store_->Put("other", "y", kTtl).ok());
  EXPECT_TRUE(store_->Delete(kId).ok());
  EXPECT_EQ(store_->Get(kId).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(store_->Delete(kId).ok());
  EXPECT_EQ(store_->Get("other").value_or("error"), "y");
}

TEST_P(SnapshotStoreTest, GetOfUnknownIdIsNotFound) {
  absl::Status status = store_->Get(kId).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(kId));
}

TEST_P(SnapshotStoreTest, RejectsInvalidIds) {
  const std::string kInvalid[] = {"",
                                  "../etc/passwd",
                                  "a/b",
                                  ".hidden",
                                  "a b",
                                  "a.snap",
                                  "caf\xc3\xa9",
                                  std::string("a\0b", 3),
                                  std::string(129, 'a')};
  for (const std::string& id : kInvalid) {
    SCOPED_TRACE(id);
    EXPECT_EQ(store_->Put(id, "x", kTtl).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(store_->Get(id).status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(store_->Delete(id).code(), absl::StatusCode::kInvalidArgument);
  }
  const std::string longest = std::string(126, 'Z') + "_-";
  EXPECT_TRUE(store_->Put(longest, "x", kTtl).ok());
  EXPECT_EQ(store_->Get(longest).value_or("error"), "x");
}

TEST_P(SnapshotStoreTest, RejectsNonPositiveTtl) {
  EXPECT_EQ(store_->Put(kId, "x", absl::ZeroDuration()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->Put(kId, "x", -absl::Seconds(1)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->Get(kId).status().code(), absl::StatusCode::kNotFound);
}

TEST_P(SnapshotStoreTest, RemoveExpiredFindsNothingFresh) {
  ASSERT_TRUE(store_->Put(kId, "x", kTtl).ok());
  EXPECT_EQ(store_->RemoveExpired().value_or(-1), 0);
  EXPECT_EQ(store_->Get(kId).value_or("error"), "x");
}

// A value for one id whose length and content both follow from its first byte, so a
// reader can tell a whole value from a mix of two writes or a partial one.
std::string SelfCheckingValue(int writer, int round) {
  const char tag = static_cast<char>('A' + (writer * 7 + round) % 26);
  return std::string(64 * 1024 + 509 * (tag - 'A'), tag);
}
bool IsWholeValue(const std::string& v) {
  return !v.empty() && v.size() == 64 * 1024 + 509 * static_cast<size_t>(v[0] - 'A') &&
         v.find_first_not_of(v[0]) == std::string::npos;
}

TEST_P(SnapshotStoreTest, ConcurrentPutsAndGetsNeverSeeATornValue) {
  constexpr int kThreads = 4;
  constexpr int kRounds = 25;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([this, t] {
      const std::string own = "own-" + std::to_string(t);
      for (int round = 0; round < kRounds; ++round) {
        const std::string value = SelfCheckingValue(t, round);
        EXPECT_TRUE(store_->Put("shared", value, kTtl).ok());
        EXPECT_TRUE(store_->Put(own, value, kTtl).ok());
        auto shared = store_->Get("shared");
        ASSERT_TRUE(shared.ok()) << shared.status();
        EXPECT_TRUE(IsWholeValue(*shared)) << "torn shared value of " << shared->size();
        auto mine = store_->Get(own);
        ASSERT_TRUE(mine.ok()) << mine.status();
        EXPECT_TRUE(*mine == value) << "own value of " << mine->size() << " bytes differs";
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  auto last = store_->Get("shared");
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_TRUE(IsWholeValue(*last));
}

INSTANTIATE_TEST_SUITE_P(Backends, SnapshotStoreTest,
                         ::testing::Values(Backend::kDir, Backend::kRedis, Backend::kMemory),
                         BackendName);

TEST(OpenSnapshotStoreTest, RejectsOtherSpecsNamingTheAcceptedForms) {
  const std::string kBad[] = {"",
                              "memory",
                              "foo://",
                              "dir:",
                              "file:/tmp/x",
                              "redis://",
                              "redis://host",
                              "redis://:6379",
                              "redis://host:",
                              "redis://host:0",
                              "redis://host:65536",
                              "redis://host:+80",
                              "redis://host:6379 ",
                              "redis://host:6379/",
                              "redis://host:6379/x",
                              "redis://host:6379/-1",
                              "redis://[::1:6379",
                              "REDIS://host:6379"};
  for (const std::string& spec : kBad) {
    SCOPED_TRACE(spec);
    auto store = OpenSnapshotStore(spec);
    ASSERT_FALSE(store.ok());
    EXPECT_EQ(store.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(store.status().message()), HasSubstr("dir:PATH"));
    EXPECT_THAT(std::string(store.status().message()), HasSubstr("redis://HOST:PORT"));
  }
}

TEST(OpenSnapshotStoreTest, OpensRedisWithoutAServerAndSaysWhyItCannotWrite) {
  const std::string spec = "redis://127.0.0.1:" + std::to_string(FreeLoopbackPort());
  auto store = OpenSnapshotStore(spec);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->name(), spec);
  absl::Status put = (*store)->Put(kId, "x", kTtl);
  EXPECT_EQ(put.code(), absl::StatusCode::kUnavailable) << put;
  EXPECT_EQ(put.message(), "session store " + spec + ": Connection refused");
  EXPECT_EQ((*store)->Get(kId).status().code(), absl::StatusCode::kUnavailable);
}

TEST(OpenSnapshotStoreTest, NamesRedisStoresByAddressAndDatabase) {
  EXPECT_EQ(OpenSnapshotStore("redis://localhost:6379/2").value()->name(),
            "redis://localhost:6379/2");
  EXPECT_EQ(OpenSnapshotStore("redis://localhost:6379/0").value()->name(),
            "redis://localhost:6379");
  EXPECT_EQ(OpenSnapshotStore("redis://[::1]:6380").value()->name(), "redis://[::1]:6380");
}

TEST(OpenSnapshotStoreTest, CreatesMissingDirectoryWithParents) {
  TempDir dir;
  const std::string path = dir.path() + "/a/b/snapshots";
  auto store = OpenSnapshotStore("dir:" + path);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->name(), "dir:" + path);
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_TRUE(std::filesystem::is_empty(path)) << "the write probe was left behind";
}

TEST(OpenSnapshotStoreTest, RefusesAnExistingFile) {
  TempDir dir;
  const std::string file = dir.path() + "/file";
  std::ofstream(file) << "not a directory";
  auto store = OpenSnapshotStore("dir:" + file);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(store.status().message()), HasSubstr("is not a directory"));
}

TEST(OpenSnapshotStoreTest, FailsWhenTheDirectoryCannotBeCreated) {
  TempDir dir;
  const std::string file = dir.path() + "/file";
  std::ofstream(file) << "in the way";
  auto store = OpenSnapshotStore("dir:" + file + "/snapshots");
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(store.status().message()),
              HasSubstr("session store dir:" + file + "/snapshots: "));
  EXPECT_THAT(std::string(store.status().message()), HasSubstr("Not a directory"));
}

}  // namespace
}  // namespace attnserve::store
