// Causal depthwise convolutions over time with a fixed per-session state: Mamba-2's
// conv1d over xBC (bias, SiLU) and LFM2's gated short convolution (DESIGN.md §11).
// Torch-free leaves: raw fp32 buffers, row-major, sizes passed in; each fast path has a
// plain reference beside it, and tests/mixer ties both to the numpy reference
// (tests/gguf/hybrid_reference.py, itself checked against llama.cpp).
//
// Conv state layout (what a session owns and snapshots): (channels, K-1) fp32, for each
// channel the last K-1 inputs, oldest first; zeros before the first token. It is
// llama.cpp's layout of the same state (its r_l rows, {K-1, C}): gguf_hybrid_reference_test
// reads llama.cpp's saved sequence states this way and finds the reference's.
#pragma once

#include <cstdint>

namespace attnserve::mixer {

// The weights of one depthwise convolution, borrowed (the model owns them).
struct ConvWeights {
  const float* w = nullptr;     // (channels, kernel): taps, oldest input first (GGUF
                                // ssm_conv1d.weight {K, C}, shortconv.conv.weight {K, C})
  const float* bias = nullptr;  // (channels), or null for none
  int64_t channels = 0;
  int64_t kernel = 0;  // K >= 2
  bool silu = false;   // SiLU after the bias
};

// Floats in one session's conv state: channels * (K - 1).
inline int64_t ConvStateFloats(const ConvWeights& cw) {
  return cw.channels * (cw.kernel - 1);
}

// T tokens of one session. Time mixes within each channel only:
//   y[t][c] = act(sum_k w[c][k] in[t-K+1+k][c] + bias[c]),  in = state's K-1, then x
// x: (T, channels), row stride ldx; y: (T, channels), row stride ldy (must not overlap
// x); state: (channels, K-1), read, then left holding the last K-1 inputs. T may be 0.
void CausalConv1dPrefill(const ConvWeights& cw, const float* x, int64_t ldx, int64_t t,
                         float* state, float* y, int64_t ldy);
// The same, one token and one channel at a time over an explicit window: the reference.
void CausalConv1dPrefillReference(const ConvWeights& cw, const float* x, int64_t ldx,
                                  int64_t t, float* state, float* y, int64_t ldy);

// One token for each of `batch` sessions: row b of x (batch, channels; row stride ldx)
// is session b's next input, states[b] its (channels, K-1) state, updated in place; row
// b of y (row stride ldy) its output. Equal to CausalConv1dPrefill with t = 1 per session.
void CausalConv1dStep(const ConvWeights& cw, const float* x, int64_t ldx, int64_t batch,
                      float* const* states, float* y, int64_t ldy);

// LFM2's short convolution of T tokens of one session: bcx (T, 3C), row stride ldbcx, is
// the in_proj output b | c | x (GGUF shortconv.in_proj rows in that order);
//   y[t] = c[t] * conv(b * x)[t]    (conv: w (C, K), no bias, no activation)
// state: (C, K-1) of past b * x. y: (T, C), row stride ldy.
void ShortConvPrefill(const float* w, int64_t channels, int64_t kernel, const float* bcx,
                      int64_t ldbcx, int64_t t, float* state, float* y, int64_t ldy);
// The same from CausalConv1dPrefillReference: the reference.
void ShortConvPrefillReference(const float* w, int64_t channels, int64_t kernel,
                               const float* bcx, int64_t ldbcx, int64_t t, float* state,
                               float* y, int64_t ldy);
// One token for each of `batch` sessions (rows of bcx and y as in CausalConv1dStep).
void ShortConvStep(const float* w, int64_t channels, int64_t kernel, const float* bcx,
                   int64_t ldbcx, int64_t batch, float* const* states, float* y,
                   int64_t ldy);

}  // namespace attnserve::mixer
