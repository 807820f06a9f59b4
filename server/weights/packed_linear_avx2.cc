// PackedLinear's AVX2 kernels, for CPUs without AVX-512 VNNI: the AVX-512 kernels' plan
// (packed_linear_avx512.cc) on 32 weights per step. AVX2 has no vpdpbusd; vpmaddubsw
// multiplies unsigned by signed bytes into int16 pair sums (saturating) and vpmaddwd
// sums those pairs into int32 lanes, 4 products per lane as vpdpbusd has them. Signed
// levels use the sign trick (|w| against sign(w) * x, vpsignb): a pair sum is at most
// 2 * 128 * 127 = 32512, so it never saturates; Q4_K / Q5_K levels (0..31) go in as they are.
#include <immintrin.h>

#include <cstring>
#include <utility>

#include "server/weights/blocks.h"
#include "server/weights/half.h"
#include "server/weights/linear_internal.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define ATTNSERVE_AVX2_KERNELS 1
#endif

namespace attnserve::weights {

#if defined(ATTNSERVE_AVX2_KERNELS)
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#if defined(__clang__)  // clang ignores GCC's target pragma (the fuzz build)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#endif
namespace {

inline float HalfAt(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

inline float Sum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

template <int R>
struct Rows {
  const int8_t* q[R];
  const float* dl[R];
  const float* ds[R];
  // Independent accumulator chains per row, rotated after every step, so that few rows
  // are not held to one FMA's latency per step.
  static constexpr int kChains = R == 1 ? 4 : R == 2 ? 2 : 1;
  __m256 acc[R][kChains];
  Rows(const Activations& a, int64_t r0) {
    for (int r = 0; r < R; ++r) {
      q[r] = a.q + (r0 + r) * a.in;
      dl[r] = a.dl + (r0 + r) * (a.in / 4);
      ds[r] = a.ds + (r0 + r) * (a.in / 32);
      for (auto& c : acc[r]) c = _mm256_setzero_ps();
    }
  }
  void Rotate() {
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c + 1 < kChains; ++c) std::swap(acc[r][c], acc[r][c + 1]);
    }
  }
  __m256 Total(int r) const {
    __m256 t = acc[r][0];
    for (int c = 1; c < kChains; ++c) t = _mm256_add_ps(t, acc[r][c]);
    return t;
  }
};

// 32 weight levels wv (signed if kSigned, else 0..127) at input offset i, lane scales wsc.
template <int R, bool kSigned>
inline void Step(Rows<R>& rows, int64_t i, __m256i wv, __m256 wsc) {
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i wu = kSigned ? _mm256_sign_epi8(wv, wv) : wv;
  for (int r = 0; r < R; ++r) {
    __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows.q[r] + i));
    if (kSigned) xq = _mm256_sign_epi8(xq, wv);
    const __m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(wu, xq), ones);
    const __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(dot), _mm256_loadu_ps(rows.dl[r] + i / 4));
    rows.acc[r][0] = _mm256_fmadd_ps(f, wsc, rows.acc[r][0]);
  }
  rows.Rotate();
}

template <int R>
inline void Finish(Rows<R>& rows, float* sums) {
  for (int r = 0; r < R; ++r) sums[r] = Sum8(rows.Total(r));
}

template <int R>
void DotQ8_0(const uint8_t* w, const Activations& a, int64_t r0, float* sums) {
  Rows<R> rows(a, r0);
  for (int64_t b = 0; b < a.in / 32; ++b, w += kQ8_0Bytes) {
    Step<R, true>(rows, 32 * b, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 2)),
                  _mm256_set1_ps(HalfAt(w)));
  }
  Finish(rows, sums);
}

template <int R>
void DotQ4_0(const uint8_t* w, const Activations& a, int64_t r0, float* sums) {
  Rows<R> rows(a, r0);
  const __m128i low4 = _mm_set1_epi8(0x0f);
  for (int64_t b = 0; b < a.in / 32; ++b, w += kQ4_0Bytes) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2));
    const __m256i v = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), low4), _mm_and_si128(q, low4));
    Step<R, true>(rows, 32 * b, _mm256_sub_epi8(v, _mm256_set1_epi8(8)), _mm256_set1_ps(HalfAt(w)));
  }
  Finish(rows, sums);
}

