// The prefix cache (prefix_cache.h) across servers sharing one store: a kept chat state
// is found by the model it belongs to (its weights), not by the model's name, so a
// replica on other weights of the same name (a rolling upgrade, a --weights_bf16
// replica) misses instead of failing.
#include <gtest/gtest.h>

#include <filesystem>

#include "tests/http/responses_testing.h"

namespace attnserve::http {
namespace {

using nlohmann::json;
using namespace testing;  // NOLINT: the fixture's helpers

json Chat(const json& messages) {
  return {{"messages", messages}, {"max_tokens", 8}, {"temperature", 0}};
}

// A shipped model (trained on text, so its greedy answers are text that a client can
// send back), with its weights as trained or as bf16 copies: another fingerprint.
std::unique_ptr<catalogue::ModelCatalogue> Shipped(bool bf16) {
  model::LoadOptions load;
  load.weights_bf16 = bf16;
  auto models = catalogue::ModelCatalogue::Load({ATTNSERVE_MODELS_DIR "/kjv-softmax"}, load);
  EXPECT_TRUE(models.ok()) << models.status();
  return models.ok() ? *std::move(models) : nullptr;
}

TEST(PrefixCacheTest, AReplicaOnOtherWeightsOfTheSameNameMisses) {
  const std::string dir = TestDir("prefix_cache");
  config::ServerOptions o;
  o.session_store = "dir:" + dir + "/store";
  auto old_server = StartFront(o, dir, Shipped(/*bf16=*/false), /*keys=*/false);
  auto new_server = StartFront(o, dir, Shipped(/*bf16=*/true), /*keys=*/false);
  ASSERT_NE(old_server, nullptr);
  ASSERT_NE(new_server, nullptr);
  json messages = {{{"role", "user"}, {"content", "And God said"}}};
  const Reply first = Call(*old_server, "POST", "/v1/chat/completions", "", Chat(messages));
  ASSERT_EQ(first.status, 200) << first.body;
  messages.push_back({{"role", "assistant"},
                      {"content", first.body["choices"][0]["message"]["content"]}});
  messages.push_back({{"role", "user"}, {"content", "And the earth"}});
  const Reply elsewhere = Call(*new_server, "POST", "/v1/chat/completions", "", Chat(messages));
  ASSERT_EQ(elsewhere.status, 200) << elsewhere.body;
  EXPECT_EQ(elsewhere.body["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  // The same history on the old weights still hits (the test can see a hit).
  const Reply again = Call(*old_server, "POST", "/v1/chat/completions", "", Chat(messages));
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_GT(again.body["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  old_server.reset();
  new_server.reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace attnserve::http
