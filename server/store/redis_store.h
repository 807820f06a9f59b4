// The Redis backend of SnapshotStore (hiredis, synchronous, one connection).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/store/snapshot_store.h"

struct redisContext;  // hiredis, kept out of this header
struct redisReply;

namespace attnserve::store {

// Snapshots as Redis strings under `attnserve:session:<id>`, expired by Redis itself
// (RemoveExpired is a no-op). Values are sent as counted arguments, so any bytes
// round-trip.
//
// Leases and generations (server/DESIGN.md §7, one Redis, fenced writes, not Redlock): the
// generation is an integer under `attnserve:gen:<id>`, the lease a random token under
// `attnserve:lease:<id>` with its own expiry. Every operation that touches more than one
// key is one Lua script or one MULTI/EXEC, so Redis runs it without anything in between:
// taking a lease (SET NX PX) reads the generation in the same script; a read is MULTI GET
// GET EXEC; a fenced write stages its bytes under a key of its own, then its script
// checks the lease's token and the generation and moves the bytes into place with the
// raised generation (or deletes them); a plain Put raises the generation too; renewing and releasing compare the token first, so a holder never
// extends or deletes someone else's lease. Writes give the snapshot and its generation the
// same absolute expiry (PEXPIREAT from the script's TIME), so one never outlives the other.
// Scripts are loaded once (SCRIPT LOAD) and run by SHA (EVALSHA); a server that forgot them
// (a restart, SCRIPT FLUSH) gets the source again (EVAL).
//
// Pages (SnapshotStore's page methods) are strings under `attnserve:page:<id>`, each with
// its own expiry, sent on a SECOND connection of their own, so that a lease renewal or a
// record write never queues behind megabytes of page uploads. A batch of puts is one
// MULTI of `SET key bytes NX PX ttl` + `PEXPIRE key ttl GT` per page (written if absent,
// else extended, never shortened); a batch of extensions one MULTI of `PEXPIRE key ttl
// GT` + `EXISTS key`; reads pipelined GETs. PEXPIRE's GT needs Redis 7.0 or later (Debian
// 12 ships 7.0). A page must outlive every record naming it, so the Redis server must
// never evict keys to make room: `maxmemory-policy noeviction` (Redis's default); under
// an evicting policy a record whose page was evicted reads as absent, and a full Redis
// refuses writes instead (OOM, answered UNAVAILABLE).
//
// One connection, used under a mutex: calls from many threads queue for it. It is opened
// on first use, not by Create, so the server may start before Redis. An I/O error frees
// it and the call answers UNAVAILABLE "session store redis://HOST:PORT: <reason>"; the
// next call connects afresh, so the store recovers when Redis comes back. A connection
// that the server closed while idle (a Redis restart) is retried once at once rather
// than failing a call that a fresh connection would serve. Writing to a closed connection
// raises SIGPIPE; the store blocks and discards it in the calling thread, so the process
// need not ignore SIGPIPE.
class RedisSnapshotStore : public SnapshotStore {
 public:
  struct Address {
    std::string host;  // name or IP address (IPv6 without brackets)
    int port = 6379;
    int db = 0;  // selected after connecting when not 0
  };
  // Bounds on one connect and on one command's reply (hiredis 0.14 has no per-command
  // timeout; this is the socket timeout).
  static constexpr absl::Duration kConnectTimeout = absl::Seconds(1);
  static constexpr absl::Duration kCommandTimeout = absl::Seconds(2);

  // A store for `address`; does not connect.
  static std::unique_ptr<RedisSnapshotStore> Create(Address address);
  ~RedisSnapshotStore() override;

  absl::Status Put(const std::string& id, std::string_view bytes,
                   absl::Duration ttl) override;
  absl::StatusOr<std::string> Get(const std::string& id) override;
  absl::Status Delete(const std::string& id) override;
  // Always 0: Redis expires keys itself.
  absl::StatusOr<int> RemoveExpired() override { return 0; }
  absl::StatusOr<LeaseGrant> AcquireLease(const std::string& id,
                                          absl::Duration ttl) override;
  absl::Status RenewLease(const std::string& id, const std::string& token,
                          absl::Duration ttl) override;
  absl::Status ReleaseLease(const std::string& id, const std::string& token) override;
  absl::StatusOr<int64_t> PutFenced(const std::string& id, std::string_view bytes,
                                    absl::Duration ttl, const std::string& token,
                                    int64_t generation) override;
  absl::StatusOr<int64_t> GetGeneration(const std::string& id) override;
  absl::StatusOr<std::pair<std::string, int64_t>> GetWithGeneration(
      const std::string& id) override;
  absl::StatusOr<int64_t> PutPages(const std::vector<PageWrite>& pages,
                                   absl::Duration ttl) override;
  absl::StatusOr<std::vector<std::optional<std::string>>> GetPages(
      const std::vector<std::string>& ids) override;
  absl::StatusOr<std::vector<bool>> ExtendPages(const std::vector<std::string>& ids,
                                                absl::Duration ttl) override;
  const std::string& name() const override { return name_; }

