// models, tokenize and health: what the server offers, and whether it is up.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_format.h"
#include "attnserve/v1/attnserve.grpc.pb.h"
#include "client/commands.h"
#include "client/format.h"
#include "client/retry.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace attnserve::client {
namespace {

namespace v1 = ::attnserve::v1;
namespace health = ::grpc::health::v1;

constexpr CommandHelp kModelsHelp = {
    "models", "[NAME]",
    "Without NAME, lists the served models. With NAME, describes one: its\n"
    "config, the attention module it is served with, parameter count, state\n"
    "bytes per session at 1k and 16k tokens of context, the break-even\n"
    "context from which its fixed state is smaller than a KV cache, its\n"
    "tokenizer (kind, vocabulary, BOS and EOS ids) and key/value heads.\n"};

constexpr CommandHelp kTokenizeHelp = {
    "tokenize", "[flags] TEXT",
    "Prints the token ids TEXT becomes with a model's tokenizer, one line per\n"
    "token with the bytes it adds to the text (C escapes), as a Generate\n"
    "prompt would be tokenized: the start of a new session (BOS first when\n"
    "the tokenizer adds one), or with --session the next turn of that session.\n"};

constexpr CommandHelp kHealthHelp = {
    "health", "[flags]",
    "Calls grpc.health.v1.Health/Check and prints the status it returns\n"
    "(SERVING, NOT_SERVING, ...). Exit status 0 only when SERVING, so that it\n"
    "can be a container's health check.\n"};

// "sentencepiece, 32000 tokens, BOS 1 (added), EOS 2".
std::string DescribeTokenizer(const v1::TokenizerInfo& t) {
  if (t.kind().empty()) return "-";
  std::string text = absl::StrCat(t.kind(), ", ", t.vocab_size(), " tokens, BOS ");
  absl::StrAppend(&text, t.bos_id() < 0 ? "none" : absl::StrCat(t.bos_id()),
                  t.add_bos() ? " (added)" : "", ", EOS ",
                  t.eos_ids().empty() ? "none" : absl::StrJoin(t.eos_ids(), " "));
  return text;
}

std::string BreakEven(int64_t tokens) {
  if (tokens == 0) return "none (a KV cache; state grows with context)";
  return absl::StrCat(tokens, " tokens");
}

// A config value that the schema lets be 0 for "the default": the default is
// shown.
template <typename T, typename D>
std::string OrDefault(T value, D default_value) {
  if (value != 0) return absl::StrCat(value);
  return absl::StrCat(default_value, " (default)");
}

// The checkpoint's attention config, e.g. "taylor (order 2), qk_norm
// temperature 4 (learned), chunk 64, decay horizon 128".
std::string DescribeAttentionConfig(const v1::ModelConfig& config) {
  const v1::AttentionConfig& a = config.attention();
  std::string text = FormatAttention(a.module(), a.order());
  if (a.qk_norm()) {
    absl::StrAppend(
        &text, ", qk_norm temperature ",
        a.qk_temperature() != 0
            ? absl::StrCat(a.qk_temperature())
            : absl::StrFormat("%g (default)", std::sqrt(config.head_dim())),
        a.learn_temperature() ? " (learned)" : "");
  }
  absl::StrAppend(&text, ", chunk ", OrDefault(a.chunk_size(), 64));
  if (a.decay_horizon() != 0) absl::StrAppend(&text, ", decay horizon ", a.decay_horizon());
  return text;
}

// A hybrid's state by layer kind, one row per kind ("4 mamba2 layers: 283.0 KiB at any
// length"); nothing for a model of one kind of layer.
std::vector<std::vector<std::string>> MixerRows(const v1::ModelInfo& m) {
  std::vector<std::vector<std::string>> rows;
  if (m.state_bytes_by_mixer_size() < 2) return rows;
  for (const v1::MixerStateBytes& k : m.state_bytes_by_mixer()) {
    const std::string size =
        k.bytes_at_1k() == k.bytes_at_32k()
            ? absl::StrCat(HumanBytes(k.bytes_at_1k()), " at any length")
            : absl::StrCat(HumanBytes(k.bytes_at_1k()), " at 1k, ", HumanBytes(k.bytes_at_32k()),
                           " at 32k");
    rows.push_back({rows.empty() ? "state by kind:" : "",
                    absl::StrCat(k.layers(), " ", k.mixer(), " layers: ", size)});
  }
  return rows;
}

void PrintModel(const Io& io, const v1::ModelInfo& m) {
  const v1::ModelConfig& c = m.config();
  const std::string served = FormatAttention(
      m.attention_module(), m.attention_module() == c.attention().module()
                                ? c.attention().order()
                                : 0);
  std::vector<std::vector<std::string>> rows =
      {
          {"name:", m.name()},
          {"directory:", m.directory().empty() ? "-" : m.directory()},
          {"attention:", served},
          {"trained with:", DescribeAttentionConfig(c)},
          {"config:", absl::StrFormat("%d layers, dim %d, %d heads x head_dim "
                                      "%d, mlp_hidden %d",
                                      c.num_layers(), c.dim(), c.num_heads(),
                                      c.head_dim(), c.mlp_hidden())},
          {"", absl::StrCat("vocab ", c.vocab_size(), ", max_context ",
                            OrDefault(c.max_context(), 1 << 20))},
          {"", absl::StrCat("rope_theta ", OrDefault(c.rope_theta(), 10000),
                            ", norm_eps ", OrDefault(c.norm_eps(), 1e-5))},
          {"parameters:", absl::StrCat(HumanCount(m.parameter_count()), " (",
                                       m.parameter_count(), ")")},
          {"state/session @1k:",
           absl::StrCat(HumanBytes(m.state_bytes_per_session_at_1k()), " (",
                        m.state_bytes_per_session_at_1k(), " bytes)")},
          {"state/session @16k:",
           absl::StrCat(HumanBytes(m.state_bytes_per_session_at_16k()), " (",
                        m.state_bytes_per_session_at_16k(), " bytes)")},
          {"break-even context:", BreakEven(m.break_even_context())},
      };
  for (auto& row : MixerRows(m)) rows.push_back(std::move(row));
  rows.push_back({"tokenizer:", DescribeTokenizer(m.tokenizer())});
  rows.push_back({"kv heads:", m.num_kv_heads() == 0 ? "-" : absl::StrCat(m.num_kv_heads())});
  rows.push_back({"kv cache:", m.kv_cache_type().empty() ? "-" : m.kv_cache_type()});
  PrintTable(io.out, rows);
}

}  // namespace

