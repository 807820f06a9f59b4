#include "server/grammar/tool_calls.h"

#include <set>

#include "absl/strings/str_cat.h"

namespace attnserve::grammar {
namespace {

// The envelope's pieces around the name and the arguments (tool_calls.h).
struct Envelope {
  std::string_view header;  // after the opening tag, up to the name's first byte
  std::string_view close;   // after the arguments
  std::string_view between; // from one call's end to the next call's header
};
constexpr std::string_view kAfterName = ", \"arguments\": ";  // after the name's closing quote

Envelope EnvelopeOf(ToolCallFormat format) {
  if (format == ToolCallFormat::kPlain) {
    return {"{\"name\": \"", "}</tool_call>", " <tool_call>"};
  }
  return {"\n{\"name\": \"", "}\n</tool_call>", "\n<tool_call>"};
}

bool NameByte(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '_' || c == '-';
}
constexpr size_t kMaxNameBytes = 64;

// Debian's abseil has its own string_view.
absl::string_view A(std::string_view s) { return absl::string_view(s.data(), s.size()); }

bool JsonSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

}  // namespace

const char* ToolCallFormatName(ToolCallFormat format) {
  return format == ToolCallFormat::kPlain ? "plain" : "hermes";
}

absl::StatusOr<ToolCallFormat> ToolCallFormatByName(std::string_view name) {
  if (name.empty() || name == "hermes") return ToolCallFormat::kHermes;
  if (name == "plain") return ToolCallFormat::kPlain;
  return absl::InvalidArgumentError(
      absl::StrCat("format \"", A(name.substr(0, 40)), "\" is not one of hermes, plain"));
}

absl::Status CheckFunctionName(std::string_view name) {
  bool ok = !name.empty() && name.size() <= kMaxNameBytes;
  for (char c : name) ok = ok && NameByte(c);
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "function name \"", A(name.substr(0, 70)),
      "\" must be 1 to 64 letters, digits, underscores or dashes"));
}

absl::StatusOr<Constraint> CompileToolCalls(const ToolCallSpec& spec,
                                            const JsonSchemaOptions& options) {
  if (spec.functions.empty()) return absl::InvalidArgumentError("/tools: no functions declared");
  std::set<std::string_view> names;
  for (size_t i = 0; i < spec.functions.size(); ++i) {
    const std::string& name = spec.functions[i].name;
    if (absl::Status s = CheckFunctionName(name); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("/tools/", i, "/function/name: ", s.message()));
    }
    if (!names.insert(name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("/tools/", i, "/function/name: \"", name, "\" is declared twice"));
    }
  }
  if (spec.choice == ToolChoice::kNamed && names.count(spec.function_name) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tool_choice: function \"", A(std::string_view(spec.function_name).substr(0, 70)),
        "\" is not among the declared tools"));
  }
  const Envelope e = EnvelopeOf(spec.format);
  GrammarBuilder b;
  const int call = b.NewRule("tool_call");
  int any_object = -1;  // shared by every function without parameters
  for (size_t i = 0; i < spec.functions.size(); ++i) {
    const FunctionSpec& f = spec.functions[i];
    if (spec.choice == ToolChoice::kNamed && f.name != spec.function_name) continue;
    int arguments;
    if (f.parameters.is_null()) {
      if (any_object < 0) any_object = AddAnyJsonObject(b);
      arguments = any_object;
    } else {
      auto rule =
          AddJsonSchema(b, f.parameters, absl::StrCat("/tools/", i, "/function/parameters"), options);
      if (!rule.ok()) return rule.status();
      arguments = *rule;
    }
    Sequence s = Literal(absl::StrCat(A(kToolCallOpening), A(e.header), f.name, "\"", A(kAfterName)));
    s.push_back(Symbol::Ref(arguments));
    b.AddAlternative(call, Concat(std::move(s), Literal(e.close)));
  }
  // Parallel calls: call (between-separator call)*, the separator being what `between`
  // has before the next opening tag.
  const std::string_view separator = e.between.substr(0, e.between.size() - kToolCallOpening.size());
  const int root = spec.parallel ? b.Repeat("tool_calls", {Symbol::Ref(call)}, 1, -1,
                                            Literal(separator))
                                 : call;
  auto grammar = b.Build(root);
  if (!grammar.ok()) return grammar.status();
  Constraint c;
  c.grammar = *std::move(grammar);
  if (spec.choice == ToolChoice::kAuto) c.trigger = std::string(kToolCallOpening);
  return c;
}

