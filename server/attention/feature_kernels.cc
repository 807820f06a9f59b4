#include "server/attention/feature_kernels.h"

#include <vector>

namespace attnserve::attention {

void MonomialFeatures(const float* x, int64_t rows, int64_t d, const int64_t* parent,
                      const int64_t* last, const float* weight, int64_t m, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    float* o = out + r * m;
    o[0] = 1.0f;
    for (int64_t j = 1; j < m; ++j) o[j] = o[parent[j]] * xr[last[j]];
    if (weight != nullptr) {
      for (int64_t j = 0; j < m; ++j) o[j] *= weight[j];
    }
  }
}

void StateUpdateAndRead(float* s, float* z, const float* phi_q, const float* phi_k,
                        const float* v, int64_t heads, int64_t m, int64_t dv, float* num,
                        float* den) {
  std::vector<float> acc(dv);
  for (int64_t h = 0; h < heads; ++h) {
    const float* pk = phi_k + h * m;
    const float* pq = phi_q + h * m;
    const float* vh = v + h * dv;
    float* sh = s + h * m * dv;
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t i = 0; i < m; ++i) {
      float* row = sh + i * dv;
      const float k = pk[i], q = pq[i];
      for (int64_t c = 0; c < dv; ++c) {  // vectorised: dv contiguous floats
        row[c] += k * vh[c];
        acc[c] += q * row[c];
      }
    }
    for (int64_t c = 0; c < dv; ++c) num[h * dv + c] = acc[c];
    if (z != nullptr) {
      float* zh = z + h * m;
      float d = 0;
      for (int64_t i = 0; i < m; ++i) {
        zh[i] += pk[i];
        d += pq[i] * zh[i];
      }
      den[h] = d;
    }
  }
}

}  // namespace attnserve::attention
