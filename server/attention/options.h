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
  // HeadDecays() gives each head's factor.
  float decay_horizon = 0;
  int num_heads = 4;
  // Key/value heads (grouped-query attention); num_heads % num_kv_heads == 0, equal to
  // num_heads for plain multi-head attention.
  int num_kv_heads = 4;
  // linear only: the feature map is applied to q as projected, without the 1/sqrt(d)
  // factor (the paper's linear_elu).
  bool unscaled_query = false;
  // Query/key dimension per head.
  int head_dim = 16;
  // Value dimension per head.
  int value_dim = 16;
  // Largest fixed state one session may hold in one layer; larger orders are rejected.
  int64_t max_state_bytes_per_layer = int64_t{64} << 20;
  // Run the plain ATen reference ops instead of the fused CPU loops of
  // feature_kernels.h (tests tie the two; never needed in production).
  bool reference_kernels = false;
};

// Valid module names in table order, for messages and --help.
const std::vector<std::string>& ModuleNames();

// Checks every field and every combination; the message names the field and the valid
// choices. On success `*kind` (if non-null) receives the module kind.
absl::Status ValidateAttentionOptions(const AttentionOptions& options,
                                      ModuleKind* kind = nullptr);

// Number of features a fixed-state module keeps per head: C(d+N, N) for Taylor
// (orders 0..N packed), d for linear, 0 for KV-cache modules. Saturates at INT64_MAX.
int64_t FeatureCount(const AttentionOptions& options);

// Per-head decay factors gamma_h = 1 - 1/tau_h with tau_h = decay_horizon /
// 2^(num_heads-1-h): the last head keeps the longest horizon, each earlier one half of
// the next. Empty when decay_horizon is 0. A fixed state then updates as
// S <- gamma_h S + phi_k v^T, and a key at distance t-j weighs gamma_h^(t-j).
std::vector<float> HeadDecays(const AttentionOptions& options);

// True when the module's per-session state does not grow with context.
bool HasFixedState(const AttentionOptions& options);

// Bytes one session holds in one layer after `context` tokens (fp32). KV caches count
// the nominal 4 * (d + d_v) * heads bytes per token, not their spare capacity.
int64_t StateBytesPerLayer(const AttentionOptions& options, int64_t context);

// KV-cache bytes per token per layer for the same head shape.
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
