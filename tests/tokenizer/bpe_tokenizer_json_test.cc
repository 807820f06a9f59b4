// tokenizer.json files read into a BpeTokenizer: the GPT-2 and Llama-3 shapes, both forms
// of merges, BOS/EOS/add_bos from the configs, and every refusal with its message.
#include "server/tokenizer/bpe_tokenizer_json.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>

#include <nlohmann/json.hpp>

namespace attnserve::tokenizer {
namespace {

using ::testing::ElementsAre;
using Json = nlohmann::json;

// A GPT-2-shaped tokenizer.json: the 256 byte tokens (id = byte), "Ġt" 256, "he" 257,
// "Ġthe" 258, "<|endoftext|>" 259 (special).
Json Gpt2Json() {
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b) vocab[ByteLevelSymbol(uint8_t(b))] = b;
  vocab["Ġt"] = 256;
  vocab["he"] = 257;
  vocab["Ġthe"] = 258;
  vocab["<|endoftext|>"] = 259;
  return {
      {"version", "1.0"},
      {"added_tokens",
       {{{"id", 259}, {"content", "<|endoftext|>"}, {"single_word", false}, {"lstrip", false},
         {"rstrip", false}, {"normalized", true}, {"special", true}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
        {"use_regex", true}}},
      {"post_processor", {{"type", "ByteLevel"}, {"trim_offsets", false}}},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}}},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
        {"continuing_subword_prefix", ""}, {"end_of_word_suffix", ""}, {"fuse_unk", false},
        {"byte_fallback", false}, {"vocab", vocab},
        {"merges", {"Ġ t", "h e", "Ġt he"}}}}};
}

// The merges of Gpt2Json() in the ["a", "b"] form.
Json PairMerges() {
  return Json::array({Json::array({"Ġ", "t"}), Json::array({"h", "e"}), Json::array({"Ġt", "he"})});
}

// Llama-3's shape: Split(Regex) + ByteLevel(use_regex=false), pair merges, ignore_merges,
// a template putting <|begin_of_text|> (260) first.
Json Llama3Json() {
  Json j = Gpt2Json();
  j["model"]["merges"] = PairMerges();
  j["model"]["ignore_merges"] = true;
  j["model"]["vocab"]["hello"] = 261;  // no merges make it
  j["added_tokens"].push_back({{"id", 260}, {"content", "<|begin_of_text|>"},
                               {"normalized", false}, {"special", true}});
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"Regex", kLlama3SplitPattern}}},
         {"behavior", "Isolated"}, {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  Json bos = {{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}};
  Json text = {{"Sequence", {{"id", "A"}, {"type_id", 0}}}};
  Json template_processing = {{"type", "TemplateProcessing"}};
  template_processing["single"] = Json::array({bos, text});
  template_processing["special_tokens"]["<|begin_of_text|>"] = {
      {"id", "<|begin_of_text|>"}, {"ids", {260}}};
  j["post_processor"] = {{"type", "Sequence"}};
  j["post_processor"]["processors"] =
      Json::array({Json{{"type", "ByteLevel"}}, template_processing});
  return j;
}

model::ModelConfig Config(int bos, std::vector<int> eos) {
  model::ModelConfig c;
  c.bos_token_id = bos;
  c.eos_token_ids = std::move(eos);
  return c;
}

absl::StatusOr<std::shared_ptr<const BpeTokenizer>> Load(
    const Json& j, std::optional<std::string> tokenizer_config = std::nullopt,
    const model::ModelConfig& config = Config(259, {259})) {
  return LoadBpeTokenizer(j.dump(), tokenizer_config, config);
}

TEST(LoadBpeTokenizer, ReadsAGpt2File) {
  auto t = Load(Gpt2Json());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->vocab_size(), 260);
  EXPECT_THAT((*t)->eos_ids(), ElementsAre(259));
  EXPECT_EQ((*t)->bos_id(), 259);
  EXPECT_FALSE((*t)->add_bos());
  EXPECT_THAT((*t)->Encode("the the<|endoftext|>", false).value(),
              ElementsAre('t', 257, 258, 259));
}

TEST(LoadBpeTokenizer, ReadsALlama3File) {
  auto t = Load(Llama3Json(), std::nullopt, Config(260, {259}));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->vocab_size(), 262);
  EXPECT_EQ((*t)->bos_id(), 260);
  EXPECT_TRUE((*t)->add_bos());  // from the template
  EXPECT_THAT((*t)->Encode("hello the 12345", false).value(),
              ElementsAre(260, 261, 258, ' ', '1', '2', '3', '4', '5'));
  EXPECT_THAT((*t)->Encode("hello", true).value(), ElementsAre(261));
  // The template's token is BOS even when config.json's bos_token_id is not a token.
  t = Load(Llama3Json(), std::nullopt, Config(1, {259}));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->bos_id(), 260);
}

