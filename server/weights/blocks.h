// Byte offsets inside ggml's blocks (ggml-common.h) and the K-quant scale unpacking,
// shared by the reference code and the kernels. Internal to server/weights.
#pragma once

#include <cstdint>

namespace attnserve::weights {

constexpr int kQK = 256;  // values per K-quant super-block

// Q8_0 (34 bytes): f16 d @0, int8 q[32] @2.
constexpr int kQ8_0Bytes = 34, kQ8_0Qs = 2;
// Q4_0 (18 bytes): f16 d @0, 16 bytes @2: byte j holds q[j] (low nibble), q[j+16] (high).
constexpr int kQ4_0Bytes = 18, kQ4_0Qs = 2;
// Q4_K (144 bytes): f16 d @0, f16 dmin @2, 12 scale bytes @4, 128 nibble bytes @16. The
// nibbles go by 64 values: 32 bytes whose low nibbles are sub-block 2j, high ones 2j+1.
constexpr int kQ4_KBytes = 144, kQ4_KScales = 4, kQ4_KQs = 16;
// Q5_K (176 bytes): as Q4_K with 32 bytes of fifth bits @16 (bit 2j of byte l: value l of
// sub-block 2j; bit 2j+1: of sub-block 2j+1), the nibbles @48.
constexpr int kQ5_KBytes = 176, kQ5_KScales = 4, kQ5_KQh = 16, kQ5_KQs = 48;
// Q6_K (210 bytes): ql[128] @0, qh[64] @128, int8 scales[16] @192, f16 d @208. Per half of
// 128 values h: ql[64h + l] low nibble is value l, of ql[64h + 32 + l] value 32 + l, their
// high nibbles values 64 + l and 96 + l; qh[32h + l] bits 0-1, 2-3, 4-5, 6-7 are the high
// two bits of values l, 32 + l, 64 + l, 96 + l. Scale i covers values 16i .. 16i + 15.
constexpr int kQ6_KBytes = 210, kQ6_KQl = 0, kQ6_KQh = 128, kQ6_KScales = 192, kQ6_KD = 208;

// The 6-bit scale and min of sub-block j (0..7) from Q4_K / Q5_K's 12 scale bytes q:
// sub-blocks 0..3 keep theirs in the low 6 bits of bytes j (scale) and j + 4 (min);
// 4..7 keep their low 4 bits in byte j + 4 (scale low nibble, min high nibble) and their
// high 2 bits in the top bits of bytes j - 4 (scale) and j (min).
inline void ScaleMinK4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = uint8_t((q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4));
    *m = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

}  // namespace attnserve::weights
