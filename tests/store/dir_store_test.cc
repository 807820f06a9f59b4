#include "server/store/dir_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "tests/store/store_testing.h"

namespace attnserve::store {
namespace {

using ::attnserve::store::testing::ManualClock;
using ::attnserve::store::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

std::set<std::string> ListDir(const std::string& path) {
  std::set<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(path)) {
    names.insert(entry.path().filename().string());
  }
  return names;
}

class DirSnapshotStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = DirSnapshotStore::Create(path_, clock_.AsNowFn());
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }

  TempDir dir_;
  const std::string path_ = dir_.path() + "/snapshots";
  ManualClock clock_;
  std::unique_ptr<DirSnapshotStore> store_;
};

TEST_F(DirSnapshotStoreTest, StoresOnePrivateFilePerSessionAndNoTempFiles) {
  ASSERT_TRUE(store_->Put("a", "first", absl::Hours(1)).ok());
  ASSERT_TRUE(store_->Put("a", "second", absl::Hours(1)).ok());
  ASSERT_TRUE(store_->Put("b", "other", absl::Hours(1)).ok());
  EXPECT_THAT(ListDir(path_), UnorderedElementsAre("a.snap", "b.snap"));
  EXPECT_EQ(store_->SnapshotPath("a"), path_ + "/a.snap");
  std::ifstream file(store_->SnapshotPath("a"));
  std::string content((std::istreambuf_iterator<char>(file)),
                      std::istreambuf_iterator<char>());
  EXPECT_EQ(content, "second");
  struct stat st;
  ASSERT_EQ(stat(store_->SnapshotPath("a").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(DirSnapshotStoreTest, FileMtimeIsTheExpiryTime) {
  ASSERT_TRUE(store_->Put("a", "x", absl::Minutes(10)).ok());
  struct stat st;
  ASSERT_EQ(stat(store_->SnapshotPath("a").c_str(), &st), 0);
  EXPECT_EQ(absl::TimeFromTimespec(st.st_mtim), clock_.Now() + absl::Minutes(10));
}

TEST_F(DirSnapshotStoreTest, GetDeletesSnapshotOnceItsTtlHasPassed) {
  ASSERT_TRUE(store_->Put("a", "x", absl::Minutes(1)).ok());
  clock_.Advance(absl::Minutes(1) - absl::Milliseconds(1));
  EXPECT_EQ(store_->Get("a").value_or("error"), "x");
  clock_.Advance(absl::Milliseconds(1));
  absl::Status status = store_->Get("a").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("expired"));
  EXPECT_TRUE(ListDir(path_).empty());
}

TEST_F(DirSnapshotStoreTest, PutRestartsTheTtl) {
  ASSERT_TRUE(store_->Put("a", "old", absl::Minutes(1)).ok());
  clock_.Advance(absl::Seconds(50));
  ASSERT_TRUE(store_->Put("a", "new", absl::Minutes(1)).ok());
  clock_.Advance(absl::Seconds(50));
  EXPECT_EQ(store_->Get("a").value_or("error"), "new");
}

TEST_F(DirSnapshotStoreTest, RemoveExpiredDeletesOnlyExpiredSnapshots) {
  ASSERT_TRUE(store_->Put("short1", "x", absl::Minutes(1)).ok());
  ASSERT_TRUE(store_->Put("short2", "x", absl::Minutes(2)).ok());
  ASSERT_TRUE(store_->Put("long", "y", absl::Minutes(10)).ok());
  std::ofstream(path_ + "/notes.txt") << "not a snapshot";
  std::ofstream(path_ + "/bad.id.snap") << "not a session id";
  EXPECT_EQ(store_->RemoveExpired().value_or(-1), 0);
  clock_.Advance(absl::Minutes(2));
  EXPECT_EQ(store_->RemoveExpired().value_or(-1), 2);
  EXPECT_EQ(store_->RemoveExpired().value_or(-1), 0);
  EXPECT_THAT(ListDir(path_),
              UnorderedElementsAre("long.snap", "notes.txt", "bad.id.snap"));
  EXPECT_EQ(store_->Get("long").value_or("error"), "y");
}

TEST_F(DirSnapshotStoreTest, RemoveExpiredDeletesTempFilesOnlyOnceStale) {
  const std::string temp = path_ + "/.a.snap.tmp.0123456789abcdef";
  std::ofstream(temp) << "a crashed Put";
  EXPECT_EQ(store_->RemoveExpired().value_or(-1), 0);
  EXPECT_TRUE(std::filesystem::exists(temp)) << "a Put in progress was deleted";
  // The clock started before the file was written, so the file is not yet stale here.
  clock_.Advance(DirSnapshotStore::kStaleTempAge - absl::Seconds(1));
  EXPECT_EQ(store_->RemoveExpired().value_or(-1), 0);
  EXPECT_TRUE(std::filesystem::exists(temp)) << "a Put in progress was deleted";
  clock_.Advance(absl::Seconds(2));
  EXPECT_EQ(store_->RemoveExpired().value_or(-1), 0);  // temp files are not snapshots
  EXPECT_FALSE(std::filesystem::exists(temp));
}

// Restores a resource limit and a signal disposition when the test ends, however it ends.
class ScopedFileSizeLimit {
 public:
  explicit ScopedFileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &old_limit_);
    old_handler_ = signal(SIGXFSZ, SIG_IGN);  // so writes fail with EFBIG instead
    struct rlimit limit = old_limit_;
    limit.rlim_cur = bytes;
    setrlimit(RLIMIT_FSIZE, &limit);
  }
  ~ScopedFileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &old_limit_);
    signal(SIGXFSZ, old_handler_);
  }

 private:
  struct rlimit old_limit_;
  sighandler_t old_handler_;
};

