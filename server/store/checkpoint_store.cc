#include "server/store/checkpoint_store.h"

#include <optional>
#include <utility>
#include <vector>

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

CheckpointStore::Usage CheckpointStore::usage(std::string_view tenant) const {
  absl::MutexLock lock(&mu_);
  auto it = usage_.find(tenant);
  return it == usage_.end() ? Usage{} : it->second;
}

void CheckpointStore::EraseLocked(const std::string& key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  const int64_t size = int64_t(it->second.bytes->size());
  auto cached = cached_.find(it->second.tenant);
  cached->second.bytes -= size;
  cached->second.lru.erase(it->second.lru);
  if (cached->second.lru.empty()) cached_.erase(cached);
  used_ -= size;
  entries_.erase(it);
}

void CheckpointStore::UncountLocked(const std::string& key) {
  auto it = held_.find(key);
  if (it == held_.end()) return;
  auto usage = usage_.find(it->second.tenant);
  usage->second.records -= 1;
  usage->second.bytes -= it->second.bytes;
  if (usage->second.records == 0) usage_.erase(usage);
  held_.erase(it);
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
                                  std::shared_ptr<const std::string> bytes, absl::Time expires) {
  EraseLocked(key);
  const int64_t size = int64_t(bytes->size());
  if (size > options_.memory_bytes) return;
  // Durable records kept only here are never evicted: ReserveLocked refused the write.
  const bool evictable = options_.disposable || !memory_only();
  while (evictable && used_ + size > options_.memory_bytes && !entries_.empty()) {
    EvictOneLocked();
  }
  Cached& cached = cached_[tenant];
  cached.lru.push_front(key);
  cached.bytes += size;
  entries_.emplace(key, Entry{tenant, std::move(bytes), expires, cached.lru.begin()});
  used_ += size;
}

std::optional<std::string> CheckpointStore::OverQuotaLocked(const std::string& tenant,
                                                            const std::string& key,
                                                            int64_t size) const {
  const std::string kind = absl::StrCat(KindName(options_.kind), "s");
  Usage u = usage_.count(tenant) ? usage_.find(tenant)->second : Usage{};
  if (auto h = held_.find(key); h != held_.end() && h->second.tenant == tenant) {
    u.records -= 1;  // a record written again replaces itself
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
                                            int64_t size, absl::Time expires,
                                            std::vector<std::string>* evicted) {
  auto refusal = [&] {
    std::optional<std::string> why = OverQuotaLocked(tenant, key, size);
    return why.has_value() ? why : OverMemoryLocked(key, size);
  };
  std::optional<std::string> why = refusal();
  if (why.has_value()) {
    DropExpiredLocked(options_.clock->Now());
    why = refusal();
  }
  // A disposable record makes room within its tenant's quota: its oldest go.
  while (why.has_value() && options_.disposable && OverQuotaLocked(tenant, key, size)) {
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
  UncountLocked(key);
  held_[key] = Held{tenant, size, expires};
  Usage& u = usage_[tenant];
  u.records += 1;
  u.bytes += size;
  return absl::OkStatus();
}

absl::Status CheckpointStore::CheckRoom(std::string_view tenant_view) {
  if (options_.disposable) return absl::OkStatus();  // makes room by itself
  const std::string tenant(tenant_view);
  absl::MutexLock lock(&mu_);
  auto refusal = [&] {
    std::optional<std::string> why = OverQuotaLocked(tenant, "", 1);
    return why.has_value() ? why : OverMemoryLocked("", 1);
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

absl::Status CheckpointStore::Put(std::string_view tenant_view, const std::string& key,
                                  std::shared_ptr<const std::string> bytes, absl::Duration ttl) {
  if (KindOf(key) != options_.kind) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", key, "' is not the key of a ", KindName(options_.kind)));
  }
  if (absl::Status s = ValidateSnapshotTtl(ttl); !s.ok()) return s;
  const std::string tenant(tenant_view);
  const absl::Time expires = options_.clock->Now() + ttl;
  std::vector<std::string> evicted;
  {
    absl::MutexLock lock(&mu_);
    absl::Status reserved =
        ReserveLocked(tenant, key, int64_t(bytes->size()), expires, &evicted);
    if (!reserved.ok()) return reserved;
    if (memory_only()) {
      CacheLocked(tenant, key, std::move(bytes), expires);
      return absl::OkStatus();
    }
  }
  // Disposable records pushed out of their tenant's quota leave the store too; one
  // left behind expires by itself.
  for (const std::string& old : evicted) (void)options_.durable->Delete(old);
  // Counted already, so concurrent writes by the tenant cannot pass its quota while
  // this one waits on the store.
  absl::Status written = options_.durable->Put(key, *bytes, ttl);
  absl::MutexLock lock(&mu_);
  if (!written.ok()) {
    UncountLocked(key);
    return written;
  }
  CacheLocked(tenant, key, std::move(bytes), expires);
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const std::string>> CheckpointStore::Get(
    std::string_view tenant, const std::string& key) {
  if (KindOf(key) != options_.kind) return absl::NotFoundError(key);
  const absl::Time now = options_.clock->Now();
  std::shared_ptr<const std::string> cached;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(key);
    if (it != entries_.end() && it->second.expires <= now) {
      if (memory_only()) UncountLocked(key);
      EraseLocked(key);
    } else if (it != entries_.end()) {
      Cached& owner = cached_.find(it->second.tenant)->second;
      owner.lru.splice(owner.lru.begin(), owner.lru, it->second.lru);
      cached = it->second.bytes;
    }
  }
  if (memory_only()) {
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
    UncountLocked(key);
    return absl::NotFoundError(key);
  }
  auto got = options_.durable->Get(key);
  if (!got.ok()) return got.status();
  auto bytes = std::make_shared<const std::string>(*std::move(got));
  absl::MutexLock lock(&mu_);
  // Cached for as long as the store keeps it; a copy kept past the store's expiry (or
  // deleted there) is caught by the generation read above.
  CacheLocked(std::string(tenant), key, bytes, absl::InfiniteFuture());
  return bytes;
}

absl::Status CheckpointStore::Delete(const std::string& key) {
  if (KindOf(key) != options_.kind) return absl::OkStatus();
  if (options_.durable) {
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
  std::string tenant;  // whom the copy read now is charged to: its holder's, if known
  {
    absl::MutexLock lock(&mu_);
    if (auto h = held_.find(key); h != held_.end()) tenant = h->second.tenant;
    if (auto e = entries_.find(key); e != entries_.end()) tenant = e->second.tenant;
  }
  auto bytes = Get(tenant, key);
  if (!bytes.ok()) return bytes.status();
  if (options_.durable) {
    if (absl::Status s = options_.durable->Put(key, **bytes, ttl); !s.ok()) return s;
  }
  const absl::Time expires = options_.clock->Now() + ttl;
  absl::MutexLock lock(&mu_);
  if (auto h = held_.find(key); h != held_.end()) h->second.expires = expires;
  if (auto e = entries_.find(key); e != entries_.end() && memory_only()) {
    e->second.expires = expires;
  }
  return absl::OkStatus();
}

}  // namespace attnserve::store
