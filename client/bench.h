// bench: N concurrent sessions, one thread each, M Generate turns per session;
// reports throughput and client-side latency percentiles.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "client/percentiles.h"

namespace attnserve::client {

struct BenchOptions {
  // Concurrent sessions, one client thread each.
  int32_t sessions = 4;
  // Generate turns per session, one after the other.
  int32_t turns = 4;
  // max_tokens of every turn; 0 is the server's default.
  int32_t max_tokens = 64;
  // Text of every turn.
  std::string prompt = "Once upon a time";
  // 0 is greedy.
  float temperature = 0;
  // Empty is the server's default model.
  std::string model;
  // Print one JSON object line instead of text.
  bool json = false;
  // Keep generating past end-of-sequence, so every turn produces max_tokens tokens.
  bool ignore_eos = true;
};

// What one session's thread observed.
struct BenchSamples {
  int64_t generated_tokens = 0;  // token messages received
  int64_t errors = 0;            // failed session creations and failed turns
  // Requests sent again after UNAVAILABLE or CANCELLED (client/retry.h):
  // session creations and closes, and turns refused before their first token.
  int64_t retries = 0;
  // Turns continued after a server's shutdown stopped them (RunTurn).
  int64_t continuations = 0;
  std::vector<double> ttft_ms;  // per turn: request sent -> first token message
  std::vector<double> itl_ms;   // between consecutive token messages of a turn
  std::string first_error;      // the first error's message, if any
};

struct BenchReport {
  BenchOptions options;
  int64_t generated_tokens = 0;
  double wall_seconds = 0;
  double tokens_per_second = 0;
  Percentiles ttft_ms;
  Percentiles itl_ms;
  int64_t errors = 0;
  int64_t retries = 0;
  int64_t continuations = 0;
  std::string first_error;
};

// Merges the threads' samples; `wall_seconds` spans the whole run.
BenchReport SummarizeBench(const BenchOptions& options,
                           const std::vector<BenchSamples>& samples,
                           double wall_seconds);

// Human-readable report, several lines.
std::string FormatBenchText(const BenchReport& report);

// The same as one JSON object on one line (no trailing newline); percentiles of
// no samples are null.
std::string FormatBenchJson(const BenchReport& report);

}  // namespace attnserve::client
