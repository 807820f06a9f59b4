#include "server/attention/kv_kernels.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>

namespace attnserve::attention {

float KvHeadAttend(const float* q, const float* k, const float* v, int64_t len, int64_t d,
                   int64_t dv, float* scores, float* out) {
  cblas_sgemv(CblasRowMajor, CblasNoTrans, int(len), int(d), 1.0f, k, int(d), q, 1, 0.0f,
              scores, 1);  // s = K q
  const float top = *std::max_element(scores, scores + len);
  float sum = 0;
  for (int64_t j = 0; j < len; ++j) {
    scores[j] = std::exp(scores[j] - top);
    sum += scores[j];
  }
  cblas_sgemv(CblasRowMajor, CblasTrans, int(len), int(dv), 1.0f, v, int(dv), scores, 1, 0.0f,
              out, 1);  // out = V^T w
  return sum;
}

}  // namespace attnserve::attention
