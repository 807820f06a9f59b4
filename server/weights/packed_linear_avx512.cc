// PackedLinear's AVX-512 VNNI kernels: one weight row against R activation rows. Each
// step takes 64 weights as int8 levels, once, and for every row one vpdpbusd (unsigned x
// signed bytes, 4 products summed per int32 lane) against the row's int8 activations;
// the 16 lane sums go to fp32, times the activation block's scale (dl) and the weights'
// scale of that lane, into one fp32 accumulator per row.
//
// vpdpbusd wants its first operand unsigned. Q4_K / Q5_K levels are (0..31, their min is
// paid apart: -dmin * m * ds per sub-block). Signed levels (Q8_0 q, Q4_0 q - 8, Q6_K q - 32)
// take the sign trick: |w| as the unsigned operand and the activation negated where w < 0
// (one masked subtract per row and step), so w * x = |w| * (sign(w) x) exactly and no
// correction sums are needed. |w| <= 128 and |x| <= 127: no lane can overflow.
#include <immintrin.h>

#include <cstring>
#include <utility>

#include "server/weights/blocks.h"
#include "server/weights/linear_internal.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define ATTNSERVE_AVX512_KERNELS 1
#endif

namespace attnserve::weights {

#if defined(ATTNSERVE_AVX512_KERNELS)
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c")
#if defined(__clang__)  // clang ignores GCC's target pragma (the fuzz build)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c"))), apply_to = function)
#endif
// GCC 12's AVX-512 intrinsics trip its own -Wmaybe-uninitialized (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
namespace {

inline float HalfAt(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// Lanes [0, 8) take a, [8, 16) take b.
inline __m512 Halves(float a, float b) {
  return _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(a), _mm512_set1_ps(b));
}

// The fp16 scales at byte 0 of two consecutive blocks of `block_bytes` (even) at w, as
// lanes [0, 8) and [8, 16): one load, one word permute, one conversion. Plain loads that
// run past a pair of blocks: masked ones (vmovdqu8 with a mask) that touch memory about
// to stream in ran 5x slower at one row here.
inline __m512 PairScales(const uint8_t* w, int block_bytes) {
  const __m512i raw = _mm512_loadu_si512(w);  // PackedMatrix pads its bytes: see kTailPad
  const __m256i idx = _mm256_set_m128i(_mm_set1_epi16(short(block_bytes / 2)), _mm_setzero_si128());
  return _mm512_cvtph_ps(_mm512_castsi512_si256(
      _mm512_permutexvar_epi16(_mm512_castsi256_si512(idx), raw)));
}

// The rows of one call: row r's int8 values, lane scales and K-quant min sums.
template <int R>
struct Rows {
  const int8_t* q[R];
  const float* dl[R];
  const float* ds[R];
  // Independent accumulator chains per row, rotated after every step, so that few rows
  // are not held to one FMA's latency per step.
  static constexpr int kChains = R == 1 ? 4 : R == 2 ? 2 : 1;
  __m512 acc[R][kChains];
  Rows(const Activations& a, int64_t r0) {
    for (int r = 0; r < R; ++r) {
      q[r] = a.q + (r0 + r) * a.in;
      dl[r] = a.dl + (r0 + r) * (a.in / 4);
      ds[r] = a.ds + (r0 + r) * (a.in / 32);
      for (auto& c : acc[r]) c = _mm512_setzero_ps();
    }
  }
  void Rotate() {
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c + 1 < kChains; ++c) std::swap(acc[r][c], acc[r][c + 1]);
    }
  }
  __m512 Total(int r) const {
    __m512 t = acc[r][0];
    for (int c = 1; c < kChains; ++c) t = _mm512_add_ps(t, acc[r][c]);
    return t;
  }
};

