// A small command-line flag table for the client's subcommands. Each flag is
// declared once, bound to a variable whose current value is its default, with
// help text and an optional environment-variable mirror. absl::flags has one
// global namespace and no notion of subcommands, hence this.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace attnserve::client {

// Looks up an environment variable; returns nullptr when unset. Injected by
// tests.
using EnvLookup = std::function<const char*(const char* name)>;

// The process environment (std::getenv).
EnvLookup ProcessEnv();

class FlagSet {
 public:
  FlagSet() = default;
  FlagSet(const FlagSet&) = delete;
  FlagSet& operator=(const FlagSet&) = delete;

  // Binds `--name` to `*value`. The pointee must outlive the FlagSet; its value
  // at this call is the default shown by Help(). A non-empty `env` names a
  // variable that sets the flag when the command line does not. Hidden flags
  // parse but are not listed by Help().
  void Add(const char* name, std::string* value, const char* help,
           const char* env = "");
  void Add(const char* name, int32_t* value, const char* help,
           const char* env = "");
  void Add(const char* name, int64_t* value, const char* help,
           const char* env = "");
  void Add(const char* name, uint64_t* value, const char* help,
           const char* env = "");
  void Add(const char* name, float* value, const char* help,
           const char* env = "");
  void Add(const char* name, double* value, const char* help,
           const char* env = "");
  // Boolean: `--name`, `--name=true|false|1|0`, `--noname`. Never takes the
  // next argument.
  void Add(const char* name, bool* value, const char* help,
           const char* env = "");
  // Repeatable: every `--name=S` appends S.
  void Add(const char* name, std::vector<std::string>* value, const char* help);
  // Marks the most recently added flag as hidden from Help().
  void HideLast();

  // Parses `args` (no program or command name): `--name=value`, `--name value`
  // (non-boolean flags), `--` ends flags. `-h` is the same as `--help` when a
  // `help` flag is declared. Environment mirrors are applied first, then the
  // command line. Returns the positional arguments in order. With
  // `stop_at_positional`, parsing stops at the first positional argument, which
  // is returned with everything after it untouched. Errors name the flag (or
  // variable) and what was wrong.
  absl::StatusOr<std::vector<std::string>> Parse(
      const std::vector<std::string>& args, const EnvLookup& env = ProcessEnv(),
      bool stop_at_positional = false);

  // One line per visible flag: "  --name=VALUE  help (default: D; env VAR)".
  std::string Help() const;

 private:
  enum class Kind {
    kString,
    kInt32,
    kInt64,
    kUint64,
    kFloat,
    kDouble,
    kBool,
    kList
  };
  struct Flag {
    std::string name;
    Kind kind;
    void* value;
    std::string help;
    std::string env;
    std::string default_text;  // rendered at Add() time
    bool hidden = false;
  };

  void AddFlag(const char* name, Kind kind, void* value, const char* help,
               const char* env, std::string default_text);
  Flag* Find(const std::string& name);
  // Stores `text` into the flag; `source` names where it came from, for errors.
  absl::Status Set(Flag& flag, const std::string& text,
                   const std::string& source);

  std::vector<Flag> flags_;
};

}  // namespace attnserve::client
