// A tenant's quota of stored responses (--tenant_response_bytes) is asked, before a
// response's turn runs, for what the turn's record will add (its new KV rows for the
// prompt and all of max_output_tokens, the fixed parts, a page at most of slack): a turn
// that does not fit is a plain HTTP 429 naming the flag, never a 200 stream whose turn
// runs and then ends in an error event, in a previous_response_id chain as in a
// conversation. The scheduler's token counters show the refused turn never ran.
#include <gtest/gtest.h>
#include <httplib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "server/service/server.h"
#include "server/store/state_pages.h"
#include "tests/http/responses_testing.h"

namespace attnserve::http {
namespace {

using nlohmann::json;
using namespace testing;  // NOLINT: the fixture's helpers

// A softmax model whose state grows by a few KiB per token (4 layers of 4 KV heads of
// 32 keys and 32 values, fp32: 4,096 bytes), so that a turn's tokens, not the slack of
// one page, decide whether its record fits the quota below.
std::shared_ptr<const catalogue::ServedModel> GrowingModel() {
  model::ModelConfig c;
  c.name = "quota-softmax";
  c.vocab_size = model::ModelConfig{}.vocab_size;
  c.dim = 128;
  c.num_layers = 4;
  c.mlp_hidden = 128;
  c.max_context = 1 << 16;
  c.attention.module = "softmax";
  c.attention.num_heads = 4;
  c.attention.num_kv_heads = 4;
  c.attention.head_dim = 32;
  c.attention.value_dim = 32;
  c.attention.kv_cache_type = attention::KvCacheType::kF32;
  auto m = model::Model::Create(c, 5);
  EXPECT_TRUE(m.ok()) << m.status();
  return std::make_shared<catalogue::ServedModel>(catalogue::ServedModel{
      c.name, "", std::move(m).value(), {}, std::make_shared<tokenizer::ByteTokenizer>()});
}

constexpr int64_t kQuota = int64_t{4} << 20;
constexpr int kSmallOutput = 3;
constexpr int kLargeOutput = 2048;  // the default --max_generated_tokens

class ResponsesQuotaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // What the quota must hold apart: two short turns (under 128 tokens each, the chat
    // template's included) and a page of slack fit in it, one turn asking for
    // kLargeOutput tokens does not.
    const int64_t per_token = model_->model->StateBytes(1) - model_->model->StateBytes(0);
    ASSERT_GT(kLargeOutput * per_token, kQuota);
    ASSERT_LT(2 * 128 * per_token + store::kPageTargetBytes + (256 << 10), kQuota);
    const std::string keys = dir_ + "/keys.txt";
    std::ofstream(keys) << kAlice << " alice\n" << kBob << " bob\n";
    config::ServerOptions o;  // memory store
    o.api_keys_file = keys;
    o.tenant_response_bytes = kQuota;
    o.listen_address = "127.0.0.1:0";
    o.http_listen = "127.0.0.1:0";
    o.metrics_address = "127.0.0.1:0";
    o.threads = 1;
    auto s = service::AttnServer::Start(
        o, std::make_unique<catalogue::ModelCatalogue>(
               std::vector<std::shared_ptr<const catalogue::ServedModel>>{model_}));
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(s).value();
  }
  void TearDown() override {
    server_.reset();
    std::filesystem::remove_all(dir_);
  }

