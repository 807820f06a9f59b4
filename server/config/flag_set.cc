#include "server/config/flag_set.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "server/config/flag_parsers.h"

namespace attnserve::config {

struct FlagSetEntry {
  std::string name;
  std::string value_name;  // Empty for a boolean.
  std::string help;
  std::string env;  // Empty: no environment mirror.
  bool is_bool = false;
  bool repeatable = false;  // Every occurrence adds to a list.
  bool hidden = false;
  // Parses text into the bound variable; on error says what was expected.
  std::function<absl::Status(absl::string_view)> set;
  // Renders the bound variable's current value.
  std::function<std::string()> show;
  std::string default_text;  // show() at declaration.
  // After Parse: the last text given and where it came from, if any.
  std::optional<std::string> given;
  std::string origin;
};

namespace {

constexpr size_t kHelpColumns = 80;
// A left column ("  --name=VALUE") longer than this puts its help on the next
// line rather than widening every row.
constexpr size_t kMaxLeftColumn = 30;

// Appends `words` to `out`, breaking lines at spaces so that lines starting at
// column `indent` end by kHelpColumns; `*line` is the current line's length.
void AppendWrapped(absl::string_view words, size_t indent, size_t* line,
                   std::string* out, bool keep_together = false) {
  const size_t room =
      kHelpColumns > indent + 20 ? kHelpColumns - indent : size_t{20};
  std::vector<absl::string_view> pieces;
  if (keep_together) {
    pieces.push_back(words);
  } else {
    pieces = absl::StrSplit(words, ' ', absl::SkipEmpty());
  }
  for (absl::string_view word : pieces) {
    if (*line > 0 && *line + 1 + word.size() > room) {
      absl::StrAppend(out, "\n", std::string(indent, ' '));
      *line = 0;
    } else if (*line > 0) {
      out->push_back(' ');
      ++*line;
    }
    absl::StrAppend(out, word);
    *line += word.size();
  }
}

template <typename T>
std::function<absl::Status(absl::string_view)> SimpleSetter(
    T* value, bool (*parse)(absl::string_view, T*), const char* expected) {
  return [value, parse, expected](absl::string_view text) {
    T parsed;
    if (!parse(text, &parsed)) return absl::InvalidArgumentError(expected);
    *value = parsed;
    return absl::OkStatus();
  };
}

bool ParseInt32(absl::string_view text, int32_t* out) {
  return absl::SimpleAtoi(text, out);
}
bool ParseInt64(absl::string_view text, int64_t* out) {
  return absl::SimpleAtoi(text, out);
}
// Rejects a sign explicitly rather than rely on SimpleAtoi's handling of "-".
bool ParseUint64(absl::string_view text, uint64_t* out) {
  text = absl::StripAsciiWhitespace(text);
  return !text.empty() && text[0] != '-' && absl::SimpleAtoi(text, out);
}
bool ParseFloat(absl::string_view text, float* out) {
  return absl::SimpleAtof(text, out);
}
bool ParseDouble(absl::string_view text, double* out) {
  return absl::SimpleAtod(text, out);
}
bool ParseBool(absl::string_view text, bool* out) {
  return absl::SimpleAtob(text, out);
}

}  // namespace

std::optional<std::string> GetEnv(const std::string& name) {
  const char* value = std::getenv(name.c_str());
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

std::string EnvVarFor(absl::string_view flag_name) {
  return absl::StrCat("ATTNSERVE_", absl::AsciiStrToUpper(flag_name));
}

FlagSet::FlagRef& FlagSet::FlagRef::ValueName(absl::string_view value_name) {
  flag_->value_name = std::string(value_name);
  return *this;
}
FlagSet::FlagRef& FlagSet::FlagRef::Env(absl::string_view var) {
  flag_->env = std::string(var);
  return *this;
}
FlagSet::FlagRef& FlagSet::FlagRef::DerivedEnv() {
  flag_->env = EnvVarFor(flag_->name);
  return *this;
}
FlagSet::FlagRef& FlagSet::FlagRef::Hidden() {
  flag_->hidden = true;
  return *this;
}

FlagSet::FlagSet(EnvMirrors mirrors) : mirrors_(mirrors) {}
FlagSet::~FlagSet() = default;

FlagSet::FlagRef FlagSet::AddEntry(
    const char* name, const char* value_name, const char* help,
    std::function<absl::Status(absl::string_view)> set,
    std::function<std::string()> show, bool is_bool, const char* env) {
  auto flag = std::make_unique<FlagSetEntry>();
  flag->name = name;
  flag->value_name = value_name;
  flag->help = help;
  if (*env != '\0') {
    flag->env = env;
  } else if (mirrors_ == kEnvForEveryFlag) {
    flag->env = EnvVarFor(name);
  }
  flag->is_bool = is_bool;
  flag->set = std::move(set);
  flag->show = std::move(show);
  flag->default_text = flag->show();
  flags_.push_back(std::move(flag));
  return FlagRef(flags_.back().get());
}

FlagSet::FlagRef FlagSet::Add(const char* name, std::string* value,
                              const char* help, const char* env) {
  return AddEntry(
      name, "S", help,
      [value](absl::string_view text) {
        *value = std::string(text);
        return absl::OkStatus();
      },
      [value] {
        return value->empty() ? "" : absl::StrCat("\"", *value, "\"");
      },
      false, env);
}

FlagSet::FlagRef FlagSet::Add(const char* name, int32_t* value,
                              const char* help, const char* env) {
  return AddEntry(
      name, "N", help,
      SimpleSetter(value, ParseInt32, "expected a 32-bit integer"),
      [value] { return absl::StrCat(*value); }, false, env);
}

FlagSet::FlagRef FlagSet::Add(const char* name, int64_t* value,
                              const char* help, const char* env) {
  return AddEntry(
      name, "N", help, SimpleSetter(value, ParseInt64, "expected an integer"),
      [value] { return absl::StrCat(*value); }, false, env);
}

FlagSet::FlagRef FlagSet::Add(const char* name, uint64_t* value,
                              const char* help, const char* env) {
  return AddEntry(
      name, "N", help,
      SimpleSetter(value, ParseUint64, "expected a non-negative integer"),
      [value] { return absl::StrCat(*value); }, false, env);
}

FlagSet::FlagRef FlagSet::Add(const char* name, float* value, const char* help,
                              const char* env) {
  return AddEntry(
      name, "F", help, SimpleSetter(value, ParseFloat, "expected a number"),
      [value] { return absl::StrFormat("%g", *value); }, false, env);
}

FlagSet::FlagRef FlagSet::Add(const char* name, double* value, const char* help,
                              const char* env) {
  return AddEntry(
      name, "F", help, SimpleSetter(value, ParseDouble, "expected a number"),
      [value] { return absl::StrFormat("%g", *value); }, false, env);
}

FlagSet::FlagRef FlagSet::Add(const char* name, bool* value, const char* help,
                              const char* env) {
  return AddEntry(
      name, "", help, SimpleSetter(value, ParseBool, "expected true or false"),
      [value] { return std::string(*value ? "true" : "false"); }, true, env);
}

FlagSet::FlagRef FlagSet::Add(const char* name, std::vector<std::string>* value,
                              const char* help) {
  FlagRef ref = AddEntry(
      name, "S", help,
      [value](absl::string_view text) {
        value->emplace_back(text);
        return absl::OkStatus();
      },
      [value] { return absl::StrJoin(*value, ","); }, false);
  flags_.back()->repeatable = true;
  return ref;
}

FlagSet::FlagRef FlagSet::AddIntAtLeast(const char* name, int* value, int min,
                                        const char* help) {
  return AddEntry(
      name, "N", help,
      [value, min](absl::string_view text) {
        return ParseIntAtLeast(text, min, value);
      },
      [value] { return absl::StrCat(*value); }, false);
}

FlagSet::FlagRef FlagSet::AddByteSize(const char* name, int64_t* value,
                                      const char* help) {
  return AddEntry(
      name, "BYTES", help,
      [value](absl::string_view text) { return ParseByteSize(text, value); },
      [value] { return FormatByteSize(*value); }, false);
}

FlagSet::FlagRef FlagSet::AddDuration(const char* name, absl::Duration* value,
                                      absl::Duration min, const char* help) {
  return AddEntry(
      name, "DURATION", help,
      [value, min](absl::string_view text) {
        return ParseDurationAtLeast(text, min, value);
      },
      [value] { return absl::FormatDuration(*value); }, false);
}

FlagSet::FlagRef FlagSet::AddHostPort(const char* name, std::string* value,
                                      const char* help) {
  return AddEntry(
      name, "HOST:PORT", help,
      [value](absl::string_view text) { return ParseHostPort(text, value); },
      [value] { return *value; }, false);
}

FlagSet::FlagRef FlagSet::AddCommaList(const char* name,
                                       std::vector<std::string>* value,
                                       const char* help,
                                       const char* empty_text) {
  return AddEntry(
      name, "A,B,...", help,
      [value](absl::string_view text) {
        *value = SplitCommaList(text);
        return absl::OkStatus();
      },
      [value, empty = std::string(empty_text)] {
        return value->empty() ? empty : absl::StrJoin(*value, ",");
      },
      false);
}

FlagSetEntry* FlagSet::Find(absl::string_view name) const {
  for (const std::unique_ptr<FlagSetEntry>& flag : flags_) {
    if (flag->name == name) return flag.get();
  }
  return nullptr;
}

absl::Status FlagSet::Apply(FlagSetEntry& flag, const std::string& text,
                            const std::string& origin) {
  if (absl::Status status = flag.set(text); !status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag.name, ": invalid value \"", text, "\" (from ",
                     origin, "): ", status.message()));
  }
  flag.given = text;
  flag.origin = origin;
  return absl::OkStatus();
}

