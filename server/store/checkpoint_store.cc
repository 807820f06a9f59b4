#include "server/store/checkpoint_store.h"

#include <optional>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace attnserve::store {
namespace {

// Pages are kept this much longer than the record that extends them: the record is
// written after its pages, so without it a page would expire a moment before the record.
constexpr absl::Duration kPageGrace = absl::Minutes(1);

}  // namespace

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

int CheckpointStore::memory_pages() const {
  absl::MutexLock lock(&mu_);
  return int(pages_.size());
}

CheckpointStore::Usage CheckpointStore::usage(std::string_view tenant) const {
  absl::MutexLock lock(&mu_);
  auto it = usage_.find(tenant);
  return it == usage_.end() ? Usage{} : it->second;
}

CheckpointStore::Prepared CheckpointStore::Prepare(std::string_view tenant,
                                                   std::shared_ptr<const std::string> bytes,
                                                   size_t trailing_state_bytes) const {
  const std::string_view record = *bytes;
  if (trailing_state_bytes > 0 && trailing_state_bytes <= record.size()) {
    const size_t at = record.size() - trailing_state_bytes;
    const std::string_view state = record.substr(at);
    if (SnapshotDeclaredBytes(state) == uint64_t(state.size())) {
      absl::StatusOr<SplitState> split =
          SplitSnapshot(tenant, state, options_.page_target_bytes);
      if (split.ok()) {
        Prepared out;
        out.stored = std::make_shared<const std::string>(
            EncodePagedRecord(record.substr(0, at), split->stub, ""));
        std::unordered_set<std::string> seen;
        for (StatePage& page : split->pages) {
          if (!seen.insert(page.id).second) continue;
          out.pages.push_back(
              Page{page.id, std::make_shared<const std::string>(std::move(page.bytes))});
        }
        return out;
      }
    }
  }
  // Kept whole; one that would read as a paged record is wrapped in an envelope that
  // carries no stub.
  if (IsPagedRecord(record)) {
    return Prepared{std::make_shared<const std::string>(EncodePagedRecord(record, "", "")), {}};
  }
  return Prepared{std::move(bytes), {}};
}

absl::StatusOr<std::shared_ptr<const std::string>> CheckpointStore::Materialize(
    std::shared_ptr<const std::string> stored,
    const std::vector<std::shared_ptr<const std::string>>& pages, std::string_view reader,
    bool trusted) {
  if (!IsPagedRecord(*stored)) return stored;
  absl::StatusOr<PagedRecordView> record = ParsePagedRecord(*stored);
  if (!record.ok()) return record.status();
  std::string out(record->prefix);
  if (!record->stub.empty()) {
    std::vector<std::string_view> views;
    views.reserve(pages.size());
    for (const auto& page : pages) views.push_back(*page);
    absl::StatusOr<std::string> state = JoinSnapshot(
        record->stub, views, trusted ? std::nullopt : std::optional<std::string_view>(reader));
    if (!state.ok()) return state.status();
    if (out.empty() && record->tail.empty()) {
      return std::make_shared<const std::string>(*std::move(state));
    }
    out += *state;
  }
  out += record->tail;
  return std::make_shared<const std::string>(std::move(out));
}

// --- Memory and quota accounting. ---

void CheckpointStore::EraseLocked(const std::string& key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  const int64_t size = int64_t(it->second.bytes->size());
  auto cached = cached_.find(it->second.tenant);
  cached->second.bytes -= size;
  used_ -= size;
  for (const std::string& id : it->second.pages) {
    auto page = pages_.find(id);
    if (--page->second.refs > 0) continue;
    const int64_t page_size = int64_t(page->second.bytes->size());
    used_ -= page_size;
    cached_.find(page->second.tenant)->second.bytes -= page_size;
    pages_.erase(page);
  }
  cached->second.lru.erase(it->second.lru);
  if (cached->second.lru.empty()) cached_.erase(cached);
  entries_.erase(it);
}

void CheckpointStore::CountLocked(const std::string& tenant, const std::string& key,
                                  const Prepared& prepared, absl::Time expires) {
  UncountLocked(key);
  Held held{tenant, int64_t(prepared.stored->size()), {}, expires};
  Usage& u = usage_[tenant];
  u.records += 1;
  u.bytes += held.bytes;
  for (const Page& page : prepared.pages) {
    const int64_t size = int64_t(page.bytes->size());
    held.pages.emplace_back(page.id, size);
    CountedPage& counted = counted_pages_[page.id];
    if (counted.refs++ == 0) {
      counted.bytes = size;
      u.bytes += size;
    }
  }
  held_[key] = std::move(held);
}

