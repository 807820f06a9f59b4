// The directory backend of SnapshotStore: files per session, written atomically, and
// flock(2) leases.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/store/file_lock.h"
#include "server/store/snapshot_store.h"

namespace attnserve::store {

// Snapshots as files `PATH/<id>.snap` (mode 0600), each with its generation in
// `PATH/<id>.gen` (decimal). A write puts the bytes and the new generation in temp files
// (`PATH/.<id>.snap.tmp.<random>`, `.gen.tmp.`), fsyncs them, renames them over the final
// names and fsyncs the directory, so a reader (or a restart after a crash) sees the old or
// the new bytes, never a mix. The expiry time is each file's mtime (set on the temp file
// before the rename, so it is never missing; a snapshot and its generation get the same
// one): Get deletes and refuses a snapshot whose mtime has passed, an expired generation
// counts as none (0), RemoveExpired sweeps the rest and removes temp and lock files a
// crashed process left (those older than kStaleTempAge).
//
// Several processes may share a directory on one machine. Locks are flock(2)s (see
// FileLock), which the kernel drops when a process dies:
//
// - Lease: an exclusive lock on `PATH/<id>.lock`, taken without waiting, held by an fd this
//   store keeps (token -> fd) until ReleaseLease, which removes the file, or until the
//   store is destroyed or the process dies (the crash story: the next AcquireLease succeeds
//   at once). It excludes other processes and other store objects in this one, but only
//   this store object can use its tokens. `ttl` is validated and otherwise ignored: a lease
//   does not expire while its holder lives, so RenewLease only checks that the token is
//   held.
// - Gate: `PATH/<id>.rw`, locked exclusively by whatever changes the snapshot and its
//   generation (Put, PutFenced, Delete, expiry) around checking the generation and renaming
//   (or unlinking) both files, and shared by GetWithGeneration around opening both. So a
//   reader never sees new bytes with the old generation or the other way round, and no
//   write can slip between a fenced write's checks and its renames. Held only for those few
//   calls (the temp files are written and synced before, the directory after); removed by
//   whoever last used it (a gate's contents are nothing).
//
// Pages (SnapshotStore's page methods): `PATH/<id>.page`, mtime = expiry like a snapshot.
// PutPages writes a temp file (fsynced, mtime set) and link(2)s it to the page's name,
// which fails if the name exists: put-if-absent, atomic, so a reader sees a whole page or
// none. Extending and removing an expired page both hold an exclusive flock on the page
// file itself (FileLock, which also checks that the name still names the inode locked):
// an extension either finds the file and raises its mtime before any sweep can judge it
// expired, or finds it gone and reports it absent, so its writer writes it again.
//
// PutFenced checks, under the gate, that this store holds `token`'s lease on `id` and that
// `<id>.gen` says `generation`. Plain Get needs no gate (one file). If a crash falls
// between a write's two renames, the generation was raised and the bytes are the old ones:
// as if a write had failed, and it fences out anyone who saw the old generation.
class DirSnapshotStore : public SnapshotStore {
 public:
  // Opens the store at `path`, creating it and its parents if missing. INVALID_ARGUMENT if
  // `path` exists and is not a directory; UNAVAILABLE if it cannot be created or a file
  // cannot be written in it (checked by writing and removing a probe file). `now` is the
  // clock expiry is measured by.
  static absl::StatusOr<std::unique_ptr<DirSnapshotStore>> Create(std::string path,
                                                                  const Clock* clock = RealClock::Get());
  ~DirSnapshotStore() override;  // releases the leases it holds

  absl::Status Put(const std::string& id, std::string_view bytes,
                   absl::Duration ttl) override;
  absl::StatusOr<std::string> Get(const std::string& id) override;
  absl::Status Delete(const std::string& id) override;
  // Returns the number of expired snapshots deleted (generations, expired pages, stale
  // temp files and lock files are not counted).
  absl::StatusOr<int> RemoveExpired() override;
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
  // Pages (see the class comment).
  absl::StatusOr<int64_t> PutPages(const std::vector<PageWrite>& pages,
                                   absl::Duration ttl) override;
  absl::StatusOr<std::vector<std::optional<std::string>>> GetPages(
      const std::vector<std::string>& ids) override;
  absl::StatusOr<std::vector<bool>> ExtendPages(const std::vector<std::string>& ids,
                                                absl::Duration ttl) override;
  const std::string& name() const override { return name_; }