TEST(LoadBpeTokenizer, BothFormsOfMergesGiveTheSameIds) {
  Json pairs = Gpt2Json();
  pairs["model"]["merges"] = PairMerges();
  auto a = Load(Gpt2Json()), b = Load(pairs);
  ASSERT_TRUE(a.ok() && b.ok());
  for (const char* text : {"the", " the", "hehe the then"}) {
    EXPECT_EQ((*a)->Encode(text, false).value(), (*b)->Encode(text, false).value());
  }
}

TEST(LoadBpeTokenizer, BosEosAndAddBosFromTheConfigs) {
  // config.json's ids that are not special added tokens give way to tokenizer_config's.
  auto t = Load(Llama3Json(),
                R"({"bos_token": "<|begin_of_text|>", "eos_token": {"content": "<|endoftext|>"},
                    "add_bos_token": false})",
                Config(1, {2}));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->bos_id(), 260);
  EXPECT_THAT((*t)->eos_ids(), ElementsAre(259));
  EXPECT_FALSE((*t)->add_bos());
  t = Load(Gpt2Json(), R"({"add_bos_token": true})");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT((*t)->Encode("the", false).value(), ElementsAre(259, 't', 257));
  EXPECT_EQ(Load(Gpt2Json(), std::nullopt, Config(1, {2})).status().message(),
            "tokenizer.json: no end-of-sequence id: config.json's eos_token_id names no "
            "special added token and tokenizer_config.json names no eos_token");
  EXPECT_EQ(Load(Gpt2Json(), R"({"add_bos_token": true})", Config(1, {259})).status().message(),
            "tokenizer_config.json: add_bos_token is true but there is no BOS token "
            "(config.json's bos_token_id, tokenizer_config.json's bos_token)");
  EXPECT_EQ(Load(Gpt2Json(), R"({"add_bos_token": "yes"})").status().message(),
            "tokenizer_config.json: add_bos_token must be true or false, got \"yes\"");
  EXPECT_EQ(Load(Gpt2Json(), "[]").status().message(),
            "tokenizer_config.json: not a JSON object");
}

TEST(LoadBpeTokenizer, RefusesEachUnsupportedOrMalformedField) {
  const std::vector<std::pair<std::function<void(Json&)>, std::string>> cases = {
      {[](Json& j) { j = Json::array(); }, "not a JSON object"},
      {[](Json& j) { j.erase("model"); }, "model: missing or not an object"},
      {[](Json& j) { j["model"]["type"] = "WordPiece"; }, "model.type: WordPiece is not BPE"},
      {[](Json& j) { j["model"]["dropout"] = 0.1; },
       "model.dropout: 0.1: BPE dropout is not supported"},
      {[](Json& j) { j["model"]["continuing_subword_prefix"] = "##"; },
       "model.continuing_subword_prefix: \"##\" is not supported"},
      {[](Json& j) { j["model"]["end_of_word_suffix"] = "</w>"; },
       "model.end_of_word_suffix: \"</w>\" is not supported"},
      {[](Json& j) { j["model"]["byte_fallback"] = true; },
       "model.byte_fallback: true is not supported, only false"},
      {[](Json& j) { j["model"]["ignore_merges"] = 1; }, "model.ignore_merges: not a boolean: 1"},
      {[](Json& j) { j["model"]["vocab"] = Json::object(); }, "model.vocab: missing or empty"},
      {[](Json& j) { j["model"]["vocab"]["x"] = -1; },
       "model.vocab: the id of \"x\" is -1, not an id in [0, 65796)"},
      {[](Json& j) { j["model"]["vocab"]["x"] = 4000000000; },
       "model.vocab: the id of \"x\" is 4000000000, not an id in [0, 65796)"},
      {[](Json& j) { j["model"]["vocab"]["x"] = 5; },
       "model.vocab: \"x\" and \"" + ByteLevelSymbol(5) + "\" have the same id 5"},
      {[](Json& j) { j["model"].erase("merges"); }, "model.merges: missing"},
      {[](Json& j) { j["model"]["merges"] = "Ġ t"; }, "model.merges: not an array"},
      {[](Json& j) { j["model"]["merges"] = Json::array(); },
       "model.merges: empty: a BPE without merges"},
      {[](Json& j) { j["model"]["merges"][1] = "h e x"; },
       "model.merges: merge 1 is \"h e x\", not \"a b\" or [\"a\", \"b\"]"},
      {[](Json& j) { j["model"]["merges"][1] = Json::array({"h"}); },
       "model.merges: merge 1 is [\"h\"], not \"a b\" or [\"a\", \"b\"]"},
      {[](Json& j) { j["model"]["merges"][1] = "x y"; },
       "merge 1 (\"x\" \"y\"): \"xy\" is not in the vocabulary"},
      {[](Json& j) { j["added_tokens"] = 3; }, "added_tokens: not an array"},
      {[](Json& j) { j["added_tokens"][0]["id"] = "259"; },
       "added_tokens[0]: id \"259\" is not in [0, 65796)"},
      {[](Json& j) { j["added_tokens"][0]["content"] = ""; },
       "added_tokens[0]: content is missing or empty"},
      {[](Json& j) { j["added_tokens"][0]["lstrip"] = true; },
       "added_tokens[0].lstrip: true is not supported, only false"},
      {[](Json& j) { j["added_tokens"][0]["single_word"] = true; },
       "added_tokens[0].single_word: true is not supported, only false"},
      {[](Json& j) { j["added_tokens"][0]["special"] = 1; },
       "added_tokens[0]: special and normalized must be true or false"},
      {[](Json& j) { j["normalizer"] = {{"type", "NFC"}}; },
       "normalizer: NFC is not supported (byte-level BPE without a normalizer only)"},
      {[](Json& j) { j["pre_tokenizer"]["add_prefix_space"] = true; },
       "pre_tokenizer.add_prefix_space: true is not supported, only false"},
      {[](Json& j) { j["pre_tokenizer"].erase("add_prefix_space"); },
       "pre_tokenizer.add_prefix_space: true (its default) is not supported, only false"},
      {[](Json& j) { j["pre_tokenizer"] = nullptr; },
       "pre_tokenizer: null here: only ByteLevel, or a Sequence of Split pre-tokenizers "
       "ending in ByteLevel, is supported"},
      {[](Json& j) { j["pre_tokenizer"] = {{"type", "Metaspace"}}; },
       "pre_tokenizer: Metaspace here: only ByteLevel, or a Sequence of Split "
       "pre-tokenizers ending in ByteLevel, is supported"},
      {[](Json& j) { j["decoder"] = {{"type", "WordPiece"}}; },
       "decoder: WordPiece is not ByteLevel"},
      {[](Json& j) { j["post_processor"] = {{"type", "RobertaProcessing"}}; },
       "post_processor: RobertaProcessing is not supported (only ByteLevel and "
       "TemplateProcessing)"},
  };
  for (const auto& [mutate, message] : cases) {
    Json j = Gpt2Json();
    mutate(j);
    EXPECT_EQ(std::string(Load(j).status().message()), "tokenizer.json: " + message) << j.dump().substr(0, 200);
  }
}

