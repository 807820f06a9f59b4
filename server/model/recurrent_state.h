// One session's state in one recurrent layer (server/DESIGN.md §11): the causal
// convolution's last K - 1 inputs per channel, and for Mamba-2 the SSM state per head.
// Fixed size at any position: a hybrid's state grows only in its attention layers.
// Layouts are server/mixer's (conv_kernels.h, ssd_kernels.h, gdn_kernels.h): conv
// (channels, K - 1); ssm (H, P, N) for Mamba-2, (n_v, d_v, d_k) for Gated DeltaNet (each
// value head's S transposed, llama.cpp's layout); fp32. Snapshots hold them as the tensors
// "conv" and "ssm".
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "server/attention/attention.h"
#include "server/model/config.h"

namespace attnserve::model {

class RecurrentState final : public attention::AttentionState {
 public:
  // The state of layer kind `mixer` (kMamba2Mixer, kShortConvMixer or
  // kGatedDeltaNetMixer) of `config`, zeros.
  RecurrentState(const ModelConfig& config, const std::string& mixer);

  int64_t Position() const override { return position_; }
  int64_t Bytes() const override;
  std::unique_ptr<attention::AttentionState> Clone() const override;
  attention::NamedTensors Tensors() const override;

  float* conv() { return conv_.data(); }
  float* ssm() { return ssm_.data(); }
  void Advance(int64_t tokens) { position_ += tokens; }

  // The names and shapes Tensors() gives for this kind (any position).
  static attention::TensorShapes Shapes(const ModelConfig& config, const std::string& mixer);
  // Bytes of one session's state in a layer of this kind.
  static int64_t BytesOf(const ModelConfig& config, const std::string& mixer);
  // A state at `position` holding `tensors` (names and shapes checked by the caller
  // against Shapes: TORCH_CHECK otherwise), copied.
  static std::unique_ptr<RecurrentState> Restore(const ModelConfig& config,
                                                 const std::string& mixer, int64_t position,
                                                 const attention::NamedTensors& tensors);

 private:
  RecurrentState() = default;
  int64_t position_ = 0;
  std::vector<int64_t> conv_shape_, ssm_shape_;  // (C, K-1); (H, P, N), (n_v, d_v, d_k) or empty
  std::vector<float> conv_, ssm_;
};

}  // namespace attnserve::model
