#include "client/turn.h"

#include <memory>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/retry.h"

namespace attnserve::client {
namespace {

namespace v1 = ::attnserve::v1;

// Strict UTF-8, as proto3 parsers check it: no overlong forms, no surrogates,
// nothing above U+10FFFF.
bool IsValidUtf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = s[i];
    int extra;
    uint32_t code;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      extra = 1, code = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      extra = 2, code = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      extra = 3, code = c & 0x07;
    } else {
      return false;
    }
    if (i + extra >= s.size()) return false;  // truncated sequence
    for (int k = 1; k <= extra; ++k) {
      const unsigned char cc = s[i + k];
      if ((cc & 0xC0) != 0x80) return false;
      code = (code << 6) | (cc & 0x3F);
    }
    static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (code < kMin[extra] || code > 0x10FFFF ||
        (code >= 0xD800 && code <= 0xDFFF)) {
      return false;
    }
    i += extra + 1;
  }
  return true;
}

bool IsHex(const std::string& s) {
  if (s.empty() || s.size() % 2 != 0) return false;
  for (char c : s) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// One Generate call, sent again while it is refused (RetryLoop) before its
// first token.
TurnResult CallGenerate(v1::AttnServe::Stub& stub,
                        const v1::GenerateRequest& request,
                        const GlobalOptions& options, const RetryClock& clock,
                        const std::function<void(const v1::Token&)>& on_token) {
  RetryLoop loop(options, kStreamingTimeoutSeconds, clock);
  TurnResult result;
  while (true) {
    result = TurnResult();
    grpc::ClientContext context;
    loop.Prepare(&context, request.session_id());
    std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
        stub.Generate(&context, request);
    v1::GenerateResponse response;
    while (reader->Read(&response)) {
      if (response.has_token()) {
        ++result.token_messages;
        on_token(response.token());
      } else if (response.has_final()) {
        result.final = std::move(*response.mutable_final());
      }
    }
    result.status = reader->Finish();
    // After a token the session has moved on: sending the request again would
    // append its prompt twice.
    if (result.token_messages > 0 || result.final.has_value() ||
        !loop.Retry(result.status)) {
      break;
    }
  }
  result.retries = loop.retries();
  return result;
}

// Whether `turn` (so far) was stopped by a server's shutdown in a way that a
// continuation turn on another replica can pick up; see RunTurn.
bool CanContinue(const v1::GenerateRequest& request, const TurnResult& turn) {
  const int32_t max_tokens = request.sampling().max_tokens();
  return turn.status.ok() && turn.final.has_value() &&
         turn.final->reason() == v1::FINISH_REASON_SHUTDOWN &&
         !request.session_id().empty() && turn.token_messages > 0 &&
         turn.continuations < kMaxContinuations &&
         (max_tokens == 0 || turn.token_messages < max_tokens);
}

// Folds a continuation's result into the turn's. A continuation that failed
// with an error status leaves the turn's final (the shutdown stop) as it was,
// for the finish line before the error; one that ended OK without a final
// message leaves none, which TurnError reports.
void MergeContinuation(TurnResult leg, TurnResult* turn) {
  turn->status = leg.status;
  turn->token_messages += leg.token_messages;
  turn->retries += leg.retries;
  ++turn->continuations;
  if (!leg.final.has_value()) {
    if (leg.status.ok()) turn->final.reset();
    return;
  }
  const v1::Usage first = turn->final->usage();
  v1::Final& final = *turn->final;
  final = std::move(*leg.final);
  v1::Usage* usage = final.mutable_usage();
  usage->set_prompt_tokens(first.prompt_tokens());
  usage->set_generated_tokens(first.generated_tokens() +
                              usage->generated_tokens());
  usage->set_time_to_first_token_ms(first.time_to_first_token_ms());
}

}  // namespace

void AddSamplingFlags(FlagSet* flags, SamplingFlags* sampling) {
  flags->Add("temperature", &sampling->temperature,
             "sampling temperature; 0 is greedy");
  flags->Add("top_k", &sampling->top_k,
             "keep the k most likely tokens; 0 keeps all");
  flags->Add("top_p", &sampling->top_p,
             "nucleus sampling mass in (0, 1]; 0 means 1");
  flags->Add("seed", &sampling->seed,
             "seed of the turn's sampler (same seed, same tokens)");
  flags->Add("max_tokens", &sampling->max_tokens,
             "tokens to generate at most; 0 is the server's default");
  flags->Add("stop", &sampling->stop, "stop after this byte sequence");
  flags->Add("stop_hex", &sampling->stop_hex,
             "stop after this byte sequence, as hex digits (0a is a newline)");
  flags->Add("ignore_eos", &sampling->ignore_eos,
             "never sample end-of-sequence: run to max_tokens");
}

