// DirSnapshotStore's lock files: leases (flock on <id>.lock) and the sweeping of lock files
// crashed processes left. The protocol is in dir_store.h.
#include <sys/file.h>
#include <sys/stat.h>

#include <cerrno>
#include <utility>

#include "server/store/dir_store.h"
#include "server/store/file_lock.h"

namespace attnserve::store {

DirSnapshotStore::~DirSnapshotStore() {
  absl::MutexLock lock(&leases_mu_);
  for (auto& [token, lease] : leases_) lease.lock.RemoveAndRelease();
}

absl::StatusOr<LeaseGrant> DirSnapshotStore::AcquireLease(const std::string& id,
                                                          absl::Duration ttl) {
  if (absl::Status s = ValidateSnapshotId(id); !s.ok()) return s;
  if (absl::Status s = ValidateSnapshotTtl(ttl); !s.ok()) return s;
  const std::string file = LeasePath(id);
  FileLock lock;
  if (int err = FileLock::Take(file, LOCK_EX | LOCK_NB, /*create=*/true, &lock); err != 0) {
    if (err == EWOULDBLOCK) return LeaseHeldError(id);
    return Errno("locking", file, err);
  }
  absl::StatusOr<int64_t> generation = ReadGeneration(id, clock_->Now());
  if (!generation.ok()) {
    lock.RemoveAndRelease();
    return generation.status();
  }
  LeaseGrant grant{NewLeaseToken(), *generation};
  absl::MutexLock hold(&leases_mu_);
  leases_.emplace(grant.token, Lease{id, std::move(lock)});
  return grant;
}

absl::Status DirSnapshotStore::RenewLease(const std::string& id, const std::string& token,
                                          absl::Duration ttl) {
  if (absl::Status s = ValidateSnapshotId(id); !s.ok()) return s;
  if (absl::Status s = ValidateSnapshotTtl(ttl); !s.ok()) return s;
  return HoldsLease(id, token) ? absl::OkStatus() : LeaseLostError(id);
}

absl::Status DirSnapshotStore::ReleaseLease(const std::string& id,
                                            const std::string& token) {
  if (absl::Status s = ValidateSnapshotId(id); !s.ok()) return s;
  FileLock lock;
  {
    absl::MutexLock hold(&leases_mu_);
    auto it = leases_.find(token);
    if (it == leases_.end() || it->second.id != id) return absl::OkStatus();
    lock = std::move(it->second.lock);
    leases_.erase(it);
  }
  lock.RemoveAndRelease();
  return absl::OkStatus();
}

bool DirSnapshotStore::HoldsLease(const std::string& id, const std::string& token) const {
  absl::MutexLock hold(&leases_mu_);
  auto it = leases_.find(token);
  return it != leases_.end() && it->second.id == id;
}

void DirSnapshotStore::RemoveIfStaleLock(const std::string& file) {
  // An unlocked lease file is a crashed holder's (ReleaseLease removes its own); an
  // unlocked gate, one whose last user could not remove it. Young ones are left alone so as
  // not to get in the way of a lock being taken right now.
  struct stat st;
  if (lstat(file.c_str(), &st) != 0 || !S_ISREG(st.st_mode) ||
      clock_->Now() - absl::TimeFromTimespec(st.st_ctim) < kStaleTempAge) {
    return;
  }
  FileLock lock;
  if (FileLock::Take(file, LOCK_EX | LOCK_NB, /*create=*/false, &lock) == 0) {
    lock.RemoveAndRelease();
  }
}

}  // namespace attnserve::store
