// The kinds of record one store holds side by side, each with its own id space: a
// record is named by an id whose form says its kind, and a reader of one kind sees
// nothing of the others. KindView puts that rule in front of a SnapshotStore, so no
// caller has to remember it: the session registry reads only sessions, the Responses
// routes only stored responses, and so on.
//
// Why it matters: record ids are computable (a conversation list's is a hash of its
// tenant, a kept chat state's a hash of its tenant and tokens), so a store that
// answered a foreign-kind id differently from an absent one ("not a session snapshot"
// against NOT_FOUND) would tell anyone whether another tenant's record exists.
//
// A new kind of record is a new RecordKind here, with its id form in KindOf.
#pragma once

#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/store/snapshot_store.h"

namespace attnserve::store {

enum class RecordKind {
  kSession,           // 32 lowercase hex digits (RandomId128)
  kResponse,          // "resp_" + 32 hex, then "_" + 32 hex of its tenant (ResponseKey);
                      // records of the first version lack the tenant part
  kPrefixState,       // "pfx_" + 64 hex (a kept chat state; disposable)
  kConversation,      // "conv_" + 32 hex
  kConversationList,  // "convs_" + 32 hex (one tenant's conversation ids)
  kPage,              // "page_" + 64 hex (a shared page of session state: state_pages.h)
};

// The kind `id`'s form names; nullopt for an id of no kind.
std::optional<RecordKind> KindOf(std::string_view id);
// "session", "stored response", ... for messages.
const char* KindName(RecordKind kind);

// 32 hex digits that stand for `tenant` in a record's key (the first 128 bits of
// SHA-256 of the name): a key holding them is the tenant's alone, so another tenant's
// lookup names another key and reads nothing.
std::string TenantTag(std::string_view tenant);
// The store key of `tenant`'s stored response `response_id` ("resp_" + 32 hex).
std::string ResponseKey(std::string_view tenant, std::string_view response_id);

// A SnapshotStore that holds records of `kinds` only, over `base`. Given an id of any
// other form, reads answer NOT_FOUND (GetGeneration 0), Delete and lease releases OK,
// all without touching `base`: exactly what an id never written gets. A write or lease
// of a foreign id is INVALID_ARGUMENT (a caller's mistake, never a client's).
class KindView : public SnapshotStore {
 public:
  KindView(std::initializer_list<RecordKind> kinds, std::unique_ptr<SnapshotStore> base)
      : kinds_(kinds), base_(std::move(base)) {}

  bool Holds(std::string_view id) const;

  absl::Status Put(const std::string& id, std::string_view bytes, absl::Duration ttl) override;
  absl::StatusOr<std::string> Get(const std::string& id) override;
  absl::Status Delete(const std::string& id) override;
  absl::StatusOr<int> RemoveExpired() override { return base_->RemoveExpired(); }
  absl::StatusOr<LeaseGrant> AcquireLease(const std::string& id, absl::Duration ttl) override;
  absl::Status RenewLease(const std::string& id, const std::string& token,
                          absl::Duration ttl) override;
  absl::Status ReleaseLease(const std::string& id, const std::string& token) override;
  absl::StatusOr<int64_t> PutFenced(const std::string& id, std::string_view bytes,
                                    absl::Duration ttl, const std::string& token,
                                    int64_t generation) override;
  absl::StatusOr<std::pair<std::string, int64_t>> GetWithGeneration(
      const std::string& id) override;
  absl::StatusOr<int64_t> GetGeneration(const std::string& id) override;
  // Pages: forwarded to `base` when this view holds RecordKind::kPage; UNIMPLEMENTED
  // otherwise (a view of other kinds keeps no pages).
  absl::StatusOr<int64_t> PutPages(const std::vector<PageWrite>& pages,
                                   absl::Duration ttl) override;
  absl::StatusOr<std::vector<std::optional<std::string>>> GetPages(
      const std::vector<std::string>& ids) override;
  absl::StatusOr<std::vector<bool>> ExtendPages(const std::vector<std::string>& ids,
                                                absl::Duration ttl) override;
  const std::string& name() const override { return base_->name(); }

 private:
  bool HoldsPages() const;
  absl::Status Foreign(const std::string& id) const;

  const std::vector<RecordKind> kinds_;
  const std::unique_ptr<SnapshotStore> base_;
};

// `base` seen as a store of `kinds` only (null stays null).
std::unique_ptr<SnapshotStore> ForKinds(std::initializer_list<RecordKind> kinds,
                                        std::unique_ptr<SnapshotStore> base);

}  // namespace attnserve::store