TEST_F(DirSnapshotStoreTest, FailedWriteRemovesTempFileAndKeepsOldSnapshot) {
  ASSERT_TRUE(store_->Put("a", "old", absl::Hours(1)).ok());
  absl::Status status;
  {
    ScopedFileSizeLimit limit(1 << 20);
    status = store_->Put("a", std::string(2 << 20, 'n'), absl::Hours(1));
  }
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("session store dir:" + path_ + ": "));
  EXPECT_THAT(std::string(status.message()), HasSubstr("File too large"));
  EXPECT_THAT(ListDir(path_), UnorderedElementsAre("a.snap"));
  EXPECT_EQ(store_->Get("a").value_or("error"), "old");
}

// Tests run as root, where permission bits stop nothing: put a file where the directory
// was, so every access fails with ENOTDIR, then bring the directory back.
TEST_F(DirSnapshotStoreTest, UnusableDirectoryIsUnavailableAndRecovers) {
  ASSERT_TRUE(store_->Put("a", "kept", absl::Hours(1)).ok());
  const std::string away = path_ + ".away";
  ASSERT_EQ(rename(path_.c_str(), away.c_str()), 0);
  std::ofstream(path_) << "in the way";

  absl::Status put = store_->Put("b", "x", absl::Hours(1));
  EXPECT_EQ(put.code(), absl::StatusCode::kUnavailable) << put;
  EXPECT_THAT(std::string(put.message()), HasSubstr("session store dir:" + path_ + ": "));
  EXPECT_THAT(std::string(put.message()), HasSubstr("Not a directory"));
  EXPECT_EQ(store_->Get("a").status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(store_->Delete("a").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(store_->RemoveExpired().status().code(), absl::StatusCode::kUnavailable);

  ASSERT_EQ(unlink(path_.c_str()), 0);
  ASSERT_EQ(rename(away.c_str(), path_.c_str()), 0);
  EXPECT_EQ(store_->Get("a").value_or("error"), "kept");
  EXPECT_TRUE(store_->Put("b", "x", absl::Hours(1)).ok());
  EXPECT_THAT(ListDir(path_), UnorderedElementsAre("a.snap", "b.snap"));
}

TEST_F(DirSnapshotStoreTest, MissingDirectoryIsUnavailableNotNotFound) {
  ASSERT_EQ(rename(path_.c_str(), (path_ + ".away").c_str()), 0);
  absl::Status get = store_->Get("a").status();
  EXPECT_EQ(get.code(), absl::StatusCode::kUnavailable) << get;
  EXPECT_THAT(std::string(get.message()), HasSubstr("No such file or directory"));
  EXPECT_EQ(store_->Delete("a").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(store_->Put("a", "x", absl::Hours(1)).code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace attnserve::store
