// Immutable checkpoints: byte records written once under a key and read back, by this
// process or by any replica sharing the durable store, until they expire or are deleted.
// The HTTP front keeps two kinds here, each in a store of its own with its own budget:
//   - stored responses (the state after a response plus the response object): durable to
//     the user, who may continue one any time within its TTL, so never evicted to make
//     room; a write past a budget or a tenant's quota is refused (RESOURCE_EXHAUSTED);
//   - kept chat states (prefix_cache.h): disposable, a miss costs only prefill time, so
//     the least recently used go first, taken from the tenant holding the most bytes (a
//     tenant cannot push another below its fair share).
//
// Where they live: with a durable SnapshotStore, there (the shared truth, with a TTL)
// and also in this process's memory as a cache (any record may leave the cache); without
// one, only in memory, where memory_bytes bounds them.
//
// Records by pages (server/DESIGN.md §13, state_pages.h): a record that carries a session
// snapshot (its writer says where: Put's `trailing_state_bytes`) is kept as its writer's
// header plus the snapshot's STUB, and the snapshot's full pages are kept once per tenant
// and shared by every record naming them. A chain of stored points of one conversation
// therefore costs about one final state, and a turn writes its new pages plus a stub. Get
// gives back the record exactly as it was put: the pages are joined in again, each page's
// key recomputed from the reader's tenant (state_pages.h says why). Records written whole
// (before pages, or by a Put that names no snapshot) read as they are.
//   - Memory only: pages live in a table shared by the records of this store, counted
//     by references; memory_bytes counts each distinct page once plus each record's
//     stub; a record deleted, evicted or expired drops its references.
//   - Durable: pages live in the durable store (SnapshotStore's page methods), each
//     extended to outlive the record before the record is written; a record whose page
//     is missing reads as absent (NOT_FOUND). This process's cache keeps records as the
//     memory store does (stubs, and each tenant's pages once), so a cached conversation
//     costs about its final state here too.
//     A durable store that keeps no pages gets whole records.
// Quotas count what a tenant newly wrote: each distinct page once (pages are a tenant's
// own: their keys carry its tag) plus each record's stub; a record that reuses the
// previous turn's pages costs its new pages and its stub.
//
// Each store holds one RecordKind: a key of another form reads as absent without
// touching anything (record_kind.h). A cached copy is served only after the durable
// store confirms the key still exists (one generation read, a few bytes): a delete on
// another replica is seen at once. Thread-safe. Bytes only: what a record holds is its
// writer's business, but for the snapshot it says it ends with.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/common/clock.h"
#include "server/store/record_kind.h"
#include "server/store/snapshot_store.h"
#include "server/store/state_pages.h"

namespace attnserve::store {

class CheckpointStore {
 public:
  struct Options {
    // What the store holds: keys of this kind only.
    RecordKind kind = RecordKind::kResponse;
    // Disposable records may be evicted (fairly, see above); others never are while
    // memory is their only home (a write that does not fit is refused instead).
    bool disposable = false;
    // Bytes of records kept in this process's memory.
    int64_t memory_bytes = 0;
    // Each tenant's most records and bytes (0: no limit), counted by this process: what
    // it holds in memory, or, with a durable store, the records it wrote there that have
    // neither expired nor been deleted (so each replica counts its own writes, and a
    // restarted one starts from zero). Past them a durable record is refused, a
    // disposable one makes room by evicting its tenant's oldest.
    int tenant_max_records = 0;
    int64_t tenant_max_bytes = 0;
    // How refusals name the limits, e.g. "--checkpoint_memory_bytes".
    std::string memory_flag, records_flag, bytes_flag;
    // What a refusal suggests, e.g. "delete stored responses (DELETE /v1/responses/{id})".
    std::string remedy;
    // The shared home; null: memory only. Its view must hold RecordKind::kPage too for
    // records to be kept by pages there.
    std::unique_ptr<SnapshotStore> durable;
    // The size a page aims at (state_pages.h); tests use less.
    int64_t page_target_bytes = kPageTargetBytes;
    // Not owned; expires memory entries and the tenants' counts.
    const Clock* clock = RealClock::Get();
  };
  explicit CheckpointStore(Options options);

  // Writes `bytes` as `tenant`'s record `key` (a key of the store's kind) for `ttl`
  // (positive). `trailing_state_bytes`, if not 0, says that the record ends with a session
  // snapshot of that many bytes: that part is kept by pages (see above); bytes there that
  // are no snapshot this store can read are kept whole. RESOURCE_EXHAUSTED naming the
  // flag when it would pass the tenant's quota or (memory only, not disposable) the
  // memory; nothing is written then. With a durable store, OK only once the record and
  // its pages are written there (UNAVAILABLE naming the store otherwise).
  absl::Status Put(std::string_view tenant, const std::string& key,
                   std::shared_ptr<const std::string> bytes, absl::Duration ttl,
                   size_t trailing_state_bytes = 0);
  // OK if `tenant` may write one more record of about `bytes` new bytes now (its record
  // quota, its byte quota, a full memory where that refuses), else the RESOURCE_EXHAUSTED
  // Put would answer: to refuse before the work that makes a record, with an estimate of
  // what the turn will add (new pages and a stub). Put still decides.
  absl::Status CheckRoom(std::string_view tenant, int64_t bytes = 1);
  // The bytes under `key`; NOT_FOUND if absent, expired, deleted, evicted or of another
  // kind; UNAVAILABLE naming the store when it cannot be read. `tenant` is the reader,
  // whom a copy cached now is charged to.
  absl::StatusOr<std::shared_ptr<const std::string>> Get(std::string_view tenant,
                                                         const std::string& key);
  // Removes `key` everywhere; OK if absent. UNAVAILABLE when the store is unreachable.
  absl::Status Delete(const std::string& key);
  // Keeps `key` for `ttl` from now (a durable store's copy is written again); NOT_FOUND
  // and UNAVAILABLE as Get. Its tenant's counts do not change.
  absl::Status Renew(const std::string& key, absl::Duration ttl);

