#include "server/store/redis_store.h"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <iterator>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/store/redis_scripts.h"

namespace attnserve::store {
namespace {

constexpr char kKeyPrefix[] = "attnserve:session:";
constexpr char kGenerationKeyPrefix[] = "attnserve:gen:";
constexpr char kLeaseKeyPrefix[] = "attnserve:lease:";
constexpr char kStagingKeyPrefix[] = "attnserve:staging:";
constexpr char kPageKeyPrefix[] = "attnserve:page:";
// Bounds on one page round trip: the bytes of the puts it sends, the pages it reads, the
// ids it extends (a batch too large would hold Redis, and the command timeout, longer).
constexpr int64_t kPageBatchBytes = int64_t{16} << 20;
constexpr size_t kPageReadBatch = 8;
constexpr size_t kPageExtendBatch = 512;

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

std::string TtlMs(absl::Duration ttl) {
  return absl::StrCat(absl::ToInt64Milliseconds(RoundTtl(ttl)));
}

bool IsString(const redisReply& reply) {
  return reply.type == REDIS_REPLY_STRING || reply.type == REDIS_REPLY_STATUS;
}

absl::string_view ErrorText(const redisReply& reply) {
  if (reply.type != REDIS_REPLY_ERROR && !IsString(reply)) return "unexpected reply type";
  return absl::string_view(reply.str, reply.len);
}

absl::Status NoSnapshot(const std::string& id, const std::string& store_name) {
  return absl::NotFoundError(absl::StrCat("session ", id, ": no snapshot in ", store_name));
}

// `what` names the script or command: "<what>: unexpected reply type <type>".
absl::Status Unexpected(const std::string& store_name, absl::string_view what,
                        const redisReply& reply) {
  return StoreUnavailable(store_name,
                          absl::StrCat(what, ": unexpected reply type ", reply.type));
}

std::string ScriptName(int script) { return absl::StrCat(kRedisScripts[script].name, " script"); }

// True if `reply` is the {'nostaging'} a write script answers when its staging SET did
// not happen.
bool IsNoStaging(const redisReply& reply) {
  return reply.type == REDIS_REPLY_ARRAY && reply.elements == 1 &&
         IsString(*reply.element[0]) &&
         absl::string_view(reply.element[0]->str, reply.element[0]->len) == "nostaging";
}

// Reads a generation Redis sent as a decimal string into `out`; UNAVAILABLE if the key
// holds anything else (nothing this store writes).
absl::Status ParseGeneration(const std::string& store_name, absl::string_view what,
                             const redisReply& reply, int64_t* out) {
  const absl::string_view text(reply.str, reply.len);
  if (absl::SimpleAtoi(text, out) && *out >= 0) return absl::OkStatus();
  return StoreUnavailable(store_name,
                          absl::StrCat(what, ": the generation key holds \"",
                                       absl::CHexEscape(text.substr(0, 40)), "\""));
}

}  // namespace

std::unique_ptr<RedisSnapshotStore> RedisSnapshotStore::Create(Address address) {
  return std::unique_ptr<RedisSnapshotStore>(new RedisSnapshotStore(std::move(address)));
}

RedisSnapshotStore::RedisSnapshotStore(Address address)
    : address_(std::move(address)), name_(NameOf(address_)) {}

RedisSnapshotStore::~RedisSnapshotStore() {
  {
    absl::MutexLock lock(&mu_);
    Disconnect(context_);
  }
  absl::MutexLock lock(&pages_mu_);
  Disconnect(pages_context_);
}

std::string RedisSnapshotStore::Key(const std::string& id) {
  return absl::StrCat(kKeyPrefix, id);
}

std::string RedisSnapshotStore::GenerationKey(const std::string& id) {
  return absl::StrCat(kGenerationKeyPrefix, id);
}

std::string RedisSnapshotStore::LeaseKey(const std::string& id) {
  return absl::StrCat(kLeaseKeyPrefix, id);
}

std::string RedisSnapshotStore::StagingKey(const std::string& id, const std::string& token) {
  return absl::StrCat(kStagingKeyPrefix, id, ":", token);
}

std::string RedisSnapshotStore::PageKey(const std::string& id) {
  return absl::StrCat(kPageKeyPrefix, id);
}

absl::StatusOr<RedisSnapshotStore::ReplyPtr> RedisSnapshotStore::PageTransactionLocked(
    absl::string_view what, const std::vector<std::vector<std::string_view>>& commands) {
  std::vector<std::vector<std::string_view>> all;
  all.reserve(commands.size() + 2);
  all.push_back({"MULTI"});
  all.insert(all.end(), commands.begin(), commands.end());
  all.push_back({"EXEC"});
  absl::StatusOr<std::vector<ReplyPtr>> replies = PipelineOn(pages_context_, all);
  if (!replies.ok()) return replies.status();
  for (const ReplyPtr& reply : *replies) {
    if (reply->type == REDIS_REPLY_ERROR) {
      return StoreUnavailable(name_, absl::StrCat(what, ": ", ErrorText(*reply)));
    }
  }
  const redisReply& exec = *replies->back();
  if (exec.type != REDIS_REPLY_ARRAY || exec.elements != commands.size()) {
    return Unexpected(name_, what, exec);
  }
  for (size_t i = 0; i < exec.elements; ++i) {
    if (exec.element[i]->type == REDIS_REPLY_ERROR) {
      return StoreUnavailable(name_, absl::StrCat(what, ": ", ErrorText(*exec.element[i])));
    }
  }
  return std::move(replies->back());
}

absl::StatusOr<int64_t> RedisSnapshotStore::PutPages(const std::vector<PageWrite>& pages,
                                                     absl::Duration ttl) {
  if (absl::Status s = ValidatePageIds(pages); !s.ok()) return s;
  if (absl::Status s = ValidateSnapshotTtl(ttl); !s.ok()) return s;
  const std::string ttl_ms = TtlMs(ttl);
  int64_t written = 0;
  absl::MutexLock lock(&pages_mu_);
  for (size_t first = 0, last; first < pages.size(); first = last) {
    int64_t batch_bytes = 0;
    for (last = first; last < pages.size(); ++last) {
      const int64_t size = int64_t(pages[last].bytes.size());
      if (last > first && batch_bytes + size > kPageBatchBytes) break;
      batch_bytes += size;
    }
    std::vector<std::string> keys;
    keys.reserve(last - first);
    std::vector<std::vector<std::string_view>> commands;
    for (size_t i = first; i < last; ++i) {
      keys.push_back(PageKey(pages[i].id));
      commands.push_back({"SET", keys.back(), pages[i].bytes, "NX", "PX", ttl_ms});
      commands.push_back({"PEXPIRE", keys.back(), ttl_ms, "GT"});
    }
    absl::StatusOr<ReplyPtr> exec =
        PageTransactionLocked("MULTI SET NX PEXPIRE GT EXEC", commands);
    if (!exec.ok()) return exec.status();
    for (size_t i = first; i < last; ++i) {
      // SET NX answers OK when it wrote, nil when the page was there.
      if (IsString(*(*exec)->element[2 * (i - first)])) {
        written += int64_t(pages[i].bytes.size());
      }
    }
  }
  return written;
}

absl::StatusOr<std::vector<std::optional<std::string>>> RedisSnapshotStore::GetPages(
    const std::vector<std::string>& ids) {
  if (absl::Status s = ValidatePageIds(ids); !s.ok()) return s;
  std::vector<std::optional<std::string>> out;
  out.reserve(ids.size());
  absl::MutexLock lock(&pages_mu_);
  for (size_t first = 0; first < ids.size(); first += kPageReadBatch) {
    const size_t last = std::min(ids.size(), first + kPageReadBatch);
    std::vector<std::string> keys;
    keys.reserve(last - first);
    std::vector<std::vector<std::string_view>> commands;
    for (size_t i = first; i < last; ++i) {
      keys.push_back(PageKey(ids[i]));
      commands.push_back({"GET", keys.back()});
    }
    absl::StatusOr<std::vector<ReplyPtr>> replies = PipelineOn(pages_context_, commands);
    if (!replies.ok()) return replies.status();
    for (const ReplyPtr& reply : *replies) {
      if (reply->type == REDIS_REPLY_NIL) {
        out.emplace_back();
      } else if (reply->type == REDIS_REPLY_STRING) {
        out.emplace_back(std::string(reply->str, reply->len));
      } else if (reply->type == REDIS_REPLY_ERROR) {
        return StoreUnavailable(name_, absl::StrCat("GET: ", ErrorText(*reply)));
      } else {
        return Unexpected(name_, "GET", *reply);
      }
    }
  }
  return out;
}

absl::StatusOr<std::vector<bool>> RedisSnapshotStore::ExtendPages(
    const std::vector<std::string>& ids, absl::Duration ttl) {
  if (absl::Status s = ValidatePageIds(ids); !s.ok()) return s;
  if (absl::Status s = ValidateSnapshotTtl(ttl); !s.ok()) return s;
  const std::string ttl_ms = TtlMs(ttl);
  std::vector<bool> out;
  out.reserve(ids.size());
  absl::MutexLock lock(&pages_mu_);
  for (size_t first = 0; first < ids.size(); first += kPageExtendBatch) {
    const size_t last = std::min(ids.size(), first + kPageExtendBatch);
    std::vector<std::string> keys;
    keys.reserve(last - first);
    std::vector<std::vector<std::string_view>> commands;
    for (size_t i = first; i < last; ++i) {
      keys.push_back(PageKey(ids[i]));
      commands.push_back({"PEXPIRE", keys.back(), ttl_ms, "GT"});
      commands.push_back({"EXISTS", keys.back()});
    }
    // One transaction: a page EXISTS finds is one PEXPIRE has just extended.
    absl::StatusOr<ReplyPtr> exec =
        PageTransactionLocked("MULTI PEXPIRE GT EXISTS EXEC", commands);
    if (!exec.ok()) return exec.status();
    for (size_t i = 0; i < last - first; ++i) {
      const redisReply& exists = *(*exec)->element[2 * i + 1];
      if (exists.type != REDIS_REPLY_INTEGER) return Unexpected(name_, "EXISTS", exists);
      out.push_back(exists.integer == 1);
    }
  }
  return out;
}

absl::Status RedisSnapshotStore::Put(const std::string& id, std::string_view bytes,
                                     absl::Duration ttl) {
  if (absl::Status s = ValidateSnapshotId(id); !s.ok()) return s;
  if (absl::Status s = ValidateSnapshotTtl(ttl); !s.ok()) return s;
  const std::string ttl_ms = TtlMs(ttl);
  const std::string staging = StagingKey(id, NewLeaseToken());
  return StageAndEval(staging, bytes, ttl_ms, kPut, {Key(id), GenerationKey(id), staging},
                      {ttl_ms}, [&](const redisReply& reply) {
                        if (reply.type == REDIS_REPLY_INTEGER) return absl::OkStatus();
                        return Unexpected(name_, ScriptName(kPut), reply);
                      });
}

absl::StatusOr<std::string> RedisSnapshotStore::Get(const std::string& id) {
  if (absl::Status s = ValidateSnapshotId(id); !s.ok()) return s;
  std::string bytes;
  absl::Status status = Run({"GET", Key(id)}, [&](const redisReply& reply) {
    if (reply.type == REDIS_REPLY_NIL) return NoSnapshot(id, name_);
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
  return Run({"UNLINK", Key(id), GenerationKey(id)}, [&](const redisReply& reply) {
    if (reply.type == REDIS_REPLY_INTEGER) return absl::OkStatus();
    return StoreUnavailable(name_,
                            absl::StrCat("UNLINK: unexpected reply type ", reply.type));
  });
}

absl::StatusOr<LeaseGrant> RedisSnapshotStore::AcquireLease(const std::string& id,
                                                            absl::Duration ttl) {
  if (absl::Status s = ValidateSnapshotId(id); !s.ok()) return s;
  if (absl::Status s = ValidateSnapshotTtl(ttl); !s.ok()) return s;
  LeaseGrant grant;
  grant.token = NewLeaseToken();
  absl::Status status =
      Eval(kAcquire, {LeaseKey(id), GenerationKey(id)}, {grant.token, TtlMs(ttl)},
           [&](const redisReply& reply) {
             if (reply.type == REDIS_REPLY_NIL) return LeaseHeldError(id);
             if (!IsString(reply)) return Unexpected(name_, ScriptName(kAcquire), reply);
             return ParseGeneration(name_, ScriptName(kAcquire), reply, &grant.generation);
           });
  if (!status.ok()) return status;
  return grant;
}

absl::Status RedisSnapshotStore::RenewLease(const std::string& id, const std::string& token,
                                            absl::Duration ttl) {
  if (absl::Status s = ValidateSnapshotId(id); !s.ok()) return s;
  if (absl::Status s = ValidateSnapshotTtl(ttl); !s.ok()) return s;
  return Eval(kRenew, {LeaseKey(id)}, {token, TtlMs(ttl)}, [&](const redisReply& reply) {
    if (reply.type != REDIS_REPLY_INTEGER) return Unexpected(name_, ScriptName(kRenew), reply);
    return reply.integer == 1 ? absl::OkStatus() : LeaseLostError(id);
  });
}

absl::Status RedisSnapshotStore::ReleaseLease(const std::string& id,
                                              const std::string& token) {
  if (absl::Status s = ValidateSnapshotId(id); !s.ok()) return s;
  return Eval(kRelease, {LeaseKey(id)}, {token}, [&](const redisReply& reply) {
    if (reply.type == REDIS_REPLY_INTEGER) return absl::OkStatus();
    return Unexpected(name_, ScriptName(kRelease), reply);
  });
}

absl::StatusOr<int64_t> RedisSnapshotStore::PutFenced(const std::string& id,
                                                      std::string_view bytes,
                                                      absl::Duration ttl,
                                                      const std::string& token,
                                                      int64_t generation) {
  if (absl::Status s = ValidateSnapshotId(id); !s.ok()) return s;
  if (absl::Status s = ValidateSnapshotTtl(ttl); !s.ok()) return s;
  if (absl::Status s = ValidateGeneration(generation); !s.ok()) return s;
  int64_t written = 0;
  const std::string ttl_ms = TtlMs(ttl);
  const std::string staging = StagingKey(id, token);
  absl::Status status = StageAndEval(
      staging, bytes, ttl_ms, kPutFenced, {LeaseKey(id), GenerationKey(id), Key(id), staging},
      {token, absl::StrCat(generation), ttl_ms}, [&](const redisReply& reply) {
        if (reply.type == REDIS_REPLY_INTEGER) {
          written = reply.integer;
          return absl::OkStatus();
        }
        // {'lost'} or {'stale', stored generation}.
        if (reply.type != REDIS_REPLY_ARRAY || reply.elements < 1 ||
            !IsString(*reply.element[0])) {
          return Unexpected(name_, ScriptName(kPutFenced), reply);
        }
        const absl::string_view why(reply.element[0]->str, reply.element[0]->len);
        if (why == "lost") return LeaseLostError(id);
        if (why != "stale" || reply.elements != 2 || !IsString(*reply.element[1])) {
          return Unexpected(name_, ScriptName(kPutFenced), reply);
        }
        int64_t stored;
        if (absl::Status s =
                ParseGeneration(name_, ScriptName(kPutFenced), *reply.element[1], &stored);
            !s.ok()) {
          return s;
        }
        return StaleGenerationError(id, generation, stored);
      });
  if (!status.ok()) return status;
  return written;
}

absl::StatusOr<std::pair<std::string, int64_t>> RedisSnapshotStore::GetWithGeneration(
    const std::string& id) {
  if (absl::Status s = ValidateSnapshotId(id); !s.ok()) return s;
  // MULTI GET GET EXEC, pipelined: one round trip, and Redis runs the two GETs with
  // nothing in between, so the bytes and the generation are one write's. Measured on
  // 3.5 MB snapshots (tests/bench/scale_bench.sh): 2.0 ms, against 3.0 ms for a GET
  // bracketed by two generation GETs and 4.7 ms returned through a Lua script (Redis
  // builds a script's reply slowly and blocks every other client meanwhile).
  constexpr absl::string_view kWhat = "MULTI GET GET EXEC";
  const std::string key = Key(id), generation_key = GenerationKey(id);
  absl::StatusOr<std::vector<ReplyPtr>> replies;
  {
    absl::MutexLock lock(&mu_);
    replies = PipelineLocked({{"MULTI"}, {"GET", key}, {"GET", generation_key}, {"EXEC"}});
  }
  if (!replies.ok()) return replies.status();
  for (const ReplyPtr& reply : *replies) {
    if (reply->type == REDIS_REPLY_ERROR) {
      return StoreUnavailable(name_, absl::StrCat(kWhat, ": ", ErrorText(*reply)));
    }
  }
  const redisReply& exec = *replies->back();
  if (exec.type != REDIS_REPLY_ARRAY || exec.elements != 2) {
    return Unexpected(name_, kWhat, exec);
  }
  const redisReply& bytes = *exec.element[0];
  const redisReply& generation = *exec.element[1];
  for (const redisReply* r : {&bytes, &generation}) {
    if (r->type == REDIS_REPLY_ERROR) {
      return StoreUnavailable(name_, absl::StrCat(kWhat, ": ", ErrorText(*r)));
    }
  }
  if (bytes.type == REDIS_REPLY_NIL) return NoSnapshot(id, name_);
  if (!IsString(bytes)) return Unexpected(name_, kWhat, bytes);
  std::pair<std::string, int64_t> result(std::string(bytes.str, bytes.len), 0);
  if (generation.type != REDIS_REPLY_NIL) {
    if (!IsString(generation)) return Unexpected(name_, kWhat, generation);
    if (absl::Status s = ParseGeneration(name_, kWhat, generation, &result.second); !s.ok()) {
      return s;
    }
  }
  return result;
}

absl::StatusOr<int64_t> RedisSnapshotStore::GetGeneration(const std::string& id) {
  if (absl::Status s = ValidateSnapshotId(id); !s.ok()) return s;
  int64_t generation = 0;
  absl::Status status = Run({"GET", GenerationKey(id)}, [&](const redisReply& reply) {
    if (reply.type == REDIS_REPLY_NIL) return absl::OkStatus();
    if (!IsString(reply)) return Unexpected(name_, "GET", reply);
    return ParseGeneration(name_, "GET", reply, &generation);
  });
  if (!status.ok()) return status;
  return generation;
}

absl::Status RedisSnapshotStore::Run(std::initializer_list<std::string_view> args,
                                     OnReply on_reply) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<ReplyPtr> reply = CommandLocked(args);
  if (!reply.ok()) return reply.status();
  if ((*reply)->type == REDIS_REPLY_ERROR) {
    return StoreUnavailable(
        name_, absl::StrCat(std::string(*args.begin()), ": ", ErrorText(**reply)));
  }
  return on_reply(**reply);
}

absl::Status RedisSnapshotStore::Eval(Script script,
                                      std::initializer_list<std::string_view> keys,
                                      std::initializer_list<std::string_view> args,
                                      OnReply on_reply) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<ScriptReplies> replies = EvalLocked(script, keys, args, {});
  if (!replies.ok()) return replies.status();
  if (replies->script->type == REDIS_REPLY_ERROR) {
    return StoreUnavailable(name_, absl::StrCat(ScriptName(script), ": ",
                                                ErrorText(*replies->script)));
  }
  return on_reply(*replies->script);
}

absl::StatusOr<RedisSnapshotStore::ScriptReplies> RedisSnapshotStore::EvalLocked(
    Script script, std::initializer_list<std::string_view> keys,
    std::initializer_list<std::string_view> args,
    const std::vector<std::string_view>& before) {
  static_assert(std::size(kRedisScripts) == kScripts, "one text per Script");
  const std::string num_keys = absl::StrCat(keys.size());
  absl::StatusOr<std::string> sha = ScriptShaLocked(script);
  if (!sha.ok()) return sha.status();
  std::vector<std::string_view> eval = {"EVALSHA", *sha, num_keys};
  eval.insert(eval.end(), keys.begin(), keys.end());
  eval.insert(eval.end(), args.begin(), args.end());
  std::vector<std::vector<std::string_view>> commands;
  if (!before.empty()) commands.push_back(before);
  commands.push_back(eval);
  absl::StatusOr<std::vector<ReplyPtr>> replies = PipelineLocked(commands);
  if (!replies.ok()) return replies.status();
  ScriptReplies out{std::move(replies->back()), ReplyPtr(nullptr, freeReplyObject)};
  if (!before.empty()) out.before = std::move(replies->front());
  if (out.script->type == REDIS_REPLY_ERROR &&
      absl::StartsWith(ErrorText(*out.script), "NOSCRIPT")) {
    // The server forgot it (restarted, or SCRIPT FLUSH): EVAL caches it there again.
    // `before` ran; the script did not.
    eval[0] = "EVAL";
    eval[1] = kRedisScripts[script].source;
    absl::StatusOr<ReplyPtr> again = CommandLocked(eval);
    if (!again.ok()) return again.status();
    out.script = *std::move(again);
  }
  return out;
}

absl::StatusOr<std::string> RedisSnapshotStore::ScriptShaLocked(Script script) {
  std::string& sha = script_sha_[script];
  if (sha.empty()) {
    absl::StatusOr<ReplyPtr> loaded =
        CommandLocked({"SCRIPT", "LOAD", kRedisScripts[script].source});
    if (!loaded.ok()) return loaded.status();
    if (!IsString(**loaded)) {
      return StoreUnavailable(name_, absl::StrCat(ScriptName(script), ": SCRIPT LOAD: ",
                                                  ErrorText(**loaded)));
    }
    sha.assign((*loaded)->str, (*loaded)->len);
  }
  return sha;
}

absl::Status RedisSnapshotStore::StageAndEval(std::string_view staging, std::string_view bytes,
                                              std::string_view ttl_ms, Script script,
                                              std::initializer_list<std::string_view> keys,
                                              std::initializer_list<std::string_view> args,
                                              OnReply on_reply) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<ScriptReplies> replies =
      EvalLocked(script, keys, args, {"SET", staging, bytes, "PX", ttl_ms});
  if (!replies.ok()) return replies.status();
  const redisReply& set = *replies->before;
  const redisReply& reply = *replies->script;
  if (IsNoStaging(reply)) {
    if (set.type == REDIS_REPLY_ERROR) {
      return StoreUnavailable(name_, absl::StrCat(kRedisScripts[script].name,
                                                  ": staging SET: ", ErrorText(set)));
    }
    return StoreUnavailable(name_, absl::StrCat(ScriptName(script),
                                                ": the staged bytes vanished before it ran"));
  }
  if (reply.type == REDIS_REPLY_ERROR) {
    return StoreUnavailable(name_, absl::StrCat(ScriptName(script), ": ", ErrorText(reply)));
  }
  return on_reply(reply);
}

