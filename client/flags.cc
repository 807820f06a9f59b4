#include "client/flags.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace attnserve::client {

namespace {

constexpr size_t kHelpColumns = 80;

// Breaks `text` at spaces so that lines starting at column `indent` end by
// `columns`; continuation lines are indented to `indent`.
std::string Wrap(const std::string& text, size_t indent, size_t columns) {
  const size_t room = columns > indent + 20 ? columns - indent : 20;
  std::string out;
  size_t line = 0;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (line > 0 && line + 1 + word.size() > room) {
      absl::StrAppend(&out, "\n", std::string(indent, ' '));
      line = 0;
    } else if (line > 0) {
      out.push_back(' ');
      ++line;
    }
    absl::StrAppend(&out, word);
    line += word.size();
  }
  return out;
}

}  // namespace

EnvLookup ProcessEnv() {
  return [](const char* name) -> const char* { return std::getenv(name); };
}

void FlagSet::AddFlag(const char* name, Kind kind, void* value,
                      const char* help, const char* env,
                      std::string default_text) {
  flags_.push_back(Flag{name, kind, value, help, env, std::move(default_text)});
}

void FlagSet::Add(const char* name, std::string* value, const char* help,
                  const char* env) {
  AddFlag(name, Kind::kString, value, help, env,
          value->empty() ? "" : absl::StrCat("\"", *value, "\""));
}
void FlagSet::Add(const char* name, int32_t* value, const char* help,
                  const char* env) {
  AddFlag(name, Kind::kInt32, value, help, env, absl::StrCat(*value));
}
void FlagSet::Add(const char* name, int64_t* value, const char* help,
                  const char* env) {
  AddFlag(name, Kind::kInt64, value, help, env, absl::StrCat(*value));
}
void FlagSet::Add(const char* name, uint64_t* value, const char* help,
                  const char* env) {
  AddFlag(name, Kind::kUint64, value, help, env, absl::StrCat(*value));
}
void FlagSet::Add(const char* name, float* value, const char* help,
                  const char* env) {
  AddFlag(name, Kind::kFloat, value, help, env, absl::StrFormat("%g", *value));
}
void FlagSet::Add(const char* name, double* value, const char* help,
                  const char* env) {
  AddFlag(name, Kind::kDouble, value, help, env, absl::StrFormat("%g", *value));
}
void FlagSet::Add(const char* name, bool* value, const char* help,
                  const char* env) {
  AddFlag(name, Kind::kBool, value, help, env, *value ? "true" : "");
}
void FlagSet::Add(const char* name, std::vector<std::string>* value,
                  const char* help) {
  AddFlag(name, Kind::kList, value, help, "", "");
}

void FlagSet::HideLast() { flags_.back().hidden = true; }

FlagSet::Flag* FlagSet::Find(const std::string& name) {
  for (Flag& flag : flags_) {
    if (flag.name == name) return &flag;
  }
  return nullptr;
}

absl::Status FlagSet::Set(Flag& flag, const std::string& text,
                          const std::string& source) {
  bool ok = true;
  const char* expected = "";
  switch (flag.kind) {
    case Kind::kString:
      *static_cast<std::string*>(flag.value) = text;
      break;
    case Kind::kList:
      static_cast<std::vector<std::string>*>(flag.value)->push_back(text);
      break;
    case Kind::kInt32:
      ok = absl::SimpleAtoi(text, static_cast<int32_t*>(flag.value));
      expected = "a 32-bit integer";
      break;
    case Kind::kInt64:
      ok = absl::SimpleAtoi(text, static_cast<int64_t*>(flag.value));
      expected = "an integer";
      break;
    case Kind::kUint64:
      // Reject a sign explicitly rather than rely on SimpleAtoi's version.
      ok = !text.empty() && text[0] != '-' &&
           absl::SimpleAtoi(text, static_cast<uint64_t*>(flag.value));
      expected = "a non-negative integer";
      break;
    case Kind::kFloat:
      ok = absl::SimpleAtof(text, static_cast<float*>(flag.value));
      expected = "a number";
      break;
    case Kind::kDouble:
      ok = absl::SimpleAtod(text, static_cast<double*>(flag.value));
      expected = "a number";
      break;
    case Kind::kBool:
      ok = absl::SimpleAtob(text, static_cast<bool*>(flag.value));
      expected = "true or false";
      break;
  }
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(source, ": \"", text, "\" is not ", expected));
}