  // `PATH/<id>.snap`, `.gen`, `.lock`, `.rw`: where `id`'s snapshot, generation, lease and
  // gate live (for tests and tools).
  std::string SnapshotPath(const std::string& id) const;
  std::string GenerationPath(const std::string& id) const;
  std::string LeasePath(const std::string& id) const;
  std::string GatePath(const std::string& id) const;
  // `PATH/<id>.page`: where page `id` lives.
  std::string PagePath(const std::string& id) const;

  // Temp files younger than this are a Put in progress; older ones are crash leftovers.
  // Unlocked lease and gate files older than this are swept too.
  static constexpr absl::Duration kStaleTempAge = absl::Minutes(1);

 private:
  struct Fence {
    const std::string& token;
    int64_t generation;
  };

  DirSnapshotStore(std::string path, const Clock* clock);

  // Put and PutFenced (`fence` non-null); returns the new generation.
  absl::StatusOr<int64_t> Write(const std::string& id, std::string_view bytes,
                                absl::Duration ttl, const Fence* fence);
  // Write's part under the exclusive gate: checks the fence (or, for a plain Put, that
  // the generation is still `expected`, else rewrites `gen_temp` with the right one), then
  // renames `gen_temp` and `snap_temp` into place. Returns the new generation.
  absl::StatusOr<int64_t> Install(const std::string& id, const Fence* fence,
                                  int64_t expected, absl::Time expiry,
                                  const std::string& snap_temp, std::string* gen_temp);
  // Writes `bytes` to a new temp file for `id`'s `suffix` (".snap" or ".gen") whose mtime
  // is `expiry`, durably; returns its path. Removes the temp file if anything fails.
  absl::StatusOr<std::string> WriteTemp(const std::string& id, absl::string_view suffix,
                                        std::string_view bytes, absl::Time expiry) const;
  // Reads the open snapshot `fd` of `id` (closing it): its bytes, or NOT_FOUND (and the
  // file deleted) if it has expired.
  absl::StatusOr<std::string> ReadSnapshot(const std::string& id, int fd);
  // `id`'s generation as of `now`: 0 if it has none or it has expired.
  absl::StatusOr<int64_t> ReadGeneration(const std::string& id, absl::Time now) const;
  // The same for the generation file `file` open as `fd` (closing it).
  absl::StatusOr<int64_t> ReadGenerationFd(const std::string& file, int fd,
                                           absl::Time now) const;
  // Takes `id`'s gate with `operation` (LOCK_SH or LOCK_EX) into `gate`.
  absl::Status LockGate(const std::string& id, int operation, FileLock* gate) const;
  // True if this store holds the lease `token` on `id`.
  bool HoldsLease(const std::string& id, const std::string& token) const;
  // Unlinks `id`'s snapshot and generation files that have expired, under the gate, so
  // never a file a concurrent write just installed. True if it unlinked the snapshot.
  bool UnlinkIfExpired(const std::string& id);
  // Makes page `id` expire no sooner than `expiry`; false if it is absent or expired.
  absl::StatusOr<bool> ExtendPage(const std::string& id, absl::Time expiry);
  // Unlinks page `id` if it has expired; never one a writer has just extended.
  void RemovePageIfExpired(const std::string& id);
  // Removes the lease or gate file `file` if it is old and nobody holds it.
  void RemoveIfStaleLock(const std::string& file);
  // fsyncs the directory, making renames and creations in it durable.
  absl::Status SyncDir() const;
  // The status for a failed syscall on `file` (errno is read by the caller).
  absl::Status Errno(absl::string_view what, const std::string& file, int err) const;
  // UNAVAILABLE if the directory itself is gone, so a missing file means "no snapshot"
  // only while the store exists.
  absl::Status CheckDirExists() const;

  struct Lease {
    std::string id;
    FileLock lock;
  };

  const std::string path_;
  const std::string name_;
  const Clock* const clock_;  // not owned
  mutable absl::Mutex leases_mu_;
  absl::flat_hash_map<std::string, Lease> leases_ ABSL_GUARDED_BY(leases_mu_);  // by token
};

}  // namespace attnserve::store
