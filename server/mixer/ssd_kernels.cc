#include "server/mixer/ssd_kernels.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace attnserve::mixer {

namespace {

// As ggml_compute_softplus_f32 (and the reference implementation's Triton softplus).
inline float Softplus(float v) { return v > 20.0f ? v : std::log1p(std::exp(v)); }

inline float Silu(float v) { return v / (1.0f + std::exp(-v)); }

}  // namespace

void SsdPrefillReference(const SsdWeights& w, const SsdInputs& in, int64_t t, float* state,
                         float* y, int64_t ldy) {
  const int64_t heads = w.heads, p_dim = w.head_dim, n_dim = w.state_size;
  const int64_t heads_per_group = heads / w.groups;
  for (int64_t i = 0; i < t; ++i) {
    const float* x = in.x + i * in.ldx;
    const float* dt_raw = in.dt + i * in.lddt;
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t g = h / heads_per_group;
      const float* b = in.b + i * in.ldbc + g * n_dim;
      const float* c = in.c + i * in.ldbc + g * n_dim;
      const float dt = Softplus(dt_raw[h] + w.dt_bias[h]);
      const float decay = std::exp(dt * w.a[h]);
      float* s = state + h * p_dim * n_dim;
      // S = exp(dt A) S + dt x B^T
      for (int64_t p = 0; p < p_dim; ++p) {
        for (int64_t n = 0; n < n_dim; ++n) {
          s[p * n_dim + n] = decay * s[p * n_dim + n] + dt * x[h * p_dim + p] * b[n];
        }
      }
      // y = S C + D x
      for (int64_t p = 0; p < p_dim; ++p) {
        float acc = 0.0f;
        for (int64_t n = 0; n < n_dim; ++n) acc += s[p * n_dim + n] * c[n];
        y[i * ldy + h * p_dim + p] = acc + w.d[h] * x[h * p_dim + p];
      }
    }
  }
}

namespace {

// Scratch for one chunk of up to `chunk` tokens.
struct ChunkScratch {
  explicit ChunkScratch(int64_t chunk, int64_t heads, int64_t p_dim)
      : dt(chunk * heads),
        cum(chunk * heads),
        cb(chunk * chunk),
        masked(chunk * chunk),
        read(chunk * p_dim),
        xw(chunk * p_dim) {}
  std::vector<float> dt;      // (l, H): softplus(dt_raw + dt_bias)
  std::vector<float> cum;     // (l, H): sum of dt A over the chunk up to and with token i
  std::vector<float> cb;      // (l, l): C_i . B_j of one group
  std::vector<float> masked;  // (l, l): cb exp(cum_i - cum_j) dt_j for j <= i, else 0
  std::vector<float> read;    // (l, P): C_i S^T, the state before the chunk read
  std::vector<float> xw;      // (l, P): exp(cum_last - cum_j) dt_j x_j, the state's update
};

// One head over one chunk of l tokens starting at the inputs' row 0 (x, y already
// offset to the head and the chunk's first token). cg, bg: the head's group's C and B.
void ChunkHead(const SsdWeights& w, int64_t h, int64_t l, const float* x, int64_t ldx,
               const float* cg, const float* bg, int64_t ldbc, ChunkScratch& k, float* s,
               float* y, int64_t ldy) {
  const int64_t heads = w.heads, p_dim = w.head_dim, n_dim = w.state_size;
  for (int64_t i = 0; i < l; ++i) {
    const float ci = k.cum[i * heads + h];
    float* row = &k.masked[i * l];
    for (int64_t j = 0; j <= i; ++j) {
      row[j] = k.cb[i * l + j] * std::exp(ci - k.cum[j * heads + h]) * k.dt[j * heads + h];
    }
    std::fill(row + i + 1, row + l, 0.0f);
  }
  // within the chunk: y = masked x
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(l), int(p_dim), int(l), 1.0f,
              k.masked.data(), int(l), x, int(ldx), 0.0f, y, int(ldy));
  // the state before the chunk, decayed to each token: exp(cum_i) C_i S^T
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(l), int(p_dim), int(n_dim), 1.0f,
              cg, int(ldbc), s, int(n_dim), 0.0f, k.read.data(), int(p_dim));
  for (int64_t i = 0; i < l; ++i) {
    const float e = std::exp(k.cum[i * heads + h]);
    for (int64_t p = 0; p < p_dim; ++p) {
      y[i * ldy + p] += e * k.read[i * p_dim + p] + w.d[h] * x[i * ldx + p];
    }
  }
  // across chunks: S = exp(cum_last) S + xw^T B
  const float last = k.cum[(l - 1) * heads + h];
  for (int64_t j = 0; j < l; ++j) {
    const float f = std::exp(last - k.cum[j * heads + h]) * k.dt[j * heads + h];
    for (int64_t p = 0; p < p_dim; ++p) k.xw[j * p_dim + p] = f * x[j * ldx + p];
  }
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(p_dim), int(n_dim), int(l), 1.0f,
              k.xw.data(), int(p_dim), bg, int(ldbc), std::exp(last), s, int(n_dim));
}

}  // namespace