  // The keys of session `id`: its snapshot "attnserve:session:<id>", its generation
  // "attnserve:gen:<id>" and its lease "attnserve:lease:<id>".
  static std::string Key(const std::string& id);
  static std::string GenerationKey(const std::string& id);
  static std::string LeaseKey(const std::string& id);
  // Where a write stages its bytes before its script moves them into place:
  // "attnserve:staging:<id>:<token>", with the write's ttl as its expiry.
  static std::string StagingKey(const std::string& id, const std::string& token);
  // Page `id`'s key: "attnserve:page:<id>".
  static std::string PageKey(const std::string& id);

 private:
  // The Lua scripts: indexes into kRedisScripts (redis_scripts.h).
  enum Script {
    kPut,
    kPutFenced,
    kAcquire,
    kRenew,
    kRelease,
    kScripts
  };
  using ReplyPtr = std::unique_ptr<redisReply, void (*)(void*)>;
  using OnReply = absl::FunctionRef<absl::Status(const redisReply&)>;

  explicit RedisSnapshotStore(Address address);

  // Runs the command `args` and passes a non-error reply to `on_reply`, whose status is
  // returned. An error reply ("<command>: <error>") or a failure to reach Redis is
  // UNAVAILABLE.
  absl::Status Run(std::initializer_list<std::string_view> args, OnReply on_reply);
  // Runs `script` with `keys` and `args` (EVALSHA, or EVAL if Redis lacks it) and passes a
  // non-error reply to `on_reply`; errors as Run, named "<script> script: <error>".
  absl::Status Eval(Script script, std::initializer_list<std::string_view> keys,
                    std::initializer_list<std::string_view> args, OnReply on_reply);
  // Stages `bytes` under `staging` (SET PX `ttl_ms`) and runs `script` behind it in one
  // pipeline (one round trip); the script moves them into place or deletes them. If the
  // script answers {'nostaging'}, the SET's error is returned; otherwise as Eval.
  absl::Status StageAndEval(std::string_view staging, std::string_view bytes,
                            std::string_view ttl_ms, Script script,
                            std::initializer_list<std::string_view> keys,
                            std::initializer_list<std::string_view> args, OnReply on_reply);
  // Sends `args` (connecting first if needed) and returns the reply, error replies
  // included; UNAVAILABLE if Redis cannot be reached.
  absl::StatusOr<ReplyPtr> CommandLocked(const std::vector<std::string_view>& args)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends every command of `commands` in one write and reads their replies in order
  // (one round trip); as CommandLocked otherwise.
  absl::StatusOr<std::vector<ReplyPtr>> PipelineLocked(
      const std::vector<std::vector<std::string_view>>& commands)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The replies of EvalLocked: the script's (error replies included) and, when a command
  // was pipelined before it, that command's (null otherwise).
  struct ScriptReplies {
    ReplyPtr script;
    ReplyPtr before;
  };
  // Runs `script` with `keys` and `args` by EVALSHA (EVAL if Redis lacks it), with
  // `before` (if not empty) pipelined ahead of it in the same round trip.
  absl::StatusOr<ScriptReplies> EvalLocked(Script script,
                                           std::initializer_list<std::string_view> keys,
                                           std::initializer_list<std::string_view> args,
                                           const std::vector<std::string_view>& before)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The SHA of `script`, loading it into Redis on first use.
  absl::StatusOr<std::string> ScriptShaLocked(Script script) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // PipelineLocked on `context` (context_ under mu_, or pages_context_ under pages_mu_;
  // the caller holds the one that guards it).
  absl::StatusOr<std::vector<ReplyPtr>> PipelineOn(
      redisContext*& context, const std::vector<std::vector<std::string_view>>& commands);
  // Runs `commands` on the page connection as MULTI ... EXEC (one round trip, run by Redis
  // with nothing in between) and returns EXEC's reply, an array of one reply per command;
  // an error reply anywhere is UNAVAILABLE naming `what`.
  absl::StatusOr<ReplyPtr> PageTransactionLocked(
      absl::string_view what, const std::vector<std::vector<std::string_view>>& commands)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(pages_mu_);
  // Connects `context` (null before; null again on failure).
  absl::Status Connect(redisContext*& context);
  static void Disconnect(redisContext*& context);

  const Address address_;
  const std::string name_;
  absl::Mutex mu_;
  redisContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;  // null: not connected
  // Each script's SHA1 as SCRIPT LOAD answered it; empty until first used. Kept across
  // reconnects (a SHA names the same script on any server).
  std::string script_sha_[kScripts] ABSL_GUARDED_BY(mu_);
  // The page connection (see the class comment).
  absl::Mutex pages_mu_;
  redisContext* pages_context_ ABSL_GUARDED_BY(pages_mu_) = nullptr;
};

}  // namespace attnserve::store
