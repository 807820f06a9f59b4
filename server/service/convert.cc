#include "server/service/convert.h"

#include <google/protobuf/text_format.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/model/tokenizer.h"

namespace attnserve::service {
namespace {

absl::Status Invalid(const std::string& message) {
  return absl::InvalidArgumentError(message);
}

// Hex text ("0a0d") -> bytes.
absl::StatusOr<std::string> DecodeHex(const std::string& hex, int index) {
  const bool ok = hex.size() % 2 == 0 &&
                  hex.find_first_not_of("0123456789abcdefABCDEF") == std::string::npos;
  if (!ok) {
    return Invalid(absl::StrCat("sampling.stop[", index, "]: '", hex,
                                "' is not hex (two digits per byte) as stop_encoding "
                                "STOP_ENCODING_HEX requires"));
  }
  return absl::HexStringToBytes(hex);
}

absl::Status ParseSampling(const v1::SamplingParams& s, const RequestLimits& limits,
                           scheduler::TurnRequest& turn) {
  if (!(s.temperature() >= 0)) {
    return Invalid(absl::StrCat("sampling.temperature must be >= 0 (0 is greedy), got ",
                                s.temperature()));
  }
  if (s.top_k() < 0) {
    return Invalid(absl::StrCat("sampling.top_k must be >= 0 (0 keeps every token), got ",
                                s.top_k()));
  }
  if (!(s.top_p() >= 0 && s.top_p() <= 1)) {
    return Invalid(absl::StrCat("sampling.top_p must be in (0, 1] (0 means 1), got ",
                                s.top_p()));
  }
  if (s.max_tokens() < 0 || s.max_tokens() > limits.max_generated_tokens) {
    return Invalid(absl::StrCat("sampling.max_tokens must be in [0, ",
                                limits.max_generated_tokens, "] (0 means the default of ",
                                limits.default_max_tokens, "), got ", s.max_tokens()));
  }
  turn.sampling.temperature = s.temperature();
  turn.sampling.top_k = s.top_k();
  turn.sampling.top_p = s.top_p() == 0 ? 1.0f : s.top_p();
  turn.sampling.seed = s.seed();
  turn.ignore_eos = s.ignore_eos();
  turn.max_tokens = s.max_tokens() == 0 ? limits.default_max_tokens : s.max_tokens();
  for (int i = 0; i < s.stop_size(); ++i) {
    switch (s.stop_encoding()) {
      case v1::STOP_ENCODING_UTF8:
        turn.stop.push_back(s.stop(i));
        break;
      case v1::STOP_ENCODING_HEX: {
        auto bytes = DecodeHex(s.stop(i), i);
        if (!bytes.ok()) return bytes.status();
        turn.stop.push_back(*std::move(bytes));
        break;
      }
      default:
        return Invalid(absl::StrCat("sampling.stop_encoding: unknown value ",
                                    int(s.stop_encoding()),
                                    "; valid: STOP_ENCODING_UTF8 (0), STOP_ENCODING_HEX (1)"));
    }
    if (turn.stop.back().empty()) {
      return Invalid(absl::StrCat("sampling.stop[", i, "] is empty"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

ModelSet::ModelSet(std::vector<std::shared_ptr<const session::ServedModel>> models)
    : models_(std::move(models)) {}

absl::StatusOr<std::shared_ptr<const session::ServedModel>> ModelSet::Find(
    const std::string& name) const {
  if (name.empty() && !models_.empty()) return models_.front();
  std::vector<std::string> names;
  for (const auto& m : models_) {
    if (m->name == name) return m;
    names.push_back(m->name);
  }
  return absl::NotFoundError(absl::StrCat("model: no model '", name,
                                          "'; served: ", absl::StrJoin(names, ", ")));
}

absl::StatusOr<ParsedGenerate> ParseGenerate(const v1::GenerateRequest& r,
                                             const ModelSet& models,
                                             const RequestLimits& limits) {
  ParsedGenerate out;
  out.session_id = r.session_id();
  out.model_name = r.model();
  if (r.session_id().empty()) {
    auto model = models.Find(r.model());
    if (!model.ok()) return model.status();
    out.model = *model;
  }
  switch (r.prompt_case()) {
    case v1::GenerateRequest::kText:
      out.turn.prompt = model::Encode(r.text());
      break;
    case v1::GenerateRequest::kTokens:
      out.turn.prompt.assign(r.tokens().ids().begin(), r.tokens().ids().end());
      break;
    default:
      break;
  }
  if (out.turn.prompt.empty() && r.session_id().empty()) {
    return Invalid("prompt: empty; a request without session_id needs text or tokens");
  }
  if (int(out.turn.prompt.size()) > limits.max_prompt_tokens) {
    return Invalid(absl::StrCat("prompt: ", out.turn.prompt.size(),
                                " tokens is over the server's limit of ",
                                limits.max_prompt_tokens));
  }
  if (absl::Status s = ParseSampling(r.sampling(), limits, out.turn); !s.ok()) return s;
  out.turn.logprobs = r.logprobs();
  if (out.model) {
    if (absl::Status s = CheckPromptFits(out.turn, *out.model); !s.ok()) return s;
  }
  return out;
}

absl::Status CheckPromptFits(const scheduler::TurnRequest& turn,
                             const session::ServedModel& model) {
  const int vocab = model.model->config().vocab_size;
  for (size_t i = 0; i < turn.prompt.size(); ++i) {
    if (turn.prompt[i] < 0 || turn.prompt[i] >= vocab) {
      return Invalid(absl::StrCat("tokens.ids[", i, "]: ", turn.prompt[i],
                                  " is outside the vocabulary [0, ", vocab, ") of model '",
                                  model.name, "'"));
    }
  }
  return absl::OkStatus();
}

v1::Session ToProto(const session::SessionInfo& info) {
  v1::Session s;
  s.set_id(info.id);
  s.set_model(info.model);
  s.set_attention_module(info.attention);
  s.set_attention_order(info.attention_order);
  s.set_position(info.position);
  s.set_state_bytes(info.state_bytes);
  s.set_created_unix_ms(absl::ToUnixMillis(info.created));
  s.set_last_used_unix_ms(absl::ToUnixMillis(info.last_used));
  s.set_ttl_seconds(absl::ToInt64Seconds(info.ttl));
  s.set_busy(info.busy);
  return s;
}

v1::ModelInfo ToProto(const session::ServedModel& m) {
  v1::ModelInfo info;
  info.set_name(m.name);
  google::protobuf::TextFormat::ParseFromString(model::ModelConfigToText(m.model->config()),
                                                info.mutable_config());
  info.set_attention_module(m.attention());
  info.set_parameter_count(m.model->ParameterCount());
  info.set_state_bytes_per_session_at_1k(m.model->StateBytes(1024));
  info.set_state_bytes_per_session_at_16k(m.model->StateBytes(16384));
  info.set_break_even_context(m.model->BreakEvenContext());
  info.set_directory(m.directory);
  return info;
}

v1::FinishReason ToProto(scheduler::FinishReason reason) {
  switch (reason) {
    case scheduler::FinishReason::kStop: return v1::FINISH_REASON_STOP;
    case scheduler::FinishReason::kLength: return v1::FINISH_REASON_LENGTH;
    case scheduler::FinishReason::kCancelled: return v1::FINISH_REASON_CANCELLED;
    case scheduler::FinishReason::kError: return v1::FINISH_REASON_ERROR;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

}  // namespace attnserve::service
