// Where conversations live between turns (conversations_api.h says what one is): records
// in a SnapshotStore (the durable --session_store, shared by replicas; or, in memory
// mode, a MemorySnapshotStore of its own), each under a key computed from its tenant and
// id, so another tenant's request names another key and finds nothing (NOT_FOUND, having
// read and leased nothing of the owner's):
//   head   "conv_" + hash(tenant, id): the only record that changes, small and of a
//          fixed size whatever the conversation's length;
//   page n "conv_" + hash(tenant, id, n): the items one change added, never rewritten;
//   and the tenant's list of ids (conversation_list.h).
// A turn writes one page and the head: what is new, nothing of the earlier turns.
//
// One writer at a time: a response in a conversation holds the head's store lease from
// its start to its end (LeaseKeeper renews it), and moves the head with a write fenced
// by that lease and the generation it read. A second response meanwhile is refused at
// once (FAILED_PRECONDITION, HTTP 409), on any replica; a conversation deleted meanwhile
// stays deleted (the fenced write finds its generation gone).
//
// Lifetime: the head lives `ttl` after its last change. What it holds (its pages, the
// stored responses of its items, its tenant's list) is written for held_ttl() = 2 * ttl
// and all renewed together by a change coming more than `ttl` after the last renewal
// (when a marker record written with the renewal for `ttl` has expired: the store's
// clock decides, as it does every expiry), so everything a live conversation references
// outlives it, and a renewal runs at most once per `ttl`. Deleting a conversation
// deletes the responses made in it.
//
// Bounds: a tenant has at most `max_per_tenant` conversations (RESOURCE_EXHAUSTED, HTTP
// 429, beyond; never another tenant's evicted); in memory mode the store holds at most
// `memory_bytes` and is swept of expired records on writes. Thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/common/clock.h"
#include "server/config/defaults.h"
#include "server/http/conversation_list.h"
#include "server/http/conversations_api.h"
#include "server/store/checkpoint_store.h"
#include "server/store/lease_keeper.h"
#include "server/store/memory_store.h"
#include "server/store/snapshot_store.h"

namespace attnserve::http {

class ConversationStore {
 public:
  // What a conversation does to the stored responses of its items (the Responses
  // routes' records: CheckpointResponses gives the checkpoint store's). Both answer OK for
  // a response that is not there. Unset: responses are left alone.
  struct Responses {
    std::function<absl::Status(const std::string& tenant, const std::string& id,
                               absl::Duration ttl)>
        renew;
    std::function<absl::Status(const std::string& tenant, const std::string& id)> remove;
  };
  struct Options {
    // How long a conversation lives after its last change (--conversation_ttl).
    absl::Duration ttl = config::defaults::kConversationTtl;
    // Most conversations one tenant keeps (--max_conversations_per_tenant).
    int max_per_tenant = config::defaults::kMaxConversationsPerTenant;
    // Memory mode only (InMemory): most bytes of records held (--conversation_memory_bytes).
    int64_t memory_bytes = config::defaults::kConversationMemoryBytes;
    // Not owned; times renewals, sweeps and (memory mode) expiry.
    const Clock* clock = RealClock::Get();
    Responses responses;
  };

  // On `store` (a durable one; or any, for tests). No byte budget: the store's own.
  ConversationStore(std::unique_ptr<store::SnapshotStore> store, Options options);
  // Memory mode: a MemorySnapshotStore of its own, swept and held to memory_bytes.
  static std::unique_ptr<ConversationStore> InMemory(Options options);

  absl::Duration ttl() const { return options_.ttl; }
  // How long what a conversation holds is written for (its responses included).
  absl::Duration held_ttl() const { return 2 * options_.ttl; }

  // Writes a new conversation (`record.items` are its first page; a fork's inherited
  // responses are renewed) and lists it under its tenant. RESOURCE_EXHAUSTED past the
  // tenant's quota or the memory budget.
  absl::Status Create(ConversationRecord record);
  // `tenant`'s conversation `id`, its items not read: NOT_FOUND (param `param`) for
  // another tenant's, a deleted, an expired or a malformed id, all with the same message.
  absl::StatusOr<ConversationRecord> Get(const std::string& tenant, const std::string& id,
                                         const std::string& param = "");
  // Reads `record`'s items (its pages) into record->items.
  absl::Status ReadItems(ConversationRecord* record);
  // Deletes it with the responses made in it (NOT_FOUND as Get), and takes it off its
  // tenant's list.
  absl::Status Delete(const std::string& tenant, const std::string& id);
  // `tenant`'s conversations, newest first, at most `limit`, items not read.
  absl::StatusOr<std::vector<ConversationRecord>> List(const std::string& tenant, int limit);

  // A change of one conversation, holding its lease until Commit or destruction.
  class Change {
   public:
    ~Change();
    const ConversationRecord& record() const { return record_; }
    // Writes `added` (message items, may be empty) as a new page and `next` as the
    // head (its item and page counts follow from `added`; fenced: ABORTED if it was
    // deleted or the lease lost meanwhile), renewing what it holds when due, and gives
    // the lease up.
    absl::Status Commit(ConversationRecord next, const nlohmann::json& added);

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
  // while another change holds it; RESOURCE_EXHAUSTED when the memory budget is spent.
  absl::StatusOr<std::unique_ptr<Change>> Begin(const std::string& tenant,
                                                const std::string& id,
                                                const std::string& param = "");

 private:
  std::string HeadKey(const std::string& tenant, const std::string& id) const;
  std::string PageKey(const ConversationRecord& record, int64_t page) const;
  // The marker of `record`'s last renewal: present for `ttl` after it.
  std::string RenewedKey(const ConversationRecord& record) const;
  // Renews `record`'s pages, the responses of its items and its tenant's list (and
  // writes the marker) when the last renewal is older than ttl, or now if `force`.
  absl::Status RenewIfDue(const ConversationRecord& record, bool force = false);
  // Memory mode: drops expired records at most once a minute (or now, `force`), then
  // RESOURCE_EXHAUSTED if the records held exceed the budget.
  absl::Status CheckMemory(bool force = false);
  absl::Status Unlist(const std::string& tenant, const std::string& id);

  const std::unique_ptr<store::SnapshotStore> store_;
  const Options options_;
  store::MemorySnapshotStore* memory_ = nullptr;  // store_, in memory mode
  store::LeaseKeeper leases_;
  ConversationList list_;
  absl::Mutex mu_;
  absl::Time last_sweep_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

// The stored responses of the Responses routes in `checkpoints` (not owned), as a
// conversation renews and deletes them.
ConversationStore::Responses CheckpointResponses(store::CheckpointStore* checkpoints);

}  // namespace attnserve::http
