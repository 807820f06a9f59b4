// The fused decode step and prefill: Model::Run for one token per session, or a prompt of
// one session, without LibTorch ops.
// Every buffer is the model's workspace (grown to the largest batch, then reused); the
// projections are direct BLAS calls over all B rows at once; norms, RoPE and SwiGLU are
// the loops of step_kernels.h; attention is the module's StepRaw or PrefillRaw
// (feature_kernels.h, kv_kernels.h).
// Model::Run is the reference; tests/model/model_step_test.cc (FusedStep, FusedPrefill)
// ties the two.
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

at::Tensor Model::RunRowsFused(absl::Span<const int32_t> tokens, const int64_t* positions,
                               int64_t scratch_floats, const RawAttendFn& attend) const {
  const int64_t b = int64_t(tokens.size()), dim = config_.dim, hidden = config_.mlp_hidden;
  const int64_t vocab = config_.vocab_size, heads = config_.attention.num_heads;
  const int64_t kv_heads = config_.attention.num_kv_heads;
  const int64_t d = config_.attention.head_dim, half = d / 2;
  const int64_t q_width = heads * d, kv_width = kv_heads * d;  // value_dim == head_dim
  const float eps = config_.norm_eps;
  StepWorkspace& w = workspace_;
  float* x = Grow(w.x, b * dim);  // (B, dim) residual stream
  float* hn = Grow(w.hn, b * std::max(dim, hidden));
  float* q = Grow(w.q, b * q_width);   // (B, H, D)
  float* k = Grow(w.k, b * kv_width);  // (B, Hkv, D)
  float* v = Grow(w.v, b * kv_width);  // (B, Hkv, Dv)
  float* o = Grow(w.o, b * q_width);   // (B, H, Dv)
  float* gate = Grow(w.gate, b * hidden);
  float* up = Grow(w.up, b * hidden);
  float* cos = Grow(w.cos, b * half);  // (B, D/2)
  float* sin = Grow(w.sin, b * half);
  float* scratch = Grow(w.scratch, scratch_floats);
  float* lin = Grow(w.linear, b * std::max({dim, hidden, vocab, q_width}));  // Linear's (out, B)

  // Embedding rows (dequantized when packed) and RoPE angles (fp64 angles as in Run, then
  // fp32 cos and sin).
  const float* embed = embed_packed_ == nullptr ? Data(embed_) : nullptr;
  const double* inv_freq = inv_freq_.data_ptr<double>();
  for (int64_t i = 0; i < b; ++i) {
    if (embed != nullptr) {
      std::memcpy(x + i * dim, embed + int64_t(tokens[i]) * dim, dim * sizeof(float));
    } else {
      embed_packed_->DequantizeRowTo(tokens[i], x + i * dim);
    }
    const double pos = double(positions[i]);
    for (int64_t j = 0; j < half; ++j) {
      const double angle = pos * inv_freq[j];
      cos[i * half + j] = float(std::cos(angle));
      sin[i * half + j] = float(std::sin(angle));
    }
  }
  // y (B, out) = in (B, n) W^T (+ beta y): from the packed matrix when the weight is kept
  // packed (weights::PackedLinear), from W's bf16 copy where UseBf16Weights made one and
  // the step is small enough, else fp32.
  const bool bf16 = bf16_ != nullptr && b <= kBf16MaxRows;
  auto linear = [&](const float* in, int64_t n, const at::Tensor& dense, const Packed& packed,
                    const Bf16Matrix* w16, int64_t out, float* y, float beta) {
    if (packed != nullptr) {
      weights::PackedLinear(in, b, *packed, y, beta, w.packed);
    } else if (bf16 && w16 != nullptr && !w16->packed.empty()) {
      LinearBf16(in, b, *w16, y, beta);
    } else {
      Linear(in, b, n, Data(dense), out, y, beta, lin);
    }
  };
  // rows (B, width) += bias (width), row by row.
  auto add_bias = [&](float* rows, const at::Tensor& bias, int64_t width) {
    const float* bv = Data(bias);
    for (int64_t i = 0; i < b; ++i) {
      for (int64_t j = 0; j < width; ++j) rows[i * width + j] += bv[j];
    }
  };
  for (size_t li = 0; li < layers_.size(); ++li) {
    const Layer& l = layers_[li];
    const Bf16Matrix* w16 = bf16 ? bf16_->layers[li].data() : nullptr;  // wq .. w_down
    auto lin = [&](const float* in, int64_t n, Matrix m, int64_t out, float* y, float beta) {
      linear(in, n, l.dense(m), l.packed[m], w16 == nullptr ? nullptr : w16 + m, out, y, beta);
    };
    RmsNormRows(x, b, dim, Data(l.attn_norm), eps, hn);
    lin(hn, dim, kWq, q_width, q, 0.0f);   // (B, H*D)
    lin(hn, dim, kWk, kv_width, k, 0.0f);  // (B, Hkv*D)
    lin(hn, dim, kWv, kv_width, v, 0.0f);  // (B, Hkv*Dv)
    if (config_.attention_bias) {
      add_bias(q, l.bq, q_width);
      add_bias(k, l.bk, kv_width);
      add_bias(v, l.bv, kv_width);
    }
    if (config_.qk_head_norm) {  // each head's D values: (B * H, D), (B * Hkv, D)
      RmsNormRows(q, b * heads, d, Data(l.q_norm), eps, q);
      RmsNormRows(k, b * kv_heads, d, Data(l.k_norm), eps, k);
    }
    RopeRows(q, b, heads, d, cos, sin);
    RopeRows(k, b, kv_heads, d, cos, sin);
    attend(li, q, k, v, o, scratch);  // (B, H, Dv)
    lin(o, q_width, kWo, dim, x, /*beta=*/1.0f);  // x += o W_o^T
    RmsNormRows(x, b, dim, Data(l.mlp_norm), eps, hn);
    lin(hn, dim, kWGate, hidden, gate, 0.0f);
    lin(hn, dim, kWUp, hidden, up, 0.0f);
    SiluMul(gate, up, b * hidden);
    lin(gate, hidden, kWDown, dim, x, /*beta=*/1.0f);  // x += . W_down^T
  }
  RmsNormRows(x, b, dim, Data(norm_), eps, hn);
  at::Tensor logits = at::empty({b, vocab}, at::kFloat);  // (B, V)
  linear(hn, dim, head_, head_packed_, bf16 ? &bf16_->head : nullptr, vocab,
         logits.data_ptr<float>(), 0.0f);
  return logits;
}

