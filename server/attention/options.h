// Attention-module options, validation and state-size arithmetic. Torch-free, so the
// config parser, the server and tests can reason about modules without LibTorch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace attnserve::attention {

// What a module computes. The name -> kind table is in options.cc.
enum class ModuleKind {
  kSoftmax,      // exp kernel, sum normaliser, KV cache (the reference)
  kSoftmaxNorm,  // exp kernel, L2 norm of the output, KV cache
  kTaylor,       // T_N kernel, sum normaliser, fixed state
  kTaylorNorm,   // T_N kernel, L2 norm of the output, fixed state
  kLinear,       // elu+1 feature map, sum normaliser, fixed state
};

// How a KV-cache module stores its keys and values (the server's --kv_cache_type). Every
// path reads the stored rows into fp32 and computes in fp32; 16-bit rows are rounded to
// nearest even when stored (the fused loops and LibTorch's conversions round alike).
enum class KvCacheType {
  kF32,   // 4 bytes an element
  kF16,   // IEEE half: 2 bytes, 11 significant bits, |x| < 65504
  kBF16,  // bfloat16: 2 bytes, 8 significant bits, fp32's range
  // ggml's Q8_0, as llama.cpp's --cache-type-k/v q8_0: each row in blocks of 32 values,
  // a block an IEEE-half scale d = max|x| / 127 then 32 int8 q = round(x / d) (half away
  // from zero): 34 bytes for 32 values. Head dims must be multiples of 32.
  kQ8_0,
};

// Values in one Q8_0 block, and its bytes.
inline constexpr int64_t kQ8_0BlockValues = 32;
inline constexpr int64_t kQ8_0BlockBytes = 34;

// "f32", "f16", "bf16", "q8_0".
const char* KvCacheTypeName(KvCacheType type);
// The type named `name` (KvCacheTypeName's names); INVALID_ARGUMENT naming them otherwise.
absl::Status ParseKvCacheType(const std::string& name, KvCacheType* type);
// Bytes `n` values of one row take stored as `type` (n a multiple of 32 for q8_0).
int64_t KvRowBytes(KvCacheType type, int64_t n);

struct AttentionOptions {
  // Registry name: softmax, softmax_norm, taylor, taylor_norm, linear.
  std::string module = "softmax";
  // Taylor order N (taylor, taylor_norm); ignored by the others.
  int order = 2;
  // L2-normalise q and k; logits become temperature * cos(q, k).
  bool qk_norm = false;
  // qk_norm temperature; <= 0 means sqrt(head_dim), which gives unit-variance logits
  // like the usual 1/sqrt(d) scaling of unnormalised vectors.
  float qk_temperature = 0;
  // Make the temperature a trained parameter (qk_norm only).
  bool learn_temperature = false;
  // Prefill chunk length in tokens.
  int chunk_size = 64;
  // Longest per-head decay horizon in tokens (fixed-state modules); 0: no decay.
  // HeadDecays() gives each KV head's factor (the state, and so its decay, is per KV
  // head).
  float decay_horizon = 0;
  // Query heads, H.
  int num_heads = 4;
  // Key/value heads, Hkv: >= 1 and dividing num_heads. Query head h reads KV head
  // h / (H / Hkv) (grouped-query attention; Hugging Face's repeat_kv order). Equal to
  // num_heads: plain multi-head attention. Fixed states and KV caches hold Hkv heads.
  int num_kv_heads = 4;
  // Query/key dimension per head.
  int head_dim = 16;
  // Value dimension per head.
  int value_dim = 16;
  // linear only: apply the feature map to q as projected, without the 1/sqrt(head_dim)
  // factor (the paper's linear_elu: elu(q)+1 . elu(k)+1). false: elu(q/sqrt(d))+1.
  bool unscaled_query = false;
  // Largest fixed state one session may hold in one layer; larger orders are rejected.
  int64_t max_state_bytes_per_layer = int64_t{64} << 20;
  // Run the plain ATen reference ops instead of the fused CPU loops of
  // feature_kernels.h (tests tie the two; never needed in production).
  bool reference_kernels = false;
  // Fixed-state modules keep S and z in bf16 (half the bytes; the server's --state_bf16):
  // every path reads them into fp32, updates in fp32 and rounds to nearest even when it
  // stores them (after each decode token, after each prefill chunk). KV-cache modules
  // ignore it. A serving choice, not a trained one: never read from or written to a
  // checkpoint's config.
  bool state_bf16 = false;
  // How KV-cache modules store keys and values (fixed-state modules ignore it). fp32
  // here, the reference; the server's default is f16 (server/config/server_options.h).
  // A serving choice as state_bf16 is, and not part of a model's fingerprint: a snapshot
  // records each tensor's type and a server restores it into its own (exact when they
  // match, rounded to nearest even when it narrows).
  KvCacheType kv_cache_type = KvCacheType::kF32;
};

// Valid module names in table order, for messages and --help.
const std::vector<std::string>& ModuleNames();

// Checks every field and every combination; the message names the field and the valid
// choices. On success `*kind` (if non-null) receives the module kind.
absl::Status ValidateAttentionOptions(const AttentionOptions& options,
                                      ModuleKind* kind = nullptr);

// Number of features a fixed-state module keeps per KV head: C(d+N, N) for Taylor
// (orders 0..N packed), d for linear, 0 for KV-cache modules. Saturates at INT64_MAX.
int64_t FeatureCount(const AttentionOptions& options);

// Per-KV-head decay factors gamma_h = 1 - 1/tau_h with tau_h = decay_horizon /
// 2^(num_kv_heads-1-h): the last KV head keeps the longest horizon, each earlier one
// half of the next; every query head of a group uses its KV head's factor. Empty when
// decay_horizon is 0. A fixed state then updates as S <- gamma_h S + phi_k v^T, and a
// key at distance t-j weighs gamma_h^(t-j). With num_kv_heads == num_heads: per head.
std::vector<float> HeadDecays(const AttentionOptions& options);

// True when the module's per-session state does not grow with context.
bool HasFixedState(const AttentionOptions& options);

// Bytes of one element of a fixed state: 2 under state_bf16, else 4 (fp32). KV caches
// store kv_cache_type's rows whatever state_bf16 says (KvRowBytes).
int64_t StateElementBytes(const AttentionOptions& options);

// Bytes one session holds in one layer after `context` tokens: fixed states
// m * (d_v + 1) * StateElementBytes per KV head (m * d_v * ... without a denominator).
// KV caches count the nominal KvBytesPerToken per token, not their spare capacity.
int64_t StateBytesPerLayer(const AttentionOptions& options, int64_t context);

// KV-cache bytes per token per layer for the same head shape (num_kv_heads heads), as
// kv_cache_type stores them: num_kv_heads * (KvRowBytes(d) + KvRowBytes(d_v)).
int64_t KvBytesPerToken(const AttentionOptions& options);

// Whether weights trained with `trained` may be served with `module` (and `order`):
// the same module; or a softmax (softmax_norm) checkpoint trained with qk_norm served
// as taylor (taylor_norm), whose error is the kernel's truncation error, small when the
// bounded logits fit the order. InvalidArgument naming the compatible choices otherwise.
absl::Status CheckServableAs(const AttentionOptions& trained, const std::string& module,
                             int order);

// Smallest context at which a KV cache of the same head shape holds at least as many
// bytes as this module's fixed state; 0 for KV-cache modules themselves.
int64_t BreakEvenContext(const AttentionOptions& options);

}  // namespace attnserve::attention
