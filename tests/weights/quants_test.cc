// DequantizeRow on blocks packed here by hand from ggml's layouts (ggml-common.h), with
// values known in advance; QuantizeRow -> DequantizeRow within each type's error bound;
// the fp16 rounding against the CPU's own conversion (F16C).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "server/weights/half.h"
#include "server/weights/packed_matrix.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace attnserve::weights {
namespace {

void PutF16(uint8_t* p, uint16_t h) {
  p[0] = uint8_t(h);
  p[1] = uint8_t(h >> 8);
}

std::vector<float> Dequantize(WeightType type, const std::vector<uint8_t>& bytes, int64_t n) {
  std::vector<float> out(size_t(n), -1.0f);
  DequantizeRow(type, bytes.data(), out.data(), n);
  return out;
}

TEST(DequantizeRow, F16AndBf16Values) {
  const uint16_t f16[] = {0x3c00, 0xc000, 0x0001, 0x7bff, 0x8000, 0x03ff, 0x7c00};
  const float f16_want[] = {1.0f, -2.0f, 0x1.0p-24f, 65504.0f, -0.0f, 1023 * 0x1.0p-24f,
                            INFINITY};
  std::vector<uint8_t> bytes(14);
  for (int i = 0; i < 7; ++i) PutF16(&bytes[2 * i], f16[i]);
  std::vector<float> got = Dequantize(WeightType::kF16, bytes, 7);
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(got[i], f16_want[i]) << i;
    EXPECT_EQ(std::signbit(got[i]), std::signbit(f16_want[i])) << i;
  }
  const uint16_t bf16[] = {0x3f80, 0xc040, 0x0001, 0x7f7f};
  const float bf16_want[] = {1.0f, -3.0f, 0x1.0p-133f, 0x1.fep127f};
  for (int i = 0; i < 4; ++i) PutF16(&bytes[2 * i], bf16[i]);
  got = Dequantize(WeightType::kBF16, bytes, 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(got[i], bf16_want[i]) << i;
}

TEST(DequantizeRow, Q8_0KnownBlock) {
  std::vector<uint8_t> b(2 * 34);
  PutF16(&b[0], 0x3800);   // 0.5
  PutF16(&b[34], 0xbc00);  // -1
  for (int j = 0; j < 32; ++j) {
    b[2 + j] = uint8_t(int8_t(j * 8 - 128));
    b[36 + j] = uint8_t(int8_t(127 - j));
  }
  const std::vector<float> got = Dequantize(WeightType::kQ8_0, b, 64);
  for (int j = 0; j < 32; ++j) {
    EXPECT_EQ(got[j], 0.5f * float(j * 8 - 128)) << j;
    EXPECT_EQ(got[32 + j], -float(127 - j)) << j;
  }
}

TEST(DequantizeRow, Q4_0LowNibblesFirstThenHigh) {
  std::vector<uint8_t> b(18);
  PutF16(&b[0], 0x4000);  // 2
  for (int j = 0; j < 16; ++j) b[2 + j] = uint8_t(j | ((15 - j) << 4));
  const std::vector<float> got = Dequantize(WeightType::kQ4_0, b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(got[j], 2.0f * float(j - 8)) << j;
    EXPECT_EQ(got[j + 16], 2.0f * float(7 - j)) << j;
  }
}

// Q4_K / Q5_K scale bytes written from the layout: sub-blocks 0..3 in the low 6 bits of
// bytes j (scale) and j + 4 (min); 4..7 split: low 4 bits in byte j + 4 (scale low
// nibble, min high nibble), high 2 bits on top of bytes j - 4 (scale) and j (min).
void PackK4Scales(const int sc[8], const int m[8], uint8_t* s) {
  for (int j = 0; j < 4; ++j) {
    s[j] = uint8_t(sc[j] | ((sc[j + 4] >> 4) << 6));
    s[j + 4] = uint8_t(m[j] | ((m[j + 4] >> 4) << 6));
    s[j + 8] = uint8_t((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
  }
}

// Sub-blocks 4..7 take scales and mins >= 16, so their high bits matter.
const int kSc[8] = {1, 2, 63, 17, 33, 48, 63, 21};
const int kMin[8] = {0, 3, 7, 63, 21, 40, 16, 62};

TEST(DequantizeRow, Q4_KScalePackingAndNibbleOrder) {
  std::vector<uint8_t> b(144, 0);
  PutF16(&b[0], 0x3c00);  // d 1
  PutF16(&b[2], 0x3800);  // dmin 0.5
  PackK4Scales(kSc, kMin, &b[4]);
  auto level = [](int p) { return (p * 7 + p / 32) % 16; };
  for (int p = 0; p < 256; ++p) {
    // 64 values per 32 bytes: the first 32 in the low nibbles, the next 32 in the high.
    const int byte = 16 + (p / 64) * 32 + p % 32;
    b[byte] |= uint8_t(p % 64 < 32 ? level(p) : level(p) << 4);
  }
  const std::vector<float> got = Dequantize(WeightType::kQ4_K, b, 256);
  for (int p = 0; p < 256; ++p) {
    const int j = p / 32;
    EXPECT_EQ(got[p], 1.0f * float(kSc[j]) * float(level(p)) - 0.5f * float(kMin[j])) << p;
  }
}

TEST(DequantizeRow, Q5_KFifthBits) {
  std::vector<uint8_t> b(176, 0);
  PutF16(&b[0], 0x3400);  // d 0.25
  PutF16(&b[2], 0x4000);  // dmin 2
  PackK4Scales(kSc, kMin, &b[4]);
  auto level = [](int p) { return (p * 11 + p / 32) % 32; };
  for (int p = 0; p < 256; ++p) {
    const int byte = 48 + (p / 64) * 32 + p % 32;
    b[byte] |= uint8_t(p % 64 < 32 ? level(p) & 15 : (level(p) & 15) << 4);
    if (level(p) & 16) b[16 + p % 32] |= uint8_t(1 << (p / 32));  // bit j: sub-block j
  }
  const std::vector<float> got = Dequantize(WeightType::kQ5_K, b, 256);
  for (int p = 0; p < 256; ++p) {
    const int j = p / 32;
    EXPECT_EQ(got[p], 0.25f * float(kSc[j]) * float(level(p)) - 2.0f * float(kMin[j])) << p;
  }
}

TEST(DequantizeRow, Q6_KLayout) {
  std::vector<uint8_t> b(210, 0);
  const int8_t scales[16] = {-128, 127, 1, -1, 5, -7, 64, 33, 0, 2, -2, 100, -100, 9, 17, 3};
  std::memcpy(&b[192], scales, 16);
  PutF16(&b[208], 0x3400);  // d 0.25
  auto level = [](int p) { return (p * 5 + p / 64) % 64; };
  for (int p = 0; p < 256; ++p) {
    const int h = p / 128, t = (p % 128) / 32, l = p % 32;
    const int ql = 64 * h + (t % 2) * 32 + l;  // quarters 0, 2 share bytes, as do 1, 3
    b[ql] |= uint8_t(t < 2 ? level(p) & 15 : (level(p) & 15) << 4);
    b[128 + 32 * h + l] |= uint8_t((level(p) >> 4) << (2 * t));
  }
  const std::vector<float> got = Dequantize(WeightType::kQ6_K, b, 256);
  for (int p = 0; p < 256; ++p) {
    EXPECT_EQ(got[p], 0.25f * float(scales[p / 16]) * float(level(p) - 32)) << p;
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("f16c"))) uint16_t HardwareF16(float f) {
  return uint16_t(_mm_cvtsi128_si32(_mm_cvtps_ph(_mm_set_ss(f), _MM_FROUND_TO_NEAREST_INT)));
}

TEST(Half, F32ToF16MatchesF16c) {
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "no F16C";
  std::mt19937 rng(7);
  int checked = 0;
  for (int i = 0; i < 2000000; ++i) {
    uint32_t bits = rng();
    if (i % 2) bits = (bits & 0x80ffffffu) | ((100 + bits % 48) << 23);  // near fp16 range
    const float f = BitsToFloat(bits);
    if (std::isnan(f)) continue;
    ASSERT_EQ(F32ToF16(f), HardwareF16(f)) << std::hexfloat << f;
    ++checked;
  }
  for (uint32_t h = 0; h < 0x10000; ++h) {  // every fp16 value round-trips
    const float f = F16ToF32(uint16_t(h));
    if (!std::isnan(f)) {
      ASSERT_EQ(F32ToF16(f), h);
    }
  }
  EXPECT_GT(checked, 1900000);
}
#endif

// QuantizeRow then DequantizeRow: the error of each value within its block's bound.
struct Bound {
  WeightType type;
  double per_block_max;  // max |err| / max |x| over each block of BlockValues values
  double rms;            // rms(err) / rms(x) over the row
};

class RoundTrip : public testing::TestWithParam<Bound> {};

TEST_P(RoundTrip, ErrorWithinTheTypesBound) {
  const Bound bound = GetParam();
  const int64_t n = 4096;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = normal(rng) * (i % 512 < 256 ? 0.02f : 3.0f);
  x[100] = 0.0f;
  std::vector<uint8_t> bytes(size_t(RowBytes(bound.type, n)));
  QuantizeRow(bound.type, x.data(), bytes.data(), n);
  std::vector<float> y(n);
  DequantizeRow(bound.type, bytes.data(), y.data(), n);
  const int64_t bv = std::max<int64_t>(32, BlockValues(bound.type));
  double err2 = 0, x2 = 0, worst = 0;
  for (int64_t b = 0; b < n / bv; ++b) {
    double amax = 0, emax = 0;
    for (int64_t i = b * bv; i < (b + 1) * bv; ++i) {
      amax = std::max(amax, double(std::fabs(x[i])));
      emax = std::max(emax, std::fabs(double(y[i]) - x[i]));
      err2 += (double(y[i]) - x[i]) * (double(y[i]) - x[i]);
      x2 += double(x[i]) * x[i];
    }
    worst = std::max(worst, emax / amax);
  }
  EXPECT_LE(worst, bound.per_block_max) << WeightTypeName(bound.type);
  EXPECT_LE(std::sqrt(err2 / x2), bound.rms) << WeightTypeName(bound.type);
  EXPECT_GT(std::sqrt(err2 / x2), bound.rms / 20) << "bound too loose to mean anything";
}

// Q8_0: 1/2 step of amax/127 plus 127 steps times d's fp16 rounding (2^-11); Q4_0: the value opposite the block's
// extreme may clip from +8 to +7 steps of amax/8 (one step); the K types by their level
// counts (15, 31, 63 levels across a range of up to 2 amax) with the scale search's slack.
INSTANTIATE_TEST_SUITE_P(
    AllTypes, RoundTrip,
    testing::Values(Bound{WeightType::kF16, 1.0 / 2048, 0.0005},
                    Bound{WeightType::kBF16, 1.0 / 256, 0.004},
                    Bound{WeightType::kQ8_0, (0.5 + 127.0 / 2048) / 127, 0.01},
                    Bound{WeightType::kQ4_0, 1.0 / 8 * 1.01, 0.12},
                    Bound{WeightType::kQ4_K, 2.0 / 15, 0.10},
                    Bound{WeightType::kQ5_K, 2.0 / 31, 0.05},
                    Bound{WeightType::kQ6_K, 1.0 / 32, 0.025}),
    [](const testing::TestParamInfo<Bound>& info) {
      return std::string(WeightTypeName(info.param.type));
    });

TEST(RoundTrip, F32IsExact) {
  const float x[] = {1.5f, -0.0f, 3e-40f, -7.25f};
  uint8_t bytes[16];
  QuantizeRow(WeightType::kF32, x, bytes, 4);
  float y[4];
  DequantizeRow(WeightType::kF32, bytes, y, 4);
  EXPECT_EQ(0, std::memcmp(x, y, sizeof x));
}

TEST(RoundTrip, ZeroRowsStayZero) {
  for (WeightType type : {WeightType::kQ8_0, WeightType::kQ4_0, WeightType::kQ4_K,
                          WeightType::kQ5_K, WeightType::kQ6_K}) {
    std::vector<float> x(256, 0.0f), y(256, 1.0f);
    std::vector<uint8_t> bytes(size_t(RowBytes(type, 256)));
    QuantizeRow(type, x.data(), bytes.data(), 256);
    DequantizeRow(type, bytes.data(), y.data(), 256);
    for (float v : y) ASSERT_EQ(v, 0.0f) << WeightTypeName(type);
  }
}

TEST(PackedMatrix, CopyQuantizePermute) {
  EXPECT_FALSE(PackedMatrix::Copy(WeightType::kQ4_K, 2, 100, nullptr).ok());
  std::vector<float> w(3 * 64);
  for (size_t i = 0; i < w.size(); ++i) w[i] = float(i % 17) - 8.0f;
  auto m = PackedMatrix::Quantize(WeightType::kQ8_0, 3, 64, w.data());
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->row_bytes(), 68);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(m->data()) % 64, 0u);
  auto c = PackedMatrix::Copy(WeightType::kQ8_0, 3, 64, m->data());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(0, std::memcmp(c->data(), m->data(), size_t(m->bytes())));
  const int64_t perm[] = {2, 0, 1};
  const PackedMatrix p = m->PermuteRows(perm);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(0, std::memcmp(p.row(i), m->row(perm[i]), 68)) << i;
  }
  std::vector<float> row(64);
  p.DequantizeRowTo(0, row.data());
  for (int i = 0; i < 64; ++i) EXPECT_NEAR(row[i], w[2 * 64 + i], 0.05) << i;
  EXPECT_EQ(FromGgmlType(14), WeightType::kQ6_K);
  EXPECT_EQ(FromGgmlType(30), WeightType::kBF16);
  EXPECT_FALSE(FromGgmlType(3).has_value());
}

}  // namespace
}  // namespace attnserve::weights
