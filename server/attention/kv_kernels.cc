#include "server/attention/kv_kernels.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "server/attention/bf16.h"
#include "server/attention/target_clones.h"

namespace attnserve::attention {

namespace {
// The one exp of ExpShifted and the flash kernel's Exp16, in their constants:
// exp(y) = 2^k exp(r), k = round(y / ln 2), r = y - k ln 2 with ln 2 in two parts
// (kLn2Hi exact in few bits, so k * kLn2Hi is exact), exp(r) by the degree-6 minimax
// polynomial of Cephes' expf (kExpPoly, highest degree first), y clamped at kExpFloor so
// 2^k stays a normal float.
constexpr float kExpFloor = -87.0f;
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f;
constexpr float kLn2Lo = -2.12194440e-4f;
constexpr float kExpPoly[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                               4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};
}  // namespace

ATTNSERVE_CLONES
float ExpShifted(float* x, int64_t n, float shift) {
  // The exp of kExpPoly above, r in [-ln2/2, ln2/2]; 2^k built in the exponent bits
  // (this file is built with -fno-trapping-math so the clamp's select vectorises).
  for (int64_t i = 0; i < n; ++i) {
    float y = x[i] - shift;
    y = y > kExpFloor ? y : kExpFloor;
    const float kf = (y * kLog2e + 12582912.0f) - 12582912.0f;  // round
    float r = y - kf * kLn2Hi;
    r = r - kf * kLn2Lo;
    float p = kExpPoly[0];
    for (int j = 1; j < 6; ++j) p = p * r + kExpPoly[j];
    p = p * r * r + r + 1.0f;
    const int32_t bits = (int32_t(kf) + 127) << 23;
    float scale;
    std::memcpy(&scale, &bits, sizeof scale);
    x[i] = p * scale;
  }
  // The sum in 16 lanes (vectorised), then across them.
  float lanes[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int j = 0; j < 16; ++j) lanes[j] += x[i + j];
  }
  float sum = 0;
  for (; i < n; ++i) sum += x[i];
  for (float lane : lanes) sum += lane;
  return sum;
}

namespace {

float RowMaxScalar(const float* x, int64_t n) {
  float top = x[0];
  for (int64_t i = 1; i < n; ++i) top = x[i] > top ? x[i] : top;
  return top;
}

#if defined(__x86_64__) && defined(__GNUC__)
// GCC does not vectorise a float max reduction without -ffast-math, so AVX2 by hand.
__attribute__((target("avx2"))) float RowMaxAvx2(const float* x, int64_t n) {
  __m256 a = _mm256_set1_ps(x[0]), b = a;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a = _mm256_max_ps(a, _mm256_loadu_ps(x + i));
    b = _mm256_max_ps(b, _mm256_loadu_ps(x + i + 8));
  }
  float lanes[8];
  _mm256_storeu_ps(lanes, _mm256_max_ps(a, b));
  float top = RowMaxScalar(lanes, 8);
  for (; i < n; ++i) top = x[i] > top ? x[i] : top;
  return top;
}
#endif

// max of x[0..n), n >= 1.
float RowMax(const float* x, int64_t n) {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) return RowMaxAvx2(x, n);
#endif
  return RowMaxScalar(x, n);
}

#if defined(__x86_64__) && defined(__GNUC__)
#define ATTNSERVE_FLASH 1
// The flash kernel below: AVX-512F by hand (GCC and Clang), picked at run time.
#define ATTNSERVE_AVX512 __attribute__((target("avx512f")))
// GCC 12's AVX-512 intrinsics trip its own -Wmaybe-uninitialized (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// The flash kernel keeps 16 query rows of a block in the 16 lanes of a vector (a "panel"),
// so the per-row max, rescale and sum of the online softmax are lane-wise. Keys go in
// blocks of 16 (one score vector per key) and in tiles of kTileKeys that every panel of
// the block visits while the tile's k and v rows are still in L1 / L2.
constexpr int64_t kLanes = 16;
constexpr int64_t kTileKeys = 128;  // a multiple of kLanes; k and v of a tile fit L1 at D = 32

