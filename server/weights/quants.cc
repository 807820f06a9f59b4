// DequantizeRow and QuantizeRow: ggml's dequantize_row_* and quantize_row_*_ref
// (ggml-quants.c), rewritten over byte offsets. Every float operation is kept in ggml's
// order and unfused (this file builds with -ffp-contract=off) so that a dequantized row is
// bit for bit what ggml's C source gives, and what a numpy float32 dequantizer gives.
#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>

#include "server/weights/blocks.h"
#include "server/weights/half.h"
#include "server/weights/packed_matrix.h"

namespace attnserve::weights {
namespace {

constexpr float kGroupMaxEps = 1e-15f;

// Round to nearest, ties to even, for |v| < 2^22 (ggml's nearest_int: adding 1.5 * 2^23
// leaves the rounded integer in the low mantissa bits).
inline int NearestInt(float v) {
  const float t = v + 12582912.f;
  int32_t i;
  std::memcpy(&i, &t, sizeof i);
  return (i & 0x007fffff) - 0x00400000;
}

void DequantizeQ8_0(const uint8_t* src, float* dst, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b, src += kQ8_0Bytes, dst += 32) {
    const float d = LoadF16(src);
    const int8_t* q = reinterpret_cast<const int8_t*>(src + kQ8_0Qs);
    for (int j = 0; j < 32; ++j) dst[j] = float(q[j]) * d;
  }
}

void DequantizeQ4_0(const uint8_t* src, float* dst, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b, src += kQ4_0Bytes, dst += 32) {
    const float d = LoadF16(src);
    const uint8_t* q = src + kQ4_0Qs;
    for (int j = 0; j < 16; ++j) {
      dst[j] = float((q[j] & 0xf) - 8) * d;
      dst[j + 16] = float((q[j] >> 4) - 8) * d;
    }
  }
}

void DequantizeQ4_K(const uint8_t* src, float* dst, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b, src += kQ4_KBytes) {
    const float d = LoadF16(src), dmin = LoadF16(src + 2);
    const uint8_t* scales = src + kQ4_KScales;
    const uint8_t* q = src + kQ4_KQs;
    for (int j = 0; j < 8; j += 2, q += 32) {
      uint8_t sc, m;
      ScaleMinK4(j, scales, &sc, &m);
      const float d1 = d * float(sc), m1 = dmin * float(m);
      ScaleMinK4(j + 1, scales, &sc, &m);
      const float d2 = d * float(sc), m2 = dmin * float(m);
      for (int l = 0; l < 32; ++l) *dst++ = d1 * float(q[l] & 0xf) - m1;
      for (int l = 0; l < 32; ++l) *dst++ = d2 * float(q[l] >> 4) - m2;
    }
  }
}

void DequantizeQ5_K(const uint8_t* src, float* dst, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b, src += kQ5_KBytes) {
    const float d = LoadF16(src), dmin = LoadF16(src + 2);
    const uint8_t* scales = src + kQ5_KScales;
    const uint8_t* qh = src + kQ5_KQh;
    const uint8_t* q = src + kQ5_KQs;
    for (int j = 0; j < 8; j += 2, q += 32) {
      uint8_t sc, m;
      ScaleMinK4(j, scales, &sc, &m);
      const float d1 = d * float(sc), m1 = dmin * float(m);
      ScaleMinK4(j + 1, scales, &sc, &m);
      const float d2 = d * float(sc), m2 = dmin * float(m);
      const uint8_t u1 = uint8_t(1u << j), u2 = uint8_t(2u << j);
      for (int l = 0; l < 32; ++l) *dst++ = d1 * float((q[l] & 0xf) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *dst++ = d2 * float((q[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
    }
  }
}

void DequantizeQ6_K(const uint8_t* src, float* dst, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b, src += kQ6_KBytes) {
    const float d = LoadF16(src + kQ6_KD);
    const int8_t* sc = reinterpret_cast<const int8_t*>(src + kQ6_KScales);
    for (int h = 0; h < 2; ++h, dst += 128) {
      const uint8_t* ql = src + kQ6_KQl + 64 * h;
      const uint8_t* qh = src + kQ6_KQh + 32 * h;
      const int8_t* s = sc + 8 * h;
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xf) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        // ggml: d * sc[is] * q, evaluated left to right.
        dst[l] = d * float(s[is]) * float(q1);
        dst[l + 32] = d * float(s[is + 2]) * float(q2);
        dst[l + 64] = d * float(s[is + 4]) * float(q3);
        dst[l + 96] = d * float(s[is + 6]) * float(q4);
      }
    }
  }
}

void QuantizeQ8_0(const float* x, uint8_t* dst, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b, x += 32, dst += kQ8_0Bytes) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    StoreF16(dst, d);
    for (int j = 0; j < 32; ++j) dst[kQ8_0Qs + j] = uint8_t(int8_t(std::round(x[j] * id)));
  }
}

