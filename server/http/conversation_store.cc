#include "server/http/conversation_store.h"

#include <algorithm>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/common/sha256.h"
#include "server/http/http_errors.h"

namespace attnserve::http {

using nlohmann::json;

ConversationStore::ConversationStore(std::unique_ptr<store::SnapshotStore> store,
                                     absl::Duration ttl)
    : store_(std::move(store)), ttl_(ttl), leases_(store_.get(), {}, nullptr) {}

std::string ConversationStore::ListKey(const std::string& tenant) {
  Sha256 h;
  h.Update(tenant);
  return "convs_" + DigestHex(h.Finish(), 16);
}

absl::Status ConversationStore::EditList(
    const std::string& tenant, const std::function<void(std::vector<std::string>*)>& edit) {
  const std::string key = ListKey(tenant);
  auto grant = leases_.Acquire(key, /*wait=*/true);
  if (!grant.ok()) return grant.status();
  absl::Status result = [&]() -> absl::Status {
    std::vector<std::string> ids;
    if (grant->generation > 0) {
      auto bytes = store_->Get(key);
      if (bytes.ok()) {
        json list = json::parse(*bytes, nullptr, /*allow_exceptions=*/false);
        if (list.is_array()) {
          for (const json& id : list) {
            if (id.is_string()) ids.push_back(id.get<std::string>());
          }
        }
      } else if (!absl::IsNotFound(bytes.status())) {
        return bytes.status();
      }
    }
    edit(&ids);
    auto written = leases_.WriteFenced(key, json(ids).dump(), ttl_, grant->token,
                                       grant->generation);
    return written.status();
  }();
  leases_.Release(key, grant->token);
  return result;
}

absl::Status ConversationStore::Create(const ConversationRecord& record) {
  if (absl::Status s = store_->Put(record.id, EncodeConversation(record), ttl_); !s.ok()) {
    return s;
  }
  absl::Status listed = EditList(record.tenant, [&](std::vector<std::string>* ids) {
    ids->push_back(record.id);
  });
  if (!listed.ok()) store_->Delete(record.id).IgnoreError();
  return listed;
}

absl::StatusOr<ConversationRecord> ConversationStore::Get(const std::string& tenant,
                                                          const std::string& id,
                                                          const std::string& param) {
  if (!IsConversationId(id)) return ConversationNotFound(id, param);
  auto bytes = store_->Get(id);
  if (absl::IsNotFound(bytes.status())) return ConversationNotFound(id, param);
  if (!bytes.ok()) return bytes.status();
  auto record = DecodeConversation(*bytes);
  if (!record.ok()) return record.status();
  if (record->tenant != tenant || record->id != id) return ConversationNotFound(id, param);
  return record;
}

absl::Status ConversationStore::Delete(const std::string& tenant, const std::string& id) {
  auto record = Get(tenant, id);
  if (!record.ok()) return record.status();
  if (absl::Status s = store_->Delete(id); !s.ok()) return s;
  return EditList(tenant, [&](std::vector<std::string>* ids) {
    ids->erase(std::remove(ids->begin(), ids->end(), id), ids->end());
  });
}

absl::StatusOr<std::vector<ConversationRecord>> ConversationStore::List(const std::string& tenant,
                                                                        int limit) {
  auto bytes = store_->Get(ListKey(tenant));
  if (absl::IsNotFound(bytes.status())) return std::vector<ConversationRecord>{};
  if (!bytes.ok()) return bytes.status();
  json list = json::parse(*bytes, nullptr, /*allow_exceptions=*/false);
  std::vector<ConversationRecord> out;
  if (!list.is_array()) return out;
  std::vector<std::string> gone;
  for (auto it = list.rbegin(); it != list.rend() && int(out.size()) < limit; ++it) {
    if (!it->is_string()) continue;
    auto record = Get(tenant, it->get<std::string>());
    if (record.ok()) {
      out.push_back(*std::move(record));
    } else if (absl::IsNotFound(record.status())) {
      gone.push_back(it->get<std::string>());  // expired
    } else {
      return record.status();
    }
  }
  if (!gone.empty()) {
    // Best effort: the next listing tries again.
    EditList(tenant, [&](std::vector<std::string>* ids) {
      for (const std::string& id : gone) ids->erase(std::remove(ids->begin(), ids->end(), id), ids->end());
    }).IgnoreError();
  }
  return out;
}

absl::StatusOr<std::unique_ptr<ConversationStore::Change>> ConversationStore::Begin(
    const std::string& tenant, const std::string& id, const std::string& param) {
  if (!IsConversationId(id)) return ConversationNotFound(id, param);
  auto grant = leases_.Acquire(id, /*wait=*/false);
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
    leases_.Release(id, grant->token);
    return record.ok() ? ConversationNotFound(id, param) : record.status();
  }
  return std::unique_ptr<Change>(new Change(this, *std::move(record), *std::move(grant)));
}

absl::Status ConversationStore::Change::Commit(const ConversationRecord& record) {
  auto written = store_->leases_.WriteFenced(record_.id, EncodeConversation(record),
                                             store_->ttl_, grant_.token, grant_.generation);
  store_->leases_.Release(record_.id, grant_.token);
  released_ = true;
  if (!written.ok()) {
    return absl::AbortedError(absl::StrCat("conversation '", record_.id,
                                           "' was deleted or changed meanwhile: ",
                                           written.status().message()));
  }
  record_ = record;
  return absl::OkStatus();
}

ConversationStore::Change::~Change() {
  if (!released_) store_->leases_.Release(record_.id, grant_.token);
}

}  // namespace attnserve::http
