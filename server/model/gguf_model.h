// A llama-architecture GGUF file as an attnserve model: its config from the file's
// metadata and its weights under attnserve's parameter names. Torch-free (Model::Load
// copies the values into the network).
//
// Metadata read: general.architecture ("llama" only), llama.embedding_length,
// llama.block_count, llama.feed_forward_length, llama.attention.head_count,
// llama.attention.head_count_kv (absent: head_count), llama.attention.key_length (absent:
// embedding_length / head_count; value_length must equal it), llama.rope.dimension_count
// (must be the head dimension: partial RoPE is refused), llama.rope.freq_base (10000),
// llama.attention.layer_norm_rms_epsilon (1e-5), llama.context_length (2048),
// tokenizer.ggml.bos_token_id / eos_token_id / eot_token_id. Refused, naming the key:
// rope scaling, another architecture, experts.
//
// Tensors: token_embd, blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm,
// ffn_gate, ffn_up, ffn_down}, output_norm, output (absent: tied to token_embd). GGUF
// stores llama.cpp's interleaved RoPE layout in attn_q and attn_k (convert_hf_to_gguf
// permutes each head's rows); they are permuted back to ours (Hugging Face's
// rotate-half) here. A GGUF model is softmax attention (llama.cpp has no other).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/model/config.h"
#include "server/model/gguf.h"

namespace attnserve::model {

// The model a GGUF file describes, served as `name` (the file's name without .gguf).
absl::StatusOr<ModelConfig> GgufModelConfig(const GgufFile& file, const std::string& name);

// The GGUF tensor name of an attnserve parameter ("embed", "layers.3.wq", "head", ...).
std::string GgufTensorName(const std::string& name);

// The values of attnserve parameter `name` (row-major, [rows, columns] as the network
// holds it), dequantized to fp32, q and k rows in our RoPE layout. `shape` is what the
// network needs: a tensor of another shape is INVALID_ARGUMENT naming both.
absl::StatusOr<std::vector<float>> GgufParameter(const GgufFile& file, const ModelConfig& config,
                                                 const std::string& name,
                                                 const std::vector<int64_t>& shape);

// Rows of a [heads * head_dim, columns] matrix from llama.cpp's interleaved RoPE pairs
// (2i, 2i + 1) to rotate-half pairs (i, i + head_dim / 2), head by head.
std::vector<float> UninterleaveRopeRows(const std::vector<float>& values, int heads,
                                        int head_dim, int64_t columns);

// True for a --model_dirs entry that names a GGUF file.
bool IsGgufPath(const std::string& path);

}  // namespace attnserve::model
