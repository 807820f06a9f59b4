#include "server/attention/feature_kernels.h"

#include <algorithm>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "server/attention/bf16.h"
#include "server/attention/target_clones.h"

namespace attnserve::attention {

namespace {

// Features [start, start + len) are out[parent] * x[last .. last + len): the recursion
// of MonomialFeatures grouped into runs that share a parent and take consecutive x.
struct Run {
  int64_t start, len, parent, last;
};

std::vector<Run> Runs(const int64_t* parent, const int64_t* last, int64_t m) {
  std::vector<Run> runs;
  for (int64_t j = 1; j < m; ++j) {
    if (!runs.empty()) {
      Run& r = runs.back();
      if (parent[j] == r.parent && last[j] == r.last + r.len && j == r.start + r.len) {
        ++r.len;
        continue;
      }
    }
    runs.push_back({j, 1, parent[j], last[j]});
  }
  return runs;
}

// Inlined into the cloned StateUpdateAndRead, so compiled for each clone's target.
#define ATTNSERVE_INLINE __attribute__((always_inline)) inline

// A state element as fp32, and an fp32 stored back: the identity for an fp32 state;
// widening and round to nearest even (bf16.h) for a bf16 one.
ATTNSERVE_INLINE float Load(float x) { return x; }
ATTNSERVE_INLINE float Load(uint16_t x) { return Bf16ToFloat(x); }
template <typename T>
ATTNSERVE_INLINE T Store(float x);
template <>
ATTNSERVE_INLINE float Store<float>(float x) { return x; }
template <>
ATTNSERVE_INLINE uint16_t Store<uint16_t>(float x) { return RoundToBf16(x); }

// One KV head's state sh (m, dv) updated with pk (m), vh (dv) and decay g, then read by
// one query: num (dv) = pq^T sh, from the fp32 values before they are stored. A single
// pass over sh; acc: dv floats of scratch.
template <typename T>
ATTNSERVE_INLINE void UpdateAndReadHead(T* sh, const float* pq, const float* pk,
                                        const float* __restrict vh, float g, int64_t m,
                                        int64_t dv, float* __restrict acc, float* num) {
  std::fill(acc, acc + dv, 0.0f);
  if (g == 1.0f) {
    for (int64_t i = 0; i < m; ++i) {
      T* __restrict row = sh + i * dv;
      const float k = pk[i], q = pq[i];
      for (int64_t c = 0; c < dv; ++c) {  // vectorised: dv contiguous elements
        const float r = Load(row[c]) + k * vh[c];
        row[c] = Store<T>(r);
        acc[c] += q * r;
      }
    }
  } else {
    for (int64_t i = 0; i < m; ++i) {
      T* __restrict row = sh + i * dv;
      const float k = pk[i], q = pq[i];
      for (int64_t c = 0; c < dv; ++c) {
        const float r = g * Load(row[c]) + k * vh[c];
        row[c] = Store<T>(r);
        acc[c] += q * r;
      }
    }
  }
  std::copy(acc, acc + dv, num);
}

// UpdateAndReadHead for the `group` queries pq (group, m) of one KV head: each state
// row is updated once and read by every query of the group while it is in cache.
// acc: group * dv floats of scratch; row: dv floats of scratch; num (group, dv).
template <typename T>
ATTNSERVE_INLINE void UpdateAndReadGroup(T* sh, const float* pq, const float* pk,
                                         const float* __restrict vh, float g, int64_t group,
                                         int64_t m, int64_t dv, float* __restrict acc,
                                         float* __restrict row, float* num) {
  std::fill(acc, acc + group * dv, 0.0f);
  for (int64_t i = 0; i < m; ++i) {
    T* __restrict stored = sh + i * dv;
    const float k = pk[i];
    for (int64_t c = 0; c < dv; ++c) {
      row[c] = g * Load(stored[c]) + k * vh[c];
      stored[c] = Store<T>(row[c]);
    }
    for (int64_t q = 0; q < group; ++q) {
      const float w = pq[q * m + i];
      float* __restrict a = acc + q * dv;
      for (int64_t c = 0; c < dv; ++c) a[c] += w * row[c];
    }
  }
  std::copy(acc, acc + group * dv, num);
}

// The z half of StateUpdateAndRead: z[h] = g[h] z[h] + phi_k[h], then den[q] = phi_q[q] .
// z[h] for the group's queries, from the fp32 values. zf: m floats of scratch.
template <typename T>
ATTNSERVE_INLINE void UpdateAndReadZ(T* z, const float* phi_q, const float* phi_k,
                                     const float* decay, int64_t kv_heads, int64_t group,
                                     int64_t m, float* zf, float* den) {
  for (int64_t h = 0; h < kv_heads; ++h) {
    T* zh = z + h * m;
    const float* pk = phi_k + h * m;
    const float g = decay == nullptr ? 1.0f : decay[h];
    for (int64_t i = 0; i < m; ++i) {
      zf[i] = g * Load(zh[i]) + pk[i];
      zh[i] = Store<T>(zf[i]);
    }
    for (int64_t q = 0; q < group; ++q) {  // read after the update: causal, self included
      const float* pq = phi_q + (h * group + q) * m;
      float d = 0;
      for (int64_t i = 0; i < m; ++i) d += pq[i] * zf[i];
      den[h * group + q] = d;
    }
  }
}

// StateUpdateAndRead for a state of element type T (float or bf16 bits).
template <typename T>
ATTNSERVE_INLINE void UpdateAndRead(T* s, T* z, const float* phi_q, const float* phi_k,
                                    const float* v, const float* decay, int64_t kv_heads,
                                    int64_t group, int64_t m, int64_t dv, float* num,
                                    float* den) {
  // acc (group * dv), then one updated row (dv) or z (m) in fp32.
  std::vector<float> scratch(group * dv + std::max(dv, m));
  float* acc = scratch.data();
  float* row = acc + group * dv;
  if (group == 1) {  // multi-head: one query per state row
    for (int64_t h = 0; h < kv_heads; ++h) {
      UpdateAndReadHead(s + h * m * dv, phi_q + h * m, phi_k + h * m, v + h * dv,
                        decay == nullptr ? 1.0f : decay[h], m, dv, acc, num + h * dv);
    }
  } else {
    for (int64_t h = 0; h < kv_heads; ++h) {
      UpdateAndReadGroup(s + h * m * dv, phi_q + h * group * m, phi_k + h * m, v + h * dv,
                         decay == nullptr ? 1.0f : decay[h], group, m, dv, acc, row,
                         num + h * group * dv);
    }
  }
  if (z != nullptr) UpdateAndReadZ(z, phi_q, phi_k, decay, kv_heads, group, m, row, den);
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
#define ATTNSERVE_STATE_BF16_AVX512 1
// GCC 12's AVX-512 intrinsics trip its own -Wmaybe-uninitialized (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define ATTNSERVE_AVX512 __attribute__((target("avx512f"), always_inline)) inline

// 16 bf16 values widened to fp32: the bits become the high half of each lane.
ATTNSERVE_AVX512 __m512 WidenBf16(const uint16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// 16 fp32 values stored as bf16, rounded as RoundToBf16 (bf16.h) rounds one.
ATTNSERVE_AVX512 void StoreBf16(uint16_t* p, __m512 x) {
  const __m512i bits = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  __m512i rounded = _mm512_srli_epi32(
      _mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  rounded = _mm512_mask_mov_epi32(rounded, nan, _mm512_set1_epi32(0x7FC0));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(rounded));
}

// UpdateAndReadGroup<uint16_t> with each row of V * 16 values in registers: the row is
// read, updated (g x + k v, one FMA), stored rounded and read by the `group` queries
// (into registers for one query, into acc for several) from the fp32 values.
template <int V>
__attribute__((target("avx512f"))) void UpdateAndReadBf16Avx512(
    uint16_t* sh, const float* pq, const float* pk, const float* vh, float g, int64_t group,
    int64_t m, float* acc, float* num) {
  constexpr int64_t dv = 16 * V;
  __m512 v[V], a[V];
  for (int j = 0; j < V; ++j) {
    v[j] = _mm512_loadu_ps(vh + 16 * j);
    a[j] = _mm512_setzero_ps();
  }
  if (group > 1) std::fill(acc, acc + group * dv, 0.0f);
  const __m512 gv = _mm512_set1_ps(g);
  for (int64_t i = 0; i < m; ++i) {
    uint16_t* row = sh + i * dv;
    const __m512 k = _mm512_set1_ps(pk[i]);
    __m512 r[V];
    for (int j = 0; j < V; ++j) {
      r[j] = _mm512_fmadd_ps(gv, WidenBf16(row + 16 * j), _mm512_mul_ps(k, v[j]));
      StoreBf16(row + 16 * j, r[j]);
    }
    if (group == 1) {
      const __m512 w = _mm512_set1_ps(pq[i]);
      for (int j = 0; j < V; ++j) a[j] = _mm512_fmadd_ps(w, r[j], a[j]);
      continue;
    }
    for (int64_t q = 0; q < group; ++q) {
      const __m512 w = _mm512_set1_ps(pq[q * m + i]);
      float* aq = acc + q * dv;
      for (int j = 0; j < V; ++j) {
        _mm512_storeu_ps(aq + 16 * j, _mm512_fmadd_ps(w, r[j], _mm512_loadu_ps(aq + 16 * j)));
      }
    }
  }
  if (group == 1) {
    for (int j = 0; j < V; ++j) _mm512_storeu_ps(num + 16 * j, a[j]);
  } else {
    std::copy(acc, acc + group * dv, num);
  }
}
#pragma GCC diagnostic pop
#endif

}  // namespace

ATTNSERVE_CLONES
void MonomialFeatures(const float* x, int64_t rows, int64_t d, const int64_t* parent,
                      const int64_t* last, const float* weight, int64_t m, float* out) {
  const std::vector<Run> runs = Runs(parent, last, m);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    float* o = out + r * m;
    o[0] = 1.0f;
    for (const Run& run : runs) {  // parent < start: written by an earlier run
      const float a = o[run.parent];
      float* __restrict dst = o + run.start;
      const float* __restrict src = xr + run.last;
      for (int64_t t = 0; t < run.len; ++t) dst[t] = a * src[t];
    }
    if (weight != nullptr) {
      for (int64_t j = 0; j < m; ++j) o[j] *= weight[j];
    }
  }
}

ATTNSERVE_CLONES
void StateUpdateAndRead(float* s, float* z, const float* phi_q, const float* phi_k,
                        const float* v, const float* decay, int64_t kv_heads, int64_t group,
                        int64_t m, int64_t dv, float* num, float* den) {
  UpdateAndRead(s, z, phi_q, phi_k, v, decay, kv_heads, group, m, dv, num, den);
}

ATTNSERVE_CLONES
void StateUpdateAndReadBf16Plain(uint16_t* s, uint16_t* z, const float* phi_q,
                                 const float* phi_k, const float* v, const float* decay,
                                 int64_t kv_heads, int64_t group, int64_t m, int64_t dv,
                                 float* num, float* den) {
  UpdateAndRead(s, z, phi_q, phi_k, v, decay, kv_heads, group, m, dv, num, den);
}

void StateUpdateAndReadBf16(uint16_t* s, uint16_t* z, const float* phi_q, const float* phi_k,
                            const float* v, const float* decay, int64_t kv_heads,
                            int64_t group, int64_t m, int64_t dv, float* num, float* den) {
#if defined(ATTNSERVE_STATE_BF16_AVX512)
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  auto* head = !avx512 ? nullptr
               : dv == 16 ? &UpdateAndReadBf16Avx512<1>
               : dv == 32 ? &UpdateAndReadBf16Avx512<2>
               : dv == 48 ? &UpdateAndReadBf16Avx512<3>
               : dv == 64 ? &UpdateAndReadBf16Avx512<4>
                          : nullptr;
  if (head != nullptr) {
    std::vector<float> acc(group > 1 ? group * dv : 0);
    for (int64_t h = 0; h < kv_heads; ++h) {
      head(s + h * m * dv, phi_q + h * group * m, phi_k + h * m, v + h * dv,
           decay == nullptr ? 1.0f : decay[h], group, m, acc.data(), num + h * group * dv);
    }
    // z (kv_heads x m, small next to s) through the plain loop.
    if (z != nullptr) {
      std::vector<float> zf(m);
      UpdateAndReadZ(z, phi_q, phi_k, decay, kv_heads, group, m, zf.data(), den);
    }
    return;
  }
#endif
  StateUpdateAndReadBf16Plain(s, z, phi_q, phi_k, v, decay, kv_heads, group, m, dv, num, den);
}

ATTNSERVE_CLONES
void Bf16ToFloats(const uint16_t* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = Bf16ToFloat(x[i]);
}

ATTNSERVE_CLONES
void FloatsToBf16(const float* x, int64_t n, uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = RoundToBf16(x[i]);
}

void ScaleRows(float* x, int64_t rows, int64_t cols, int64_t ldx, const float* scale) {
  for (int64_t i = 0; i < rows; ++i) {
    float* __restrict row = x + i * ldx;
    const float f = scale[i];
    for (int64_t j = 0; j < cols; ++j) row[j] *= f;
  }
}

ATTNSERVE_CLONES
void TaylorPolynomial(float* s, int64_t n, int order) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = s[i];
    float r = 1.0f;
    for (int k = order; k >= 1; --k) r = 1.0f + r * x / float(k);
    s[i] = r;
  }
}

ATTNSERVE_CLONES
void RowSums(const float* a, int64_t rows, int64_t cols, int64_t lda, float* out) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* row = a + i * lda;
    float sum = 0;
    for (int64_t j = 0; j < cols; ++j) sum += row[j];
    out[i] = sum;
  }
}

ATTNSERVE_CLONES
void AddColumnSums(const float* x, int64_t rows, int64_t cols, int64_t ldx, float* z) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* __restrict row = x + i * ldx;
    float* __restrict zz = z;
    for (int64_t j = 0; j < cols; ++j) zz[j] += row[j];
  }
}

}  // namespace attnserve::attention
