// Durable homes for session snapshots: one interface, SnapshotStore, and one factory,
// OpenSnapshotStore, that turns a --session_store value into a backend (a directory of
// files, or Redis). The store holds opaque bytes; encoding and verifying them is the
// snapshot codec's job, deciding when to write them the session store's.
//
// Torch-free and session-free: a leaf that only the session library links.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/common/clock.h"

namespace attnserve::store {

// A writer's claim on one session, for `ttl` unless renewed (see AcquireLease).
struct LeaseGrant {
  std::string token;       // random, 128 bits hex, unique per grant
  int64_t generation = 0;  // generation of the stored snapshot now (0: none stored)
};

// A durable place for session snapshots: opaque byte strings keyed by session id.
// Thread-safe: every method may be called from any thread concurrently.
//
// Ids must be 1..128 characters of [0-9a-zA-Z_-] (session ids are 32 lowercase hex
// characters); every method answers INVALID_ARGUMENT for anything else, so an id can
// never name a path outside the store.
//
// One writer per session (server/DESIGN.md §7): every stored snapshot has a generation, a
// count that each write raises by one (the first write makes it 1; 0 means none stored). It
// lives exactly as long as the snapshot (same expiry) and Delete removes it with the bytes.
// A writer takes the session's lease (AcquireLease), which tells it the current generation,
// writes with PutFenced, which refuses unless the lease is still its own and the generation
// is still the one it last saw, and gives the lease up (ReleaseLease). So a writer that
// lost its lease, or raced another, can never overwrite newer state. Plain Put and Delete
// ignore leases (for tools and single-writer setups); they still move the generation, so
// they fence out any writer that saw the old one.
class SnapshotStore {
 public:
  virtual ~SnapshotStore() = default;
  // Writes `bytes` as session `id`'s snapshot, replacing any earlier one atomically (a
  // reader sees the old or the new bytes, never a mix), and raises the generation by one
  // (to 1 if none is stored); it expires `ttl` after this Put (`ttl` must be positive,
  // INVALID_ARGUMENT otherwise; it is rounded up to a whole millisecond). UNAVAILABLE
  // naming the store (e.g. "session store dir:/x: ...: No space left on device" / "session
  // store redis://127.0.0.1:6379: Connection refused") when it cannot write.
  virtual absl::Status Put(const std::string& id, std::string_view bytes,
                           absl::Duration ttl) = 0;
  // The bytes last written for `id`. NOT_FOUND if absent or expired; UNAVAILABLE naming the
  // store when it cannot be read.
  virtual absl::StatusOr<std::string> Get(const std::string& id) = 0;
  // Removes `id`'s snapshot and its generation; OK if there was none. Leases are left
  // alone. UNAVAILABLE when unreachable.
  virtual absl::Status Delete(const std::string& id) = 0;
  // Deletes expired snapshots (a no-op where the backend expires them itself); returns how
  // many.
  virtual absl::StatusOr<int> RemoveExpired() = 0;

  // --- Leases and fenced writes. `ttl`s must be positive (INVALID_ARGUMENT otherwise) and
  // are rounded up to whole milliseconds. Every method answers UNAVAILABLE naming the store
  // when it is unreachable. ---

  // Takes the lease on session `id` for `ttl`. ABORTED "session <id> is leased by another
  // writer" if someone else holds it (the caller may wait and retry); a holder asking again
  // is "someone else" too. The grant carries the stored snapshot's generation, read
  // atomically with taking the lease.
  virtual absl::StatusOr<LeaseGrant> AcquireLease(const std::string& id,
                                                  absl::Duration ttl) = 0;
  // Extends the lease `token` holds to `ttl` from now. ABORTED "session <id>: lease lost"
  // if the lease was lost (expired and possibly taken by someone else, or released).
  virtual absl::Status RenewLease(const std::string& id, const std::string& token,
                                  absl::Duration ttl) = 0;
  // Gives the lease up; OK if it was already lost. Never deletes someone else's lease.
  virtual absl::Status ReleaseLease(const std::string& id, const std::string& token) = 0;
  // Put, fenced: writes only if `token` still holds the lease AND the stored generation is
  // `generation`; then the stored generation becomes generation + 1, which it returns.
  // ABORTED (nothing written) naming which check failed: "session <id>: lease lost" or
  // "session <id>: stale generation N, the store has M" (the lease is checked first).
  // Atomic: no other write can interleave between check and write. A negative `generation`
  // is INVALID_ARGUMENT.
  virtual absl::StatusOr<int64_t> PutFenced(const std::string& id, std::string_view bytes,
                                            absl::Duration ttl, const std::string& token,
                                            int64_t generation) = 0;
  // Get plus the stored generation, read atomically together: the bytes are those the write
  // that produced that generation wrote. NOT_FOUND as Get. A snapshot written before stores
  // kept generations reads as generation 0.
  virtual absl::StatusOr<std::pair<std::string, int64_t>> GetWithGeneration(
      const std::string& id) = 0;
  // The stored snapshot's generation alone (0: none stored), without reading its bytes:
  // for a server to tell cheaply whether its copy in memory is still the newest.
  virtual absl::StatusOr<int64_t> GetGeneration(const std::string& id) = 0;

