// The attention-module interface: one causal multi-head (grouped-query) attention with
// three paths that must agree numerically (server/DESIGN.md §2):
//   Parallel  whole sequences at once (training and reference)
//   Prefill   append a prompt to one session's state, chunk by chunk
//   Step      one token for each of many sessions, each at its own position
// Inputs are already projected and rotated (RoPE); the module applies its own logit
// scaling (1/sqrt(d), qk_norm with a temperature, or none under unscaled_query).
// Shapes below: H query heads (options num_heads), Hkv key/value heads (num_kv_heads),
// G = H / Hkv; query head h reads KV head h / G. Created by CreateAttention().
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "server/attention/options.h"

namespace attnserve::attention {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;
// A tensor's name and shape, without the tensor (what a state at some position holds).
using TensorShapes = std::vector<std::pair<std::string, std::vector<int64_t>>>;

// One session's state for one layer. Owned by the caller; copying is explicit (Clone).
class AttentionState {
 public:
  virtual ~AttentionState() = default;
  // Tokens appended so far.
  virtual int64_t Position() const = 0;
  // Bytes of tensor memory this state holds now (KV caches: allocated capacity).
  virtual int64_t Bytes() const = 0;
  // Bytes it will hold once `extra` more tokens are appended (what the memory budget
  // charges before a step): fixed-state modules Bytes(); KV caches their capacity after
  // growing for them.
  virtual int64_t BytesAfter(int64_t extra) const { return Bytes(); }
  virtual std::unique_ptr<AttentionState> Clone() const = 0;
  // A state to go back to if what follows fails: equal to this one as long as nothing
  // but appends happen to this one meanwhile. Fixed states (updated in place) copy their
  // pool slot into a new one; KV caches share their tensors (appends write past the
  // length they remember).
  virtual std::unique_ptr<AttentionState> Checkpoint() const { return Clone(); }
  // The tensors a snapshot holds, in a fixed order, with the names and shapes that
  // Attention::StateShapes(Position()) lists: fixed-state modules their whole state,
  // KV caches only the used length of their caches (never the spare capacity). Views
  // into the state, valid until it changes; fp32, not necessarily contiguous. A state
  // kept in bf16 (options state_bf16) gives fp32 copies instead, which are exact.
  virtual NamedTensors Tensors() const = 0;
};

class Attention {
 public:
  explicit Attention(AttentionOptions options);
  virtual ~Attention() = default;
  Attention(const Attention&) = delete;
  Attention& operator=(const Attention&) = delete;

  // q: (B, H, T, D); k: (B, Hkv, T, D); v: (B, Hkv, T, Dv) -> (B, H, T, Dv). Token t
  // attends to 0..t.
  virtual at::Tensor Parallel(const at::Tensor& q, const at::Tensor& k,
                              const at::Tensor& v) const = 0;

  // A fresh, empty state for one session.
  virtual std::unique_ptr<AttentionState> NewState() const = 0;

  // Names and shapes of the tensors a state at `position` holds (AttentionState::Tensors):
  //   fixed state: s (Hkv, m, Dv), and z (Hkv, m) under the sum normaliser, at any
  //                position (one state per KV head, read by each query head of its group)
  //   KV cache:    k (Hkv, position, D), v (Hkv, position, Dv)
  virtual TensorShapes StateShapes(int64_t position) const = 0;
  // A state at `position` made of `tensors`, whose names and shapes the caller has
  // checked against StateShapes(position) (TORCH_CHECK fails otherwise). Fixed-state
  // modules copy them into their pool (converting to fp32, or under state_bf16 rounding
  // to nearest even bf16, exact for what Tensors() gave). KV caches take them:
  // contiguous fp32 tensors become the state as they are (no copy), others are converted.
  // So the caller must not use them afterwards.
  virtual std::unique_ptr<AttentionState> RestoreState(int64_t position,
                                                       const NamedTensors& tensors) const = 0;

  // One session: q: (H, T, D); k: (Hkv, T, D); v: (Hkv, T, Dv) -> (H, T, Dv). Appends
  // the T tokens to
  // `state` in chunks of options().chunk_size; token t attends to everything before it.
  virtual at::Tensor Prefill(AttentionState& state, const at::Tensor& q,
                             const at::Tensor& k, const at::Tensor& v) const = 0;

  // B sessions, one token each: q: (B, H, D); k: (B, Hkv, D); v: (B, Hkv, Dv) ->
  // (B, H, Dv).
  // states[b] is session b's state (distinct objects); each advances by one token.
  virtual at::Tensor Step(absl::Span<AttentionState* const> states, const at::Tensor& q,
                          const at::Tensor& k, const at::Tensor& v) const = 0;

  // Fused decode for Model's torch-free step, where HasRawStep() (every module unless
  // options().reference_kernels). Same contract as Step on raw fp32
  // row-major buffers: q: (B, H, D), k: (B, Hkv, D) rotated, scaled in place;
  // v: (B, Hkv, Dv) -> out: (B, H, Dv). scratch holds StepScratchFloats(B) floats. Ties to Step in
  // tests/model/model_test.cc (FusedStep).
  virtual bool HasRawStep() const { return false; }
  virtual int64_t StepScratchFloats(int64_t batch) const { return 0; }
  virtual void StepRaw(absl::Span<AttentionState* const> states, float* q, float* k,
                       const float* v, float* out, float* scratch) const {}

  // Fused prefill for Model's torch-free prefill, wherever HasRawStep(). Same contract as
  // Prefill for one session and t tokens, on raw fp32 row-major buffers: q: (t, H, D),
  // k: (t, Hkv, D) rotated, scaled in place; v: (t, Hkv, Dv) -> out: (t, H, Dv). scratch holds
  // PrefillScratchFloats(t) floats. Ties to Prefill in tests/model/model_step_test.cc
  // (FusedPrefill) and tests/attention/attention_test.cc.
  virtual int64_t PrefillScratchFloats(int64_t t) const { return 0; }
  virtual void PrefillRaw(AttentionState& state, int64_t t, float* q, float* k,
                          const float* v, float* out, float* scratch) const {}

  const AttentionOptions& options() const { return options_; }

  // Trained parameters of this module (the qk_norm temperature when learned), by name.
  // The tensors are the module's own: a trainer may set requires_grad and update them
  // in place; loading copies into them.
  NamedTensors NamedParameters() const;

 protected:
  // Scaled query and key such that the logit is q' . k:
  // (q / sqrt(d), k), (temperature * q / |q|, k / |k|) under qk_norm, or (q, k) under
  // unscaled_query. Shapes kept (q and k may have different head counts).
  std::pair<at::Tensor, at::Tensor> ScaleQK(const at::Tensor& q,
                                            const at::Tensor& k) const;
  // ScaleQK on raw fp32 rows, in place: q (q_rows, D), k (k_rows, D).
  void ScaleQKInPlace(float* q, int64_t q_rows, float* k, int64_t k_rows) const;
  // Query heads per KV head, G = num_heads / num_kv_heads.
  int64_t group() const { return options_.num_heads / options_.num_kv_heads; }

 private:
  AttentionOptions options_;
  at::Tensor temperature_;  // 0-dim; defined only under qk_norm
};

}  // namespace attnserve::attention
