#include "server/model/step_kernels.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace attnserve::model {

namespace {
// From this many rows (prefill blocks) x W^T straight into y beats W x^T plus a transpose.
constexpr int64_t kDirectRows = 64;

// Outputs per packed block of a Bf16Matrix: four vectors of 16.
constexpr int64_t kBf16Block = 64;

uint16_t ToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);  // NaN stays NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest, ties to even
  return uint16_t(bits >> 16);
}

float FromBf16(uint16_t h) {
  const uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

#if defined(__x86_64__) && defined(__GNUC__)
#define ATTNSERVE_BF16_AVX512 1
// GCC 12's AVX-512 intrinsics trip its own -Wmaybe-uninitialized (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// 16 bf16 weights widened to fp32: the bf16 bits become the high half of each lane.
__attribute__((target("avx512f"))) inline __m512 Load16(const uint16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// R rows (R <= 4) of x against one block of 64 outputs: wb (in, 64) -> y[r][o0 .. o0+n).
template <int R>
__attribute__((target("avx512f"))) void Bf16Block(const float* x, int64_t in,
                                                  const uint16_t* wb, float* y, int64_t ldy,
                                                  int64_t n, float beta) {
  __m512 acc[R][4];
  for (auto& row : acc) {
    for (auto& a : row) a = _mm512_setzero_ps();
  }
  for (int64_t i = 0; i < in; ++i) {
    const uint16_t* wi = wb + i * kBf16Block;
    const __m512 w0 = Load16(wi), w1 = Load16(wi + 16), w2 = Load16(wi + 32),
                 w3 = Load16(wi + 48);
    for (int r = 0; r < R; ++r) {
      const __m512 xr = _mm512_set1_ps(x[r * in + i]);
      acc[r][0] = _mm512_fmadd_ps(w0, xr, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(w1, xr, acc[r][1]);
      acc[r][2] = _mm512_fmadd_ps(w2, xr, acc[r][2]);
      acc[r][3] = _mm512_fmadd_ps(w3, xr, acc[r][3]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < 4; ++j) {
      const int64_t left = n - 16 * j;
      if (left <= 0) break;
      const __mmask16 mask = left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1);
      float* yj = y + r * ldy + 16 * j;
      __m512 v = acc[r][j];
      if (beta != 0.0f) {
        v = _mm512_fmadd_ps(_mm512_set1_ps(beta), _mm512_maskz_loadu_ps(mask, yj), v);
      }
      _mm512_mask_storeu_ps(yj, mask, v);
    }
  }
}

__attribute__((target("avx512f"))) void LinearBf16Avx512(const float* x, int64_t rows,
                                                         const Bf16Matrix& w, float* y,
                                                         float beta) {
  const int64_t blocks = (w.out + kBf16Block - 1) / kBf16Block;
  for (int64_t b = 0; b < blocks; ++b) {
    const uint16_t* wb = w.packed.data() + b * w.in * kBf16Block;
    const int64_t o0 = b * kBf16Block, n = std::min(kBf16Block, w.out - o0);
    for (int64_t r0 = 0; r0 < rows; r0 += 4) {
      const float* xr = x + r0 * w.in;
      float* yr = y + r0 * w.out + o0;
      switch (std::min<int64_t>(4, rows - r0)) {
        case 1: Bf16Block<1>(xr, w.in, wb, yr, w.out, n, beta); break;
        case 2: Bf16Block<2>(xr, w.in, wb, yr, w.out, n, beta); break;
        case 3: Bf16Block<3>(xr, w.in, wb, yr, w.out, n, beta); break;
        default: Bf16Block<4>(xr, w.in, wb, yr, w.out, n, beta); break;
      }
    }
  }
}
#pragma GCC diagnostic pop
#endif

}  // namespace

Bf16Matrix PackBf16(const float* w, int64_t out, int64_t in) {
  Bf16Matrix m;
  m.in = in;
  m.out = out;
  const int64_t blocks = (out + kBf16Block - 1) / kBf16Block;
  m.packed.assign(blocks * in * kBf16Block, 0);
  for (int64_t o = 0; o < out; ++o) {
    uint16_t* dst = m.packed.data() + (o / kBf16Block) * in * kBf16Block + o % kBf16Block;
    for (int64_t i = 0; i < in; ++i) dst[i * kBf16Block] = ToBf16(w[o * in + i]);
  }
  return m;
}

void LinearBf16Reference(const float* x, int64_t rows, const Bf16Matrix& w, float* y,
                         float beta) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < w.out; ++o) {
      const uint16_t* col =
          w.packed.data() + (o / kBf16Block) * w.in * kBf16Block + o % kBf16Block;
      float sum = 0;
      for (int64_t i = 0; i < w.in; ++i) sum += x[r * w.in + i] * FromBf16(col[i * kBf16Block]);
      float& out = y[r * w.out + o];
      out = beta == 0.0f ? sum : beta * out + sum;
    }
  }
}