  // "memory" or the durable store's name.
  std::string name() const;
  bool durable() const { return options_.durable != nullptr; }
  // Bytes and records in this process's memory now, and (memory only) the distinct
  // pages among them.
  int64_t memory_bytes_used() const;
  int memory_records() const;
  int memory_pages() const;
  // What `tenant` holds as its quota counts it.
  struct Usage {
    int records = 0;
    int64_t bytes = 0;
  };
  Usage usage(std::string_view tenant) const;

 private:
  // A page as a record holds it.
  struct Page {
    std::string id;
    std::shared_ptr<const std::string> bytes;
  };
  // A record as this store keeps it: `stored`, the bytes it writes (the record itself, or
  // its paged form: state_pages.h's envelope around the stub), and the pages it names
  // (distinct).
  struct Prepared {
    std::shared_ptr<const std::string> stored;
    std::vector<Page> pages;
  };
  struct Entry {  // a copy in memory
    std::string tenant;
    // Memory only: the stored form, its pages in pages_; durable: the whole record.
    std::shared_ptr<const std::string> bytes;
    std::vector<std::string> pages;
    absl::Time expires;
    std::list<std::string>::iterator lru;  // position in its tenant's list
  };
  struct MemoryPage {  // memory only: a page the entries name
    std::string tenant;
    std::shared_ptr<const std::string> bytes;
    int refs = 0;
  };
  struct Cached {  // one tenant's copies in memory: its entries' bytes and its pages
    int64_t bytes = 0;
    std::list<std::string> lru;  // most recently used first
  };
  struct Held {  // a record the quota counts
    std::string tenant;
    int64_t bytes = 0;  // its own (the stub), its pages not included
    std::vector<std::pair<std::string, int64_t>> pages;  // distinct, with their sizes
    absl::Time expires;
  };
  struct CountedPage {  // a page the quota counts, once
    int refs = 0;
    int64_t bytes = 0;
  };

  // `bytes` in the form this store keeps (see Prepared), cut for `tenant`.
  Prepared Prepare(std::string_view tenant, std::shared_ptr<const std::string> bytes,
                   size_t trailing_state_bytes) const;
  // The record `stored` names, pages joined in (`pages` in StubPageIds order), for
  // `reader`; pages are verified against their keys unless `trusted`.
  static absl::StatusOr<std::shared_ptr<const std::string>> Materialize(
      std::shared_ptr<const std::string> stored,
      const std::vector<std::shared_ptr<const std::string>>& pages, std::string_view reader,
      bool trusted);
  // The durable writes of a Put: the pages extended or written, then the record.
  absl::Status WriteDurable(const std::string& key, const Prepared& prepared,
                            const std::string& whole, absl::Duration ttl);
  // Reads `key` from the durable store with its pages joined for `reader`; `kept` gets
  // the record as stored and its pages (each once, verified for `reader`), for the cache.
  absl::StatusOr<std::shared_ptr<const std::string>> ReadDurable(std::string_view reader,
                                                                 const std::string& key,
                                                                 Prepared* kept);
  // Counts a write of `prepared` under `key` by `tenant`, or refuses it
  // (RESOURCE_EXHAUSTED) past the tenant's quota or, for durable records kept only
  // here, the memory. A disposable record makes room in its tenant's quota by evicting
  // the tenant's oldest, whose keys go to `evicted` (to delete from the durable store).
  absl::Status ReserveLocked(const std::string& tenant, const std::string& key,
                             const Prepared& prepared, absl::Time expires,
                             std::vector<std::string>* evicted)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What `prepared` would add to its tenant's quota / to the memory now.
  int64_t NewQuotaBytesLocked(const Prepared& prepared) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t NewMemoryBytesLocked(const Prepared& prepared) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Why a write would pass the tenant's quota / the memory; nullopt if it would not.
  std::optional<std::string> OverQuotaLocked(const std::string& tenant, const std::string& key,
                                             int64_t size) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::optional<std::string> OverMemoryLocked(const std::string& key, int64_t size) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The tenant's counted record that expires first ("" if none).
  std::string OldestLocked(const std::string& tenant) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CountLocked(const std::string& tenant, const std::string& key, const Prepared& prepared,
                   absl::Time expires) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UncountLocked(const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Keeps `bytes` (with `pages`: memory only) as the copy of `key` in memory, evicting
  // others to make room where they may go.
  void CacheLocked(const std::string& tenant, const std::string& key,
                   std::shared_ptr<const std::string> bytes, const std::vector<Page>& pages,
                   absl::Time expires) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EraseLocked(const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Evicts the least recently used copy of the tenant caching the most bytes.
  void EvictOneLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropExpiredLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool memory_only() const { return options_.durable == nullptr; }

  const Options options_;
  mutable absl::Mutex mu_;
  std::unordered_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::unordered_map<std::string, MemoryPage> pages_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Cached, std::less<>> cached_ ABSL_GUARDED_BY(mu_);
  int64_t used_ ABSL_GUARDED_BY(mu_) = 0;  // entries' bytes plus pages_'
  // What the quotas count, by key, by page and by tenant.
  std::unordered_map<std::string, Held> held_ ABSL_GUARDED_BY(mu_);
  std::unordered_map<std::string, CountedPage> counted_pages_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Usage, std::less<>> usage_ ABSL_GUARDED_BY(mu_);
};

}  // namespace attnserve::store
