#include "server/http/openai_request.h"

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/http/json_fields.h"
#include "server/http/request_gate.h"
#include "server/http/response_format.h"

namespace attnserve::http {
namespace {

using nlohmann::json;

absl::Status ReadPrompt(const json& body, v1::GenerateRequest* r) {
  const json* p = Field(body, "prompt");
  if (p == nullptr) return InvalidParam("prompt", "is required");
  if (p->is_string()) {
    r->set_text(p->get<std::string>());
    return absl::OkStatus();
  }
  if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) {
    r->set_text((*p)[0].get<std::string>());
    return absl::OkStatus();
  }
  if (p->is_array() && !p->empty() && (*p)[0].is_number_integer()) {
    for (const json& id : *p) {
      if (!id.is_number_integer()) return WrongType("prompt", "a list of token ids");
      r->mutable_tokens()->add_ids(ClampToInt32(id.get<int64_t>()));
    }
    return absl::OkStatus();
  }
  return InvalidParam("prompt",
                      "must be a string, a list of one string, or a list of token ids (one "
                      "prompt per request: n and batched prompts are not supported)");
}

absl::Status ReadMessages(const json& body, std::vector<ChatMessage>* out) {
  const json* m = Field(body, "messages");
  if (m == nullptr || !m->is_array() || m->empty()) {
    return InvalidParam("messages", "must be a non-empty list of messages");
  }
  return ReadMessageList(*m, "messages", out);
}

absl::Status ReadStop(const json& body, v1::SamplingParams* sampling) {
  const json* stop = Field(body, "stop");
  if (stop == nullptr) return absl::OkStatus();
  if (stop->is_string()) {
    sampling->add_stop(stop->get<std::string>());
    return absl::OkStatus();
  }
  if (!stop->is_array()) return WrongType("stop", "a string or a list of strings");
  for (const json& s : *stop) {
    if (!s.is_string()) return WrongType("stop", "a string or a list of strings");
    sampling->add_stop(s.get<std::string>());
  }
  return absl::OkStatus();
}

// logprobs: completions take an integer (that many alternatives per token), chat a
// boolean with top_logprobs beside it.
absl::Status ReadLogprobs(Route route, const json& body, v1::GenerateRequest* r) {
  if (route == Route::kCompletions) {
    std::optional<int64_t> n;
    if (absl::Status s = ReadInt(body, "logprobs", &n); !s.ok()) return s;
    if (n.has_value()) {
      r->set_logprobs(true);
      r->set_top_logprobs(ClampToInt32(*n));
    }
    return absl::OkStatus();
  }
  bool logprobs = false;
  if (absl::Status s = ReadBool(body, "logprobs", &logprobs); !s.ok()) return s;
  std::optional<int64_t> top;
  if (absl::Status s = ReadInt(body, "top_logprobs", &top); !s.ok()) return s;
  r->set_logprobs(logprobs);
  if (top.has_value()) r->set_top_logprobs(ClampToInt32(*top));
  return absl::OkStatus();
}

absl::Status ReadSampling(const json& body, uint64_t random_seed, v1::SamplingParams* s) {
  std::optional<double> temperature, top_p;
  std::optional<int64_t> max_tokens, max_completion_tokens, seed, top_k;
  for (absl::Status st :
       {ReadNumber(body, "temperature", &temperature), ReadNumber(body, "top_p", &top_p),
        ReadInt(body, "max_tokens", &max_tokens),
        ReadInt(body, "max_completion_tokens", &max_completion_tokens),
        ReadInt(body, "seed", &seed), ReadInt(body, "top_k", &top_k)}) {
    if (!st.ok()) return st;
  }
  // OpenAI's defaults: temperature 1, top_p 1.
  s->set_temperature(float(temperature.value_or(1.0)));
  s->set_top_p(float(top_p.value_or(1.0)));
  if (top_k.has_value()) s->set_top_k(ClampToInt32(*top_k));
  // max_completion_tokens is the newer name; it wins when both are given.
  if (max_completion_tokens.has_value()) {
    s->set_max_tokens(ClampToInt32(*max_completion_tokens));
  } else if (max_tokens.has_value()) {
    s->set_max_tokens(ClampToInt32(*max_tokens));
  }
  // 0 asks for the server's default in v1::SamplingParams, which OpenAI's 0 does not mean.
  if ((max_completion_tokens.value_or(1) <= 0) || (max_tokens.value_or(1) <= 0)) {
    return InvalidParam(max_completion_tokens ? "max_completion_tokens" : "max_tokens",
                        "must be at least 1");
  }
  s->set_seed(seed.has_value() ? uint64_t(*seed) : random_seed);
  bool ignore_eos = false;  // vLLM's extension: never stop at end-of-sequence
  if (absl::Status st = ReadBool(body, "ignore_eos", &ignore_eos); !st.ok()) return st;
  s->set_ignore_eos(ignore_eos);
  return ReadStop(body, s);
}

}  // namespace

absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(Route route, const std::string& body_text,
                                                 uint64_t random_seed) {
  auto parsed = ParseRequestBody(
      body_text, route == Route::kChat ? RequestKind::kChat : RequestKind::kCompletions);
  if (!parsed.ok()) return parsed.status();
  const json& body = *parsed;
  OpenAiRequest out;
  out.route = route;
  if (const json* model = Field(body, "model")) {
    if (!model->is_string()) return WrongType("model", "a string");
    out.generate.set_model(model->get<std::string>());
  }
  std::optional<int64_t> n;
  if (absl::Status s = ReadInt(body, "n", &n); !s.ok()) return s;
  if (n.has_value() && *n != 1) return InvalidParam("n", "only n=1 is supported");
  if (absl::Status s = ReadBool(body, "stream", &out.stream); !s.ok()) return s;
  if (const json* options = Field(body, "stream_options")) {
    if (!options->is_object()) return WrongType("stream_options", "an object");
    if (absl::Status s = ReadBool(*options, "include_usage", &out.include_usage); !s.ok()) {
      return InvalidParam("stream_options.include_usage", "must be true or false");
    }
  }
  absl::Status read = route == Route::kChat ? ReadMessages(body, &out.messages)
                                            : ReadPrompt(body, &out.generate);
  if (!read.ok()) return read;
  if (absl::Status s = ReadSampling(body, random_seed, out.generate.mutable_sampling()); !s.ok()) {
    return s;
  }
  if (absl::Status s = ReadLogprobs(route, body, &out.generate); !s.ok()) return s;
  if (absl::Status s = ReadResponseFormat(body, body_text, out.generate.mutable_sampling()); !s.ok()) {
    return s;
  }
  if (route == Route::kChat) {
    if (absl::Status s = ReadChatTools(body, body_text, &out.tools); !s.ok()) return s;
  }
  if (absl::Status s = CheckStopWithConstraint(out.generate.sampling(), out.tools); !s.ok()) {
    return s;
  }
  out.stop.assign(out.generate.sampling().stop().begin(), out.generate.sampling().stop().end());
  return out;
}

}  // namespace attnserve::http
