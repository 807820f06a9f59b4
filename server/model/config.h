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

// ModelConfig::mixers values.
inline constexpr char kAttentionMixer[] = "attention";
inline constexpr char kMamba2Mixer[] = "mamba2";
inline constexpr char kShortConvMixer[] = "shortconv";
inline constexpr char kGatedDeltaNetMixer[] = "gated_deltanet";

struct ModelConfig {
  std::string name = "attnserve";
  // Embedding rows (token ids); at least kMinVocabSize. A tokenizer's vocabulary may be
  // smaller (padded embeddings), never larger (server/tokenizer/).
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
  // The head reads the embedding matrix (tie_word_embeddings): one copy in memory and in
  // the directory (no lm_head.weight).
  bool tie_embeddings = false;
  // Beginning-of-sequence id; -1: none.
  int bos_token_id = 256;
  // Ids that end generation (config.json's eos_token_id, an int or a list).
  std::vector<int> eos_token_ids = {257};
  // config.json's tokenizer_class: kByteTokenizerClass for our byte models; empty: the
  // tokenizer comes from the directory's files.
  std::string tokenizer_class;
  // Biases on the q, k and v projections: bq (H*D), bk and bv (Hkv*D) (Qwen2).
  bool attention_bias = false;
  // Each head's q and k go through an RMSNorm with gains q_norm, k_norm (head_dim)
  // before RoPE (Qwen3).
  bool qk_head_norm = false;

  // Qwen3.5 / Qwen3-Next gated attention: wq is (2 H D, dim), each head's rows [q | gate];
  // the attention output is multiplied by sigmoid(gate) before wo.
  bool attention_gate = false;
  // RoPE on the first rope_dims of each head's D (pairs (i, i + rope_dims / 2)); the rest
  // pass through. 0: the whole head.
  int rope_dims = 0;
  // Qwen3.5's interleaved M-RoPE (rope.dimension_sections): for text positions (p, p, p,
  // 0), pair i with s = i mod sum(sections) rotates by p when s % 3 == j and
  // s < 3 sections[j] for some j < 3, else not at all. Empty: every pair rotates.
  std::vector<int> rope_sections;

  // Each layer's token mixer (server/DESIGN.md §11, §14): kAttention (the module above),
  // kMamba2, kShortConv or kGatedDeltaNet. Empty: every layer attention (Mixer(l) reads it).
  std::vector<std::string> mixers;
  // Mamba-2 layers: inner width I (x and z), state size N, heads H (head dim P = I / H),
  // groups G sharing B and C (H / G heads each).
  // Gated DeltaNet layers (GGUF's names for the same keys): ssm_groups key heads n_k of
  // ssm_state d_k, ssm_heads value heads n_v of d_v = ssm_inner / n_v; value head h reads
  // key head h mod n_k.
  int ssm_inner = 0, ssm_state = 0, ssm_heads = 0, ssm_groups = 0;
  // Qwen3-Next's Gated DeltaNet order: value head h reads key head h / (n_v / n_k). The
  // GGUF loader then stores the value heads reordered (head j n_k + g holds file head
  // g r + j, r = n_v / n_k) so that the kernels' h mod n_k holds, and the mixer puts its
  // output back in the file's order before out_proj. The state is kept in the reordered
  // heads.
  bool gdn_grouped_heads = false;
  // Taps K of the causal convolutions (Mamba-2's conv1d over x, B, C; LFM2's short conv):
  // a session keeps the last K - 1 inputs.
  int conv_kernel = 0;
  // A feed-forward block (norm, SwiGLU, residual) after each mixer; pure Mamba-2 has none.
  bool mlp = true;
  // RoPE on q and k in the attention layers (Granite 4.0-H has none).
  bool rope = true;
  // Mixtures of experts (server/DESIGN.md §14): with experts > 0 every layer's FFN is a
  // router over `experts` SwiGLU experts of expert_hidden, experts_used of them per token,
  // plus a shared expert of shared_expert_hidden (0: none), gated by
  // sigmoid(shared_gate . x) when shared_expert_gate. expert_routing: "softmax" (softmax
  // over the experts, then the top experts_used), "softmax_topk" (the top logits, then a
  // softmax over those) or "sigmoid" (sigmoid scores; a per-expert bias, when the layer
  // has one, only selects); expert_renormalize divides the chosen weights by their sum.
  int experts = 0, experts_used = 0, expert_hidden = 0, shared_expert_hidden = 0;
  bool shared_expert_gate = false;
  std::string expert_routing = "softmax";
  bool expert_renormalize = true;
  // The chosen weights times this (GGUF expert_weights_scale; 1: none).
  float expert_weights_scale = 1.0f;
  // The first this many layers keep the SwiGLU of mlp_hidden (LFM2-MoE's
  // leading_dense_block_count); the rest have the experts.
  int leading_dense_layers = 0;

  // Granite's multipliers: embeddings times embedding_scale, every mixer and MLP output
  // times residual_scale before its residual add, logits divided by logit_scale;
  // attention_scale replaces 1/sqrt(head_dim) when not 0.
  float embedding_scale = 1.0f, residual_scale = 1.0f, logit_scale = 1.0f;
  float attention_scale = 0.0f;

  // Layer l's mixer (kAttention when `mixers` is empty).
  const std::string& Mixer(int l) const;
  bool IsAttention(int l) const { return Mixer(l) == kAttentionMixer; }
  // Whether layer l's FFN is the mixture of experts (else the SwiGLU).
  bool HasExperts(int l) const { return mlp && experts > 0 && l >= leading_dense_layers; }
  // Whether any layer is attention / any is recurrent.
  bool HasAttention() const;
  bool HasRecurrent() const;
};

// tokenizer_class of the byte-level tokenizer (tokenizer.h), which needs no files.
inline constexpr char kByteTokenizerClass[] = "AttnServeByteTokenizer";

// The smallest vocab_size: the byte tokenizer's 256 bytes + BOS, EOS and PAD.
inline constexpr int kMinVocabSize = 259;

// Parses protobuf text format (ModelConfig message) and validates it. Omitted fields
// take the defaults documented in the .proto. Errors name the field.
absl::StatusOr<ModelConfig> ParseModelConfig(std::string_view text);

// Text format that ParseModelConfig reads back to an equal config (the model's identity
// in Model::Fingerprint). The tokenizer fields are printed only where they differ from
// the byte tokenizer's (bos 256, eos [257], tokenizer_class empty or
// kByteTokenizerClass), so a byte model's text is what it was before they existed.
std::string ModelConfigToText(const ModelConfig& config);

// The fields model_config.proto has no field for yet (attention_gate, rope_dims,
// rope_sections, the experts), as text; empty when they are all at their defaults, so
// configs without them keep their identity. Model::Fingerprint hashes it after
// ModelConfigToText.
std::string ModelConfigExtensionText(const ModelConfig& config);

// Checks every field and the attention options.
absl::Status ValidateModelConfig(const ModelConfig& config);

// Number of trained parameters for `config` (embedding, blocks, head unless tied; plus one
// temperature per layer when it is learned).
int64_t ParameterCount(const ModelConfig& config);

}  // namespace attnserve::model
