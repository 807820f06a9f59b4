// Model configuration: the native form of proto/attnserve/v1/model_config.proto, its text-format
// parser and its validation. Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/attention/options.h"

namespace attnserve::model {

struct ModelConfig {
  std::string name = "attnserve";
  // Token ids: 256 bytes + special ids (tokenizer.h); at least kMinVocabSize.
  int vocab_size = 259;
  // Residual width. Independent of the heads: wq is (num_heads * head_dim, dim), wk and
  // wv (num_kv_heads * head_dim, dim), wo (dim, num_heads * head_dim).
  int dim = 64;
  int num_layers = 2;
  // SwiGLU hidden width.
  int mlp_hidden = 192;
  float rope_theta = 10000.0f;
  float norm_eps = 1e-5f;
  // Longest context (positions) a session may reach.
  int64_t max_context = int64_t{1} << 20;
  // Module, query and KV heads and head dims; value_dim always equals head_dim here.
  attention::AttentionOptions attention;
};

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