int RunModels(const Args& args, GlobalOptions options, const Io& io) {
  FlagSet flags;
  Args positional;
  int code;
  if (!ParseCommandLine(kModelsHelp, flags, &options, args, io, &positional,
                        &code) ||
      !CheckArgCount(positional, 0, 1, kModelsHelp, io, &code)) {
    return code;
  }
  std::unique_ptr<v1::AttnServe::Stub> stub = ConnectStub(options, io, &code);
  if (stub == nullptr) return code;
  grpc::ClientContext context;
  SetDeadline(&context, options, kUnaryTimeoutSeconds);
  if (positional.size() == 1) {
    v1::DescribeModelRequest request;
    request.set_name(positional[0]);
    v1::ModelInfo info;
    grpc::Status status = stub->DescribeModel(&context, request, &info);
    if (!status.ok()) return ReportRpcError(io, status);
    PrintModel(io, info);
    return kExitOk;
  }
  v1::ListModelsResponse response;
  grpc::Status status =
      stub->ListModels(&context, v1::ListModelsRequest(), &response);
  if (!status.ok()) return ReportRpcError(io, status);
  if (response.models().empty()) {
    absl::FPrintF(io.out, "no models\n");
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows = {
      {"NAME", "ATTENTION", "PARAMS", "STATE@1K", "STATE@16K", "BREAK-EVEN"}};
  for (const v1::ModelInfo& m : response.models()) {
    rows.push_back(
        {m.name(), m.attention_module(), HumanCount(m.parameter_count()),
         HumanBytes(m.state_bytes_per_session_at_1k()),
         HumanBytes(m.state_bytes_per_session_at_16k()),
         m.break_even_context() == 0 ? "-"
                                     : absl::StrCat(m.break_even_context())});
  }
  PrintTable(io.out, rows);
  return kExitOk;
}

int RunTokenize(const Args& args, GlobalOptions options, const Io& io) {
  FlagSet flags;
  std::string model, session;
  flags.Add("model", &model, "model whose tokenizer to use; empty is the default");
  flags.Add("session", &session, "tokenize as this session's next turn");
  Args positional;
  int code;
  if (!ParseCommandLine(kTokenizeHelp, flags, &options, args, io, &positional,
                        &code) ||
      !CheckArgCount(positional, 1, 1, kTokenizeHelp, io, &code)) {
    return code;
  }
  std::unique_ptr<v1::AttnServe::Stub> stub = ConnectStub(options, io, &code);
  if (stub == nullptr) return code;
  grpc::ClientContext context;
  SetDeadline(&context, options, kUnaryTimeoutSeconds);
  AddSessionHeader(&context, session);
  v1::TokenizeRequest request;
  request.set_model(model);
  request.set_session_id(session);
  request.set_text(positional[0]);
  v1::TokenizeResponse response;
  grpc::Status status = stub->Tokenize(&context, request, &response);
  if (!status.ok()) return ReportRpcError(io, status);
  std::vector<std::vector<std::string>> rows = {{"ID", "TEXT"}};
  for (const auto& token : response.tokens()) {
    rows.push_back({absl::StrCat(token.id()),
                    absl::StrCat("\"", absl::CHexEscape(token.text()), "\"")});
  }
  PrintTable(io.out, rows);
  absl::FPrintF(io.out, "%d tokens (model %s)\n", response.tokens_size(), response.model());
  return kExitOk;
}

int RunHealth(const Args& args, GlobalOptions options, const Io& io) {
  FlagSet flags;
  std::string service;
  flags.Add("service", &service,
            "service name to check; empty is the whole server");
  Args positional;
  int code;
  if (!ParseCommandLine(kHealthHelp, flags, &options, args, io, &positional,
                        &code) ||
      !CheckArgCount(positional, 0, 0, kHealthHelp, io, &code)) {
    return code;
  }
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = Connect(options);
  if (!channel.ok()) return ReportUnreachable(io, channel.status());
  grpc::ClientContext context;
  SetDeadline(&context, options, kUnaryTimeoutSeconds);
  health::HealthCheckRequest request;
  request.set_service(service);
  health::HealthCheckResponse response;
  grpc::Status status =
      health::Health::NewStub(*channel)->Check(&context, request, &response);
  if (!status.ok()) return ReportRpcError(io, status);
  absl::FPrintF(
      io.out, "%s\n",
      health::HealthCheckResponse::ServingStatus_Name(response.status()));
  return response.status() == health::HealthCheckResponse::SERVING
             ? kExitOk
             : kExitFailure;
}

}  // namespace attnserve::client
