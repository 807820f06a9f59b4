#include "server/store/dir_store.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/store/store_testing.h"

namespace attnserve::store {
namespace {

using ::attnserve::store::testing::ManualClock;
using ::attnserve::store::testing::RunCounterWriter;
using ::attnserve::store::testing::TempDir;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

constexpr absl::Duration kTtl = absl::Hours(1);

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
    auto store = DirSnapshotStore::Create(path_, &clock_);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }

  TempDir dir_;
  const std::string path_ = dir_.path() + "/snapshots";
  ManualClock clock_;
  std::unique_ptr<DirSnapshotStore> store_;
};

std::string ReadFile(const std::string& path) {
  std::ifstream file(path);
  return std::string((std::istreambuf_iterator<char>(file)),
                     std::istreambuf_iterator<char>());
}

TEST_F(DirSnapshotStoreTest, StoresPrivateSnapshotAndGenerationFilesAndNoOthers) {
  ASSERT_TRUE(store_->Put("a", "first", absl::Hours(1)).ok());
  ASSERT_TRUE(store_->Put("a", "second", absl::Hours(1)).ok());
  ASSERT_TRUE(store_->Put("b", "other", absl::Hours(1)).ok());
  EXPECT_THAT(ListDir(path_), UnorderedElementsAre("a.snap", "a.gen", "b.snap", "b.gen"));
  EXPECT_EQ(store_->SnapshotPath("a"), path_ + "/a.snap");
  EXPECT_EQ(store_->GenerationPath("a"), path_ + "/a.gen");
  EXPECT_EQ(ReadFile(store_->SnapshotPath("a")), "second");
  EXPECT_EQ(ReadFile(store_->GenerationPath("a")), "2");
  for (const std::string& file : {store_->SnapshotPath("a"), store_->GenerationPath("a")}) {
    struct stat st;
    ASSERT_EQ(stat(file.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u) << file;
  }
}

TEST_F(DirSnapshotStoreTest, FileMtimeIsTheExpiryTimeOfSnapshotAndGeneration) {
  ASSERT_TRUE(store_->Put("a", "x", absl::Minutes(10)).ok());
  for (const std::string& file : {store_->SnapshotPath("a"), store_->GenerationPath("a")}) {
    struct stat st;
    ASSERT_EQ(stat(file.c_str(), &st), 0);
    EXPECT_EQ(absl::TimeFromTimespec(st.st_mtim), clock_.Now() + absl::Minutes(10)) << file;
  }
}

TEST_F(DirSnapshotStoreTest, GetDeletesSnapshotOnceItsTtlHasPassed) {
  ASSERT_TRUE(store_->Put("a", "x", absl::Minutes(1)).ok());
  clock_.Advance(absl::Minutes(1) - absl::Milliseconds(1));
  EXPECT_EQ(store_->Get("a").value_or("error"), "x");
  clock_.Advance(absl::Milliseconds(1));
  absl::Status status = store_->Get("a").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("expired"));
  EXPECT_TRUE(ListDir(path_).empty());  // the generation went with it
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
              UnorderedElementsAre("long.snap", "long.gen", "notes.txt", "bad.id.snap"));
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
  EXPECT_THAT(ListDir(path_), UnorderedElementsAre("a.snap", "a.gen"));
  auto got = store_->GetWithGeneration("a");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, std::make_pair(std::string("old"), int64_t{1}));
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
  EXPECT_THAT(ListDir(path_), UnorderedElementsAre("a.snap", "a.gen", "b.snap", "b.gen"));
}

