#include "server/http/chat_template.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace attnserve::http {
namespace {

using ::testing::HasSubstr;

const std::vector<ChatMessage> kConversation = {
    {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", "Why?"}};

TEST(RenderChatTest, PlainLabelsEachMessageAndCuesTheAssistant) {
  auto text = RenderChat(ChatTemplateKind::kPlain, kConversation);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "System: Be brief.\nUser: Hi\nAssistant: Hello.\nUser: Why?\nAssistant: ");
}

TEST(RenderChatTest, PlainReadsDeveloperAsSystem) {
  auto text = RenderChat(ChatTemplateKind::kPlain, {{"developer", "D"}, {"user", "U"}});
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "System: D\nUser: U\nAssistant: ");
}

TEST(RenderChatTest, AnAssistantTurnRendersAsWhatFollowedTheCue) {
  // The prompt of the first turn, plus the generated text, is the start of the second.
  auto first = RenderChat(ChatTemplateKind::kPlain, {{"user", "Hi"}});
  auto second = RenderChat(ChatTemplateKind::kPlain,
                           {{"user", "Hi"}, {"assistant", "Hello."}, {"user", "Why?"}});
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(second->substr(0, first->size() + 6), *first + "Hello.");
  auto chatml_first = RenderChat(ChatTemplateKind::kChatml, {{"user", "Hi"}});
  auto chatml_second = RenderChat(ChatTemplateKind::kChatml,
                                  {{"user", "Hi"}, {"assistant", "Hello."}, {"user", "Why?"}});
  EXPECT_EQ(chatml_second->substr(0, chatml_first->size() + 6), *chatml_first + "Hello.");
}

TEST(RenderChatTest, Chatml) {
  auto text = RenderChat(ChatTemplateKind::kChatml, kConversation);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nWhy?<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(RenderChatTest, Llama2PutsTheSystemInsideTheFirstInstruction) {
  auto text = RenderChat(ChatTemplateKind::kLlama2, kConversation);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text,
            "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello. </s><s>[INST] Why? [/INST]");
  auto no_system = RenderChat(ChatTemplateKind::kLlama2, {{"user", "Hi"}});
  EXPECT_EQ(*no_system, "[INST] Hi [/INST]");
}

TEST(RenderChatTest, RefusesWhatATemplateCannotSay) {
  EXPECT_THAT(RenderChat(ChatTemplateKind::kPlain, {}).status().message(), HasSubstr("messages"));
  EXPECT_THAT(RenderChat(ChatTemplateKind::kPlain, {{"function", "x"}}).status().message(),
              HasSubstr("\"function\""));
  EXPECT_FALSE(RenderChat(ChatTemplateKind::kLlama2, {{"user", "a"}, {"user", "b"}}).ok());
  EXPECT_FALSE(RenderChat(ChatTemplateKind::kLlama2, {{"user", "a"}, {"assistant", "b"}}).ok());
}

// --- tools ---

const std::string kWeatherTool =
    R"({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}})";
const std::string kCall = R"({"city": "Paris"})";

// A tool loop: the question, the assistant's call, its result, the answer.
std::vector<ChatMessage> ToolLoop(const std::string& content) {
  return {{"user", "Weather?"},
          {"assistant", content, {{"call_1", "get_weather", kCall}}},
          {"tool", "sunny", {}, "call_1"},
          {"assistant", "Sunny."}};
}

TEST(RenderChatTest, ChatmlToolsAsQwenWritesThem) {
  // Qwen2.5's template: the tools section after the system text, the call in its
  // envelope, the result as a user turn of <tool_response>.
  std::vector<ChatMessage> m = {{"system", "Be brief."}};
  for (const ChatMessage& x : ToolLoop("")) m.push_back(x);
  auto text = RenderChat(ChatTemplateKind::kChatml, m, {kWeatherTool});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text,
            "<|im_start|>system\nBe brief.\n\n# Tools\n\nYou may call one or more functions to "
            "assist with the user query.\n\nYou are provided with function signatures within "
            "<tools></tools> XML tags:\n<tools>\n" + kWeatherTool +
            "\n</tools>\n\nFor each function call, return a json object with function name and "
            "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
            "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
            "<|im_start|>user\nWeather?<|im_end|>\n"
            "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
            "{\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n"
            "<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n"
            "<|im_start|>assistant\nSunny.<|im_end|>\n<|im_start|>assistant\n");
  // Without a system message the section is a system message of its own; consecutive
  // results share one user turn.
  std::vector<ChatMessage> two = ToolLoop("");
  two.insert(two.begin() + 3, ChatMessage{"tool", "windy", {}, "call_2"});
  auto grouped = RenderChat(ChatTemplateKind::kChatml, two, {kWeatherTool, kWeatherTool});
  ASSERT_TRUE(grouped.ok()) << grouped.status();
  EXPECT_TRUE(absl::StartsWith(*grouped, "<|im_start|>system\n# Tools\n\n")) << *grouped;
  EXPECT_THAT(*grouped, HasSubstr("<tools>\n" + kWeatherTool + "\n" + kWeatherTool + "\n</tools>"));
  EXPECT_THAT(*grouped, HasSubstr("<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n"
                                  "<tool_response>\nwindy\n</tool_response><|im_end|>\n"));
}

