#include "server/http/chat_template.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "server/http/http_errors.h"
#include "server/model/gguf_model.h"

namespace attnserve::http {
namespace {

std::optional<std::string> ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The string field `key` of a JSON object text; nullopt when absent, not a string, or
// the text is not JSON.
std::optional<std::string> StringField(const std::string& json_text, const char* key) {
  nlohmann::json j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return std::nullopt;
  return it->get<std::string>();
}

// "system" for the system-like roles, the role itself for user, assistant and tool.
absl::StatusOr<std::string> NormalRole(const std::string& role) {
  if (role == "system" || role == "developer") return std::string("system");
  if (role == "user" || role == "assistant" || role == "tool") return role;
  return absl::InvalidArgumentError(absl::StrCat(
      "messages: role \"", role,
      "\" is not supported (system, developer, user, assistant, tool)"));
}

// What the model wrote for an assistant message: its content, then its calls.
std::string AssistantText(ChatTemplateKind kind, const ChatMessage& m) {
  if (m.tool_calls.empty()) return m.content;
  std::vector<grammar::ToolCall> calls;
  for (const ChatToolCall& c : m.tool_calls) calls.push_back({c.name, c.arguments});
  return m.content + grammar::WriteToolCalls(ToolCallFormatOf(kind), calls);
}

// The plain, llama2 and llama3 description of the functions: one line.
std::string ToolsLine(const std::vector<std::string>& tools) {
  return absl::StrCat(
      "Tools: to call a function, answer <tool_call>{\"name\": NAME, \"arguments\": "
      "ARGUMENTS}</tool_call>. The functions: ",
      absl::StrJoin(tools, " "));
}

std::string RenderPlain(const std::vector<ChatMessage>& messages,
                        const std::vector<std::string>& tools) {
  std::string out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (i == 0 && !tools.empty() && m.role != "system") absl::StrAppend(&out, ToolsLine(tools), "\n");
    if (m.role == "assistant") {
      absl::StrAppend(&out, "Assistant: ", AssistantText(ChatTemplateKind::kPlain, m), "\n");
    } else {
      const char* label = m.role == "system" ? "System" : m.role == "user" ? "User" : "Tool";
      absl::StrAppend(&out, label, ": ", m.content, "\n");
    }
    if (i == 0 && !tools.empty() && m.role == "system") absl::StrAppend(&out, ToolsLine(tools), "\n");
  }
  absl::StrAppend(&out, "Assistant: ");
  return out;
}

// Qwen2.5's (and Hermes 2 Pro's) tool section of the system message.
std::string ChatmlToolsSection(const std::vector<std::string>& tools) {
  std::string out =
      "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
      "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
  for (const std::string& t : tools) absl::StrAppend(&out, "\n", t);
  absl::StrAppend(&out,
                  "\n</tools>\n\nFor each function call, return a json object with function "
                  "name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
                  "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>");
  return out;
}

std::string RenderChatml(const std::vector<ChatMessage>& messages,
                         const std::vector<std::string>& tools) {
  std::string out;
  size_t i = 0;
  if (!tools.empty()) {
    std::string system;
    if (messages[0].role == "system") {
      system = messages[0].content + "\n\n";
      i = 1;
    }
    absl::StrAppend(&out, "<|im_start|>system\n", system, ChatmlToolsSection(tools), "<|im_end|>\n");
  }
  for (; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "tool") {
      // Consecutive results share one user turn.
      if (i == 0 || messages[i - 1].role != "tool") absl::StrAppend(&out, "<|im_start|>user");
      absl::StrAppend(&out, "\n<tool_response>\n", m.content, "\n</tool_response>");
      if (i + 1 == messages.size() || messages[i + 1].role != "tool") {
        absl::StrAppend(&out, "<|im_end|>\n");
      }
      continue;
    }
    const std::string text =
        m.role == "assistant" ? AssistantText(ChatTemplateKind::kChatml, m) : m.content;
    absl::StrAppend(&out, "<|im_start|>", m.role, "\n", text, "<|im_end|>\n");
  }
  absl::StrAppend(&out, "<|im_start|>assistant\n");
  return out;
}

