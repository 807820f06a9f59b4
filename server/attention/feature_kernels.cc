#include "server/attention/feature_kernels.h"

#include <vector>

#include "server/attention/target_clones.h"

namespace attnserve::attention {

namespace {

// Features [start, start + len) are out[parent] * x[last .. last + len): the recursion
// of MonomialFeatures grouped into runs that share a parent and take consecutive x.
struct Run {
  int64_t start, len, parent, last;
};

std::vector<Run> Runs(const int64_t* parent, const int64_t* last, int64_t m) {
  std::vector<Run> runs;
  for (int64_t j = 1; j < m; ++j) {
    if (!runs.empty()) {
      Run& r = runs.back();
      if (parent[j] == r.parent && last[j] == r.last + r.len && j == r.start + r.len) {
        ++r.len;
        continue;
      }
    }
    runs.push_back({j, 1, parent[j], last[j]});
  }
  return runs;
}

}  // namespace

ATTNSERVE_CLONES
void MonomialFeatures(const float* x, int64_t rows, int64_t d, const int64_t* parent,
                      const int64_t* last, const float* weight, int64_t m, float* out) {
  const std::vector<Run> runs = Runs(parent, last, m);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    float* o = out + r * m;
    o[0] = 1.0f;
    for (const Run& run : runs) {  // parent < start: written by an earlier run
      const float a = o[run.parent];
      float* __restrict dst = o + run.start;
      const float* __restrict src = xr + run.last;
      for (int64_t t = 0; t < run.len; ++t) dst[t] = a * src[t];
    }
    if (weight != nullptr) {
      for (int64_t j = 0; j < m; ++j) o[j] *= weight[j];
    }
  }
}

ATTNSERVE_CLONES
void StateUpdateAndRead(float* s, float* z, const float* phi_q, const float* phi_k,
                        const float* v, const float* decay, int64_t heads, int64_t m,
                        int64_t dv, float* num, float* den) {
  std::vector<float> acc_buffer(dv);
  float* __restrict acc = acc_buffer.data();
  for (int64_t h = 0; h < heads; ++h) {
    const float* pk = phi_k + h * m;
    const float* pq = phi_q + h * m;
    const float* __restrict vh = v + h * dv;
    float* sh = s + h * m * dv;
    std::fill(acc, acc + dv, 0.0f);
    if (decay == nullptr) {
      for (int64_t i = 0; i < m; ++i) {
        float* __restrict row = sh + i * dv;
        const float k = pk[i], q = pq[i];
        for (int64_t c = 0; c < dv; ++c) {  // vectorised: dv contiguous floats
          row[c] += k * vh[c];
          acc[c] += q * row[c];
        }
      }
    } else {
      const float g = decay[h];
      for (int64_t i = 0; i < m; ++i) {
        float* __restrict row = sh + i * dv;
        const float k = pk[i], q = pq[i];
        for (int64_t c = 0; c < dv; ++c) {
          row[c] = g * row[c] + k * vh[c];
          acc[c] += q * row[c];
        }
      }
    }
    for (int64_t c = 0; c < dv; ++c) num[h * dv + c] = acc[c];
    if (z != nullptr) {
      float* zh = z + h * m;
      const float g = decay == nullptr ? 1.0f : decay[h];
      float d = 0;
      for (int64_t i = 0; i < m; ++i) {
        zh[i] = g * zh[i] + pk[i];
        d += pq[i] * zh[i];
      }
      den[h] = d;
    }
  }
}

void ScaleRows(float* x, int64_t rows, int64_t cols, int64_t ldx, const float* scale) {
  for (int64_t i = 0; i < rows; ++i) {
    float* __restrict row = x + i * ldx;
    const float f = scale[i];
    for (int64_t j = 0; j < cols; ++j) row[j] *= f;
  }
}

ATTNSERVE_CLONES
void TaylorPolynomial(float* s, int64_t n, int order) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = s[i];
    float r = 1.0f;
    for (int k = order; k >= 1; --k) r = 1.0f + r * x / float(k);
    s[i] = r;
  }
}

ATTNSERVE_CLONES
void RowSums(const float* a, int64_t rows, int64_t cols, int64_t lda, float* out) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* row = a + i * lda;
    float sum = 0;
    for (int64_t j = 0; j < cols; ++j) sum += row[j];
    out[i] = sum;
  }
}

ATTNSERVE_CLONES
void AddColumnSums(const float* x, int64_t rows, int64_t cols, int64_t ldx, float* z) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* __restrict row = x + i * ldx;
    float* __restrict zz = z;
    for (int64_t j = 0; j < cols; ++j) zz[j] += row[j];
  }
}

}  // namespace attnserve::attention
