#include "server/store/memory_store.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace attnserve::store {

MemorySnapshotStore::MemorySnapshotStore(const Clock* clock) : clock_(clock) {}

MemorySnapshotStore::Snapshot* MemorySnapshotStore::FindLocked(const std::string& id) {
  auto it = snapshots_.find(id);
  if (it == snapshots_.end()) return nullptr;
  if (it->second.expires <= clock_->Now()) {
    bytes_ -= int64_t(it->second.bytes.size());
    snapshots_.erase(it);
    return nullptr;
  }
  return &it->second;
}

MemorySnapshotStore::Lease* MemorySnapshotStore::FindLeaseLocked(const std::string& id) {
  auto it = leases_.find(id);
  if (it == leases_.end()) return nullptr;
  if (it->second.expires <= clock_->Now()) {
    leases_.erase(it);
    return nullptr;
  }
  return &it->second;
}

void MemorySnapshotStore::WriteLocked(const std::string& id, std::string_view bytes,
                                      absl::Duration ttl) {
  Snapshot* old = FindLocked(id);
  const int64_t generation = old == nullptr ? 1 : old->generation + 1;
  bytes_ += int64_t(bytes.size()) - (old == nullptr ? 0 : int64_t(old->bytes.size()));
  snapshots_[id] = Snapshot{std::string(bytes), generation, clock_->Now() + RoundTtl(ttl)};
}

