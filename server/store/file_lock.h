// flock(2) locks on lock files that may be removed while others wait on them: the dir
// store's leases and read/write gates.
#pragma once

#include <string>

namespace attnserve::store {

// One flock(2) lock held on a lock file: an open file description, so it excludes every
// other holder, whether in another process or another FileLock in this one. The kernel
// drops it when the fd is closed (Release, destruction) or the process dies. A process
// forked while holding one shares it until the child exits or execs (fds are O_CLOEXEC).
//
// Lock files can be removed safely: only a holder of the exclusive lock removes the file
// (Remove...AndRelease), and Take checks, once it holds a lock, that the file it locked is
// still the one at that name; if the name was removed (or replaced) meanwhile it drops that
// lock and starts over. So a lock held is always on the file the name names now. Not
// thread-safe (one owner).
class FileLock {
 public:
  FileLock() = default;  // holds nothing
  FileLock(FileLock&& other) noexcept;
  FileLock& operator=(FileLock&& other) noexcept;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  ~FileLock() { Release(); }

  // Locks `file` with `operation` (LOCK_SH or LOCK_EX, optionally | LOCK_NB), creating it
  // (mode 0600) if it is missing and `create` is set, and stores the lock in `out`. Returns
  // 0, or an errno: EWOULDBLOCK if LOCK_NB and another holds a conflicting lock, ENOENT if
  // the file is missing and `create` is not set, else that of the failing call.
  static int Take(const std::string& file, int operation, bool create, FileLock* out);

  bool held() const { return fd_ >= 0; }

  // Drops the lock; a no-op if none is held.
  void Release();
  // Removes the lock file, then drops the lock. Requires the lock to be exclusive.
  void RemoveAndRelease();
  // Removes the lock file if the lock can be made exclusive at once (nobody else holds one;
  // those waiting for it start over), then drops the lock either way. For holders of a
  // shared lock that would otherwise leave the file behind.
  void RemoveIfUnusedAndRelease();

 private:
  int fd_ = -1;
  std::string file_;
};

}  // namespace attnserve::store
