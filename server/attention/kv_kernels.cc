#include "server/attention/kv_kernels.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "server/attention/target_clones.h"

namespace attnserve::attention {

ATTNSERVE_CLONES
float ExpShifted(float* x, int64_t n, float shift) {
  // exp(y) = 2^k exp(r), k = round(y / ln 2), r = y - k ln 2 in [-ln2/2, ln2/2] (ln 2 in
  // two parts for an exact product); exp(r) by the degree-6 minimax polynomial of Cephes'
  // expf; 2^k built in the exponent bits. The clamp keeps 2^k a normal float (this file
  // is built with -fno-trapping-math so the select vectorises).
  for (int64_t i = 0; i < n; ++i) {
    float y = x[i] - shift;
    y = y > -87.0f ? y : -87.0f;
    const float kf = (y * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round
    float r = y - kf * 0.693359375f;
    r = r + kf * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    const int32_t bits = (int32_t(kf) + 127) << 23;
    float scale;
    std::memcpy(&scale, &bits, sizeof scale);
    x[i] = p * scale;
  }
  // The sum in 16 lanes (vectorised), then across them.
  float lanes[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int j = 0; j < 16; ++j) lanes[j] += x[i + j];
  }
  float sum = 0;
  for (; i < n; ++i) sum += x[i];
  for (float lane : lanes) sum += lane;
  return sum;
}

namespace {

float RowMaxScalar(const float* x, int64_t n) {
  float top = x[0];
  for (int64_t i = 1; i < n; ++i) top = x[i] > top ? x[i] : top;
  return top;
}

#if defined(__x86_64__) && defined(__GNUC__)
// GCC does not vectorise a float max reduction without -ffast-math, so AVX2 by hand.
__attribute__((target("avx2"))) float RowMaxAvx2(const float* x, int64_t n) {
  __m256 a = _mm256_set1_ps(x[0]), b = a;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a = _mm256_max_ps(a, _mm256_loadu_ps(x + i));
    b = _mm256_max_ps(b, _mm256_loadu_ps(x + i + 8));
  }
  float lanes[8];
  _mm256_storeu_ps(lanes, _mm256_max_ps(a, b));
  float top = RowMaxScalar(lanes, 8);
  for (; i < n; ++i) top = x[i] > top ? x[i] : top;
  return top;
}
#endif

// max of x[0..n), n >= 1.
float RowMax(const float* x, int64_t n) {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) return RowMaxAvx2(x, n);
#endif
  return RowMaxScalar(x, n);
}

}  // namespace

float KvHeadAttend(const float* q, const float* k, const float* v, int64_t len, int64_t d,
                   int64_t dv, float* scores, float* out) {
  cblas_sgemv(CblasRowMajor, CblasNoTrans, int(len), int(d), 1.0f, k, int(d), q, 1, 0.0f,
              scores, 1);  // s = K q
  const float top = RowMax(scores, len);
  const float sum = ExpShifted(scores, len, top);
  cblas_sgemv(CblasRowMajor, CblasTrans, int(len), int(dv), 1.0f, v, int(dv), scores, 1, 0.0f,
              out, 1);  // out = V^T w
  return sum;
}

void KvBlockAttend(const float* q, int64_t ldq, const float* k, const float* v,
                   int64_t first, int64_t rows, int64_t d, int64_t dv, float* scores,
                   float* out, int64_t ldo, float* sums) {
  const int64_t keys = first + rows;
  // scores (rows, keys) = Q K^T
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(rows), int(keys), int(d), 1.0f, q,
              int(ldq), k, int(d), 0.0f, scores, int(keys));
  for (int64_t i = 0; i < rows; ++i) {
    float* row = scores + i * keys;
    const int64_t seen = first + i + 1;  // keys 0..first + i
    const float top = RowMax(row, seen);
    sums[i] = ExpShifted(row, seen, top);
    std::fill(row + seen, row + keys, 0.0f);
  }
  // out (rows, dv) = W V
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(rows), int(dv), int(keys), 1.0f,
              scores, int(keys), v, int(dv), 0.0f, out, int(ldo));
}

}  // namespace attnserve::attention
