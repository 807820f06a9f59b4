#include "server/mixer/conv_kernels.h"

#include <cmath>
#include <cstring>
#include <vector>

namespace attnserve::mixer {

namespace {

inline float Silu(float v) { return v / (1.0f + std::exp(-v)); }

// Bias and activation over n outputs in place.
void Finish(const ConvWeights& cw, float* y, int64_t n) {
  if (cw.bias != nullptr) {
    for (int64_t c = 0; c < n; ++c) y[c] += cw.bias[c];
  }
  if (cw.silu) {
    for (int64_t c = 0; c < n; ++c) y[c] = Silu(y[c]);
  }
}

}  // namespace

void CausalConv1dPrefillReference(const ConvWeights& cw, const float* x, int64_t ldx,
                                  int64_t t, float* state, float* y, int64_t ldy) {
  const int64_t k = cw.kernel, hist = k - 1;
  std::vector<float> window(k);
  for (int64_t c = 0; c < cw.channels; ++c) {
    float* s = state + c * hist;
    for (int64_t i = 0; i < t; ++i) {
      // window: the K-1 remembered inputs, then this token's, oldest first
      for (int64_t j = 0; j < hist; ++j) window[j] = s[j];
      window[hist] = x[i * ldx + c];
      float acc = 0.0f;
      for (int64_t j = 0; j < k; ++j) acc += cw.w[c * k + j] * window[j];
      if (cw.bias != nullptr) acc += cw.bias[c];
      y[i * ldy + c] = cw.silu ? Silu(acc) : acc;
      for (int64_t j = 0; j < hist; ++j) s[j] = window[j + 1];
    }
  }
}

// Tap-major: for each tap, one pass over the tokens with the channels contiguous (rows of
// x), so the inner loop vectorises; only the first K-1 tokens read the state. Taps are
// accumulated in the reference's order (oldest first) for the same rounding.
void CausalConv1dPrefill(const ConvWeights& cw, const float* x, int64_t ldx, int64_t t,
                         float* state, float* y, int64_t ldy) {
  const int64_t k = cw.kernel, hist = k - 1, ch = cw.channels;
  if (t == 0) return;
  // The state transposed to rows (hist, channels), so that input row r of the
  // concatenation [state; x] is a contiguous row either way.
  std::vector<float> past(hist * ch);
  for (int64_t c = 0; c < ch; ++c) {
    for (int64_t j = 0; j < hist; ++j) past[j * ch + c] = state[c * hist + j];
  }
  std::vector<float> wt(k * ch);  // taps transposed: (K, channels)
  for (int64_t c = 0; c < ch; ++c) {
    for (int64_t j = 0; j < k; ++j) wt[j * ch + c] = cw.w[c * k + j];
  }
  auto row = [&](int64_t r) { return r < hist ? &past[r * ch] : x + (r - hist) * ldx; };
  for (int64_t i = 0; i < t; ++i) {
    float* __restrict out = y + i * ldy;
    std::memset(out, 0, sizeof(float) * ch);
    for (int64_t j = 0; j < k; ++j) {
      const float* __restrict in = row(i + j);
      const float* __restrict wj = &wt[j * ch];
      for (int64_t c = 0; c < ch; ++c) out[c] += wj[c] * in[c];
    }
    Finish(cw, out, ch);
  }
  // The new state: the last K-1 rows of [state; x].
  for (int64_t j = 0; j < hist; ++j) {
    const float* in = row(t + j);
    for (int64_t c = 0; c < ch; ++c) state[c * hist + j] = in[c];
  }
}

void CausalConv1dStep(const ConvWeights& cw, const float* x, int64_t ldx, int64_t batch,
                      float* const* states, float* y, int64_t ldy) {
  const int64_t k = cw.kernel, hist = k - 1, ch = cw.channels;
  for (int64_t b = 0; b < batch; ++b) {
    float* __restrict s = states[b];
    const float* __restrict in = x + b * ldx;
    float* __restrict out = y + b * ldy;
    for (int64_t c = 0; c < ch; ++c) {
      const float* wc = cw.w + c * k;
      float* sc = s + c * hist;
      float acc = 0.0f;
      for (int64_t j = 0; j < hist; ++j) acc += wc[j] * sc[j];
      acc += wc[hist] * in[c];
      for (int64_t j = 0; j + 1 < hist; ++j) sc[j] = sc[j + 1];
      sc[hist - 1] = in[c];
      out[c] = acc;
    }
    Finish(cw, out, ch);
  }
}

namespace {

// b * x of `rows` rows of bcx into bx (rows, C).
void GateInputs(const float* bcx, int64_t ldbcx, int64_t rows, int64_t ch, float* bx) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* __restrict b = bcx + i * ldbcx;
    const float* __restrict x = b + 2 * ch;
    float* __restrict o = bx + i * ch;
    for (int64_t c = 0; c < ch; ++c) o[c] = b[c] * x[c];
  }
}

// y[i] *= c[i], the output gate.
void GateOutputs(const float* bcx, int64_t ldbcx, int64_t rows, int64_t ch, float* y,
                 int64_t ldy) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* __restrict g = bcx + i * ldbcx + ch;
    float* __restrict o = y + i * ldy;
    for (int64_t c = 0; c < ch; ++c) o[c] *= g[c];
  }
}

}  // namespace

void ShortConvPrefill(const float* w, int64_t channels, int64_t kernel, const float* bcx,
                      int64_t ldbcx, int64_t t, float* state, float* y, int64_t ldy) {
  std::vector<float> bx(t * channels);
  GateInputs(bcx, ldbcx, t, channels, bx.data());
  const ConvWeights cw{w, nullptr, channels, kernel, false};
  CausalConv1dPrefill(cw, bx.data(), channels, t, state, y, ldy);
  GateOutputs(bcx, ldbcx, t, channels, y, ldy);
}

void ShortConvPrefillReference(const float* w, int64_t channels, int64_t kernel,
                               const float* bcx, int64_t ldbcx, int64_t t, float* state,
                               float* y, int64_t ldy) {
  std::vector<float> bx(t * channels);
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t c = 0; c < channels; ++c) {
      bx[i * channels + c] = bcx[i * ldbcx + c] * bcx[i * ldbcx + 2 * channels + c];
    }
  }
  const ConvWeights cw{w, nullptr, channels, kernel, false};
  CausalConv1dPrefillReference(cw, bx.data(), channels, t, state, y, ldy);
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t c = 0; c < channels; ++c) y[i * ldy + c] *= bcx[i * ldbcx + channels + c];
  }
}

void ShortConvStep(const float* w, int64_t channels, int64_t kernel, const float* bcx,
                   int64_t ldbcx, int64_t batch, float* const* states, float* y,
                   int64_t ldy) {
  std::vector<float> bx(batch * channels);
  GateInputs(bcx, ldbcx, batch, channels, bx.data());
  const ConvWeights cw{w, nullptr, channels, kernel, false};
  CausalConv1dStep(cw, bx.data(), channels, batch, states, y, ldy);
  GateOutputs(bcx, ldbcx, batch, channels, y, ldy);
}

}  // namespace attnserve::mixer