void LinearBf16(const float* x, int64_t rows, const Bf16Matrix& w, float* y, float beta) {
#if defined(ATTNSERVE_BF16_AVX512)
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  if (avx512) return LinearBf16Avx512(x, rows, w, y, beta);
#endif
  LinearBf16Reference(x, rows, w, y, beta);
}

void Linear(const float* x, int64_t rows, int64_t in, const float* w, int64_t out, float* y,
            float beta, float* scratch) {
  if (rows == 1) {
    cblas_sgemv(CblasRowMajor, CblasNoTrans, int(out), int(in), 1.0f, w, int(in), x, 1, beta,
                y, 1);
    return;
  }
  if (rows >= kDirectRows) {  // y = x W^T (+ beta y): the orientation that wins for many rows
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(rows), int(out), int(in), 1.0f, x,
                int(in), w, int(in), beta, y, int(out));
    return;
  }
  // scratch (out, rows) = W (out, in) x^T (in, rows)
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(out), int(rows), int(in), 1.0f, w,
              int(in), x, int(in), 0.0f, scratch, int(rows));
  for (int64_t r = 0; r < rows; ++r) {
    float* yr = y + r * out;
    if (beta == 0.0f) {
      for (int64_t o = 0; o < out; ++o) yr[o] = scratch[o * rows + r];
    } else {
      for (int64_t o = 0; o < out; ++o) yr[o] = beta * yr[o] + scratch[o * rows + r];
    }
  }
}

void RmsNormRows(const float* x, int64_t rows, int64_t dim, const float* g, float eps,
                 float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* o = out + r * dim;
    float ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += xr[i] * xr[i];
    const float scale = 1.0f / std::sqrt(ss / float(dim) + eps);
    for (int64_t i = 0; i < dim; ++i) o[i] = xr[i] * scale * g[i];
  }
}

void RopeRows(float* x, int64_t rows, int64_t heads, int64_t d, const float* cos,
              const float* sin, int64_t rot) {
  const int64_t half = (rot == 0 ? d : rot) / 2;
  for (int64_t r = 0; r < rows; ++r) {
    const float* c = cos + r * half;
    const float* s = sin + r * half;
    for (int64_t h = 0; h < heads; ++h) {
      float* x1 = x + (r * heads + h) * d;
      float* x2 = x1 + half;
      for (int64_t i = 0; i < half; ++i) {
        const float a = x1[i], b = x2[i];
        x1[i] = a * c[i] - b * s[i];
        x2[i] = a * s[i] + b * c[i];
      }
    }
  }
}

void UngroupHeads(const float* y, int64_t rows, int64_t key_heads, int64_t value_heads,
                  int64_t head_dim, float* out) {
  const int64_t r = value_heads / key_heads;
  for (int64_t row = 0; row < rows; ++row) {
    const float* in = y + row * value_heads * head_dim;
    float* to = out + row * value_heads * head_dim;
    for (int64_t h = 0; h < value_heads; ++h) {  // ours h = j n_k + g is the file's g r + j
      const int64_t file = (h % key_heads) * r + h / key_heads;
      std::copy_n(in + h * head_dim, head_dim, to + file * head_dim);
    }
  }
}

void SigmoidGate(float* x, const float* gate, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] /= 1.0f + std::exp(-gate[i]);
}

void SiluMul(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

}  // namespace attnserve::model