absl::StatusOr<RedisSnapshotStore::ReplyPtr> RedisSnapshotStore::CommandLocked(
    const std::vector<std::string_view>& args) {
  absl::StatusOr<std::vector<ReplyPtr>> replies = PipelineLocked({args});
  if (!replies.ok()) return replies.status();
  return std::move(replies->front());
}

absl::StatusOr<std::vector<RedisSnapshotStore::ReplyPtr>> RedisSnapshotStore::PipelineLocked(
    const std::vector<std::vector<std::string_view>>& commands) {
  return PipelineOn(context_, commands);
}

absl::StatusOr<std::vector<RedisSnapshotStore::ReplyPtr>> RedisSnapshotStore::PipelineOn(
    redisContext*& context, const std::vector<std::vector<std::string_view>>& commands) {
  for (int attempt = 0;; ++attempt) {
    const bool reused = context != nullptr;
    if (!reused) {
      if (absl::Status s = Connect(context); !s.ok()) return s;
    }
    std::vector<ReplyPtr> replies;
    bool failed = false;
    int saved_errno = 0;
    {
      ScopedSigpipeBlock no_sigpipe;
      for (const std::vector<std::string_view>& args : commands) {
        std::vector<const char*> argv;
        std::vector<size_t> lengths;
        for (std::string_view arg : args) {
          argv.push_back(arg.data());
          lengths.push_back(arg.size());
        }
        if (redisAppendCommandArgv(context, static_cast<int>(argv.size()), argv.data(),
                                   lengths.data()) != REDIS_OK) {
          failed = true;
          break;
        }
      }
      while (!failed && replies.size() < commands.size()) {
        void* raw = nullptr;
        if (redisGetReply(context, &raw) != REDIS_OK || raw == nullptr) {
          failed = true;
          break;
        }
        replies.emplace_back(static_cast<redisReply*>(raw), freeReplyObject);
      }
      saved_errno = errno;
    }
    if (failed) {
      const int redis_err = context->err;
      const std::string reason = context->err != 0 ? context->errstr : "no reply";
      Disconnect(context);
      // Only if nothing came back: a command that answered has run.
      if (reused && attempt == 0 && replies.empty() &&
          ServerClosedConnection(redis_err, saved_errno)) {
        continue;
      }
      return StoreUnavailable(name_, reason);
    }
    return replies;
  }
}

absl::Status RedisSnapshotStore::Connect(redisContext*& context) {
  context = redisConnectWithTimeout(address_.host.c_str(), address_.port,
                                    absl::ToTimeval(kConnectTimeout));
  if (context == nullptr) {
    return StoreUnavailable(name_, "cannot allocate a hiredis context");
  }
  if (context->err != 0) {
    absl::Status status = StoreUnavailable(name_, context->errstr);
    Disconnect(context);
    return status;
  }
  if (redisSetTimeout(context, absl::ToTimeval(kCommandTimeout)) != REDIS_OK ||
      redisEnableKeepAlive(context) != REDIS_OK) {
    absl::Status status = StoreUnavailable(name_, context->errstr);
    Disconnect(context);
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
  if (!status.ok()) Disconnect(context);
  return status;
}

void RedisSnapshotStore::Disconnect(redisContext*& context) {
  if (context != nullptr) redisFree(context);
  context = nullptr;
}

}  // namespace attnserve::store
