// Conversations through the HTTP front of an in-process AttnServer (tiny byte-level
// model) over loopback: what a conversation's deletion and lifetime do to the responses
// it holds. Time passes for a `dir:` store by moving its files' expiries (their mtimes)
// back, never by sleeping.
#include <sys/stat.h>

#include <filesystem>

#include <gtest/gtest.h>
#include <httplib.h>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "server/service/server.h"
#include "tests/testing/tiny_model.h"

namespace attnserve::http {
namespace {

using nlohmann::json;

class ConversationsFrontTest : public testing::Test {
 protected:
  void StartServer(config::ServerOptions o) {
    server_.reset();
    o.listen_address = "127.0.0.1:0";
    o.http_listen = "127.0.0.1:0";
    o.metrics_address = "";
    auto s = service::AttnServer::Start(
        o, std::make_unique<catalogue::ModelCatalogue>(
               std::vector<std::shared_ptr<const catalogue::ServedModel>>{
                   test_util::TinyServedModel("taylor")}));
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(s).value();
  }

  httplib::Result Call(const std::string& method, const std::string& path,
                       const json& body = nullptr) const {
    httplib::Client c("127.0.0.1", server_->http_port());
    c.set_read_timeout(120);
    if (method == "GET") return c.Get(path.c_str());
    if (method == "DELETE") return c.Delete(path.c_str());
    return c.Post(path.c_str(), body.is_null() ? "" : body.dump(), "application/json");
  }
  // The JSON body of a call that must answer `status`.
  json Must(int status, const std::string& method, const std::string& path,
            const json& body = nullptr) const {
    auto r = Call(method, path, body);
    EXPECT_TRUE(r) << method << " " << path;
    if (!r) return nullptr;
    EXPECT_EQ(r->status, status) << method << " " << path << ": " << r->body;
    return json::parse(r->body, nullptr, false);
  }
  json NewConversation() { return Must(200, "POST", "/v1/conversations", json::object()); }
  // A short greedy response; `context` is {"conversation": id} or {"previous_response_id": id}.
  json Respond(json context, const std::string& input, int status = 200) {
    context["input"] = input;
    context["max_output_tokens"] = 4;
    context["temperature"] = 0;
    return Must(status, "POST", "/v1/responses", context);
  }
  // Every file of the dir: store `dir` now expires `d` sooner: as if `d` had passed.
  static void Age(const std::string& dir, absl::Duration d) {
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      if (!entry.is_regular_file()) continue;
      struct stat st;
      ASSERT_EQ(::stat(entry.path().c_str(), &st), 0);
      const absl::Time mtime = absl::TimeFromTimespec(st.st_mtim) - d;
      const timespec times[2] = {absl::ToTimespec(mtime), absl::ToTimespec(mtime)};
      ASSERT_EQ(::utimensat(AT_FDCWD, entry.path().c_str(), times, 0), 0);
    }
  }

  std::unique_ptr<service::AttnServer> server_;
};

TEST_F(ConversationsFrontTest, DeletingAConversationDeletesItsResponses) {
  StartServer(config::ServerOptions{});
  const std::string conv = NewConversation()["id"];
  const std::string r1 = Respond({{"conversation", conv}}, "Hello")["id"];
  const std::string r2 = Respond({{"conversation", conv}}, "Again")["id"];
  Must(200, "GET", "/v1/responses/" + r1);
  Must(200, "DELETE", "/v1/conversations/" + conv);
  for (const std::string& id : {r1, r2}) {
    Must(404, "GET", "/v1/responses/" + id);
    const json refused = Respond({{"previous_response_id", id}}, "More", 404);
    ASSERT_TRUE(refused.contains("error")) << refused;
    EXPECT_EQ(refused["error"]["param"], "previous_response_id") << refused;
  }
}

TEST_F(ConversationsFrontTest, AnOldAnswerStaysForkableWhileTheConversationLives) {
  const std::string dir = testing::TempDir() + "/conversations_front_ttl";
  std::filesystem::remove_all(dir);
  config::ServerOptions o;
  o.session_store = "dir:" + dir;
  o.conversation_ttl = absl::Hours(24 * 10);
  o.response_ttl = absl::Hours(24);
  StartServer(o);
  const std::string conv = NewConversation()["id"];
  Respond({{"conversation", conv}}, "Hello");
  const json first = Must(200, "GET", absl::StrCat("/v1/conversations/", conv, "/items?order=asc"));
  ASSERT_EQ(first["data"].size(), 2u) << first;
  const json answer = first["data"][1];  // the first answer, forked at the end
  // Each later turn comes before the conversation expires and renews it, further each
  // time than the first answer was ever stored for.
  for (int day : {8, 8, 9, 9}) {
    Age(dir, absl::Hours(24 * day));
    Respond({{"conversation", conv}}, "And then?");
  }
  Age(dir, absl::Hours(24 * 9));  // day 43: 9 days after the last turn
  Must(200, "GET", "/v1/responses/" + answer["response_id"].get<std::string>());
  const json fork = Must(200, "POST", absl::StrCat("/v1/conversations/", conv, "/fork"),
                         {{"item_id", answer["id"]}});
  ASSERT_TRUE(fork.contains("id")) << fork;
  Respond({{"conversation", fork["id"]}}, "Who spake?");
}

}  // namespace
}  // namespace attnserve::http
