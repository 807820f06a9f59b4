#include "server/store/checkpoint_store.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace attnserve::store {

CheckpointStore::CheckpointStore(Options options) : options_(std::move(options)) {}

std::string CheckpointStore::name() const {
  return options_.durable ? options_.durable->name() : std::string("memory");
}

int64_t CheckpointStore::memory_bytes_used() const {
  absl::MutexLock lock(&mu_);
  return used_;
}

int CheckpointStore::memory_records() const {
  absl::MutexLock lock(&mu_);
  return int(entries_.size());
}

void CheckpointStore::EraseLocked(const std::string& key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  used_ -= int64_t(it->second.bytes->size());
  lru_.erase(it->second.lru);
  entries_.erase(it);
}

void CheckpointStore::CacheLocked(const std::string& key,
                                  std::shared_ptr<const std::string> bytes, absl::Time expires) {
  EraseLocked(key);
  const int64_t size = int64_t(bytes->size());
  if (size > options_.memory_bytes) return;
  while (used_ + size > options_.memory_bytes && !lru_.empty()) EraseLocked(lru_.back());
  lru_.push_front(key);
  entries_.emplace(key, Entry{std::move(bytes), expires, lru_.begin()});
  used_ += size;
}

absl::Status CheckpointStore::Put(const std::string& key,
                                  std::shared_ptr<const std::string> bytes, absl::Duration ttl) {
  if (absl::Status s = ValidateSnapshotId(key); !s.ok()) return s;
  if (absl::Status s = ValidateSnapshotTtl(ttl); !s.ok()) return s;
  if (options_.durable) {
    if (absl::Status s = options_.durable->Put(key, *bytes, ttl); !s.ok()) return s;
  } else if (int64_t(bytes->size()) > options_.memory_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "a checkpoint of ", bytes->size(), " bytes does not fit the ", options_.memory_bytes,
        " bytes kept in memory (--checkpoint_memory_bytes), and there is no durable "
        "--session_store"));
  }
  absl::MutexLock lock(&mu_);
  CacheLocked(key, std::move(bytes), options_.clock->Now() + ttl);
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const std::string>> CheckpointStore::Get(const std::string& key) {
  if (absl::Status s = ValidateSnapshotId(key); !s.ok()) return absl::NotFoundError(key);
  const absl::Time now = options_.clock->Now();
  std::shared_ptr<const std::string> cached;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(key);
    if (it != entries_.end()) {
      if (it->second.expires <= now) {
        EraseLocked(key);
      } else {
        lru_.splice(lru_.begin(), lru_, it->second.lru);
        cached = it->second.bytes;
      }
    }
  }
  if (!options_.durable) {
    if (cached) return cached;
    return absl::NotFoundError(key);
  }
  if (cached) {
    // Still there (not deleted by another replica, not expired in the store)?
    auto generation = options_.durable->GetGeneration(key);
    if (!generation.ok()) return generation.status();
    if (*generation > 0) return cached;
    absl::MutexLock lock(&mu_);
    EraseLocked(key);
    return absl::NotFoundError(key);
  }
  auto got = options_.durable->Get(key);
  if (!got.ok()) return got.status();
  auto bytes = std::make_shared<const std::string>(*std::move(got));
  absl::MutexLock lock(&mu_);
  // Cached for as long as the store keeps it; a copy kept past the store's expiry (or
  // deleted there) is caught by the generation read above.
  CacheLocked(key, bytes, absl::InfiniteFuture());
  return bytes;
}

absl::Status CheckpointStore::Renew(const std::string& key, absl::Duration ttl) {
  auto bytes = Get(key);
  if (!bytes.ok()) return bytes.status();
  return Put(key, *std::move(bytes), ttl);
}

absl::Status CheckpointStore::Delete(const std::string& key) {
  if (ValidateSnapshotId(key).ok() && options_.durable) {
    if (absl::Status s = options_.durable->Delete(key); !s.ok()) return s;
  }
  absl::MutexLock lock(&mu_);
  EraseLocked(key);
  return absl::OkStatus();
}

}  // namespace attnserve::store