// Llama-2's chat format: the system text inside the first [INST]; user and assistant
// alternate; a finished exchange ends with " </s><s>" (BOS at the session's start is the
// tokenizer's own).
// Tool results are a user turn (consecutive ones one turn); the tools line joins the
// system text.
absl::StatusOr<std::string> RenderLlama2(const std::vector<ChatMessage>& messages,
                                         const std::vector<std::string>& tools) {
  std::string out;
  size_t i = 0;
  std::string system;
  if (messages[0].role == "system") {
    system = messages[0].content;
    i = 1;
  }
  if (!tools.empty()) system = system.empty() ? ToolsLine(tools) : absl::StrCat(system, "\n\n", ToolsLine(tools));
  if (i == 1 || !tools.empty()) system = absl::StrCat("<<SYS>>\n", system, "\n<</SYS>>\n\n");
  std::vector<ChatMessage> merged;  // tool results grouped into user turns
  for (; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role != "tool") {
      merged.push_back(m);
      continue;
    }
    const std::string result = absl::StrCat("<tool_response>\n", m.content, "\n</tool_response>");
    if (i > 0 && messages[i - 1].role == "tool") {
      absl::StrAppend(&merged.back().content, "\n", result);
    } else {
      merged.push_back({"user", result});
    }
  }
  bool expect_user = true;
  for (const ChatMessage& m : merged) {
    if (m.role == "system") {
      return absl::InvalidArgumentError(
          "messages: the llama2 chat template takes one system message, first");
    }
    if ((m.role == "user") != expect_user) {
      return absl::InvalidArgumentError(
          "messages: the llama2 chat template needs user and assistant messages to alternate, "
          "starting with user");
    }
    if (expect_user) {
      absl::StrAppend(&out, "[INST] ", system, m.content, " [/INST]");
      system.clear();
    } else {
      absl::StrAppend(&out, " ", AssistantText(ChatTemplateKind::kLlama2, m), " </s><s>");
    }
    expect_user = !expect_user;
  }
  if (expect_user) {
    return absl::InvalidArgumentError(
        "messages: the llama2 chat template needs the last message to be the user's");
  }
  return out;
}

// Llama 3's chat format, as llama.cpp's built-in "llama3" template and the Llama 3
// Instruct models' Jinja template write it: each message its header and its text, then
// "<|eot_id|>"; the assistant's header cues the answer (BOS at the session's start is the
// tokenizer's own). Texts are rendered as given: the Jinja template trims them, which
// differs only for a message with leading or trailing whitespace, and an answer renders
// as the model generated it. Tool results are Llama 3.1's "ipython" turns, one a result;
// the tools line ends the system message (a system message of its own when there is
// none).
std::string RenderLlama3(const std::vector<ChatMessage>& messages,
                         const std::vector<std::string>& tools) {
  std::string out;
  auto turn = [&](absl::string_view role, absl::string_view text) {
    absl::StrAppend(&out, "<|start_header_id|>", role, "<|end_header_id|>\n\n", text, "<|eot_id|>");
  };
  size_t i = 0;
  if (!tools.empty()) {
    if (messages[0].role == "system") {
      turn("system", absl::StrCat(messages[0].content, "\n\n", ToolsLine(tools)));
      i = 1;
    } else {
      turn("system", ToolsLine(tools));
    }
  }
  for (; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "assistant") {
      turn("assistant", AssistantText(ChatTemplateKind::kLlama3, m));
    } else {
      turn(m.role == "tool" ? "ipython" : m.role, m.content);
    }
  }
  absl::StrAppend(&out, "<|start_header_id|>assistant<|end_header_id|>\n\n");
  return out;
}

// The text a template closes an assistant turn with, which the model ends its answer
// with as an end-of-sequence token ("" for plain, whose turns end at a newline).
absl::string_view EndOfTurn(ChatTemplateKind kind) {
  switch (kind) {
    case ChatTemplateKind::kChatml:
      return "<|im_end|>";
    case ChatTemplateKind::kLlama2:
      return " </s>";
    case ChatTemplateKind::kLlama3:
      return "<|eot_id|>";
    case ChatTemplateKind::kPlain:
      break;
  }
  return "";
}

}  // namespace

void AddToolCall(ChatToolCall call, std::vector<ChatMessage>* messages) {
  if (messages->empty() || messages->back().role != "assistant") {
    messages->push_back({"assistant", ""});
  }
  messages->back().tool_calls.push_back(std::move(call));
}

grammar::ToolCallFormat ToolCallFormatOf(ChatTemplateKind kind) {
  return kind == ChatTemplateKind::kChatml ? grammar::ToolCallFormat::kHermes
                                           : grammar::ToolCallFormat::kPlain;
}