TEST(LoadBpeTokenizer, RefusesUnsupportedSplitsAndTemplates) {
  const std::vector<std::pair<std::function<void(Json&)>, std::string>> cases = {
      {[](Json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "MergedWithNext"; },
       "pre_tokenizer.pretokenizers[0].behavior: \"MergedWithNext\" is not supported, only "
       "\"Isolated\""},
      {[](Json& j) { j["pre_tokenizer"]["pretokenizers"][0]["invert"] = true; },
       "pre_tokenizer.pretokenizers[0].invert: true is not supported, only false"},
      {[](Json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", "(x"}}; },
       "split pattern (x does not compile (PCRE2, at offset 2): missing closing parenthesis"},
      {[](Json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = "x"; },
       "pre_tokenizer.pretokenizers[0].pattern: neither {\"Regex\": ...} nor {\"String\": ...}"},
      {[](Json& j) { std::swap(j["pre_tokenizer"]["pretokenizers"][0],
                               j["pre_tokenizer"]["pretokenizers"][1]); },
       "pre_tokenizer.pretokenizers[0]: ByteLevel here: only ByteLevel, or a Sequence of "
       "Split pre-tokenizers ending in ByteLevel, is supported"},
      {[](Json& j) {
         j["post_processor"]["processors"][1]["single"].push_back(
             {{"SpecialToken", {{"id", "<|endoftext|>"}}}});
       },
       "post_processor.single: [{\"SpecialToken\":{\"id\":\"<|begin_of_text|>\",\"type_id\":0}},"
       "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}},{\"SpecialToken\":{\"id\":\"<|endoftext|>\"}}]"
       ": only one special token before the text is supported"},
      {[](Json& j) { j["post_processor"]["processors"][1]["single"] = Json::array(); },
       "post_processor.single: has no Sequence A"},
  };
  for (const auto& [mutate, message] : cases) {
    Json j = Llama3Json();
    mutate(j);
    EXPECT_EQ(std::string(Load(j).status().message()), "tokenizer.json: " + message);
  }
}

TEST(LoadBpeTokenizer, StringSplitPatternsAreLiteral) {
  Json j = Llama3Json();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"String", "."}};
  j["model"]["ignore_merges"] = false;
  auto t = Load(j);
  ASSERT_TRUE(t.ok()) << t.status();
  // "he.he": split at the literal ".", so "he" "." "he"; "hexhe" is one word.
  EXPECT_THAT((*t)->Encode("he.he", true).value(), ElementsAre(257, '.', 257));
}

}  // namespace
}  // namespace attnserve::tokenizer
