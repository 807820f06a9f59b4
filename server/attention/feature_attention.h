// Fixed-state attention through a feature map phi with K(q', k) = phi_q(q') . phi_k(k):
// taylor, taylor_norm and linear. The per-session state is, per KV head,
//   S = sum_j phi_k(k_j) v_j^T   (Hkv, m, Dv)
//   z = sum_j phi_k(k_j)         (Hkv, m)        (sum normaliser only)
// whose size does not depend on the context length. S and z depend only on k and v, so
// under grouped-query attention each is kept once per KV head and read by the G query
// heads of its group (never repeated per query head). With a decay (options
// decay_horizon) the sums weigh token j by gamma_h^(t-j): S <- gamma_h S + phi_k v^T,
// gamma per KV head. Under options state_bf16, S and z are stored in bf16 and every path
// computes in fp32 between reading and storing them (bf16.h).
#pragma once

#include <memory>

#include "server/attention/attention.h"
#include "server/attention/normaliser.h"
#include "server/attention/state_pool.h"

namespace attnserve::attention {

// A kernel and its feature maps. Immutable; shared across threads.
class FeatureMap {
 public:
  virtual ~FeatureMap() = default;
  // Features per head, m.
  virtual int64_t size() const = 0;
  // (..., D) -> (..., m), for scaled queries and for keys.
  virtual at::Tensor Queries(const at::Tensor& q) const = 0;
  virtual at::Tensor Keys(const at::Tensor& k) const = 0;
  // Kernel matrix computed directly (the reference form):
  // q: (..., T, D), k: (..., S, D) -> (..., T, S) with entries K(q_t, k_s).
  virtual at::Tensor Kernel(const at::Tensor& q, const at::Tensor& k) const = 0;
  // Queries and Keys on raw fp32 rows (fused decode step): x (rows, D) -> out (rows, m).
  virtual void QueriesInto(const float* x, int64_t rows, float* out) const = 0;
  virtual void KeysInto(const float* x, int64_t rows, float* out) const = 0;
  // Whether K(q', k) is a function of q'.k alone (Taylor), so KernelFromDots applies;
  // otherwise (elu) the raw prefill forms phi_q . phi_k.
  virtual bool KernelIsOfDots() const { return false; }
  // In place for n values: s[i] = q'.k -> K(q', k). Only where KernelIsOfDots().
  virtual void KernelFromDots(float* s, int64_t n) const {}
};

// T_N(q . k) through packed monomials (see taylor_features.h).
std::unique_ptr<FeatureMap> MakeTaylorFeatureMap(int dim, int order);
// elu(x) + 1 on queries and keys (linear attention).
std::unique_ptr<FeatureMap> MakeEluFeatureMap(int dim);

class FeatureAttention : public Attention {
 public:
  FeatureAttention(AttentionOptions options, std::unique_ptr<FeatureMap> features,
                   Normaliser normaliser);

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
  int64_t StepScratchFloats(int64_t batch) const override;
  void StepRaw(absl::Span<AttentionState* const> states, float* q, float* k, const float* v,
               float* out, float* scratch) const override;
  int64_t PrefillScratchFloats(int64_t t) const override;
  void PrefillRaw(AttentionState& state, int64_t t, float* q, float* k, const float* v,
                  float* out, float* scratch) const override;

  // The slots this module's states live in, one per state (for tests and metrics).
  const StatePool& pool() const { return *pool_; }

 private:
  // A state at `position` in a new slot of pool_, contents unspecified.
  std::unique_ptr<class FeatureState> StateInNewSlot(int64_t position) const;

  // One chunk of one session: q (scaled): (H, C, D); k: (Hkv, C, D); v: (Hkv, C, Dv)
  // -> (H, C, Dv).
  at::Tensor PrefillChunk(class FeatureState& state, const at::Tensor& q,
                          const at::Tensor& k, const at::Tensor& v) const;

  // Step through the fused loop of feature_kernels.h: phi_q (B, H, m), phi_k (B, Hkv, m)
  // and v (B, Hkv, Dv) -> (B, H, Dv).
  at::Tensor StepFused(absl::Span<AttentionState* const> states, const at::Tensor& phi_q,
                       const at::Tensor& phi_k, const at::Tensor& v) const;

  // One token into one session's state, fp32 or bf16 (StateUpdateAndRead or its bf16
  // form): phi_q (H, m), phi_k (Hkv, m), v (Hkv, Dv) -> num (H, Dv), den (H).
  void UpdateAndRead(class FeatureState& st, const float* phi_q, const float* phi_k,
                     const float* v, float* num, float* den) const;

  // (Hkv, T, T) weights of key j for query i: gamma_h^(i-j) for j <= i, else 0 (the
  // causal mask; all ones on and below the diagonal without decay). Per KV head.
  at::Tensor DecayMask(int64_t t, const at::TensorOptions& options) const;
  // (Hkv, T, 1): gamma_h^(offset + i) for i in [0, T) (ones without decay).
  at::Tensor DecayPowers(int64_t t, int64_t offset, const at::TensorOptions& options) const;

  std::unique_ptr<FeatureMap> features_;
  Normaliser normaliser_;
  // decays_ for the raw kernels: null without decay.
  const float* Decays() const { return decays_.empty() ? nullptr : decays_.data(); }

  // Per-KV-head decay factors (options HeadDecays); empty: no decay.
  std::vector<float> decays_;
  // Every state of this module: slots of Hkv*m*Dv elements for s, then Hkv*m for z under
  // the sum normaliser, fp32 or bf16 (options state_bf16). Shared with the slots, which
  // may outlive the module.
  std::shared_ptr<StatePool> pool_;
};

}  // namespace attnserve::attention
