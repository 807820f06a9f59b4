// libFuzzer target over the HTTP front's request decoders (server/http): arbitrary bytes
// as the body of a completions, chat, responses, conversation-create or fork request.
// The first byte picks the decoder, the rest is the body; tests/fuzz/corpus/request_fuzz/
// holds seeds in this format.
//
// Besides "no crash, no sanitizer report" (a body nested 100,000 deep used to overflow
// the stack), it checks what the gate (request_gate.h) promises: an accepted body is
// within every count limit, a refusal is INVALID_ARGUMENT with a short message, and an
// accepted chat renders through every chat template without failing on its size.
#include <cstddef>
#include <cstdint>
#include <string>

#include "nlohmann/json.hpp"
#include "server/http/chat_template.h"
#include "server/http/conversations_api.h"
#include "server/http/openai_request.h"
#include "server/http/request_gate.h"
#include "server/http/responses_api.h"
#include "tests/fuzz/fuzz_check.h"

namespace attnserve::fuzz {
namespace {

using http::RequestShapeLimits;

// Longest error message any decoder may produce, whatever the input.
constexpr size_t kMaxMessageBytes = 1024;

void CheckRefusal(const absl::Status& s, const char* what) {
  if (s.ok()) return;
  FUZZ_CHECK(s.code() == absl::StatusCode::kInvalidArgument, "%s: %s", what,
             s.ToString().c_str());
  FUZZ_CHECK(s.message().size() <= kMaxMessageBytes, "%s: a %zu-byte error message: %.200s",
             what, s.message().size(), std::string(s.message()).c_str());
}

void CheckMessages(const std::vector<http::ChatMessage>& messages, const char* what) {
  FUZZ_CHECK(messages.size() <= RequestShapeLimits::kMaxMessages + 1, "%s: %zu messages", what,
             messages.size());
  for (http::ChatTemplateKind kind : {http::ChatTemplateKind::kPlain,
                                      http::ChatTemplateKind::kChatml,
                                      http::ChatTemplateKind::kLlama2}) {
    (void)http::RenderChat(kind, messages);  // may refuse a role order; must not crash
    (void)http::AssistantTurnEnds(kind, messages, 4);
  }
}

// An accepted json_schema format reaches admission as JSON text (response_format.h takes
// it from the body's text a second time, to keep the members' order).
void CheckSchemaText(const v1::SamplingParams& sampling, const char* what) {
  if (sampling.constraint().kind_case() != v1::Constraint::kJsonSchema) return;
  const auto schema = nlohmann::ordered_json::parse(sampling.constraint().json_schema(), nullptr,
                                                    /*allow_exceptions=*/false);
  FUZZ_CHECK(!schema.is_discarded() && (schema.is_object() || schema.is_boolean()),
             "%s: schema text %.200s", what, sampling.constraint().json_schema().c_str());
}

void Run(uint8_t selector, const std::string& body) {
  switch (selector % 5) {
    case 0:
    case 1: {
      const auto route = selector % 5 == 0 ? http::Route::kCompletions : http::Route::kChat;
      auto r = http::ParseOpenAiRequest(route, body, 1);
      CheckRefusal(r.status(), "openai request");
      if (!r.ok()) return;
      CheckMessages(r->messages, "chat");
      FUZZ_CHECK(size_t(r->generate.sampling().stop_size()) <= RequestShapeLimits::kMaxStopStrings,
                 "%d stop strings accepted", r->generate.sampling().stop_size());
      CheckSchemaText(r->generate.sampling(), "response_format");
      return;
    }
    case 2: {
      auto r = http::ParseResponsesRequest(body, 1);
      CheckRefusal(r.status(), "responses request");
      if (!r.ok()) return;
      CheckMessages(r->input, "responses");
      FUZZ_CHECK(r->metadata.size() <= RequestShapeLimits::kMaxMetadataKeys,
                 "%zu metadata keys accepted", r->metadata.size());
      (void)r->metadata.dump();  // what a stored response does with it
      CheckSchemaText(r->generate.sampling(), "text.format");
      return;
    }
    case 3: {
      auto r = http::ParseConversationCreate(body);
      CheckRefusal(r.status(), "conversation create");
      if (r.ok()) CheckMessages(r->items, "conversation items");
      return;
    }
    default:
      CheckRefusal(http::ParseForkRequest(body).status(), "fork request");
  }
}

}  // namespace
}  // namespace attnserve::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  attnserve::fuzz::Run(data[0], std::string(reinterpret_cast<const char*>(data) + 1, size - 1));
  return 0;
}