void CheckpointStore::UncountLocked(const std::string& key) {
  auto it = held_.find(key);
  if (it == held_.end()) return;
  auto usage = usage_.find(it->second.tenant);
  usage->second.records -= 1;
  usage->second.bytes -= it->second.bytes;
  for (const auto& [id, size] : it->second.pages) {
    auto counted = counted_pages_.find(id);
    if (--counted->second.refs > 0) continue;
    usage->second.bytes -= counted->second.bytes;
    counted_pages_.erase(counted);
  }
  if (usage->second.records == 0) usage_.erase(usage);
  held_.erase(it);
}

int64_t CheckpointStore::NewQuotaBytesLocked(const Prepared& prepared) const {
  int64_t size = int64_t(prepared.stored->size());
  for (const Page& page : prepared.pages) {
    if (counted_pages_.count(page.id) == 0) size += int64_t(page.bytes->size());
  }
  return size;
}

int64_t CheckpointStore::NewMemoryBytesLocked(const Prepared& prepared) const {
  int64_t size = int64_t(prepared.stored->size());
  for (const Page& page : prepared.pages) {
    if (pages_.count(page.id) == 0) size += int64_t(page.bytes->size());
  }
  return size;
}

void CheckpointStore::DropExpiredLocked(absl::Time now) {
  std::vector<std::string> gone;
  for (const auto& [key, e] : entries_) {
    if (e.expires <= now) gone.push_back(key);
  }
  for (const std::string& key : gone) EraseLocked(key);
  gone.clear();
  for (const auto& [key, h] : held_) {
    if (h.expires <= now) gone.push_back(key);
  }
  for (const std::string& key : gone) UncountLocked(key);
}

void CheckpointStore::EvictOneLocked() {
  // The tenant caching the most bytes gives up its least recently used copy: another
  // tenant's burst takes its own copies out before anyone else's fair share.
  auto largest = cached_.begin();
  for (auto it = cached_.begin(); it != cached_.end(); ++it) {
    if (it->second.bytes > largest->second.bytes) largest = it;
  }
  const std::string key = largest->second.lru.back();
  if (memory_only()) UncountLocked(key);  // memory was its only home
  EraseLocked(key);
}

void CheckpointStore::CacheLocked(const std::string& tenant, const std::string& key,
                                  std::shared_ptr<const std::string> bytes,
                                  const std::vector<Page>& pages, absl::Time expires) {
  EraseLocked(key);
  const Prepared prepared{bytes, pages};
  if (NewMemoryBytesLocked(prepared) > options_.memory_bytes) return;
  // Durable records kept only here are never evicted: ReserveLocked refused the write.
  const bool evictable = options_.disposable || !memory_only();
  while (evictable && used_ + NewMemoryBytesLocked(prepared) > options_.memory_bytes &&
         !entries_.empty()) {
    EvictOneLocked();
  }
  const int64_t size = int64_t(bytes->size());
  Cached& cached = cached_[tenant];
  cached.lru.push_front(key);
  cached.bytes += size;
  used_ += size;
  Entry entry{tenant, std::move(bytes), {}, expires, cached.lru.begin()};
  for (const Page& page : pages) {
    entry.pages.push_back(page.id);
    MemoryPage& held = pages_[page.id];
    if (held.refs++ > 0) continue;
    held.tenant = tenant;
    held.bytes = page.bytes;
    used_ += int64_t(page.bytes->size());
    cached.bytes += int64_t(page.bytes->size());
  }
  entries_.emplace(key, std::move(entry));
}

std::optional<std::string> CheckpointStore::OverQuotaLocked(const std::string& tenant,
                                                            const std::string& key,
                                                            int64_t size) const {
  const std::string kind = absl::StrCat(KindName(options_.kind), "s");
  Usage u = usage_.count(tenant) ? usage_.find(tenant)->second : Usage{};
  if (auto h = held_.find(key); h != held_.end() && h->second.tenant == tenant) {
    u.records -= 1;  // a record written again replaces itself (its pages it may share)
    u.bytes -= h->second.bytes;
  }
  if (options_.tenant_max_records > 0 && u.records + 1 > options_.tenant_max_records) {
    return absl::StrCat("this tenant keeps ", u.records, " ", kind, ", its quota (",
                        options_.records_flag, "=", options_.tenant_max_records, ")");
  }
  if (options_.tenant_max_bytes > 0 && u.bytes + size > options_.tenant_max_bytes) {
    return absl::StrCat("this tenant's ", kind, " hold ", u.bytes, " bytes; ", size,
                        " more would pass its quota (", options_.bytes_flag, "=",
                        options_.tenant_max_bytes, ")");
  }
  return std::nullopt;
}

