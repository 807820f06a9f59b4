// KV caches stored in 16 bits (AttentionOptions::kv_cache_type): the row conversions
// against LibTorch's at::Half / at::BFloat16 (which the ATen reference path uses when it
// copies rows into its cache), bit for bit; the fused paths (StepRaw, PrefillRaw) against
// that reference, which stores the same bits; the blocked cache against one contiguous
// fp32 cache (growing by blocks, restoring from a snapshot's tensors, checkpoints); and
// the 16-bit cache against f32 within the bound its rounding allows. q8_0 caches: their
// blocks against ggml's format as server/weights reads it (checked against llama.cpp by
// tests/gguf), the same paths and restores, and f32 within the bound its quantization
// allows.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "server/attention/kv_kernels.h"
#include "server/attention/registry.h"
#include "server/weights/packed_matrix.h"

namespace attnserve::attention {
namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Values that exercise every rounding case of half: random magnitudes across and past
// half's range (subnormals, overflow), ties, signed zeros, infinities.
std::vector<float> HardValues() {
  std::vector<float> x = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.0f, 65520.0f, -65520.0f,
                          1e9f, std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(), 5.96e-8f, 2.98e-8f,
                          2.99e-8f, 6.1e-5f, 6.09e-5f, 1e-45f, 1.0f + 1.0f / 2048,
                          1.0f + 3.0f / 2048, 1.0f + 1.0f / 1024 + 1.0f / 4096};
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 200000; ++i) {
    const float f = FromBits(any(rng));
    if (!std::isnan(f)) x.push_back(f);
  }
  std::normal_distribution<float> normal;
  for (int i = 0; i < 100000; ++i) x.push_back(normal(rng) * std::ldexp(1.0f, i % 40 - 30));
  // Every half's midpoint to its neighbour: exact ties.
  for (uint32_t h = 0; h < 0x7C00; h += 7) {
    const float a = HalfToFloat(uint16_t(h)), b = HalfToFloat(uint16_t(h + 1));
    x.push_back(a + (b - a) / 2);
  }
  return x;
}

TEST(KvRows, HalfConversionsAreLibTorchsBitForBit) {
  const std::vector<float> x = HardValues();
  for (float f : x) {
    const uint16_t ours = FloatToHalf(f);
    const c10::Half theirs(f);
    ASSERT_EQ(ours, theirs.x) << f;
    ASSERT_EQ(Bits(HalfToFloat(ours)), Bits(static_cast<float>(theirs))) << f;
  }
  for (uint32_t h = 0; h < 0x10000; ++h) {  // every half back to fp32, NaNs included
    c10::Half theirs;
    theirs.x = uint16_t(h);
    const float want = static_cast<float>(theirs);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(HalfToFloat(uint16_t(h))));
    } else {
      ASSERT_EQ(Bits(HalfToFloat(uint16_t(h))), Bits(want)) << h;
    }
  }
}

// StoreKvRow / LoadKvRows (vector loops where the CPU has them, scalar tails) store
// what a copy_ into a 16-bit tensor stores, for every length's tail.
TEST(KvRows, StoredRowsAreWhatACopyIntoA16BitTensorStores) {
  const std::vector<float> x = HardValues();
  const at::Tensor src = at::from_blob(const_cast<float*>(x.data()), {int64_t(x.size())});
  for (KvCacheType type : {KvCacheType::kF16, KvCacheType::kBF16, KvCacheType::kF32}) {
    SCOPED_TRACE(KvCacheTypeName(type));
    const at::ScalarType dtype = type == KvCacheType::kF16    ? at::kHalf
                                 : type == KvCacheType::kBF16 ? at::kBFloat16
                                                              : at::kFloat;
    const at::Tensor want = src.to(dtype);
    for (int64_t n : {int64_t(x.size()), int64_t(1), int64_t(15), int64_t(17), int64_t(33)}) {
      std::vector<char> stored(KvRowBytes(type, n));
      StoreKvRow(type, x.data(), n, stored.data());
      ASSERT_EQ(std::memcmp(stored.data(), want.data_ptr(), stored.size()), 0) << n;
      std::vector<float> back(n);
      LoadKvRows(type, stored.data(), n, back.data());
      const at::Tensor widened = want.narrow(0, 0, n).to(at::kFloat);
      ASSERT_EQ(std::memcmp(back.data(), widened.data_ptr<float>(), n * sizeof(float)), 0) << n;
    }
  }
}