template <int R, bool kFive>
void DotK4(const uint8_t* w, const Activations& a, int64_t r0, float* sums) {
  Rows<R> rows(a, r0);
  __m256 min_acc[R];
  for (auto& m : min_acc) m = _mm256_setzero_ps();
  const __m256i low4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
  const int64_t block_bytes = kFive ? kQ5_KBytes : kQ4_KBytes;
  for (int64_t b = 0; b < a.in / kQK; ++b, w += block_bytes) {
    uint32_t u[3];
    std::memcpy(u, w + kQ4_KScales, 12);
    const uint32_t sc_lo = u[0] & 0x3f3f3f3f, m_lo = u[1] & 0x3f3f3f3f;
    const uint32_t sc_hi = (u[2] & 0x0f0f0f0f) | (((u[0] >> 6) & 0x03030303) << 4);
    const uint32_t m_hi = ((u[2] >> 4) & 0x0f0f0f0f) | (((u[1] >> 6) & 0x03030303) << 4);
    const __m256 scf = _mm256_mul_ps(
        _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_set_epi32(0, 0, int(sc_hi), int(sc_lo)))),
        _mm256_set1_ps(HalfAt(w)));
    const __m256 mins = _mm256_mul_ps(
        _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_set_epi32(0, 0, int(m_hi), int(m_lo)))),
        _mm256_set1_ps(HalfAt(w + 2)));
    alignas(32) float sc[8];
    _mm256_store_ps(sc, scf);
    const uint8_t* qs = w + (kFive ? kQ5_KQs : kQ4_KQs);
    __m256i qh = _mm256_setzero_si256();
    if (kFive) qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + kQ5_KQh));
    for (int j = 0; j < 4; ++j) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * j));
      __m256i lo = _mm256_and_si256(q, low4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
      if (kFive) {
        lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j), one), 4));
        hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j + 1), one), 4));
      }
      Step<R, false>(rows, kQK * b + 64 * j, lo, _mm256_broadcast_ss(&sc[2 * j]));
      Step<R, false>(rows, kQK * b + 64 * j + 32, hi, _mm256_broadcast_ss(&sc[2 * j + 1]));
    }
    for (int r = 0; r < R; ++r) {
      min_acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(rows.ds[r] + 8 * b), mins, min_acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) rows.acc[r][0] = _mm256_sub_ps(rows.acc[r][0], min_acc[r]);
  Finish(rows, sums);
}

template <int R>
void DotQ6_K(const uint8_t* w, const Activations& a, int64_t r0, float* sums) {
  Rows<R> rows(a, r0);
  const __m256i low4 = _mm256_set1_epi8(0x0f), low2 = _mm256_set1_epi8(0x03);
  const __m256i off = _mm256_set1_epi8(32);
  for (int64_t b = 0; b < a.in / kQK; ++b, w += kQ6_KBytes) {
    const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + kQ6_KScales));
    const __m256 d = _mm256_set1_ps(HalfAt(w + kQ6_KD));
    alignas(32) float sc[16];
    _mm256_store_ps(sc, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc8)), d));
    _mm256_store_ps(sc + 8, _mm256_mul_ps(
        _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc8, 8))), d));
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = w + kQ6_KQl + 64 * h;
      const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
      const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + kQ6_KQh + 32 * h));
      const __m256i lows[4] = {_mm256_and_si256(ql0, low4), _mm256_and_si256(ql1, low4),
                               _mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4),
                               _mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4)};
      for (int t = 0; t < 4; ++t) {  // values 32t .. 32t + 31 of this half
        const __m256i high = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * t), low2), 4);
        const __m256i wv = _mm256_sub_epi8(_mm256_or_si256(lows[t], high), off);
        const int s = 8 * h + 2 * t;
        const __m256 wsc = _mm256_blend_ps(_mm256_broadcast_ss(&sc[s]), _mm256_broadcast_ss(&sc[s + 1]), 0xf0);
        Step<R, true>(rows, kQK * b + 128 * h + 32 * t, wv, wsc);
      }
    }
  }
  Finish(rows, sums);
}

enum class FloatKind { kF32, kF16, kBF16 };

