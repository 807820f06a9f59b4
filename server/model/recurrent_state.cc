#include "server/model/recurrent_state.h"

#include <ATen/ATen.h>

#include <cstring>

namespace attnserve::model {
namespace {

int64_t Numel(const std::vector<int64_t>& shape) {
  if (shape.empty()) return 0;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace

attention::TensorShapes RecurrentState::Shapes(const ModelConfig& c, const std::string& mixer) {
  const int64_t taps = int64_t{c.conv_kernel} - 1;
  if (mixer == kMamba2Mixer) {
    // The conv runs over x, B and C: inner + 2 G N channels.
    const int64_t channels = int64_t{c.ssm_inner} + 2 * int64_t{c.ssm_groups} * c.ssm_state;
    return {{"conv", {channels, taps}},
            {"ssm", {c.ssm_heads, c.ssm_inner / c.ssm_heads, c.ssm_state}}};
  }
  if (mixer == kGatedDeltaNetMixer) {
    // The conv runs over q | k | v: 2 n_k d_k + n_v d_v channels; S per value head
    // (n_v, d_v, d_k), each head's S transposed (gdn_kernels.h).
    const int64_t dv = c.ssm_inner / c.ssm_heads;
    return {{"conv", {2 * int64_t{c.ssm_groups} * c.ssm_state + c.ssm_inner, taps}},
            {"ssm", {c.ssm_heads, dv, c.ssm_state}}};
  }
  return {{"conv", {c.dim, taps}}};  // the short conv over b * x: dim channels
}

int64_t RecurrentState::BytesOf(const ModelConfig& config, const std::string& mixer) {
  int64_t n = 0;
  for (const auto& [name, shape] : Shapes(config, mixer)) n += Numel(shape);
  return n * int64_t(sizeof(float));
}

RecurrentState::RecurrentState(const ModelConfig& config, const std::string& mixer) {
  const attention::TensorShapes shapes = Shapes(config, mixer);
  conv_shape_ = shapes[0].second;
  if (shapes.size() > 1) ssm_shape_ = shapes[1].second;
  conv_.assign(size_t(Numel(conv_shape_)), 0.0f);
  ssm_.assign(size_t(Numel(ssm_shape_)), 0.0f);
}

int64_t RecurrentState::Bytes() const {
  return int64_t((conv_.size() + ssm_.size()) * sizeof(float));
}

std::unique_ptr<attention::AttentionState> RecurrentState::Clone() const {
  return std::unique_ptr<RecurrentState>(new RecurrentState(*this));
}

attention::NamedTensors RecurrentState::Tensors() const {
  auto view = [](const std::vector<float>& v, const std::vector<int64_t>& shape) {
    return at::from_blob(const_cast<float*>(v.data()), shape, at::kFloat);
  };
  attention::NamedTensors out = {{"conv", view(conv_, conv_shape_)}};
  if (!ssm_shape_.empty()) out.emplace_back("ssm", view(ssm_, ssm_shape_));
  return out;
}

std::unique_ptr<RecurrentState> RecurrentState::Restore(const ModelConfig& config,
                                                        const std::string& mixer,
                                                        int64_t position,
                                                        const attention::NamedTensors& tensors) {
  auto state = std::make_unique<RecurrentState>(config, mixer);
  TORCH_CHECK(tensors.size() == (state->ssm_shape_.empty() ? 1u : 2u),
              "recurrent state: wrong number of tensors");
  for (const auto& [name, t] : tensors) {
    std::vector<float>& into = name == "conv" ? state->conv_ : state->ssm_;
    const std::vector<int64_t>& shape = name == "conv" ? state->conv_shape_ : state->ssm_shape_;
    TORCH_CHECK((name == "conv" || name == "ssm") && t.sizes().vec() == shape,
                "recurrent state: unexpected tensor ", name);
    at::Tensor c = t.to(at::kFloat).contiguous();
    if (c.numel() > 0) std::memcpy(into.data(), c.data_ptr<float>(), c.nbytes());
  }
  state->position_ = position;
  return state;
}

}  // namespace attnserve::model
