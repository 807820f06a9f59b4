#include "server/http/conversation_store.h"

#include <algorithm>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/http/http_errors.h"

namespace attnserve::http {

using nlohmann::json;

namespace {

// The store's records, swept at most this often in memory mode (and whenever the budget
// is spent).
constexpr absl::Duration kSweepEvery = absl::Minutes(1);

// The stored responses of `items`' assistant items from index `from` on.
std::vector<std::string> ResponsesOf(const json& items, size_t from) {
  std::vector<std::string> out;
  for (size_t i = from; i < items.size(); ++i) {
    auto it = items[i].find("response_id");
    if (it != items[i].end() && it->is_string()) out.push_back(it->get<std::string>());
  }
  return out;
}

}  // namespace

ConversationStore::ConversationStore(std::unique_ptr<store::SnapshotStore> store,
                                     Options options)
    : store_(std::move(store)),
      options_(std::move(options)),
      leases_(store_.get(), {}, nullptr),
      list_(store_.get(), &leases_, 2 * options_.ttl) {}

std::unique_ptr<ConversationStore> ConversationStore::InMemory(Options options) {
  auto memory = std::make_unique<store::MemorySnapshotStore>(options.clock);
  store::MemorySnapshotStore* raw = memory.get();
  auto conversations = std::make_unique<ConversationStore>(std::move(memory), std::move(options));
  conversations->memory_ = raw;
  return conversations;
}

ConversationStore::Responses CheckpointResponses(store::CheckpointStore* checkpoints) {
  // The key a tenant's stored response is kept under: as ReadResponse in
  // responses_front.cc reads it.
  ConversationStore::Responses r;
  r.renew = [checkpoints](const std::string& tenant, const std::string& id, absl::Duration ttl) {
    absl::Status s = checkpoints->Renew(store::ResponseKey(tenant, id), ttl);
    return absl::IsNotFound(s) ? absl::OkStatus() : s;
  };
  r.remove = [checkpoints](const std::string& tenant, const std::string& id) {
    return checkpoints->Delete(store::ResponseKey(tenant, id));
  };
  return r;
}

std::string ConversationStore::HeadKey(const std::string& tenant, const std::string& id) const {
  return HashedKey("conv_", {"head", tenant, id});
}

std::string ConversationStore::PageKey(const ConversationRecord& r, int64_t page) const {
  return HashedKey("conv_", {"page", r.tenant, r.id, absl::StrCat(page)});
}

absl::Status ConversationStore::CheckMemory(bool force) {
  if (memory_ == nullptr) return absl::OkStatus();
  const absl::Time now = options_.clock->Now();
  {
    absl::MutexLock lock(&mu_);
    force = force || memory_->bytes() > options_.memory_bytes;
    if (!force && now - last_sweep_ < kSweepEvery) return absl::OkStatus();
    last_sweep_ = now;
  }
  memory_->RemoveExpired().IgnoreError();  // the memory store cannot fail
  const int64_t held = memory_->bytes();
  if (held <= options_.memory_bytes) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "conversations in this server's memory hold ", held,
      " bytes, more than --conversation_memory_bytes=", options_.memory_bytes,
      "; delete conversations or wait for old ones to expire"));
}

std::string ConversationStore::RenewedKey(const ConversationRecord& r) const {
  return HashedKey("conv_", {"renewed", r.tenant, r.id});
}

absl::Status ConversationStore::RenewIfDue(const ConversationRecord& r, bool force) {
  const std::string marker = RenewedKey(r);
  if (!force) {
    auto generation = store_->GetGeneration(marker);
    if (!generation.ok()) return generation.status();
    if (*generation > 0) return absl::OkStatus();
  }
  std::vector<std::string> responses;
  if (!r.head.empty()) responses.push_back(r.head);
  for (int64_t page = 0; page < r.pages; ++page) {
    auto bytes = store_->Get(PageKey(r, page));
    if (absl::IsNotFound(bytes.status())) continue;  // nothing left to keep
    if (!bytes.ok()) return bytes.status();
    if (absl::Status s = store_->Put(PageKey(r, page), *bytes, held_ttl()); !s.ok()) return s;
    auto items = DecodeItemPage(*bytes);
    if (!items.ok()) return items.status();
    for (std::string& id : ResponsesOf(*items, 0)) responses.push_back(std::move(id));
  }
  std::sort(responses.begin(), responses.end());  // head is an item's response too
  responses.erase(std::unique(responses.begin(), responses.end()), responses.end());
  if (options_.responses.renew) {
    for (const std::string& id : responses) {
      if (absl::Status s = options_.responses.renew(r.tenant, id, held_ttl()); !s.ok()) return s;
    }
  }
  if (absl::Status s = list_.Renew(r.tenant); !s.ok()) return s;
  return store_->Put(marker, "renewed", options_.ttl);
}