template <FloatKind K>
inline __m256 LoadWeights(const uint8_t* w, int64_t i) {
  if (K == FloatKind::kF32) return _mm256_loadu_ps(reinterpret_cast<const float*>(w) + i);
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2 * i));
  if (K == FloatKind::kF16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

template <FloatKind K>
inline float WeightAt(const uint8_t* w, int64_t i) {
  if (K == FloatKind::kF32) return reinterpret_cast<const float*>(w)[i];
  uint16_t h;
  std::memcpy(&h, w + 2 * i, 2);
  return K == FloatKind::kF16 ? _cvtsh_ss(h) : Bf16ToF32(h);
}

template <int R, FloatKind K>
void DotFloat(const uint8_t* w, const Activations& a, int64_t r0, float* sums) {
  const int64_t in = a.in;
  const float* x[R];
  __m256 acc0[R], acc1[R];
  for (int r = 0; r < R; ++r) {
    x[r] = a.x + (r0 + r) * in;
    acc0[r] = acc1[r] = _mm256_setzero_ps();
  }
  int64_t i = 0;
  for (; i + 16 <= in; i += 16) {
    const __m256 w0 = LoadWeights<K>(w, i), w1 = LoadWeights<K>(w, i + 8);
    for (int r = 0; r < R; ++r) {
      acc0[r] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x[r] + i), acc0[r]);
      acc1[r] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x[r] + i + 8), acc1[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    float sum = Sum8(_mm256_add_ps(acc0[r], acc1[r]));
    for (int64_t j = i; j < in; ++j) sum += WeightAt<K>(w, j) * x[r][j];
    sums[r] = sum;
  }
}

template <int R> struct Q8_0K { static void Run(const uint8_t* w, const Activations& a, int64_t r0, float* s) { DotQ8_0<R>(w, a, r0, s); } };
template <int R> struct Q4_0K { static void Run(const uint8_t* w, const Activations& a, int64_t r0, float* s) { DotQ4_0<R>(w, a, r0, s); } };
template <int R> struct Q4_KK { static void Run(const uint8_t* w, const Activations& a, int64_t r0, float* s) { DotK4<R, false>(w, a, r0, s); } };
template <int R> struct Q5_KK { static void Run(const uint8_t* w, const Activations& a, int64_t r0, float* s) { DotK4<R, true>(w, a, r0, s); } };
template <int R> struct Q6_KK { static void Run(const uint8_t* w, const Activations& a, int64_t r0, float* s) { DotQ6_K<R>(w, a, r0, s); } };
template <int R> struct F32K { static void Run(const uint8_t* w, const Activations& a, int64_t r0, float* s) { DotFloat<R, FloatKind::kF32>(w, a, r0, s); } };
template <int R> struct F16K { static void Run(const uint8_t* w, const Activations& a, int64_t r0, float* s) { DotFloat<R, FloatKind::kF16>(w, a, r0, s); } };
template <int R> struct BF16K { static void Run(const uint8_t* w, const Activations& a, int64_t r0, float* s) { DotFloat<R, FloatKind::kBF16>(w, a, r0, s); } };

}  // namespace
#if defined(__clang__)
#pragma clang attribute pop
#endif
#pragma GCC pop_options

namespace {
template <template <int> class F>
DotKernels Table() {
  DotKernels k;
  k.rows[0] = F<1>::Run;
  k.rows[1] = F<2>::Run;
  k.rows[2] = F<3>::Run;
  k.rows[3] = F<4>::Run;
  return k;
}
}  // namespace
#endif  // ATTNSERVE_AVX2_KERNELS

DotKernels Avx2Kernels(WeightType type) {
#if defined(ATTNSERVE_AVX2_KERNELS)
  switch (type) {
    case WeightType::kF32: return Table<F32K>();
    case WeightType::kF16: return Table<F16K>();
    case WeightType::kBF16: return Table<BF16K>();
    case WeightType::kQ8_0: return Table<Q8_0K>();
    case WeightType::kQ4_0: return Table<Q4_0K>();
    case WeightType::kQ4_K: return Table<Q4_KK>();
    case WeightType::kQ5_K: return Table<Q5_KK>();
    case WeightType::kQ6_K: return Table<Q6_KK>();
  }
#endif
  return {};
}

}  // namespace attnserve::weights
