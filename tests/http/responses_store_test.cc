// Stored responses (/v1/responses) as records of their tenant: another tenant's id reads
// nothing of the record, and another tenant's traffic (kept chat states, its own stored
// responses) never evicts them.
#include <gtest/gtest.h>

#include <filesystem>

#include "absl/strings/str_replace.h"
#include "server/store/record_kind.h"
#include "server/store/snapshot_store.h"
#include "tests/http/responses_testing.h"

namespace attnserve::http {
namespace {

using nlohmann::json;
using namespace testing;  // NOLINT: the fixture's helpers

constexpr char kNever[] = "resp_0123456789abcdef0123456789abcdef";  // nobody made it

json Ask(const std::string& input, std::optional<std::string> previous = std::nullopt) {
  json body = {{"model", "tiny-taylor"}, {"input", input}, {"max_output_tokens", 3},
               {"temperature", 0}};
  if (previous) body["previous_response_id"] = *previous;
  return body;
}

// `reply`'s body with `from` written as `to` (an error naming an id).
std::string Named(const Reply& reply, const std::string& from, const std::string& to) {
  return absl::StrReplaceAll(reply.body.dump(), {{from, to}});
}

class StoredResponsesTest : public ::testing::Test {
 protected:
  void TearDown() override {
    server_.reset();
    std::filesystem::remove_all(dir_);
  }
  const std::string dir_ = TestDir("stored_responses");
  std::shared_ptr<const catalogue::ServedModel> taylor_ = test_util::TinyServedModel("taylor");
  std::unique_ptr<service::AttnServer> server_;
};

TEST_F(StoredResponsesTest, AnotherTenantsIdReadsNothingOfTheRecord) {
  config::ServerOptions o;
  o.session_store = "dir:" + dir_ + "/store";
  server_ = StartFront(o, dir_, taylor_);
  ASSERT_NE(server_, nullptr);
  const Reply made = Call(*server_, "POST", "/v1/responses", kAlice, Ask("Once upon"));
  ASSERT_EQ(made.status, 200) << made.body;
  const std::string id = made.body["id"];
  // Damage every stored copy of alice's record: a reader that opened it would fail.
  auto records = store::OpenSnapshotStore(o.session_store);
  ASSERT_TRUE(records.ok());
  int damaged = 0;
  for (const auto& f : std::filesystem::directory_iterator(dir_ + "/store")) {
    const std::string stem = f.path().stem().string();
    if (f.path().extension() != ".snap" || stem.rfind(id, 0) != 0) continue;
    ASSERT_TRUE((*records)->Put(stem, "damaged", absl::Minutes(5)).ok());
    ++damaged;
  }
  ASSERT_GT(damaged, 0);
  // Another server on the store: nothing of the record in its memory.
  server_ = StartFront(o, dir_, taylor_);
  ASSERT_NE(server_, nullptr);
  const Reply never_get = Call(*server_, "GET", std::string("/v1/responses/") + kNever, kBob);
  const Reply never_delete =
      Call(*server_, "DELETE", std::string("/v1/responses/") + kNever, kBob);
  const Reply never_next = Call(*server_, "POST", "/v1/responses", kBob, Ask(" a", kNever));
  ASSERT_EQ(never_get.status, 404);
  const Reply get = Call(*server_, "GET", "/v1/responses/" + id, kBob);
  const Reply del = Call(*server_, "DELETE", "/v1/responses/" + id, kBob);
  const Reply next = Call(*server_, "POST", "/v1/responses", kBob, Ask(" a", id));
  EXPECT_EQ(get.status, 404);
  EXPECT_EQ(Named(get, id, kNever), never_get.body.dump());
  EXPECT_EQ(del.status, 404);
  EXPECT_EQ(Named(del, id, kNever), never_delete.body.dump());
  EXPECT_EQ(next.status, 404);
  EXPECT_EQ(Named(next, id, kNever), never_next.body.dump());
}

// A record of the first version, keyed by the response id alone (its tenant inside),
// is still read, by its tenant only.
TEST_F(StoredResponsesTest, ARecordOfTheFirstVersionIsStillItsTenants) {
  config::ServerOptions o;
  o.session_store = "dir:" + dir_ + "/store";
  server_ = StartFront(o, dir_, taylor_);
  ASSERT_NE(server_, nullptr);
  const Reply made = Call(*server_, "POST", "/v1/responses", kAlice, Ask("Once upon"));
  ASSERT_EQ(made.status, 200) << made.body;
  const std::string id = made.body["id"];
  auto records = store::OpenSnapshotStore(o.session_store);
  ASSERT_TRUE(records.ok());
  auto bytes = (*records)->Get(store::ResponseKey("alice", id));
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  const std::string old_id = "resp_00000000000000000000000000000001";
  ASSERT_TRUE((*records)->Put(old_id, *bytes, absl::Minutes(5)).ok());
  const Reply mine = Call(*server_, "GET", "/v1/responses/" + old_id, kAlice);
  EXPECT_EQ(mine.status, 200) << mine.body;
  EXPECT_EQ(mine.body["id"], id);
  EXPECT_EQ(Call(*server_, "GET", "/v1/responses/" + old_id, kBob).status, 404);
  EXPECT_EQ(Call(*server_, "DELETE", "/v1/responses/" + old_id, kBob).status, 404);
  EXPECT_EQ(Call(*server_, "POST", "/v1/responses", kAlice, Ask(" a", old_id)).status, 200);
  EXPECT_EQ(Call(*server_, "DELETE", "/v1/responses/" + old_id, kAlice).status, 200);
  EXPECT_FALSE((*records)->Get(old_id).ok());
}

TEST_F(StoredResponsesTest, AnotherTenantsChatsNeverEvictAStoredResponse) {
  config::ServerOptions o;  // memory store: memory is all there is
  o.checkpoint_memory_bytes = 1 << 20;
  server_ = StartFront(o, dir_, taylor_);
  ASSERT_NE(server_, nullptr);
  const Reply mine = Call(*server_, "POST", "/v1/responses", kAlice, Ask("Once upon"));
  ASSERT_EQ(mine.status, 200) << mine.body;
  const int64_t state_bytes = mine.body["session"]["state_bytes"];
  ASSERT_GT(state_bytes, 0);
  // Enough kept chat states to fill the memory three times over.
  const int64_t chats = 3 * o.checkpoint_memory_bytes / state_bytes + 2;
  int kept = 0;
  for (int64_t i = 0; i < chats; ++i) {
    const json chat = {{"model", "tiny-taylor"},
                       {"messages", {{{"role", "user"}, {"content", "chat " + std::to_string(i)}}}},
                       {"max_tokens", 2},
                       {"temperature", 0}};
    kept += Call(*server_, "POST", "/v1/chat/completions", kBob, chat).status == 200;
  }
  EXPECT_EQ(kept, chats);
  const Reply next =
      Call(*server_, "POST", "/v1/responses", kAlice, Ask(" a time", mine.body["id"]));
  EXPECT_EQ(next.status, 200) << next.body;
  EXPECT_EQ(Call(*server_, "GET", "/v1/responses/" + mine.body["id"].get<std::string>(), kAlice)
                .status,
            200);
}

}  // namespace
}  // namespace attnserve::http
