#include "server/store/record_kind.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/common/sha256.h"

namespace attnserve::store {
namespace {

bool IsHex(std::string_view s, size_t digits) {
  return s.size() == digits && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

// `id` is `prefix` followed by exactly `digits` hex digits.
bool HasForm(std::string_view id, std::string_view prefix, size_t digits) {
  return id.substr(0, prefix.size()) == prefix && IsHex(id.substr(prefix.size()), digits);
}

}  // namespace

std::optional<RecordKind> KindOf(std::string_view id) {
  if (IsHex(id, 32)) return RecordKind::kSession;
  if (HasForm(id, "resp_", 32)) return RecordKind::kResponse;
  // resp_<32 hex>_<32 hex: TenantTag>
  if (id.size() == 5 + 32 + 1 + 32 && HasForm(id.substr(0, 5 + 32), "resp_", 32) &&
      id[5 + 32] == '_' && IsHex(id.substr(5 + 33), 32)) {
    return RecordKind::kResponse;
  }
  if (HasForm(id, "pfx_", 64)) return RecordKind::kPrefixState;
  if (HasForm(id, "conv_", 32)) return RecordKind::kConversation;
  if (HasForm(id, "convs_", 32)) return RecordKind::kConversationList;
  if (HasForm(id, "page_", 64)) return RecordKind::kPage;
  return std::nullopt;
}

const char* KindName(RecordKind kind) {
  switch (kind) {
    case RecordKind::kSession:
      return "session";
    case RecordKind::kResponse:
      return "stored response";
    case RecordKind::kPrefixState:
      return "kept chat state";
    case RecordKind::kConversation:
      return "conversation";
    case RecordKind::kConversationList:
      return "conversation list";
    case RecordKind::kPage:
      return "state page";
  }
  return "record";
}

std::string TenantTag(std::string_view tenant) {
  Sha256 h;
  h.Update(tenant);
  return DigestHex(h.Finish(), 16);
}

std::string ResponseKey(std::string_view tenant, std::string_view response_id) {
  return std::string(response_id) + "_" + TenantTag(tenant);
}

bool KindView::Holds(std::string_view id) const {
  const std::optional<RecordKind> kind = KindOf(id);
  return kind.has_value() && std::find(kinds_.begin(), kinds_.end(), *kind) != kinds_.end();
}

absl::Status KindView::Foreign(const std::string& id) const {
  if (absl::Status s = ValidateSnapshotId(id); !s.ok()) return s;
  return absl::InvalidArgumentError(
      absl::StrCat("'", id, "' is not an id of the records this store view holds"));
}

absl::Status KindView::Put(const std::string& id, std::string_view bytes, absl::Duration ttl) {
  if (!Holds(id)) return Foreign(id);
  return base_->Put(id, bytes, ttl);
}

absl::StatusOr<std::string> KindView::Get(const std::string& id) {
  if (!Holds(id)) return absl::NotFoundError(id);
  return base_->Get(id);
}

absl::Status KindView::Delete(const std::string& id) {
  if (!Holds(id)) return absl::OkStatus();
  return base_->Delete(id);
}

absl::StatusOr<LeaseGrant> KindView::AcquireLease(const std::string& id, absl::Duration ttl) {
  if (!Holds(id)) return Foreign(id);
  return base_->AcquireLease(id, ttl);
}

absl::Status KindView::RenewLease(const std::string& id, const std::string& token,
                                  absl::Duration ttl) {
  if (!Holds(id)) return LeaseLostError(id);
  return base_->RenewLease(id, token, ttl);
}

absl::Status KindView::ReleaseLease(const std::string& id, const std::string& token) {
  if (!Holds(id)) return absl::OkStatus();
  return base_->ReleaseLease(id, token);
}

absl::StatusOr<int64_t> KindView::PutFenced(const std::string& id, std::string_view bytes,
                                            absl::Duration ttl, const std::string& token,
                                            int64_t generation) {
  if (!Holds(id)) return Foreign(id);
  return base_->PutFenced(id, bytes, ttl, token, generation);
}

absl::StatusOr<std::pair<std::string, int64_t>> KindView::GetWithGeneration(
    const std::string& id) {
  if (!Holds(id)) return absl::NotFoundError(id);
  return base_->GetWithGeneration(id);
}

absl::StatusOr<int64_t> KindView::GetGeneration(const std::string& id) {
  if (!Holds(id)) return 0;
  return base_->GetGeneration(id);
}

bool KindView::HoldsPages() const {
  return std::find(kinds_.begin(), kinds_.end(), RecordKind::kPage) != kinds_.end();
}

absl::StatusOr<int64_t> KindView::PutPages(const std::vector<PageWrite>& pages,
                                           absl::Duration ttl) {
  if (!HoldsPages()) return SnapshotStore::PutPages(pages, ttl);
  return base_->PutPages(pages, ttl);
}

absl::StatusOr<std::vector<std::optional<std::string>>> KindView::GetPages(
    const std::vector<std::string>& ids) {
  if (!HoldsPages()) return SnapshotStore::GetPages(ids);
  return base_->GetPages(ids);
}

absl::StatusOr<std::vector<bool>> KindView::ExtendPages(const std::vector<std::string>& ids,
                                                        absl::Duration ttl) {
  if (!HoldsPages()) return SnapshotStore::ExtendPages(ids, ttl);
  return base_->ExtendPages(ids, ttl);
}

std::unique_ptr<SnapshotStore> ForKinds(std::initializer_list<RecordKind> kinds,
                                        std::unique_ptr<SnapshotStore> base) {
  if (base == nullptr) return nullptr;
  return std::make_unique<KindView>(kinds, std::move(base));
}

}  // namespace attnserve::store
