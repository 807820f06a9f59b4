// The client's subcommands. Each takes the arguments after its name, the global
// options parsed so far and where to read and write, and returns the process
// exit code (kExit* in connection.h).
#pragma once

#include <string>
#include <vector>

#include "client/connection.h"
#include "client/flags.h"

namespace attnserve::client {

using Args = std::vector<std::string>;

int RunGenerate(const Args& args, GlobalOptions options, const Io& io);
int RunChat(const Args& args, GlobalOptions options, const Io& io);
int RunSessions(const Args& args, GlobalOptions options, const Io& io);
int RunModels(const Args& args, GlobalOptions options, const Io& io);
int RunTokenize(const Args& args, GlobalOptions options, const Io& io);
int RunHealth(const Args& args, GlobalOptions options, const Io& io);
int RunBench(const Args& args, GlobalOptions options, const Io& io);

// sessions export, import and fork (session_snapshots.cc), which RunSessions
// hands the arguments after the subcommand's name.
int RunSessionsExport(const Args& args, GlobalOptions options, const Io& io);
int RunSessionsImport(const Args& args, GlobalOptions options, const Io& io);
int RunSessionsFork(const Args& args, GlobalOptions options, const Io& io);

// Everything after the program name: global flags, a command, its arguments.
int RunClient(const Args& args, const Io& io);

// How a command describes itself in --help.
struct CommandHelp {
  const char* name;         // "generate", "sessions create", ...
  const char* synopsis;     // "[flags] PROMPT"
  const char* description;  // paragraphs, each line ending in '\n'
};

// Adds --help and the global flags (hidden: the top-level help lists them) to
// `flags` and parses `args`. Returns true when the command should run, with its
// positional arguments in `*positional`. Otherwise it has printed the help
// (`*exit_code` kExitOk) or a usage error (kExitUsage).
bool ParseCommandLine(const CommandHelp& help, FlagSet& flags,
                      GlobalOptions* options, const Args& args, const Io& io,
                      Args* positional, int* exit_code);

// Prints a usage error for `command` when `positional` does not hold between
// `min` and `max` arguments; returns true when the count is fine.
bool CheckArgCount(const Args& positional, size_t min, size_t max,
                   const CommandHelp& help, const Io& io, int* exit_code);

}  // namespace attnserve::client
