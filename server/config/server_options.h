// Server start-up options: the ServerOptions struct and its command-line /
// environment parser. Torch-free; depends only on abseil.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "server/config/defaults.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/config/flag_set.h"

namespace attnserve::config {

// Everything the server binary needs to know at start-up. The field
// initialisers are the defaults; ParseServerOptions overrides them from flags
// and environment variables.
struct ServerOptions {
  // host:port the gRPC service listens on (--listen).
  std::string listen_address = "127.0.0.1:50051";
  // host:port of the OpenAI-compatible HTTP API (--http_listen); empty: no HTTP server.
  // Port 0 binds an ephemeral port (tests).
  std::string http_listen = defaults::kHttpListen;
  // Generating HTTP requests (completions, chat) in flight at once, waiting for their
  // session included (--http_max_streams); one more is answered 429 at once.
  int http_max_streams = defaults::kHttpMaxStreams;
  // cpp-httplib's worker threads, one per open connection (--http_threads); 0 means
  // http_max_streams + kHttpSpareThreads. Must exceed http_max_streams.
  int http_threads = 0;
  // HTTP connections served at once (--http_max_connections); 0 means http_threads -
  // kHttpReservedThreads. Must be below http_threads.
  int http_max_connections = 0;
  // Of them from one peer address (--http_max_connections_per_peer); 0 means half of
  // http_max_connections.
  int http_max_connections_per_peer = 0;
  // How long one HTTP request's head and body may take to arrive
  // (--http_request_timeout).
  absl::Duration http_request_timeout = defaults::kHttpRequestTimeout;
  // How long a stored response (/v1/responses, store: true) lives (--response_ttl).
  absl::Duration response_ttl = defaults::kResponseTtl;
  // How long a conversation lives after its last change (--conversation_ttl).
  absl::Duration conversation_ttl = defaults::kConversationTtl;
  // Most conversations one tenant keeps (--max_conversations_per_tenant); one more is
  // refused (HTTP 429), never another's evicted.
  int max_conversations_per_tenant = defaults::kMaxConversationsPerTenant;
  // Without a durable store: bytes of conversation records kept in memory
  // (--conversation_memory_bytes); past them new conversations and turns are refused.
  int64_t conversation_memory_bytes = defaults::kConversationMemoryBytes;
  // Bytes of stored responses in memory; without a durable store, all there is (a
  // write past it is refused, never another's evicted) (--checkpoint_memory_bytes).
  int64_t checkpoint_memory_bytes = defaults::kCheckpointMemoryBytes;
  // What one page of stored KV rows aims at (--state_page_bytes).
  int64_t state_page_bytes = defaults::kStatePageBytes;
  // Each tenant's stored responses at most, by count (0: no limit) and bytes, counted
  // by this server (--tenant_max_responses, --tenant_response_bytes).
  int tenant_max_responses = defaults::kTenantMaxResponses;
  int64_t tenant_response_bytes = defaults::kTenantResponseBytes;
  // Bytes of kept chat states in memory (--prefix_cache_bytes), and the most one tenant
  // keeps (--tenant_prefix_bytes).
  int64_t prefix_cache_bytes = defaults::kPrefixCacheBytes;
  int64_t tenant_prefix_bytes = defaults::kTenantPrefixBytes;
  // A directory whose files replace the built-in playground page at / (--web_dir);
  // empty: the built-in page.
  std::string web_dir;
  // host:port serving Prometheus /metrics (--metrics_listen).
  std::string metrics_address = "127.0.0.1:9464";
  // PEM certificate chain and private key: set both to serve gRPC over TLS
  // (--tls_cert, --tls_key). Empty: plaintext.
  std::string tls_cert;
  std::string tls_key;
  // PEM CA certificates for mutual TLS (--tls_client_ca): clients must present a
  // certificate signed by one of them. Empty: no client certificate is asked for.
  std::string tls_client_ca;
  // Allow listening on a non-loopback address with neither TLS nor API keys
  // (--insecure), for networks that are private by design. See CheckListenSecurity.
  bool insecure = false;
  // API keys and the tenants they name (--api_keys_file; format in
  // server/service/api_keys.h). Empty: one tenant, no authentication.
  std::string api_keys_file;
  // Model directories to load (--model_dirs, comma-separated). Empty means the
  // shipped default model(s); the caller decides what that is.
  std::vector<std::string> model_dirs;
  // Decode from bf16 copies of the weight matrices (--weights_bf16; model::LoadOptions).
  bool weights_bf16 = false;
  // Keep fixed-state modules' recurrent states in bf16 (--state_bf16;
  // model::LoadOptions::state_bf16).
  bool state_bf16 = false;
  // How KV caches store keys and values: "f32", "f16" or "bf16" (--kv_cache_type;
  // attention::AttentionOptions::kv_cache_type).
  std::string kv_cache_type = "f16";
  // Quantize a model directory's matrices at load: "" (keep the file's types), "q8_0",
  // "q4_0", "q4_k", "q5_k" or "q6_k" (--quantize; model::LoadOptions::quantize). GGUF
  // files keep their own types.
  std::string quantize;
  // Upper bound on the bytes of all session state together (--memory_budget).
  int64_t memory_budget_bytes = defaults::kMemoryBudgetBytes;
  // Most sessions alive at once (--max_sessions).
  int max_sessions = defaults::kMaxSessions;
  // Most prompt tokens a single turn may carry (--max_prompt_tokens).
  int max_prompt_tokens = defaults::kMaxPromptTokens;
  // Most stop strings one request may carry (--max_stop_strings), and the longest one
  // in bytes (--max_stop_bytes): every stop string is checked after every token on the
  // engine thread.
  int max_stop_strings = defaults::kMaxStopStrings;
  int max_stop_bytes = defaults::kMaxStopBytes;
  // Largest max_tokens a request may ask for (--max_generated_tokens).
  int max_generated_tokens = defaults::kMaxGeneratedTokens;
  // max_tokens used when a request leaves it at 0 (--default_max_tokens); never
  // more than max_generated_tokens.
  int default_max_tokens = defaults::kDefaultMaxTokens;
  // Idle lifetime of a session whose request sets no TTL (--default_ttl); never
  // more than max_ttl.
  absl::Duration default_ttl = defaults::kDefaultTtl;
  // Longest idle lifetime a request may ask for (--max_ttl).
  absl::Duration max_ttl = defaults::kMaxTtl;
  // LibTorch intra-op threads for the engine (--threads). One is fastest for small
  // models: measured 1,780 vs 1,057 tokens/s for one session with 2
  // (tests/bench/README.md, "Continuous batching end to end").
  int threads = defaults::kThreads;
  // Scheduler::Options: prompt tokens per model call, and per engine step in all.
  int prefill_chunk_tokens = defaults::kPrefillChunkTokens;
  int prefill_tokens_per_step = defaults::kPrefillTokensPerStep;
  // A stream whose client reads nothing this long ends (--stream_idle_timeout).
  absl::Duration stream_idle_timeout = defaults::kStreamIdleTimeout;
  // gRPC keepalive ping interval on idle connections (--keepalive).
  absl::Duration keepalive = absl::Minutes(2);
  // How long running turns may continue after SIGTERM before the server stops
  // (--shutdown_grace).
  absl::Duration shutdown_grace = absl::Seconds(10);
  // Where sessions are saved (--session_store): "memory" (nowhere: they die with the
  // process), "dir:PATH", or "redis://HOST:PORT[/DB]".
  std::string session_store = "memory";
  // Save each session after every completed turn (--persist=each_turn), not only on
  // spill and drain (--persist=none). Needs a durable session_store.
  bool persist_each_turn = false;
  // Idle time after which a session leaves memory for the durable store
  // (--spill_after); infinite (the default, "never") keeps it in memory until its TTL.
  absl::Duration spill_after = absl::InfiniteDuration();
  // A session's store lease lapses this long after its holder stops renewing it (a
  // crashed server's sessions are free again after it) (--lease_ttl).
  absl::Duration lease_ttl = defaults::kLeaseTtl;
  // How long a claim waits for another server's turn on the same session to end before
  // answering UNAVAILABLE (--lease_wait).
  absl::Duration lease_wait = defaults::kLeaseWait;
};

// Parses argv[1..argc) into ServerOptions (declared through FlagSet in
// flag_set.h). Flags are `--name=value` or `--name value`. Every flag has an
// environment-variable mirror EnvVarFor(name) = ATTNSERVE_<UPPER_NAME> (e.g.
// --memory_budget <-> ATTNSERVE_MEMORY_BUDGET), read through `env` (GetEnv in
// production); a flag on the command line wins over the environment,
// and an empty variable counts as unset.
// Returns InvalidArgument naming the flag and where the value came from (the
// command line or environment variable ATTNSERVE_...) for unknown flags,
// missing values, unparsable values and out-of-range values (including
// default_max_tokens > max_generated_tokens and default_ttl > max_ttl).
// When --help or -h appears, sets *help to true and returns the defaults
// without parsing anything else; otherwise sets *help to false.
// `help` must not be null.
absl::StatusOr<ServerOptions> ParseServerOptions(int argc, char** argv,
                                                 const EnvLookup& env,
                                                 bool* help);

// The text --help prints for `program`: a usage line, then one entry per flag
// with its environment variable, default and help.
std::string ServerUsage(const std::string& program);

}  // namespace attnserve::config