TEST_F(DirSnapshotStoreTest, MissingDirectoryIsUnavailableNotNotFound) {
  ASSERT_EQ(rename(path_.c_str(), (path_ + ".away").c_str()), 0);
  absl::Status get = store_->Get("a").status();
  EXPECT_EQ(get.code(), absl::StatusCode::kUnavailable) << get;
  EXPECT_THAT(std::string(get.message()), HasSubstr("No such file or directory"));
  EXPECT_EQ(store_->Delete("a").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(store_->Put("a", "x", absl::Hours(1)).code(), absl::StatusCode::kUnavailable);
}

TEST_F(DirSnapshotStoreTest, LeaseIsALockFileRemovedOnRelease) {
  auto grant = store_->AcquireLease("a", kTtl);
  ASSERT_TRUE(grant.ok()) << grant.status();
  EXPECT_EQ(store_->LeasePath("a"), path_ + "/a.lock");
  EXPECT_THAT(ListDir(path_), UnorderedElementsAre("a.lock"));
  ASSERT_EQ(store_->PutFenced("a", "x", kTtl, grant->token, 0).value_or(-1), 1);
  ASSERT_TRUE(store_->GetWithGeneration("a").ok());
  EXPECT_THAT(ListDir(path_), UnorderedElementsAre("a.lock", "a.snap", "a.gen"))
      << "a gate (.rw) was left behind";
  ASSERT_TRUE(store_->ReleaseLease("a", grant->token).ok());
  EXPECT_THAT(ListDir(path_), UnorderedElementsAre("a.snap", "a.gen"));
  ASSERT_TRUE(store_->Delete("a").ok());
  EXPECT_TRUE(ListDir(path_).empty());
}

TEST_F(DirSnapshotStoreTest, LeaseDoesNotExpireWhileItsHolderLives) {
  auto grant = store_->AcquireLease("a", absl::Seconds(1));
  ASSERT_TRUE(grant.ok()) << grant.status();
  clock_.Advance(absl::Hours(2));
  auto other = DirSnapshotStore::Create(path_, &clock_);
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ((*other)->AcquireLease("a", absl::Seconds(1)).status().code(),
            absl::StatusCode::kAborted);
  EXPECT_TRUE(store_->RenewLease("a", grant->token, absl::Seconds(1)).ok());
  EXPECT_EQ(store_->PutFenced("a", "x", kTtl, grant->token, 0).value_or(-1), 1);
}

TEST_F(DirSnapshotStoreTest, OnlyTheStoreThatGrantedALeaseCanUseItsToken) {
  auto grant = store_->AcquireLease("a", kTtl);
  ASSERT_TRUE(grant.ok()) << grant.status();
  auto other = DirSnapshotStore::Create(path_, &clock_);
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ((*other)->PutFenced("a", "x", kTtl, grant->token, 0).status().code(),
            absl::StatusCode::kAborted);
  EXPECT_EQ((*other)->RenewLease("a", grant->token, kTtl).code(),
            absl::StatusCode::kAborted);
  EXPECT_TRUE((*other)->ReleaseLease("a", grant->token).ok());
  EXPECT_EQ((*other)->AcquireLease("a", kTtl).status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(store_->Get("a").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(DirSnapshotStoreTest, DestroyingTheStoreReleasesItsLeases) {
  ASSERT_TRUE(store_->AcquireLease("a", kTtl).ok());
  ASSERT_TRUE(store_->AcquireLease("b", kTtl).ok());
  store_.reset();
  EXPECT_TRUE(ListDir(path_).empty());
  auto other = DirSnapshotStore::Create(path_, &clock_);
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_TRUE((*other)->AcquireLease("a", kTtl).ok());
}

TEST_F(DirSnapshotStoreTest, GenerationExpiresWithTheSnapshot) {
  ASSERT_TRUE(store_->Put("a", "x", absl::Minutes(1)).ok());
  ASSERT_TRUE(store_->Put("a", "y", absl::Minutes(1)).ok());
  EXPECT_EQ(store_->AcquireLease("b", kTtl).value_or(LeaseGrant{"", -1}).generation, 0);
  clock_.Advance(absl::Minutes(1));
  auto grant = store_->AcquireLease("a", kTtl);
  ASSERT_TRUE(grant.ok()) << grant.status();
  EXPECT_EQ(grant->generation, 0);
  EXPECT_EQ(store_->GetWithGeneration("a").status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(ListDir(path_), UnorderedElementsAre("a.lock", "b.lock"));
  EXPECT_EQ(store_->PutFenced("a", "z", kTtl, grant->token, 0).value_or(-1), 1);
}

TEST_F(DirSnapshotStoreTest, SnapshotWithoutAGenerationFileIsGenerationZero) {
  ASSERT_TRUE(store_->Put("a", "from an older store", kTtl).ok());
  ASSERT_EQ(unlink(store_->GenerationPath("a").c_str()), 0);
  EXPECT_THAT(store_->GetWithGeneration("a").value_or(std::make_pair("error", -1)),
              Pair("from an older store", 0));
  auto grant = store_->AcquireLease("a", kTtl);
  ASSERT_TRUE(grant.ok()) << grant.status();
  EXPECT_EQ(grant->generation, 0);
  EXPECT_EQ(store_->PutFenced("a", "new", kTtl, grant->token, 0).value_or(-1), 1);
}

TEST_F(DirSnapshotStoreTest, DamagedGenerationFileIsUnavailable) {
  ASSERT_TRUE(store_->Put("a", "x", kTtl).ok());
  {
    std::ofstream damaged(store_->GenerationPath("a"), std::ios::trunc);
    damaged << "junk";
  }
  // Rewriting the file set its mtime, which is its expiry, to the real now: move it back
  // to the future.
  struct timespec times[2] = {{0, UTIME_OMIT}, absl::ToTimespec(clock_.Now() + kTtl)};
  ASSERT_EQ(utimensat(AT_FDCWD, store_->GenerationPath("a").c_str(), times, 0), 0);
  absl::Status status = store_->GetWithGeneration("a").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("a.gen holds no generation"));
  EXPECT_EQ(store_->AcquireLease("a", kTtl).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(store_->Put("a", "y", kTtl).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(store_->Get("a").value_or("error"), "x");
}

TEST_F(DirSnapshotStoreTest, RemoveExpiredSweepsOldUnlockedLockFilesOnly) {
  std::ofstream(path_ + "/crashed.lock");
  std::ofstream(path_ + "/crashed.rw");
  ASSERT_TRUE(store_->AcquireLease("held", kTtl).ok());
  ASSERT_TRUE(store_->Put("orphan", "x", absl::Minutes(1)).ok());
  ASSERT_EQ(unlink(store_->SnapshotPath("orphan").c_str()), 0);
  EXPECT_EQ(store_->RemoveExpired().value_or(-1), 0);
  EXPECT_THAT(ListDir(path_), UnorderedElementsAre("crashed.lock", "crashed.rw",
                                                   "held.lock", "orphan.gen"));
  clock_.Advance(DirSnapshotStore::kStaleTempAge + absl::Seconds(1));
  EXPECT_EQ(store_->RemoveExpired().value_or(-1), 0);  // none of them is a snapshot
  EXPECT_THAT(ListDir(path_), UnorderedElementsAre("held.lock"));
  EXPECT_EQ(store_->AcquireLease("held", kTtl).status().code(), absl::StatusCode::kAborted);
}

// A forked child process, killed (SIGKILL) and reaped when this goes out of scope, so a
// failing test leaves none behind.
class Child {
 public:
  explicit Child(const std::function<int()>& body) {
    const pid_t parent = getpid();
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1);
      // _exit: no atexit handlers or destructors of the parent's objects (its TempDir).
      _exit(body());
    }
  }
  ~Child() {
    if (pid_ > 0) kill(pid_, SIGKILL);
    Wait();
  }
  pid_t pid() const { return pid_; }
  // Reaps the child; its wait status, or -1 if there is none.
  int Wait() {
    if (pid_ <= 0) return -1;
    int status;
    while (waitpid(pid_, &status, 0) < 0) {
      if (errno != EINTR) return -1;
    }
    pid_ = -1;
    return status;
  }

 private:
  pid_t pid_ = -1;
};

// A pipe used to pass one byte from one process to the other.
struct Signal {
  Signal() { EXPECT_EQ(pipe2(fds, O_CLOEXEC), 0); }
  ~Signal() {
    close(fds[0]);
    close(fds[1]);
  }
  void Send(char byte) { EXPECT_EQ(write(fds[1], &byte, 1), 1); }
  char Receive() {
    char byte = 0;
    return read(fds[0], &byte, 1) == 1 ? byte : 0;
  }
  int fds[2] = {-1, -1};
};

TEST_F(DirSnapshotStoreTest, LeaseOfAKilledProcessIsFreeAtOnce) {
  Signal ready;
  Child holder([&] {
    auto store = DirSnapshotStore::Create(path_);
    const bool ok = store.ok() && (*store)->AcquireLease("a", absl::Seconds(1)).ok();
    ready.Send(ok ? 'y' : 'n');
    pause();  // until killed
    return 0;
  });
  ASSERT_GT(holder.pid(), 0);
  ASSERT_EQ(ready.Receive(), 'y');
  absl::Status held = store_->AcquireLease("a", kTtl).status();
  EXPECT_EQ(held.code(), absl::StatusCode::kAborted) << held;
  EXPECT_EQ(held.message(), "session a is leased by another writer");

  ASSERT_EQ(kill(holder.pid(), SIGKILL), 0);
  const int status = holder.Wait();
  ASSERT_TRUE(WIFSIGNALED(status));
  auto grant = store_->AcquireLease("a", kTtl);
  ASSERT_TRUE(grant.ok()) << grant.status();
  EXPECT_EQ(store_->PutFenced("a", "x", kTtl, grant->token, 0).value_or(-1), 1);
}

// The one-writer race across processes: a child process and threads in this one, each with
// its own store object on the directory.
TEST_F(DirSnapshotStoreTest, ProcessesSharingTheDirectoryNeverLoseAWrite) {
  constexpr int kThreads = 3;
  constexpr int kRounds = 200;
  Signal go;
  Child child([&] {
    if (go.Receive() != 'g') return 2;
    auto store = DirSnapshotStore::Create(path_);
    absl::Status status =
        store.ok() ? RunCounterWriter(**store, "a", kRounds) : store.status();
    if (!status.ok()) fprintf(stderr, "child writer: %s\n", status.ToString().c_str());
    return status.ok() ? 0 : 1;
  });
  ASSERT_GT(child.pid(), 0);
  std::vector<std::unique_ptr<DirSnapshotStore>> stores;
  for (int t = 0; t < kThreads; ++t) {
    auto store = DirSnapshotStore::Create(path_);
    ASSERT_TRUE(store.ok()) << store.status();
    stores.push_back(*std::move(store));
  }
  std::vector<absl::Status> results(kThreads);
  std::vector<int> handoffs(kThreads);
  std::vector<std::thread> threads;
  go.Send('g');
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back(
        [&, t] { results[t] = RunCounterWriter(*stores[t], "a", kRounds, &handoffs[t]); });
  }
  for (std::thread& thread : threads) thread.join();
  for (const absl::Status& result : results) EXPECT_TRUE(result.ok()) << result;
  // Each writer counts its first round as a handoff; more than that means the threads
  // took turns (one may still run all its rounds alone on a loaded machine).
  int total_handoffs = 0;
  for (int h : handoffs) total_handoffs += h;
  EXPECT_GT(total_handoffs, kThreads) << "the writers never met";
  const int status = child.Wait();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "wait status " << status;
  const int total = (kThreads + 1) * kRounds;
  EXPECT_THAT(store_->GetWithGeneration("a").value_or(std::make_pair("error", -1)),
              Pair(absl::StrCat(total), total));
  EXPECT_THAT(ListDir(path_), Not(Contains("a.lock")));
}

}  // namespace
}  // namespace attnserve::store
