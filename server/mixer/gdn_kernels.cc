#include "server/mixer/gdn_kernels.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "server/attention/target_clones.h"

namespace attnserve::mixer {

namespace {

// As ggml's softplus, sigmoid and silu.
inline float Softplus(float v) { return v > 20.0f ? v : std::log1p(std::exp(v)); }
inline float Sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }
inline float Silu(float v) { return v / (1.0f + std::exp(-v)); }

// out = x / sqrt(sum x^2 + eps) * scale over n: llama.cpp's build_gdn_l2_norm (an RMS norm
// with eps / n, times 1 / sqrt(n); the squares summed in double as ggml's rms_norm, here in
// four partial sums so that the loop vectorises) and, for q, its 1 / sqrt(d_k).
void L2Normalize(const float* x, int64_t n, float eps, float scale, float* out) {
  double part[4] = {0.0, 0.0, 0.0, 0.0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (int64_t u = 0; u < 4; ++u) part[u] += double(x[i + u] * x[i + u]);
  }
  for (; i < n; ++i) part[0] += double(x[i] * x[i]);
  const double sum = (part[0] + part[1]) + (part[2] + part[3]);
  const float inv = 1.0f / std::sqrt(float(sum) + eps);
  for (i = 0; i < n; ++i) out[i] = x[i] * inv * scale;
}

// Row `row` of q and k, every key head normalised (q also scaled by 1 / sqrt(d_k)), into
// qn[kh * ld ...] and kn[kh * ld ...].
void NormalizeRow(const GdnWeights& w, const GdnInputs& in, int64_t row, float* qn,
                  float* kn, int64_t ld) {
  const int64_t dk = w.key_dim;
  const float q_scale = 1.0f / std::sqrt(float(dk));
  for (int64_t kh = 0; kh < w.key_heads; ++kh) {
    L2Normalize(in.q + row * in.ldqkv + kh * dk, dk, w.l2_eps, q_scale, qn + kh * ld);
    L2Normalize(in.k + row * in.ldqkv + kh * dk, dk, w.l2_eps, 1.0f, kn + kh * ld);
  }
}

// g = softplus(alpha + dt_bias) ssm_a, the log of the decay; beta = sigmoid(b).
inline float LogDecay(const GdnWeights& w, const GdnInputs& in, int64_t row, int64_t h) {
  return Softplus(in.alpha[row * in.ldalpha + h] + w.dt_bias[h]) * w.ssm_a[h];
}
inline float Beta(const GdnInputs& in, int64_t row, int64_t h) {
  return Sigmoid(in.b[row * in.ldb + h]);
}

}  // namespace

void GdnPrefillReference(const GdnWeights& w, const GdnInputs& in, int64_t t, float* state,
                         float* o, int64_t ldo) {
  const int64_t dk = w.key_dim, dv = w.value_dim;
  std::vector<float> qn(w.key_heads * dk), kn(w.key_heads * dk), delta(dv);
  for (int64_t i = 0; i < t; ++i) {
    NormalizeRow(w, in, i, qn.data(), kn.data(), dk);
    for (int64_t h = 0; h < w.value_heads; ++h) {
      const int64_t kh = GdnKeyHead(w, h);
      const float* q = &qn[kh * dk];
      const float* k = &kn[kh * dk];
      const float* v = in.v + i * in.ldqkv + h * dv;
      const float beta = Beta(in, i, h);
      const float decay = std::exp(LogDecay(w, in, i, h));
      float* st = state + h * dv * dk;  // S^T: st[j * dk + r] = S[r][j]
      // S = exp(g) S
      for (int64_t e = 0; e < dv * dk; ++e) st[e] *= decay;
      // delta = beta (v - S^T k)
      for (int64_t j = 0; j < dv; ++j) {
        float acc = 0.0f;
        for (int64_t r = 0; r < dk; ++r) acc += st[j * dk + r] * k[r];
        delta[j] = beta * (v[j] - acc);
      }
      // S += k delta^T
      for (int64_t j = 0; j < dv; ++j) {
        for (int64_t r = 0; r < dk; ++r) st[j * dk + r] += k[r] * delta[j];
      }
      // o = S^T q
      for (int64_t j = 0; j < dv; ++j) {
        float acc = 0.0f;
        for (int64_t r = 0; r < dk; ++r) acc += st[j * dk + r] * q[r];
        o[i * ldo + h * dv + j] = acc;
      }
    }
  }
}

