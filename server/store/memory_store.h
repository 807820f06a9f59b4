// The in-process backend of SnapshotStore: the same contract (generations, leases,
// fenced writes, expiry) kept in a map, for what needs those semantics without a
// durable store (the HTTP front's conversations under --session_store=memory) and for
// tests. Nothing survives the process. Leases expire by `ttl` like Redis's.
#pragma once

#include <cstdint>
#include <string>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "server/common/clock.h"
#include "server/store/snapshot_store.h"

namespace attnserve::store {

class MemorySnapshotStore : public SnapshotStore {
 public:
  // `clock` (not owned, outlives the store) expires snapshots and leases.
  explicit MemorySnapshotStore(const Clock* clock = RealClock::Get());

  absl::Status Put(const std::string& id, std::string_view bytes, absl::Duration ttl) override;
  absl::StatusOr<std::string> Get(const std::string& id) override;
  absl::Status Delete(const std::string& id) override;
  absl::StatusOr<int> RemoveExpired() override;
  absl::StatusOr<LeaseGrant> AcquireLease(const std::string& id, absl::Duration ttl) override;
  absl::Status RenewLease(const std::string& id, const std::string& token,
                          absl::Duration ttl) override;
  absl::Status ReleaseLease(const std::string& id, const std::string& token) override;
  absl::StatusOr<int64_t> PutFenced(const std::string& id, std::string_view bytes,
                                    absl::Duration ttl, const std::string& token,
                                    int64_t generation) override;
  absl::StatusOr<std::pair<std::string, int64_t>> GetWithGeneration(
      const std::string& id) override;
  absl::StatusOr<int64_t> GetGeneration(const std::string& id) override;
  absl::StatusOr<int64_t> PutPages(const std::vector<PageWrite>& pages,
                                   absl::Duration ttl) override;
  absl::StatusOr<std::vector<std::optional<std::string>>> GetPages(
      const std::vector<std::string>& ids) override;
  absl::StatusOr<std::vector<bool>> ExtendPages(const std::vector<std::string>& ids,
                                                absl::Duration ttl) override;
  const std::string& name() const override { return name_; }
  // Bytes of the snapshots held (pages not included), expired ones included until a
  // read or RemoveExpired drops them: what a budget on this store counts.
  int64_t bytes();

 private:
  struct Snapshot {
    std::string bytes;
    int64_t generation = 0;
    absl::Time expires;
  };
  struct Lease {
    std::string token;
    absl::Time expires;
  };
  // The live snapshot of `id` (expired ones are dropped here), or null.
  Snapshot* FindLocked(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The live lease on `id`, or null.
  Lease* FindLeaseLocked(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WriteLocked(const std::string& id, std::string_view bytes, absl::Duration ttl)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Clock* const clock_;
  const std::string name_ = "memory";
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Snapshot> snapshots_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Lease> leases_ ABSL_GUARDED_BY(mu_);
  struct Page {
    std::string bytes;
    absl::Time expires;
  };
  // The live page `id` (an expired one is dropped here), or null.
  Page* FindPageLocked(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::flat_hash_map<std::string, Page> pages_ ABSL_GUARDED_BY(mu_);
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;  // of snapshots_
};

}  // namespace attnserve::store