AttentionOptions Options(KvCacheType type, bool reference, int heads, int kv_heads, int dim) {
  AttentionOptions o;
  o.module = "softmax";
  o.num_heads = heads;
  o.num_kv_heads = kv_heads;
  o.head_dim = dim;
  o.value_dim = dim;
  o.chunk_size = 16;
  o.kv_cache_type = type;
  o.reference_kernels = reference;
  return o;
}

std::unique_ptr<Attention> Make(KvCacheType type, bool reference, int heads = 4,
                                int kv_heads = 2, int dim = 32) {
  auto a = CreateAttention(Options(type, reference, heads, kv_heads, dim));
  EXPECT_TRUE(a.ok()) << a.status();
  return std::move(a).value();
}

// (H, T, D) -> the raw paths' row-major (T, H, D) floats.
std::vector<float> Rows(const at::Tensor& x) {
  at::Tensor r = x.transpose(0, 1).contiguous();
  return std::vector<float>(r.data_ptr<float>(), r.data_ptr<float>() + r.numel());
}

at::Tensor PrefillRaw(const Attention& attn, AttentionState& state, const at::Tensor& q,
                      const at::Tensor& k, const at::Tensor& v) {
  const int64_t t = q.size(1), h = q.size(0), dv = v.size(2);
  std::vector<float> rq = Rows(q), rk = Rows(k), rv = Rows(v);
  std::vector<float> out(t * h * dv), scratch(attn.PrefillScratchFloats(t));
  attn.PrefillRaw(state, t, rq.data(), rk.data(), rv.data(), out.data(), scratch.data());
  return at::from_blob(out.data(), {t, h, dv}).transpose(0, 1).clone();
}

at::Tensor StepRaw(const Attention& attn, std::vector<AttentionState*> states,
                   const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const int64_t b = q.size(0), h = q.size(1), dv = v.size(2);
  std::vector<float> out(b * h * dv), scratch(attn.StepScratchFloats(b));
  at::Tensor qc = q.clone(), kc = k.clone(), vc = v.contiguous();
  attn.StepRaw(states, qc.data_ptr<float>(), kc.data_ptr<float>(), vc.data_ptr<float>(),
               out.data(), scratch.data());
  return at::from_blob(out.data(), {b, h, dv}).clone();
}

bool SameTensors(const AttentionState& a, const AttentionState& b) {
  const NamedTensors ta = a.Tensors(), tb = b.Tensors();
  if (ta.size() != tb.size()) return false;
  for (size_t i = 0; i < ta.size(); ++i) {
    const at::Tensor& x = ta[i].second;
    const at::Tensor& y = tb[i].second;
    if (x.scalar_type() != y.scalar_type() || x.sizes() != y.sizes()) return false;
    const at::Tensor xc = x.contiguous(), yc = y.contiguous();
    if (std::memcmp(xc.data_ptr(), yc.data_ptr(), xc.nbytes()) != 0) return false;
  }
  return true;
}

class KvCacheTypes : public testing::TestWithParam<KvCacheType> {
 protected:
  void SetUp() override { at::set_num_threads(1); }
};