namespace {

// Chunks shorter than this run as steps: each chunk reads and writes every state in
// matrix products (BLAS packs S for each), whatever its length; at d 128 the step's
// recurrence was faster per token up to 4 tokens (tests/bench/gdn_bench).
constexpr int64_t kMinChunk = 5;

// Scratch for one chunk of up to `chunk` tokens.
struct ChunkScratch {
  ChunkScratch(const GdnWeights& w, int64_t chunk)
      : kq(w.key_heads * 2 * chunk * w.key_dim),
        beta(chunk * w.value_heads),
        cum(chunk * w.value_heads),
        qk(chunk * chunk),
        kk(chunk * chunk),
        tri(chunk * chunk),
        mask(chunk * chunk),
        read(2 * chunk * w.value_dim),
        kd(chunk * w.key_dim) {}
  std::vector<float> kq;      // (n_k, 2l, d_k): per key head its normalised keys K, then
                              // its queries Q (scaled), so one product reads S for both
  std::vector<float> beta;    // (l, n_v)
  std::vector<float> cum;     // (l, n_v): g summed over the chunk up to and with token i
  std::vector<float> qk, kk;  // (l, l): Q K^T and K K^T of one key head
  std::vector<float> tri;     // (l, l): I + A, unit lower (the diagonal is not read)
  std::vector<float> mask;    // (l, l): D o Q K^T, lower with the diagonal, zeros above
  std::vector<float> read;    // (2l, d_v): K S, then Q S; K S becomes Delta in place
  std::vector<float> kd;      // (l, d_k): D_Lj k_j, the keys decayed to the chunk's end
};

// Value head h over one chunk of l tokens, with its key head's Q K^T and K K^T already in
// k.qk and k.kk; kq: that key head's (2l, d_k) rows K then Q; v and o offset to the head
// and the chunk's first token; st: the head's state S^T (d_v, d_k).
void ChunkHead(const GdnWeights& w, int64_t h, int64_t l, const float* kq, const float* v,
               int64_t ldv, ChunkScratch& k, float* st, float* o, int64_t ldo) {
  const int64_t nv = w.value_heads, dk = w.key_dim, dv = w.value_dim;
  auto cum = [&](int64_t i) { return k.cum[i * nv + h]; };
  float* delta = k.read.data();
  const float* qs = k.read.data() + l * dv;
  // K S and Q S: the state before the chunk read by every key and query
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(2 * l), int(dv), int(dk), 1.0f, kq,
              int(dk), st, int(dk), 0.0f, k.read.data(), int(dv));
  // (I + A) Delta = diag(beta) (V - diag(Gamma) K S); mask = D o Q K^T. One exp per D_ij.
  for (int64_t i = 0; i < l; ++i) {
    const float gamma = std::exp(cum(i)), beta = k.beta[i * nv + h];
    for (int64_t c = 0; c < dv; ++c) {
      delta[i * dv + c] = beta * (v[i * ldv + c] - gamma * delta[i * dv + c]);
      o[i * ldo + c] = gamma * qs[i * dv + c];
    }
    float* row = &k.mask[i * l];
    for (int64_t j = 0; j < i; ++j) {
      const float d = std::exp(cum(i) - cum(j));
      k.tri[i * l + j] = beta * d * k.kk[i * l + j];
      row[j] = d * k.qk[i * l + j];
    }
    row[i] = k.qk[i * l + i];
    std::fill(row + i + 1, row + l, 0.0f);
  }
  cblas_strsm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasUnit, int(l), int(dv),
              1.0f, k.tri.data(), int(l), delta, int(dv));
  // O = diag(Gamma) Q S + mask Delta
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(l), int(dv), int(l), 1.0f,
              k.mask.data(), int(l), delta, int(dv), 1.0f, o, int(ldo));
  // S^T = Gamma_L S^T + Delta^T diag(D_Lj) K
  const float last = cum(l - 1);
  for (int64_t j = 0; j < l; ++j) {
    const float f = std::exp(last - cum(j));
    for (int64_t r = 0; r < dk; ++r) k.kd[j * dk + r] = f * kq[j * dk + r];
  }
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(dv), int(dk), int(l), 1.0f, delta,
              int(dv), k.kd.data(), int(dk), std::exp(last), st, int(dk));
}

}  // namespace

