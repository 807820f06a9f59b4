#include "server/model/step_kernels.h"

#include <cblas.h>

#include <cmath>

namespace attnserve::model {

namespace {
// From this many rows (prefill blocks) x W^T straight into y beats W x^T plus a transpose.
constexpr int64_t kDirectRows = 64;
}  // namespace

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
              const float* sin) {
  const int64_t half = d / 2;
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

void SiluMul(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

}  // namespace attnserve::model
