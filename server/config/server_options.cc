#include "server/config/server_options.h"

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "server/config/flag_parsers.h"

namespace attnserve::config {
namespace {

// Declares every server flag on `flags`, bound to the fields of `*o`, each
// with its environment mirror EnvVarFor(name). Usage text lists them in this
// order.
void DeclareServerFlags(ServerOptions* o, FlagSet* flags) {
  FlagSet& f = *flags;
  f.AddHostPort("listen", &o->listen_address,
                "Address the gRPC service listens on.");
  f.AddCustom<std::string>(
      "http_listen", &o->http_listen, "HOST:PORT",
      "Address of the OpenAI-compatible HTTP API (/v1/models, /v1/completions, "
      "/v1/chat/completions, /v1/responses, /v1/conversations, /health) and the "
      "playground page (/); --http_listen= (empty, on the command line) disables it.",
      [](absl::string_view v, std::string* out) {
        if (!v.empty()) return ParseHostPort(v, out);
        out->clear();
        return absl::OkStatus();
      },
      [](const std::string& v) { return v.empty() ? std::string("none") : v; });
  f.AddIntAtLeast("http_max_streams", &o->http_max_streams, 1,
                  "Completions and chat requests the HTTP API runs at once "
                  "(streaming or not, waiting for a session included); one more "
                  "is answered 429 with retry-after: 1.");
  f.AddIntAtLeast("http_threads", &o->http_threads, 0,
                  "HTTP worker threads, one per open connection (0: "
                  "--http_max_streams + 8; the spare threads answer /health, "
                  "/v1/models and refusals while every stream slot is busy). An "
                  "idle keep-alive connection holds its thread for at most 5 s.");
  f.AddIntAtLeast("http_max_connections", &o->http_max_connections, 0,
                  "HTTP connections served at once (0: --http_threads - 4). A "
                  "connection over it, or over --http_max_connections_per_peer, is "
                  "answered only on /health, sent within 0.25 s; anything else gets "
                  "503 with retry-after. The threads left over serve those, so "
                  "/health stays answerable however many clients connect.");
  f.AddIntAtLeast("http_max_connections_per_peer", &o->http_max_connections_per_peer, 0,
                  "HTTP connections served at once from one client address (0: half "
                  "of --http_max_connections, or all of them up to 8). Behind a proxy "
                  "every client is the proxy: set it to --http_max_connections there.");
  f.AddDuration("http_request_timeout", &o->http_request_timeout, absl::Milliseconds(1),
                "How long one HTTP request may take to arrive whole (request line, "
                "headers and body, from its first byte; a new connection's, its TLS "
                "handshake included, from its accept); a slower one's connection is "
                "closed.");
  f.AddDuration("response_ttl", &o->response_ttl, absl::Seconds(1),
                "How long a stored response of /v1/responses (the state after "
                "it, for previous_response_id) is kept.");
  f.AddDuration("conversation_ttl", &o->conversation_ttl, absl::Seconds(1),
                "How long a conversation of /v1/conversations is kept after its last "
                "change, with the states of its responses (so it can be continued and "
                "forked at any answer; deleting it deletes them).");
  f.AddIntAtLeast("max_conversations_per_tenant", &o->max_conversations_per_tenant, 1,
                  "Most conversations one tenant (API key) keeps; creating or forking "
                  "one more is answered 429 until one is deleted or expires.");
  f.AddByteSize("conversation_memory_bytes", &o->conversation_memory_bytes,
                "Without a durable --session_store: memory for conversation records "
                "(their items and lists; their responses' states count in "
                "--checkpoint_memory_bytes). Past it, new conversations and responses "
                "in them are answered 429; expired records are swept.");
  f.AddByteSize("checkpoint_memory_bytes", &o->checkpoint_memory_bytes,
                "Memory for stored responses (/v1/responses, conversations' states): "
                "a cache of the durable --session_store, or (memory store) all there "
                "is: a response that does not fit is refused (429), never another "
                "evicted. Records here share their states' pages, so a conversation "
                "costs about its final state: the default holds 37,449 tokens of "
                "Qwen3-0.6B's 16-bit KV (114,688 bytes a token), five 20-turn "
                "conversations of 6,633 tokens (779 MB each).");
  f.AddByteSize("state_page_bytes", &o->state_page_bytes,
                "The size a page of stored state aims at: stored responses, kept chats "
                "and sessions written to the --session_store hold their KV rows in "
                "pages of a power-of-two number of tokens (16 to 4,096) of about this "
                "many bytes, each stored once per tenant and shared by every record "
                "that holds those rows. Smaller pages share more of a conversation's "
                "last turn and write less per turn; larger ones make fewer store "
                "operations.");
  f.AddIntAtLeast("tenant_max_responses", &o->tenant_max_responses, 0,
                  "Stored responses one tenant may keep at once (0: no limit); one more "
                  "is refused with 429 until some expire or are deleted. Counted by this "
                  "server: with a shared --session_store, each replica counts the "
                  "records it wrote.");
  f.AddByteSize("tenant_response_bytes", &o->tenant_response_bytes,
                "Bytes of stored responses one tenant may keep at once, counted like "
                "--tenant_max_responses (pages it newly wrote plus each record's own "
                "bytes). A turn whose record would not fit (its prompt and all of "
                "max_output_tokens at the model's bytes per token) is refused with "
                "429 before it runs. The default holds 28,086 tokens of Qwen3-0.6B's "
                "16-bit KV: four 20-turn conversations of 6,633 tokens (779 MB "
                "each).");
  f.AddByteSize("prefix_cache_bytes", &o->prefix_cache_bytes,
                "Memory for the chat states kept for clients that resend their "
                "history (a hit prefills only the new messages): least recently used "
                "out first, taken from the tenant holding the most. Kept states share "
                "pages as stored responses do; the default holds 37,449 tokens of "
                "Qwen3-0.6B's 16-bit KV.");
  f.AddByteSize("tenant_prefix_bytes", &o->tenant_prefix_bytes,
                "Bytes of kept chat states one tenant may hold: past it its oldest go, "
                "in memory and in the --session_store. The default holds 28,086 tokens "
                "of Qwen3-0.6B's 16-bit KV: the histories of four 20-turn "
                "conversations.");
  f.Add("web_dir", &o->web_dir,
        "Serve the playground page at / on the HTTP port from this directory's files "
        "(index.html, *.js, *.css, *.svg) instead of the copy built into the server "
        "(client/web/), read on every request.")
      .ValueName("DIR");
  f.AddHostPort("metrics_listen", &o->metrics_address,
                "Address serving Prometheus /metrics.");
  f.Add("tls_cert", &o->tls_cert,
        "PEM certificate chain of the server; with --tls_key, gRPC and the HTTP "
        "API are served over TLS only.")
      .ValueName("FILE");
  f.Add("tls_key", &o->tls_key, "PEM private key of --tls_cert.")
      .ValueName("FILE");
  f.Add("tls_client_ca", &o->tls_client_ca,
        "PEM CA certificates for mutual TLS: clients must present a "
        "certificate they signed. Needs --tls_cert and --tls_key.")
      .ValueName("FILE");
  f.Add("insecure", &o->insecure,
        "Allow --listen on a non-loopback address with neither TLS nor API "
        "keys (a network private by design, e.g. behind a proxy that "
        "authenticates).");
  f.Add("api_keys_file", &o->api_keys_file,
        "API keys and their tenants, one per line: KEY TENANT "
        "[max_sessions=N] [max_state_bytes=BYTES]. Calls must then send "
        "'authorization: Bearer KEY', and each tenant sees only its own "
        "sessions. None: one tenant, no keys.")
      .ValueName("FILE");
  f.AddCommaList("model_dirs", &o->model_dirs,
                 "Comma-separated model directories (Hugging Face layout or "
                 "attnserve's) or .gguf files (llama, qwen2, qwen3) to load; empty loads "
                 "the shipped default model.",
                 "none (the shipped default model)")
      .ValueName("DIR[,DIR...]");
  f.Add("weights_bf16", &o->weights_bf16,
        "Decode steps of up to 32 sessions read bf16 copies of the weight "
        "matrices (half the bytes, fp32 arithmetic; logits within about 0.05 "
        "of fp32 on the default model). Snapshots then only import into servers "
        "with the same setting.");
  f.Add("state_bf16", &o->state_bf16,
        "Keep the recurrent state of fixed-state modules (taylor, taylor_norm, "
        "linear) in bf16: half the state bytes per session (the memory budget and "
        "DescribeModel count them) and faster batched decode; updates are computed "
        "in fp32 and rounded to nearest even when stored. KV-cache modules "
        "(softmax, softmax_norm) ignore it. Snapshots keep fp32 values but then "
        "only import into servers with the same setting.");
  f.AddCustom<std::string>(
      "kv_cache_type", &o->kv_cache_type, "f16|bf16|q8_0|f32",
      "How the KV caches of softmax attention layers store keys and values: f16 "
      "(the default: half of f32's bytes per token, 11 significant bits), bf16 "
      "(half, 8 significant bits, f32's range), q8_0 (llama.cpp's: blocks of 32 "
      "values as a half scale and 32 int8, 34 bytes, 27% of f32's; head dims must be "
      "multiples of 32) or f32. Attention is computed in f32 from the stored rows. "
      "Memory budgets, DescribeModel and /v1/models count the stored bytes. A "
      "snapshot records its type; a server of another type imports it (rounding to "
      "nearest even, or quantizing, when its type is narrower), and continues it as "
      "a server of its own type would.",
      [](absl::string_view v, std::string* type) {
        if (v != "f16" && v != "bf16" && v != "q8_0" && v != "f32") {
          return absl::InvalidArgumentError("expected f16, bf16, q8_0 or f32");
        }
        *type = std::string(v);
        return absl::OkStatus();
      },
      [](const std::string& type) { return type; });
  f.Add("quantize", &o->quantize,
        "Quantize a model directory's weight matrices when loading it: q8_0 (about "
        "1.06 bytes per weight), q6_k (0.82), q5_k (0.69), q4_k (0.56) or q4_0 (0.56); "
        "decode then computes from the packed blocks. Empty keeps the file's types (F16 "
        "and BF16 stay 16-bit; GGUF files always keep theirs).");
  f.AddByteSize("memory_budget", &o->memory_budget_bytes,
                "Memory for all session state, in bytes or with a suffix "
                "KiB/MiB/GiB/KB/MB/GB.");
  f.AddIntAtLeast("max_sessions", &o->max_sessions, 1,
                  "Most sessions alive at once.");
  f.AddIntAtLeast("max_prompt_tokens", &o->max_prompt_tokens, 1,
                  "Most prompt tokens in one turn.");
  f.AddIntAtLeast("max_stop_strings", &o->max_stop_strings, 0,
                  "Most stop strings one request may carry (each is checked "
                  "after every token).");
  f.AddIntAtLeast("max_stop_bytes", &o->max_stop_bytes, 1,
                  "Longest stop string, in bytes.");
  f.AddIntAtLeast("max_generated_tokens", &o->max_generated_tokens, 1,
                  "Largest max_tokens a request may ask for.");
  f.AddIntAtLeast("default_max_tokens", &o->default_max_tokens, 1,
                  "max_tokens used when a request leaves it at 0; at most "
                  "--max_generated_tokens.");
  f.AddDuration("default_ttl", &o->default_ttl, absl::Seconds(1),
                "Idle session lifetime when a request sets none (e.g. 30m); at "
                "most --max_ttl.");
  f.AddDuration("max_ttl", &o->max_ttl, absl::Seconds(1),
                "Longest idle session lifetime a request may ask for.");
  f.AddIntAtLeast("threads", &o->threads, 1,
                  "LibTorch intra-op threads for the engine.");
  f.AddIntAtLeast("prefill_chunk_tokens", &o->prefill_chunk_tokens, 1,
                  "Prompt tokens one turn prefills in one model call.");
  f.AddIntAtLeast(
      "prefill_tokens_per_step", &o->prefill_tokens_per_step, 0,
      "Prompt tokens all prefilling turns together get per engine step, "
      "oldest first; bounds the pause decoding sessions see when many prompts "
      "arrive (0: no bound).");
  f.AddDuration("stream_idle_timeout", &o->stream_idle_timeout,
                absl::Milliseconds(100),
                "A stream whose client reads nothing this long is ended "
                "(DEADLINE_EXCEEDED) and its session released.");
  f.AddDuration(
      "keepalive", &o->keepalive, absl::Seconds(1),
      "How often the server pings an idle connection to find dead "
      "clients (gRPC keepalive; a client gone silent for 20 s more is "
      "dropped). Connections with no call for 30 min are closed.");
  f.AddDuration("shutdown_grace", &o->shutdown_grace, absl::ZeroDuration(),
                "How long running turns may continue after SIGTERM (0s stops "
                "at once).");
  f.AddCustom<std::string>(
      "session_store", &o->session_store,
      "memory|dir:PATH|redis://HOST:PORT[/DB]",
      "Where sessions are saved: memory (nowhere; a restart loses them), a "
      "directory (one file per session), or a Redis server shared by "
      "replicas.",
      [](absl::string_view v, std::string* out) {
        if (v != "memory" && !absl::StartsWith(v, "dir:") &&
            !absl::StartsWith(v, "redis://")) {
          return absl::InvalidArgumentError(
              "expected memory, dir:PATH or redis://HOST:PORT");
        }
        if (v == "dir:") return absl::InvalidArgumentError("dir: needs a path");
        *out = std::string(v);
        return absl::OkStatus();
      },
      [](const std::string& v) { return v; });
  f.AddCustom<bool>(
      "persist", &o->persist_each_turn, "none|each_turn",
      "each_turn saves a session after every completed turn (a crash loses at "
      "most the turn in flight); none saves on spill and drain only. Needs a "
      "durable --session_store.",
      [](absl::string_view v, bool* each_turn) {
        if (v != "none" && v != "each_turn") {
          return absl::InvalidArgumentError("expected none or each_turn");
        }
        *each_turn = v == "each_turn";
        return absl::OkStatus();
      },
      [](const bool& each_turn) {
        return std::string(each_turn ? "each_turn" : "none");
      });
  f.AddCustom<absl::Duration>(
      "spill_after", &o->spill_after, "DURATION|never",
      "Idle time after which a session leaves memory for the durable "
      "--session_store and frees its budget (e.g. 5m); it is loaded back on "
      "its next use.",
      [](absl::string_view v, absl::Duration* out) {
        if (v == "never") {
          *out = absl::InfiniteDuration();
          return absl::OkStatus();
        }
        return ParseDurationAtLeast(v, absl::Milliseconds(1), out);
      },
      [](const absl::Duration& d) {
        return d == absl::InfiniteDuration() ? std::string("never")
                                             : absl::FormatDuration(d);
      });
  f.AddDuration("lease_ttl", &o->lease_ttl, absl::Milliseconds(100),
                "With a durable --session_store: how long a session's store "
                "lease outlives its holder (a crashed server's sessions are "
                "free again after it).");
  f.AddDuration("lease_wait", &o->lease_wait, absl::ZeroDuration(),
                "How long a turn waits for another server's turn on the same "
                "session to end before answering UNAVAILABLE (clients retry).");
}

// Limits that span two flags, in terms of what was given where.
absl::Status CheckCrossFlagLimits(const ServerOptions& options,
                                  const FlagSet& flags) {
  auto exceeds = [&](absl::string_view lower, absl::string_view upper) {
    return absl::InvalidArgumentError(absl::StrCat(
        flags.Describe(lower), " must not exceed ", flags.Describe(upper)));
  };
  if (options.default_max_tokens > options.max_generated_tokens) {
    return exceeds("default_max_tokens", "max_generated_tokens");
  }
  if (options.default_ttl > options.max_ttl)
    return exceeds("default_ttl", "max_ttl");
  if (options.http_threads != 0 &&
      options.http_threads <= options.http_max_streams) {
    return absl::InvalidArgumentError(absl::StrCat(
        flags.Describe("http_threads"), " must exceed ",
        flags.Describe("http_max_streams"),
        ": /health and refusals need threads while every stream slot is busy"));
  }
  const int http_threads = options.http_threads > 0
                               ? options.http_threads
                               : options.http_max_streams + defaults::kHttpSpareThreads;
  if (options.http_max_connections >= http_threads) {
    return absl::InvalidArgumentError(absl::StrCat(
        flags.Describe("http_max_connections"), " must be below the HTTP threads (",
        http_threads, "): connections over the cap need threads to be answered"));
  }
  if (options.tls_cert.empty() != options.tls_key.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flags.Describe("tls_cert"), " and ",
                     flags.Describe("tls_key"), ": TLS needs both"));
  }
  if (!options.tls_client_ca.empty() && options.tls_cert.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flags.Describe("tls_client_ca"),
                     " (mutual TLS) needs --tls_cert and --tls_key"));
  }
  if (options.session_store == "memory") {
    for (const char* needs_store : {"persist", "spill_after"}) {
      const bool set = needs_store == std::string("persist")
                           ? options.persist_each_turn
                           : options.spill_after != absl::InfiniteDuration();
      if (!set) continue;
      return absl::InvalidArgumentError(absl::StrCat(
          flags.Describe(needs_store), " needs a durable ",
          flags.Describe("session_store"), ": dir:PATH or redis://HOST:PORT"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ServerOptions> ParseServerOptions(int argc, char** argv,
                                                 const EnvLookup& env,
                                                 bool* help) {
  *help = false;
  for (int i = 1; i < argc; ++i) {
    if (absl::string_view(argv[i]) == "--help" ||
        absl::string_view(argv[i]) == "-h") {
      *help = true;
      return ServerOptions{};
    }
  }
  ServerOptions options;
  FlagSet flags(FlagSet::kEnvForEveryFlag);
  DeclareServerFlags(&options, &flags);
  absl::StatusOr<std::vector<std::string>> rest =
      flags.Parse(std::vector<std::string>(argv + 1, argv + argc), env);
  if (!rest.ok()) {
    if (absl::StartsWith(rest.status().message(), "unknown flag")) {
      return absl::InvalidArgumentError(absl::StrCat(
          rest.status().message(), " (see --help for the list of flags)"));
    }
    return rest.status();
  }
  if (!rest->empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unexpected argument \"", rest->front(),
                     "\"; flags look like --name=value (see --help)"));
  }
  if (absl::Status status = CheckCrossFlagLimits(options, flags);
      !status.ok()) {
    return status;
  }
  return options;
}

std::string ServerUsage(const std::string& program) {
  ServerOptions defaults;
  FlagSet flags(FlagSet::kEnvForEveryFlag);
  bool help = false;
  flags.Add("help", &help, "Print this help and exit (also -h).").Env("");
  DeclareServerFlags(&defaults, &flags);
  return absl::StrCat(
      "Usage: ", program, " [--flag=value | --flag value]...\n\n",
      "Every flag can also be set through the environment variable shown with "
      "it;\na flag on the command line wins over the environment.\n\n",
      flags.Help());
}

}  // namespace attnserve::config