void GdnPrefill(const GdnWeights& w, const GdnInputs& in, int64_t t, int64_t chunk,
                float* state, float* o, int64_t ldo) {
  if (t == 0) return;
  const int64_t nk = w.key_heads, nv = w.value_heads, dk = w.key_dim, dv = w.value_dim;
  chunk = std::max<int64_t>(1, std::min(chunk, t));
  ChunkScratch k(w, chunk);
  for (int64_t t0 = 0; t0 < t; t0 += chunk) {
    const int64_t l = std::min(chunk, t - t0);
    if (l < kMinChunk) {
      for (int64_t i = t0; i < t0 + l; ++i) {
        const GdnInputs row{in.q + i * in.ldqkv, in.k + i * in.ldqkv, in.v + i * in.ldqkv,
                            in.ldqkv, in.b + i * in.ldb, in.ldb, in.alpha + i * in.ldalpha,
                            in.ldalpha};
        GdnStep(w, row, 1, &state, o + i * ldo, ldo);
      }
      continue;
    }
    // key head kh's K at kq[kh * 2l * d_k], its Q l rows further
    for (int64_t i = 0; i < l; ++i) {
      NormalizeRow(w, in, t0 + i, &k.kq[(l + i) * dk], &k.kq[i * dk], 2 * l * dk);
    }
    for (int64_t h = 0; h < nv; ++h) {
      float run = 0.0f;
      for (int64_t i = 0; i < l; ++i) {
        k.beta[i * nv + h] = Beta(in, t0 + i, h);
        run += LogDecay(w, in, t0 + i, h);
        k.cum[i * nv + h] = run;
      }
    }
    for (int64_t kh = 0; kh < nk; ++kh) {
      const float* kq = &k.kq[kh * 2 * l * dk];
      // Q K^T and K K^T, shared by the key head's value heads
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(l), int(l), int(dk), 1.0f,
                  kq + l * dk, int(dk), kq, int(dk), 0.0f, k.qk.data(), int(l));
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(l), int(l), int(dk), 1.0f, kq,
                  int(dk), kq, int(dk), 0.0f, k.kk.data(), int(l));
      const int64_t per_key = nv / nk;
      for (int64_t g = 0; g < per_key; ++g) {
        const int64_t h = w.tiled ? kh + g * nk : kh * per_key + g;
        ChunkHead(w, h, l, kq, in.v + t0 * in.ldqkv + h * dv, in.ldqkv, k, state + h * dv * dk,
                  o + t0 * ldo + h * dv, ldo);
      }
    }
  }
}

