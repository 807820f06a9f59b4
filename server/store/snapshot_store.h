// Durable homes for session snapshots: one interface, SnapshotStore, and one factory,
// OpenSnapshotStore, that turns a --session_store value into a backend (a directory of
// files, or Redis). The store holds opaque bytes; encoding and verifying them is the
// snapshot codec's job, deciding when to write them the session store's.
//
// Torch-free and session-free: a leaf that only the session library links.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace attnserve::store {

// The time source a backend reads for expiry; tests pass a manual clock.
using NowFn = std::function<absl::Time()>;

// A durable place for session snapshots: opaque byte strings keyed by session id.
// Thread-safe: every method may be called from any thread concurrently.
//
// Ids must be 1..128 characters of [0-9a-zA-Z_-] (session ids are 32 lowercase hex
// characters); every method answers INVALID_ARGUMENT for anything else, so an id can
// never name a path outside the store.
class SnapshotStore {
 public:
  virtual ~SnapshotStore() = default;
  // Writes `bytes` as session `id`'s snapshot, replacing any earlier one atomically (a
  // reader sees the old or the new bytes, never a mix); it expires `ttl` after this Put
  // (`ttl` must be positive, INVALID_ARGUMENT otherwise; it is rounded up to a whole
  // millisecond). UNAVAILABLE naming the store (e.g. "session store dir:/x: ...: No space
  // left on device" / "session store redis://127.0.0.1:6379: Connection refused") when it
  // cannot write.
  virtual absl::Status Put(const std::string& id, std::string_view bytes,
                           absl::Duration ttl) = 0;
  // The bytes last written for `id`. NOT_FOUND if absent or expired; UNAVAILABLE naming the
  // store when it cannot be read.
  virtual absl::StatusOr<std::string> Get(const std::string& id) = 0;
  // Removes `id`'s snapshot; OK if there was none. UNAVAILABLE when unreachable.
  virtual absl::Status Delete(const std::string& id) = 0;
  // Deletes expired snapshots (a no-op where the backend expires them itself); returns how
  // many.
  virtual absl::StatusOr<int> RemoveExpired() = 0;
  // "dir:/path" or "redis://host:port", for messages and metrics labels.
  virtual const std::string& name() const = 0;
};

// Opens a backend from a --session_store value:
//   "dir:PATH"                 files under PATH, created (with its parents) if missing; an
//                              existing non-directory there is INVALID_ARGUMENT, a
//                              directory that cannot be created or written UNAVAILABLE.
//   "redis://HOST:PORT[/DB]"   a Redis server (HOST may be "[v6addr]"); opening does not
//                              connect, so the server need not be up: the store connects on
//                              first use and reconnects after failures.
// Anything else, including "memory" (which the caller handles itself: it means no durable
// store), is INVALID_ARGUMENT naming the accepted forms. `now` is the clock the dir backend
// expires files by (Redis keeps its own).
absl::StatusOr<std::unique_ptr<SnapshotStore>> OpenSnapshotStore(const std::string& spec,
                                                                 NowFn now = absl::Now);

// --- For backends. ---

// OK if `id` is a valid snapshot id (see SnapshotStore), else INVALID_ARGUMENT naming it.
absl::Status ValidateSnapshotId(const std::string& id);
// OK if `ttl` is positive, else INVALID_ARGUMENT.
absl::Status ValidateSnapshotTtl(absl::Duration ttl);
// `ttl` rounded up to whole milliseconds (the precision both backends keep).
absl::Duration RoundTtl(absl::Duration ttl);
// UNAVAILABLE "session store <store_name>: <what>".
absl::Status StoreUnavailable(const std::string& store_name, absl::string_view what);

}  // namespace attnserve::store
