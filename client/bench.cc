#include "client/bench.h"

#include <chrono>
#include <cmath>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/commands.h"
#include "client/retry.h"
#include "client/turn.h"

namespace attnserve::client {
namespace {

namespace v1 = ::attnserve::v1;
using Clock = std::chrono::steady_clock;

constexpr CommandHelp kBenchHelp = {
    "bench", "[flags]",
    "Runs --sessions concurrent sessions, one thread each. Every thread\n"
    "creates its own session, runs --turns Generate turns on it one after the\n"
    "other (each sending --prompt), and closes it. Prints the tokens\n"
    "received, the wall time of the whole run (session creation included),\n"
    "aggregate tokens/s, the time to first token (client-side: from sending\n"
    "the request to the first token message) and the inter-token latency\n"
    "(between consecutive token messages of a turn) as nearest-rank\n"
    "p50/p95/p99 in ms, the number of errors (failed session creations,\n"
    "turns and closes), of retries (refused requests sent again)\n"
    "and of turns continued after a server's shutdown, both as in\n"
    "'generate --help'. Exit status 1 when there were errors.\n"};

double Millis(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

void RecordError(BenchSamples* samples, const std::string& message) {
  if (samples->errors++ == 0) samples->first_error = message;
}

// One session's thread: create, run the turns, close.
void RunSession(v1::AttnServe::Stub& stub, const GlobalOptions& global,
                const RetryClock& clock, const BenchOptions& options,
                BenchSamples* samples) {
  std::string session_id;
  {
    v1::CreateSessionRequest request;
    request.set_model(options.model);
    v1::Session session;
    RetryLoop loop(global, kUnaryTimeoutSeconds, clock);
    const grpc::Status status = loop.Run("", [&](grpc::ClientContext* context) {
      return stub.CreateSession(context, request, &session);
    });
    samples->retries += loop.retries();
    if (!status.ok()) return RecordError(samples, FormatRpcError(status));
    session_id = session.id();
  }
  v1::GenerateRequest request;
  request.set_session_id(session_id);
  request.set_text(options.prompt);
  request.mutable_sampling()->set_temperature(options.temperature);
  request.mutable_sampling()->set_max_tokens(options.max_tokens);
  request.mutable_sampling()->set_ignore_eos(options.ignore_eos);
  for (int turn = 0; turn < options.turns; ++turn) {
    Clock::time_point last = Clock::now();
    bool first = true;
    const TurnResult result =
        RunTurn(stub, request, global, clock, [&](const v1::Token&) {
          const Clock::time_point now = Clock::now();
          (first ? samples->ttft_ms : samples->itl_ms)
              .push_back(Millis(now - last));
          first = false;
          last = now;
        });
    samples->generated_tokens += result.token_messages;
    samples->retries += result.retries;
    samples->continuations += result.continuations;
    const std::string error = TurnError(result);
    if (!error.empty()) RecordError(samples, error);
  }
  v1::CloseSessionRequest close;
  close.set_session_id(session_id);
  v1::CloseSessionResponse response;
  RetryLoop loop(global, kUnaryTimeoutSeconds, clock);
  const grpc::Status status =
      loop.Run(session_id, [&](grpc::ClientContext* context) {
        return stub.CloseSession(context, close, &response);
      });
  samples->retries += loop.retries();
  if (!status.ok()) RecordError(samples, FormatRpcError(status));
}

std::string Ms(double value) {
  return std::isnan(value) ? "-" : absl::StrFormat("%.2f ms", value);
}

std::string JsonNumber(double value) {
  return std::isfinite(value) ? absl::StrFormat("%.3f", value) : "null";
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      absl::StrAppend(&out, "\\", std::string(1, c));
    } else if (c < 0x20) {
      absl::StrAppendFormat(&out, "\\u%04x", c);
    } else {
      out.push_back(c);
    }
  }
  return out + "\"";
}

std::string JsonPercentiles(const Percentiles& p) {
  return absl::StrCat(
      "{\"p50\":", JsonNumber(p.p50), ",\"p95\":", JsonNumber(p.p95),
      ",\"p99\":", JsonNumber(p.p99), ",\"max\":", JsonNumber(p.max),
      ",\"count\":", p.count, "}");
}

}  // namespace

BenchReport SummarizeBench(const BenchOptions& options,
                           const std::vector<BenchSamples>& samples,
                           double wall_seconds) {
  BenchReport report;
  report.options = options;
  report.wall_seconds = wall_seconds;
  std::vector<double> ttft, itl;
  for (const BenchSamples& s : samples) {
    report.generated_tokens += s.generated_tokens;
    report.errors += s.errors;
    report.retries += s.retries;
    report.continuations += s.continuations;
    if (report.first_error.empty()) report.first_error = s.first_error;
    ttft.insert(ttft.end(), s.ttft_ms.begin(), s.ttft_ms.end());
    itl.insert(itl.end(), s.itl_ms.begin(), s.itl_ms.end());
  }
  report.tokens_per_second =
      wall_seconds > 0 ? report.generated_tokens / wall_seconds : 0;
  report.ttft_ms = SummarizeSamples(std::move(ttft));
  report.itl_ms = SummarizeSamples(std::move(itl));
  return report;
}