// A session prefilled in chunks (ragged, across the cache's block boundaries at 16, 48,
// 112, 240, 496) and then stepped, once through the ATen reference and once through the
// raw loops: the outputs agree to fp32 noise, and the caches hold the same bits after
// every operation (both round the same fp32 rows once).
TEST_P(KvCacheTypes, RawPathsStoreTheReferencesBitsAndAgreeWithIt) {
  const KvCacheType type = GetParam();
  // Head dim 32: the flash prefill kernel; 48 and 40: the sgemm one. Decode of 16-bit
  // rows: read in place for dims of multiples of 16 and groups of up to 8 heads (32, 48),
  // a tile at a time otherwise (dim 40; a group of 16).
  struct Shape {
    int heads, kv_heads, dim;
  };
  for (const Shape sh : {Shape{4, 2, 32}, Shape{4, 2, 48}, Shape{4, 2, 40}, Shape{16, 1, 32},
                         Shape{4, 1, 64}}) {
    const int dim = sh.dim;
    if (type == KvCacheType::kQ8_0 && dim % 32 != 0) continue;  // whole blocks only
    SCOPED_TRACE(testing::Message() << sh.heads << " heads on " << sh.kv_heads << " of " << dim);
    auto raw = Make(type, false, sh.heads, sh.kv_heads, dim);
    auto ref = Make(type, true, sh.heads, sh.kv_heads, dim);
    at::manual_seed(3);
    const int64_t t = 300;
    at::Tensor q = at::randn({sh.heads, t, dim}), k = at::randn({sh.kv_heads, t, dim});
    at::Tensor v = at::randn({sh.kv_heads, t, dim});
    auto rs = ref->NewState(), fs = raw->NewState();
    double worst = 0;
    int64_t at = 0;
    for (int64_t len : {5, 16, 40, 100, 39}) {
      at::Tensor qs = q.narrow(1, at, len), ks = k.narrow(1, at, len), vs = v.narrow(1, at, len);
      at::Tensor want = ref->Prefill(*rs, qs, ks, vs);
      worst = std::max(worst, (PrefillRaw(*raw, *fs, qs, ks, vs) - want).abs().max().item<double>());
      ASSERT_TRUE(SameTensors(*fs, *rs)) << "after prefill to " << at + len;
      at += len;
    }
    for (; at < t; ++at) {
      at::Tensor qi = q.select(1, at).unsqueeze(0).contiguous();
      at::Tensor ki = k.select(1, at).unsqueeze(0).contiguous();
      at::Tensor vi = v.select(1, at).unsqueeze(0).contiguous();
      at::Tensor want = ref->Step({rs.get()}, qi, ki, vi);
      worst = std::max(worst, (StepRaw(*raw, {fs.get()}, qi, ki, vi) - want).abs().max().item<double>());
      ASSERT_TRUE(SameTensors(*fs, *rs)) << "after step to " << at + 1;
    }
    EXPECT_EQ(fs->Position(), t);
    EXPECT_LE(worst, 1e-4);
  }
}

// A cache restored from its own tensors (what a snapshot holds) at every position around
// the block boundaries continues exactly as the cache that never stopped: the same
// outputs bit for bit, the same stored bits. A checkpoint taken before more appends
// still holds what it held.
TEST_P(KvCacheTypes, RestoredAndCheckpointedCachesContinueExactly) {
  const KvCacheType type = GetParam();
  auto attn = Make(type, false);
  at::manual_seed(9);
  const int64_t t = 280;
  at::Tensor q = at::randn({4, t, 32}), k = at::randn({2, t, 32}), v = at::randn({2, t, 32});
  for (int64_t cut : {0, 1, 15, 16, 17, 48, 111, 112, 240, 241, 270}) {
    SCOPED_TRACE(cut);
    auto a = attn->NewState();
    if (cut > 0) PrefillRaw(*attn, *a, q.narrow(1, 0, cut), k.narrow(1, 0, cut), v.narrow(1, 0, cut));
    auto restored = attn->RestoreState(cut, a->Tensors());
    auto checkpoint = a->Checkpoint();
    const NamedTensors before = a->Tensors();
    std::vector<at::Tensor> before_copies;
    for (const auto& [name, x] : before) before_copies.push_back(x.clone());
    for (int64_t i = cut; i < std::min(t, cut + 20); ++i) {
      at::Tensor qi = q.select(1, i).unsqueeze(0).contiguous();
      at::Tensor ki = k.select(1, i).unsqueeze(0).contiguous();
      at::Tensor vi = v.select(1, i).unsqueeze(0).contiguous();
      at::Tensor x = StepRaw(*attn, {a.get()}, qi, ki, vi);
      at::Tensor y = StepRaw(*attn, {restored.get()}, qi, ki, vi);
      ASSERT_TRUE(at::equal(x, y)) << "token " << i;
    }
    EXPECT_TRUE(SameTensors(*a, *restored));
    ASSERT_EQ(checkpoint->Position(), cut);
    const NamedTensors kept = checkpoint->Tensors();
    for (size_t i = 0; i < kept.size(); ++i) {
      EXPECT_TRUE(at::equal(kept[i].second, before_copies[i])) << kept[i].first;
    }
  }
}

