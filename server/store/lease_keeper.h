// Replication's lease half, "one writer per session" (server/DESIGN.md §7): store leases
// taken with a bounded wait, kept alive while held, given up after the write that makes the
// store current. Every write of a leased session is fenced by the lease's token and the
// generation it last saw, so a process that lost its lease can never overwrite newer
// state. Thread-safe.
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "server/config/defaults.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/metrics/metrics.h"
#include "server/store/snapshot_store.h"

namespace attnserve::store {

class LeaseKeeper {
 public:
  struct Options {
    // A lease lapses this long after it was taken or last renewed (a crashed holder's
    // sessions are free again after it); held leases are renewed every ttl / 3.
    absl::Duration ttl = config::defaults::kLeaseTtl;
    // How long Acquire waits for another holder to finish its turn before answering
    // UNAVAILABLE.
    absl::Duration wait = config::defaults::kLeaseWait;
  };

  // `store` and `metrics` (may be null) are not owned and must outlive the keeper.
  LeaseKeeper(SnapshotStore* store, Options options, metrics::StoreMetrics* metrics);
  ~LeaseKeeper();  // stops renewing (held leases lapse by themselves)

  // Takes the lease on session `id`, retrying while another writer holds it for up to
  // Options::wait (`wait`) or not at all (!`wait`: for threads that must not sleep);
  // then ABORTED "session <id> has a turn in flight on another server; retry shortly".
  // UNAVAILABLE naming the store when it is unreachable. The lease is renewed in the
  // background until Release.
  absl::StatusOr<LeaseGrant> Acquire(const std::string& id, bool wait = true);
  // True while the lease `token` on `id` is held (not released, renewal not failed).
  bool Held(const std::string& id, const std::string& token) const;
  // Writes `bytes` fenced by `token` and `generation`; the new generation, or ABORTED if
  // the lease or generation was lost (nothing written).
  absl::StatusOr<int64_t> WriteFenced(const std::string& id, std::string_view bytes,
                                      absl::Duration ttl, const std::string& token,
                                      int64_t generation);
  // Gives the lease up (best effort: a lease that cannot be released lapses).
  void Release(const std::string& id, const std::string& token);

 private:
  void RenewLoop();

  SnapshotStore* const store_;
  const Options options_;
  metrics::StoreMetrics* const metrics_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> held_;  // id -> token; guarded by mu_
  bool stop_ = false;                        // guarded by mu_
  std::thread renewer_;
};

}  // namespace attnserve::store
