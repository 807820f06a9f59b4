// Admission: every check on a request, once, with one status code per condition.
// Sampling (model::ValidateSamplingParams), prompt size and stop strings when the request
// is parsed; model, vocabulary and context once its session is known. Later layers
// (scheduler, model) assume these hold.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include <grpcpp/support/string_ref.h>

#include "server/config/defaults.h"
#include "absl/status/statusor.h"
#include "attnserve/v1/attnserve.pb.h"
#include "server/scheduler/turn.h"
#include "server/catalogue/model_catalogue.h"
#include "server/session/session_store.h"

namespace attnserve::service {

// Server-side limits on a request.
struct RequestLimits {
  int max_prompt_tokens = config::defaults::kMaxPromptTokens;
  int max_stop_strings = config::defaults::kMaxStopStrings;
  int max_stop_bytes = config::defaults::kMaxStopBytes;
  int max_generated_tokens = config::defaults::kMaxGeneratedTokens;
  int default_max_tokens = config::defaults::kDefaultMaxTokens;
};

// The most alternatives a Generate request may ask for per token (top_logprobs), as in
// the OpenAI API.
inline constexpr int kMaxTopLogprobs = 20;

// A Generate request, validated: everything but the session lookup.
struct ParsedGenerate {
  std::shared_ptr<const catalogue::ServedModel> model;  // null when a session is named
  std::string model_name;                             // as requested (may be empty)
  std::string session_id;
  // A text prompt for a named session, encoded by CheckTurnFits once the session (its
  // model's tokenizer, its position) is known; unset otherwise (turn.prompt holds it).
  std::optional<std::string> text;
  scheduler::TurnRequest turn;
};

// INVALID_ARGUMENT naming the field for: an empty prompt without a session, token ids
// outside the model's vocabulary, a prompt over the limit, a negative temperature,
// top_p outside (0, 1], negative top_k, max_tokens negative or over the limit, an
// unknown stop encoding or undecodable stop string, top_logprobs outside
// [0, kMaxTopLogprobs] or above 0 without logprobs, a constraint that does not compile
// (constraints.h: naming the keyword and its path in the schema). NOT_FOUND for an
// unknown model. A constraint is compiled once per distinct message
// (SharedConstraintCache) and set in turn.constraint.
absl::StatusOr<ParsedGenerate> ParseGenerate(const v1::GenerateRequest& request,
                                             const catalogue::ModelCatalogue& models,
                                             const RequestLimits& limits);

// The type URL of the payload ParseGenerate attaches to the INVALID_ARGUMENT of a prompt
// over max_prompt_tokens, so that an edge can tell it apart (HTTP answers 413) without
// parsing messages; gRPC ignores it.
inline constexpr char kPromptOverLimitPayload[] = "attnserve/prompt-over-limit";
// True for ParseGenerate's status of a prompt over the server's limit.
bool IsPromptOverLimit(const absl::Status& status);
// OK if a prompt of `tokens` new tokens is within limits.max_prompt_tokens, else the
// INVALID_ARGUMENT (with kPromptOverLimitPayload) ParseGenerate answers for it. For an
// edge that encodes a prompt itself, to refuse it before making a session for it.
absl::Status CheckPromptSize(size_t tokens, const RequestLimits& limits);
// OK if `prompt_tokens` more tokens and one generated fit `model`'s context from
// `position`, else CheckTurnFits's OUT_OF_RANGE.
absl::Status CheckFitsContext(int64_t position, size_t prompt_tokens,
                              const catalogue::ServedModel& model);

// The checks that need the session (after it is claimed), after encoding a pending text
// prompt with the session's tokenizer (EncodePrompt): the requested model is the
// session's (INVALID_ARGUMENT), token ids fit its vocabulary (INVALID_ARGUMENT), the
// prompt and one generated token fit its context from the session's position
// (OUT_OF_RANGE; so no turn ever takes a session past max_context), and an empty
// prompt has a pending token to continue from (INVALID_ARGUMENT).
absl::Status CheckTurnFits(ParsedGenerate& request, const session::Session& session);

// `text` as the prompt of a turn on `model` whose session is at `position`: the start of
// the session's text at 0 (BOS when the tokenizer adds one), its continuation after
// (tokenizer::Tokenizer::Encode).
absl::Status EncodePrompt(const std::string& text, const catalogue::ServedModel& model,
                          int64_t position, scheduler::TurnRequest& turn);

// The session id a request carries in metadata (`x-session-id`, which proxies route by)
// must agree with the one in its message; either may be absent. INVALID_ARGUMENT
// naming both otherwise.
absl::Status CheckSessionMetadata(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata,
                                  const std::string& session_id);

// The largest request message the server accepts: a prompt of max_prompt_tokens token
// ids (at most 5 bytes each on the wire) or a snapshot chunk (1 MiB), plus room for the
// rest of the request. gRPC refuses larger messages before any handler runs.
int MaxRequestMessageBytes(const RequestLimits& limits);

// Token ids must fit the vocabulary of the model that will run them.
absl::Status CheckPromptFits(const scheduler::TurnRequest& turn,
                             const catalogue::ServedModel& model);

}  // namespace attnserve::service
