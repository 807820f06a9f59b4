// Chat templates: a conversation (role, content) rendered as the prompt text a model was
// trained on. Hugging Face models carry theirs as Jinja in tokenizer_config.json; no Jinja
// engine is packaged for Debian 12, so a fixed set is implemented and recognised:
//
//   plain   (byte-level models)  "System: S\nUser: U\nAssistant: A\n" ... "Assistant: "
//   chatml                       "<|im_start|>user\nU<|im_end|>\n" ... "<|im_start|>assistant\n"
//   llama2                       "[INST] <<SYS>>\nS\n<</SYS>>\n\nU [/INST] A </s><s>[INST] U2 [/INST]"
//   llama3                       "<|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|>" ...
//                                "<|start_header_id|>assistant<|end_header_id|>\n\n"
//
// The prompt ends where the assistant's text starts, and an assistant message renders as
// exactly the text the model generated after that point, so a history resent by a client
// re-encodes to the ids the model produced where the tokenizer allows it. Whether
// "<|im_start|>" or "</s>" become one special id is the tokenizer's matter: the text is
// encoded as a session's text always is.
//
// Tools (server/grammar/tool_calls.h): an assistant message's tool calls render after its
// content in the template's envelope (ToolCallFormatOf), their arguments verbatim, so that
// a call renders as the text the model generated for it. A tool result (role "tool"):
//   plain   "Tool: RESULT\n"
//   chatml  "<|im_start|>user\n<tool_response>\nRESULT\n</tool_response><|im_end|>\n"
//           (consecutive results in one user turn, each its <tool_response>, as Qwen's)
//   llama2  a user turn of "<tool_response>\nRESULT\n</tool_response>" (consecutive
//           results joined by "\n")
//   llama3  "<|start_header_id|>ipython<|end_header_id|>\n\nRESULT<|eot_id|>" (Llama 3.1's
//           role for tool output)
// The functions a request declares go in the system prompt: chatml as Qwen's / Hermes'
// "# Tools" section (one JSON definition a line inside <tools></tools>, after the system
// message's text, in a system message of its own when there is none); plain as a
// "Tools: ..." line after the first system line (first when there is none); llama2 the
// same line inside <<SYS>>; llama3 the same line at the end of the system message (in
// one of its own when there is none). The llama3 calls are written in our plain envelope,
// not Llama 3.1's JSON without one: the plain envelope's opening tag is what tool_choice
// auto waits for.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "server/grammar/tool_calls.h"

namespace attnserve::http {

// A call an assistant made, as the client sends it back.
struct ChatToolCall {
  std::string id;         // the client's handle ("call_..."); not rendered
  std::string name;
  std::string arguments;  // JSON text, as generated
};

struct ChatMessage {
  // "system" ("developer" is read as system), "user", "assistant" or "tool".
  std::string role;
  std::string content;
  std::vector<ChatToolCall> tool_calls = {};  // assistant: after the content
  std::string tool_call_id = {};              // tool: the call it answers; not rendered
};

// Appends `call` to the assistant message ending `messages`, or to a new one (no text)
// when the last message is another's: a call follows its turn's text in the same turn.
void AddToolCall(ChatToolCall call, std::vector<ChatMessage>* messages);

enum class ChatTemplateKind { kPlain, kChatml, kLlama2, kLlama3 };

// The tool-call envelope a template writes calls in: chatml hermes, the others plain.
grammar::ToolCallFormat ToolCallFormatOf(ChatTemplateKind kind);

// A tool definition ({"type": "function", "function": {...}}) as the prompt shows it: JSON
// in the order given, with Python json.dumps' separators (", " and ": "), as Hugging Face
// templates' `tojson` writes it.
std::string ToolDefinitionText(const nlohmann::ordered_json& tool);

// "plain", "chatml", "llama2", "llama3".
const char* ChatTemplateName(ChatTemplateKind kind);
// The kind named `name`; nullopt for any other name.
std::optional<ChatTemplateKind> ChatTemplateByName(absl::string_view name);

// The template of a model, chosen at load: config.json's "chat_template" when it is one
// of the names above; else recognised from tokenizer_config.json's "chat_template" Jinja
// text ("<|im_start|>": chatml, "[INST]": llama2, "<|start_header_id|>": llama3); else
// plain for a byte-level tokenizer (`tokenizer_kind` "bytes"). Arguments are the files'
// texts (nullopt: no such file).
// INVALID_ARGUMENT naming the setting otherwise (an unknown name in config.json, an
// unrecognised Jinja template, or none at all for a non-byte model): chat routes answer
// 400 with that message, completions still work.
absl::StatusOr<ChatTemplateKind> ChooseChatTemplate(
    const std::optional<std::string>& config_json,
    const std::optional<std::string>& tokenizer_config_json, absl::string_view tokenizer_kind);

// The same, reading config.json and tokenizer_config.json from `directory` (empty: a
// model built in memory, which has neither; a .gguf file: its tokenizer.chat_template).
absl::StatusOr<ChatTemplateKind> ChatTemplateForDirectory(const std::string& directory,
                                                          absl::string_view tokenizer_kind);

// `messages` rendered with `kind`, ending with the assistant's cue; `tools` (each a
// ToolDefinitionText) described in the system prompt. INVALID_ARGUMENT for an empty list,
// an unknown role, or (llama2) a system message after the first or two messages of the
// same side in a row (tool results are the user's side).
absl::StatusOr<std::string> RenderChat(ChatTemplateKind kind,
                                       const std::vector<ChatMessage>& messages,
                                       const std::vector<std::string>& tools = {});

// What follows an assistant turn the model generated when the conversation goes on with
// `messages`: the text a full RenderChat of the whole conversation has after the
// assistant's content, ending with the assistant's cue. A session continued with it
// holds what a client resending the whole history would have prefilled. When the turn
// ended on an end-of-sequence token (`ended_with_eos`, which is in the session's state
// but not in the text), the template's own end-of-turn marker ("<|im_end|>" for chatml,
// " </s>" for llama2, "<|eot_id|>" for llama3) is left out. Errors as RenderChat, for the conversation as a whole
// (llama2: the continuation must start with a user message and hold no system message).
// Where each assistant turn of `messages` ends in RenderChat(kind, messages): for every
// assistant message, the rendered text up to the end of its text (content, then tool
// calls; `tools` as RenderChat's), and (chatml,
// llama2) that text followed by the template's end-of-turn marker too (a turn that ended
// on an end-of-sequence token holds it). These are the states a chat client that
// resends its history may find kept from an earlier turn (prefix_cache.h). Empty when
// the messages do not render. Only the last `max_turns` assistant messages count: each
// costs a render of the history up to it, so all of a long history's would cost its
// length squared.
std::vector<std::string> AssistantTurnEnds(ChatTemplateKind kind,
                                           const std::vector<ChatMessage>& messages,
                                           size_t max_turns = 8,
                                           const std::vector<std::string>& tools = {});

absl::StatusOr<std::string> RenderAfterAssistant(ChatTemplateKind kind,
                                                 const std::vector<ChatMessage>& messages,
                                                 bool ended_with_eos);

}  // namespace attnserve::http