namespace {
std::string DumpScalar(const nlohmann::ordered_json& v) {
  return v.dump(-1, ' ', /*ensure_ascii=*/false, nlohmann::ordered_json::error_handler_t::replace);
}

// json.dumps with its default separators, in the order given. Depth is bounded by the
// request gate.
void AppendPythonJson(const nlohmann::ordered_json& v, std::string* out) {
  if (v.is_object()) {
    out->push_back('{');
    bool first = true;
    for (const auto& [key, value] : v.items()) {
      if (!first) out->append(", ");
      first = false;
      out->append(DumpScalar(nlohmann::ordered_json(key)));
      out->append(": ");
      AppendPythonJson(value, out);
    }
    out->push_back('}');
  } else if (v.is_array()) {
    out->push_back('[');
    for (size_t i = 0; i < v.size(); ++i) {
      if (i > 0) out->append(", ");
      AppendPythonJson(v[i], out);
    }
    out->push_back(']');
  } else {
    out->append(DumpScalar(v));
  }
}
}  // namespace

std::string ToolDefinitionText(const nlohmann::ordered_json& tool) {
  std::string out;
  AppendPythonJson(tool, &out);
  return out;
}

const char* ChatTemplateName(ChatTemplateKind kind) {
  switch (kind) {
    case ChatTemplateKind::kPlain:
      return "plain";
    case ChatTemplateKind::kChatml:
      return "chatml";
    case ChatTemplateKind::kLlama2:
      return "llama2";
    case ChatTemplateKind::kLlama3:
      return "llama3";
  }
  return "plain";
}

std::optional<ChatTemplateKind> ChatTemplateByName(absl::string_view name) {
  for (ChatTemplateKind kind :
       {ChatTemplateKind::kPlain, ChatTemplateKind::kChatml, ChatTemplateKind::kLlama2,
        ChatTemplateKind::kLlama3}) {
    if (name == ChatTemplateName(kind)) return kind;
  }
  return std::nullopt;
}

absl::StatusOr<ChatTemplateKind> ChooseChatTemplate(
    const std::optional<std::string>& config_json,
    const std::optional<std::string>& tokenizer_config_json, absl::string_view tokenizer_kind) {
  if (config_json.has_value()) {
    if (auto name = StringField(*config_json, "chat_template")) {
      if (auto kind = ChatTemplateByName(*name)) return *kind;
      return absl::InvalidArgumentError(absl::StrCat(
          "config.json: chat_template \"", *name,
          "\" is not one of plain, chatml, llama2, llama3; chat routes are off for this model "
          "(completions work)"));
    }
  }
  if (tokenizer_config_json.has_value()) {
    if (auto jinja = StringField(*tokenizer_config_json, "chat_template")) {
      if (absl::StrContains(*jinja, "<|im_start|>")) return ChatTemplateKind::kChatml;
      if (absl::StrContains(*jinja, "[INST]")) return ChatTemplateKind::kLlama2;
      if (absl::StrContains(*jinja, "<|start_header_id|>")) return ChatTemplateKind::kLlama3;
      return absl::InvalidArgumentError(
          "tokenizer_config.json: chat_template is a Jinja template attnserve does not "
          "recognise (it knows chatml, llama2 and llama3); set config.json \"chat_template\" "
          "to plain, chatml, llama2 or llama3 to use chat routes (completions work)");
    }
  }
  if (tokenizer_kind == "bytes") return ChatTemplateKind::kPlain;
  return absl::InvalidArgumentError(
      "the model has no chat template: set config.json \"chat_template\" to plain, chatml, "
      "llama2 or llama3 to use chat routes (completions work)");
}

absl::StatusOr<ChatTemplateKind> ChatTemplateForDirectory(const std::string& directory,
                                                          absl::string_view tokenizer_kind) {
  if (directory.empty()) return ChooseChatTemplate(std::nullopt, std::nullopt, tokenizer_kind);
  if (model::IsGgufPath(directory)) {
    // A GGUF file carries its Jinja template as tokenizer.chat_template.
    auto reader = model::GgufReader::Open(directory);
    if (!reader.ok()) return reader.status();
    const nlohmann::json& m = (*reader)->file().metadata;
    std::optional<std::string> tokenizer_config;
    if (m.contains("tokenizer.chat_template")) {
      // A file's strings are bytes: Dump replaces invalid UTF-8 where dump() would throw.
      tokenizer_config = Dump(nlohmann::json{{"chat_template", m["tokenizer.chat_template"]}});
    }
    return ChooseChatTemplate(std::nullopt, tokenizer_config, tokenizer_kind);
  }
  const std::filesystem::path dir(directory);
  return ChooseChatTemplate(ReadFile(dir / "config.json"), ReadFile(dir / "tokenizer_config.json"),
                            tokenizer_kind);
}

