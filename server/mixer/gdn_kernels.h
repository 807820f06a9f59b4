// The Gated DeltaNet recurrence and its gated RMSNorm (DESIGN.md §14: the linear-attention
// layers of Qwen3.5 / Qwen3-Next). Torch-free leaves: raw fp32 buffers, row-major, sizes
// passed in; the token-by-token recurrence is the plain reference beside the chunked
// prefill and the batched step, and tests/mixer ties all three to the numpy reference
// (tests/gguf/hybrid_reference.py's l2_norm and gated_delta_rule, itself checked against
// llama.cpp's delta-net graph, src/models/delta-net-base.cpp).
//
// Per token, per value head h (of n_v, dim d_v), reading key head kh (of n_k, dim d_k):
// kh = h mod n_k in qwen35 / qwen35moe GGUF files (tiled: their converter reordered the
// value rows, DESIGN.md §14), kh = h / (n_v / n_k) in qwen3next's (grouped):
//   q = l2(q_kh) / sqrt(d_k),  k = l2(k_kh)         l2(x) = x / sqrt(sum x^2 + eps)
//   beta = sigmoid(b[h]),  g = softplus(alpha[h] + dt_bias[h]) ssm_a[h]      (g <= 0)
//   S_h = exp(g) S_h                                 (d_k x d_v)
//   S_h = S_h + k (beta (v_h - S_h^T k))^T           the delta rule, after the decay
//   o_h = S_h^T q
// The chunked prefill is the WY / UT form of the same (Yang et al. 2024, "Gated Delta
// Networks"): inside a chunk the per-token corrections solve one unit lower-triangular
// system, the rest are matrix products.
//
// The layer around these kernels (the model's recipe, llama.cpp's qwen35.cpp /
// qwen3next.cpp): the projections give q | k | v (attn_qkv: one row of 2 n_k d_k + n_v d_v),
// z (attn_gate: n_v d_v), b and alpha (ssm_beta, ssm_alpha: n_v each; qwen3next's ssm_ba
// interleaves them per key head, [b (n_v / n_k) | alpha (n_v / n_k)] per key head, and its
// legacy ssm_in q | k | v | z per key head: rows to reorder once at load);
// CausalConv1dPrefill / CausalConv1dStep (conv_kernels.h: ssm_conv1d, kernel 4, no bias,
// SiLU) over the q | k | v row give this file's inputs; then GdnPrefill / GdnStep,
// GdnGatedRmsNorm with z and ssm_norm, and ssm_out.
//
// State layout (what a session owns and snapshots): (n_v, d_v, d_k) fp32, each head's S_h
// stored transposed: S_h[i][j] (i over the key dim, j over the value dim) at [h][j][i];
// zeros before the first token. It is llama.cpp's layout of the same state (its s_l rows,
// {d_k, d_v, n_v}, as tests/gguf/hybrid_reference.py documents); the numpy reference's
// (n_v, d_k, d_v) array is its per-head transpose. Row j of S_h^T is all that output j
// needs, so the step reads each row once, in order.
#pragma once

#include <cstdint>