absl::Status FillSampling(const SamplingFlags& flags,
                          v1::SamplingParams* params) {
  params->set_temperature(flags.temperature);
  params->set_top_k(flags.top_k);
  params->set_top_p(flags.top_p);
  params->set_seed(flags.seed);
  params->set_max_tokens(flags.max_tokens);
  params->set_ignore_eos(flags.ignore_eos);
  bool hex = !flags.stop_hex.empty();
  for (const std::string& stop : flags.stop) hex = hex || !IsValidUtf8(stop);
  params->clear_stop();
  for (const std::string& stop : flags.stop) {
    params->add_stop(hex ? absl::BytesToHexString(stop) : stop);
  }
  for (const std::string& stop : flags.stop_hex) {
    if (!IsHex(stop)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--stop_hex=", stop,
          " is not hex digits, two per byte (e.g. 0a for a newline)"));
    }
    params->add_stop(absl::AsciiStrToLower(stop));
  }
  params->set_stop_encoding(hex ? v1::STOP_ENCODING_HEX
                                : v1::STOP_ENCODING_UTF8);
  return absl::OkStatus();
}

TurnResult RunTurn(v1::AttnServe::Stub& stub,
                   const v1::GenerateRequest& request,
                   const GlobalOptions& options, const RetryClock& clock,
                   const std::function<void(const v1::Token&)>& on_token) {
  TurnResult turn = CallGenerate(stub, request, options, clock, on_token);
  v1::GenerateRequest next = request;
  next.clear_prompt();
  const int32_t max_tokens = request.sampling().max_tokens();
  while (CanContinue(request, turn)) {
    if (max_tokens > 0) {
      next.mutable_sampling()->set_max_tokens(
          max_tokens - static_cast<int32_t>(turn.token_messages));
    }
    MergeContinuation(CallGenerate(stub, next, options, clock, on_token),
                      &turn);
  }
  return turn;
}

std::string TurnError(const TurnResult& result) {
  if (!result.status.ok()) {
    std::string message = FormatRpcError(result.status);
    if (result.status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      absl::StrAppend(&message, " (raise --timeout)");
    }
    return message;
  }
  if (!result.final.has_value()) {
    return "attnserve: the stream ended without a final message";
  }
  const v1::Final& final = *result.final;
  switch (final.reason()) {
    case v1::FINISH_REASON_STOP:
    case v1::FINISH_REASON_LENGTH:
      return "";
    case v1::FINISH_REASON_ERROR:
      return absl::StrCat(
          "attnserve: generation failed: ",
          final.error().empty() ? "(no message)" : final.error());
    case v1::FINISH_REASON_CANCELLED:
      return absl::StrCat("attnserve: generation cancelled",
                          final.error().empty() ? "" : ": ", final.error());
    case v1::FINISH_REASON_SHUTDOWN:
      return absl::StrCat(
          "attnserve: generation stopped: the server is shutting down",
          final.error().empty() ? "" : ": ", final.error());
    default:
      return absl::StrCat("attnserve: generation ended with finish reason ",
                          v1::FinishReason_Name(final.reason()),
                          final.error().empty() ? "" : ": ", final.error());
  }
}

const char* FinishReasonName(v1::FinishReason reason) {
  switch (reason) {
    case v1::FINISH_REASON_STOP:
      return "stop";
    case v1::FINISH_REASON_LENGTH:
      return "length";
    case v1::FINISH_REASON_CANCELLED:
      return "cancelled";
    case v1::FINISH_REASON_ERROR:
      return "error";
    case v1::FINISH_REASON_SHUTDOWN:
      return "shutdown";
    default:
      return "unspecified";
  }
}

std::string FormatFinishLine(const v1::Final& final) {
  const v1::Usage& usage = final.usage();
  return absl::StrFormat(
      "[finish=%s prompt_tokens=%d generated_tokens=%d position=%d "
      "ttft_ms=%.1f]",
      FinishReasonName(final.reason()), usage.prompt_tokens(),
      usage.generated_tokens(), usage.session_position(),
      usage.time_to_first_token_ms());
}

}  // namespace attnserve::client
