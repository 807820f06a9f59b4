#include "server/config/server_options.h"

#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "server/config/flag_parsers.h"

namespace attnserve::config {
namespace {

// A file flag's value for the usage text.
std::string ShowPath(const std::string& path) {
  return path.empty() ? std::string("none") : path;
}

// One command-line flag. Its environment variable, ATTNSERVE_<UPPER_NAME>, is
// derived from `name` by EnvVarName so the two cannot drift apart.
struct Flag {
  const char* name;        // Without the leading "--".
  // Placeholder shown in the usage text; nullptr for a switch, which takes no
  // value (`--name` means true) but accepts `--name=true|false`.
  const char* value_name;
  const char* help;        // One-line description for the usage text.
  // Renders this flag's field of `options`; applied to ServerOptions{} for the
  // default.
  std::string (*show)(const ServerOptions& options);
  // Parses and validates `value` into its field of `options`; leaves it
  // unchanged on error.
  absl::Status (*set)(absl::string_view value, ServerOptions* options);
};

// Every flag, declared once. Usage text lists them in this order.
const Flag kFlags[] = {
    {"listen", "HOST:PORT", "Address the gRPC service listens on.",
     [](const ServerOptions& o) { return o.listen_address; },
     [](absl::string_view v, ServerOptions* o) {
       return ParseHostPort(v, &o->listen_address);
     }},
    {"metrics_listen", "HOST:PORT", "Address serving Prometheus /metrics.",
     [](const ServerOptions& o) { return o.metrics_address; },
     [](absl::string_view v, ServerOptions* o) {
       return ParseHostPort(v, &o->metrics_address);
     }},
    {"tls_cert", "FILE",
     "PEM certificate chain of the server; with --tls_key, gRPC is served over TLS.",
     [](const ServerOptions& o) { return ShowPath(o.tls_cert); },
     [](absl::string_view v, ServerOptions* o) {
       o->tls_cert = std::string(v);
       return absl::OkStatus();
     }},
    {"tls_key", "FILE", "PEM private key of --tls_cert.",
     [](const ServerOptions& o) { return ShowPath(o.tls_key); },
     [](absl::string_view v, ServerOptions* o) {
       o->tls_key = std::string(v);
       return absl::OkStatus();
     }},
    {"tls_client_ca", "FILE",
     "PEM CA certificates for mutual TLS: clients must present a certificate they "
     "signed. Needs --tls_cert and --tls_key.",
     [](const ServerOptions& o) { return ShowPath(o.tls_client_ca); },
     [](absl::string_view v, ServerOptions* o) {
       o->tls_client_ca = std::string(v);
       return absl::OkStatus();
     }},
    {"insecure", nullptr,
     "Allow --listen on a non-loopback address with neither TLS nor API keys (a "
     "network private by design, e.g. behind a proxy that authenticates).",
     [](const ServerOptions& o) { return std::string(o.insecure ? "true" : "false"); },
     [](absl::string_view v, ServerOptions* o) {
       if (!absl::SimpleAtob(v, &o->insecure)) {
         return absl::InvalidArgumentError("expected true or false");
       }
       return absl::OkStatus();
     }},
    {"api_keys_file", "FILE",
     "API keys and their tenants, one per line: KEY TENANT [max_sessions=N] "
     "[max_state_bytes=BYTES]. Calls must then send 'authorization: Bearer KEY', and "
     "each tenant sees only its own sessions. None: one tenant, no keys.",
     [](const ServerOptions& o) { return ShowPath(o.api_keys_file); },
     [](absl::string_view v, ServerOptions* o) {
       o->api_keys_file = std::string(v);
       return absl::OkStatus();
     }},
    {"model_dirs", "DIR[,DIR...]",
     "Comma-separated model directories to load; empty loads the shipped "
     "default model.",
     [](const ServerOptions& o) {
       return o.model_dirs.empty()
                  ? std::string("none (the shipped default model)")
                  : absl::StrJoin(o.model_dirs, ",");
     },
     [](absl::string_view v, ServerOptions* o) {
       o->model_dirs = SplitCommaList(v);
       return absl::OkStatus();
     }},
    {"memory_budget", "BYTES",
     "Memory for all session state, in bytes or with a suffix "
     "KiB/MiB/GiB/KB/MB/GB.",
     [](const ServerOptions& o) {
       return FormatByteSize(o.memory_budget_bytes);
     },
     [](absl::string_view v, ServerOptions* o) {
       return ParseByteSize(v, &o->memory_budget_bytes);
     }},
    {"max_sessions", "N", "Most sessions alive at once.",
     [](const ServerOptions& o) { return absl::StrCat(o.max_sessions); },
     [](absl::string_view v, ServerOptions* o) {
       return ParseIntAtLeast(v, 1, &o->max_sessions);
     }},
    {"max_prompt_tokens", "N", "Most prompt tokens in one turn.",
     [](const ServerOptions& o) { return absl::StrCat(o.max_prompt_tokens); },
     [](absl::string_view v, ServerOptions* o) {
       return ParseIntAtLeast(v, 1, &o->max_prompt_tokens);
     }},
    {"max_stop_strings", "N",
     "Most stop strings one request may carry (each is checked after every token).",
     [](const ServerOptions& o) { return absl::StrCat(o.max_stop_strings); },
     [](absl::string_view v, ServerOptions* o) {
       return ParseIntAtLeast(v, 0, &o->max_stop_strings);
     }},
    {"max_stop_bytes", "N", "Longest stop string, in bytes.",
     [](const ServerOptions& o) { return absl::StrCat(o.max_stop_bytes); },
     [](absl::string_view v, ServerOptions* o) {
       return ParseIntAtLeast(v, 1, &o->max_stop_bytes);
     }},
    {"max_generated_tokens", "N", "Largest max_tokens a request may ask for.",
     [](const ServerOptions& o) {
       return absl::StrCat(o.max_generated_tokens);
     },
     [](absl::string_view v, ServerOptions* o) {
       return ParseIntAtLeast(v, 1, &o->max_generated_tokens);
     }},
    {"default_max_tokens", "N",
     "max_tokens used when a request leaves it at 0; at most "
     "--max_generated_tokens.",
     [](const ServerOptions& o) { return absl::StrCat(o.default_max_tokens); },
     [](absl::string_view v, ServerOptions* o) {
       return ParseIntAtLeast(v, 1, &o->default_max_tokens);
     }},
    {"default_ttl", "DURATION",
     "Idle session lifetime when a request sets none (e.g. 30m); at most "
     "--max_ttl.",
     [](const ServerOptions& o) { return absl::FormatDuration(o.default_ttl); },
     [](absl::string_view v, ServerOptions* o) {
       return ParseDurationAtLeast(v, absl::Seconds(1), &o->default_ttl);
     }},
    {"max_ttl", "DURATION",
     "Longest idle session lifetime a request may ask for.",
     [](const ServerOptions& o) { return absl::FormatDuration(o.max_ttl); },
     [](absl::string_view v, ServerOptions* o) {
       return ParseDurationAtLeast(v, absl::Seconds(1), &o->max_ttl);
     }},
    {"threads", "N", "LibTorch intra-op threads for the engine.",
     [](const ServerOptions& o) { return absl::StrCat(o.threads); },
     [](absl::string_view v, ServerOptions* o) {
       return ParseIntAtLeast(v, 1, &o->threads);
     }},
    {"prefill_chunk_tokens", "N",
     "Prompt tokens one turn prefills in one model call.",
     [](const ServerOptions& o) { return absl::StrCat(o.prefill_chunk_tokens); },
     [](absl::string_view v, ServerOptions* o) {
       return ParseIntAtLeast(v, 1, &o->prefill_chunk_tokens);
     }},
    {"prefill_tokens_per_step", "N",
     "Prompt tokens all prefilling turns together get per engine step, oldest first; "
     "bounds the pause decoding sessions see when many prompts arrive (0: no bound).",
     [](const ServerOptions& o) { return absl::StrCat(o.prefill_tokens_per_step); },
     [](absl::string_view v, ServerOptions* o) {
       return ParseIntAtLeast(v, 0, &o->prefill_tokens_per_step);
     }},
    {"stream_idle_timeout", "DURATION",
     "A stream whose client reads nothing this long is ended (DEADLINE_EXCEEDED) and "
     "its session released.",
     [](const ServerOptions& o) { return absl::FormatDuration(o.stream_idle_timeout); },
     [](absl::string_view v, ServerOptions* o) {
       return ParseDurationAtLeast(v, absl::Milliseconds(100), &o->stream_idle_timeout);
     }},
    {"keepalive", "DURATION",
     "How often the server pings an idle connection to find dead clients (gRPC "
     "keepalive; a client gone silent for 20 s more is dropped). Connections with no "
     "call for 30 min are closed.",
     [](const ServerOptions& o) { return absl::FormatDuration(o.keepalive); },
     [](absl::string_view v, ServerOptions* o) {
       return ParseDurationAtLeast(v, absl::Seconds(1), &o->keepalive);
     }},
    {"shutdown_grace", "DURATION",
     "How long running turns may continue after SIGTERM (0s stops at once).",
     [](const ServerOptions& o) {
       return absl::FormatDuration(o.shutdown_grace);
     },
     [](absl::string_view v, ServerOptions* o) {
       return ParseDurationAtLeast(v, absl::ZeroDuration(), &o->shutdown_grace);
     }},
    {"session_store", "memory|dir:PATH|redis://HOST:PORT[/DB]",
     "Where sessions are saved: memory (nowhere; a restart loses them), a directory "
     "(one file per session), or a Redis server shared by replicas.",
     [](const ServerOptions& o) { return o.session_store; },
     [](absl::string_view v, ServerOptions* o) {
       if (v != "memory" && !absl::StartsWith(v, "dir:") && !absl::StartsWith(v, "redis://")) {
         return absl::InvalidArgumentError("expected memory, dir:PATH or redis://HOST:PORT");
       }
       if (v == "dir:") return absl::InvalidArgumentError("dir: needs a path");
       o->session_store = std::string(v);
       return absl::OkStatus();
     }},
    {"persist", "none|each_turn",
     "each_turn saves a session after every completed turn (a crash loses at most the "
     "turn in flight); none saves on spill and drain only. Needs a durable "
     "--session_store.",
     [](const ServerOptions& o) {
       return std::string(o.persist_each_turn ? "each_turn" : "none");
     },
     [](absl::string_view v, ServerOptions* o) {
       if (v != "none" && v != "each_turn") {
         return absl::InvalidArgumentError("expected none or each_turn");
       }
       o->persist_each_turn = v == "each_turn";
       return absl::OkStatus();
     }},
    {"spill_after", "DURATION|never",
     "Idle time after which a session leaves memory for the durable --session_store "
     "and frees its budget (e.g. 5m); it is loaded back on its next use.",
     [](const ServerOptions& o) {
       return o.spill_after == absl::InfiniteDuration()
                  ? std::string("never")
                  : absl::FormatDuration(o.spill_after);
     },
     [](absl::string_view v, ServerOptions* o) {
       if (v == "never") {
         o->spill_after = absl::InfiniteDuration();
         return absl::OkStatus();
       }
       return ParseDurationAtLeast(v, absl::Milliseconds(1), &o->spill_after);
     }},
    {"lease_ttl", "DURATION",
     "With a durable --session_store: how long a session's store lease outlives its "
     "holder (a crashed server's sessions are free again after it).",
     [](const ServerOptions& o) { return absl::FormatDuration(o.lease_ttl); },
     [](absl::string_view v, ServerOptions* o) {
       return ParseDurationAtLeast(v, absl::Milliseconds(100), &o->lease_ttl);
     }},
    {"lease_wait", "DURATION",
     "How long a turn waits for another server's turn on the same session to end "
     "before answering UNAVAILABLE (clients retry).",
     [](const ServerOptions& o) { return absl::FormatDuration(o.lease_wait); },
     [](absl::string_view v, ServerOptions* o) {
       return ParseDurationAtLeast(v, absl::ZeroDuration(), &o->lease_wait);
     }},
};
constexpr size_t kNumFlags = sizeof(kFlags) / sizeof(kFlags[0]);

std::string EnvVarName(const Flag& flag) {
  return absl::StrCat("ATTNSERVE_", absl::AsciiStrToUpper(flag.name));
}

const Flag* FindFlag(absl::string_view name) {
  for (const Flag& flag : kFlags) {
    if (name == flag.name) return &flag;
  }
  return nullptr;
}

// Where a flag's value came from, for error messages.
struct Setting {
  std::optional<std::string> value;  // nullopt: the default was kept.
  std::string origin;  // "the command line", "environment variable X".
};

bool IsHelp(absl::string_view arg) { return arg == "--help" || arg == "-h"; }

// Fills settings[i] for every kFlags[i] given in argv; later repeats win.
absl::Status CollectArgv(int argc, char** argv,
                         std::vector<Setting>* settings) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (!absl::ConsumePrefix(&arg, "--")) {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument \"", arg,
                       "\"; flags look like --name=value (see --help)"));
    }
    const size_t eq = arg.find('=');
    const absl::string_view name = arg.substr(0, eq);
    const Flag* flag = FindFlag(name);
    if (flag == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown flag --", name, " (see --help for the list of flags)"));
    }
    Setting& setting = (*settings)[flag - kFlags];
    setting.origin = "the command line";
    if (eq != absl::string_view::npos) {
      setting.value = std::string(arg.substr(eq + 1));
    } else if (flag->value_name == nullptr) {
      setting.value = "true";
    } else if (i + 1 < argc && !absl::StartsWith(argv[i + 1], "--")) {
      setting.value = argv[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "flag --", name, " needs a value: --", name, "=", flag->value_name));
    }
  }
  return absl::OkStatus();
}