namespace attnserve::mixer {

// A Gated DeltaNet layer's per-head parameters and sizes, borrowed (the model owns them).
struct GdnWeights {
  const float* ssm_a = nullptr;    // (n_v): -exp(A_log), negative (GGUF ssm_a)
  const float* dt_bias = nullptr;  // (n_v) (GGUF ssm_dt.bias)
  int64_t key_heads = 0;           // n_k (GGUF ssm.group_count)
  int64_t value_heads = 0;         // n_v, a multiple of n_k (ssm.time_step_rank)
  int64_t key_dim = 0;             // d_k (ssm.state_size)
  int64_t value_dim = 0;           // d_v = ssm.inner_size / n_v
  float l2_eps = 1e-6f;            // added to q's and k's sums of squares (llama.cpp:
                                   // attention.layer_norm_rms_epsilon, as for the norm)
  bool tiled = true;               // key head of value head h: h mod n_k (qwen35,
                                   // qwen35moe); false: h / (n_v / n_k) (qwen3next)
};

// The key head value head h reads.
inline int64_t GdnKeyHead(const GdnWeights& w, int64_t h) {
  return w.tiled ? h % w.key_heads : h / (w.value_heads / w.key_heads);
}

// Floats in one session's state: n_v * d_v * d_k.
inline int64_t GdnStateFloats(const GdnWeights& w) {
  return w.value_heads * w.value_dim * w.key_dim;
}

// Row i of each input is token i (prefill) or session i (step). The row strides let the
// inputs point into the conv output and the projections as they are: q, k and v into the
// conv output (q at column 0, k at n_k d_k, v at 2 n_k d_k), b and alpha into wherever
// the projections put them.
struct GdnInputs {
  const float* q = nullptr;      // (rows, n_k d_k), after the conv and SiLU, not normalised
  const float* k = nullptr;      // (rows, n_k d_k), likewise
  const float* v = nullptr;      // (rows, n_v d_v)
  int64_t ldqkv = 0;             // row stride of q, k and v
  const float* b = nullptr;      // (rows, n_v): beta before the sigmoid (ssm_beta's output)
  int64_t ldb = 0;
  const float* alpha = nullptr;  // (rows, n_v): before dt_bias and softplus (ssm_alpha's)
  int64_t ldalpha = 0;
};

// T tokens of one session, one token at a time as the formula reads: the reference.
// state: (n_v, d_v, d_k), updated; o: (T, n_v d_v), row stride ldo, overlapping neither
// the inputs nor the state (for all three paths).
void GdnPrefillReference(const GdnWeights& w, const GdnInputs& in, int64_t t, float* state,
                         float* o, int64_t ldo);

// The same, chunk by chunk (llama.cpp uses chunks of 64; at d_k = d_v = 128, 16 to 32 are
// the fastest here, tests/bench/gdn_bench). Inside a chunk of L tokens, per value head,
// with Gamma_i = exp(g_1 + ... + g_i), D_ij = Gamma_i / Gamma_j (j <= i) and S the state
// before the chunk:
//   (I + A) Delta = diag(beta) (V - diag(Gamma) K S),  A_ij = beta_i D_ij k_i.k_j (j < i)
//   O = diag(Gamma) Q S + (D o Q K^T, lower with the diagonal) Delta
//   S = Gamma_L S + K^T diag(D_Lj) Delta
// Delta's rows are the delta rule's per-token corrections (one triangular solve, the
// UT transform); Q K^T and K K^T are shared by a key head's value heads. A chunk of fewer
// than 5 tokens (a short prompt, a remainder) runs as GdnStep, faster there. Equal to the
// reference to fp32 rounding for any chunk >= 1. T may be 0.
void GdnPrefill(const GdnWeights& w, const GdnInputs& in, int64_t t, int64_t chunk,
                float* state, float* o, int64_t ldo);

// One token for each of `batch` sessions: row b of the inputs is session b's token,
// states[b] its (n_v, d_v, d_k) state, updated in place; row b of o (row stride ldo) its
// output. A single pass over each state: row j of S_h^T is read (S^T k and S^T q of it),
// then updated and written back while still in registers or L1. The decode step of a
// layer; at Qwen3.5-4B's shape it takes as long as an in-place pass over the same bytes
// (tests/bench/gdn_bench; AVX-512 at d_k 64 and 128, a portable clone otherwise).
void GdnStep(const GdnWeights& w, const GdnInputs& in, int64_t batch, float* const* states,
             float* o, int64_t ldo);

// The gated RMSNorm after the recurrence, over T rows of n_v heads of d_v, per head:
//   out_h = o_h / sqrt(mean(o_h^2) + eps) * weight * silu(z_h)
// (llama.cpp's build_norm_gated: the norm first, then the gate; Mamba-2's
// GatedGroupRmsNorm gates first.) weight: (d_v), shared by the heads (GGUF ssm_norm.weight
// {d_v}). o, z: (T, n_v d_v) with row strides ldo, ldz; out: row stride ldout; out may be o.
void GdnGatedRmsNorm(const float* o, int64_t ldo, const float* z, int64_t ldz,
                     const float* weight, int64_t t, int64_t heads, int64_t head_dim,
                     float eps, float* out, int64_t ldout);

}  // namespace attnserve::mixer
