// The Redis backend of SnapshotStore (hiredis, synchronous, one connection).
#pragma once

#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>

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

// Snapshots as Redis strings under `attnserve:session:<id>`, written with SET ... PX so
// Redis expires them itself (RemoveExpired is a no-op). Values are sent as counted
// arguments, so any bytes round-trip.
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
  const std::string& name() const override { return name_; }

  // The key holding `id`'s snapshot: "attnserve:session:<id>".
  static std::string Key(const std::string& id);

 private:
  explicit RedisSnapshotStore(Address address);

  // Runs the command `args` (connecting first if needed) and passes a non-error reply to
  // `on_reply`, whose status is returned. An error reply or a failure to reach Redis is
  // UNAVAILABLE.
  absl::Status Run(std::initializer_list<std::string_view> args,
                   absl::FunctionRef<absl::Status(const redisReply&)> on_reply);
  absl::Status ConnectLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DisconnectLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Address address_;
  const std::string name_;
  absl::Mutex mu_;
  redisContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;  // null: not connected
};

}  // namespace attnserve::store
