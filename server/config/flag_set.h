// The one command-line flag library of attnserve: the server, the client and
// the tools declare their flags through it. Each flag is declared once, bound
// to a variable whose value at declaration is the default, with help text, a
// value-name placeholder for --help and an optional environment-variable
// mirror. Torch-free; abseil only. (absl::flags has one global namespace and no
// subcommands, and cannot mirror the environment; hence this.)
//
//   FlagSet flags(FlagSet::kEnvForEveryFlag);
//   flags.AddIntAtLeast("max_sessions", &options.max_sessions, 1, "...");
//   flags.AddByteSize("memory_budget", &options.memory_budget_bytes, "...");
//   flags.Add("tls_cert", &cert, "...").Env("ATTNSERVE_TLS_CLIENT_CERT");
//   absl::StatusOr<std::vector<std::string>> rest = flags.Parse(args);
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace attnserve::config {

// Looks up an environment variable; returns nullopt when it is unset. Injected
// by tests.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;

// The environment lookup to pass in production (std::getenv).
std::optional<std::string> GetEnv(const std::string& name);

// The one naming rule for environment mirrors: --memory_budget <->
// ATTNSERVE_MEMORY_BUDGET.
std::string EnvVarFor(absl::string_view flag_name);

struct FlagSetEntry;  // One declared flag; defined in flag_set.cc.

class FlagSet {
 public:
  // Which flags mirror an environment variable when not given one explicitly
  // with FlagRef::Env.
  enum EnvMirrors {
    kEnvOnlyWhenNamed,  // none
    kEnvForEveryFlag,   // every flag, named EnvVarFor(name)
  };

  // Refines the flag just declared; valid until the FlagSet is destroyed.
  class FlagRef {
   public:
    // The placeholder --help shows after "--name=" (defaults: S, N, F, none for
    // booleans).
    FlagRef& ValueName(absl::string_view value_name);
    // Mirrors environment variable `var`; "" reads no environment.
    FlagRef& Env(absl::string_view var);
    // Mirrors EnvVarFor(name).
    FlagRef& DerivedEnv();
    // Parses but is not listed by Help().
    FlagRef& Hidden();

   private:
    friend class FlagSet;
    explicit FlagRef(FlagSetEntry* flag) : flag_(flag) {}
    FlagSetEntry* flag_;
  };

  explicit FlagSet(EnvMirrors mirrors = kEnvOnlyWhenNamed);
  ~FlagSet();
  FlagSet(const FlagSet&) = delete;
  FlagSet& operator=(const FlagSet&) = delete;

  // Binds `--name` to `*value`. The pointee must outlive the FlagSet; its value
  // at this call is the default shown by Help(). A non-empty `env` is the same
  // as .Env(env).
  FlagRef Add(const char* name, std::string* value, const char* help,
              const char* env = "");
  FlagRef Add(const char* name, int32_t* value, const char* help,
              const char* env = "");
  FlagRef Add(const char* name, int64_t* value, const char* help,
              const char* env = "");
  FlagRef Add(const char* name, uint64_t* value, const char* help,
              const char* env = "");
  FlagRef Add(const char* name, float* value, const char* help,
              const char* env = "");
  FlagRef Add(const char* name, double* value, const char* help,
              const char* env = "");
  // Boolean: `--name`, `--name=true|false|1|0|yes|no`, `--noname`. Never takes
  // the next argument.
  FlagRef Add(const char* name, bool* value, const char* help,
              const char* env = "");
  // Repeatable: every `--name=S` appends S (an environment value is one item).
  FlagRef Add(const char* name, std::vector<std::string>* value,
              const char* help);
  // An int that must be at least `min`.
  FlagRef AddIntAtLeast(const char* name, int* value, int min,
                        const char* help);

  // Custom types. `parse` turns the text into *value, or returns an error
  // whose message says what was expected ("expected a duration ...") and leaves
  // *value alone; `show` renders a value for --help and error messages.
  template <typename T>
  FlagRef AddCustom(const char* name, T* value, const char* value_name,
                    const char* help,
                    std::function<absl::Status(absl::string_view, T*)> parse,
                    std::function<std::string(const T&)> show) {
    return AddEntry(
        name, value_name, help,
        [value, parse](absl::string_view text) { return parse(text, value); },
        [value, show] { return show(*value); }, /*is_bool=*/false);
  }
  // Ready-made custom types (parsers in flag_parsers.h):
  // A positive byte count such as 536870912, 512MiB or 2GiB.
  FlagRef AddByteSize(const char* name, int64_t* value, const char* help);
  // A finite duration such as 90s, 30m or 1h30m, at least `min`.
  FlagRef AddDuration(const char* name, absl::Duration* value,
                      absl::Duration min, const char* help);
  // An address with a port, HOST:PORT.
  FlagRef AddHostPort(const char* name, std::string* value, const char* help);
  // A comma-separated list ("a, b,c"); each occurrence replaces the list.
  // `empty_text` is what --help shows for an empty list.
  FlagRef AddCommaList(const char* name, std::vector<std::string>* value,
                       const char* help, const char* empty_text = "");

  // Parses `args` (no program or command name): `--name=value`, `--name value`
  // (non-boolean flags; the value must not start with "--"), `--` ends flags.
  // `-h` is the same as `--help` when a `help` flag is declared. A flag not on
  // the command line takes its environment mirror, if that is set and not
  // empty; the command line wins over the environment, and later repeats win
  // over earlier ones. Returns the positional arguments in order. With
  // `stop_at_positional`, parsing stops at the first positional argument, which
  // is returned with everything after it untouched. Errors are InvalidArgument
  // naming the flag and where the value came from:
  //   --count: invalid value "abc" (from the command line): expected an integer
  //   --count: invalid value "x" (from environment variable COUNT): ...
  absl::StatusOr<std::vector<std::string>> Parse(
      const std::vector<std::string>& args, const EnvLookup& env = GetEnv,
      bool stop_at_positional = false);

  // One entry per visible flag, help wrapped at 80 columns:
  //   "  --name=VALUE  help (default D; env VAR)"
  std::string Help() const;

  // For errors that span flags, after Parse: "--name=TEXT (from ORIGIN)" for a
  // flag that was set, "--name=CURRENT (default)" for one that was not.
  // `name` must be declared.
  std::string Describe(absl::string_view name) const;

 private:
  FlagRef AddEntry(const char* name, const char* value_name, const char* help,
                   std::function<absl::Status(absl::string_view)> set,
                   std::function<std::string()> show, bool is_bool,
                   const char* env = "");
  FlagSetEntry* Find(absl::string_view name) const;
  // A flag given on the command line, with its text.
  using Given = std::pair<FlagSetEntry*, std::string>;
  // Splits `args` into flags with their text, in order, and positionals;
  // fails on unknown flags and missing values.
  absl::Status ReadCommandLine(const std::vector<std::string>& args,
                               bool stop_at_positional,
                               std::vector<Given>* given,
                               std::vector<std::string>* positional);
  static absl::Status Apply(FlagSetEntry& flag, const std::string& text,
                            const std::string& origin);

  EnvMirrors mirrors_;
  std::vector<std::unique_ptr<FlagSetEntry>> flags_;
};

// For a tool's main(): declares --help, parses argv[1..argc) (no positional
// arguments), and on --help prints `usage`, a blank line and flags.Help() to
// stdout and exits 0; on an error prints "PROGRAM: message (see --help)" to
// stderr and exits 2.
void ParseFlagsOrExit(FlagSet& flags, int argc, char** argv,
                      absl::string_view usage);

}  // namespace attnserve::config
