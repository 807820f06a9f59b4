// Hugging Face tokenizer.json files of byte-level BPE, read into a BpeTokenizer.
//
// Served: model.type "BPE" (vocab; merges as "a b" strings or ["a", "b"] pairs;
// ignore_merges), pre_tokenizer ByteLevel (use_regex: the GPT-2 split) or a Sequence of
// Split pre-tokenizers (Regex or String pattern, behavior "Isolated") ending in a
// ByteLevel, decoder ByteLevel, added_tokens, and a post_processor that is absent,
// ByteLevel or a TemplateProcessing putting at most one special token before the text.
// Refused, naming the field: anything else (normalizers such as Qwen2's NFC,
// add_prefix_space, BPE dropout, subword prefixes and suffixes, byte_fallback, added
// tokens that strip whitespace or match single words, templates that append tokens).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "server/model/config.h"
#include "server/tokenizer/bpe_tokenizer.h"

namespace attnserve::tokenizer {

struct TokenizerJson {
  BpeTokenizer::Vocabulary vocabulary;
  // The special token the post-processor puts before every text (Llama-3's
  // <|begin_of_text|>); -1: none.
  int32_t template_bos = -1;
};

// The contents of a tokenizer.json. INVALID_ARGUMENT starting "tokenizer.json: " and
// naming the field when it is not byte-level BPE as above or is malformed.
absl::StatusOr<TokenizerJson> ParseTokenizerJson(std::string_view text);

// The tokenizer of a model directory's tokenizer.json (`tokenizer_json`), its
// tokenizer_config.json (nullopt: none) and its config:
//   - EOS: the config's eos ids that are special added tokens, else tokenizer_config's
//     eos_token; none is refused;
//   - BOS: the config's bos id if it is a special added token, else tokenizer_config's
//     bos_token, else the post-processor's leading token; -1 when none;
//   - add_bos: tokenizer_config's add_bos_token, else whether the post-processor puts
//     a token before the text.
// INVALID_ARGUMENT naming the file and the field.
absl::StatusOr<std::shared_ptr<const BpeTokenizer>> LoadBpeTokenizer(
    std::string_view tokenizer_json, const std::optional<std::string>& tokenizer_config,
    const model::ModelConfig& config);

}  // namespace attnserve::tokenizer
