// The activation quantization every PackedLinear path shares, and PackedLinearScalar: the
// fast path's arithmetic in plain loops. Per weight row, each group of 16 values is an
// exact integer dot of the weights' integer levels (the type's offset taken off: Q4_0
// q - 8, Q6_K q - 32; Q4_K / Q5_K keep q and pay their min apart) with the activation's
// int8 values, scaled by the activation block's d and the group's weight scale.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "server/weights/blocks.h"
#include "server/weights/half.h"
#include "server/weights/linear_internal.h"

namespace attnserve::weights {
namespace {

// A weight row as integer levels: v[in] (level - offset), s[in / 16] the scale of each group
// of 16, m[in / 32] the min of each block of 32 (dmin * m for Q4_K / Q5_K, else 0).
struct IntRow {
  std::vector<int8_t> v;
  std::vector<float> s, m;
};

void UnpackRow(WeightType type, const uint8_t* w, int64_t in, IntRow& row) {
  row.v.assign(size_t(in), 0);
  row.s.assign(size_t(in / 16), 0.0f);
  row.m.assign(size_t(in / 32), 0.0f);
  int8_t* v = row.v.data();
  float* s = row.s.data();
  float* m = row.m.data();
  switch (type) {
    case WeightType::kQ8_0:
      for (int64_t b = 0; b < in / 32; ++b, w += kQ8_0Bytes) {
        std::memcpy(v + 32 * b, w + kQ8_0Qs, 32);
        s[2 * b] = s[2 * b + 1] = LoadF16(w);
      }
      return;
    case WeightType::kQ4_0:
      for (int64_t b = 0; b < in / 32; ++b, w += kQ4_0Bytes) {
        for (int j = 0; j < 16; ++j) {
          v[32 * b + j] = int8_t((w[kQ4_0Qs + j] & 0xf) - 8);
          v[32 * b + j + 16] = int8_t((w[kQ4_0Qs + j] >> 4) - 8);
        }
        s[2 * b] = s[2 * b + 1] = LoadF16(w);
      }
      return;
    case WeightType::kQ4_K:
    case WeightType::kQ5_K: {
      const bool five = type == WeightType::kQ5_K;
      const int64_t bytes = five ? kQ5_KBytes : kQ4_KBytes;
      for (int64_t b = 0; b < in / kQK; ++b, w += bytes) {
        const float d = LoadF16(w), dmin = LoadF16(w + 2);
        const uint8_t* qs = w + (five ? kQ5_KQs : kQ4_KQs);
        for (int j = 0; j < 8; ++j) {
          uint8_t sc, mn;
          ScaleMinK4(j, w + kQ4_KScales, &sc, &mn);
          const int64_t g = b * 8 + j;
          s[2 * g] = s[2 * g + 1] = d * float(sc);
          m[g] = dmin * float(mn);
          for (int l = 0; l < 32; ++l) {
            const uint8_t byte = qs[32 * (j / 2) + l];
            int q = j % 2 == 0 ? byte & 0xf : byte >> 4;
            if (five && (w[kQ5_KQh + l] >> j) & 1) q += 16;
            v[32 * g + l] = int8_t(q);
          }
        }
      }
      return;
    }
    case WeightType::kQ6_K:
      for (int64_t b = 0; b < in / kQK; ++b, w += kQ6_KBytes) {
        const float d = LoadF16(w + kQ6_KD);
        for (int i = 0; i < 16; ++i) s[16 * b + i] = d * float(int8_t(w[kQ6_KScales + i]));
        for (int h = 0; h < 2; ++h) {
          const uint8_t* ql = w + kQ6_KQl + 64 * h;
          const uint8_t* qh = w + kQ6_KQh + 32 * h;
          int8_t* out = v + kQK * b + 128 * h;
          for (int l = 0; l < 32; ++l) {
            out[l] = int8_t(((ql[l] & 0xf) | ((qh[l] & 3) << 4)) - 32);
            out[l + 32] = int8_t(((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32);
            out[l + 64] = int8_t(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
            out[l + 96] = int8_t(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
          }
        }
      }
      return;
    default:
      return;
  }
}

void StoreY(float* y, float sum, float beta) { *y = beta == 0.0f ? sum : beta * *y + sum; }

}  // namespace

Activations QuantizeActivations(const float* x, int64_t rows, int64_t in,
                                LinearScratch& scratch, bool k4_order) {
  const int64_t q_size = rows * in, f_size = rows * (in / 4 + in / 32);
  if (scratch.q_size < q_size) {
    scratch.q.reset(new int8_t[size_t(q_size)]);
    scratch.q_size = q_size;
  }
  if (scratch.f_size < f_size) {
    scratch.f.reset(new float[size_t(f_size)]);
    scratch.f_size = f_size;
  }
  Activations a;
  a.in = in;
  a.x = x;
  a.q = scratch.q.get();
  a.dl = scratch.f.get();
  a.ds = scratch.f.get() + rows * (in / 4);
  a.k4_order = k4_order;
  int8_t* q = scratch.q.get();
  float* dl = scratch.f.get();
  float* ds = dl + rows * (in / 4);
  for (int64_t b = 0; b < rows * in / 32; ++b) {
    const float* xb = x + 32 * b;
    // Where block b's q and dl go: 1 <-> 2 and 5 <-> 6 within each group of 8 in k4_order.
    int64_t p = b;
    if (k4_order && (b % 4 == 1 || b % 4 == 2)) p = b % 4 == 1 ? b + 1 : b - 1;
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int sum = 0;
    for (int j = 0; j < 32; ++j) {
      const int v = int(std::nearbyint(xb[j] * id));
      q[32 * p + j] = int8_t(v);
      sum += v;
    }
    for (int l = 0; l < 8; ++l) dl[8 * p + l] = d;
    ds[b] = d * float(sum);
  }
  return a;
}

void PackedLinearScalar(const float* x, int64_t rows, const PackedMatrix& w, float* y,
                        float beta) {
  const int64_t in = w.in(), out = w.out();
  const WeightType type = w.type();
  if (type == WeightType::kF32 || type == WeightType::kF16 || type == WeightType::kBF16) {
    std::vector<float> wr(static_cast<size_t>(in));
    for (int64_t o = 0; o < out; ++o) {
      w.DequantizeRowTo(o, wr.data());
      for (int64_t r = 0; r < rows; ++r) {
        float sum = 0.0f;
        for (int64_t i = 0; i < in; ++i) sum += x[r * in + i] * wr[i];
        StoreY(&y[r * out + o], sum, beta);
      }
    }
    return;
  }
  LinearScratch scratch;
  const Activations a = QuantizeActivations(x, rows, in, scratch);
  IntRow row;
  for (int64_t o = 0; o < out; ++o) {
    UnpackRow(type, w.row(o), in, row);
    for (int64_t r = 0; r < rows; ++r) {
      const int8_t* q = a.q + r * in;
      float sum = 0.0f;
      for (int64_t g = 0; g < in / 16; ++g) {
        int32_t dot = 0;
        for (int i = 0; i < 16; ++i) dot += int32_t(row.v[16 * g + i]) * int32_t(q[16 * g + i]);
        sum += float(dot) * a.dl[r * (in / 4) + 4 * g] * row.s[g];
      }
      for (int64_t b = 0; b < in / 32; ++b) sum -= a.ds[r * (in / 32) + b] * row.m[b];
      StoreY(&y[r * out + o], sum, beta);
    }
  }
}

}  // namespace attnserve::weights
