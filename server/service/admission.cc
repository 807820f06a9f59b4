#include "server/service/admission.h"

#include <algorithm>

#include "absl/strings/cord.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "server/common/excerpt.h"
#include "server/scheduler/vocabularies.h"
#include "server/service/constraints.h"

namespace attnserve::service {
namespace {

absl::Status Invalid(const std::string& message) {
  return absl::InvalidArgumentError(message);
}

// A constrained turn's first mask, computed here on the admitting thread over the model's
// vocabulary (built here too, once per tokenizer), within a sampling step's budget: the
// engine thread then finds it in the grammar's mask cache. A mask past its budget is a
// 400 naming the constraint (a schema the server refuses). A lazy constraint (tool
// choice auto) waits for its trigger, and a SentencePiece text's first piece is checked
// id by id: both are left to the step, which is bounded the same way.
absl::Status WarmFirstMask(const v1::Constraint& request, const grammar::Constraint& constraint,
                           const catalogue::ServedModel& model) {
  if (!constraint.trigger.empty()) return absl::OkStatus();
  const auto vocabulary = scheduler::SharedVocabulary(model.tokenizer);
  grammar::Matcher start(constraint.grammar);
  grammar::Work work;
  absl::StatusOr<std::shared_ptr<const grammar::TokenMask>> mask = vocabulary->Mask(start, work);
  if (mask.ok()) return absl::OkStatus();
  const char* kind = ConstraintKindName(request);
  absl::Status refused = Invalid(absl::StrCat("sampling.constraint.", kind,
                                              ": the first token mask over the model's ",
                                              vocabulary->size(), " ids: ", mask.status().message()));
  refused.SetPayload(kConstraintErrorPayload, absl::Cord(kind));
  return refused;
}

// Hex text ("0a0d") -> bytes.
absl::StatusOr<std::string> DecodeHex(const std::string& hex, int index) {
  const bool ok = hex.size() % 2 == 0 &&
                  hex.find_first_not_of("0123456789abcdefABCDEF") == std::string::npos;
  if (!ok) {
    return Invalid(absl::StrCat("sampling.stop[", index, "]: '", Excerpt(hex),
                                "' is not hex (two digits per byte) as stop_encoding "
                                "STOP_ENCODING_HEX requires"));
  }
  return absl::HexStringToBytes(hex);
}

absl::Status ParseSampling(const v1::SamplingParams& s, const RequestLimits& limits,
                           scheduler::TurnRequest& turn) {
  if (s.max_tokens() < 0 || s.max_tokens() > limits.max_generated_tokens) {
    return Invalid(absl::StrCat("sampling.max_tokens must be in [0, ",
                                limits.max_generated_tokens, "] (0 means the default of ",
                                limits.default_max_tokens, "), got ", s.max_tokens()));
  }
  turn.sampling.temperature = s.temperature();
  turn.sampling.top_k = s.top_k();
  turn.sampling.top_p = s.top_p() == 0 ? 1.0f : s.top_p();
  turn.sampling.seed = s.seed();
  if (absl::Status st = model::ValidateSamplingParams(turn.sampling); !st.ok()) return st;
  turn.ignore_eos = s.ignore_eos();
  turn.max_tokens = s.max_tokens() == 0 ? limits.default_max_tokens : s.max_tokens();
  if (s.stop_size() > limits.max_stop_strings) {
    return Invalid(absl::StrCat("sampling.stop: ", s.stop_size(),
                                " stop strings is over the server's limit of ",
                                limits.max_stop_strings));
  }
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
    if (int64_t(turn.stop.back().size()) > limits.max_stop_bytes) {
      return Invalid(absl::StrCat("sampling.stop[", i, "]: ", turn.stop.back().size(),
                                  " bytes is over the server's limit of ",
                                  limits.max_stop_bytes));
    }
  }
  return absl::OkStatus();
}

}  // namespace

int MaxRequestMessageBytes(const RequestLimits& limits) {
  const int64_t prompt = int64_t{5} * limits.max_prompt_tokens;
  const int64_t chunk = int64_t{1} << 20;
  return int(std::min<int64_t>(std::max(prompt, chunk) + 64 * 1024, int64_t{1} << 30));
}

