#include "server/attention/attention.h"

#include <ATen/ATen.h>

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
  if (!options_.qk_norm) {
    return {q * (1.0 / std::sqrt(double(options_.head_dim))), k};
  }
  // (..., D) -> (..., D), unit length; the temperature rides on the query.
  auto unit = [](const at::Tensor& x) {
    return x / x.norm(2, {-1}, /*keepdim=*/true).clamp_min(1e-6);
  };
  return {unit(q) * temperature_, unit(k)};
}

}  // namespace attnserve::attention