void QuantizeQ4_0(const float* x, uint8_t* dst, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b, x += 32, dst += kQ4_0Bytes) {
    float amax = 0.0f, max = 0.0f;  // the value of largest magnitude, with its sign
    for (int j = 0; j < 32; ++j) {
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    StoreF16(dst, d);
    for (int j = 0; j < 16; ++j) {
      // ggml truncates v + 8.5 toward zero: round half up on [0, 16], capped at 15.
      const int q0 = std::min(15, int(int8_t(x[j] * id + 8.5f)));
      const int q1 = std::min(15, int(int8_t(x[j + 16] * id + 8.5f)));
      dst[kQ4_0Qs + j] = uint8_t(q0 | (q1 << 4));
    }
  }
}

// ggml's make_qkx2_quants: the scale and min of n values on levels 0..nmax, the best of a
// sweep of nstep + 1 candidate scales by weighted squared error; returns the scale, puts
// -min in *the_min and the levels in L.
float MakeQkx2Quants(int n, int nmax, const float* x, const float* weights, uint8_t* L,
                     float* the_min, uint8_t* laux, float rmin, float rdelta, int nstep) {
  float min = x[0], max = x[0], sum_w = weights[0], sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -min;
    return 0.f;
  }
  float iscale = float(nmax) / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = NearestInt(iscale * (x[i] - min));
    L[i] = uint8_t(std::max(0, std::min(nmax, l)));
    float diff = scale * float(L[i]) + min - x[i];
    diff = diff * diff;
    best_error += weights[i] * diff;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * float(is) + float(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = NearestInt(iscale * (x[i] - min));
      l = std::max(0, std::min(nmax, l));
      laux[i] = uint8_t(l);
      const float w = weights[i];
      sum_l += w * float(l);
      sum_l2 += w * float(l) * float(l);
      sum_xl += w * float(l) * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * float(laux[i]) + this_min - x[i];
        diff = diff * diff;
        cur_error += weights[i] * diff;
      }
      if (cur_error < best_error) {
        for (int i = 0; i < n; ++i) L[i] = laux[i];
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// Q4_K (nmax 15) and Q5_K (nmax 31) share the scale search and the scale packing; the
// levels of one super-block (0..nmax) go to L.
void QuantizeK4Scales(const float* x, int nmax, float rmin, int nstep, uint8_t* block,
                      uint8_t* L) {
  uint8_t laux[32];
  float weights[32], mins[8], scales[8];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] = MakeQkx2Quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], laux, rmin,
                               0.1f, nstep);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  uint8_t* s = block + kQ4_KScales;  // same offset in Q5_K
  std::memset(s, 0, 12);
  for (int j = 0; j < 8; ++j) {
    const uint8_t ls = std::min<uint8_t>(63, uint8_t(NearestInt(inv_scale * scales[j])));
    const uint8_t lm = std::min<uint8_t>(63, uint8_t(NearestInt(inv_min * mins[j])));
    if (j < 4) {
      s[j] = ls;
      s[j + 4] = lm;
    } else {
      s[j + 4] = uint8_t((ls & 0xf) | ((lm & 0xf) << 4));
      s[j - 4] |= uint8_t((ls >> 4) << 6);
      s[j] |= uint8_t((lm >> 4) << 6);
    }
  }
  StoreF16(block, max_scale / 63.f);
  StoreF16(block + 2, max_min / 63.f);
  const float d = LoadF16(block), dmin = LoadF16(block + 2);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    ScaleMinK4(j, s, &sc, &m);
    const float dj = d * float(sc);
    if (dj == 0.0f) continue;  // keeps the levels the search gave
    const float dm = dmin * float(m);
    for (int i = 0; i < 32; ++i) {
      const int l = NearestInt((x[32 * j + i] + dm) / dj);
      L[32 * j + i] = uint8_t(std::max(0, std::min(nmax, l)));
    }
  }
}

void QuantizeQ4_K(const float* x, uint8_t* dst, int64_t blocks) {
  uint8_t L[kQK];
  for (int64_t b = 0; b < blocks; ++b, x += kQK, dst += kQ4_KBytes) {
    QuantizeK4Scales(x, 15, -1.f, 20, dst, L);
    uint8_t* q = dst + kQ4_KQs;
    for (int j = 0; j < kQK; j += 64, q += 32) {
      for (int l = 0; l < 32; ++l) q[l] = uint8_t(L[j + l] | (L[j + l + 32] << 4));
    }
  }
}

void QuantizeQ5_K(const float* x, uint8_t* dst, int64_t blocks) {
  uint8_t L[kQK];
  for (int64_t b = 0; b < blocks; ++b, x += kQK, dst += kQ5_KBytes) {
    QuantizeK4Scales(x, 31, -0.5f, 15, dst, L);
    uint8_t* qh = dst + kQ5_KQh;
    uint8_t* ql = dst + kQ5_KQs;
    std::memset(qh, 0, 32);
    uint8_t m1 = 1, m2 = 2;
    for (int n = 0; n < kQK; n += 64, ql += 32) {
      for (int j = 0; j < 32; ++j) {
        int l1 = L[n + j], l2 = L[n + j + 32];
        if (l1 > 15) {
          l1 -= 16;
          qh[j] |= m1;
        }
        if (l2 > 15) {
          l2 -= 16;
          qh[j] |= m2;
        }
        ql[j] = uint8_t(l1 | (l2 << 4));
      }
      m1 = uint8_t(m1 << 2);
      m2 = uint8_t(m2 << 2);
    }
  }
}

