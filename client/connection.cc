#include "client/connection.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include <grpcpp/support/client_interceptor.h>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace attnserve::client {
namespace {

std::chrono::system_clock::time_point After(double seconds) {
  return std::chrono::system_clock::now() +
         std::chrono::duration_cast<std::chrono::system_clock::duration>(
             std::chrono::duration<double>(seconds));
}

const char* StateName(grpc_connectivity_state state) {
  switch (state) {
    case GRPC_CHANNEL_IDLE:
      return "IDLE";
    case GRPC_CHANNEL_CONNECTING:
      return "CONNECTING";
    case GRPC_CHANNEL_READY:
      return "READY";
    case GRPC_CHANNEL_TRANSIENT_FAILURE:
      return "TRANSIENT_FAILURE";
    case GRPC_CHANNEL_SHUTDOWN:
      return "SHUTDOWN";
  }
  return "UNKNOWN";
}

// Why the channel did not connect. gRPC keeps the last connect error off the
// channel API, but a fail-fast call on a channel in TRANSIENT_FAILURE returns
// it at once ("... Connection refused"); the health service is the one method
// every server has.
std::string ConnectFailureReason(const std::shared_ptr<grpc::Channel>& channel,
                                 double waited_seconds) {
  const grpc_connectivity_state state = channel->GetState(false);
  if (state == GRPC_CHANNEL_TRANSIENT_FAILURE) {
    grpc::ClientContext context;
    context.set_deadline(After(0.5));
    grpc::health::v1::HealthCheckRequest request;
    grpc::health::v1::HealthCheckResponse response;
    grpc::Status status = grpc::health::v1::Health::NewStub(channel)->Check(
        &context, request, &response);
    if (status.error_code() == grpc::StatusCode::UNAVAILABLE &&
        !status.error_message().empty()) {
      return status.error_message();
    }
  }
  return absl::StrFormat("not connected after %gs (channel state %s)",
                         waited_seconds, StateName(state));
}

bool WantsTls(const GlobalOptions& options) {
  return options.tls || !options.tls_ca.empty() || !options.tls_cert.empty() ||
         !options.tls_key.empty() || !options.tls_server_name.empty();
}

// The bytes of the file a --tls_* flag names; InvalidArgument naming both if unreadable.
absl::StatusOr<std::string> ReadTlsFile(const char* flag,
                                        const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  std::string text;
  bool failed = file == nullptr;
  int error = errno;
  if (file != nullptr) {
    char buffer[4096];
    size_t n;
    while ((n = std::fread(buffer, 1, sizeof(buffer), file)) > 0) {
      text.append(buffer, n);
    }
    failed = std::ferror(file) != 0;
    error = errno;
    std::fclose(file);
  }
  if (failed) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attnserve: cannot read --", flag, " file ", path, ": ", std::strerror(error)));
  }
  return text;
}

// Insecure credentials, or TLS ones when `options` asks for TLS (any tls_* set),
// with the server-name override put in `args`.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentialsFor(
    const GlobalOptions& options, grpc::ChannelArguments* args) {
  if (!WantsTls(options)) return grpc::InsecureChannelCredentials();
  if (options.tls_cert.empty() != options.tls_key.empty()) {
    return absl::InvalidArgumentError(
        "attnserve: --tls_cert and --tls_key go together (the client certificate "
        "and its key)");
  }
  grpc::SslCredentialsOptions ssl;
  const struct {
    const char* flag;
    const std::string& path;
    std::string* pem;
  } files[] = {{"tls_ca", options.tls_ca, &ssl.pem_root_certs},
               {"tls_cert", options.tls_cert, &ssl.pem_cert_chain},
               {"tls_key", options.tls_key, &ssl.pem_private_key}};
  for (const auto& file : files) {
    if (file.path.empty()) continue;
    absl::StatusOr<std::string> text = ReadTlsFile(file.flag, file.path);
    if (!text.ok()) return text.status();
    *file.pem = *std::move(text);
  }
  if (!options.tls_server_name.empty()) {
    args->SetSslTargetNameOverride(options.tls_server_name);
  }
  return grpc::SslCredentials(ssl);
}

// Puts `authorization: Bearer KEY` on every call of the channel it is installed on.
class BearerInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit BearerInterceptor(std::string value) : value_(std::move(value)) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace("authorization", value_);
    }
    methods->Proceed();
  }

 private:
  const std::string value_;
};

class BearerInterceptorFactory
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit BearerInterceptorFactory(const std::string& key) : value_("Bearer " + key) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new BearerInterceptor(value_);
  }

 private:
  const std::string value_;
};

// A channel whose every call carries options.api_key, if set. An interceptor rather
// than call credentials, which gRPC sends over TLS only.
std::shared_ptr<grpc::Channel> CreateChannelWithKey(
    const GlobalOptions& options, const std::shared_ptr<grpc::ChannelCredentials>& credentials,
    const grpc::ChannelArguments& args) {
  if (options.api_key.empty()) {
    return grpc::CreateCustomChannel(options.server, credentials, args);
  }
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> factories;
  factories.push_back(std::make_unique<BearerInterceptorFactory>(options.api_key));
  return grpc::experimental::CreateCustomChannelWithInterceptors(options.server, credentials,
                                                                 args, std::move(factories));
}

}  // namespace

