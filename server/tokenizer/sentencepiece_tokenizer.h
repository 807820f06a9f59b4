// SentencePiece (Llama-2, TinyLlama, Mistral and the models of the paper we serve)
// through Debian's libsentencepiece: Encode is the library's; the bytes of each id are
// precomputed at load by the library's own decoding rules (sentencepiece_processor.cc,
// Decode, v0.1.97): control pieces add nothing, "▁" is a space, the text's first piece
// loses its leading "▁" (when the model adds a dummy prefix or removes extra
// whitespace), a byte-fallback piece <0xE2> is that one byte, <unk> is the unknown
// surface (" ⁇ ").
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/tokenizer/sentencepiece_proto.h"
#include "server/tokenizer/tokenizer.h"

namespace attnserve::tokenizer {
namespace internal {
class SentencePieceBackend;
}

// OK when SentencePiece can be used in this process; UNAVAILABLE with the reason
// otherwise (sanitizer builds, a missing libattnserve_sentencepiece.so).
absl::Status SentencePieceAvailable();

class SentencePieceTokenizer final : public Tokenizer {
 public:
  struct Options {
    // Start a session's first text with BOS (tokenizer_config.json's add_bos_token).
    bool add_bos = true;
    // The model config's ids. Each is used when it names a control or user-defined
    // piece; otherwise (absent configs carry the byte tokenizer's 256/257) the
    // SentencePiece model's own bos/eos. -1: no BOS.
    int bos_token_id = -1;
    std::vector<int> eos_token_ids;
  };

  // The tokenizer of a tokenizer.model's bytes. INVALID_ARGUMENT or DATA_LOSS naming
  // tokenizer.model when the library cannot load it, when it has a denormalizer (its
  // output cannot be streamed piece by piece), when add_bos is set but there is no BOS
  // piece, or when there is no EOS id.
  static absl::StatusOr<std::shared_ptr<const SentencePieceTokenizer>> Create(
      std::string_view serialized, const Options& options);
  ~SentencePieceTokenizer() override;

  std::string kind() const override { return "sentencepiece"; }
  int vocab_size() const override { return int(surfaces_.size()); }
  int32_t bos_id() const override { return bos_; }
  const std::vector<int32_t>& eos_ids() const override { return eos_; }
  bool add_bos() const override { return add_bos_; }
  // continuation false: the library's Encode (BOS first when add_bos). continuation
  // true: the same model with add_dummy_prefix off, no BOS. Models that remove extra
  // whitespace do so in each turn's text separately.
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                              bool continuation) const override;
  std::string StreamBytes(int32_t id, bool& at_start) const override;

  // The piece of `id` ("▁the", "<0xE2>", "<s>"); empty outside the vocabulary.
  std::string Piece(int32_t id) const;
  // The library's own decoding of `ids` (for tests: U+FFFD where byte pieces are not
  // valid UTF-8).
  std::string LibraryDecode(absl::Span<const int32_t> ids) const;

 private:
  // What one id adds to a decoded text.
  struct Surface {
    std::string bytes;       // in the middle of a text
    std::string at_start;    // as the text's first piece (leading "▁" consumed)
    bool consumes_space = false;  // at the start, consuming the "▁" ends the start
    bool control = false;         // adds nothing, start unchanged
  };
  SentencePieceTokenizer() = default;

  std::unique_ptr<internal::SentencePieceBackend> sp_;            // as trained
  std::unique_ptr<internal::SentencePieceBackend> continuation_;  // no dummy prefix
  std::vector<Surface> surfaces_;  // per id
  int32_t bos_ = -1;
  std::vector<int32_t> eos_;
  bool add_bos_ = false;
};

}  // namespace attnserve::tokenizer
