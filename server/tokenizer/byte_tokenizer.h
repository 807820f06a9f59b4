// The byte-level tokenizer of attnserve's own models: ids 0..255 are the bytes
// themselves, then BOS, EOS and PAD. Every byte string (invalid UTF-8 included)
// round-trips; no vocabulary file. Generation stops at EOS; prompts get no BOS (the
// byte models are trained on plain byte streams).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "server/model/config.h"
#include "server/tokenizer/tokenizer.h"

namespace attnserve::tokenizer {

inline constexpr int32_t kByteBos = 256;  // start of a document
inline constexpr int32_t kByteEos = 257;  // end of a document; generation stops here
inline constexpr int32_t kBytePad = 258;
inline constexpr int kByteVocabSize = 259;
// config.json's "tokenizer_class" for the byte models (defined with the config).
using model::kByteTokenizerClass;

class ByteTokenizer final : public Tokenizer {
 public:
  // The byte tokenizer for a model with `config`. INVALID_ARGUMENT when the model's
  // vocab_size cannot hold the 259 ids, or its bos_token_id / eos_token_ids are not
  // the byte tokenizer's.
  static absl::StatusOr<std::shared_ptr<const ByteTokenizer>> Create(
      const model::ModelConfig& config);
  ByteTokenizer() = default;

  std::string kind() const override { return "bytes"; }
  int vocab_size() const override { return kByteVocabSize; }
  int32_t bos_id() const override { return kByteBos; }
  const std::vector<int32_t>& eos_ids() const override { return eos_; }
  bool add_bos() const override { return false; }
  // One id per byte; never fails.
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                              bool continuation) const override;
  // The byte for ids 0..255, nothing for the special ids.
  std::string StreamBytes(int32_t id, bool& at_start) const override;

 private:
  std::vector<int32_t> eos_ = {kByteEos};
};

}  // namespace attnserve::tokenizer