// 64 weight levels wv (signed if kSigned, else 0..127) at input offset i, lane scales wsc.
// kHalf: only the first 32 are there (a row's last block of 32); the rest of wv is zero.
template <int R, bool kSigned, bool kHalf = false>
inline void Step(Rows<R>& rows, int64_t i, __m512i wv, __m512 wsc) {
  __m512i wu = wv;
  __mmask64 neg = 0;
  if (kSigned) {
    wu = _mm512_abs_epi8(wv);
    neg = _mm512_movepi8_mask(wv);
  }
  for (int r = 0; r < R; ++r) {
    __m512i xq = kHalf ? _mm512_maskz_loadu_epi8(0xffffffffull, rows.q[r] + i)
                       : _mm512_loadu_si512(rows.q[r] + i);
    if (kSigned) xq = _mm512_mask_sub_epi8(xq, neg, _mm512_setzero_si512(), xq);
    const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wu, xq);
    const __m512 dl = kHalf ? _mm512_maskz_loadu_ps(0x00ff, rows.dl[r] + i / 4)
                            : _mm512_loadu_ps(rows.dl[r] + i / 4);
    rows.acc[r][0] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(dot), dl), wsc, rows.acc[r][0]);
  }
  rows.Rotate();
}

template <int R>
inline void Finish(Rows<R>& rows, float* sums) {
  for (int r = 0; r < R; ++r) sums[r] = _mm512_reduce_add_ps(rows.Total(r));
}

template <int R>
void DotQ8_0(const uint8_t* w, const Activations& a, int64_t r0, float* sums) {
  Rows<R> rows(a, r0);
  const int64_t blocks = a.in / 32;
  int64_t b = 0;
  for (; b + 2 <= blocks; b += 2, w += 2 * kQ8_0Bytes) {
    const __m512i wv = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 2))),
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + kQ8_0Bytes + 2)), 1);
    Step<R, true>(rows, 32 * b, wv, PairScales(w, kQ8_0Bytes));
  }
  if (b < blocks) {
    const __m512i wv = _mm512_zextsi256_si512(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 2)));
    Step<R, true, true>(rows, 32 * b, wv, Halves(HalfAt(w), 0.0f));
  }
  Finish(rows, sums);
}

// Two Q4_0 blocks (36 bytes at w) as 64 levels q - 8: per block its low nibbles (values
// 0..15) then its high nibbles (16..31). One masked load; a word permute puts each
// block's 16 quant bytes (bytes 2..17, 20..35: whole words) in two 128-bit lanes, the
// second of which takes the high nibbles.
inline __m512i Q4_0Levels(const __m512i raw) {
  const __m512i idx = _mm512_set_epi16(17, 16, 15, 14, 13, 12, 11, 10, 17, 16, 15, 14, 13, 12, 11,
                                       10, 8, 7, 6, 5, 4, 3, 2, 1, 8, 7, 6, 5, 4, 3, 2, 1);
  const __m512i t = _mm512_permutexvar_epi16(idx, raw);
  const __m512i v = _mm512_mask_blend_epi64(0xcc, t, _mm512_srli_epi16(t, 4));
  return _mm512_sub_epi8(_mm512_and_si512(v, _mm512_set1_epi8(0x0f)), _mm512_set1_epi8(8));
}

template <int R>
void DotQ4_0(const uint8_t* w, const Activations& a, int64_t r0, float* sums) {
  Rows<R> rows(a, r0);
  const int64_t blocks = a.in / 32;
  int64_t b = 0;
  for (; b + 2 <= blocks; b += 2, w += 2 * kQ4_0Bytes) {
    const __m512i raw = _mm512_loadu_si512(w);  // PackedMatrix pads its bytes: see kTailPad
    Step<R, true>(rows, 32 * b, Q4_0Levels(raw), PairScales(w, kQ4_0Bytes));
  }
  if (b < blocks) {  // the last block alone: the second block's words read as zero
    const __m512i raw = _mm512_maskz_loadu_epi8(~0ull >> (64 - kQ4_0Bytes), w);
    const __m512i wv = _mm512_maskz_mov_epi64(0x0f, Q4_0Levels(raw));
    Step<R, true, true>(rows, 32 * b, wv, Halves(HalfAt(w), 0.0f));
  }
  Finish(rows, sums);
}