// exp(y) for y <= 0: ExpShifted's range reduction and polynomial, 2^k by vscalefps.
ATTNSERVE_AVX512 inline __m512 Exp16(__m512 y) {
  y = _mm512_max_ps(y, _mm512_set1_ps(kExpFloor));
  const __m512 kf = _mm512_roundscale_ps(_mm512_mul_ps(y, _mm512_set1_ps(kLog2e)),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(kf, _mm512_set1_ps(kLn2Hi), y);
  r = _mm512_fnmadd_ps(kf, _mm512_set1_ps(kLn2Lo), r);
  __m512 p = _mm512_set1_ps(kExpPoly[0]);
  for (int j = 1; j < 6; ++j) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExpPoly[j]));
  p = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, kf);
}

// The running state of one panel (16 query rows r0..r0 + 15 of the block).
struct Panel {
  float* qt;    // (D, 16): the rows' queries transposed; lanes past the block are zero
  float* ot;    // (Dv, 16): sum_j w_j v_j so far, transposed, w_j = exp(s_j - m)
  float* m;     // (16): the largest score seen so far (-inf before any)
  float* l;     // (16): sum_j w_j so far
  int64_t pos;  // first + r0: lane r is the query at position pos + r
};

// Scores of the 16 panel rows against 16 keys k (16, D): s[j] lane r = q_r . k_j.
template <int64_t D>
ATTNSERVE_AVX512 inline void BlockScores(const float* qt, const float* k, __m512 (&s)[kLanes]) {
  for (auto& x : s) x = _mm512_setzero_ps();
  for (int64_t c = 0; c < D; ++c) {
    const __m512 qc = _mm512_load_ps(qt + c * kLanes);
#pragma GCC unroll 16
    for (int64_t j = 0; j < kLanes; ++j) {
      s[j] = _mm512_fmadd_ps(qc, _mm512_set1_ps(k[j * D + c]), s[j]);
    }
  }
}

// ot (Dv, 16) += sum_j p[j] v_j for 16 values v (16, Dv), eight columns at a time.
template <int64_t DV>
ATTNSERVE_AVX512 inline void BlockAccumulate(const __m512 (&p)[kLanes], const float* v,
                                             float* ot) {
  static_assert(DV % 8 == 0);
  for (int64_t c0 = 0; c0 < DV; c0 += 8) {
    __m512 acc[8];
    for (int64_t c = 0; c < 8; ++c) acc[c] = _mm512_load_ps(ot + (c0 + c) * kLanes);
#pragma GCC unroll 16
    for (int64_t j = 0; j < kLanes; ++j) {
      for (int64_t c = 0; c < 8; ++c) {
        acc[c] = _mm512_fmadd_ps(p[j], _mm512_set1_ps(v[j * DV + c0 + c]), acc[c]);
      }
    }
    for (int64_t c = 0; c < 8; ++c) _mm512_store_ps(ot + (c0 + c) * kLanes, acc[c]);
  }
}

// The panel against 16 keys k (16, D), values v (16, Dv), the first at position j0: one
// online-softmax step. Key j0 + j is hidden from lane r when j0 + j > pos + r (causal).
template <int64_t D, int64_t DV>
ATTNSERVE_AVX512 void AttendBlock(const float* k, const float* v, int64_t j0, Panel& pn) {
  __m512 s[kLanes];
  BlockScores<D>(pn.qt, k, s);
  const bool diagonal = j0 + kLanes - 1 > pn.pos;
  __mmask16 seen[kLanes];
  if (diagonal) {
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512 hidden = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    for (int64_t j = 0; j < kLanes; ++j) {
      seen[j] = _mm512_cmpge_epi32_mask(lane, _mm512_set1_epi32(int(j0 + j - pn.pos)));
      s[j] = _mm512_mask_mov_ps(hidden, seen[j], s[j]);
    }
  }
  __m512 top = s[0];
  for (int64_t j = 1; j < kLanes; ++j) top = _mm512_max_ps(top, s[j]);
  const __m512 m_old = _mm512_load_ps(pn.m);
  const __m512 m = _mm512_max_ps(m_old, top);
  __m512 l = _mm512_load_ps(pn.l);
  if (_mm512_cmp_ps_mask(m, m_old, _CMP_GT_OQ) != 0) {  // rescale to the new max
    const __m512 alpha = Exp16(_mm512_sub_ps(m_old, m));
    l = _mm512_mul_ps(l, alpha);
    for (int64_t c = 0; c < DV; ++c) {
      _mm512_store_ps(pn.ot + c * kLanes, _mm512_mul_ps(_mm512_load_ps(pn.ot + c * kLanes), alpha));
    }
    _mm512_store_ps(pn.m, m);
  }
  for (int64_t j = 0; j < kLanes; ++j) {
    s[j] = Exp16(_mm512_sub_ps(s[j], m));
    if (diagonal) s[j] = _mm512_maskz_mov_ps(seen[j], s[j]);  // exactly zero, not exp(-87)
    l = _mm512_add_ps(l, s[j]);
  }
  _mm512_store_ps(pn.l, l);
  BlockAccumulate<DV>(s, v, pn.ot);
}