// ggml's make_qx_quants with rmse_type 1 and no importance weights: a symmetric scale for
// n values on levels -nmax..nmax-1 (L holds level + nmax), the best of 19 candidates by
// x^2-weighted error.
float MakeQxQuants(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  float iscale = -float(nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = NearestInt(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    L[i] = int8_t(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * float(l);
    suml2 += w * float(l) * float(l);
  }
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(float(nmax) + 0.1f * float(is)) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      int l = NearestInt(iscale * x[i]);
      l = std::max(-nmax, std::min(nmax - 1, l));
      const float w = x[i] * x[i];
      sumlx += w * x[i] * float(l);
      suml2 += w * float(l) * float(l);
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        const int l = NearestInt(iscale * x[i]);
        L[i] = int8_t(nmax + std::max(-nmax, std::min(nmax - 1, l)));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

void QuantizeQ6_K(const float* x, uint8_t* dst, int64_t blocks) {
  int8_t L[kQK];
  float scales[16];
  for (int64_t b = 0; b < blocks; ++b, x += kQK, dst += kQ6_KBytes) {
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < 16; ++ib) {
      scales[ib] = MakeQxQuants(16, 32, x + 16 * ib, L + 16 * ib);
      if (std::fabs(scales[ib]) > max_abs_scale) {
        max_abs_scale = std::fabs(scales[ib]);
        max_scale = scales[ib];
      }
    }
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(dst, 0, kQ6_KBytes);
      continue;
    }
    const float iscale = -128.f / max_scale;
    StoreF16(dst + kQ6_KD, 1 / iscale);
    int8_t* sc = reinterpret_cast<int8_t*>(dst + kQ6_KScales);
    for (int ib = 0; ib < 16; ++ib) sc[ib] = int8_t(std::min(127, NearestInt(iscale * scales[ib])));
    const float d0 = LoadF16(dst + kQ6_KD);
    for (int j = 0; j < 16; ++j) {
      const float d = d0 * float(sc[j]);
      if (d == 0.0f) continue;
      for (int i = 0; i < 16; ++i) {
        const int l = NearestInt(x[16 * j + i] / d);
        L[16 * j + i] = int8_t(std::max(-32, std::min(31, l)) + 32);
      }
    }
    uint8_t* ql = dst + kQ6_KQl;
    uint8_t* qh = dst + kQ6_KQh;
    for (int j = 0; j < kQK; j += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t q1 = L[j + l] & 0xf, q2 = L[j + l + 32] & 0xf;
        const uint8_t q3 = L[j + l + 64] & 0xf, q4 = L[j + l + 96] & 0xf;
        ql[l] = uint8_t(q1 | (q3 << 4));
        ql[l + 32] = uint8_t(q2 | (q4 << 4));
        qh[l] = uint8_t((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                        ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
      }
    }
  }
}

}  // namespace

void DequantizeRow(WeightType type, const uint8_t* src, float* dst, int64_t n) {
  const int64_t blocks = n / BlockValues(type);
  switch (type) {
    case WeightType::kF32:
      std::memcpy(dst, src, size_t(n) * 4);
      return;
    case WeightType::kF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = LoadF16(src + 2 * i);
      return;
    case WeightType::kBF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToF32(uint16_t(src[2 * i] | (src[2 * i + 1] << 8)));
      return;
    case WeightType::kQ8_0: return DequantizeQ8_0(src, dst, blocks);
    case WeightType::kQ4_0: return DequantizeQ4_0(src, dst, blocks);
    case WeightType::kQ4_K: return DequantizeQ4_K(src, dst, blocks);
    case WeightType::kQ5_K: return DequantizeQ5_K(src, dst, blocks);
    case WeightType::kQ6_K: return DequantizeQ6_K(src, dst, blocks);
  }
}

void QuantizeRow(WeightType type, const float* src, uint8_t* dst, int64_t n) {
  const int64_t blocks = n / BlockValues(type);
  switch (type) {
    case WeightType::kF32:
      std::memcpy(dst, src, size_t(n) * 4);
      return;
    case WeightType::kF16:
      for (int64_t i = 0; i < n; ++i) StoreF16(dst + 2 * i, src[i]);
      return;
    case WeightType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = F32ToBf16(src[i]);
        dst[2 * i] = uint8_t(h);
        dst[2 * i + 1] = uint8_t(h >> 8);
      }
      return;
    case WeightType::kQ8_0: return QuantizeQ8_0(src, dst, blocks);
    case WeightType::kQ4_0: return QuantizeQ4_0(src, dst, blocks);
    case WeightType::kQ4_K: return QuantizeQ4_K(src, dst, blocks);
    case WeightType::kQ5_K: return QuantizeQ5_K(src, dst, blocks);
    case WeightType::kQ6_K: return QuantizeQ6_K(src, dst, blocks);
  }
}

}  // namespace attnserve::weights
