#include "server/http/conversation_list.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/common/sha256.h"

namespace attnserve::http {
namespace {

using nlohmann::json;

absl::Status Corrupt(const std::string& what) {
  return absl::DataLossError(absl::StrCat("stored conversation list: ", what));
}

}  // namespace

std::string HashedKey(std::string_view prefix, std::initializer_list<std::string_view> parts) {
  Sha256 h;
  for (std::string_view part : parts) {
    h.Update(part);
    h.Update("\n");
  }
  return std::string(prefix) + DigestHex(h.Finish(), 16);
}

std::string ListIndexKey(const std::string& tenant) {
  return HashedKey("convs_", {"list", tenant});
}

std::string ListPageKey(const std::string& tenant, int64_t number) {
  return HashedKey("convs_", {"list page", tenant, absl::StrCat(number)});
}

absl::StatusOr<ConversationList::Page> ConversationList::ReadPage(const std::string& tenant,
                                                                  int64_t number) {
  Page page{number, {}};
  auto bytes = store_->Get(ListPageKey(tenant, number));
  if (absl::IsNotFound(bytes.status())) return page;  // expired: nothing listed there
  if (!bytes.ok()) return bytes.status();
  json ids = json::parse(*bytes, nullptr, /*allow_exceptions=*/false);
  if (!ids.is_array()) return Corrupt("a page is not a list");
  for (const json& id : ids) {
    if (!id.is_string()) return Corrupt("an id is not a string");
    page.ids.push_back(id.get<std::string>());
  }
  return page;
}

absl::Status ConversationList::EditIndex(const std::string& tenant, const Edit& edit) {
  const std::string key = ListIndexKey(tenant);
  auto grant = leases_->Acquire(key, /*wait=*/true);
  if (!grant.ok()) return grant.status();
  absl::Status result = [&]() -> absl::Status {
    Index index;
    auto bytes = grant->generation > 0 ? store_->Get(key) : absl::NotFoundError(key);
    if (bytes.ok()) {
      json j = json::parse(*bytes, nullptr, /*allow_exceptions=*/false);
      if (!j.is_object() || !j["pages"].is_array() || !j["next"].is_number_integer() ||
          !j["count"].is_number_integer()) {
        return Corrupt("the index is not {pages, next, count}");
      }
      index.pages = j["pages"].get<std::vector<int64_t>>();
      index.next = j["next"].get<int64_t>();
      index.count = j["count"].get<int64_t>();
    } else if (!absl::IsNotFound(bytes.status())) {
      return bytes.status();
    }
    std::vector<Page> changed;
    if (absl::Status s = edit(&index, &changed); !s.ok()) return s;
    for (const Page& page : changed) {
      const std::string page_key = ListPageKey(tenant, page.number);
      absl::Status s = page.ids.empty() ? store_->Delete(page_key)
                                        : store_->Put(page_key, json(page.ids).dump(), ttl_);
      if (!s.ok()) return s;
    }
    const json j = {{"pages", index.pages}, {"next", index.next}, {"count", index.count}};
    return leases_->WriteFenced(key, j.dump(), ttl_, grant->token, grant->generation).status();
  }();
  leases_->Release(key, grant->token);
  return result;
}

absl::Status ConversationList::Prune(
    const std::string& tenant, Index* index, std::vector<Page>* changed,
    const std::function<absl::StatusOr<bool>(const std::string&)>& gone) {
  std::vector<int64_t> kept;
  index->count = 0;
  for (int64_t number : index->pages) {
    auto page = ReadPage(tenant, number);
    if (!page.ok()) return page.status();
    std::vector<std::string> live;
    for (const std::string& id : page->ids) {
      auto is_gone = gone(id);
      if (!is_gone.ok()) return is_gone.status();
      if (!*is_gone) live.push_back(id);
    }
    if (live.size() != page->ids.size()) changed->push_back({number, live});
    if (!live.empty()) kept.push_back(number);
    index->count += int64_t(live.size());
  }
  index->pages = std::move(kept);
  return absl::OkStatus();
}

absl::Status ConversationList::Add(
    const std::string& tenant, const std::string& id, int max, const std::string& limit_name,
    const std::function<absl::StatusOr<bool>(const std::string&)>& alive) {
  return EditIndex(tenant, [&](Index* index, std::vector<Page>* changed) -> absl::Status {
    if (index->count >= max) {
      absl::Status pruned = Prune(tenant, index, changed, [&](const std::string& listed) {
        auto live = alive(listed);
        return live.ok() ? absl::StatusOr<bool>(!*live) : live.status();
      });
      if (!pruned.ok()) return pruned;
      if (index->count >= max) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "this API key's tenant has ", index->count, " conversations, the most ",
            limit_name, "=", max, " allows; delete one to create another"));
      }
    }
    Page last{index->next, {}};
    if (!index->pages.empty()) {
      auto it = std::find_if(changed->begin(), changed->end(),
                             [&](const Page& p) { return p.number == index->pages.back(); });
      if (it != changed->end()) {
        last = *it;
        changed->erase(it);
      } else {
        auto page = ReadPage(tenant, index->pages.back());
        if (!page.ok()) return page.status();
        last = *std::move(page);
      }
    }
    if (index->pages.empty() || int(last.ids.size()) >= kIdsPerPage) {
      if (!last.ids.empty()) changed->push_back(last);  // as pruned, if it was
      last = Page{index->next, {}};
      index->pages.push_back(index->next++);
    }
    last.ids.push_back(id);
    changed->push_back(std::move(last));
    index->count += 1;
    return absl::OkStatus();
  });
}

absl::Status ConversationList::Remove(const std::string& tenant,
                                      const std::vector<std::string>& ids) {
  return EditIndex(tenant, [&](Index* index, std::vector<Page>* changed) -> absl::Status {
    return Prune(tenant, index, changed, [&](const std::string& listed) -> absl::StatusOr<bool> {
      return std::find(ids.begin(), ids.end(), listed) != ids.end();
    });
  });
}

absl::StatusOr<std::vector<std::string>> ConversationList::Newest(const std::string& tenant) {
  std::vector<std::string> out;
  auto bytes = store_->Get(ListIndexKey(tenant));
  if (absl::IsNotFound(bytes.status())) return out;
  if (!bytes.ok()) return bytes.status();
  json j = json::parse(*bytes, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j["pages"].is_array()) return Corrupt("the index has no pages");
  const std::vector<int64_t> pages = j["pages"].get<std::vector<int64_t>>();
  for (auto number = pages.rbegin(); number != pages.rend(); ++number) {
    auto page = ReadPage(tenant, *number);
    if (!page.ok()) return page.status();
    out.insert(out.end(), page->ids.rbegin(), page->ids.rend());
  }
  return out;
}

absl::Status ConversationList::Renew(const std::string& tenant) {
  return EditIndex(tenant, [&](Index* index, std::vector<Page>* changed) -> absl::Status {
    for (int64_t number : index->pages) {
      auto page = ReadPage(tenant, number);
      if (!page.ok()) return page.status();
      if (!page->ids.empty()) changed->push_back(*std::move(page));
    }
    return absl::OkStatus();
  });
}

}  // namespace attnserve::http
