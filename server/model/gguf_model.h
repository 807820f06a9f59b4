// A GGUF file as an attnserve model: its config from the file's metadata and its weights
// under attnserve's parameter names. Torch-free (Model::Load builds the network).
//
// Architectures (general.architecture): llama (Mistral's files are llama too), qwen2 (q/k/v
// biases blk.N.attn_{q,k,v}.bias, where present) and qwen3 (per-head q/k RMSNorm
// blk.N.attn_{q,k}_norm.weight). Metadata read, under the architecture's prefix ARCH:
// ARCH.embedding_length, ARCH.block_count, ARCH.feed_forward_length,
// ARCH.attention.head_count, ARCH.attention.head_count_kv (absent: head_count),
// ARCH.attention.key_length (absent: embedding_length / head_count; value_length must equal
// it), ARCH.rope.dimension_count (must be the head dimension: partial RoPE is refused),
// ARCH.rope.freq_base (10000), ARCH.attention.layer_norm_rms_epsilon (1e-5),
// ARCH.context_length (2048), tokenizer.ggml.bos_token_id / eos_token_id / eot_token_id.
// Refused, naming the key: rope scaling, another architecture, experts.
// Also served (gguf_model.cc lists them with what each reads): the recurrent and hybrid
// mamba2, granitehybrid (with or without experts), lfm2, lfm2moe; the Gated DeltaNet
// hybrids qwen35, qwen35moe, qwen3next (gated attention, partial RoPE, the pre-FFN norm
// post_attention_norm); qwen3moe. Experts are 3-D tensors ffn_{gate,up,down}_exps, read
// one expert at a time (GgufExpertIndex); shared experts ffn_*_shexp.
//
// Tensors: token_embd, blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm,
// ffn_gate, ffn_up, ffn_down}, output_norm, output (absent: tied to token_embd). llama.cpp's
// converter stores llama's attn_q and attn_k in its interleaved RoPE layout (each head's
// rows permuted); they are permuted back to ours (Hugging Face's rotate-half) here. The
// Qwen families are stored rotate-half (NEOX) already. A GGUF model is softmax attention
// (llama.cpp has no other).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/model/config.h"
#include "server/model/gguf.h"
#include "server/weights/packed_matrix.h"

namespace attnserve::model {

// The model a GGUF file describes, served as `name` (the file's name without .gguf).
absl::StatusOr<ModelConfig> GgufModelConfig(const GgufFile& file, const std::string& name);

// The GGUF tensor name of an attnserve parameter ("embed", "layers.3.wq", "head", ...).
std::string GgufTensorName(const std::string& name);
// The same in `file` for a model of `config`: a tied head reads token_embd, LFM2's final
// norm is token_embd_norm.
std::string GgufFileTensorName(const GgufFile& file, const ModelConfig& config,
                               const std::string& name);
// Expert E of "layers.N.experts.E.w_gate" (and .w_up, .w_down): a slice of the 3-D
// tensor blk.N.ffn_gate_exps.weight; -1 for any other parameter.
int GgufExpertIndex(const std::string& name);
// Whether expert parameter `name` (w_gate or w_up) is in the file's merged
// ffn_gate_up_exps (llama.cpp's converter with --fuse-gate-up-exps: each expert's gate
// rows, then its up rows) rather than ffn_gate_exps / ffn_up_exps.
bool GgufMergedGateUp(const GgufFile& file, const std::string& name);
// The shape the file's tensor for parameter `name` of `shape` has: (experts, shape...)
// for an expert's slice ((experts, 2 F, in) when merged), Qwen3-Next's ssm_ba for its beta
// and alpha, else `shape`.
std::vector<int64_t> GgufFileShape(const GgufFile& file, const ModelConfig& config,
                                   const std::string& name, const std::vector<int64_t>& shape);
// Which rows of the file's tensor parameter `name`'s rows are (Qwen3-Next's value heads
// reordered: ModelConfig::gdn_grouped_heads; its beta and alpha rows out of ssm_ba; q | k
// | v and z out of a legacy file's ssm_in); empty when they are the file's rows as they
// are.
std::vector<int64_t> GgufRowMap(const GgufFile& file, const ModelConfig& config,
                                const std::string& name);
// Whether Qwen3-Next parameter `name` (gdn_qkv or gdn_z) is read from a legacy file's
// fused ssm_in (per key head [q | k | v | z]) because the file has no attn_qkv.
bool LegacyQkvz(const GgufFile& file, const std::string& name);
// Parameters a file may leave out (zeros then): Granite's Mamba-2 conv bias, a sigmoid
// router's selection bias.
bool GgufOptionalTensor(const std::string& name);

// The values of attnserve parameter `name` (row-major, [rows, columns] as the network
// holds it), dequantized to fp32, q and k rows in our RoPE layout. `shape` is what the
// network needs: a tensor of another shape is INVALID_ARGUMENT naming both.
absl::StatusOr<std::vector<float>> GgufParameter(const GgufFile& file, const ModelConfig& config,
                                                 const std::string& name,
                                                 const std::vector<int64_t>& shape);

// A matrix parameter as the file holds it: `packed` for F16, BF16 and the quantized
// types (the file's bytes, q and k rows in our RoPE layout), else `dense` fp32 values.
struct GgufMatrix {
  std::vector<float> dense;
  std::shared_ptr<const weights::PackedMatrix> packed;
};
absl::StatusOr<GgufMatrix> GgufMatrixParameter(const GgufFile& file, const ModelConfig& config,
                                               const std::string& name,
                                               const std::vector<int64_t>& shape);

// Whether the file's q and k rows are in llama.cpp's interleaved RoPE pairs (the llama
// architecture; the Qwen families are stored rotate-half, as we hold them).
bool GgufInterleavedRope(const GgufFile& file);

// Rows of a [heads * head_dim, columns] matrix from llama.cpp's interleaved RoPE pairs
// (2i, 2i + 1) to rotate-half pairs (i, i + head_dim / 2), head by head.
std::vector<float> UninterleaveRopeRows(const std::vector<float>& values, int heads,
                                        int head_dim, int64_t columns);

// True for a --model_dirs entry that names a GGUF file.
bool IsGgufPath(const std::string& path);

}  // namespace attnserve::model