absl::Status FlagSet::ReadCommandLine(const std::vector<std::string>& args,
                                      bool stop_at_positional,
                                      std::vector<Given>* given,
                                      std::vector<std::string>* positional) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      positional->insert(positional->end(), args.begin() + i + 1, args.end());
      break;
    }
    if (arg == "-h" && Find("help") != nullptr) {
      given->emplace_back(Find("help"), "true");
      continue;
    }
    if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) {
      if (stop_at_positional) {
        positional->insert(positional->end(), args.begin() + i, args.end());
        break;
      }
      positional->push_back(arg);
      continue;
    }
    const size_t eq = arg.find('=');
    const std::string name =
        arg.substr(2, eq == std::string::npos ? eq : eq - 2);
    FlagSetEntry* flag = Find(name);
    if (flag == nullptr && eq == std::string::npos &&
        absl::StartsWith(name, "no")) {
      FlagSetEntry* negated = Find(name.substr(2));
      if (negated != nullptr && negated->is_bool) {
        given->emplace_back(negated, "false");
        continue;
      }
    }
    if (flag == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    }
    if (eq != std::string::npos) {
      given->emplace_back(flag, arg.substr(eq + 1));
    } else if (flag->is_bool) {
      given->emplace_back(flag, "true");
    } else if (i + 1 < args.size() && !absl::StartsWith(args[i + 1], "--")) {
      given->emplace_back(flag, args[++i]);
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "flag --", name, " needs a value: --", name, "=", flag->value_name));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> FlagSet::Parse(
    const std::vector<std::string>& args, const EnvLookup& env,
    bool stop_at_positional) {
  // The command line is read first so that its syntax errors come first and a
  // flag it sets never reads (or fails on) its environment variable.
  std::vector<Given> given;
  std::vector<std::string> positional;
  if (absl::Status status =
          ReadCommandLine(args, stop_at_positional, &given, &positional);
      !status.ok()) {
    return status;
  }
  for (const std::unique_ptr<FlagSetEntry>& flag : flags_) {
    if (flag->env.empty()) continue;
    const bool on_command_line =
        std::any_of(given.begin(), given.end(),
                    [&](const auto& g) { return g.first == flag.get(); });
    if (on_command_line) continue;
    std::optional<std::string> text = env(flag->env);
    if (!text.has_value() || text->empty()) continue;
    if (absl::Status status = Apply(
            *flag, *text, absl::StrCat("environment variable ", flag->env));
        !status.ok()) {
      return status;
    }
  }
  for (const auto& [flag, text] : given) {
    if (absl::Status status = Apply(*flag, text, "the command line");
        !status.ok()) {
      return status;
    }
  }
  return positional;
}

