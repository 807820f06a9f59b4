// Where conversations live between turns (conversations_api.h says what one is): their
// records in a SnapshotStore (the durable --session_store, shared by replicas; or a
// MemorySnapshotStore) under their ids, and each tenant's list of conversation ids under
// "convs_" + a hash of the tenant.
//
// One writer at a time: a response in a conversation holds the conversation's store
// lease from its start to its end (LeaseKeeper renews it), and moves the head with a
// write fenced by that lease and the generation it read. A second response meanwhile is
// refused at once (FAILED_PRECONDITION, HTTP 409), on any replica; a conversation deleted
// meanwhile stays deleted (the fenced write finds its generation gone). Changes to a
// tenant's list take its lease the same way, waiting their turn. Thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/http/conversations_api.h"
#include "server/store/lease_keeper.h"
#include "server/store/snapshot_store.h"

namespace attnserve::http {

class ConversationStore {
 public:
  // `ttl`: how long a conversation lives after its last change.
  ConversationStore(std::unique_ptr<store::SnapshotStore> store, absl::Duration ttl);

  absl::Duration ttl() const { return ttl_; }

  // Writes a new conversation and lists it under its tenant.
  absl::Status Create(const ConversationRecord& record);
  // `tenant`'s conversation `id`: NOT_FOUND (param `param`) for another tenant's, a
  // deleted, an expired or a malformed id, all with the same message.
  absl::StatusOr<ConversationRecord> Get(const std::string& tenant, const std::string& id,
                                         const std::string& param = "");
  // Deletes it (NOT_FOUND as Get) and takes it off its tenant's list.
  absl::Status Delete(const std::string& tenant, const std::string& id);
  // `tenant`'s conversations, newest first, at most `limit`.
  absl::StatusOr<std::vector<ConversationRecord>> List(const std::string& tenant, int limit);

  // A change of one conversation, holding its lease until Commit or destruction.
  class Change {
   public:
    ~Change();
    const ConversationRecord& record() const { return record_; }
    // Writes `record` as the conversation's new state (fenced: ABORTED if it was deleted
    // or the lease lost meanwhile) and gives the lease up.
    absl::Status Commit(const ConversationRecord& record);

   private:
    friend class ConversationStore;
    Change(ConversationStore* store, ConversationRecord record, store::LeaseGrant grant)
        : store_(store), record_(std::move(record)), grant_(std::move(grant)) {}
    ConversationStore* store_;
    ConversationRecord record_;
    store::LeaseGrant grant_;
    bool released_ = false;
  };
  // Takes `tenant`'s conversation `id` for a change, without waiting: NOT_FOUND as Get
  // (param `param`); FAILED_PRECONDITION "conversation 'ID' has a response in progress"
  // while another change holds it.
  absl::StatusOr<std::unique_ptr<Change>> Begin(const std::string& tenant,
                                                const std::string& id,
                                                const std::string& param = "");

 private:
  // Applies `edit` to `tenant`'s list of ids (oldest first) under its lease.
  absl::Status EditList(const std::string& tenant,
                        const std::function<void(std::vector<std::string>*)>& edit);
  static std::string ListKey(const std::string& tenant);

  const std::unique_ptr<store::SnapshotStore> store_;
  const absl::Duration ttl_;
  store::LeaseKeeper leases_;
};

}  // namespace attnserve::http
