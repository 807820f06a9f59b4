// Helpers for session_bench: timing and markdown tables, benchmark models and servers, a blocking
// client for the session RPCs, and a throwaway redis-server process.
#pragma once

#include <grpcpp/channel.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "attnserve/v1/attnserve.grpc.pb.h"
#include "server/service/server.h"
#include "server/catalogue/served_model.h"

namespace attnserve::bench {

using Clock = std::chrono::steady_clock;

// Milliseconds from `start` to now.
double MsSince(Clock::time_point start);
// Median and nearest-rank percentile (p in [0, 1]) of `v`; 0 for an empty vector.
double Median(std::vector<double> v);
double Percentile(std::vector<double> v, double p);

// printf-style into a std::string.
std::string Format(const char* format, ...) __attribute__((format(printf, 1, 2)));
// 3551232 -> "3.55 MB"; 300 -> "300 B" (decimal units, as bandwidths are quoted).
std::string HumanBytes(double bytes);

// A markdown table printed to stdout, columns padded to their widest cell.
class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void Add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void Print() const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

// Median bandwidth, in bytes per second, of memcpy between two `bytes`-sized buffers (both touched
// first), over `reps` copies.
double MemcpyBytesPerSecond(size_t bytes, int reps);

// A model shape; every benchmark model is built in memory with untrained weights.
struct Shape {
  const char* label;
  int dim;
  int num_layers;
  int num_heads;
  int head_dim;  // value_dim is the same
  int mlp_hidden;
  int64_t max_context;
};

// `shape` with attention `module` of `order`, named `name`, seeded deterministically. Exits the
// process with the reason if the config is invalid.
std::shared_ptr<const catalogue::ServedModel> MakeServedModel(const Shape& shape,
                                                            const std::string& module, int order,
                                                            const std::string& name);

// `n` byte-token ids (lowercase letters), different for each `offset`.
std::vector<int32_t> PromptTokens(int64_t n, int64_t offset = 0);

// What one Generate call saw.
struct TurnResult {
  absl::Status status;
  // Client-side: from the call to the first token message.
  double ttft_ms = 0;
  // Server-side: Usage.time_to_first_token_ms of the final message.
  double server_ttft_ms = 0;
  // Client-side: the whole call.
  double total_ms = 0;
  int64_t position = 0;
};

// A blocking client on one channel to 127.0.0.1:`port`. Not thread-safe.
class Client {
 public:
  explicit Client(int port);

  absl::StatusOr<std::string> CreateSession(const std::string& model);
  // One greedy turn of `max_tokens` (ignore_eos) with token-id `prompt`.
  TurnResult Generate(const std::string& session_id, const std::vector<int32_t>& prompt,
                      int max_tokens = 1);
  // The snapshot, all chunks appended.
  absl::StatusOr<std::string> Export(const std::string& session_id);
  // Streams `bytes` in chunks of `chunk_bytes`; answers the new session's id.
  absl::StatusOr<std::string> Import(const std::string& bytes,
                                     size_t chunk_bytes = size_t{1} << 20);
  absl::StatusOr<std::string> Fork(const std::string& session_id);
  absl::StatusOr<v1::Session> Get(const std::string& session_id);
  absl::Status Close(const std::string& session_id);
  // Ids of the sessions in the server's memory (ListSessions).
  absl::StatusOr<std::vector<std::string>> InMemory();

 private:
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::AttnServe::Stub> stub_;
};

// A redis-server child process on a free loopback port, without persistence; killed (SIGTERM, then
// reaped) by the destructor.
class RedisServer {
 public:
  // Starts `binary` and waits until it answers PING (up to 10 s).
  static absl::StatusOr<std::unique_ptr<RedisServer>> Start(const std::string& binary);
  ~RedisServer();

  int port() const { return port_; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  // Sends one command; returns the first line of the reply (e.g. "+OK", ":12").
  absl::StatusOr<std::string> Command(const std::vector<std::string>& args) const;

 private:
  RedisServer(int pid, int port) : pid_(pid), port_(port) {}
  int pid_;
  int port_;
};

// A loopback TCP port that was free a moment ago.
int FreeLoopbackPort();

// Runs `fn` with file descriptor 2 redirected to a temporary file; returns what was written there.
std::string CaptureStderr(const std::function<void()>& fn);

// Options of a benchmark server: 127.0.0.1:0, no metrics endpoint, prompts up to 16k tokens, 4096
// sessions, `budget` bytes of session state, sessions kept in `store`.
config::ServerOptions BenchServerOptions(const std::string& store,
                                         int64_t budget = int64_t{64} << 30);
// Starts a server on `models` (the first is the default); exits if it cannot.
std::unique_ptr<service::AttnServer> StartServer(
    const config::ServerOptions& options,
    const std::vector<std::shared_ptr<const catalogue::ServedModel>>& models);
// Shutdown(0) (a drain, with a durable store) and destroys the server; returns what it logged,
// which is kept out of the tables.
std::string StopServer(std::unique_ptr<service::AttnServer>& server);

// Milliseconds with two decimals under 10, one above.
std::string FormatMs(double ms);

// Prints `what: status` to stderr and exits 1 when `status` is not OK.
void CheckOk(const absl::Status& status, const std::string& what);
template <typename T>
T Must(absl::StatusOr<T> value, const std::string& what) {
  CheckOk(value.status(), what);
  return *std::move(value);
}

}  // namespace attnserve::bench