std::string WriteToolCalls(ToolCallFormat format, const std::vector<ToolCall>& calls) {
  const Envelope e = EnvelopeOf(format);
  std::string out;
  for (size_t i = 0; i < calls.size(); ++i) {
    absl::StrAppend(&out, A(i == 0 ? kToolCallOpening : e.between), A(e.header), calls[i].name,
                    "\"", A(kAfterName), calls[i].arguments, A(e.close));
  }
  return out;
}

ParsedAnswer ParseToolCalls(ToolCallFormat format, std::string_view text) {
  ToolCallStreamParser parser(format);
  std::vector<ToolCallStreamParser::Event> events;
  parser.Feed(text, &events);
  parser.Finish(&events);
  ParsedAnswer out;
  size_t ended = 0;
  for (ToolCallStreamParser::Event& ev : events) {
    using Kind = ToolCallStreamParser::Event::Kind;
    switch (ev.kind) {
      case Kind::kContent:
        out.content += ev.text;
        break;
      case Kind::kCallStart:
        out.calls.push_back({std::move(ev.text), ""});
        break;
      case Kind::kArguments:
        out.calls[size_t(ev.index)].arguments += ev.text;
        break;
      case Kind::kCallEnd:
        ++ended;
        break;
    }
  }
  out.complete = ended == out.calls.size();
  return out;
}

ToolCallStreamParser::ToolCallStreamParser(ToolCallFormat format) : format_(format) {}

void ToolCallStreamParser::Emit(Event::Kind kind, std::string_view text,
                                std::vector<Event>* events) {
  const bool piece = kind == Event::Kind::kContent || kind == Event::Kind::kArguments;
  if (piece && text.empty()) return;
  const int index = kind == Event::Kind::kContent ? -1 : calls_;
  if (piece && !events->empty() && events->back().kind == kind && events->back().index == index) {
    events->back().text.append(text);
    return;
  }
  events->push_back({kind, index, std::string(text)});
}

void ToolCallStreamParser::Feed(std::string_view bytes, std::vector<Event>* events) {
  for (char c : bytes) Step(c, events);
}

void ToolCallStreamParser::GiveUpEnvelope(std::vector<Event>* events) {
  // Not an envelope after all: its first byte is text, the rest is scanned again (it may
  // hold the start of a real one). Held bytes are at most a tag, a header and a name.
  const std::string held = std::move(held_);
  held_.clear();
  state_ = State::kText;
  Emit(Event::Kind::kContent, std::string_view(held).substr(0, 1), events);
  for (size_t i = 1; i < held.size(); ++i) Step(held[i], events);
}