TEST(RenderChatTest, PlainAndLlama2ToolsInThePlainEnvelope) {
  auto plain = RenderChat(ChatTemplateKind::kPlain, ToolLoop("Let me see. "), {kWeatherTool});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(*plain,
            "Tools: to call a function, answer <tool_call>{\"name\": NAME, \"arguments\": "
            "ARGUMENTS}</tool_call>. The functions: " + kWeatherTool + "\nUser: Weather?\n"
            "Assistant: Let me see. <tool_call>{\"name\": \"get_weather\", \"arguments\": "
            "{\"city\": \"Paris\"}}</tool_call>\nTool: sunny\nAssistant: Sunny.\nAssistant: ");
  auto llama2 = RenderChat(ChatTemplateKind::kLlama2,
                           {{"user", "Weather?"},
                            {"assistant", "", {{"call_1", "get_weather", kCall}}},
                            {"tool", "sunny", {}, "call_1"},
                            {"tool", "windy", {}, "call_2"}},
                           {kWeatherTool});
  ASSERT_TRUE(llama2.ok()) << llama2.status();
  EXPECT_EQ(*llama2,
            "[INST] <<SYS>>\nTools: to call a function, answer <tool_call>{\"name\": NAME, "
            "\"arguments\": ARGUMENTS}</tool_call>. The functions: " + kWeatherTool +
            "\n<</SYS>>\n\nWeather? [/INST] <tool_call>{\"name\": \"get_weather\", "
            "\"arguments\": {\"city\": \"Paris\"}}</tool_call> </s><s>[INST] <tool_response>\n"
            "sunny\n</tool_response>\n<tool_response>\nwindy\n</tool_response> [/INST]");
}

