#include "server/store/redis_store.h"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <signal.h>

#include <cerrno>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace attnserve::store {
namespace {

constexpr char kKeyPrefix[] = "attnserve:session:";

std::string NameOf(const RedisSnapshotStore::Address& address) {
  const bool v6 = absl::StrContains(address.host, ':');
  return absl::StrCat("redis://", v6 ? "[" : "", address.host, v6 ? "]" : "", ":",
                      address.port, address.db != 0 ? absl::StrCat("/", address.db) : "");
}

// hiredis writes with write(2), not send(MSG_NOSIGNAL): writing to a connection Redis
// has reset raises SIGPIPE, which would kill the server. This blocks SIGPIPE in the
// calling thread for its scope and discards one raised meanwhile, leaving the process's
// signal handling as it found it.
class ScopedSigpipeBlock {
 public:
  ScopedSigpipeBlock() {
    sigemptyset(&sigpipe_);
    sigaddset(&sigpipe_, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &sigpipe_, &old_mask_);
  }
  ~ScopedSigpipeBlock() {
    const int saved_errno = errno;
    sigset_t pending;
    sigpending(&pending);
    if (!was_pending_ && sigismember(&pending, SIGPIPE) == 1) {
      const struct timespec zero = {0, 0};
      while (sigtimedwait(&sigpipe_, nullptr, &zero) < 0 && errno == EINTR) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
    errno = saved_errno;
  }
  ScopedSigpipeBlock(const ScopedSigpipeBlock&) = delete;
  ScopedSigpipeBlock& operator=(const ScopedSigpipeBlock&) = delete;

 private:
  sigset_t sigpipe_;
  sigset_t old_mask_;
  bool was_pending_ = false;
};

// True if a failed command on a connection that had been idle means the server closed
// that connection (it restarted, or dropped idle clients), not that it is down or hung:
// then one fresh connection is worth trying at once.
bool ServerClosedConnection(int redis_err, int saved_errno) {
  if (redis_err == REDIS_ERR_EOF) return true;
  return redis_err == REDIS_ERR_IO &&
         (saved_errno == ECONNRESET || saved_errno == EPIPE || saved_errno == ECONNABORTED);
}

}  // namespace

std::unique_ptr<RedisSnapshotStore> RedisSnapshotStore::Create(Address address) {
  return std::unique_ptr<RedisSnapshotStore>(new RedisSnapshotStore(std::move(address)));
}

RedisSnapshotStore::RedisSnapshotStore(Address address)
    : address_(std::move(address)), name_(NameOf(address_)) {}

RedisSnapshotStore::~RedisSnapshotStore() {
  absl::MutexLock lock(&mu_);
  DisconnectLocked();
}

std::string RedisSnapshotStore::Key(const std::string& id) {
  return absl::StrCat(kKeyPrefix, id);
}

absl::Status RedisSnapshotStore::Put(const std::string& id, std::string_view bytes,
                                     absl::Duration ttl) {
  if (absl::Status s = ValidateSnapshotId(id); !s.ok()) return s;
  if (absl::Status s = ValidateSnapshotTtl(ttl); !s.ok()) return s;
  const std::string ttl_ms = absl::StrCat(absl::ToInt64Milliseconds(RoundTtl(ttl)));
  return Run({"SET", Key(id), bytes, "PX", ttl_ms}, [&](const redisReply& reply) {
    if (reply.type == REDIS_REPLY_STATUS) return absl::OkStatus();
    return StoreUnavailable(name_, absl::StrCat("SET: unexpected reply type ", reply.type));
  });
}

absl::StatusOr<std::string> RedisSnapshotStore::Get(const std::string& id) {
  if (absl::Status s = ValidateSnapshotId(id); !s.ok()) return s;
  std::string bytes;
  absl::Status status = Run({"GET", Key(id)}, [&](const redisReply& reply) {
    if (reply.type == REDIS_REPLY_NIL) {
      return absl::NotFoundError(absl::StrCat("session ", id, ": no snapshot in ", name_));
    }
    if (reply.type != REDIS_REPLY_STRING) {
      return StoreUnavailable(name_,
                              absl::StrCat("GET: unexpected reply type ", reply.type));
    }
    bytes.assign(reply.str, reply.len);
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  return bytes;
}

absl::Status RedisSnapshotStore::Delete(const std::string& id) {
  if (absl::Status s = ValidateSnapshotId(id); !s.ok()) return s;
  return Run({"UNLINK", Key(id)}, [&](const redisReply& reply) {
    if (reply.type == REDIS_REPLY_INTEGER) return absl::OkStatus();
    return StoreUnavailable(name_,
                            absl::StrCat("UNLINK: unexpected reply type ", reply.type));
  });
}

absl::Status RedisSnapshotStore::Run(
    std::initializer_list<std::string_view> args,
    absl::FunctionRef<absl::Status(const redisReply&)> on_reply) {
  std::vector<const char*> argv;
  std::vector<size_t> lengths;
  for (std::string_view arg : args) {
    argv.push_back(arg.data());
    lengths.push_back(arg.size());
  }
  absl::MutexLock lock(&mu_);
  for (int attempt = 0;; ++attempt) {
    const bool reused = context_ != nullptr;
    if (!reused) {
      if (absl::Status s = ConnectLocked(); !s.ok()) return s;
    }
    void* raw;
    int saved_errno;
    {
      ScopedSigpipeBlock no_sigpipe;
      raw = redisCommandArgv(context_, static_cast<int>(argv.size()), argv.data(),
                             lengths.data());
      saved_errno = errno;
    }
    if (raw == nullptr) {
      const int redis_err = context_->err;
      const std::string reason = context_->errstr;
      DisconnectLocked();
      if (reused && attempt == 0 && ServerClosedConnection(redis_err, saved_errno)) {
        continue;
      }
      return StoreUnavailable(name_, reason);
    }
    std::unique_ptr<redisReply, void (*)(void*)> reply(static_cast<redisReply*>(raw),
                                                       freeReplyObject);
    if (reply->type == REDIS_REPLY_ERROR) {
      return StoreUnavailable(name_,
                              absl::StrCat(std::string(*args.begin()), ": ",
                                           absl::string_view(reply->str, reply->len)));
    }
    return on_reply(*reply);
  }
}

absl::Status RedisSnapshotStore::ConnectLocked() {
  redisContext* context = redisConnectWithTimeout(address_.host.c_str(), address_.port,
                                                  absl::ToTimeval(kConnectTimeout));
  if (context == nullptr) {
    return StoreUnavailable(name_, "cannot allocate a hiredis context");
  }
  context_ = context;
  if (context->err != 0) {
    absl::Status status = StoreUnavailable(name_, context->errstr);
    DisconnectLocked();
    return status;
  }
  if (redisSetTimeout(context, absl::ToTimeval(kCommandTimeout)) != REDIS_OK ||
      redisEnableKeepAlive(context) != REDIS_OK) {
    absl::Status status = StoreUnavailable(name_, context->errstr);
    DisconnectLocked();
    return status;
  }
  if (address_.db == 0) return absl::OkStatus();
  const std::string db = absl::StrCat(address_.db);
  void* raw;
  {
    ScopedSigpipeBlock no_sigpipe;
    raw = redisCommand(context, "SELECT %s", db.c_str());
  }
  absl::Status status;
  if (raw == nullptr) {
    status = StoreUnavailable(name_, context->errstr);
  } else if (auto* reply = static_cast<redisReply*>(raw);
             reply->type == REDIS_REPLY_ERROR) {
    status = StoreUnavailable(
        name_,
        absl::StrCat("SELECT ", db, ": ", absl::string_view(reply->str, reply->len)));
  }
  if (raw != nullptr) freeReplyObject(raw);
  if (!status.ok()) DisconnectLocked();
  return status;
}

void RedisSnapshotStore::DisconnectLocked() {
  if (context_ != nullptr) redisFree(context_);
  context_ = nullptr;
}

}  // namespace attnserve::store