std::string FlagSet::Help() const {
  std::vector<std::pair<std::string, const FlagSetEntry*>> rows;
  size_t width = 0;
  for (const std::unique_ptr<FlagSetEntry>& flag : flags_) {
    if (flag->hidden) continue;
    std::string left = absl::StrCat("  --", flag->name);
    if (!flag->is_bool) absl::StrAppend(&left, "=", flag->value_name);
    if (left.size() <= kMaxLeftColumn) width = std::max(width, left.size());
    rows.emplace_back(std::move(left), flag.get());
  }
  const size_t indent = width + 2;
  std::string out;
  for (const auto& [left, flag] : rows) {
    absl::StrAppend(&out, left);
    if (left.size() + 2 <= indent) {
      absl::StrAppend(&out, std::string(indent - left.size(), ' '));
    } else {
      absl::StrAppend(&out, "\n", std::string(indent, ' '));
    }
    std::vector<std::string> notes;
    // A boolean's default is worth showing only when it is true.
    if (flag->repeatable) {
      notes.push_back("repeatable");
    } else if (!flag->default_text.empty() &&
               (!flag->is_bool || flag->default_text == "true")) {
      notes.push_back(absl::StrCat("default ", flag->default_text));
    }
    if (!flag->env.empty()) notes.push_back(absl::StrCat("env ", flag->env));
    size_t line = 0;
    AppendWrapped(flag->help, indent, &line, &out);
    // "(default D; env VAR)", broken only between its notes.
    for (size_t i = 0; i < notes.size(); ++i) {
      AppendWrapped(absl::StrCat(i == 0 ? "(" : "", notes[i],
                                 i + 1 == notes.size() ? ")" : ";"),
                    indent, &line, &out, /*keep_together=*/true);
    }
    absl::StrAppend(&out, "\n");
  }
  return out;
}

