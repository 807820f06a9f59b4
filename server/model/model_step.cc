// The fused decode step: Model::Run for one token per session, without LibTorch ops.
// Every buffer is the model's workspace (grown to the largest batch, then reused); the
// projections are direct BLAS calls over all B rows at once; norms, RoPE and SwiGLU are
// the loops of step_kernels.h; attention is the module's StepRaw (feature_kernels.h,
// kv_kernels.h).
// Model::Run is the reference; tests/model/model_test.cc (FusedStep) ties the two.
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "server/model/model.h"
#include "server/model/step_kernels.h"

namespace attnserve::model {
namespace {

// A weight's fp32 data; the fused step reads weights in place.
const float* Data(const at::Tensor& t) {
  TORCH_CHECK(t.scalar_type() == at::kFloat && t.is_contiguous(),
              "fused step: weights must be contiguous fp32");
  return t.data_ptr<float>();
}

float* Grow(std::vector<float>& buffer, int64_t n) {
  if (int64_t(buffer.size()) < n) buffer.resize(n);
  return buffer.data();
}

}  // namespace

void Model::ChooseStepPath() {
  const char* env = std::getenv("ATTNSERVE_REFERENCE_STEP");
  const bool force_reference = env != nullptr && env[0] != '\0' && std::strcmp(env, "0") != 0;
  fused_step_ = !force_reference && !layers_.empty();
  for (const Layer& l : layers_) fused_step_ = fused_step_ && l.attention->HasRawStep();
}

at::Tensor Model::StepFused(absl::Span<DecodeState* const> states,
                            absl::Span<const int32_t> tokens) const {
  const int64_t b = int64_t(states.size()), dim = config_.dim, hidden = config_.mlp_hidden;
  const int64_t vocab = config_.vocab_size, heads = config_.attention.num_heads;
  const int64_t d = config_.attention.head_dim, half = d / 2;
  const float eps = config_.norm_eps;
  std::lock_guard<std::mutex> lock(workspace_.mu);
  StepWorkspace& w = workspace_;
  float* x = Grow(w.x, b * dim);  // (B, dim) residual stream
  float* hn = Grow(w.hn, b * std::max(dim, hidden));
  float* q = Grow(w.q, b * dim);  // (B, H, D)
  float* k = Grow(w.k, b * dim);  // (B, H, D)
  float* v = Grow(w.v, b * dim);  // (B, H, Dv)
  float* o = Grow(w.o, b * dim);  // (B, H, Dv)
  float* gate = Grow(w.gate, b * hidden);
  float* up = Grow(w.up, b * hidden);
  float* cos = Grow(w.cos, b * half);  // (B, D/2)
  float* sin = Grow(w.sin, b * half);
  int64_t scratch_floats = 0;
  for (const Layer& l : layers_) {
    scratch_floats = std::max(scratch_floats, l.attention->StepScratchFloats(b));
  }
  float* scratch = Grow(w.scratch, scratch_floats);
  float* lin = Grow(w.linear, b * std::max({dim, hidden, vocab}));  // Linear's (out, B)

  // Embedding rows and RoPE angles (fp64 angles as in Run, then fp32 cos and sin).
  const float* embed = Data(embed_);
  const double* inv_freq = inv_freq_.data_ptr<double>();
  for (int64_t i = 0; i < b; ++i) {
    std::memcpy(x + i * dim, embed + int64_t(tokens[i]) * dim, dim * sizeof(float));
    const double pos = double(states[i]->position_);
    for (int64_t j = 0; j < half; ++j) {
      const double angle = pos * inv_freq[j];
      cos[i * half + j] = float(std::cos(angle));
      sin[i * half + j] = float(std::sin(angle));
    }
  }
  std::vector<attention::AttentionState*> layer_states(b);
  for (size_t li = 0; li < layers_.size(); ++li) {
    const Layer& l = layers_[li];
    RmsNormRows(x, b, dim, Data(l.attn_norm), eps, hn);
    Linear(hn, b, dim, Data(l.wq), dim, q, 0.0f, lin);
    Linear(hn, b, dim, Data(l.wk), dim, k, 0.0f, lin);
    Linear(hn, b, dim, Data(l.wv), dim, v, 0.0f, lin);
    RopeRows(q, b, heads, d, cos, sin);
    RopeRows(k, b, heads, d, cos, sin);
    for (int64_t i = 0; i < b; ++i) layer_states[i] = states[i]->layers_[li].get();
    l.attention->StepRaw(layer_states, q, k, v, o, scratch);  // (B, H, Dv) = (B, dim)
    Linear(o, b, dim, Data(l.wo), dim, x, /*beta=*/1.0f, lin);  // x += o W_o^T
    RmsNormRows(x, b, dim, Data(l.mlp_norm), eps, hn);
    Linear(hn, b, dim, Data(l.w_gate), hidden, gate, 0.0f, lin);
    Linear(hn, b, dim, Data(l.w_up), hidden, up, 0.0f, lin);
    SiluMul(gate, up, b * hidden);
    Linear(gate, b, hidden, Data(l.w_down), dim, x, /*beta=*/1.0f, lin);  // x += . W_down^T
  }
  RmsNormRows(x, b, dim, Data(norm_), eps, hn);
  at::Tensor logits = at::empty({b, vocab}, at::kFloat);  // (B, V)
  Linear(hn, b, dim, Data(head_), vocab, logits.data_ptr<float>(), 0.0f, lin);
  for (DecodeState* s : states) s->position_ += 1;
  return logits;
}

}  // namespace attnserve::model