void ToolCallStreamParser::Step(char c, std::vector<Event>* events) {
  const Envelope e = EnvelopeOf(format_);
  switch (state_) {
    case State::kText: {
      held_ += c;
      if (held_ == kToolCallOpening) {
        state_ = State::kHeader;
        expect_ = std::string(e.header);
        return;
      }
      // Keep the longest tail that may still begin the tag; the rest is content.
      size_t keep = std::min(held_.size(), kToolCallOpening.size() - 1);
      while (keep > 0 && kToolCallOpening.substr(0, keep) != std::string_view(held_).substr(held_.size() - keep)) {
        --keep;
      }
      Emit(Event::Kind::kContent, std::string_view(held_).substr(0, held_.size() - keep), events);
      held_.erase(0, held_.size() - keep);
      return;
    }
    case State::kHeader:
    case State::kMid:
    case State::kBetween: {
      held_ += c;
      // expect_ is what is left of the literal being matched.
      if (expect_.empty() || expect_[0] != c) return GiveUpEnvelope(events);
      expect_.erase(0, 1);
      if (!expect_.empty()) return;
      if (state_ == State::kHeader) {
        state_ = State::kName;
        name_.clear();
      } else if (state_ == State::kMid) {
        held_.clear();
        Emit(Event::Kind::kCallStart, name_, events);
        state_ = State::kArguments;
        depth_ = 0;
        in_string_ = escaped_ = value_started_ = value_done_ = scalar_ = false;
        pending_.clear();
      } else {  // kBetween: the next call's opening tag
        state_ = State::kHeader;
        expect_ = std::string(e.header);
      }
      return;
    }
    case State::kName:
      held_ += c;
      if (c == '"' && !name_.empty()) {
        state_ = State::kMid;
        expect_ = std::string(kAfterName);
        return;
      }
      if (!NameByte(c) || name_.size() >= kMaxNameBytes) return GiveUpEnvelope(events);
      name_ += c;
      return;
    case State::kArguments: {
      const char piece[1] = {c};
      if (!value_done_) {
        if (!value_started_) {
          if (!JsonSpace(c)) {
            value_started_ = true;
            if (c == '{' || c == '[') {
              depth_ = 1;
            } else if (c == '"') {
              in_string_ = true;
            } else {
              scalar_ = true;
            }
          }
          return Emit(Event::Kind::kArguments, {piece, 1}, events);
        }
        if (in_string_) {
          if (escaped_) {
            escaped_ = false;
          } else if (c == '\\') {
            escaped_ = true;
          } else if (c == '"') {
            in_string_ = false;
            value_done_ = depth_ == 0;
          }
          return Emit(Event::Kind::kArguments, {piece, 1}, events);
        }
        if (depth_ > 0) {
          if (c == '"') {
            in_string_ = true;
          } else if (c == '{' || c == '[') {
            ++depth_;
          } else if (c == '}' || c == ']') {
            value_done_ = --depth_ == 0;
          }
          return Emit(Event::Kind::kArguments, {piece, 1}, events);
        }
        // A scalar runs until a byte that cannot be in a number or a literal.
        if (NameByte(c) || c == '+' || c == '.') {
          return Emit(Event::Kind::kArguments, {piece, 1}, events);
        }
        value_done_ = true;
      }
      // After the value: whitespace is the arguments' if the envelope's "}" follows.
      if (JsonSpace(c)) {
        pending_ += c;
        return;
      }
      Emit(Event::Kind::kArguments, pending_, events);
      pending_.clear();
      if (c == e.close[0]) {
        state_ = State::kClose;
        held_ = std::string(1, c);
        expect_ = std::string(e.close.substr(1));
        return;
      }
      // Not the envelope: the model's bytes, kept as arguments.
      return Emit(Event::Kind::kArguments, {piece, 1}, events);
    }
    case State::kClose:
      held_ += c;
      if (expect_[0] != c) {
        // Not the envelope's end: what looked like it is the arguments'.
        state_ = State::kArguments;
        Emit(Event::Kind::kArguments, held_, events);
        held_.clear();
        return;
      }
      expect_.erase(0, 1);
      if (!expect_.empty()) return;
      Emit(Event::Kind::kCallEnd, "", events);
      ++calls_;
      held_.clear();
      state_ = State::kBetween;
      expect_ = std::string(e.between);
      return;
  }
}

void ToolCallStreamParser::Finish(std::vector<Event>* events) {
  switch (state_) {
    case State::kArguments:
      Emit(Event::Kind::kArguments, pending_, events);
      pending_.clear();
      break;
    case State::kClose:
      break;  // the envelope's closing bytes, cut short: not the arguments'
    default:
      // A tag, a header or a name that did not become a call: text.
      Emit(Event::Kind::kContent, held_, events);
      break;
  }
  held_.clear();
  state_ = State::kText;
}

}  // namespace attnserve::grammar