absl::StatusOr<ParsedGenerate> ParseGenerate(const v1::GenerateRequest& r,
                                             const catalogue::ModelCatalogue& models,
                                             const RequestLimits& limits) {
  ParsedGenerate out;
  out.session_id = r.session_id();
  out.model_name = r.model();
  if (r.session_id().empty()) {
    auto model = models.Find(r.model());
    if (!model.ok()) return model.status();
    out.model = *model;
  }
  // Sizes first, before tokenizing anything (a text's byte count bounds its tokens, BOS
  // and a dummy-prefix piece aside).
  const size_t size = r.prompt_case() == v1::GenerateRequest::kText ? r.text().size()
                      : r.prompt_case() == v1::GenerateRequest::kTokens
                          ? size_t(r.tokens().ids_size())
                          : 0;
  if (absl::Status s = CheckPromptSize(size, limits); !s.ok()) return s;
  switch (r.prompt_case()) {
    case v1::GenerateRequest::kText:
      // Without a session the turn starts a fresh one (position 0); a session's text is
      // encoded once it is claimed (CheckTurnFits), as its continuation if it has tokens.
      if (out.model) {
        if (absl::Status s = EncodePrompt(r.text(), *out.model, 0, out.turn); !s.ok()) return s;
      } else {
        out.text = r.text();
      }
      break;
    case v1::GenerateRequest::kTokens:
      out.turn.prompt.assign(r.tokens().ids().begin(), r.tokens().ids().end());
      break;
    default:
      break;
  }
  if (out.turn.prompt.empty() && !out.text && r.session_id().empty()) {
    return Invalid("prompt: empty; a request without session_id needs text or tokens");
  }
  if (absl::Status s = ParseSampling(r.sampling(), limits, out.turn); !s.ok()) return s;
  out.turn.logprobs = r.logprobs();
  if (r.top_logprobs() < 0 || r.top_logprobs() > kMaxTopLogprobs) {
    return Invalid(absl::StrCat("top_logprobs must be in [0, ", kMaxTopLogprobs,
                                "], got ", r.top_logprobs()));
  }
  if (r.top_logprobs() > 0 && !r.logprobs()) {
    return Invalid(absl::StrCat("top_logprobs: ", r.top_logprobs(),
                                " alternatives need logprobs set as well"));
  }
  out.turn.top_logprobs = r.top_logprobs();
  // Last: compiling a schema is the costliest check (a repeated one is a cache lookup).
  if (r.sampling().constraint().kind_case() != v1::Constraint::KIND_NOT_SET) {
    const v1::Constraint& c = r.sampling().constraint();
    const bool lazy = c.kind_case() == v1::Constraint::kToolCalls &&
                      c.tool_calls().choice() == v1::ToolCallConstraint::CHOICE_AUTO;
    if (r.sampling().stop_size() > 0 && !lazy) {
      return Invalid(absl::StrCat(
          "sampling.stop: stop strings cannot be used with sampling.constraint.",
          ConstraintKindName(c),
          " (it applies from the answer's first byte: a stop string would cut the "
          "constrained answer while it reported it complete)"));
    }
    auto constraint = SharedConstraintCache().Get(r.sampling().constraint());
    if (!constraint.ok()) return constraint.status();
    out.turn.constraint = *std::move(constraint);
    if (out.model) {
      if (absl::Status s = WarmFirstMask(r.sampling().constraint(), *out.turn.constraint, *out.model); !s.ok()) return s;
    }
  }
  if (out.model) {
    if (absl::Status s = CheckPromptFits(out.turn, *out.model); !s.ok()) return s;
  }
  return out;
}

absl::Status EncodePrompt(const std::string& text, const catalogue::ServedModel& model,
                          int64_t position, scheduler::TurnRequest& turn) {
  auto ids = model.tokenizer->Encode(text, /*continuation=*/position > 0);
  if (!ids.ok()) return ids.status();
  turn.prompt = *std::move(ids);
  return absl::OkStatus();
}

bool IsPromptOverLimit(const absl::Status& status) {
  return status.GetPayload(kPromptOverLimitPayload).has_value();
}

absl::Status CheckPromptSize(size_t tokens, const RequestLimits& limits) {
  if (tokens <= size_t(limits.max_prompt_tokens)) return absl::OkStatus();
  absl::Status over = Invalid(absl::StrCat("prompt: ", tokens,
                                           " tokens is over the server's limit of ",
                                           limits.max_prompt_tokens));
  over.SetPayload(kPromptOverLimitPayload, absl::Cord("max_prompt_tokens"));
  return over;
}

absl::Status CheckFitsContext(int64_t position, size_t prompt_tokens,
                              const catalogue::ServedModel& model) {
  const int64_t context = model.model->config().max_context;
  // The prompt, and then at least one generated token, must fit.
  if (position + int64_t(prompt_tokens) + 1 > context) {
    return absl::OutOfRangeError(absl::StrCat(
        "prompt: the session is at position ", position, "; ", prompt_tokens,
        " more tokens and one generated would pass the model's context of ", context));
  }
  return absl::OkStatus();
}

absl::Status CheckTurnFits(ParsedGenerate& request, const session::Session& session) {
  const catalogue::ServedModel& served = session.served();
  if (!request.model_name.empty() && request.model_name != served.name) {
    return Invalid(absl::StrCat("model: session '", session.id(), "' runs model '",
                                served.name, "', not '", Excerpt(request.model_name), "'"));
  }
  if (request.text) {
    const absl::Status s = EncodePrompt(*request.text, served, session.position(), request.turn);
    if (!s.ok()) return s;
    request.text.reset();
  }
  if (absl::Status s = CheckPromptFits(request.turn, served); !s.ok()) return s;
  const int64_t position = session.position();  // the pending token included
  if (absl::Status s = CheckFitsContext(position, request.turn.prompt.size(), served); !s.ok()) {
    return s;
  }
  if (request.turn.prompt.empty() && position == 0) {
    return Invalid("prompt: empty, and the session has no token to continue from");
  }
  return absl::OkStatus();
}

absl::Status CheckPromptFits(const scheduler::TurnRequest& turn,
                             const catalogue::ServedModel& model) {
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

absl::Status CheckSessionMetadata(
    const std::multimap<grpc::string_ref, grpc::string_ref>& metadata,
    const std::string& session_id) {
  auto it = metadata.find("x-session-id");
  if (it == metadata.end()) return absl::OkStatus();
  const std::string header(it->second.data(), it->second.size());
  if (session_id.empty() || header == session_id) return absl::OkStatus();
  return Invalid(absl::StrCat("x-session-id: metadata names session '", Excerpt(header),
                              "' but the request names '", Excerpt(session_id), "'"));
}

}  // namespace attnserve::service
