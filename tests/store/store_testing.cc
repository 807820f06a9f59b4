#include "tests/store/store_testing.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace attnserve::store::testing {

TempDir::TempDir() {
  const char* base = getenv("TEST_TMPDIR");
  std::string pattern = absl::StrCat(base != nullptr ? base : "/tmp", "/store_test.XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) {
    fprintf(stderr, "mkdtemp %s: %s\n", pattern.c_str(), strerror(errno));
    abort();
  }
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

int FreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    fprintf(stderr, "cannot find a free loopback port: %s\n", strerror(errno));
    abort();
  }
  close(fd);
  return ntohs(addr.sin_port);
}

absl::StatusOr<std::unique_ptr<RedisServer>> RedisServer::Start() {
  if (access(kBinary, X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(kBinary, " is missing (", strerror(errno),
                     "): the store tests run a real Redis; deploy/install.sh installs it "
                     "(Debian package redis-server)"));
  }
  std::unique_ptr<RedisServer> server(new RedisServer);
  absl::Status status;
  // Another process may take the free port before redis-server binds it: try a few.
  for (int attempt = 0; attempt < 3; ++attempt) {
    server->port_ = FreeLoopbackPort();
    status = server->Restart();
    if (status.ok()) return server;
  }
  return status;
}

RedisServer::~RedisServer() {
  Resume();
  Stop();
}

std::string RedisServer::spec() const { return absl::StrCat("redis://127.0.0.1:", port_); }

absl::Status RedisServer::Restart() {
  if (absl::Status s = Launch(); !s.ok()) return s;
  absl::Status ready = WaitUntilReady();
  if (!ready.ok()) Stop();
  return ready;
}

absl::Status RedisServer::Launch() {
  const std::string port = absl::StrCat(port_);
  const std::string log = absl::StrCat(dir_.path(), "/redis.log");
  std::vector<std::string> args = {
      kBinary,        "--port", port,    "--bind",    "127.0.0.1",   "--save", "",
      "--appendonly", "no",     "--dir", dir_.path(), "--daemonize", "no"};
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  // Opened before fork: between fork and exec the child may only make syscalls.
  const int log_fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (log_fd < 0) return absl::InternalError(absl::StrCat(log, ": ", strerror(errno)));
  const pid_t parent = getpid();
  pid_ = fork();
  if (pid_ == 0) {
    // Dies with the test even if the test crashes before Stop().
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    execv(kBinary, argv.data());
    _exit(127);
  }
  const int fork_errno = errno;
  close(log_fd);
  if (pid_ < 0) {
    return absl::InternalError(absl::StrCat("fork: ", strerror(fork_errno)));
  }
  return absl::OkStatus();
}

absl::Status RedisServer::WaitUntilReady() {
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (absl::Now() < deadline) {
    int wstatus;
    if (waitpid(pid_, &wstatus, WNOHANG) == pid_) {
      pid_ = -1;
      std::ifstream log(absl::StrCat(dir_.path(), "/redis.log"));
      std::stringstream text;
      text << log.rdbuf();
      return absl::UnavailableError(absl::StrCat(
          "redis-server on port ", port_, " exited at start-up; its log:\n", text.str()));
    }
    RedisContextPtr context = ConnectRaw(port_);
    if (context != nullptr) {
      RedisReplyPtr pong = RawCommand(context.get(), "PING");
      if (pong != nullptr && pong->type == REDIS_REPLY_STATUS) return absl::OkStatus();
    }
    // Polling a server that is starting: connect refused returns at once.
    absl::SleepFor(absl::Milliseconds(2));
  }
  return absl::UnavailableError(
      absl::StrCat("redis-server on port ", port_, " did not answer PING within 5 s"));
}

