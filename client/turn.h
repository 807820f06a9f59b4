// One Generate call (a "turn") and the sampling flags that shape it; shared by
// generate, chat and bench.
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "attnserve/v1/attnserve.grpc.pb.h"
#include "client/connection.h"
#include "client/flags.h"

namespace attnserve::client {

// Command-line form of attnserve.v1.SamplingParams. Zero values mean what the
// proto says (greedy, all tokens, top_p 1, the server's max_tokens).
struct SamplingFlags {
  float temperature = 0;
  int32_t top_k = 0;
  float top_p = 0;
  uint64_t seed = 0;
  int32_t max_tokens = 0;
  std::vector<std::string> stop;      // stop sequences as given (bytes)
  std::vector<std::string> stop_hex;  // stop sequences as hex digits
  bool ignore_eos = false;
};

// Declares --temperature --top_k --top_p --seed --max_tokens --stop --stop_hex
// --ignore_eos.
void AddSamplingFlags(FlagSet* flags, SamplingFlags* sampling);

// Fills `params`. Stop sequences go as STOP_ENCODING_UTF8 when every one is a
// --stop that is valid UTF-8; otherwise all of them go hex-encoded
// (STOP_ENCODING_HEX), since a proto3 `string` must hold valid UTF-8.
// InvalidArgument names a malformed --stop_hex.
absl::Status FillSampling(const SamplingFlags& flags,
                          attnserve::v1::SamplingParams* params);

// What came back from one turn: one Generate call, or several when it was
// retried or continued (RunTurn).
struct TurnResult {
  grpc::Status status;  // the last call's status
  // The final message, if one arrived. After continuations it describes the
  // whole turn: reason, error, session and position from the last call,
  // prompt_tokens and ttft from the first, generated_tokens summed.
  std::optional<attnserve::v1::Final> final;
  int64_t token_messages = 0;  // token messages received
  int64_t retries = 0;        // requests sent again (RetryLoop), before a token
  int64_t continuations = 0;  // turns sent to continue after a shutdown stop
};

// Continuation turns one turn may take (RunTurn).
inline constexpr int kMaxContinuations = 3;

// Sends `request` with the command's deadline (GlobalOptions, default 300 s)
// and reads the stream to its end, calling `on_token` on the calling thread for
// each token message as soon as it arrives. Requests naming a session carry the
// x-session-id header.
//
// A request refused with UNAVAILABLE (or cancelled by a stopping server) before
// any token arrived is sent again (RetryLoop, waiting on `clock`): nothing was
// appended to the session. When a
// server's shutdown stops a turn on a named session after some tokens
// (FINISH_REASON_SHUTDOWN: the session was saved at usage.session_position and
// any replica can continue it), up to kMaxContinuations turns continue it: the
// same request with an empty prompt and max_tokens reduced by the tokens
// received so far (unless 0, the server's default). A one-turn session (no
// session_id) ended with the process, so its shutdown is reported as is; so is
// one before the first token, since the prompt may be only partly consumed.
// Greedy output is then the same as without the stop; seeded output is not,
// since each continuation starts its sampler from the seed again. Thread-safe
// as long as callers do not share `on_token` state.
TurnResult RunTurn(
    attnserve::v1::AttnServe::Stub& stub,
    const attnserve::v1::GenerateRequest& request, const GlobalOptions& options,
    const RetryClock& clock,
    const std::function<void(const attnserve::v1::Token&)>& on_token);

// Empty when the turn finished normally (reason stop or length); otherwise the
// one-line message to print: "attnserve: CODE: message" for an error status, or
// a description of a missing, failed, cancelled, shutdown or unspecified final
// message.
std::string TurnError(const TurnResult& result);

// "stop", "length", "cancelled", "error", "shutdown" or "unspecified".
const char* FinishReasonName(attnserve::v1::FinishReason reason);

// "[finish=length prompt_tokens=12 generated_tokens=64 position=76
// ttft_ms=3.2]".
std::string FormatFinishLine(const attnserve::v1::Final& final);

}  // namespace attnserve::client