// Bytes: 16-bit caches hold half of f32's per token; the blocks hold at most one block
// (256 tokens) beyond the length, and BytesAfter says what the next appends will hold.
TEST_P(KvCacheTypes, BytesAreTheStoredTypesAndGrowByBlocks) {
  const KvCacheType type = GetParam();
  auto attn = Make(type, false);
  const int64_t per_token = 2 * 2 * KvRowBytes(type, 32);
  EXPECT_EQ(KvBytesPerToken(attn->options()), per_token);
  auto s = attn->NewState();
  EXPECT_EQ(s->Bytes(), 0);
  EXPECT_EQ(s->BytesAfter(1), 16 * per_token);
  EXPECT_EQ(s->BytesAfter(17), 48 * per_token);
  at::Tensor q = at::randn({4, 1000, 32}), k = at::randn({2, 1000, 32}), v = at::randn({2, 1000, 32});
  PrefillRaw(*attn, *s, q, k, v);
  // Blocks of 16, 32, 64, 128, 256, 256, 256: 1008 tokens.
  EXPECT_EQ(s->Bytes(), 1008 * per_token);
  EXPECT_EQ(s->BytesAfter(8), 1008 * per_token);
  EXPECT_EQ(s->BytesAfter(9), 1264 * per_token);
  EXPECT_EQ(s->Clone()->Bytes(), 1000 * per_token);
  for (const auto& [name, x] : s->Tensors()) {
    EXPECT_EQ(int64_t(x.nbytes()), 2 * 1000 * KvRowBytes(type, 32)) << name;
    EXPECT_EQ(x.size(1), 1000) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Types, KvCacheTypes,
                         testing::Values(KvCacheType::kF32, KvCacheType::kF16,
                                         KvCacheType::kBF16, KvCacheType::kQ8_0),
                         [](const testing::TestParamInfo<KvCacheType>& info) {
                           return std::string(KvCacheTypeName(info.param));
                         });

// The 16-bit caches against f32 on the same inputs, over 2,000 tokens of unit-variance
// keys and values: each output row within the bound one rounding of every key and value
// allows. A value rounded to f16 moves by at most 2^-11 of itself, to bf16 by 2^-8; the
// output is a convex combination of values, so its error from rounded values is within
// that share of max |v|; rounded keys move each logit by at most |q| |k| 2^-11 (2^-8) /
// sqrt(d), and the weights by the exp of that spread (a factor 1 + 2x for small x).
// One layer (4 heads on 2 of 64) over 2,000 tokens of unit-variance q, k, v, and the f32
// cache's outputs on them: what the narrower types are held to.
struct AgainstF32 {
  static constexpr int64_t kDim = 64;
  AgainstF32() {
    at::set_num_threads(1);
    at::manual_seed(11);
    const int64_t t = 2000;
    q = at::randn({4, t, kDim});
    k = at::randn({2, t, kDim});
    v = at::randn({2, t, kDim});
    auto f32 = Make(KvCacheType::kF32, false, 4, 2, kDim);
    auto s32 = f32->NewState();
    want = PrefillRaw(*f32, *s32, q, k, v);
    vmax = v.abs().max().item<double>();
  }
  // max |output of a `type` cache - f32's|.
  double Error(KvCacheType type) const {
    auto attn = Make(type, false, 4, 2, kDim);
    auto s = attn->NewState();
    return (PrefillRaw(*attn, *s, q, k, v) - want).abs().max().item<double>();
  }
  at::Tensor q, k, v, want;
  double vmax = 0;
};

TEST(KvCacheTypeBound, SixteenBitOutputsStayWithinTheirRoundingOfF32) {
  const AgainstF32 in;
  const double qk = (in.q.norm(2, -1).max() * in.k.norm(2, -1).max()).item<double>() /
                    std::sqrt(AgainstF32::kDim);
  const double vmax = in.vmax;
  for (KvCacheType type : {KvCacheType::kF16, KvCacheType::kBF16}) {
    SCOPED_TRACE(KvCacheTypeName(type));
    const double unit = type == KvCacheType::kF16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
    const double err = in.Error(type);
    const double bound = vmax * unit + 2 * vmax * (2 * qk * unit);
    EXPECT_LE(err, bound);
    EXPECT_GT(err, 0.0);  // it does round: the comparison is not of f32 against itself
    std::printf("KV cache %s: max |output - f32's| %.3g (bound %.3g)\n", KvCacheTypeName(type),
                err, bound);
  }
}

// q8_0 rows are ggml's Q8_0 blocks: server/weights' dequantizer (ggml's
// dequantize_row_q8_0, tied to llama.cpp by tests/gguf) reads back exactly what LoadKvRows
// does; each block's scale is the half of max|x| / 127 and each value is within half a
// step of its input (ggml's quantize_row_q8_0_ref rounds x / d half away from zero, with
// d unrounded); an all-zero block stays zero; exact halves round away from zero.
TEST(KvRows, Q8_0RowsAreGgmlsBlocks) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  const int64_t n = 32 * 64;
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = normal(rng) * std::ldexp(1.0f, int(i / 32) % 24 - 12);
  std::fill(x.begin() + 64, x.begin() + 96, 0.0f);  // block 2: all zero
  // Block 3: max 127 (d = 1 exactly), then values at exact halves.
  for (int j = 0; j < 32; ++j) x[96 + j] = j == 0 ? 127.0f : float(j % 8) - 3.5f;
  std::vector<char> q(KvRowBytes(KvCacheType::kQ8_0, n));
  ASSERT_EQ(q.size(), size_t(n / 32 * 34));
  StoreKvRow(KvCacheType::kQ8_0, x.data(), n, q.data());
  std::vector<float> ours(n), ggml(n);
  LoadKvRows(KvCacheType::kQ8_0, q.data(), n, ours.data());
  weights::DequantizeRow(weights::WeightType::kQ8_0, reinterpret_cast<const uint8_t*>(q.data()),
                         ggml.data(), n);
  ASSERT_EQ(std::memcmp(ours.data(), ggml.data(), n * sizeof(float)), 0);
  for (int64_t b = 0; b < n / 32; ++b) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
    uint16_t scale;
    std::memcpy(&scale, q.data() + b * 34, 2);
    ASSERT_EQ(scale, c10::Half(amax / 127.0f).x) << "block " << b;
    const float d = HalfToFloat(scale);
    for (int j = 0; j < 32; ++j) {
      const int64_t i = b * 32 + j;
      // Half a step of the unrounded scale, plus the scale's own rounding (2^-11 of it)
      // times the level.
      ASSERT_LE(std::fabs(ours[i] - x[i]), amax / 254 + 127 * std::fabs(d - amax / 127) + 1e-30f)
          << i;
    }
  }
  for (int j = 0; j < 32; ++j) EXPECT_EQ(ours[64 + j], 0.0f);
  for (int j = 1; j < 32; ++j) {
    const float v = float(j % 8) - 3.5f;
    EXPECT_EQ(ours[96 + j], v < 0 ? std::floor(v) : std::ceil(v)) << v;
  }
}