namespace {

// The step's prefetch distance in rows (8 KiB at d_k 128): of 0, 4, 8, 16 and 32, 16 was
// the fastest, 0 1.8x slower (the out-of-order window alone keeps too few lines in flight
// to reach the memory bandwidth).
constexpr int64_t kAhead = 16;

// Row j + kAhead of a head's (d_v, d_k) state st, counted on into `next` (the following
// head's, or null), or null past both.
inline const float* AheadRow(const float* st, const float* next, int64_t j, int64_t dk,
                             int64_t dv) {
  const int64_t a = j + kAhead;
  if (a < dv) return st + a * dk;
  return next != nullptr && a - dv < dv ? next + (a - dv) * dk : nullptr;
}

// 16 floats as one value: one zmm in the AVX-512 clone, two ymm in AVX2's, four xmm else.
// Passed by reference: a 64-byte vector by value has an ABI that differs by target.
typedef float V16 __attribute__((vector_size(64)));
__attribute__((always_inline)) inline void Load16(V16& v, const float* p) {
  std::memcpy(&v, p, sizeof v);
}
__attribute__((always_inline)) inline float Sum16(const V16& v) {
  float s[8];
  for (int u = 0; u < 8; ++u) s[u] = v[u] + v[u + 8];
  return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
}

// One value head's step: st, the head's S^T (d_v, d_k), updated in place; o (d_v)
// written; next: the following head's state, or null (prefetched into). One sweep of row
// j gives S_j.k and S_j.q together, so
//   o_j = (S'_j).q = decay S_j.q + delta_j k.q
// needs no second sum after the update, and the update sweep (from L1) only stores: the
// state crosses the memory bus once each way. Sums in vector partials: GCC keeps a plain
// float sum in order, and reduces an array of partial sums lane by lane in scalar adds.
ATTNSERVE_CLONES
void StepHead(float* __restrict st, const float* __restrict q, const float* __restrict k,
              const float* __restrict v, float decay, float beta, int64_t dk, int64_t dv,
              float* __restrict o, const float* next) {
  const int64_t body = dk - dk % 32;
  float k_dot_q = 0.0f;
  for (int64_t r = 0; r < dk; ++r) k_dot_q += k[r] * q[r];
  for (int64_t j = 0; j < dv; ++j) {
    float* __restrict row = st + j * dk;
    if (const float* ahead = AheadRow(st, next, j, dk, dv)) {
      for (int64_t r = 0; r < dk; r += 16) __builtin_prefetch(ahead + r, 0, 3);
    }
    V16 sk0 = {}, sk1 = {}, sq0 = {}, sq1 = {}, s0, s1, k0, k1, q0, q1;
    for (int64_t r = 0; r < body; r += 32) {
      Load16(s0, row + r), Load16(s1, row + r + 16);
      Load16(k0, k + r), Load16(k1, k + r + 16), Load16(q0, q + r), Load16(q1, q + r + 16);
      sk0 += s0 * k0, sk1 += s1 * k1, sq0 += s0 * q0, sq1 += s1 * q1;
    }
    sk0 += sk1, sq0 += sq1;
    float sk = Sum16(sk0), sq = Sum16(sq0);
    for (int64_t r = body; r < dk; ++r) sk += row[r] * k[r], sq += row[r] * q[r];
    const float delta = beta * (v[j] - decay * sk);
    o[j] = decay * sq + delta * k_dot_q;
    for (int64_t r = 0; r < dk; ++r) row[r] = decay * row[r] + k[r] * delta;
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
#define ATTNSERVE_GDN_AVX512 1
// GCC 12's AVX-512 reductions trip its own -Wmaybe-uninitialized (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// StepHead by hand for AVX-512F at d_k = 16 kVecs (64 and 128, the Gated DeltaNet head
// sizes in use): k and q stay in registers across the rows, a row's kVecs vectors are
// loaded once, and the dot products run in four chains. Half StepHead's time per row with
// the state in cache; from memory, 20-30% less.
template <int kVecs>
__attribute__((target("avx512f"))) void StepHeadAvx512(float* st, const float* q,
                                                       const float* k, const float* v,
                                                       float decay, float beta, int64_t dk,
                                                       int64_t dv, float* o,
                                                       const float* next) {
  constexpr int kChains = kVecs < 4 ? kVecs : 4;
  const __m512 vdecay = _mm512_set1_ps(decay);
  __m512 kr[kVecs], qr[kVecs];
  __m512 kq = _mm512_setzero_ps();
  for (int u = 0; u < kVecs; ++u) {
    kr[u] = _mm512_loadu_ps(k + 16 * u), qr[u] = _mm512_loadu_ps(q + 16 * u);
    kq = _mm512_fmadd_ps(kr[u], qr[u], kq);
  }
  const float k_dot_q = _mm512_reduce_add_ps(kq);
  for (int64_t j = 0; j < dv; ++j) {
    float* row = st + j * dk;
    if (const float* ahead = AheadRow(st, next, j, dk, dv)) {
      for (int u = 0; u < kVecs; ++u) _mm_prefetch(ahead + 16 * u, _MM_HINT_T0);
    }
    __m512 s[kVecs], sk[kChains], sq[kChains];
    for (int u = 0; u < kVecs; ++u) s[u] = _mm512_loadu_ps(row + 16 * u);
    for (int u = 0; u < kChains; ++u) {
      sk[u] = _mm512_mul_ps(s[u], kr[u]), sq[u] = _mm512_mul_ps(s[u], qr[u]);
    }
    for (int u = kChains; u < kVecs; ++u) {
      sk[u % kChains] = _mm512_fmadd_ps(s[u], kr[u], sk[u % kChains]);
      sq[u % kChains] = _mm512_fmadd_ps(s[u], qr[u], sq[u % kChains]);
    }
    for (int u = 1; u < kChains; ++u) {
      sk[0] = _mm512_add_ps(sk[0], sk[u]), sq[0] = _mm512_add_ps(sq[0], sq[u]);
    }
    const float delta = beta * (v[j] - decay * _mm512_reduce_add_ps(sk[0]));
    o[j] = decay * _mm512_reduce_add_ps(sq[0]) + delta * k_dot_q;
    const __m512 vdelta = _mm512_set1_ps(delta);
    for (int u = 0; u < kVecs; ++u) {
      _mm512_storeu_ps(row + 16 * u, _mm512_fmadd_ps(kr[u], vdelta, _mm512_mul_ps(vdecay, s[u])));
    }
  }
}
#pragma GCC diagnostic pop
#endif

}  // namespace

void GdnStep(const GdnWeights& w, const GdnInputs& in, int64_t batch, float* const* states,
             float* o, int64_t ldo) {
  const int64_t nk = w.key_heads, dk = w.key_dim, dv = w.value_dim;
  auto* head = &StepHead;
#ifdef ATTNSERVE_GDN_AVX512
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  if (avx512 && dk == 128) head = &StepHeadAvx512<8>;
  if (avx512 && dk == 64) head = &StepHeadAvx512<4>;
#endif
  std::vector<float> qn(nk * dk), kn(nk * dk);
  for (int64_t bi = 0; bi < batch; ++bi) {
    NormalizeRow(w, in, bi, qn.data(), kn.data(), dk);
    for (int64_t h = 0; h < w.value_heads; ++h) {
      const int64_t kh = GdnKeyHead(w, h);
      // the next head of this session, or the first of the next session
      const float* next = h + 1 < w.value_heads ? states[bi] + (h + 1) * dv * dk
                          : bi + 1 < batch      ? states[bi + 1]
                                                : nullptr;
      head(states[bi] + h * dv * dk, &qn[kh * dk], &kn[kh * dk], in.v + bi * in.ldqkv + h * dv,
           std::exp(LogDecay(w, in, bi, h)), Beta(in, bi, h), dk, dv, o + bi * ldo + h * dv,
           next);
    }
  }
}

void GdnGatedRmsNorm(const float* o, int64_t ldo, const float* z, int64_t ldz,
                     const float* weight, int64_t t, int64_t heads, int64_t head_dim,
                     float eps, float* out, int64_t ldout) {
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t h = 0; h < heads; ++h) {
      const float* oh = o + i * ldo + h * head_dim;
      const float* zh = z + i * ldz + h * head_dim;
      float* yh = out + i * ldout + h * head_dim;
      double sum = 0.0;  // as ggml's rms_norm: squares in float, summed in double
      for (int64_t c = 0; c < head_dim; ++c) sum += double(oh[c] * oh[c]);
      const float scale = 1.0f / std::sqrt(float(sum / double(head_dim)) + eps);
      for (int64_t c = 0; c < head_dim; ++c) yh[c] = oh[c] * scale * weight[c] * Silu(zh[c]);
    }
  }
}

}  // namespace attnserve::mixer
