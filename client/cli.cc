// Top-level argument dispatch and the help text shared by every command.
#include <string>

#include "absl/strings/str_format.h"
#include "client/commands.h"

namespace attnserve::client {
namespace {

constexpr char kTopUsage[] =
    "usage: attnserve_client [global flags] <command> [flags] [args]\n"
    "\n"
    "Command-line client for the attnserve gRPC model server\n"
    "(attnserve.v1.AttnServe).\n"
    "\n"
    "commands:\n"
    "  generate [flags] PROMPT   stream the continuation of PROMPT to stdout\n"
    "  chat [flags]              one turn per stdin line, on one session\n"
    "  sessions create|get|list|close|export|import|fork\n"
    "                            create, inspect, list and close sessions;\n"
    "                            export to and import from a file; fork\n"
    "  models [NAME]             list the served models, or describe one\n"
    "  tokenize [flags] TEXT     the token ids of TEXT with a model's tokenizer\n"
    "  health                    grpc.health.v1 check; exit 0 only if SERVING\n"
    "  bench [flags]             concurrent sessions: tokens/s, latencies\n"
    "  help [COMMAND]            this text, or a command's flags\n"
    "\n"
    "global flags (also accepted after the command):\n";

constexpr char kExitStatus[] =
    "\n"
    "exit status: 0 success; 1 the server answered with an error status, a\n"
    "generation ended in error, was cancelled or was stopped by the server's\n"
    "shutdown, health is not SERVING, bench counted errors, or a local file\n"
    "could not be read or written; 2 bad command line; 3 no connection to the\n"
    "server within --connect_timeout.\n"
    "\n"
    "Run 'attnserve_client <command> --help' for the command's flags.\n";

using CommandFn = int (*)(const Args&, GlobalOptions, const Io&);

struct Command {
  const char* name;
  CommandFn run;
};

constexpr Command kCommands[] = {
    {"generate", RunGenerate}, {"chat", RunChat},     {"sessions", RunSessions},
    {"models", RunModels},     {"tokenize", RunTokenize}, {"health", RunHealth},
    {"bench", RunBench},
};

const Command* FindCommand(const std::string& name) {
  for (const Command& command : kCommands) {
    if (name == command.name) return &command;
  }
  return nullptr;
}

}  // namespace

bool ParseCommandLine(const CommandHelp& help, FlagSet& flags,
                      GlobalOptions* options, const Args& args, const Io& io,
                      Args* positional, int* exit_code) {
  bool show_help = false;
  flags.Add("help", &show_help, "show this help");
  AddGlobalFlags(&flags, options, /*top_level=*/false);
  absl::StatusOr<Args> parsed = flags.Parse(args, io.env);
  if (!parsed.ok()) {
    *exit_code =
        ReportUsageError(io, std::string(parsed.status().message()), help.name);
    return false;
  }
  if (show_help) {
    absl::FPrintF(
        io.out,
        "usage: attnserve_client [global flags] %s %s\n\n%s\nflags:\n%s\n"
        "global flags (before or after the command): --server, --timeout,\n"
        "--connect_timeout, --tls, --tls_ca, --tls_cert, --tls_key,\n"
        "--tls_server_name; see attnserve_client --help\n",
        help.name, help.synopsis, help.description, flags.Help());
    *exit_code = kExitOk;
    return false;
  }
  *positional = *std::move(parsed);
  return true;
}

bool CheckArgCount(const Args& positional, size_t min, size_t max,
                   const CommandHelp& help, const Io& io, int* exit_code) {
  if (positional.size() >= min && positional.size() <= max) return true;
  std::string message;
  if (positional.size() > max) {
    message = absl::StrFormat("unexpected argument \"%s\"; usage: %s %s",
                              positional[max], help.name, help.synopsis);
  } else {
    message = absl::StrFormat("missing arguments; usage: %s %s", help.name,
                              help.synopsis);
  }
  *exit_code = ReportUsageError(io, message, help.name);
  return false;
}

int RunClient(const Args& args, const Io& io) {
  GlobalOptions options;
  FlagSet flags;
  bool show_help = false;
  AddGlobalFlags(&flags, &options, /*top_level=*/true);
  flags.Add("help", &show_help, "show this help");
  absl::StatusOr<Args> rest =
      flags.Parse(args, io.env, /*stop_at_positional=*/true);
  if (!rest.ok()) {
    return ReportUsageError(io, std::string(rest.status().message()), "");
  }
  if (show_help ||
      (!rest->empty() && rest->front() == "help" && rest->size() == 1)) {
    absl::FPrintF(io.out, "%s%s%s", kTopUsage, flags.Help(), kExitStatus);
    return kExitOk;
  }
  if (rest->empty()) return ReportUsageError(io, "missing command", "");
  Args command_args(rest->begin() + 1, rest->end());
  std::string name = rest->front();
  // "help COMMAND [SUBCOMMAND]" is "COMMAND [SUBCOMMAND] --help".
  if (name == "help") {
    name = command_args.front();
    command_args.erase(command_args.begin());
    command_args.push_back("--help");
  }
  const Command* command = FindCommand(name);
  if (command == nullptr) {
    return ReportUsageError(io, absl::StrFormat("unknown command \"%s\"", name),
                            "");
  }
  return command->run(command_args, options, io);
}

}  // namespace attnserve::client