absl::Status ConversationStore::Create(ConversationRecord record) {
  if (absl::Status s = CheckMemory(); !s.ok()) return s;
  const std::string head_key = HeadKey(record.tenant, record.id);
  absl::Status listed = list_.Add(
      record.tenant, record.id, options_.max_per_tenant,
      "--max_conversations_per_tenant", [&](const std::string& id) -> absl::StatusOr<bool> {
        auto generation = store_->GetGeneration(HeadKey(record.tenant, id));
        if (!generation.ok()) return generation.status();
        return *generation > 0;
      });
  if (!listed.ok()) return listed;
  absl::Status written = [&]() -> absl::Status {
    record.item_count = record.items.size();
    record.pages = record.items.empty() ? 0 : 1;
    if (record.pages > 0) {
      absl::Status s = store_->Put(PageKey(record, 0), EncodeItemPage(record.items), held_ttl());
      if (!s.ok()) return s;
    }
    // A fork holds its source's responses: renewed now, for its whole lifetime.
    absl::Status renewed = record.inherited > 0
                               ? RenewIfDue(record, /*force=*/true)
                               : store_->Put(RenewedKey(record), "renewed", options_.ttl);
    if (!renewed.ok()) return renewed;
    return store_->Put(head_key, EncodeConversation(record), options_.ttl);
  }();
  if (!written.ok()) Unlist(record.tenant, record.id).IgnoreError();
  return written;
}

absl::StatusOr<ConversationRecord> ConversationStore::Get(const std::string& tenant,
                                                          const std::string& id,
                                                          const std::string& param) {
  if (!IsConversationId(id)) return ConversationNotFound(id, param);
  auto bytes = store_->Get(HeadKey(tenant, id));
  if (absl::IsNotFound(bytes.status())) return ConversationNotFound(id, param);
  if (!bytes.ok()) return bytes.status();
  auto record = DecodeConversation(*bytes);
  if (!record.ok()) return record.status();
  if (record->tenant != tenant || record->id != id) return ConversationNotFound(id, param);
  return record;
}

absl::Status ConversationStore::ReadItems(ConversationRecord* r) {
  r->items = json::array();
  for (int64_t page = 0; page < r->pages; ++page) {
    auto bytes = store_->Get(PageKey(*r, page));
    if (!bytes.ok()) {
      if (!absl::IsNotFound(bytes.status())) return bytes.status();
      return absl::DataLossError(absl::StrCat("conversation '", r->id, "': page ", page,
                                              " of its items is gone"));
    }
    auto items = DecodeItemPage(*bytes);
    if (!items.ok()) return items.status();
    for (json& item : *items) r->items.push_back(std::move(item));
  }
  return absl::OkStatus();
}

absl::Status ConversationStore::Unlist(const std::string& tenant, const std::string& id) {
  return list_.Remove(tenant, {id});
}

absl::Status ConversationStore::Delete(const std::string& tenant, const std::string& id) {
  auto record = Get(tenant, id);
  if (!record.ok()) return record.status();
  ConversationRecord& r = *record;
  // Its responses first: a failure leaves the conversation there to delete again.
  if (absl::Status s = ReadItems(&r); !s.ok() && !absl::IsDataLoss(s)) return s;
  if (options_.responses.remove) {
    for (const std::string& response : ResponsesOf(r.items, r.inherited)) {
      if (absl::Status s = options_.responses.remove(tenant, response); !s.ok()) return s;
    }
  }
  if (absl::Status s = store_->Delete(HeadKey(tenant, id)); !s.ok()) return s;
  // A turn that committed after the read above wrote one more page (and a turn failing
  // now deletes its own response): its response goes too.
  for (int64_t page = r.pages;; ++page) {
    auto bytes = store_->Get(PageKey(r, page));
    if (!bytes.ok()) break;
    auto items = DecodeItemPage(*bytes);
    if (items.ok() && options_.responses.remove) {
      for (const std::string& response : ResponsesOf(*items, 0)) {
        options_.responses.remove(tenant, response).IgnoreError();
      }
    }
    store_->Delete(PageKey(r, page)).IgnoreError();
  }
  for (int64_t page = 0; page < r.pages; ++page) {
    store_->Delete(PageKey(r, page)).IgnoreError();  // expires anyway
  }
  store_->Delete(RenewedKey(r)).IgnoreError();
  return Unlist(tenant, id);
}

