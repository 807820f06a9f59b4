// The directory backend of SnapshotStore: one file per session, written atomically.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/store/snapshot_store.h"

namespace attnserve::store {

// Snapshots as files `PATH/<id>.snap` (mode 0600). A Put writes
// `PATH/.<id>.snap.tmp.<random>`, fsyncs it, renames it over the final name and fsyncs the
// directory, so a reader (or a restart after a crash) sees the old or the new bytes, never
// a mix. The expiry time is the file's mtime (set on the temp file before the rename, so it
// is never missing), which needs no side file: Get deletes and refuses a file whose mtime
// has passed, RemoveExpired sweeps the rest and removes temp files a crashed writer left
// (those older than a minute).
//
// Meant for one serving process per directory: deleting an expired file never removes a
// newer one written by this process, but another process could lose a Put that lands in
// the instant between the expiry check and the unlink.
class DirSnapshotStore : public SnapshotStore {
 public:
  // Opens the store at `path`, creating it and its parents if missing. INVALID_ARGUMENT if
  // `path` exists and is not a directory; UNAVAILABLE if it cannot be created or a file
  // cannot be written in it (checked by writing and removing a probe file). `now` is the
  // clock expiry is measured by.
  static absl::StatusOr<std::unique_ptr<DirSnapshotStore>> Create(std::string path,
                                                                  NowFn now = absl::Now);

  absl::Status Put(const std::string& id, std::string_view bytes,
                   absl::Duration ttl) override;
  absl::StatusOr<std::string> Get(const std::string& id) override;
  absl::Status Delete(const std::string& id) override;
  // Returns the number of expired snapshots deleted (stale temp files are not counted).
  absl::StatusOr<int> RemoveExpired() override;
  const std::string& name() const override { return name_; }

  // `PATH/<id>.snap`, where `id`'s snapshot lives (for tests and tools).
  std::string SnapshotPath(const std::string& id) const;

  // Temp files younger than this are a Put in progress; older ones are crash leftovers.
  static constexpr absl::Duration kStaleTempAge = absl::Minutes(1);

 private:
  DirSnapshotStore(std::string path, NowFn now);

  // Writes `bytes` to a new temp file for `id` whose mtime is `expiry`, durably; returns
  // its path. Removes the temp file if anything fails.
  absl::StatusOr<std::string> WriteTemp(const std::string& id, std::string_view bytes,
                                        absl::Time expiry) const;
  // Unlinks the snapshot file `file` if whatever is at that name now has expired (checked
  // under replace_mu_, so it is never a file a concurrent Put just installed). True if it
  // did.
  bool UnlinkIfExpired(const std::string& file);
  // fsyncs the directory, making renames and creations in it durable.
  absl::Status SyncDir() const;
  // The status for a failed syscall on `file` (errno is read by the caller).
  absl::Status Errno(absl::string_view what, const std::string& file, int err) const;
  // UNAVAILABLE if the directory itself is gone, so a missing file means "no snapshot"
  // only while the store exists.
  absl::Status CheckDirExists() const;

  const std::string path_;
  const std::string name_;
  const NowFn now_;
  // Serialises what replaces or removes a final file by name (rename in Put, unlink of an
  // expired file), so an expiry check never deletes a file a Put just installed.
  absl::Mutex replace_mu_;
};

}  // namespace attnserve::store