// A q8_0 cache against f32 on the same inputs: within the bound its quantization allows.
// A value moves by at most half a step, max|v| / 254 (plus the scale's rounding, 2^-11 of
// a level); a key by as much, so a logit by at most |q| * max|k| / 254 * sqrt(d) / sqrt(d).
TEST(KvCacheTypeBound, Q8_0OutputsStayWithinTheirQuantizationOfF32) {
  const AgainstF32 in;
  const double step = 1.0 / 254 * (1 + std::ldexp(1.0, -10));
  const double shift =
      in.q.norm(2, -1).max().item<double>() * in.k.abs().max().item<double>() * step;
  const double err = in.Error(KvCacheType::kQ8_0);
  const double bound = in.vmax * step + 2 * in.vmax * (2 * shift);
  EXPECT_LE(err, bound);
  EXPECT_GT(err, 0.0);
  std::printf("KV cache q8_0: max |output - f32's| %.3g (bound %.3g)\n", err, bound);
}

// A head dim that is not a whole number of q8_0 blocks is refused, naming the remedy.
TEST(KvCacheTypeBound, Q8_0NeedsHeadDimsOfWholeBlocks) {
  auto bad = CreateAttention(Options(KvCacheType::kQ8_0, false, 4, 2, 48));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("--kv_cache_type=f16"), std::string::npos);
  AttentionOptions taylor = Options(KvCacheType::kQ8_0, false, 4, 2, 48);
  taylor.module = "taylor";
  EXPECT_TRUE(CreateAttention(taylor).ok());  // fixed states keep no KV rows
}

}  // namespace
}  // namespace attnserve::attention