// Q4_K / Q5_K: the 8 sub-block scales and mins of a super-block's 12 scale bytes, as bytes
// (the 6-bit fields gathered by 32-bit word, see ScaleMinK4).
inline void K4ScaleBytes(const uint8_t* s, uint64_t* sc, uint64_t* m) {
  uint32_t u[3];
  std::memcpy(u, s, 12);
  const uint32_t sc_lo = u[0] & 0x3f3f3f3f, m_lo = u[1] & 0x3f3f3f3f;
  const uint32_t sc_hi = (u[2] & 0x0f0f0f0f) | (((u[0] >> 6) & 0x03030303) << 4);
  const uint32_t m_hi = ((u[2] >> 4) & 0x0f0f0f0f) | (((u[1] >> 6) & 0x03030303) << 4);
  *sc = sc_lo | (uint64_t(sc_hi) << 32);
  *m = m_lo | (uint64_t(m_hi) << 32);
}

inline __m256 BytesToFloats(uint64_t bytes) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(int64_t(bytes))));
}

// Lanes [0, 8) index a, [8, 16) index b.
inline __m512i PairIndex(int a, int b) {
  return _mm512_mask_blend_epi32(0xff00, _mm512_set1_epi32(a), _mm512_set1_epi32(b));
}
// Bytes [0, 32) test bit a, [32, 64) bit b.
inline __m512i FifthBits(int a, int b) {
  return _mm512_mask_blend_epi64(0xf0, _mm512_set1_epi8(char(1 << a)), _mm512_set1_epi8(char(1 << b)));
}

// Q4_K / Q5_K in a.k4_order.
template <int R, bool kFive>
void DotK4(const uint8_t* w, const Activations& a, int64_t r0, float* sums) {
  Rows<R> rows(a, r0);
  __m256 min_acc[R];
  for (auto& m : min_acc) m = _mm256_setzero_ps();
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  const int64_t block_bytes = kFive ? kQ5_KBytes : kQ4_KBytes;
  for (int64_t b = 0; b < a.in / kQK; ++b, w += block_bytes) {
    uint64_t sc_bytes, m_bytes;
    K4ScaleBytes(w + kQ4_KScales, &sc_bytes, &m_bytes);
    const __m512 scales = _mm512_castps256_ps512(
        _mm256_mul_ps(BytesToFloats(sc_bytes), _mm256_set1_ps(HalfAt(w))));
    const __m256 mins = _mm256_mul_ps(BytesToFloats(m_bytes), _mm256_set1_ps(HalfAt(w + 2)));
    const uint8_t* qs = w + (kFive ? kQ5_KQs : kQ4_KQs);
    __m512i qh;
    if (kFive) {
      qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + kQ5_KQh)));
    }
    for (int k = 0; k < 2; ++k) {
      // 64 bytes: low nibbles are sub-blocks 4k, 4k + 2; high nibbles 4k + 1, 4k + 3 (the
      // activations are in this order: a.k4_order).
      const __m512i raw = _mm512_loadu_si512(qs + 64 * k);
      __m512i lo = _mm512_and_si512(raw, low4);
      __m512i hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low4);
      if (kFive) {  // bit s of qh[l]: the fifth bit of value l of sub-block s
        const __m512i sixteen = _mm512_set1_epi8(16);
        lo = _mm512_mask_add_epi8(lo, _mm512_test_epi8_mask(qh, FifthBits(4 * k, 4 * k + 2)), lo, sixteen);
        hi = _mm512_mask_add_epi8(hi, _mm512_test_epi8_mask(qh, FifthBits(4 * k + 1, 4 * k + 3)), hi, sixteen);
      }
      Step<R, false>(rows, kQK * b + 128 * k, lo, _mm512_permutexvar_ps(PairIndex(4 * k, 4 * k + 2), scales));
      Step<R, false>(rows, kQK * b + 128 * k + 64, hi, _mm512_permutexvar_ps(PairIndex(4 * k + 1, 4 * k + 3), scales));
    }
    for (int r = 0; r < R; ++r) {
      min_acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(rows.ds[r] + 8 * b), mins, min_acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    rows.acc[r][0] = _mm512_sub_ps(rows.acc[r][0], _mm512_zextps256_ps512(min_acc[r]));
  }
  Finish(rows, sums);
}