// Llama 3: a header per message, tool results as ipython turns, the tools line ending the
// system message, calls in the plain envelope. (tests/gguf/chat_template_test.sh holds the
// rendering of plain chats to node-llama-cpp's Llama 3 chat wrapper.)
TEST(RenderChatTest, Llama3HeadersAndTools) {
  auto chat = RenderChat(ChatTemplateKind::kLlama3, {{"system", "Be brief."}, {"user", "Hi"},
                                                     {"assistant", "Hello."}, {"user", "Bye"}});
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(*chat,
            "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  auto tools = RenderChat(ChatTemplateKind::kLlama3, ToolLoop(""), {kWeatherTool});
  ASSERT_TRUE(tools.ok()) << tools.status();
  EXPECT_EQ(*tools,
            "<|start_header_id|>system<|end_header_id|>\n\nTools: to call a function, answer "
            "<tool_call>{\"name\": NAME, \"arguments\": ARGUMENTS}</tool_call>. The functions: " +
                kWeatherTool + "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWeather?"
            "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n<tool_call>{\"name\": "
            "\"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call><|eot_id|>"
            "<|start_header_id|>ipython<|end_header_id|>\n\nsunny<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nSunny.<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  auto with_system = RenderChat(ChatTemplateKind::kLlama3, {{"system", "S"}, {"user", "U"}},
                                {kWeatherTool});
  ASSERT_TRUE(with_system.ok());
  EXPECT_TRUE(absl::StartsWith(
      *with_system, "<|start_header_id|>system<|end_header_id|>\n\nS\n\nTools: to call"))
      << *with_system;
  EXPECT_EQ(*RenderAfterAssistant(ChatTemplateKind::kLlama3, {{"user", "U"}}, true),
            "<|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(*RenderAfterAssistant(ChatTemplateKind::kLlama3, {{"user", "U"}}, false),
            "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

// The guarantee prefix caching rests on: the prompt of the call's turn plus what the model
// generated (content, then the calls as WriteToolCalls writes them) starts the next
// turn's prompt, and AssistantTurnEnds names exactly that point. (llama2 renders an
// answer after a space, as SentencePiece's first piece of it carries one.)
TEST(RenderChatTest, AToolCallTurnRendersAsWhatTheModelGenerated) {
  for (ChatTemplateKind kind : {ChatTemplateKind::kPlain, ChatTemplateKind::kChatml,
                                ChatTemplateKind::kLlama2, ChatTemplateKind::kLlama3}) {
    std::vector<ChatMessage> loop = ToolLoop("On it.\n");
    loop.pop_back();  // ending on the result: llama2 renders no history ending with an answer
    auto first = RenderChat(kind, {loop[0]}, {kWeatherTool});
    auto whole = RenderChat(kind, loop, {kWeatherTool});
    ASSERT_TRUE(first.ok() && whole.ok()) << ChatTemplateName(kind);
    const std::string generated = std::string(kind == ChatTemplateKind::kLlama2 ? " " : "") +
        "On it.\n" + grammar::WriteToolCalls(ToolCallFormatOf(kind), {{"get_weather", kCall}});
    EXPECT_TRUE(absl::StartsWith(*whole, *first + generated)) << ChatTemplateName(kind);
    const std::vector<std::string> ends = AssistantTurnEnds(kind, loop, 8, {kWeatherTool});
    ASSERT_FALSE(ends.empty()) << ChatTemplateName(kind);
    EXPECT_EQ(ends[0], *first + generated) << ChatTemplateName(kind);
    // The continuation after the call's turn, as a stored response renders it.
    auto after = RenderAfterAssistant(kind, {loop[2]}, /*ended_with_eos=*/false);
    ASSERT_TRUE(after.ok()) << after.status();
    EXPECT_EQ(*first + generated + *after, *whole) << ChatTemplateName(kind);
  }
}

TEST(ToolDefinitionTextTest, KeepsTheOrderWithPythonSeparators) {
  const auto tool = nlohmann::ordered_json::parse(
      R"({"type":"function","function":{"name":"f","parameters":{"b":1,"a":[true,null,"é"]}}})");
  EXPECT_EQ(ToolDefinitionText(tool),
            R"({"type": "function", "function": {"name": "f", "parameters": {"b": 1, "a": [true, null, "é"]}}})");
}

TEST(ChooseChatTemplateTest, ConfigNameWinsThenJinjaThenBytes) {
  EXPECT_EQ(*ChooseChatTemplate(R"({"chat_template":"llama2"})",
                                R"({"chat_template":"{{'<|im_start|>'}}"})", "sentencepiece"),
            ChatTemplateKind::kLlama2);
  EXPECT_EQ(*ChooseChatTemplate(R"({"name":"m"})",
                                R"({"chat_template":"{% for m in messages %}<|im_start|>"})",
                                "sentencepiece"),
            ChatTemplateKind::kChatml);
  EXPECT_EQ(*ChooseChatTemplate(std::nullopt, R"({"chat_template":"{{ '[INST] ' }}"})",
                                "sentencepiece"),
            ChatTemplateKind::kLlama2);
  EXPECT_EQ(*ChooseChatTemplate(
                std::nullopt,
                R"({"chat_template":"{{ '<|start_header_id|>' + message['role'] }}"})",
                "gpt2"),
            ChatTemplateKind::kLlama3);
  EXPECT_EQ(*ChooseChatTemplate(R"({"chat_template":"llama3"})", std::nullopt, "gpt2"),
            ChatTemplateKind::kLlama3);
  EXPECT_EQ(*ChooseChatTemplate(std::nullopt, std::nullopt, "bytes"), ChatTemplateKind::kPlain);
}

TEST(ChooseChatTemplateTest, UnknownTemplatesNameTheSetting) {
  auto bad_name = ChooseChatTemplate(R"({"chat_template":"vicuna"})", std::nullopt, "bytes");
  EXPECT_THAT(bad_name.status().message(), HasSubstr("config.json: chat_template \"vicuna\""));
  auto jinja = ChooseChatTemplate(std::nullopt, R"({"chat_template":"<start_of_turn>"})", "bytes");
  EXPECT_THAT(jinja.status().message(), HasSubstr("tokenizer_config.json: chat_template"));
  auto none = ChooseChatTemplate(std::nullopt, std::nullopt, "sentencepiece");
  EXPECT_THAT(none.status().message(), HasSubstr("config.json \"chat_template\""));
}


// A conversation continued from a stored state renders, piece by piece, exactly what the
// whole history renders to: the first prompt, the generated text, then the continuation.
TEST(RenderAfterAssistantTest, PiecesEqualTheWholeConversation) {
  for (ChatTemplateKind kind : {ChatTemplateKind::kPlain, ChatTemplateKind::kChatml,
                                ChatTemplateKind::kLlama2, ChatTemplateKind::kLlama3}) {
    SCOPED_TRACE(ChatTemplateName(kind));
    const std::vector<ChatMessage> first = {{"system", "S"}, {"user", "Hi"}};
    const std::string generated = "Hello there.";
    auto prompt = RenderChat(kind, first);
    auto after = RenderAfterAssistant(kind, {{"user", "And then?"}}, /*ended_with_eos=*/false);
    auto whole = RenderChat(kind, {{"system", "S"}, {"user", "Hi"}, {"assistant", generated},
                                   {"user", "And then?"}});
    ASSERT_TRUE(prompt.ok() && after.ok() && whole.ok()) << after.status();
    // llama2 puts a space between "[/INST]" and the assistant's content, which a
    // SentencePiece model generates as the "▁" of its first piece.
    const std::string space = kind == ChatTemplateKind::kLlama2 ? " " : "";
    EXPECT_EQ(*prompt + space + generated + *after, *whole);
  }
  EXPECT_EQ(*RenderAfterAssistant(ChatTemplateKind::kPlain, {{"user", "U"}}, false),
            "\nUser: U\nAssistant: ");
}

// The end-of-sequence token that ended the turn is in the state: its text is not added.
TEST(RenderAfterAssistantTest, AnEndOfSequenceTokenIsNotRenderedTwice) {
  EXPECT_EQ(*RenderAfterAssistant(ChatTemplateKind::kChatml, {{"user", "U"}}, true),
            "\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(*RenderAfterAssistant(ChatTemplateKind::kLlama2, {{"user", "U"}}, true),
            "<s>[INST] U [/INST]");
  EXPECT_EQ(*RenderAfterAssistant(ChatTemplateKind::kLlama2, {{"user", "U"}}, false),
            " </s><s>[INST] U [/INST]");
}

TEST(RenderAfterAssistantTest, RefusesWhatTheTemplateCannotSay) {
  EXPECT_FALSE(RenderAfterAssistant(ChatTemplateKind::kPlain, {}, false).ok());
  EXPECT_FALSE(RenderAfterAssistant(ChatTemplateKind::kLlama2, {{"system", "S"}, {"user", "U"}},
                                    false).ok());
  EXPECT_FALSE(RenderAfterAssistant(ChatTemplateKind::kLlama2, {{"assistant", "A"}}, false).ok());
}

// Each assistant turn's end is a prefix of the whole rendering, where its content ends.
TEST(AssistantTurnEndsTest, EndWhereEachAssistantContentEnds) {
  const std::vector<ChatMessage> chat = {{"user", "Hi"}, {"assistant", "Hello."},
                                         {"user", "More"}, {"assistant", "Yes."},
                                         {"user", "Last"}};
  auto whole = RenderChat(ChatTemplateKind::kPlain, chat);
  ASSERT_TRUE(whole.ok());
  EXPECT_THAT(AssistantTurnEnds(ChatTemplateKind::kPlain, chat),
              ::testing::ElementsAre("User: Hi\nAssistant: Hello.",
                                     "User: Hi\nAssistant: Hello.\nUser: More\nAssistant: Yes."));
  for (const std::string& end : AssistantTurnEnds(ChatTemplateKind::kPlain, chat)) {
    EXPECT_EQ(whole->rfind(end, 0), 0u) << end;
  }
  auto chatml = AssistantTurnEnds(ChatTemplateKind::kChatml, chat);
  ASSERT_EQ(chatml.size(), 4u);
  EXPECT_EQ(chatml[1], chatml[0] + "<|im_end|>");
  EXPECT_TRUE(absl::EndsWith(chatml[0], "assistant\nHello."));
  auto chatml_whole = RenderChat(ChatTemplateKind::kChatml, chat);
  for (const std::string& end : chatml) EXPECT_EQ(chatml_whole->rfind(end, 0), 0u) << end;
  EXPECT_TRUE(AssistantTurnEnds(ChatTemplateKind::kPlain, {{"user", "Hi"}}).empty());
}

// Only the last few assistant turns are rendered: each costs a render of the history up
// to it, so all of a long history's would cost its length squared.
TEST(AssistantTurnEndsTest, OnlyTheLastTurnsOfALongHistory) {
  std::vector<ChatMessage> chat;
  for (int i = 0; i < 20; ++i) {
    chat.push_back({"user", absl::StrCat("U", i)});
    chat.push_back({"assistant", absl::StrCat("A", i)});
  }
  chat.push_back({"user", "Last"});
  auto ends = AssistantTurnEnds(ChatTemplateKind::kPlain, chat, 3);
  ASSERT_EQ(ends.size(), 3u);
  EXPECT_TRUE(absl::EndsWith(ends[0], "A17"));
  EXPECT_TRUE(absl::EndsWith(ends[2], "A19"));
}

}  // namespace
}  // namespace attnserve::http