at::Tensor Model::StepFused(absl::Span<DecodeState* const> states,
                            absl::Span<const int32_t> tokens) const {
  const int64_t b = int64_t(states.size());
  std::lock_guard<std::mutex> lock(workspace_.mu);
  int64_t scratch_floats = 0;
  for (const Layer& l : layers_) {
    scratch_floats = std::max(scratch_floats, l.attention->StepScratchFloats(b));
  }
  std::vector<int64_t> positions(b);
  for (int64_t i = 0; i < b; ++i) positions[i] = states[i]->position_;
  std::vector<attention::AttentionState*> layer_states(b);
  // Moved before any layer is: a step that throws leaves a state it touched at a new
  // position (Model::Batch, on failure).
  for (DecodeState* s : states) s->position_ += 1;
  return RunRowsFused(tokens, positions.data(), scratch_floats,
                      [&](size_t li, float* q, float* k, float* v, float* o, float* scratch) {
                        for (int64_t i = 0; i < b; ++i) {
                          layer_states[i] = states[i]->layers_[li].get();
                        }
                        layers_[li].attention->StepRaw(layer_states, q, k, v, o, scratch);
                      });
}

at::Tensor Model::PrefillFused(DecodeState& state, absl::Span<const int32_t> tokens) const {
  // The prompt in blocks of at most kPrefillBlock tokens, each through every layer before
  // the next: exact, since each block's attention sees the state the blocks before it
  // left, and it bounds the workspace whatever the prompt's length.
  constexpr int64_t kPrefillBlock = 512;
  const int64_t t = int64_t(tokens.size());
  std::lock_guard<std::mutex> lock(workspace_.mu);
  int64_t scratch_floats = 0;
  for (const Layer& l : layers_) {
    scratch_floats =
        std::max(scratch_floats, l.attention->PrefillScratchFloats(std::min(t, kPrefillBlock)));
  }
  at::Tensor logits = at::empty({t, config_.vocab_size}, at::kFloat);  // (T, V)
  std::vector<int64_t> positions;
  for (int64_t start = 0; start < t; start += kPrefillBlock) {
    const int64_t len = std::min(kPrefillBlock, t - start);
    positions.resize(len);
    for (int64_t i = 0; i < len; ++i) positions[i] = state.position_ + i;
    state.position_ += len;  // before the layers change (Model::Batch, on failure)
    at::Tensor block = RunRowsFused(
        tokens.subspan(start, len), positions.data(), scratch_floats,
        [&](size_t li, float* q, float* k, float* v, float* o, float* scratch) {
          layers_[li].attention->PrefillRaw(*state.layers_[li], len, q, k, v, o, scratch);
        });
    logits.narrow(0, start, len).copy_(block);
  }
  return logits;
}

