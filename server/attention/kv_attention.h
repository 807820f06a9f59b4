// KV-cache attention with the exp kernel: softmax (sum normaliser, the reference) and
// softmax_norm (L2 norm of the output). The per-session state is the cache of keys and
// values of the KV heads, which grows by (D + Dv) * Hkv floats per token (grouped-query
// attention: each query head reads its group's KV head); capacity doubles so appending
// never copies the whole cache per token.
#pragma once

#include "server/attention/attention.h"
#include "server/attention/normaliser.h"

namespace attnserve::attention {

class KvAttention : public Attention {
 public:
  KvAttention(AttentionOptions options, Normaliser normaliser);

  at::Tensor Parallel(const at::Tensor& q, const at::Tensor& k,
                      const at::Tensor& v) const override;
  std::unique_ptr<AttentionState> NewState() const override;
  TensorShapes StateShapes(int64_t position) const override;
  std::unique_ptr<AttentionState> RestoreState(int64_t position,
                                               const NamedTensors& tensors) const override;
  at::Tensor Prefill(AttentionState& state, const at::Tensor& q, const at::Tensor& k,
                     const at::Tensor& v) const override;
  at::Tensor Step(absl::Span<AttentionState* const> states, const at::Tensor& q,
                  const at::Tensor& k, const at::Tensor& v) const override;
  bool HasRawStep() const override { return !options().reference_kernels; }
  void StepRaw(absl::Span<AttentionState* const> states, float* q, float* k, const float* v,
               float* out, float* scratch) const override;
  void PrefillRaw(AttentionState& state, int64_t t, float* q, float* k, const float* v,
                  float* out, float* scratch) const override;

 private:
  // scores: (..., T, S) logits; allowed: bool, broadcastable -> (..., T, Dv) given
  // values (..., S, Dv). Masked-out scores get weight zero.
  at::Tensor Attend(const at::Tensor& scores, const at::Tensor& allowed,
                    const at::Tensor& values) const;

  Normaliser normaliser_;
};

}  // namespace attnserve::attention
