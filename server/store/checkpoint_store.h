// Immutable checkpoints: byte records written once under a key and read back, by this
// process or by any replica sharing the durable store, until they expire or are deleted.
// The HTTP front keeps a stored response here (the state after it plus the response
// object): "continue from response X" reads X and never changes it, so two
// continuations of one response fork.
//
// Where they live: with a durable SnapshotStore, there (the shared truth, with a TTL)
// and also in this process's memory as a cache; without one, only in memory. Memory is
// bounded by bytes, least recently used out first: memory-only checkpoints evicted that
// way are gone (Get answers NOT_FOUND, as for one that never existed).
//
// A cached copy is served only after the durable store confirms the key still exists
// (one generation read, a few bytes): a delete on another replica is seen at once.
// Thread-safe. Bytes only: what a record holds is its writer's business.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/common/clock.h"
#include "server/store/snapshot_store.h"

namespace attnserve::store {

class CheckpointStore {
 public:
  struct Options {
    // Bytes of checkpoints kept in this process's memory (a record larger than this is
    // not cached; without a durable store it cannot be kept at all: RESOURCE_EXHAUSTED).
    int64_t memory_bytes = 0;
    // The shared home; null: memory only.
    std::unique_ptr<SnapshotStore> durable;
    // Not owned; expires memory entries.
    const Clock* clock = RealClock::Get();
  };
  explicit CheckpointStore(Options options);

  // Writes `bytes` under `key` (a SnapshotStore id: 1..128 of [0-9a-zA-Z_-]) for `ttl`
  // (positive). With a durable store, OK only once it is written there (UNAVAILABLE
  // naming the store otherwise).
  absl::Status Put(const std::string& key, std::shared_ptr<const std::string> bytes,
                   absl::Duration ttl);
  // The bytes under `key`; NOT_FOUND if absent, expired, deleted or (memory only)
  // evicted; UNAVAILABLE naming the store when it cannot be read.
  absl::StatusOr<std::shared_ptr<const std::string>> Get(const std::string& key);
  // Removes `key` everywhere; OK if absent. UNAVAILABLE when the store is unreachable.
  absl::Status Delete(const std::string& key);
  // Keeps `key` for `ttl` from now (a durable store's copy is written again); NOT_FOUND
  // and UNAVAILABLE as Get.
  absl::Status Renew(const std::string& key, absl::Duration ttl);

  // "memory" or the durable store's name.
  std::string name() const;
  bool durable() const { return options_.durable != nullptr; }
  // Bytes and records in this process's memory now.
  int64_t memory_bytes_used() const;
  int memory_records() const;

 private:
  struct Entry {
    std::shared_ptr<const std::string> bytes;
    absl::Time expires;
    std::list<std::string>::iterator lru;  // position in lru_
  };
  void CacheLocked(const std::string& key, std::shared_ptr<const std::string> bytes,
                   absl::Time expires) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EraseLocked(const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  mutable absl::Mutex mu_;
  std::unordered_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::list<std::string> lru_ ABSL_GUARDED_BY(mu_);  // most recently used first
  int64_t used_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace attnserve::store