void AddGlobalFlags(FlagSet* flags, GlobalOptions* options, bool top_level) {
  // At top level each flag mirrors EnvVarFor(name) (ATTNSERVE_SERVER, ...),
  // except the client's certificate and key, which have their own names.
  // After the command the same flags are hidden and read no environment.
  auto global = [top_level](FlagSet::FlagRef flag,
                            const char* env_exception = nullptr) {
    if (!top_level) {
      flag.Hidden();
    } else if (env_exception != nullptr) {
      flag.Env(env_exception);
    } else {
      flag.DerivedEnv();
    }
  };
  global(flags->Add("server", &options->server, "server address HOST:PORT")
             .ValueName("HOST:PORT"));
  global(flags->Add(
      "timeout", &options->timeout_seconds,
      "deadline of each call in seconds; 0: 300 for generate, chat, bench and "
      "sessions export and import, 10 for the others"));
  global(flags->Add("connect_timeout", &options->connect_timeout_seconds,
                    "seconds to wait for the connection before giving up"));
  global(flags->Add("api_key", &options->api_key,
                    "API key of a server run with --api_keys_file, sent as "
                    "'authorization: Bearer KEY' (prefer the environment "
                    "variable: a command line is visible to other users)")
             .ValueName("KEY"));
  global(flags->Add("tls", &options->tls,
                    "connect over TLS (implied by the other --tls_* flags)"));
  global(flags->Add("tls_ca", &options->tls_ca,
                    "PEM CA certificates that verify the server (default: the "
                    "system's)")
             .ValueName("FILE"));
  global(flags->Add("tls_cert", &options->tls_cert,
                    "PEM client certificate, for a server that requires one "
                    "(mutual TLS)")
             .ValueName("FILE"),
         "ATTNSERVE_TLS_CLIENT_CERT");
  global(flags->Add("tls_key", &options->tls_key,
                    "PEM private key of --tls_cert")
             .ValueName("FILE"),
         "ATTNSERVE_TLS_CLIENT_KEY");
  global(flags->Add("tls_server_name", &options->tls_server_name,
                    "name the server's certificate must carry, if not the "
                    "host of --server")
             .ValueName("NAME"));
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> Connect(
    const GlobalOptions& options) {
  const std::string prefix =
      absl::StrCat("cannot reach attnserve at ", options.server, ": ");
  if (options.server.empty()) {
    return absl::UnavailableError(prefix + "empty address");
  }
  grpc::ChannelArguments args;
  // Retry often while waiting: a server that is still starting is found fast.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      ChannelCredentialsFor(options, &args);
  if (!credentials.ok()) return credentials.status();
  std::shared_ptr<grpc::Channel> channel =
      CreateChannelWithKey(options, *credentials, args);
  const double wait = std::max(0.0, options.connect_timeout_seconds);
  if (!channel->WaitForConnected(After(wait))) {
    std::string reason = ConnectFailureReason(channel, wait);
    // The server hangs up at once: what a TLS server does to a plaintext client, and a
    // mutual-TLS server to a client without a certificate it accepts.
    if (absl::EndsWith(reason, "Socket closed")) {
      if (!WantsTls(options)) {
        reason += " (a TLS server? pass --tls, or --tls_ca=FILE)";
      } else if (options.tls_cert.empty()) {
        reason += " (a server that requires client certificates? pass --tls_cert and --tls_key)";
      }
    }
    return absl::UnavailableError(prefix + reason);
  }
  return channel;
}

std::unique_ptr<attnserve::v1::AttnServe::Stub> ConnectStub(
    const GlobalOptions& options, const Io& io, int* exit_code) {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = Connect(options);
  if (!channel.ok()) {
    *exit_code = ReportUnreachable(io, channel.status());
    return nullptr;
  }
  return attnserve::v1::AttnServe::NewStub(*channel);
}

void SetDeadline(grpc::ClientContext* context, const GlobalOptions& options,
                 double default_seconds) {
  const double seconds =
      options.timeout_seconds > 0 ? options.timeout_seconds : default_seconds;
  context->set_deadline(After(seconds));
}

const char* StatusCodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "UNKNOWN_CODE";
  }
}

std::string FormatRpcError(const grpc::Status& status) {
  return absl::StrCat("attnserve: ", StatusCodeName(status.error_code()), ": ",
                      status.error_message());
}

int ReportRpcError(const Io& io, const grpc::Status& status) {
  absl::FPrintF(io.err, "%s\n", FormatRpcError(status));
  return kExitFailure;
}

int ReportUnreachable(const Io& io, const absl::Status& status) {
  absl::FPrintF(io.err, "%s\n", status.message());
  return absl::IsUnavailable(status) ? kExitUnreachable : kExitFailure;
}

int ReportUsageError(const Io& io, const std::string& message,
                     const std::string& command) {
  absl::FPrintF(io.err,
                "attnserve_client: %s (see attnserve_client %s%s--help)\n",
                message, command, command.empty() ? "" : " ");
  return kExitUsage;
}

}  // namespace attnserve::client