absl::StatusOr<std::vector<std::string>> FlagSet::Parse(
    const std::vector<std::string>& args, const EnvLookup& env,
    bool stop_at_positional) {
  for (Flag& flag : flags_) {
    if (flag.env.empty()) continue;
    const char* text = env(flag.env.c_str());
    if (text == nullptr) continue;
    absl::Status status = Set(flag, text, flag.env);
    if (!status.ok()) return status;
  }
  std::vector<std::string> positional;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      positional.insert(positional.end(), args.begin() + i + 1, args.end());
      break;
    }
    if (arg == "-h" && Find("help") != nullptr) {
      *static_cast<bool*>(Find("help")->value) = true;
      continue;
    }
    if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) {
      if (stop_at_positional) {
        positional.insert(positional.end(), args.begin() + i, args.end());
        break;
      }
      positional.push_back(arg);
      continue;
    }
    const size_t eq = arg.find('=');
    const std::string name =
        arg.substr(2, eq == std::string::npos ? eq : eq - 2);
    Flag* flag = Find(name);
    if (flag == nullptr && eq == std::string::npos &&
        name.compare(0, 2, "no") == 0) {
      Flag* negated = Find(name.substr(2));
      if (negated != nullptr && negated->kind == Kind::kBool) {
        *static_cast<bool*>(negated->value) = false;
        continue;
      }
    }
    if (flag == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    }
    std::string text;
    if (eq != std::string::npos) {
      text = arg.substr(eq + 1);
    } else if (flag->kind == Kind::kBool) {
      text = "true";
    } else if (i + 1 < args.size()) {
      text = args[++i];
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("flag --", name, " needs a value"));
    }
    absl::Status status = Set(*flag, text, absl::StrCat("--", name));
    if (!status.ok()) return status;
  }
  return positional;
}

std::string FlagSet::Help() const {
  std::vector<std::pair<std::string, const Flag*>> rows;
  size_t width = 0;
  for (const Flag& flag : flags_) {
    if (flag.hidden) continue;
    std::string left = absl::StrCat("  --", flag.name);
    switch (flag.kind) {
      case Kind::kString:
      case Kind::kList:
        absl::StrAppend(&left, "=S");
        break;
      case Kind::kInt32:
      case Kind::kInt64:
      case Kind::kUint64:
        absl::StrAppend(&left, "=N");
        break;
      case Kind::kFloat:
      case Kind::kDouble:
        absl::StrAppend(&left, "=F");
        break;
      case Kind::kBool:
        break;
    }
    width = std::max(width, left.size());
    rows.emplace_back(std::move(left), &flag);
  }
  std::string out;
  for (const auto& [left, flag] : rows) {
    std::string notes;
    if (!flag->default_text.empty()) {
      absl::StrAppend(&notes, "default ", flag->default_text);
    }
    if (flag->kind == Kind::kList) notes = "repeatable";
    if (!flag->env.empty()) {
      absl::StrAppend(&notes, notes.empty() ? "" : "; ", "env ", flag->env);
    }
    const std::string text = absl::StrCat(
        flag->help, notes.empty() ? "" : absl::StrCat(" (", notes, ")"));
    absl::StrAppend(&out, left, std::string(width + 2 - left.size(), ' '),
                    Wrap(text, width + 2, kHelpColumns), "\n");
  }
  return out;
}

}  // namespace attnserve::client