std::optional<std::string> CheckpointStore::OverMemoryLocked(const std::string& key,
                                                             int64_t size) const {
  // Only where memory is the records' one home and they may not be evicted.
  if (!memory_only() || (options_.disposable && size <= options_.memory_bytes)) {
    return std::nullopt;
  }
  auto e = entries_.find(key);
  const int64_t replaced = e == entries_.end() ? 0 : int64_t(e->second.bytes->size());
  if (used_ - replaced + size <= options_.memory_bytes) return std::nullopt;
  return absl::StrCat(KindName(options_.kind), "s fill the ", options_.memory_bytes,
                      " bytes this server keeps them in (", options_.memory_flag,
                      "; there is no durable --session_store)");
}

std::string CheckpointStore::OldestLocked(const std::string& tenant) const {
  const std::string* oldest = nullptr;
  absl::Time first = absl::InfiniteFuture();
  for (const auto& [key, h] : held_) {
    if (h.tenant == tenant && (oldest == nullptr || h.expires < first)) {
      oldest = &key;
      first = h.expires;
    }
  }
  return oldest ? *oldest : std::string();
}

absl::Status CheckpointStore::ReserveLocked(const std::string& tenant, const std::string& key,
                                            const Prepared& prepared, absl::Time expires,
                                            std::vector<std::string>* evicted) {
  // What the record adds changes as others go (their pages may be its own).
  auto over_quota = [&] {
    return OverQuotaLocked(tenant, key, NewQuotaBytesLocked(prepared));
  };
  auto refusal = [&] {
    std::optional<std::string> why = over_quota();
    return why.has_value() ? why : OverMemoryLocked(key, NewMemoryBytesLocked(prepared));
  };
  std::optional<std::string> why = refusal();
  if (why.has_value()) {
    DropExpiredLocked(options_.clock->Now());
    why = refusal();
  }
  // A disposable record makes room within its tenant's quota: its oldest go.
  while (why.has_value() && options_.disposable && over_quota()) {
    const std::string oldest = OldestLocked(tenant);
    if (oldest.empty() || oldest == key) break;
    evicted->push_back(oldest);
    EraseLocked(oldest);
    UncountLocked(oldest);
    why = refusal();
  }
  if (why.has_value()) {
    return absl::ResourceExhaustedError(
        absl::StrCat(*why, options_.remedy.empty() ? "" : "; ", options_.remedy));
  }
  CountLocked(tenant, key, prepared, expires);
  return absl::OkStatus();
}

absl::Status CheckpointStore::CheckRoom(std::string_view tenant_view, int64_t bytes) {
  if (options_.disposable) return absl::OkStatus();  // makes room by itself
  const std::string tenant(tenant_view);
  absl::MutexLock lock(&mu_);
  auto refusal = [&] {
    std::optional<std::string> why = OverQuotaLocked(tenant, "", bytes);
    return why.has_value() ? why : OverMemoryLocked("", bytes);
  };
  std::optional<std::string> why = refusal();
  if (why.has_value()) {
    DropExpiredLocked(options_.clock->Now());
    why = refusal();
  }
  if (!why.has_value()) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat(*why, options_.remedy.empty() ? "" : "; ", options_.remedy));
}

// --- Reads and writes. ---

absl::Status CheckpointStore::WriteDurable(const std::string& key, const Prepared& prepared,
                                           const std::string& whole, absl::Duration ttl) {
  if (!prepared.pages.empty()) {
    // Every page is made to outlive the record before the record names it.
    std::vector<std::string> ids;
    for (const Page& page : prepared.pages) ids.push_back(page.id);
    absl::StatusOr<std::vector<bool>> stored =
        options_.durable->ExtendPages(ids, ttl + kPageGrace);
    if (absl::IsUnimplemented(stored.status())) {
      return options_.durable->Put(key, whole, ttl);  // a store without pages
    }
    if (!stored.ok()) return stored.status();
    std::vector<SnapshotStore::PageWrite> missing;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (!(*stored)[i]) missing.push_back({ids[i], *prepared.pages[i].bytes});
    }
    if (!missing.empty()) {
      absl::StatusOr<int64_t> written = options_.durable->PutPages(missing, ttl + kPageGrace);
      if (!written.ok()) return written.status();
    }
  }
  return options_.durable->Put(key, *prepared.stored, ttl);
}

