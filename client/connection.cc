#include "client/connection.h"

#include <algorithm>
#include <chrono>

#include "absl/status/status.h"
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

}  // namespace

void AddGlobalFlags(FlagSet* flags, GlobalOptions* options, bool top_level) {
  flags->Add("server", &options->server, "server address HOST:PORT",
             top_level ? "ATTNSERVE_SERVER" : "");
  if (!top_level) flags->HideLast();
  flags->Add(
      "timeout", &options->timeout_seconds,
      "deadline of each call in seconds; 0: 300 for generate, chat, bench and "
      "sessions export and import, 10 for the others",
      top_level ? "ATTNSERVE_TIMEOUT" : "");
  if (!top_level) flags->HideLast();
  flags->Add("connect_timeout", &options->connect_timeout_seconds,
             "seconds to wait for the connection before giving up",
             top_level ? "ATTNSERVE_CONNECT_TIMEOUT" : "");
  if (!top_level) flags->HideLast();
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
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(
      options.server, grpc::InsecureChannelCredentials(), args);
  const double wait = std::max(0.0, options.connect_timeout_seconds);
  if (!channel->WaitForConnected(After(wait))) {
    return absl::UnavailableError(prefix + ConnectFailureReason(channel, wait));
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
  return kExitUnreachable;
}

int ReportUsageError(const Io& io, const std::string& message,
                     const std::string& command) {
  absl::FPrintF(io.err,
                "attnserve_client: %s (see attnserve_client %s%s--help)\n",
                message, command, command.empty() ? "" : " ");
  return kExitUsage;
}

}  // namespace attnserve::client