void RedisServer::Stop() {
  if (pid_ < 0) return;
  kill(pid_, SIGKILL);
  while (waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
}

void RedisServer::Pause() {
  if (pid_ >= 0) kill(pid_, SIGSTOP);
}

void RedisServer::Resume() {
  if (pid_ >= 0) kill(pid_, SIGCONT);
}

RedisContextPtr ConnectRaw(int port) {
  redisContext* context = redisConnectWithTimeout("127.0.0.1", port, {1, 0});
  if (context != nullptr && context->err != 0) {
    redisFree(context);
    context = nullptr;
  }
  if (context != nullptr) redisSetTimeout(context, {5, 0});
  return RedisContextPtr(context, redisFree);
}

RedisReplyPtr RawCommand(redisContext* context, const char* format, ...) {
  va_list args;
  va_start(args, format);
  void* reply = context != nullptr ? redisvCommand(context, format, args) : nullptr;
  va_end(args);
  return RedisReplyPtr(static_cast<redisReply*>(reply), freeReplyObject);
}

void PrintTo(Backend backend, std::ostream* os) {
  *os << (backend == Backend::kDir ? "dir" : backend == Backend::kRedis ? "redis" : "memory");
}

std::string BackendName(const ::testing::TestParamInfo<Backend>& info) {
  return info.param == Backend::kDir ? "Dir" : info.param == Backend::kRedis ? "Redis" : "Memory";
}

namespace {

// Another object on one MemorySnapshotStore, as a second connection is on Redis.
class MemoryView : public SnapshotStore {
 public:
  explicit MemoryView(std::shared_ptr<MemorySnapshotStore> store) : store_(std::move(store)) {}
  absl::Status Put(const std::string& id, std::string_view bytes, absl::Duration ttl) override {
    return store_->Put(id, bytes, ttl);
  }
  absl::StatusOr<std::string> Get(const std::string& id) override { return store_->Get(id); }
  absl::Status Delete(const std::string& id) override { return store_->Delete(id); }
  absl::StatusOr<int> RemoveExpired() override { return store_->RemoveExpired(); }
  absl::StatusOr<LeaseGrant> AcquireLease(const std::string& id, absl::Duration ttl) override {
    return store_->AcquireLease(id, ttl);
  }
  absl::Status RenewLease(const std::string& id, const std::string& token,
                          absl::Duration ttl) override {
    return store_->RenewLease(id, token, ttl);
  }
  absl::Status ReleaseLease(const std::string& id, const std::string& token) override {
    return store_->ReleaseLease(id, token);
  }
  absl::StatusOr<int64_t> PutFenced(const std::string& id, std::string_view bytes,
                                    absl::Duration ttl, const std::string& token,
                                    int64_t generation) override {
    return store_->PutFenced(id, bytes, ttl, token, generation);
  }
  absl::StatusOr<std::pair<std::string, int64_t>> GetWithGeneration(
      const std::string& id) override {
    return store_->GetWithGeneration(id);
  }
  absl::StatusOr<int64_t> GetGeneration(const std::string& id) override {
    return store_->GetGeneration(id);
  }
  absl::StatusOr<int64_t> PutPages(const std::vector<PageWrite>& pages,
                                   absl::Duration ttl) override {
    return store_->PutPages(pages, ttl);
  }
  absl::StatusOr<std::vector<std::optional<std::string>>> GetPages(
      const std::vector<std::string>& ids) override {
    return store_->GetPages(ids);
  }
  absl::StatusOr<std::vector<bool>> ExtendPages(const std::vector<std::string>& ids,
                                                absl::Duration ttl) override {
    return store_->ExtendPages(ids, ttl);
  }
  const std::string& name() const override { return store_->name(); }

 private:
  std::shared_ptr<MemorySnapshotStore> store_;
};

}  // namespace

void BackendTest::SetUp() {
  if (GetParam() == Backend::kDir) {
    spec_ = "dir:" + dir_.path() + "/snapshots";
  } else if (GetParam() == Backend::kMemory) {
    spec_ = "memory";
    memory_ = std::make_shared<MemorySnapshotStore>();
  } else {
    auto redis = RedisServer::Start();
    ASSERT_TRUE(redis.ok()) << redis.status();
    redis_ = *std::move(redis);
    spec_ = redis_->spec();
  }
  store_ = OpenAnother();
  ASSERT_NE(store_, nullptr);
}

std::unique_ptr<SnapshotStore> BackendTest::OpenAnother() const {
  if (memory_ != nullptr) return std::make_unique<MemoryView>(memory_);
  auto store = OpenSnapshotStore(spec_);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? *std::move(store) : nullptr;
}

absl::Status RunCounterWriter(SnapshotStore& store, const std::string& id, int rounds,
                              int* handoffs) {
  // Long enough that no holder loses its lease while others queue for it.
  constexpr absl::Duration kTtl = absl::Seconds(30);
  int64_t last_written = -1;
  if (handoffs != nullptr) *handoffs = 0;
  for (int round = 0; round < rounds; ++round) {
    absl::StatusOr<LeaseGrant> grant;
    // Retries while another writer has its (short) turn, pausing briefly as a real client
    // would: spinning on the lease file would slow the holder's directory operations down.
    while (absl::IsAborted((grant = store.AcquireLease(id, kTtl)).status())) {
      absl::SleepFor(absl::Microseconds(100));
    }
    if (!grant.ok()) return grant.status();
    absl::Cleanup release = [&] { store.ReleaseLease(id, grant->token).IgnoreError(); };
    int64_t counter = 0;
    int64_t generation = 0;
    auto read = store.GetWithGeneration(id);
    if (read.ok()) {
      if (!absl::SimpleAtoi(read->first, &counter)) {
        return absl::InternalError(
            absl::StrCat("bytes \"", read->first, "\" are no counter"));
      }
      generation = read->second;
    } else if (!absl::IsNotFound(read.status())) {
      return read.status();
    }
    if (generation != grant->generation || counter != generation) {
      return absl::InternalError(absl::StrCat(
          "round ", round, ": granted generation ", grant->generation, ", read generation ",
          generation, " with counter ", counter, ": another writer interleaved"));
    }
    auto written =
        store.PutFenced(id, absl::StrCat(counter + 1), kTtl, grant->token, generation);
    if (!written.ok()) return written.status();
    if (*written != generation + 1) {
      return absl::InternalError(absl::StrCat("round ", round, ": wrote generation ",
                                              *written, " over ", generation));
    }
    if (handoffs != nullptr && generation != last_written) ++*handoffs;
    last_written = *written;
    std::move(release).Cancel();
    if (absl::Status s = store.ReleaseLease(id, grant->token); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace attnserve::store::testing