absl::Status CheckpointStore::Put(std::string_view tenant_view, const std::string& key,
                                  std::shared_ptr<const std::string> bytes, absl::Duration ttl,
                                  size_t trailing_state_bytes) {
  if (KindOf(key) != options_.kind) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", key, "' is not the key of a ", KindName(options_.kind)));
  }
  if (absl::Status s = ValidateSnapshotTtl(ttl); !s.ok()) return s;
  const std::string tenant(tenant_view);
  const absl::Time expires = options_.clock->Now() + ttl;
  // Cut (and hashed) before the lock: a state of hundreds of MB takes a while.
  const Prepared prepared = Prepare(tenant, bytes, trailing_state_bytes);
  std::vector<std::string> evicted;
  {
    absl::MutexLock lock(&mu_);
    absl::Status reserved = ReserveLocked(tenant, key, prepared, expires, &evicted);
    if (!reserved.ok()) return reserved;
    if (memory_only()) {
      CacheLocked(tenant, key, prepared.stored, prepared.pages, expires);
      return absl::OkStatus();
    }
  }
  // Disposable records pushed out of their tenant's quota leave the store too; one
  // left behind expires by itself.
  for (const std::string& old : evicted) (void)options_.durable->Delete(old);
  // Counted already, so concurrent writes by the tenant cannot pass its quota while
  // this one waits on the store.
  absl::Status written = WriteDurable(key, prepared, *bytes, ttl);
  absl::MutexLock lock(&mu_);
  if (!written.ok()) {
    UncountLocked(key);
    return written;
  }
  // Cached as the memory store keeps it: the stub, and the pages it shares with the
  // tenant's other cached records once.
  CacheLocked(tenant, key, prepared.stored, prepared.pages, expires);
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const std::string>> CheckpointStore::ReadDurable(
    std::string_view reader, const std::string& key, Prepared* kept) {
  auto got = options_.durable->Get(key);
  if (!got.ok()) return got.status();
  auto stored = std::make_shared<const std::string>(*std::move(got));
  kept->stored = stored;
  kept->pages.clear();
  std::vector<std::shared_ptr<const std::string>> pages;
  std::vector<std::string> page_ids;
  if (IsPagedRecord(*stored)) {
    absl::StatusOr<PagedRecordView> record = ParsePagedRecord(*stored);
    if (!record.ok()) return record.status();
    if (!record->stub.empty()) {
      absl::StatusOr<std::vector<std::string>> ids = StubPageIds(record->stub);
      if (!ids.ok()) return ids.status();
      // Another tenant's state does not exist for this reader: no page is read for it.
      if (!StubIsTenants(record->stub, reader)) return absl::NotFoundError(key);
      auto bytes = options_.durable->GetPages(*ids);
      if (!bytes.ok()) return bytes.status();
      for (size_t i = 0; i < ids->size(); ++i) {
        // A page gone (expired, or evicted by a Redis that should not evict) takes its
        // record with it.
        if (!(*bytes)[i].has_value()) {
          return absl::NotFoundError(absl::StrCat(key, ": its ", (*ids)[i], " is gone"));
        }
        pages.push_back(std::make_shared<const std::string>(*std::move((*bytes)[i])));
      }
      page_ids = *std::move(ids);
    }
  }
  auto joined = Materialize(stored, pages, reader, /*trusted=*/false);
  if (!joined.ok()) return joined.status();
  // Verified for `reader`: the cache may keep them as that tenant's.
  std::unordered_set<std::string> seen;
  for (size_t i = 0; i < page_ids.size(); ++i) {
    if (seen.insert(page_ids[i]).second) kept->pages.push_back(Page{page_ids[i], pages[i]});
  }
  return joined;
}

