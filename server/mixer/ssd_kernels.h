// The Mamba-2 (SSD) recurrence and its gated grouped RMSNorm (DESIGN.md §11). Torch-free
// leaves: raw fp32 buffers, row-major, sizes passed in; the token-by-token recurrence is
// the plain reference beside the chunked prefill and the batched step, and tests/mixer
// ties all three to the numpy reference (tests/gguf/hybrid_reference.py, itself checked
// against llama.cpp's ssm_scan).
//
// Per head h (of H, head dim P), in group g = h / (H / G) (G groups, state size N):
//   dt   = softplus(dt_raw[h] + dt_bias[h])        softplus(v) = v > 20 ? v : log1p(e^v)
//   S_h  = exp(dt A[h]) S_h + dt x_h B_g^T         (P x N)
//   y_h  = S_h C_g + D[h] x_h
// Linear attention with q = C, k = B, v = dt x and a per-head, per-token decay; the
// chunked prefill is its quadratic form inside a chunk and the state across chunks.
//
// SSM state layout (what a session owns and snapshots): (H, P, N) fp32, S[h][p][n]; zeros
// before the first token. It is llama.cpp's layout of the same state (its s_l rows,
// {N, P, H}): gguf_hybrid_reference_test reads llama.cpp's saved sequence states this way
// and finds the reference's.
#pragma once

#include <cstdint>

namespace attnserve::mixer {

// A Mamba-2 layer's per-head parameters and sizes, borrowed (the model owns them).
struct SsdWeights {
  const float* a = nullptr;        // (H): A itself, negative (GGUF ssm_a = -exp(A_log))
  const float* d = nullptr;        // (H): the skip (GGUF ssm_d)
  const float* dt_bias = nullptr;  // (H) (GGUF ssm_dt.bias)
  int64_t heads = 0;               // H (GGUF ssm.time_step_rank)
  int64_t head_dim = 0;            // P = ssm.inner_size / H
  int64_t groups = 0;              // G, dividing H (ssm.group_count)
  int64_t state_size = 0;          // N (ssm.state_size)
};

// Floats in one session's SSM state: H * P * N.
inline int64_t SsdStateFloats(const SsdWeights& w) {
  return w.heads * w.head_dim * w.state_size;
}

// Row i of each input is token i (prefill) or session i (step). The row strides let the
// inputs point into the in_proj and conv outputs as they are: x, B and C into the conv
// output xBC (x at column 0, B at H*P, C at H*P + G*N), dt into the in_proj output.
struct SsdInputs {
  const float* x = nullptr;  // (rows, H*P), after the conv and SiLU
  int64_t ldx = 0;
  const float* b = nullptr;   // (rows, G*N)
  const float* c = nullptr;   // (rows, G*N)
  int64_t ldbc = 0;           // row stride of b and c
  const float* dt = nullptr;  // (rows, H), raw: before dt_bias and softplus
  int64_t lddt = 0;
};

// T tokens of one session, one token at a time as the formula reads: the reference.
// state: (H, P, N), updated; y: (T, H*P), row stride ldy.
void SsdPrefillReference(const SsdWeights& w, const SsdInputs& in, int64_t t, float* state,
                         float* y, int64_t ldy);

// The same, chunk by chunk: inside a chunk of `chunk` tokens the decay-masked quadratic
// form (C B^T times exp of cumulative dt A differences, per group, then per head times
// dt x), plus the state before the chunk read through C; across chunks the state, decayed
// and updated with one matrix product per head. Equal to the reference to fp32 rounding
// for any chunk >= 1.
void SsdPrefill(const SsdWeights& w, const SsdInputs& in, int64_t t, int64_t chunk,
                float* state, float* y, int64_t ldy);

// One token for each of `batch` sessions: row b of the inputs is session b's token,
// states[b] its (H, P, N) state, updated in place; row b of y (row stride ldy) its
// output. A single pass over each state.
void SsdStep(const SsdWeights& w, const SsdInputs& in, int64_t batch, float* const* states,
             float* y, int64_t ldy);

// Mamba-2's gated grouped RMSNorm of T rows of `inner` channels:
//   h = y * silu(z); out = h / sqrt(mean over its group of h^2 + eps) * weight
// over `groups` equal groups of inner / groups channels (GGUF ssm_norm.weight
// {inner / G, G}, one group per SSM group). y, z: (T, inner) with row strides ldy, ldz;
// out: (T, inner), row stride ldo; out may be y.
void GatedGroupRmsNorm(const float* y, int64_t ldy, const float* z, int64_t ldz,
                       const float* weight, int64_t t, int64_t inner, int64_t groups,
                       float eps, float* out, int64_t ldo);

}  // namespace attnserve::mixer
