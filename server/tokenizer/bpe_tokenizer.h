// Byte-level BPE (GPT-2, Llama-3, SmolLM and most recent models): our implementation of
// Hugging Face tokenizers' BPE model behind its ByteLevel pre-tokenizer and decoder.
//
// Encode: added tokens are cut out of the text first (leftmost-longest, the ones with
// normalized=false in a first pass, then the others, as tokenizers' AddedVocabulary
// does); each remaining stretch is split by the split patterns (PCRE2, UTF + UCP; the
// matches and the stretches between them are the words, tokenizers' "Isolated"
// behaviour); each word's bytes are spelt in the byte-level alphabet (GPT-2's
// bytes_to_unicode) and merged by rank (with ignore_merges, a word that is itself a token
// is that token).
//
// Invalid UTF-8: the patterns match with PCRE2_MATCH_INVALID_UTF, so no match covers an
// invalid byte; a run of bytes between matches is a word of its own, spelt and merged
// like any other, so invalid bytes are kept (never dropped, never U+FFFD) and
// decode(encode(bytes)) == bytes for every byte string. Hugging Face's tokenizers take
// only valid UTF-8 and have no rule to compare with.
//
// Decode: a token's bytes are its characters mapped back through the alphabet (a token
// with a character outside it, e.g. an added "\n\n", is its own UTF-8, as tokenizers'
// ByteLevel decoder does); special added tokens add nothing. Tokenizers' decode turns
// invalid UTF-8 in the joined bytes into U+FFFD; the stream carries the bytes as they are.
//
// No cache of encoded words: the tokenizer is immutable after Create, so any thread may
// use it without a lock.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "server/tokenizer/tokenizer.h"

namespace attnserve::tokenizer {

// The split of GPT-2's encoder.py (tokenizers' ByteLevel with use_regex).
inline constexpr char kGpt2SplitPattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Llama-3's (its tokenizer.json's Split pre-tokenizer).
inline constexpr char kLlama3SplitPattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Qwen2's and Qwen3's: Llama-3's with one digit per piece.
inline constexpr char kQwen2SplitPattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// The byte-level alphabet: `byte` as its printable code point in UTF-8 (0x20 -> "Ġ").
std::string ByteLevelSymbol(uint8_t byte);
// The bytes the byte-level spelling `token` stands for; nullopt when a character of it
// is not in the alphabet (or it is not UTF-8).
std::optional<std::string> ByteLevelBytes(std::string_view token);

namespace internal {
class SplitPattern;
}

class BpeTokenizer final : public Tokenizer {
 public:
  // A token matched in the text before the split (tokenizer.json's added_tokens).
  struct AddedToken {
    std::string content;  // matched exactly, as it stands in the text
    int32_t id = -1;
    bool special = false;     // decodes to nothing
    bool normalized = false;  // matched in the second pass (see the file comment)
  };
  // Everything the tokenizer is made of; tokenizer.json or a GGUF gpt2 vocabulary.
  struct Vocabulary {
    // Token by id, in the byte-level alphabet ("Ġthe"); "" where no token has the id.
    // Must hold the 256 one-character tokens of the alphabet.
    std::vector<std::string> tokens;
    // Merges, lowest rank (applied first) first: the two tokens whose concatenation is
    // a token. A pair listed twice takes its later rank (as tokenizers' does).
    std::vector<std::pair<std::string, std::string>> merges;
    std::vector<AddedToken> added;
    // Applied in turn, each splitting the words of the previous; none: each stretch
    // between added tokens is one word.
    std::vector<std::string> split_patterns = {kGpt2SplitPattern};
    // A word that is itself a token is that token, merges or not (Llama-3).
    bool ignore_merges = false;
  };
  struct Options {
    bool add_bos = false;  // start a session's first text with bos_id
    int32_t bos_id = -1;   // -1: none
    std::vector<int32_t> eos_ids;
  };

  // INVALID_ARGUMENT naming what is wrong: no tokens, a byte of the alphabet without its
  // token, a merge whose tokens or result are not tokens, no merges, an added token with
  // an empty content or an id outside the vocabulary, a pattern PCRE2 cannot compile,
  // BOS/EOS ids outside the vocabulary, no EOS, add_bos without BOS.
  static absl::StatusOr<std::shared_ptr<const BpeTokenizer>> Create(Vocabulary vocabulary,
                                                                    const Options& options);
  ~BpeTokenizer() override;

  std::string kind() const override { return "bpe"; }
  int vocab_size() const override { return int(bytes_.size()); }
  int32_t bos_id() const override { return bos_; }
  const std::vector<int32_t>& eos_ids() const override { return eos_; }
  bool add_bos() const override { return add_bos_; }
  // The same ids with and without `continuation`, except BOS (no dummy prefix here).
  // INTERNAL only when PCRE2 fails to match (its match limit).
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                              bool continuation) const override;
  // The token's bytes; nothing for special tokens and ids without a token.
  std::string StreamBytes(int32_t id, bool& at_start) const override;

  // The token of `id` as the vocabulary spells it ("Ġthe"); "" outside it.
  std::string Token(int32_t id) const;

 private:
  struct Merge {
    int32_t rank;
    int32_t merged;
  };
  BpeTokenizer();
  // Appends the ids of `text`, which holds no added token.
  absl::Status EncodeStretch(std::string_view text, std::vector<int32_t>& out) const;
  // Appends the ids of one word of the split.
  void EncodeWord(std::string_view word, std::vector<int32_t>& out) const;
  static uint64_t PairKey(int32_t left, int32_t right) {
    return (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
  }

  std::vector<std::string> tokens_;     // by id, byte-level spelling
  std::vector<std::string> bytes_;      // by id, what the id decodes to
  std::vector<bool> special_;           // by id
  absl::flat_hash_map<std::string, int32_t> ids_;  // byte-level spelling -> id
  absl::flat_hash_map<uint64_t, Merge> merges_;    // PairKey(left, right) -> merge
  int32_t byte_ids_[256];                          // the alphabet's tokens
  std::vector<AddedToken> added_;  // longest first
  bool added_starts_[256] = {};    // whether an added token starts with the byte
  std::vector<std::unique_ptr<internal::SplitPattern>> splits_;
  bool ignore_merges_ = false;
  int32_t bos_ = -1;
  std::vector<int32_t> eos_;
  bool add_bos_ = false;
};

}  // namespace attnserve::tokenizer