template <int R>
void DotQ6_K(const uint8_t* w, const Activations& a, int64_t r0, float* sums) {
  Rows<R> rows(a, r0);
  const __m512i low4 = _mm512_set1_epi8(0x0f), low2 = _mm512_set1_epi8(0x03);
  const __m512i off = _mm512_set1_epi8(32);
  for (int64_t b = 0; b < a.in / kQK; ++b, w += kQ6_KBytes) {
    const __m512 scales = _mm512_mul_ps(
        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + kQ6_KScales)))),
        _mm512_set1_ps(HalfAt(w + kQ6_KD)));
    for (int h = 0; h < 2; ++h) {
      const __m512i ql = _mm512_loadu_si512(w + kQ6_KQl + 64 * h);
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + kQ6_KQh + 32 * h));
      // [qh, qh >> 2]: the high bits of values 0..31 and 32..63 in bits 0-1 (and of
      // 64..127 in bits 4-5).
      const __m512i qhz = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
      const __m512i v0 = _mm512_or_si512(_mm512_and_si512(ql, low4),
                                         _mm512_slli_epi16(_mm512_and_si512(qhz, low2), 4));
      const __m512i v1 = _mm512_or_si512(
          _mm512_and_si512(_mm512_srli_epi16(ql, 4), low4),
          _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qhz, 4), low2), 4));
      // Lanes 4t..4t+3 of step k take scale 8h + 4k + t.
      const int base = 8 * h;
      const __m512i idx0 = _mm512_setr_epi32(base, base, base, base, base + 1, base + 1, base + 1,
                                             base + 1, base + 2, base + 2, base + 2, base + 2,
                                             base + 3, base + 3, base + 3, base + 3);
      const __m512i idx1 = _mm512_add_epi32(idx0, _mm512_set1_epi32(4));
      Step<R, true>(rows, kQK * b + 128 * h, _mm512_sub_epi8(v0, off),
                    _mm512_permutexvar_ps(idx0, scales));
      Step<R, true>(rows, kQK * b + 128 * h + 64, _mm512_sub_epi8(v1, off),
                    _mm512_permutexvar_ps(idx1, scales));
    }
  }
  Finish(rows, sums);
}

// F32 / F16 / BF16: 16 weights widened to fp32 per step, fp32 FMA with the rows of x.
enum class FloatKind { kF32, kF16, kBF16 };

template <FloatKind K>
inline __m512 LoadWeights(const uint8_t* w, int64_t i, __mmask16 mask) {
  if (K == FloatKind::kF32) return _mm512_maskz_loadu_ps(mask, w + 4 * i);
  const __m256i h = _mm256_maskz_loadu_epi16(mask, w + 2 * i);
  if (K == FloatKind::kF16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

template <int R, FloatKind K>
void DotFloat(const uint8_t* w, const Activations& a, int64_t r0, float* sums) {
  const int64_t in = a.in;
  const float* x[R];
  __m512 acc0[R], acc1[R];
  for (int r = 0; r < R; ++r) {
    x[r] = a.x + (r0 + r) * in;
    acc0[r] = acc1[r] = _mm512_setzero_ps();
  }
  int64_t i = 0;
  for (; i + 32 <= in; i += 32) {
    const __m512 w0 = LoadWeights<K>(w, i, 0xffff), w1 = LoadWeights<K>(w, i + 16, 0xffff);
    for (int r = 0; r < R; ++r) {
      acc0[r] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x[r] + i), acc0[r]);
      acc1[r] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x[r] + i + 16), acc1[r]);
    }
  }
  for (; i < in; i += 16) {
    const __mmask16 mask = in - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (in - i)) - 1);
    const __m512 w0 = LoadWeights<K>(w, i, mask);
    for (int r = 0; r < R; ++r) {
      acc0[r] = _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(mask, x[r] + i), acc0[r]);
    }
  }
  for (int r = 0; r < R; ++r) sums[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[r], acc1[r]));
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
#pragma GCC diagnostic pop
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
#endif  // ATTNSERVE_AVX512_KERNELS

DotKernels Avx512Kernels(WeightType type) {
#if defined(ATTNSERVE_AVX512_KERNELS)
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
