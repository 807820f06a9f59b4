// bf16 values of a fixed state kept in bf16 (AttentionOptions::state_bf16): the high 16
// bits of an fp32. Torch-free; the same rounding as LibTorch's at::BFloat16 (round to
// nearest, ties to even; every NaN becomes 0x7FC0), so a state stored by the fused loops
// and one stored by the ATen reference (a copy_ into a kBFloat16 tensor) round alike.
#pragma once

#include <cstdint>
#include <cstring>

namespace attnserve::attention {

// fp32 -> bf16, round to nearest even.
// Integer operations only (the NaN test too), so loops of it vectorise.
inline uint16_t RoundToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  return (bits & 0x7FFFFFFFu) > 0x7F800000u ? uint16_t(0x7FC0) : uint16_t(rounded);
}

// bf16 -> fp32, exact.
inline float Bf16ToFloat(uint16_t h) {
  const uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

}  // namespace attnserve::attention