std::string FormatBenchText(const BenchReport& r) {
  const BenchOptions& o = r.options;
  return absl::StrCat(
      absl::StrFormat("bench: %d sessions x %d turns, max_tokens %d, "
                      "temperature %g, model %s\n",
                      o.sessions, o.turns, o.max_tokens, o.temperature,
                      o.model.empty() ? "(server default)" : o.model),
      absl::StrFormat("generated tokens   %d\n", r.generated_tokens),
      absl::StrFormat("wall time          %.3f s\n", r.wall_seconds),
      absl::StrFormat("throughput         %.1f tokens/s\n",
                      r.tokens_per_second),
      absl::StrFormat("TTFT               p50 %s  p95 %s  p99 %s  (%d turns)\n",
                      Ms(r.ttft_ms.p50), Ms(r.ttft_ms.p95), Ms(r.ttft_ms.p99),
                      r.ttft_ms.count),
      absl::StrFormat("inter-token        p50 %s  p95 %s  p99 %s  (%d gaps)\n",
                      Ms(r.itl_ms.p50), Ms(r.itl_ms.p95), Ms(r.itl_ms.p99),
                      r.itl_ms.count),
      absl::StrFormat("errors             %d\n", r.errors),
      absl::StrFormat("retries            %d (%d turns continued after a "
                      "shutdown)\n",
                      r.retries, r.continuations));
}

std::string FormatBenchJson(const BenchReport& r) {
  const BenchOptions& o = r.options;
  return absl::StrCat("{\"sessions\":", o.sessions, ",\"turns\":", o.turns,
                      ",\"max_tokens\":", o.max_tokens,
                      ",\"temperature\":", JsonNumber(o.temperature),
                      ",\"model\":", JsonString(o.model),
                      ",\"generated_tokens\":", r.generated_tokens,
                      ",\"wall_s\":", JsonNumber(r.wall_seconds),
                      ",\"tokens_per_s\":", JsonNumber(r.tokens_per_second),
                      ",\"ttft_ms\":", JsonPercentiles(r.ttft_ms),
                      ",\"itl_ms\":", JsonPercentiles(r.itl_ms),
                      ",\"errors\":", r.errors, ",\"retries\":", r.retries,
                      ",\"continuations\":", r.continuations, "}");
}

int RunBench(const Args& args, GlobalOptions options, const Io& io) {
  FlagSet flags;
  BenchOptions bench;
  flags.Add("sessions", &bench.sessions,
            "concurrent sessions, one thread each");
  flags.Add("turns", &bench.turns, "Generate turns per session");
  flags.Add("max_tokens", &bench.max_tokens,
            "tokens per turn at most; 0 is the server's default");
  flags.Add("prompt", &bench.prompt, "text sent by every turn");
  flags.Add("temperature", &bench.temperature,
            "sampling temperature; 0 is greedy");
  flags.Add("model", &bench.model, "model name; empty is the server's default");
  flags.Add("json", &bench.json, "print one JSON object line instead of text");
  flags.Add("ignore_eos", &bench.ignore_eos,
            "never sample end-of-sequence, so every turn runs to max_tokens "
            "(--noignore_eos to allow it)");
  Args positional;
  int code;
  if (!ParseCommandLine(kBenchHelp, flags, &options, args, io, &positional,
                        &code) ||
      !CheckArgCount(positional, 0, 0, kBenchHelp, io, &code)) {
    return code;
  }
  if (bench.sessions < 1 || bench.turns < 1) {
    return ReportUsageError(io, "--sessions and --turns must be at least 1",
                            "bench");
  }
  std::unique_ptr<v1::AttnServe::Stub> stub = ConnectStub(options, io, &code);
  if (stub == nullptr) return code;

  std::vector<BenchSamples> samples(bench.sessions);
  std::vector<std::thread> threads;
  const Clock::time_point start = Clock::now();
  for (BenchSamples& s : samples) {
    threads.emplace_back([&stub, &options, &io, &bench, &s] {
      RunSession(*stub, options, io.clock, bench, &s);
    });
  }
  for (std::thread& thread : threads) thread.join();
  const double wall =
      std::chrono::duration<double>(Clock::now() - start).count();

  const BenchReport report = SummarizeBench(bench, samples, wall);
  if (bench.json) {
    absl::FPrintF(io.out, "%s\n", FormatBenchJson(report));
  } else {
    absl::FPrintF(io.out, "%s", FormatBenchText(report));
  }
  if (report.errors > 0) {
    absl::FPrintF(io.err, "first error: %s\n", report.first_error);
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace attnserve::client