  // --- Pages (state_pages.h, server/DESIGN.md §13): immutable byte strings named by
  // their content ("page_" + 64 hex, RecordKind::kPage), each shared by the records that
  // name it. Immutable, so never fenced: two writers of one id write the same bytes. A page
  // lives as long as the longest-lived record naming it: a writer extends (or writes)
  // every page a record names BEFORE writing the record, and a reader that misses one
  // takes the record as absent. Pages are never deleted by id; they expire. `ttl`s must be
  // positive (INVALID_ARGUMENT otherwise) and are rounded up to whole milliseconds; ids
  // are validated as snapshot ids. UNAVAILABLE naming the store when it is unreachable.
  // A backend that keeps no pages answers UNIMPLEMENTED to all three (the default here):
  // its callers store whole records instead. ---

  struct PageWrite {
    std::string id;
    std::string_view bytes;
  };
  // Writes each page of `pages` that is absent, to expire `ttl` from now; one already
  // stored keeps its bytes and expires no sooner than `ttl` from now (an expiry is never
  // shortened). Returns the bytes it wrote (pages found already stored cost nothing).
  virtual absl::StatusOr<int64_t> PutPages(const std::vector<PageWrite>& pages,
                                           absl::Duration ttl);
  // The bytes of each of `ids`, in order; nullopt where absent or expired.
  virtual absl::StatusOr<std::vector<std::optional<std::string>>> GetPages(
      const std::vector<std::string>& ids);
  // Makes each of `ids` that exists expire no sooner than `ttl` from now. Returns, in
  // order, whether each exists (false: absent or expired; its writer puts it then). This
  // is the exists check too: one round trip reads and extends.
  virtual absl::StatusOr<std::vector<bool>> ExtendPages(const std::vector<std::string>& ids,
                                                        absl::Duration ttl);

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
// store), is INVALID_ARGUMENT naming the accepted forms. `clock` is what the dir backend
// expires files by (not owned, outlives the store) (Redis keeps its own).
absl::StatusOr<std::unique_ptr<SnapshotStore>> OpenSnapshotStore(const std::string& spec,
                                                                 const Clock* clock = RealClock::Get());

// --- For backends. ---

// OK if `id` is a valid snapshot id (see SnapshotStore), else INVALID_ARGUMENT naming it.
absl::Status ValidateSnapshotId(const std::string& id);
// OK if every page of `ids` / `pages` is a valid id of RecordKind::kPage, else
// INVALID_ARGUMENT naming the first that is not.
absl::Status ValidatePageIds(const std::vector<std::string>& ids);
absl::Status ValidatePageIds(const std::vector<SnapshotStore::PageWrite>& pages);
// OK if `ttl` is positive, else INVALID_ARGUMENT.
absl::Status ValidateSnapshotTtl(absl::Duration ttl);
// OK if `generation` is not negative, else INVALID_ARGUMENT.
absl::Status ValidateGeneration(int64_t generation);
// `ttl` rounded up to whole milliseconds (the precision both backends keep).
absl::Duration RoundTtl(absl::Duration ttl);
// UNAVAILABLE "session store <store_name>: <what>".
absl::Status StoreUnavailable(const std::string& store_name, absl::string_view what);
// A fresh lease token: 128 random bits as 32 lowercase hex characters.
std::string NewLeaseToken();
// The ABORTED statuses of the lease methods: "session <id> is leased by another writer",
// "session <id>: lease lost", "session <id>: stale generation <generation>, the store has
// <stored>".
absl::Status LeaseHeldError(const std::string& id);
absl::Status LeaseLostError(const std::string& id);
absl::Status StaleGenerationError(const std::string& id, int64_t generation,
                                  int64_t stored);

}  // namespace attnserve::store
