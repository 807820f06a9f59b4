// Model configuration: the native form of proto/attnserve/v1/model_config.proto, its text-format
// parser and its validation. Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/attention/options.h"

namespace attnserve::model {

struct ModelConfig {
  std::string name = "attnserve";
  // Embedding rows (token ids); at least kMinVocabSize. A tokenizer's vocabulary may be
  // smaller (padded embeddings), never larger (server/tokenizer/).
  int vocab_size = 259;
  // Residual width; equals attention.num_heads * attention.head_dim.
  int dim = 64;
  int num_layers = 2;
  // SwiGLU hidden width.
  int mlp_hidden = 192;
  float rope_theta = 10000.0f;
  float norm_eps = 1e-5f;
  // Longest context (positions) a session may reach.
  int64_t max_context = int64_t{1} << 20;
  // Module, heads and head dims; value_dim always equals head_dim here.
  attention::AttentionOptions attention;
  // Begin-of-sequence id (-1: none) and the ids that end generation. The defaults are the
  // byte tokenizer's (server/tokenizer/byte_tokenizer.h).
  int bos_token_id = 256;
  std::vector<int> eos_token_ids = {257};
  // "AttnServeByteTokenizer" for the byte models; empty: the tokenizer comes from the
  // directory's files (tokenizer::LoadTokenizer).
  std::string tokenizer_class;
};

// The smallest vocab_size: the byte tokenizer's 256 bytes + BOS, EOS and PAD.
inline constexpr int kMinVocabSize = 259;

// Parses protobuf text format (ModelConfig message) and validates it. Omitted fields
// take the defaults documented in the .proto. Errors name the field.
absl::StatusOr<ModelConfig> ParseModelConfig(std::string_view text);

// Text format that ParseModelConfig reads back to an equal config.
std::string ModelConfigToText(const ModelConfig& config);

// Checks every field and the attention options.
absl::Status ValidateModelConfig(const ModelConfig& config);

// Number of trained parameters for `config` (embedding, blocks, head; plus one
// temperature per layer when it is learned).
int64_t ParameterCount(const ModelConfig& config);

}  // namespace attnserve::model