// The panel against keys [j0, j1) of k (keys, D), v (keys, Dv); j0 a multiple of 16. A
// last block past `keys` is read from a zero-padded copy.
template <int64_t D, int64_t DV>
ATTNSERVE_AVX512 void AttendKeys(const float* k, const float* v, int64_t keys, int64_t j0,
                                 int64_t j1, Panel& pn) {
  for (int64_t j = j0; j < j1; j += kLanes) {
    if (j + kLanes <= keys) {
      AttendBlock<D, DV>(k + j * D, v + j * DV, j, pn);
      continue;
    }
    alignas(64) float kpad[kLanes * D] = {};   // (16, D)
    alignas(64) float vpad[kLanes * DV] = {};  // (16, Dv)
    std::copy(k + j * D, k + keys * D, kpad);
    std::copy(v + j * DV, v + keys * DV, vpad);
    AttendBlock<D, DV>(kpad, vpad, j, pn);
  }
}

// KvFlashAttend for head dims D, Dv. scratch: 64-byte aligned, FlashScratchFloats.
template <int64_t D, int64_t DV>
ATTNSERVE_AVX512 void FlashAttend(const float* q, int64_t ldq, const float* k, const float* v,
                                  int64_t first, int64_t rows, float* out, int64_t ldo,
                                  float* sums, float* scratch) {
  const int64_t keys = first + rows, panels = (rows + kLanes - 1) / kLanes;
  std::vector<Panel> pn(panels);
  for (int64_t p = 0; p < panels; ++p) {
    float* base = scratch + p * (D + DV + 2) * kLanes;
    pn[p] = {base, base + D * kLanes, base + (D + DV) * kLanes, base + (D + DV + 1) * kLanes,
             first + p * kLanes};
    std::fill(pn[p].qt, pn[p].qt + (D + DV) * kLanes, 0.0f);
    std::fill(pn[p].m, pn[p].m + kLanes, -std::numeric_limits<float>::infinity());
    std::fill(pn[p].l, pn[p].l + kLanes, 0.0f);
    for (int64_t r = 0; r < std::min(kLanes, rows - p * kLanes); ++r) {
      for (int64_t c = 0; c < D; ++c) pn[p].qt[c * kLanes + r] = q[(p * kLanes + r) * ldq + c];
    }
  }
  for (int64_t t0 = 0; t0 < keys; t0 += kTileKeys) {
    for (Panel& p : pn) {
      const int64_t end = std::min(keys, p.pos + kLanes);  // past the panel's last query
      if (t0 < end) AttendKeys<D, DV>(k, v, keys, t0, std::min(t0 + kTileKeys, end), p);
    }
  }
  for (int64_t p = 0; p < panels; ++p) {
    for (int64_t r = 0; r < std::min(kLanes, rows - p * kLanes); ++r) {
      const int64_t row = p * kLanes + r;
      for (int64_t c = 0; c < DV; ++c) out[row * ldo + c] = pn[p].ot[c * kLanes + r];
      sums[row] = pn[p].l[r];
    }
  }
}
#pragma GCC diagnostic pop
#endif

}  // namespace

bool KvFlashSupported(int64_t d, int64_t dv) {
#if defined(ATTNSERVE_FLASH)
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  return avx512 && d == dv && (d == 16 || d == 32 || d == 64);
#else
  return false;
#endif
}