void SsdPrefill(const SsdWeights& w, const SsdInputs& in, int64_t t, int64_t chunk,
                float* state, float* y, int64_t ldy) {
  if (t == 0) return;
  const int64_t heads = w.heads, p_dim = w.head_dim, n_dim = w.state_size;
  const int64_t heads_per_group = heads / w.groups;
  chunk = std::max<int64_t>(1, std::min(chunk, t));
  ChunkScratch k(chunk, heads, p_dim);
  for (int64_t t0 = 0; t0 < t; t0 += chunk) {
    const int64_t l = std::min(chunk, t - t0);
    for (int64_t h = 0; h < heads; ++h) {
      float run = 0.0f;
      for (int64_t i = 0; i < l; ++i) {
        const float dt = Softplus(in.dt[(t0 + i) * in.lddt + h] + w.dt_bias[h]);
        k.dt[i * heads + h] = dt;
        run += dt * w.a[h];
        k.cum[i * heads + h] = run;
      }
    }
    for (int64_t g = 0; g < w.groups; ++g) {
      const float* bg = in.b + t0 * in.ldbc + g * n_dim;
      const float* cg = in.c + t0 * in.ldbc + g * n_dim;
      // C B^T, shared by the group's heads
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(l), int(l), int(n_dim), 1.0f,
                  cg, int(in.ldbc), bg, int(in.ldbc), 0.0f, k.cb.data(), int(l));
      for (int64_t h = g * heads_per_group; h < (g + 1) * heads_per_group; ++h) {
        ChunkHead(w, h, l, in.x + t0 * in.ldx + h * p_dim, in.ldx, cg, bg, in.ldbc, k,
                  state + h * p_dim * n_dim, y + t0 * ldy + h * p_dim, ldy);
      }
    }
  }
}

void SsdStep(const SsdWeights& w, const SsdInputs& in, int64_t batch, float* const* states,
             float* y, int64_t ldy) {
  const int64_t heads = w.heads, p_dim = w.head_dim, n_dim = w.state_size;
  const int64_t heads_per_group = heads / w.groups;
  for (int64_t bi = 0; bi < batch; ++bi) {
    const float* x = in.x + bi * in.ldx;
    const float* dt_raw = in.dt + bi * in.lddt;
    float* out = y + bi * ldy;
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t g = h / heads_per_group;
      const float* __restrict b = in.b + bi * in.ldbc + g * n_dim;
      const float* __restrict c = in.c + bi * in.ldbc + g * n_dim;
      const float dt = Softplus(dt_raw[h] + w.dt_bias[h]);
      const float decay = std::exp(dt * w.a[h]);
      for (int64_t p = 0; p < p_dim; ++p) {
        const float xdt = dt * x[h * p_dim + p];
        float* __restrict s = states[bi] + (h * p_dim + p) * n_dim;
        // update and read in one pass; eight partial sums let the loop vectorise
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int64_t n = 0;
        for (; n + 8 <= n_dim; n += 8) {
          for (int64_t u = 0; u < 8; ++u) {
            const float v = decay * s[n + u] + xdt * b[n + u];
            s[n + u] = v;
            acc[u] += v * c[n + u];
          }
        }
        for (; n < n_dim; ++n) {
          const float v = decay * s[n] + xdt * b[n];
          s[n] = v;
          acc[0] += v * c[n];
        }
        const float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) +
                          ((acc[4] + acc[5]) + (acc[6] + acc[7]));
        out[h * p_dim + p] = sum + w.d[h] * x[h * p_dim + p];
      }
    }
  }
}

void GatedGroupRmsNorm(const float* y, int64_t ldy, const float* z, int64_t ldz,
                       const float* weight, int64_t t, int64_t inner, int64_t groups,
                       float eps, float* out, int64_t ldo) {
  const int64_t size = inner / groups;
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t g = 0; g < groups; ++g) {
      const float* yg = y + i * ldy + g * size;
      const float* zg = z + i * ldz + g * size;
      float* og = out + i * ldo + g * size;
      double sum = 0.0;  // as ggml's rms_norm, in double
      for (int64_t c = 0; c < size; ++c) {
        const float v = yg[c] * Silu(zg[c]);
        og[c] = v;
        sum += double(v) * v;
      }
      const float scale = 1.0f / std::sqrt(float(sum / double(size)) + eps);
      const float* wg = weight + g * size;
      for (int64_t c = 0; c < size; ++c) og[c] = og[c] * scale * wg[c];
    }
  }
}

}  // namespace attnserve::mixer