absl::StatusOr<std::shared_ptr<const std::string>> CheckpointStore::Get(
    std::string_view tenant, const std::string& key) {
  if (KindOf(key) != options_.kind) return absl::NotFoundError(key);
  const absl::Time now = options_.clock->Now();
  std::shared_ptr<const std::string> cached;
  std::vector<std::shared_ptr<const std::string>> pages;  // memory only: in stub order
  bool trusted = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(key);
    if (it != entries_.end() && it->second.expires <= now) {
      if (memory_only()) UncountLocked(key);
      EraseLocked(key);
    } else if (it != entries_.end() && !memory_only() && it->second.tenant != tenant) {
      // A durable copy was joined (and its pages verified) for another reader: this one
      // reads the store and verifies them as its own.
    } else if (it != entries_.end()) {
      Cached& owner = cached_.find(it->second.tenant)->second;
      owner.lru.splice(owner.lru.begin(), owner.lru, it->second.lru);
      cached = it->second.bytes;
      if (!it->second.pages.empty()) {
        // The stub's order (with repeats); the entry holds each page once. The stub
        // is this process's own, so a damaged one is a defect.
        absl::StatusOr<std::vector<std::string>> ids =
            StubPageIds(ParsePagedRecord(*cached)->stub);
        for (const std::string& id : *ids) pages.push_back(pages_.at(id).bytes);
      }
      // Pages this process keyed itself, for this very tenant: their keys hold.
      trusted = it->second.tenant == tenant;
    }
  }
  if (memory_only()) {
    if (!cached) return absl::NotFoundError(key);
    return Materialize(std::move(cached), pages, tenant, trusted);
  }
  if (cached) {
    // Still there (not deleted by another replica, not expired in the store)?
    auto generation = options_.durable->GetGeneration(key);
    if (!generation.ok()) return generation.status();
    if (*generation > 0) return Materialize(std::move(cached), pages, tenant, trusted);
    absl::MutexLock lock(&mu_);
    EraseLocked(key);
    UncountLocked(key);
    return absl::NotFoundError(key);
  }
  Prepared kept;
  auto bytes = ReadDurable(tenant, key, &kept);
  if (!bytes.ok()) return bytes.status();
  absl::MutexLock lock(&mu_);
  // Cached for as long as the store keeps it; a copy kept past the store's expiry (or
  // deleted there) is caught by the generation read above.
  CacheLocked(std::string(tenant), key, kept.stored, kept.pages, absl::InfiniteFuture());
  return bytes;
}

absl::Status CheckpointStore::Delete(const std::string& key) {
  if (KindOf(key) != options_.kind) return absl::OkStatus();
  if (options_.durable) {
    // Its pages stay until they expire: other records may name them.
    if (absl::Status s = options_.durable->Delete(key); !s.ok()) return s;
  }
  absl::MutexLock lock(&mu_);
  EraseLocked(key);
  UncountLocked(key);
  return absl::OkStatus();
}

absl::Status CheckpointStore::Renew(const std::string& key, absl::Duration ttl) {
  if (KindOf(key) != options_.kind) return absl::NotFoundError(key);
  if (absl::Status s = ValidateSnapshotTtl(ttl); !s.ok()) return s;
  const absl::Time now = options_.clock->Now();
  if (options_.durable) {
    // The stored form is written again as it is, its pages extended first.
    auto stored = options_.durable->Get(key);
    if (!stored.ok()) return stored.status();
    if (IsPagedRecord(*stored)) {
      absl::StatusOr<PagedRecordView> record = ParsePagedRecord(*stored);
      if (!record.ok()) return record.status();
      if (!record->stub.empty()) {
        absl::StatusOr<std::vector<std::string>> ids = StubPageIds(record->stub);
        if (!ids.ok()) return ids.status();
        auto extended = options_.durable->ExtendPages(*ids, ttl + kPageGrace);
        if (!extended.ok()) return extended.status();
        for (size_t i = 0; i < ids->size(); ++i) {
          if (!(*extended)[i]) {
            return absl::NotFoundError(absl::StrCat(key, ": its ", (*ids)[i], " is gone"));
          }
        }
      }
    }
    if (absl::Status s = options_.durable->Put(key, *stored, ttl); !s.ok()) return s;
  }
  absl::MutexLock lock(&mu_);
  if (memory_only()) {
    auto e = entries_.find(key);
    if (e == entries_.end() || e->second.expires <= now) {
      if (e != entries_.end()) {
        UncountLocked(key);
        EraseLocked(key);
      }
      return absl::NotFoundError(key);
    }
    e->second.expires = now + ttl;
  }
  if (auto h = held_.find(key); h != held_.end()) h->second.expires = now + ttl;
  return absl::OkStatus();
}

}  // namespace attnserve::store
