// One tenant's conversation ids (GET /v1/conversations), for ConversationStore: pages of
// at most kIdsPerPage ids, oldest first, and a small index record naming the pages and
// counting the ids, all under keys computed from the tenant's name (so another tenant's
// requests name other keys). A creation or a deletion rewrites one page and the index,
// never the whole list; the list holds at most the quota ConversationStore gives Add.
// Edits take the index's store lease (waiting their turn), so replicas sharing a store
// edit it one at a time. Thread-safe.
#pragma once

#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/store/lease_keeper.h"
#include "server/store/snapshot_store.h"

namespace attnserve::http {

class ConversationList {
 public:
  static constexpr int kIdsPerPage = 64;

  // `store` and `leases` (on that store) are not owned and outlive the list. Pages and
  // the index are written for `ttl`: Renew must run before a listed conversation could
  // outlive them.
  ConversationList(store::SnapshotStore* store, store::LeaseKeeper* leases, absl::Duration ttl)
      : store_(store), leases_(leases), ttl_(ttl) {}

  // Lists `id` as `tenant`'s newest. When the tenant already has `max` ids, those for
  // which `alive` is false are dropped first; if it still has `max`, RESOURCE_EXHAUSTED
  // naming the limit (`limit_name`, e.g. the flag) and nothing changes.
  absl::Status Add(const std::string& tenant, const std::string& id, int max,
                   const std::string& limit_name,
                   const std::function<absl::StatusOr<bool>(const std::string&)>& alive);
  // Takes `ids` off `tenant`'s list (those not on it are ignored).
  absl::Status Remove(const std::string& tenant, const std::vector<std::string>& ids);
  // `tenant`'s ids, newest first.
  absl::StatusOr<std::vector<std::string>> Newest(const std::string& tenant);
  // Writes every page and the index again, for the list's `ttl` from now.
  absl::Status Renew(const std::string& tenant);

 private:
  struct Index {
    std::vector<int64_t> pages;  // page numbers, oldest first
    int64_t next = 0;            // the number the next new page gets
    int64_t count = 0;           // ids on all pages
  };
  // One loaded page: its number and its ids, oldest first.
  struct Page {
    int64_t number;
    std::vector<std::string> ids;
  };
  using Edit = std::function<absl::Status(Index*, std::vector<Page>* changed)>;
  // Runs `edit` on `tenant`'s index under its lease, then writes the pages it put in
  // `changed` (an empty one is deleted) and the index.
  absl::Status EditIndex(const std::string& tenant, const Edit& edit);
  absl::StatusOr<Page> ReadPage(const std::string& tenant, int64_t number);
  // Drops from every page the ids `gone` says are gone; changed pages go to `changed`.
  absl::Status Prune(const std::string& tenant, Index* index, std::vector<Page>* changed,
                     const std::function<absl::StatusOr<bool>(const std::string&)>& gone);

  store::SnapshotStore* const store_;
  store::LeaseKeeper* const leases_;
  const absl::Duration ttl_;
};

// `prefix` + 32 hex digits of SHA-256 over `parts` (each followed by a newline): the
// store keys of the conversation records, which include the tenant among the parts, so
// another tenant's request computes another key and finds nothing.
std::string HashedKey(std::string_view prefix, std::initializer_list<std::string_view> parts);
// The store keys of `tenant`'s list index and of its page `number`: "convs_" + 32 hex.
std::string ListIndexKey(const std::string& tenant);
std::string ListPageKey(const std::string& tenant, int64_t number);

}  // namespace attnserve::http
