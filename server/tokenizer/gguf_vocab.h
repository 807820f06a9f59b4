// The vocabulary a GGUF file carries (tokenizer.ggml.*), as one of our tokenizers:
//
//   "llama"  SentencePiece-style pieces with scores and types (byte-fallback <0xNN>
//            pieces): written as a SentencePiece BPE ModelProto (pieces merged by score,
//            byte fallback, the identity normalizer with a leading space when
//            tokenizer.ggml.add_space_prefix, default true, as llama.cpp's SPM
//            tokenizer does) and served by SentencePieceTokenizer.
//   "gpt2"   byte-level BPE: tokens in the byte-level alphabet, tokenizer.ggml.merges
//            ("a b"), control and user-defined tokens as added tokens, the split of
//            tokenizer.ggml.pre ("gpt-2": GPT-2's; "llama-bpe": Llama-3's, with
//            ignore_merges; llama.cpp's own "default" is refused): served by
//            BpeTokenizer.
//
// BOS/EOS from the model config (GgufModelConfig read them), add_bos from
// tokenizer.ggml.add_bos_token (default: true for llama, false for gpt2). Anything else
// is refused naming the key.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/model/config.h"
#include "server/model/gguf.h"
#include "server/tokenizer/tokenizer.h"

namespace attnserve::tokenizer {

absl::StatusOr<std::shared_ptr<const Tokenizer>> LoadGgufTokenizer(
    const model::GgufFile& file, const model::ModelConfig& config);

// The same, opening the file at `path` (errors name it).
absl::StatusOr<std::shared_ptr<const Tokenizer>> LoadGgufTokenizer(
    const std::string& path, const model::ModelConfig& config);

// The serialized SentencePiece ModelProto for a "llama" vocabulary (exposed for tests).
absl::StatusOr<std::string> SentencePieceModelFromGguf(const model::GgufFile& file);

}  // namespace attnserve::tokenizer