absl::StatusOr<std::vector<ConversationRecord>> ConversationStore::List(const std::string& tenant,
                                                                        int limit) {
  auto ids = list_.Newest(tenant);
  if (!ids.ok()) return ids.status();
  std::vector<ConversationRecord> out;
  std::vector<std::string> gone;
  for (const std::string& id : *ids) {
    if (int(out.size()) >= limit) break;
    auto record = Get(tenant, id);
    if (record.ok()) {
      out.push_back(*std::move(record));
    } else if (absl::IsNotFound(record.status())) {
      gone.push_back(id);  // expired
    } else {
      return record.status();
    }
  }
  if (!gone.empty()) list_.Remove(tenant, gone).IgnoreError();  // the next listing retries
  return out;
}

absl::StatusOr<std::unique_ptr<ConversationStore::Change>> ConversationStore::Begin(
    const std::string& tenant, const std::string& id, const std::string& param) {
  if (!IsConversationId(id)) return ConversationNotFound(id, param);
  const std::string key = HeadKey(tenant, id);
  // The tenant's own key: absent for another tenant's id, which is never leased.
  auto generation = store_->GetGeneration(key);
  if (!generation.ok()) return generation.status();
  if (*generation == 0) return ConversationNotFound(id, param);
  if (absl::Status s = CheckMemory(); !s.ok()) return s;
  auto grant = leases_.Acquire(key, /*wait=*/false);
  if (absl::IsAborted(grant.status())) {
    absl::Status busy = absl::FailedPreconditionError(
        absl::StrCat("conversation '", id, "' has a response in progress; retry when it ends"));
    busy.SetPayload(kRetryAfterPayload, absl::Cord("1"));
    return busy;
  }
  if (!grant.ok()) return grant.status();
  // Read under the lease: what the generation in the grant wrote, or newer (a plain
  // write meanwhile, which the fenced Commit then refuses).
  auto record = Get(tenant, id, param);
  if (!record.ok() || grant->generation == 0) {
    leases_.Release(key, grant->token);
    return record.ok() ? ConversationNotFound(id, param) : record.status();
  }
  return std::unique_ptr<Change>(new Change(this, *std::move(record), *std::move(grant)));
}

absl::Status ConversationStore::Change::Commit(ConversationRecord next, const json& added) {
  ConversationStore& s = *store_;
  const std::string key = s.HeadKey(record_.tenant, record_.id);
  absl::Status result = [&]() -> absl::Status {
    next.item_count = record_.item_count + added.size();
    next.pages = record_.pages;
    if (!added.empty()) {
      absl::Status put =
          s.store_->Put(s.PageKey(record_, next.pages), EncodeItemPage(added), s.held_ttl());
      if (!put.ok()) return put;
      next.pages += 1;
    }
    if (absl::Status renewed = s.RenewIfDue(next); !renewed.ok()) return renewed;
    auto written = s.leases_.WriteFenced(key, EncodeConversation(next), s.options_.ttl,
                                         grant_.token, grant_.generation);
    if (!written.ok()) {
      return absl::AbortedError(absl::StrCat("conversation '", record_.id,
                                             "' was deleted or changed meanwhile: ",
                                             written.status().message()));
    }
    return absl::OkStatus();
  }();
  s.leases_.Release(key, grant_.token);
  released_ = true;
  if (result.ok()) record_ = std::move(next);
  return result;
}

ConversationStore::Change::~Change() {
  if (!released_) store_->leases_.Release(store_->HeadKey(record_.tenant, record_.id), grant_.token);
}

}  // namespace attnserve::http
