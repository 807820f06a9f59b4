#include "server/tokenizer/byte_tokenizer.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace attnserve::tokenizer {

absl::StatusOr<std::shared_ptr<const ByteTokenizer>> ByteTokenizer::Create(
    const model::ModelConfig& config) {
  if (config.vocab_size < kByteVocabSize) {
    return absl::InvalidArgumentError(absl::StrCat(
        "vocab_size: ", config.vocab_size, " cannot hold the byte tokenizer's ",
        kByteVocabSize, " ids (256 bytes, BOS, EOS, PAD)"));
  }
  if (config.bos_token_id != kByteBos) {
    return absl::InvalidArgumentError(absl::StrCat("bos_token_id: ", config.bos_token_id,
                                                   ", but the byte tokenizer's BOS is ",
                                                   kByteBos));
  }
  if (config.eos_token_ids != std::vector<int>{kByteEos}) {
    return absl::InvalidArgumentError(
        absl::StrCat("eos_token_id: [", absl::StrJoin(config.eos_token_ids, ", "),
                     "], but the byte tokenizer's EOS is ", kByteEos));
  }
  return std::make_shared<const ByteTokenizer>();
}

absl::StatusOr<std::vector<int32_t>> ByteTokenizer::Encode(std::string_view text,
                                                           bool continuation) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size());
  for (unsigned char b : text) ids.push_back(int32_t(b));
  return ids;
}

std::string ByteTokenizer::StreamBytes(int32_t id, bool& at_start) const {
  if (id < 0 || id >= 256) return std::string();
  at_start = false;
  return std::string(1, char(id));
}

}  // namespace attnserve::tokenizer