at::Tensor Model::BatchFused(absl::Span<const Segment> segments) const {
  // Rows: first the one-token segments (one StepRaw over them all), then each longer
  // segment's tokens (its own PrefillRaw on its rows). Every row goes through the
  // projections and MLPs in the same BLAS calls.
  std::vector<size_t> order;  // segment index by row group
  for (size_t i = 0; i < segments.size(); ++i) {
    if (segments[i].tokens.size() == 1) order.push_back(i);
  }
  const int64_t decode = int64_t(order.size());
  for (size_t i = 0; i < segments.size(); ++i) {
    if (segments[i].tokens.size() != 1) order.push_back(i);
  }
  std::vector<int32_t> tokens;
  std::vector<int64_t> positions, first_row(segments.size()), last_row(segments.size());
  int64_t longest = 1;
  for (size_t i : order) {
    const Segment& seg = segments[i];
    first_row[i] = int64_t(tokens.size());
    for (size_t j = 0; j < seg.tokens.size(); ++j) {
      tokens.push_back(seg.tokens[j]);
      positions.push_back(seg.state->position_ + int64_t(j));
    }
    last_row[i] = int64_t(tokens.size()) - 1;
    longest = std::max(longest, int64_t(seg.tokens.size()));
  }
  std::lock_guard<std::mutex> lock(workspace_.mu);
  int64_t scratch_floats = 0;
  for (const Layer& l : layers_) {
    scratch_floats = std::max({scratch_floats, l.attention->StepScratchFloats(decode),
                               l.attention->PrefillScratchFloats(longest)});
  }
  // A row's width in q and out (H * D, H * Dv) and in k and v (Hkv * D, Hkv * Dv).
  const int64_t d = config_.attention.head_dim;
  const int64_t q_width = config_.attention.num_heads * d;
  const int64_t kv_width = config_.attention.num_kv_heads * d;
  std::vector<attention::AttentionState*> layer_states(decode);
  // Before any layer changes (Model::Batch, on failure).
  for (const Segment& seg : segments) seg.state->position_ += int64_t(seg.tokens.size());
  at::Tensor rows = RunRowsFused(
      tokens, positions.data(), scratch_floats,
      [&](size_t li, float* q, float* k, float* v, float* o, float* scratch) {
        if (decode > 0) {
          for (int64_t r = 0; r < decode; ++r) {
            layer_states[r] = segments[order[r]].state->layers_[li].get();
          }
          layers_[li].attention->StepRaw(layer_states, q, k, v, o, scratch);
        }
        for (size_t g = size_t(decode); g < order.size(); ++g) {
          const size_t i = order[g];
          const int64_t qa = first_row[i] * q_width, ka = first_row[i] * kv_width;
          layers_[li].attention->PrefillRaw(*segments[i].state->layers_[li],
                                            int64_t(segments[i].tokens.size()), q + qa,
                                            k + ka, v + ka, o + qa, scratch);
        }
      });
  at::Tensor out = at::empty({int64_t(segments.size()), config_.vocab_size}, at::kFloat);
  for (size_t i = 0; i < segments.size(); ++i) out[int64_t(i)].copy_(rows[last_row[i]]);
  return out;  // (S, V)
}

}  // namespace attnserve::model