void KvFlashAttend(const float* q, int64_t ldq, const float* k, const float* v, int64_t first,
                   int64_t rows, int64_t d, int64_t dv, float* out, int64_t ldo, float* sums) {
#if defined(ATTNSERVE_FLASH)
  const int64_t panels = (rows + kLanes - 1) / kLanes;
  // Per panel: qt (D, 16), ot (Dv, 16), m (16), l (16); from a 64-byte boundary.
  const size_t floats = panels * (d + dv + 2) * kLanes;
  std::vector<float> buffer(floats + kLanes);
  void* start = buffer.data();
  size_t space = buffer.size() * sizeof(float);
  float* scratch = static_cast<float*>(std::align(64, floats * sizeof(float), start, space));
  switch (d) {
    case 16: return FlashAttend<16, 16>(q, ldq, k, v, first, rows, out, ldo, sums, scratch);
    case 32: return FlashAttend<32, 32>(q, ldq, k, v, first, rows, out, ldo, sums, scratch);
    case 64: return FlashAttend<64, 64>(q, ldq, k, v, first, rows, out, ldo, sums, scratch);
  }
#endif
}

float KvHeadAttend(const float* q, const float* k, const float* v, int64_t len, int64_t d,
                   int64_t dv, float* scores, float* out) {
  cblas_sgemv(CblasRowMajor, CblasNoTrans, int(len), int(d), 1.0f, k, int(d), q, 1, 0.0f,
              scores, 1);  // s = K q
  const float top = RowMax(scores, len);
  const float sum = ExpShifted(scores, len, top);
  cblas_sgemv(CblasRowMajor, CblasTrans, int(len), int(dv), 1.0f, v, int(dv), scores, 1, 0.0f,
              out, 1);  // out = V^T w
  return sum;
}

void KvGroupAttend(const float* q, const float* k, const float* v, int64_t rows, int64_t len,
                   int64_t d, int64_t dv, float* scores, float* out, float* sums) {
  if (rows == 1) {
    sums[0] = KvHeadAttend(q, k, v, len, d, dv, scores, out);
    return;
  }
  // scores (rows, len) = Q K^T
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(rows), int(len), int(d), 1.0f, q,
              int(d), k, int(d), 0.0f, scores, int(len));
  for (int64_t i = 0; i < rows; ++i) {
    float* row = scores + i * len;
    sums[i] = ExpShifted(row, len, RowMax(row, len));
  }
  // out (rows, dv) = W V
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(rows), int(dv), int(len), 1.0f,
              scores, int(len), v, int(dv), 0.0f, out, int(dv));
}

void KvBlockAttend(const float* q, int64_t ldq, const float* k, const float* v,
                   int64_t first, int64_t rows, int64_t d, int64_t dv, float* scores,
                   float* out, int64_t ldo, float* sums) {
  const int64_t keys = first + rows;
  // scores (rows, keys) = Q K^T
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(rows), int(keys), int(d), 1.0f, q,
              int(ldq), k, int(d), 0.0f, scores, int(keys));
  for (int64_t i = 0; i < rows; ++i) {
    float* row = scores + i * keys;
    const int64_t seen = first + i + 1;  // keys 0..first + i
    const float top = RowMax(row, seen);
    sums[i] = ExpShifted(row, seen, top);
    std::fill(row + seen, row + keys, 0.0f);
  }
  // out (rows, dv) = W V
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(rows), int(dv), int(keys), 1.0f,
              scores, int(keys), v, int(dv), 0.0f, out, int(ldo));
}

// --- Stored rows ---

namespace {

inline uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

constexpr int64_t kSpanTileRows = 256;  // a whole block of the cache (kv_attention.cc)

}  // namespace

