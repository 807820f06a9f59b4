// Real parts for the store tests: a temporary directory, a manual clock, a private
// redis-server (Debian's /usr/bin/redis-server) on a free loopback port, a fixture over
// both backends, and the writer loop of the one-writer race tests.
#pragma once

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>
#include <sys/types.h>

#include <memory>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/common/clock.h"
#include "server/store/memory_store.h"
#include "server/store/snapshot_store.h"

namespace attnserve::store::testing {

// A fresh directory under $TEST_TMPDIR (or /tmp), removed with everything in it on
// destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A clock that moves only when told to, starting at the real time now (so file ctimes,
// which the kernel stamps, compare sensibly with it). Thread-safe.
class ManualClock : public attnserve::ManualClock {
 public:
  ManualClock() : attnserve::ManualClock(absl::Now()) {}
};

// A loopback TCP port that nothing listened on a moment ago.
int FreeLoopbackPort();

// A redis-server child process without persistence, its files in a directory of its own.
// Stop/Start/Pause/Resume let tests take it down, bring it back on the same port, or make
// it hang.
class RedisServer {
 public:
  static constexpr char kBinary[] = "/usr/bin/redis-server";

  // Starts a server on a free loopback port and returns once it answers PING.
  // FAILED_PRECONDITION if kBinary is missing; UNAVAILABLE if it does not come up
  // within 5 s (with its log).
  static absl::StatusOr<std::unique_ptr<RedisServer>> Start();
  ~RedisServer();  // kills the server

  int port() const { return port_; }
  // "redis://127.0.0.1:PORT", for OpenSnapshotStore.
  std::string spec() const;

  // Kills the server (SIGKILL) and reaps it; a no-op if it is not running.
  void Stop();
  // Starts it again on the same port, returning once it answers PING.
  absl::Status Restart();
  // SIGSTOP / SIGCONT: the server keeps its connections but stops answering.
  void Pause();
  void Resume();

 private:
  RedisServer() = default;
  absl::Status Launch();
  absl::Status WaitUntilReady();

  TempDir dir_;
  int port_ = 0;
  pid_t pid_ = -1;
};

using RedisContextPtr = std::unique_ptr<redisContext, void (*)(redisContext*)>;
using RedisReplyPtr = std::unique_ptr<redisReply, void (*)(void*)>;

// A raw hiredis connection to 127.0.0.1:`port`, for looking behind a store's back. Null
// context on failure (the test then fails on use).
RedisContextPtr ConnectRaw(int port);
// Runs a printf-style command (hiredis formatting) on `context`; a null reply on I/O
// errors.
RedisReplyPtr RawCommand(redisContext* context, const char* format, ...);

enum class Backend { kDir, kRedis, kMemory };
void PrintTo(Backend backend, std::ostream* os);
// "Dir" or "Redis", for INSTANTIATE_TEST_SUITE_P.
std::string BackendName(const ::testing::TestParamInfo<Backend>& info);

// A fixture with `store_` open on a fresh place of the parameter's backend: a directory, a
// private redis-server, or a MemorySnapshotStore (spec "memory").
class BackendTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override;
  // Another store object on the same place (its own connection, its own leases).
  std::unique_ptr<SnapshotStore> OpenAnother() const;

  TempDir dir_;
  std::unique_ptr<RedisServer> redis_;
  std::shared_ptr<MemorySnapshotStore> memory_;
  std::string spec_;
  std::unique_ptr<SnapshotStore> store_;  // destroyed before the server it talks to
};

// One writer of the race tests, `rounds` times: takes the lease on `id` (retrying while
// another holds it), reads the counter (decimal bytes, absent = 0) with its generation,
// writes counter + 1 fenced by that generation, releases. Every session it touches must be
// written only by such writers: then each read must find counter == generation == the
// grant's generation, and each fenced write must succeed with generation + 1. The first
// violation is INTERNAL saying what happened; a store error is returned as is. `handoffs`
// (if not null) counts the rounds that found another writer's write, so a test can tell
// that the writers did interleave. Uses no gtest assertions, so a forked child may run it.
absl::Status RunCounterWriter(SnapshotStore& store, const std::string& id, int rounds,
                              int* handoffs = nullptr);

}  // namespace attnserve::store::testing