// "--name=value (from <origin>)", or "--name=value (default)" when unset.
std::string Describe(absl::string_view name, const ServerOptions& options,
                     const std::vector<Setting>& settings) {
  const Flag* flag = FindFlag(name);
  if (flag == nullptr) std::abort();  // A misspelt name in this file.
  const Setting& setting = settings[flag - kFlags];
  if (!setting.value.has_value()) {
    return absl::StrCat("--", name, "=", flag->show(options), " (default)");
  }
  return absl::StrCat("--", name, "=", *setting.value, " (from ",
                      setting.origin, ")");
}

// Limits that span two flags: the first named flag must not exceed the second.
absl::Status CheckCrossFlagLimits(const ServerOptions& options,
                                  const std::vector<Setting>& settings) {
  auto exceeds = [&](absl::string_view lower, absl::string_view upper) {
    return absl::InvalidArgumentError(
        absl::StrCat(Describe(lower, options, settings), " must not exceed ",
                     Describe(upper, options, settings)));
  };
  if (options.default_max_tokens > options.max_generated_tokens) {
    return exceeds("default_max_tokens", "max_generated_tokens");
  }
  if (options.default_ttl > options.max_ttl)
    return exceeds("default_ttl", "max_ttl");
  if (options.tls_cert.empty() != options.tls_key.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(Describe("tls_cert", options, settings), " and ",
                     Describe("tls_key", options, settings), ": TLS needs both"));
  }
  if (!options.tls_client_ca.empty() && options.tls_cert.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(Describe("tls_client_ca", options, settings),
                     " (mutual TLS) needs --tls_cert and --tls_key"));
  }
  if (options.session_store == "memory") {
    if (options.persist_each_turn) {
      return absl::InvalidArgumentError(absl::StrCat(
          Describe("persist", options, settings), " needs a durable ",
          Describe("session_store", options, settings), ": dir:PATH or redis://HOST:PORT"));
    }
    if (options.spill_after != absl::InfiniteDuration()) {
      return absl::InvalidArgumentError(absl::StrCat(
          Describe("spill_after", options, settings), " needs a durable ",
          Describe("session_store", options, settings), ": dir:PATH or redis://HOST:PORT"));
    }
  }
  return absl::OkStatus();
}