std::string FlagSet::Describe(absl::string_view name) const {
  const FlagSetEntry* flag = Find(name);
  if (flag == nullptr) std::abort();  // A misspelt name in the caller.
  if (!flag->given.has_value()) {
    return absl::StrCat("--", name, "=", flag->show(), " (default)");
  }
  return absl::StrCat("--", name, "=", *flag->given, " (from ", flag->origin,
                      ")");
}

void ParseFlagsOrExit(FlagSet& flags, int argc, char** argv,
                      absl::string_view usage) {
  bool help = false;
  flags.Add("help", &help, "Print this help and exit.").Env("");
  const std::string program = argc > 0 ? argv[0] : "";
  const std::string name = program.substr(program.rfind('/') + 1);
  std::vector<std::string> args(argv + std::min(argc, 1), argv + argc);
  absl::StatusOr<std::vector<std::string>> rest = flags.Parse(args);
  if (rest.ok() && help) {
    std::printf("%s\n\nFlags:\n%s", std::string(usage).c_str(),
                flags.Help().c_str());
    std::exit(0);
  }
  if (rest.ok() && !rest->empty()) {
    rest = absl::InvalidArgumentError(
        absl::StrCat("unexpected argument \"", rest->front(),
                     "\"; flags look like --name=value"));
  }
  if (!rest.ok()) {
    std::fprintf(stderr, "%s: %s (see --help)\n", name.c_str(),
                 std::string(rest.status().message()).c_str());
    std::exit(2);
  }
}

}  // namespace attnserve::config
