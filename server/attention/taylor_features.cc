#include "server/attention/taylor_features.h"

#include <ATen/ATen.h>

#include <cmath>

#include "server/attention/feature_kernels.h"

namespace attnserve::attention {

at::Tensor TaylorKernel(const at::Tensor& s, int order) {
  // Horner: T_N(s) = 1 + s (1 + s/2 (1 + s/3 (... (1 + s/N)))).
  at::Tensor r = at::ones_like(s);
  for (int n = order; n >= 1; --n) r = 1 + r * s / double(n);
  return r;
}

TaylorFeatureMap::TaylorFeatureMap(int dim, int order) : dim_(dim), order_(order) {
  // Degree 0: the empty monomial. Track, per monomial of the current degree, its last
  // index, the length of its run of that index, and its weight 1/prod a_i!.
  std::vector<int64_t> prev_last = {0};
  std::vector<int64_t> prev_run = {0};
  std::vector<double> prev_weight = {1.0};
  std::vector<float> weights = {1.0f};
  global_parent_ = {0};
  global_last_ = {0};
  int64_t prev_offset = 0;  // where degree n-1 starts in the full feature vector
  for (int n = 1; n <= order; ++n) {
    std::vector<int64_t> parent, last, run;
    std::vector<double> weight;
    for (size_t p = 0; p < prev_last.size(); ++p) {
      const int64_t start = n == 1 ? 0 : prev_last[p];
      for (int64_t j = start; j < dim; ++j) {
        const int64_t r = (n > 1 && j == prev_last[p]) ? prev_run[p] + 1 : 1;
        parent.push_back(int64_t(p));
        last.push_back(j);
        run.push_back(r);
        weight.push_back(prev_weight[p] / double(r));  // a_j! grows by the factor r
      }
    }
    parent_.push_back(at::tensor(parent, at::kLong));
    last_.push_back(at::tensor(last, at::kLong));
    for (size_t j = 0; j < parent.size(); ++j) {
      global_parent_.push_back(prev_offset + parent[j]);
      global_last_.push_back(last[j]);
    }
    prev_offset = int64_t(weights.size());  // degree n starts here
    for (double w : weight) weights.push_back(float(w));
    prev_last = std::move(last);
    prev_run = std::move(run);
    prev_weight = std::move(weight);
  }
  size_ = int64_t(weights.size());
  weights_ = at::tensor(weights, at::kFloat);
}

namespace {

bool UseFusedLoop(const at::Tensor& x) {
  return x.scalar_type() == at::kFloat && !x.requires_grad() && x.device().is_cpu();
}

}  // namespace

at::Tensor TaylorFeatureMap::Keys(const at::Tensor& x) const {
  if (!UseFusedLoop(x)) return KeysReference(x);
  return Features(x, nullptr);
}

at::Tensor TaylorFeatureMap::Queries(const at::Tensor& x) const {
  if (!UseFusedLoop(x)) return QueriesReference(x);
  return Features(x, weights_.data_ptr<float>());
}

at::Tensor TaylorFeatureMap::Features(const at::Tensor& x, const float* weight) const {
  TORCH_CHECK(x.size(-1) == dim_, "TaylorFeatureMap: expected last dim ", dim_, ", got ",
              x.size(-1));
  at::Tensor in = x.contiguous();
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = size_;
  at::Tensor out = at::empty(shape, x.options());  // (..., m)
  MonomialFeatures(in.data_ptr<float>(), in.numel() / dim_, dim_, global_parent_.data(),
                   global_last_.data(), weight, size_, out.data_ptr<float>());
  return out;
}

void TaylorFeatureMap::KeysInto(const float* x, int64_t rows, float* out) const {
  MonomialFeatures(x, rows, dim_, global_parent_.data(), global_last_.data(), nullptr, size_,
                   out);
}

void TaylorFeatureMap::QueriesInto(const float* x, int64_t rows, float* out) const {
  MonomialFeatures(x, rows, dim_, global_parent_.data(), global_last_.data(),
                   weights_.data_ptr<float>(), size_, out);
}

at::Tensor TaylorFeatureMap::KeysReference(const at::Tensor& x) const {
  TORCH_CHECK(x.size(-1) == dim_, "TaylorFeatureMap: expected last dim ", dim_, ", got ",
              x.size(-1));
  std::vector<at::Tensor> degrees;
  degrees.reserve(order_ + 1);
  at::Tensor current = at::ones_like(x.narrow(-1, 0, 1));  // (..., 1)
  degrees.push_back(current);
  for (int n = 1; n <= order_; ++n) {
    // (..., C(d+n-2, n-1)) -> (..., C(d+n-1, n))
    current = current.index_select(-1, parent_[n - 1]) * x.index_select(-1, last_[n - 1]);
    degrees.push_back(current);
  }
  return at::cat(degrees, -1);
}

at::Tensor TaylorFeatureMap::QueriesReference(const at::Tensor& x) const {
  return KeysReference(x) * weights_.to(x.scalar_type());
}

at::Tensor TensorPowerFeatures(const at::Tensor& x, int order) {
  std::vector<at::Tensor> parts;
  at::Tensor power = at::ones_like(x.narrow(-1, 0, 1));  // (..., 1)
  double factorial = 1;
  parts.push_back(power);
  for (int n = 1; n <= order; ++n) {
    factorial *= n;
    // (..., D^(n-1)) outer (..., D) -> (..., D^n)
    power = (power.unsqueeze(-1) * x.unsqueeze(-2)).flatten(-2);
    parts.push_back(power / std::sqrt(factorial));
  }
  return at::cat(parts, -1);
}

}  // namespace attnserve::attention
