// fp16 and bf16 conversions with IEEE round-to-nearest-even, as ggml's
// GGML_FP32_TO_FP16 / GGML_FP32_TO_BF16 (NaN comes back quiet). Internal to server/weights.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace attnserve::weights {

inline float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline uint32_t FloatToBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// Exact: every fp16 value is an fp32 value.
inline float F16ToF32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24
    const float v = float(mant) * 0x1.0p-24f;
    return BitsToFloat(FloatToBits(v) | sign);
  }
  if (exp == 31) return BitsToFloat(sign | 0x7f800000u | (mant << 13));
  return BitsToFloat(sign | ((exp + 112) << 23) | (mant << 13));
}

inline uint16_t F32ToF16(float f) {
  const uint32_t u = FloatToBits(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00;  // NaN
  // From 65520 (half-way between 65504 and 2^16, the tie rounds to the even 2^16) up: inf.
  if (a >= 0x477ff000u) return sign | 0x7c00;
  if (a < 0x38800000u) {
    // Below 2^-14: a subnormal, mant = |f| * 2^24 rounded to nearest even (the scaling is
    // exact); 1024 is the smallest normal, whose bits are the same.
    return sign | uint16_t(std::nearbyint(BitsToFloat(a) * 0x1.0p24f));
  }
  uint32_t h = (((a >> 23) - 112) << 10) | ((a >> 13) & 0x3ff);
  const uint32_t rem = a & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;  // a carry moves into the exponent
  return sign | uint16_t(h);
}

inline float Bf16ToF32(uint16_t h) { return BitsToFloat(uint32_t(h) << 16); }

inline uint16_t F32ToBf16(float f) {
  const uint32_t u = FloatToBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 64);  // quiet NaN
  return uint16_t((u + (0x7fffu + ((u >> 16) & 1))) >> 16);
}

// Little-endian fp16 at p (blocks are byte-packed, so no alignment).
inline float LoadF16(const uint8_t* p) { return F16ToF32(uint16_t(p[0] | (p[1] << 8))); }
inline void StoreF16(uint8_t* p, float f) {
  const uint16_t h = F32ToF16(f);
  p[0] = uint8_t(h);
  p[1] = uint8_t(h >> 8);
}

}  // namespace attnserve::weights
