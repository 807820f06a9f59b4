// config.json (Hugging Face's LlamaConfig, as save_pretrained writes it) <-> ModelConfig.
// Torch-free.
//
// Read: hidden_size, intermediate_size, num_attention_heads, num_hidden_layers and
// vocab_size are required; num_key_value_heads (absent: the heads), head_dim (absent:
// hidden_size / heads), rms_norm_eps (1e-6), rope_theta (10000; top level or inside
// rope_parameters), max_position_embeddings (2048), tie_word_embeddings (false),
// hidden_act (silu), bos_token_id (1; null: none), eos_token_id (2; an int, a list or
// null), attention_bias / mlp_bias (false), torch_dtype / dtype take LlamaConfig's
// defaults. attnserve's own keys:
//   "attention": {AttentionConfig's fields, proto/attnserve/v1/model_config.proto};
//       absent: softmax. The paper's "attention_type" is read when "attention" is absent.
//   "name": the model's name; absent: the directory's name.
//   "max_context": the longest session in positions; absent: max_position_embeddings.
//       A fixed-state model is not bound by its positional table, so a directory may
//       raise it; the writer writes max_position_embeddings = max_context and no key.
//   "tokenizer_class": kByteTokenizerClass for our byte models.
// Refused, naming the field: a missing required field, a value of the wrong type,
// biases, hidden_act other than silu, rope_scaling other than null or rope_type
// "default", a non-null sliding_window, an unknown "attention" field or attention_type,
// and anything ValidateModelConfig refuses.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "server/model/config.h"

namespace attnserve::model {

inline constexpr char kHfConfigFile[] = "config.json";

// Parses config.json's text; `default_name` names the model when "name" is absent.
absl::StatusOr<ModelConfig> ParseHfConfig(std::string_view json, const std::string& default_name);

// ParseHfConfig of the file at `path`; NotFound if missing, other errors prefixed with
// the path.
absl::StatusOr<ModelConfig> ReadHfConfigFile(const std::string& path,
                                             const std::string& default_name);

// config.json for `config` as save_pretrained writes it for LlamaForCausalLM
// (architectures, model_type "llama", torch_dtype "float32"), plus "attention", "name"
// and "tokenizer_class" when set. ParseHfConfig reads it back to an equal config.
std::string HfConfigToJson(const ModelConfig& config);

}  // namespace attnserve::model