uint16_t FloatToHalf(float f) {
  // Rounding by float arithmetic: scaling |f| up by 2^112 and down by 2^-110 overflows to
  // infinity exactly where half does; adding a power of two that puts half's last kept
  // bit at fp32's last bit makes the fp32 addition round to nearest even at half's
  // precision (for subnormal halves too: the bias is clamped at half's smallest normal
  // exponent). The sum's low bits are then the half's exponent and mantissa.
  const uint32_t w = Bits(f);
  const uint32_t shl1 = w + w;  // without the sign
  const uint32_t sign = w & 0x80000000u;
  float base = (std::fabs(f) * 0x1.0p+112f) * 0x1.0p-110f;
  uint32_t bias = shl1 & 0xFF000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;
  base = FromBits((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = Bits(base);
  const uint32_t nonsign = ((bits >> 13) & 0x7C00u) + (bits & 0x0FFFu);
  return uint16_t((sign >> 16) | (shl1 > 0xFF000000u ? 0x7E00u : nonsign));
}

float HalfToFloat(uint16_t h) {
  // Normal halves: exponent rebiased by a shift and a multiplication by 2^-112 (which
  // also maps half's infinity and NaNs to fp32's); subnormals: the mantissa placed under
  // a 0.5 and 0.5 subtracted, exact.
  const uint32_t w = uint32_t(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;
  const float normal = FromBits((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
  const float subnormal = FromBits((two_w >> 17) | (126u << 23)) - 0.5f;
  return FromBits(sign | (two_w < (1u << 27) ? Bits(subnormal) : Bits(normal)));
}

namespace {

#if defined(ATTNSERVE_FLASH)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
ATTNSERVE_AVX512 void StoreHalfAvx512(const float* x, int64_t n, uint16_t* out) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(x + i),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), h);
  }
  for (; i < n; ++i) out[i] = FloatToHalf(x[i]);
}

ATTNSERVE_AVX512 void LoadHalfAvx512(const uint16_t* x, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    _mm512_storeu_ps(out + i, _mm512_cvtph_ps(h));
  }
  for (; i < n; ++i) out[i] = HalfToFloat(x[i]);
}
#pragma GCC diagnostic pop
#endif

bool HasAvx512() {
#if defined(ATTNSERVE_FLASH)
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  return avx512;
#else
  return false;
#endif
}

ATTNSERVE_CLONES
void StoreBf16(const float* x, int64_t n, uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = RoundToBf16(x[i]);
}

ATTNSERVE_CLONES
void LoadBf16(const uint16_t* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = Bf16ToFloat(x[i]);
}

// ggml's quantize_row_q8_0_ref, block by block: d = max|x| / 127 kept as an IEEE half,
// q = roundf(x / d) computed as x * (1 / d) with the unrounded d (0 for an all-zero block).
ATTNSERVE_CLONES
void StoreQ8_0(const float* x, int64_t n, char* out) {
  for (int64_t b = 0; b < n / kQ8_0BlockValues; ++b, x += kQ8_0BlockValues) {
    float amax = 0.0f;
    for (int64_t j = 0; j < kQ8_0BlockValues; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t h = FloatToHalf(d);
    std::memcpy(out, &h, 2);
    auto* q = reinterpret_cast<int8_t*>(out + 2);
    for (int64_t j = 0; j < kQ8_0BlockValues; ++j) q[j] = int8_t(std::round(x[j] * id));
    out += kQ8_0BlockBytes;
  }
}

// ggml's dequantize_row_q8_0: x = q * d.
ATTNSERVE_CLONES
void LoadQ8_0(const char* x, int64_t n, float* out) {
  for (int64_t b = 0; b < n / kQ8_0BlockValues; ++b, x += kQ8_0BlockBytes) {
    uint16_t h;
    std::memcpy(&h, x, 2);
    const float d = HalfToFloat(h);
    const auto* q = reinterpret_cast<const int8_t*>(x + 2);
    for (int64_t j = 0; j < kQ8_0BlockValues; ++j) out[j] = float(q[j]) * d;
    out += kQ8_0BlockValues;
  }
}

}  // namespace

void StoreKvRow(KvCacheType type, const float* x, int64_t n, void* out) {
  switch (type) {
    case KvCacheType::kF32:
      std::memcpy(out, x, size_t(n) * sizeof(float));
      return;
    case KvCacheType::kBF16:
      return StoreBf16(x, n, static_cast<uint16_t*>(out));
    case KvCacheType::kQ8_0:
      return StoreQ8_0(x, n, static_cast<char*>(out));
    case KvCacheType::kF16: {
      auto* h = static_cast<uint16_t*>(out);
#if defined(ATTNSERVE_FLASH)
      if (HasAvx512()) return StoreHalfAvx512(x, n, h);
#endif
      for (int64_t i = 0; i < n; ++i) h[i] = FloatToHalf(x[i]);
      return;
    }
  }
}

void LoadKvRows(KvCacheType type, const void* x, int64_t n, float* out) {
  switch (type) {
    case KvCacheType::kF32:
      std::memcpy(out, x, size_t(n) * sizeof(float));
      return;
    case KvCacheType::kBF16:
      return LoadBf16(static_cast<const uint16_t*>(x), n, out);
    case KvCacheType::kQ8_0:
      return LoadQ8_0(static_cast<const char*>(x), n, out);
    case KvCacheType::kF16: {
      const auto* h = static_cast<const uint16_t*>(x);
#if defined(ATTNSERVE_FLASH)
      if (HasAvx512()) return LoadHalfAvx512(h, n, out);
#endif
      for (int64_t i = 0; i < n; ++i) out[i] = HalfToFloat(h[i]);
      return;
    }
  }
}

int64_t KvSpanTileFloats(int64_t d, int64_t dv) { return kSpanTileRows * std::max(d, dv); }

namespace {

#if defined(ATTNSERVE_FLASH)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// The most query rows of a group the direct kernel keeps in registers.
constexpr int64_t kDirectRows = 8;

// The 16 stored values of a row at columns [c, c + 16) (c a multiple of 16) as fp32:
// f16 by vcvtph2ps, bf16 as the high half of an fp32, q8_0 as its int8 times its block's
// scale (the same fp32 products LoadKvRows gives).
template <KvCacheType kType>
ATTNSERVE_AVX512 inline __m512 Load16(const char* row, int64_t c) {
  if constexpr (kType == KvCacheType::kQ8_0) {
    const char* block = row + c / kQ8_0BlockValues * kQ8_0BlockBytes;
    uint16_t h;
    std::memcpy(&h, block, 2);
    const __m128i q = _mm_loadu_si128(
        reinterpret_cast<const __m128i*>(block + 2 + c % kQ8_0BlockValues));
    // The scale widened in every lane by vcvtph2ps (exact, as HalfToFloat).
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)),
                         _mm512_cvtph_ps(_mm256_set1_epi16(static_cast<int16_t>(h))));
  } else {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * c));
    if constexpr (kType == KvCacheType::kF16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

// KvGroupAttendSpans for 16-bit and q8_0 rows, reading them in place: each key row is
// read once for all the group's query rows (scores by fma over d / 16 vectors and one
// reduction), each value row once into the group's accumulators. d, dv multiples of 16
// (of 32 for q8_0); rows <= kDirectRows.
template <KvCacheType kType>
ATTNSERVE_AVX512 void GroupAttendDirect(const float* q, absl::Span<const KvSpan> spans,
                                        int64_t rows, int64_t len, int64_t d, int64_t dv,
                                        float* scores, float* out, float* sums) {
  const int64_t k_bytes = KvRowBytes(kType, d), v_bytes = KvRowBytes(kType, dv);
  int64_t first = 0;
  for (const KvSpan& span : spans) {
    const char* k = static_cast<const char*>(span.k);
    for (int64_t j = 0; j < span.rows; ++j, k += k_bytes) {
      __m512 acc[kDirectRows];
      for (int64_t r = 0; r < rows; ++r) acc[r] = _mm512_setzero_ps();
      for (int64_t c = 0; c < d; c += 16) {
        const __m512 kc = Load16<kType>(k, c);
        for (int64_t r = 0; r < rows; ++r) {
          acc[r] = _mm512_fmadd_ps(_mm512_loadu_ps(q + r * d + c), kc, acc[r]);
        }
      }
      for (int64_t r = 0; r < rows; ++r) scores[r * len + first + j] = _mm512_reduce_add_ps(acc[r]);
    }
    first += span.rows;
  }
  for (int64_t i = 0; i < rows; ++i) {
    float* row = scores + i * len;
    sums[i] = ExpShifted(row, len, RowMax(row, len));
  }
  std::fill(out, out + rows * dv, 0.0f);
  first = 0;
  for (const KvSpan& span : spans) {
    const char* v = static_cast<const char*>(span.v);
    for (int64_t j = 0; j < span.rows; ++j, v += v_bytes) {
      __m512 w[kDirectRows];
      for (int64_t r = 0; r < rows; ++r) w[r] = _mm512_set1_ps(scores[r * len + first + j]);
      for (int64_t c = 0; c < dv; c += 16) {
        const __m512 vc = Load16<kType>(v, c);
        for (int64_t r = 0; r < rows; ++r) {
          float* o = out + r * dv + c;
          _mm512_storeu_ps(o, _mm512_fmadd_ps(w[r], vc, _mm512_loadu_ps(o)));
        }
      }
    }
    first += span.rows;
  }
}
#pragma GCC diagnostic pop
#endif

}  // namespace

