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

// How a directory names and lays out its tensors (Model::Load reads them by it).
struct HfLayout {
  // config.json's model_type: "llama" (also when absent), "mistral", "qwen2", "qwen3",
  // or one of the recurrent families below.
  std::string model_type = "llama";
  // Mamba-2 layers carry conv1d.bias (Mamba2's use_conv_bias, Granite's mamba_conv_bias);
  // without it the conv has none (zeros).
  bool conv_bias = false;
};

// The recurrent and hybrid families read (server/DESIGN.md §11), each with Hugging Face's
// keys and defaults (its configuration_*.py) where config.json omits them:
//   mamba2            Mamba2ForCausalLM: every layer Mamba-2, no MLP, no attention.
//                     num_heads, head_dim, state_size, expand (num_heads * head_dim must be
//                     int(expand * hidden_size)), n_groups, conv_kernel, use_conv_bias,
//                     layer_norm_epsilon. Refused: n_groups other than 1 (Hugging Face's
//                     Mamba2 normalises the gated output over the whole inner width,
//                     attnserve per group as mamba_ssm and llama.cpp do: the two agree only
//                     for one group), use_bias.
//   granitemoehybrid  GraniteMoeHybridForCausalLM without experts (Granite 4.0-H dense):
//                     layer_types "mamba" / "attention" (absent: every layer mamba),
//                     shared_intermediate_size (the shared MLP), mamba_n_heads, mamba_d_head
//                     ("auto": inner / heads), mamba_n_groups (1 only, as above),
//                     mamba_d_state, mamba_d_conv, mamba_expand, mamba_conv_bias,
//                     position_embedding_type ("rope" or none), embedding_multiplier,
//                     residual_multiplier, attention_multiplier (the attention's scale),
//                     logits_scaling. Refused: num_local_experts > 0 (its default is 8),
//                     mamba_proj_bias, attention_bias.
//   lfm2              Lfm2ForCausalLM: layer_types "conv" / "full_attention" (or
//                     full_attn_idxs; absent: every layer attention), conv_L_cache (the short
//                     conv's taps), per-head q/k norms, norm_eps, the SwiGLU width from
//                     intermediate_size (or block_ff_dim) by block_auto_adjust_ff_dim,
//                     block_ffn_dim_multiplier and block_multiple_of as Lfm2MLP computes it,
//                     rope_theta (or theta; 1e6), tie_word_embeddings (or tie_embedding;
//                     true). Refused: conv_bias.
// A time_step_limit other than (0, Infinity) is refused. Python's json writes infinity as
// the bare word Infinity, which config.json files of these families carry: read as a
// number beyond 1e300.
inline constexpr const char* kHfRecurrentModelTypes[] = {"mamba2", "granitemoehybrid", "lfm2"};
bool IsHfRecurrentModelType(const std::string& model_type);

// Parses config.json's text; `default_name` names the model when "name" is absent.
// `layout`, when given, receives how its tensors are named.
absl::StatusOr<ModelConfig> ParseHfConfig(std::string_view json, const std::string& default_name,
                                          HfLayout* layout = nullptr);

// ParseHfConfig of the file at `path`; NotFound if missing, other errors prefixed with
// the path.
absl::StatusOr<ModelConfig> ReadHfConfigFile(const std::string& path,
                                             const std::string& default_name,
                                             HfLayout* layout = nullptr);

// config.json for `config` as save_pretrained writes it for LlamaForCausalLM
// (architectures, model_type "llama", torch_dtype "float32"), plus "attention", "name"
// and "tokenizer_class" when set. ParseHfConfig reads it back to an equal config.
std::string HfConfigToJson(const ModelConfig& config);

}  // namespace attnserve::model