// Fills the settings argv left unset from `env`, then parses every set value
// into `options`.
absl::Status ApplySettings(const EnvLookup& env, std::vector<Setting>* settings,
                           ServerOptions* options) {
  for (size_t i = 0; i < kNumFlags; ++i) {
    const Flag& flag = kFlags[i];
    Setting& setting = (*settings)[i];
    if (!setting.value.has_value()) {
      const std::string var = EnvVarName(flag);
      std::optional<std::string> from_env = env(var);
      if (!from_env.has_value() || from_env->empty()) continue;
      setting = {std::move(from_env),
                 absl::StrCat("environment variable ", var)};
    }
    if (absl::Status status = flag.set(*setting.value, options); !status.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag.name, ": invalid value \"", *setting.value,
                       "\" (from ", setting.origin, "): ", status.message()));
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
    if (IsHelp(argv[i])) {
      *help = true;
      return ServerOptions{};
    }
  }
  std::vector<Setting> settings(kNumFlags);
  if (absl::Status status = CollectArgv(argc, argv, &settings); !status.ok())
    return status;
  ServerOptions options;
  if (absl::Status status = ApplySettings(env, &settings, &options);
      !status.ok()) {
    return status;
  }
  if (absl::Status status = CheckCrossFlagLimits(options, settings);
      !status.ok()) {
    return status;
  }
  return options;
}

std::string ServerUsage(const std::string& program) {
  const ServerOptions defaults;
  std::string usage =
      absl::StrCat("Usage: ", program, " [--flag=value | --flag value]...\n\n",
                   "Every flag can also be set through the environment "
                   "variable shown with it;\n"
                   "a flag on the command line wins over the environment.\n\n",
                   "  -h, --help\n      Print this help and exit.\n");
  for (const Flag& flag : kFlags) {
    const std::string value =
        flag.value_name == nullptr ? "" : absl::StrCat("=", flag.value_name);
    absl::StrAppend(&usage, "  --", flag.name, value, "\n      ",
                    flag.help, "\n      env ", EnvVarName(flag), ", default ",
                    flag.show(defaults), "\n");
  }
  return usage;
}

std::optional<std::string> GetEnv(const std::string& name) {
  const char* value = std::getenv(name.c_str());
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

}  // namespace attnserve::config