void KvGroupAttendSpans(KvCacheType type, const float* q, absl::Span<const KvSpan> spans,
                        int64_t rows, int64_t len, int64_t d, int64_t dv, float* scores,
                        float* tile, float* out, float* sums) {
#if defined(ATTNSERVE_FLASH)
  if (type != KvCacheType::kF32 && HasAvx512() && d % 16 == 0 && dv % 16 == 0 &&
      rows <= kDirectRows) {
    switch (type) {
      case KvCacheType::kF16:
        return GroupAttendDirect<KvCacheType::kF16>(q, spans, rows, len, d, dv, scores, out, sums);
      case KvCacheType::kBF16:
        return GroupAttendDirect<KvCacheType::kBF16>(q, spans, rows, len, d, dv, scores, out, sums);
      default:  // q8_0 (its dims are whole blocks of 32)
        return GroupAttendDirect<KvCacheType::kQ8_0>(q, spans, rows, len, d, dv, scores, out, sums);
    }
  }
#endif
  // Calls f(first, n, rows_fp32) for each tile of at most kSpanTileRows rows of width w
  // of the spans' keys or values: fp32 spans in place, others read into `tile`.
  auto for_tiles = [&](bool keys, int64_t w, auto&& f) {
    int64_t first = 0;
    for (const KvSpan& span : spans) {
      const char* base = static_cast<const char*>(keys ? span.k : span.v);
      for (int64_t r = 0; r < span.rows;) {
        // fp32 rows are read in place, a whole span at a time.
        const int64_t n =
            type == KvCacheType::kF32 ? span.rows : std::min(kSpanTileRows, span.rows - r);
        const void* src = base + r * KvRowBytes(type, w);
        const float* rows_fp32 = static_cast<const float*>(src);
        if (type != KvCacheType::kF32) {
          LoadKvRows(type, src, n * w, tile);
          rows_fp32 = tile;
        }
        f(first + r, n, rows_fp32);
        r += n;
      }
      first += span.rows;
    }
  };
  // scores (rows, len) = Q K^T, a tile's columns at a time.
  for_tiles(true, d, [&](int64_t j0, int64_t n, const float* k) {
    if (rows == 1) {
      cblas_sgemv(CblasRowMajor, CblasNoTrans, int(n), int(d), 1.0f, k, int(d), q, 1, 0.0f,
                  scores + j0, 1);
    } else {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(rows), int(n), int(d), 1.0f, q,
                  int(d), k, int(d), 0.0f, scores + j0, int(len));
    }
  });
  for (int64_t i = 0; i < rows; ++i) {
    float* row = scores + i * len;
    sums[i] = ExpShifted(row, len, RowMax(row, len));
  }
  // out (rows, dv) = W V, accumulated over the tiles.
  bool first_tile = true;
  for_tiles(false, dv, [&](int64_t j0, int64_t n, const float* v) {
    const float beta = first_tile ? 0.0f : 1.0f;
    first_tile = false;
    if (rows == 1) {
      cblas_sgemv(CblasRowMajor, CblasTrans, int(n), int(dv), 1.0f, v, int(dv), scores + j0, 1,
                  beta, out, 1);
    } else {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(rows), int(dv), int(n), 1.0f,
                  scores + j0, int(len), v, int(dv), beta, out, int(dv));
    }
  });
  if (first_tile) std::fill(out, out + rows * dv, 0.0f);  // no rows at all
}

}  // namespace attnserve::attention