absl::StatusOr<std::string> RenderChat(ChatTemplateKind kind,
                                       const std::vector<ChatMessage>& messages,
                                       const std::vector<std::string>& tools) {
  if (messages.empty()) return absl::InvalidArgumentError("messages: must not be empty");
  std::vector<ChatMessage> normal;
  for (const ChatMessage& m : messages) {
    auto role = NormalRole(m.role);
    if (!role.ok()) return role.status();
    normal.push_back(m);
    normal.back().role = *std::move(role);
  }
  switch (kind) {
    case ChatTemplateKind::kPlain:
      return RenderPlain(normal, tools);
    case ChatTemplateKind::kChatml:
      return RenderChatml(normal, tools);
    case ChatTemplateKind::kLlama2:
      return RenderLlama2(normal, tools);
    case ChatTemplateKind::kLlama3:
      return RenderLlama3(normal, tools);
  }
  return absl::InternalError("unknown chat template");
}

absl::StatusOr<std::string> RenderAfterAssistant(ChatTemplateKind kind,
                                                 const std::vector<ChatMessage>& messages,
                                                 bool ended_with_eos) {
  if (messages.empty()) return absl::InvalidArgumentError("input: must not be empty");
  // The whole conversation with a marker for the generated content; what follows the
  // marker is the continuation. The user message before it only gives the templates
  // the context they check (llama2's alternation).
  constexpr char kMarker[] = "\x1f\x1e attnserve generated text \x1e\x1f";
  std::vector<ChatMessage> whole = {{"user", "u"}, {"assistant", kMarker}};
  whole.insert(whole.end(), messages.begin(), messages.end());
  auto rendered = RenderChat(kind, whole);
  if (!rendered.ok()) return rendered.status();
  const size_t at = rendered->find(kMarker);
  if (at == std::string::npos) return absl::InternalError("the chat template lost the marker");
  std::string after = rendered->substr(at + sizeof(kMarker) - 1);
  if (ended_with_eos) {
    const absl::string_view end_of_turn = EndOfTurn(kind);
    if (!end_of_turn.empty() && absl::StartsWith(after, end_of_turn)) {
      after.erase(0, end_of_turn.size());
    }
  }
  return after;
}

std::vector<std::string> AssistantTurnEnds(ChatTemplateKind kind,
                                           const std::vector<ChatMessage>& messages,
                                           size_t max_turns,
                                           const std::vector<std::string>& tools) {
  constexpr char kMarker[] = "\x1f\x1e attnserve turn end \x1e\x1f";
  const std::string end_of_turn(EndOfTurn(kind));
  // The last max_turns assistant messages, oldest first.
  std::vector<size_t> assistant;
  for (size_t k = messages.size(); k-- > 0 && assistant.size() < max_turns;) {
    if (messages[k].role == "assistant") assistant.push_back(k);
  }
  std::reverse(assistant.begin(), assistant.end());
  std::vector<std::string> out;
  for (size_t k : assistant) {
    // The conversation up to this message, its content marked, and a user message after
    // it (the templates render an assistant message only before another turn).
    // An assistant message renders as its text in every template: its calls join the
    // content so that the marker follows them.
    std::vector<ChatMessage> upto(messages.begin(), messages.begin() + k + 1);
    upto.back().content = AssistantText(kind, upto.back()) + kMarker;
    upto.back().tool_calls.clear();
    upto.push_back({"user", "u"});
    auto rendered = RenderChat(kind, upto, tools);
    if (!rendered.ok()) continue;
    const size_t at = rendered->find(kMarker);
    if (at == std::string::npos) continue;
    out.push_back(rendered->substr(0, at));
    if (!end_of_turn.empty()) out.push_back(rendered->substr(0, at) + end_of_turn);
  }
  return out;
}

}  // namespace attnserve::http
