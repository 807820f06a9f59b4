// sessions create|get|list|close: one unary call each, human-readable output.
// export, import and fork are in session_snapshots.cc.
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "attnserve/v1/attnserve.grpc.pb.h"
#include "client/commands.h"
#include "client/format.h"
#include "client/retry.h"

namespace attnserve::client {
namespace {

namespace v1 = ::attnserve::v1;

constexpr char kSessionsUsage[] =
    "usage: attnserve_client [global flags] sessions <subcommand> [args]\n"
    "\n"
    "subcommands:\n"
    "  create [--model=S] [--attention=S] [--order=N] [--ttl=N]\n"
    "             create a session; prints its id alone on stdout\n"
    "  get ID     one session: model, attention module, position, state\n"
    "             bytes, creation and last use, ttl, busy\n"
    "  list       the same for every session, one row each\n"
    "  close ID   close a session and free its state\n"
    "  export ID FILE\n"
    "             write the session's snapshot to FILE (- for stdout); one\n"
    "             summary line on stderr\n"
    "  import [--ttl_seconds=N] FILE\n"
    "             a new session from the snapshot in FILE (- for stdin);\n"
    "             prints its id alone on stdout\n"
    "  fork [--ttl_seconds=N] ID\n"
    "             a new session with a copy of ID's state; prints its id\n"
    "             alone on stdout\n"
    "\n"
    "Calls that name a session send its id in the x-session-id header too,\n"
    "for a load balancer that routes by it. A call refused with UNAVAILABLE\n"
    "(a replica draining) or cancelled by a replica that is stopping is sent\n"
    "again, up to 8 attempts within 10 s and --timeout; an export only\n"
    "before its first chunk, an import only from a file (stdin cannot be\n"
    "read twice).\n"
    "\n"
    "Run 'attnserve_client sessions <subcommand> --help' for its flags.\n";

constexpr CommandHelp kCreateHelp = {
    "sessions create", "[flags]",
    "Creates a session and prints its id alone on one stdout line.\n"};
constexpr CommandHelp kGetHelp = {"sessions get", "ID",
                                  "Describes one session.\n"};
constexpr CommandHelp kListHelp = {"sessions list", "",
                                   "Lists every session on the server.\n"};
constexpr CommandHelp kCloseHelp = {"sessions close", "ID",
                                    "Closes a session.\n"};

void PrintSession(const Io& io, const v1::Session& s) {
  const absl::Time now = absl::Now();
  PrintTable(io.out,
             {
                 {"id:", s.id()},
                 {"model:", s.model()},
                 {"attention:",
                  FormatAttention(s.attention_module(), s.attention_order())},
                 {"position:", absl::StrCat(s.position(), " tokens")},
                 {"state:", absl::StrCat(HumanBytes(s.state_bytes()), " (",
                                         s.state_bytes(), " bytes)")},
                 {"created:", FormatTimestamp(s.created_unix_ms(), now)},
                 {"last used:", FormatTimestamp(s.last_used_unix_ms(), now)},
                 {"ttl:", absl::StrCat(s.ttl_seconds(), " s idle")},
                 {"busy:", s.busy() ? "yes (a turn is in flight)" : "no"},
             });
}

int SessionsCreate(const Args& args, GlobalOptions options, const Io& io) {
  FlagSet flags;
  v1::CreateSessionRequest request;
  std::string model, attention;
  int32_t order = 0;
  int64_t ttl = 0;
  flags.Add("model", &model, "model name; empty is the server's default");
  flags.Add("attention", &attention,
            "serve with this attention module instead of the model's own "
            "(where compatible)");
  flags.Add("order", &order,
            "attention order (Taylor N); 0 leaves it to the server");
  flags.Add(
      "ttl", &ttl,
      "idle seconds before the session is closed; 0 is the server's default");
  Args positional;
  int code;
  if (!ParseCommandLine(kCreateHelp, flags, &options, args, io, &positional,
                        &code) ||
      !CheckArgCount(positional, 0, 0, kCreateHelp, io, &code)) {
    return code;
  }
  request.set_model(model);
  request.set_attention_module(attention);
  request.set_attention_order(order);
  request.set_ttl_seconds(ttl);
  std::unique_ptr<v1::AttnServe::Stub> stub = ConnectStub(options, io, &code);
  if (stub == nullptr) return code;
  v1::Session session;
  // Sent again when refused: a replica that created the session and then
  // failed leaves an orphan, which its TTL closes.
  const grpc::Status status =
      RetryLoop(options, kUnaryTimeoutSeconds, io.clock)
          .Run("", [&](grpc::ClientContext* context) {
            return stub->CreateSession(context, request, &session);
          });
  if (!status.ok()) return ReportRpcError(io, status);
  absl::FPrintF(io.out, "%s\n", session.id());
  return kExitOk;
}

// Parses get, list or close, which take `ids` (0 or 1) session ids and no
// flags, and connects. Returns the stub, or null with `*code` set.
std::unique_ptr<v1::AttnServe::Stub> ParseAndConnect(
    const CommandHelp& help, size_t ids, const Args& args,
    GlobalOptions options, const Io& io, Args* positional, int* code) {
  FlagSet flags;
  if (!ParseCommandLine(help, flags, &options, args, io, positional, code) ||
      !CheckArgCount(*positional, ids, ids, help, io, code)) {
    return nullptr;
  }
  return ConnectStub(options, io, code);
}

int SessionsGet(const Args& args, GlobalOptions options, const Io& io) {
  Args positional;
  int code;
  auto stub =
      ParseAndConnect(kGetHelp, 1, args, options, io, &positional, &code);
  if (stub == nullptr) return code;
  v1::GetSessionRequest request;
  request.set_session_id(positional[0]);
  v1::Session session;
  const grpc::Status status =
      RetryLoop(options, kUnaryTimeoutSeconds, io.clock)
          .Run(request.session_id(), [&](grpc::ClientContext* context) {
            return stub->GetSession(context, request, &session);
          });
  if (!status.ok()) return ReportRpcError(io, status);
  PrintSession(io, session);
  return kExitOk;
}

int SessionsList(const Args& args, GlobalOptions options, const Io& io) {
  Args positional;
  int code;
  auto stub =
      ParseAndConnect(kListHelp, 0, args, options, io, &positional, &code);
  if (stub == nullptr) return code;
  v1::ListSessionsResponse response;
  const grpc::Status status =
      RetryLoop(options, kUnaryTimeoutSeconds, io.clock)
          .Run("", [&](grpc::ClientContext* context) {
            response.Clear();
            return stub->ListSessions(context, v1::ListSessionsRequest(),
                                      &response);
          });
  if (!status.ok()) return ReportRpcError(io, status);
  if (response.sessions().empty()) {
    absl::FPrintF(io.out, "no sessions\n");
    return kExitOk;
  }
  const absl::Time now = absl::Now();
  std::vector<std::vector<std::string>> rows = {{"ID", "MODEL", "ATTENTION",
                                                 "POSITION", "STATE", "CREATED",
                                                 "LAST USED", "BUSY"}};
  for (const v1::Session& s : response.sessions()) {
    rows.push_back({s.id(), s.model(),
                    FormatAttention(s.attention_module(), s.attention_order()),
                    absl::StrCat(s.position()), HumanBytes(s.state_bytes()),
                    FormatAgo(s.created_unix_ms(), now),
                    FormatAgo(s.last_used_unix_ms(), now),
                    s.busy() ? "yes" : "no"});
  }
  PrintTable(io.out, rows);
  return kExitOk;
}

int SessionsClose(const Args& args, GlobalOptions options, const Io& io) {
  Args positional;
  int code;
  auto stub =
      ParseAndConnect(kCloseHelp, 1, args, options, io, &positional, &code);
  if (stub == nullptr) return code;
  v1::CloseSessionRequest request;
  request.set_session_id(positional[0]);
  v1::CloseSessionResponse response;
  // Sent again when refused; a close that did happen before the replica failed
  // makes the retry NOT_FOUND.
  const grpc::Status status =
      RetryLoop(options, kUnaryTimeoutSeconds, io.clock)
          .Run(request.session_id(), [&](grpc::ClientContext* context) {
            return stub->CloseSession(context, request, &response);
          });
  if (!status.ok()) return ReportRpcError(io, status);
  absl::FPrintF(io.out, "closed %s\n", positional[0]);
  return kExitOk;
}

}  // namespace

int RunSessions(const Args& args, GlobalOptions options, const Io& io) {
  FlagSet flags;
  bool help = false;
  flags.Add("help", &help, "");
  AddGlobalFlags(&flags, &options, /*top_level=*/false);
  absl::StatusOr<Args> rest =
      flags.Parse(args, io.env, /*stop_at_positional=*/true);
  if (!rest.ok()) {
    return ReportUsageError(io, std::string(rest.status().message()),
                            "sessions");
  }
  if (help) {
    absl::FPrintF(io.out, "%s", kSessionsUsage);
    return kExitOk;
  }
  if (rest->empty()) {
    return ReportUsageError(io, "missing subcommand", "sessions");
  }
  const std::string sub = rest->front();
  const Args sub_args(rest->begin() + 1, rest->end());
  if (sub == "create") return SessionsCreate(sub_args, options, io);
  if (sub == "get") return SessionsGet(sub_args, options, io);
  if (sub == "list") return SessionsList(sub_args, options, io);
  if (sub == "close") return SessionsClose(sub_args, options, io);
  if (sub == "export") return RunSessionsExport(sub_args, options, io);
  if (sub == "import") return RunSessionsImport(sub_args, options, io);
  if (sub == "fork") return RunSessionsFork(sub_args, options, io);
  return ReportUsageError(
      io,
      absl::StrCat("unknown subcommand \"", sub,
                   "\"; one of create, get, list, close, export, import, fork"),
      "sessions");
}

}  // namespace attnserve::client