absl::Status MemorySnapshotStore::Put(const std::string& id, std::string_view bytes,
                                      absl::Duration ttl) {
  if (absl::Status s = ValidateSnapshotId(id); !s.ok()) return s;
  if (absl::Status s = ValidateSnapshotTtl(ttl); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  WriteLocked(id, bytes, ttl);
  return absl::OkStatus();
}

absl::StatusOr<std::string> MemorySnapshotStore::Get(const std::string& id) {
  auto got = GetWithGeneration(id);
  if (!got.ok()) return got.status();
  return std::move(got->first);
}

absl::Status MemorySnapshotStore::Delete(const std::string& id) {
  if (absl::Status s = ValidateSnapshotId(id); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  if (auto it = snapshots_.find(id); it != snapshots_.end()) {
    bytes_ -= int64_t(it->second.bytes.size());
    snapshots_.erase(it);
  }
  return absl::OkStatus();
}

absl::StatusOr<int> MemorySnapshotStore::RemoveExpired() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  int removed = 0;
  for (auto it = snapshots_.begin(); it != snapshots_.end();) {
    if (it->second.expires <= now) {
      bytes_ -= int64_t(it->second.bytes.size());
      snapshots_.erase(it++);
      ++removed;
    } else {
      ++it;
    }
  }
  for (auto it = pages_.begin(); it != pages_.end();) {
    if (it->second.expires <= now) {
      pages_.erase(it++);
    } else {
      ++it;
    }
  }
  for (auto it = leases_.begin(); it != leases_.end();) {
    if (it->second.expires <= now) {
      leases_.erase(it++);
    } else {
      ++it;
    }
  }
  return removed;
}

absl::StatusOr<LeaseGrant> MemorySnapshotStore::AcquireLease(const std::string& id,
                                                             absl::Duration ttl) {
  if (absl::Status s = ValidateSnapshotId(id); !s.ok()) return s;
  if (absl::Status s = ValidateSnapshotTtl(ttl); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  if (FindLeaseLocked(id) != nullptr) return LeaseHeldError(id);
  LeaseGrant grant;
  grant.token = NewLeaseToken();
  const Snapshot* snapshot = FindLocked(id);
  grant.generation = snapshot == nullptr ? 0 : snapshot->generation;
  leases_[id] = Lease{grant.token, clock_->Now() + RoundTtl(ttl)};
  return grant;
}

absl::Status MemorySnapshotStore::RenewLease(const std::string& id, const std::string& token,
                                             absl::Duration ttl) {
  if (absl::Status s = ValidateSnapshotId(id); !s.ok()) return s;
  if (absl::Status s = ValidateSnapshotTtl(ttl); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  Lease* lease = FindLeaseLocked(id);
  if (lease == nullptr || lease->token != token) return LeaseLostError(id);
  lease->expires = clock_->Now() + RoundTtl(ttl);
  return absl::OkStatus();
}

absl::Status MemorySnapshotStore::ReleaseLease(const std::string& id, const std::string& token) {
  if (absl::Status s = ValidateSnapshotId(id); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  Lease* lease = FindLeaseLocked(id);
  if (lease != nullptr && lease->token == token) leases_.erase(id);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> MemorySnapshotStore::PutFenced(const std::string& id,
                                                       std::string_view bytes,
                                                       absl::Duration ttl,
                                                       const std::string& token,
                                                       int64_t generation) {
  if (absl::Status s = ValidateSnapshotId(id); !s.ok()) return s;
  if (absl::Status s = ValidateSnapshotTtl(ttl); !s.ok()) return s;
  if (absl::Status s = ValidateGeneration(generation); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  Lease* lease = FindLeaseLocked(id);
  if (lease == nullptr || lease->token != token) return LeaseLostError(id);
  const Snapshot* snapshot = FindLocked(id);
  const int64_t stored = snapshot == nullptr ? 0 : snapshot->generation;
  if (stored != generation) return StaleGenerationError(id, generation, stored);
  WriteLocked(id, bytes, ttl);
  return generation + 1;
}

absl::StatusOr<std::pair<std::string, int64_t>> MemorySnapshotStore::GetWithGeneration(
    const std::string& id) {
  if (absl::Status s = ValidateSnapshotId(id); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  const Snapshot* snapshot = FindLocked(id);
  if (snapshot == nullptr) return absl::NotFoundError(absl::StrCat("session ", id, ": no snapshot in ", name_));
  return std::make_pair(snapshot->bytes, snapshot->generation);
}

int64_t MemorySnapshotStore::bytes() {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

MemorySnapshotStore::Page* MemorySnapshotStore::FindPageLocked(const std::string& id) {
  auto it = pages_.find(id);
  if (it == pages_.end()) return nullptr;
  if (it->second.expires <= clock_->Now()) {
    pages_.erase(it);
    return nullptr;
  }
  return &it->second;
}

absl::StatusOr<int64_t> MemorySnapshotStore::PutPages(const std::vector<PageWrite>& pages,
                                                      absl::Duration ttl) {
  if (absl::Status s = ValidatePageIds(pages); !s.ok()) return s;
  if (absl::Status s = ValidateSnapshotTtl(ttl); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  const absl::Time expires = clock_->Now() + RoundTtl(ttl);
  int64_t written = 0;
  for (const PageWrite& page : pages) {
    if (Page* stored = FindPageLocked(page.id)) {
      stored->expires = std::max(stored->expires, expires);
      continue;
    }
    pages_[page.id] = Page{std::string(page.bytes), expires};
    written += int64_t(page.bytes.size());
  }
  return written;
}

absl::StatusOr<std::vector<std::optional<std::string>>> MemorySnapshotStore::GetPages(
    const std::vector<std::string>& ids) {
  if (absl::Status s = ValidatePageIds(ids); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  std::vector<std::optional<std::string>> out;
  for (const std::string& id : ids) {
    const Page* page = FindPageLocked(id);
    out.push_back(page == nullptr ? std::nullopt : std::optional<std::string>(page->bytes));
  }
  return out;
}

absl::StatusOr<std::vector<bool>> MemorySnapshotStore::ExtendPages(
    const std::vector<std::string>& ids, absl::Duration ttl) {
  if (absl::Status s = ValidatePageIds(ids); !s.ok()) return s;
  if (absl::Status s = ValidateSnapshotTtl(ttl); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  const absl::Time expires = clock_->Now() + RoundTtl(ttl);
  std::vector<bool> out;
  for (const std::string& id : ids) {
    Page* page = FindPageLocked(id);
    if (page != nullptr) page->expires = std::max(page->expires, expires);
    out.push_back(page != nullptr);
  }
  return out;
}

absl::StatusOr<int64_t> MemorySnapshotStore::GetGeneration(const std::string& id) {
  if (absl::Status s = ValidateSnapshotId(id); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  const Snapshot* snapshot = FindLocked(id);
  return snapshot == nullptr ? 0 : snapshot->generation;
}

}  // namespace attnserve::store
