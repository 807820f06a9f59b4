#include "server/attention/attention.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

namespace attnserve::attention {

Attention::Attention(AttentionOptions options) : options_(std::move(options)) {
  if (options_.qk_norm) {
    const float t = options_.qk_temperature > 0 ? options_.qk_temperature
                                                : std::sqrt(float(options_.head_dim));
    temperature_ = at::full({}, t, at::kFloat);
  }
}

NamedTensors Attention::NamedParameters() const {
  if (options_.qk_norm && options_.learn_temperature) return {{"temperature", temperature_}};
  return {};
}

std::pair<at::Tensor, at::Tensor> Attention::ScaleQK(const at::Tensor& q,
                                                     const at::Tensor& k) const {
  if (options_.unscaled_query) return {q, k};
  if (!options_.qk_norm) {
    return {q * (1.0 / std::sqrt(double(options_.head_dim))), k};
  }
  // (..., D) -> (..., D), unit length; the temperature rides on the query.
  auto unit = [](const at::Tensor& x) {
    return x / x.norm(2, {-1}, /*keepdim=*/true).clamp_min(1e-6);
  };
  return {unit(q) * temperature_, unit(k)};
}

void Attention::ScaleQKInPlace(float* q, int64_t q_rows, float* k, int64_t k_rows) const {
  const int64_t d = options_.head_dim;
  if (options_.unscaled_query) return;
  if (!options_.qk_norm) {
    const float scale = float(1.0 / std::sqrt(double(d)));
    for (int64_t i = 0; i < q_rows * d; ++i) q[i] *= scale;
    return;
  }
  const float t = temperature_.item<float>();
  auto unit = [d](float* x, float gain) {
    float ss = 0;
    for (int64_t j = 0; j < d; ++j) ss += x[j] * x[j];
    const float s = gain / std::max(std::sqrt(ss), 1e-6f);
    for (int64_t j = 0; j < d; ++j) x[j] *= s;
  };
  for (int64_t r = 0; r < q_rows; ++r) unit(q + r * d, t);
  for (int64_t r = 0; r < k_rows; ++r) unit(k + r * d, 1.0f);
}

}  // namespace attnserve::attention
