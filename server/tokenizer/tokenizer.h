// Tokenizers: text -> token ids for prompts, ids -> the bytes a stream carries. One
// interface, three kinds: the byte tokenizer of our own models (byte_tokenizer.h),
// SentencePiece (sentencepiece_tokenizer.h, the Llama-2 family) and byte-level BPE from a
// tokenizer.json (bpe_tokenizer.h: GPT-2, Llama-3, SmolLM). LoadTokenizer picks the
// one a model directory names. Torch-free; a tokenizer is immutable after loading, so
// any thread may use it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/model/config.h"

namespace attnserve::tokenizer {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // "bytes", "sentencepiece" or "bpe".
  virtual std::string kind() const = 0;
  // Ids the tokenizer can produce: [0, vocab_size). At most the model's vocab_size.
  virtual int vocab_size() const = 0;
  // Begin-of-sequence id; -1 when there is none.
  virtual int32_t bos_id() const = 0;
  // The ids that end generation (never empty for the tokenizers here).
  virtual const std::vector<int32_t>& eos_ids() const = 0;
  // Whether the first text of a session starts with bos_id().
  virtual bool add_bos() const = 0;

  // The ids of `text`. `continuation` false: the start of a session's text (BOS first
  // when add_bos(); SentencePiece adds its "▁" dummy prefix as its own Encode does).
  // `continuation` true: text appended to a session that already holds tokens: no BOS,
  // no dummy prefix, so that a session's text is the concatenation of its turns' texts.
  virtual absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                                      bool continuation) const = 0;

  // The bytes `id` adds to a decoded text. `at_start`: nothing decoded so far has
  // produced a byte or consumed the leading space (see StreamDecoder); updated. Special
  // (control) ids and ids outside [0, vocab_size) add nothing.
  virtual std::string StreamBytes(int32_t id, bool& at_start) const = 0;

  // The bytes `id` adds in the middle of a text (StreamBytes past the start).
  std::string TokenBytes(int32_t id) const {
    bool at_start = false;
    return StreamBytes(id, at_start);
  }
  bool IsEos(int32_t id) const;
};

// The bytes of a sequence of ids, one id at a time: the concatenation of what Next
// returns equals the tokenizer's decoding of all the ids (SentencePiece: the leading "▁"
// of the text's first piece dropped, byte pieces as raw bytes — where those bytes are
// not valid UTF-8, SentencePiece's own Decode shows U+FFFD for each, the stream carries
// them as they are). Not thread-safe; one per stream. The tokenizer must outlive it.
class StreamDecoder {
 public:
  // `text_started`: the ids come after others that already produced text (a session's
  // later turns), so no leading-space rule applies.
  StreamDecoder(const Tokenizer& tokenizer, bool text_started)
      : tokenizer_(&tokenizer), at_start_(!text_started) {}
  std::string Next(int32_t id) { return tokenizer_->StreamBytes(id, at_start_); }
  // Whether the leading-space rule still applies (no id has produced text yet).
  bool at_start() const { return at_start_; }
  // What Next(id) would return, without consuming it (top_logprobs alternatives).
  std::string Peek(int32_t id) const {
    bool at_start = at_start_;
    return tokenizer_->StreamBytes(id, at_start);
  }

 private:
  const Tokenizer* tokenizer_;
  bool at_start_;
};

// The bytes of `ids` as one text (StreamDecoder from the start). An id outside
// [0, vocab_size) is INVALID_ARGUMENT naming its position.
absl::StatusOr<std::string> Decode(const Tokenizer& tokenizer,
                                   absl::Span<const int32_t> ids);

// The tokenizer of the model directory `dir` whose config is `config`:
//   - config.tokenizer_class "AttnServeByteTokenizer": the byte tokenizer;
//   - else `dir`/tokenizer.model: SentencePiece; BOS added at a session's start when
//     tokenizer_config.json's add_bos_token says so (absent: true for LlamaTokenizer and
//     when there is no tokenizer_config.json); BOS/EOS ids from the config where they
//     name special pieces, else the SentencePiece model's own;
//   - else `dir`/tokenizer.json: byte-level BPE (bpe_tokenizer_json.h says which files
//     are served, and how BOS, EOS and add_bos come from the configs);
//   - else, for directories written before tokenizer files (no tokenizer_class): the
//     byte tokenizer when the model's vocabulary holds its ids.
// Errors (INVALID_ARGUMENT, naming the file or field): a tokenizer vocabulary larger
// than config.vocab_size, BOS/EOS ids outside it, unreadable files, no tokenizer.
absl::StatusOr<std::shared_ptr<const Tokenizer>> LoadTokenizer(
    const std::string& dir, const model::ModelConfig& config);

}  // namespace attnserve::tokenizer