  // The sum of the metric family `name`'s samples on the metrics endpoint.
  int64_t Counter(const std::string& name) const {
    httplib::Client c("127.0.0.1", server_->metrics_port());
    httplib::Result r = c.Get("/metrics");
    EXPECT_TRUE(r && r->status == 200);
    if (!r) return -1;
    double sum = 0;
    for (absl::string_view line : absl::StrSplit(r->body, '\n')) {
      if (line.rfind(name, 0) != 0 || line.size() <= name.size()) continue;
      if (line[name.size()] != '{' && line[name.size()] != ' ') continue;
      double v = 0;
      if (absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &v)) sum += v;
    }
    return int64_t(sum);
  }
  int64_t TokensRun() const {
    return Counter("attnserve_prompt_tokens_total") + Counter("attnserve_generated_tokens_total");
  }

  // A streamed greedy turn, as a raw reply: its status, content type and body.
  httplib::Result Stream(const std::string& key, json body) const {
    body["model"] = "quota-softmax";
    body["temperature"] = 0;
    body["stream"] = true;
    httplib::Client c("127.0.0.1", server_->http_port());
    c.set_read_timeout(120);
    return c.Post("/v1/responses", {{"Authorization", "Bearer " + key}}, body.dump(),
                  "application/json");
  }

  // A refusal as the quota's: a plain 429 JSON body naming the flag, not a stream.
  static void ExpectQuotaRefusal(const httplib::Result& r) {
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 429) << r->body;
    EXPECT_EQ(r->get_header_value("Content-Type").rfind("application/json", 0), 0u)
        << r->get_header_value("Content-Type");
    const json body = json::parse(r->body, nullptr, false);
    ASSERT_TRUE(body.is_object()) << r->body;
    EXPECT_EQ(body["error"]["code"], "rate_limit_exceeded");
    EXPECT_NE(body["error"]["message"].get<std::string>().find("--tenant_response_bytes"),
              std::string::npos)
        << body;
  }

  // A stream that ran its turn and stored it: it ends in the response (completed, or
  // incomplete at max_output_tokens), with no error event.
  static void ExpectServed(const httplib::Result& r) {
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    const bool ended = r->body.find("event: response.completed") != std::string::npos ||
                       r->body.find("event: response.incomplete") != std::string::npos;
    EXPECT_TRUE(ended) << r->body;
    EXPECT_EQ(r->body.find("event: error"), std::string::npos) << r->body;
  }

  const std::string dir_ = TestDir("responses_quota");
  std::shared_ptr<const catalogue::ServedModel> model_ = GrowingModel();
  std::unique_ptr<service::AttnServer> server_;
};

TEST_F(ResponsesQuotaTest, AChainTurnPastTheQuotaIsRefusedBeforeItRuns) {
  const Reply first = Call(*server_, "POST", "/v1/responses", kAlice,
                           {{"model", "quota-softmax"}, {"input", "Once upon"},
                            {"max_output_tokens", kSmallOutput}, {"temperature", 0}});
  ASSERT_EQ(first.status, 200) << first.body;
  const std::string id = first.body["id"];
  const int64_t ran = TokensRun();
  ASSERT_GT(ran, 0);

  // Its state after this turn would be over the quota: refused as it arrives.
  const httplib::Result refused = Stream(
      kAlice, {{"input", " a time"}, {"previous_response_id", id},
               {"max_output_tokens", kLargeOutput}});
  ExpectQuotaRefusal(refused);
  EXPECT_EQ(TokensRun(), ran) << "the refused turn ran";

  // The chain goes on from the same response with a turn that fits.
  const httplib::Result next = Stream(
      kAlice, {{"input", " a time"}, {"previous_response_id", id},
               {"max_output_tokens", kSmallOutput}});
  ExpectServed(next);
}

TEST_F(ResponsesQuotaTest, AConversationTurnPastTheQuotaIsRefusedBeforeItRuns) {
  const Reply conversation =
      Call(*server_, "POST", "/v1/conversations", kBob, json::object());
  ASSERT_EQ(conversation.status, 200) << conversation.body;
  const std::string id = conversation.body["id"];
  const Reply first = Call(*server_, "POST", "/v1/responses", kBob,
                           {{"model", "quota-softmax"}, {"conversation", id},
                            {"input", "Once upon"}, {"max_output_tokens", kSmallOutput},
                            {"temperature", 0}});
  ASSERT_EQ(first.status, 200) << first.body;
  const Reply items = Call(*server_, "GET", "/v1/conversations/" + id + "/items", kBob);
  ASSERT_EQ(items.status, 200) << items.body;
  const int64_t ran = TokensRun();

  const httplib::Result refused =
      Stream(kBob, {{"conversation", id}, {"input", " a time"},
                    {"max_output_tokens", kLargeOutput}});
  ExpectQuotaRefusal(refused);
  EXPECT_EQ(TokensRun(), ran) << "the refused turn ran";
  // Nothing of the refused turn is in the conversation, and it is not left held.
  const Reply after = Call(*server_, "GET", "/v1/conversations/" + id + "/items", kBob);
  EXPECT_EQ(after.body["data"], items.body["data"]);
  const httplib::Result next = Stream(
      kBob, {{"conversation", id}, {"input", " a time"}, {"max_output_tokens", kSmallOutput}});
  ExpectServed(next);
}

}  // namespace
}  // namespace attnserve::http
