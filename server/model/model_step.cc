// The fused decode step and prefill: Model::Run for one token per session, or a prompt of
// one session, or both at once (Batch), without LibTorch ops.
// Every buffer is the model's workspace (grown to the largest batch, then reused); the
// projections are direct BLAS calls (or weights::PackedLinear) over all rows at once;
// norms, RoPE and SwiGLU are the loops of step_kernels.h; attention is the module's
// StepRaw or PrefillRaw (feature_kernels.h, kv_kernels.h); a recurrent layer is
// server/mixer's batched step over the decode rows and its chunked prefill over each
// prompt's rows.
// Model::Run is the reference; tests/model/model_step_test.cc (FusedStep, FusedPrefill)
// ties the two.
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "server/mixer/conv_kernels.h"
#include "server/mixer/gdn_kernels.h"
#include "server/mixer/ssd_kernels.h"
#include "server/model/model.h"
#include "server/model/recurrent_state.h"
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
  for (const Layer& l : layers_) {
    fused_step_ = fused_step_ && (l.attention == nullptr || l.attention->HasRawStep());
  }
}

at::Tensor Model::RunRowsFused(absl::Span<const int32_t> tokens, const int64_t* positions,
                               const RowGroups& groups,
                               absl::Span<const int64_t> logit_rows) const {
  const int64_t b = int64_t(tokens.size()), dim = config_.dim, hidden = config_.mlp_hidden;
  const int64_t vocab = config_.vocab_size, heads = config_.attention.num_heads;
  const int64_t kv_heads = config_.attention.num_kv_heads;
  const int64_t d = config_.attention.head_dim;
  const int64_t half = inv_freq_.size(0), rot = 2 * half;  // RoPE over the first rot of d
  const int64_t q_width = heads * d, kv_width = kv_heads * d;  // value_dim == head_dim
  const int64_t decode = int64_t(groups.decode_states.size());
  int64_t longest = 1;
  for (const RowGroups::Prefill& p : groups.prefills) longest = std::max(longest, p.count);
  int64_t scratch_floats = 0;
  for (const Layer& l : layers_) {
    if (l.attention == nullptr) continue;
    scratch_floats = std::max({scratch_floats, l.attention->StepScratchFloats(decode),
                               l.attention->PrefillScratchFloats(longest)});
  }
  // Recurrent layers: in_proj's width (Mamba-2 z | xBC | dt; short conv b | c | x), the
  // conv's output (Mamba-2's xBC) and the mixed rows before out_proj.
  const int64_t inner = config_.ssm_inner, groups_n = int64_t{config_.ssm_groups} * config_.ssm_state;
  const int64_t conv_channels = inner + 2 * groups_n;
  int64_t proj_width = 0, mixed_width = 0;
  // Gated DeltaNet: q | k | v (the conv's channels too), n_v value heads of d_v.
  const int64_t gdn_values = config_.ssm_inner, gdn_heads = config_.ssm_heads;
  const int64_t gdn_key = int64_t{config_.ssm_groups} * config_.ssm_state;
  const int64_t gdn_channels = 2 * gdn_key + gdn_values;
  bool has_gdn = false;
  for (const Layer& l : layers_) {
    if (l.mixer == kGatedDeltaNetMixer) {
      has_gdn = true;
      proj_width = std::max(proj_width, gdn_channels);
      mixed_width = std::max(mixed_width, gdn_values);
    } else if (l.mixer == kMamba2Mixer) {
      proj_width = std::max(proj_width, inner + conv_channels + config_.ssm_heads);
      mixed_width = std::max(mixed_width, inner);
    } else if (l.mixer == kShortConvMixer) {
      proj_width = std::max(proj_width, 3 * dim);
      mixed_width = std::max(mixed_width, dim);
    }
  }
  const float eps = config_.norm_eps;
  const float rs = config_.residual_scale;
  StepWorkspace& w = workspace_;
  float* x = Grow(w.x, b * dim);  // (B, dim) residual stream
  float* hn = Grow(w.hn, b * std::max(dim, hidden));
  float* q = Grow(w.q, b * q_width);   // (B, H, D)
  float* k = Grow(w.k, b * kv_width);  // (B, Hkv, D)
  float* v = Grow(w.v, b * kv_width);  // (B, Hkv, Dv)
  float* o = Grow(w.o, b * std::max(q_width, dim));  // (B, H, Dv); a scaled residual's (B, dim)
  float* gate = Grow(w.gate, b * hidden);
  float* up = Grow(w.up, b * hidden);
  float* cos = Grow(w.cos, b * half);  // (B, D/2)
  float* sin = Grow(w.sin, b * half);
  float* scratch = Grow(w.scratch, scratch_floats);
  float* proj = Grow(w.proj, b * proj_width);         // (B, in_proj)
  float* conv = Grow(w.conv, b * std::max(conv_channels, has_gdn ? gdn_channels : 0));
  // (B, C): Mamba-2's xBC after the conv; Gated DeltaNet's q | k | v
  float* mixed = Grow(w.mixed, b * mixed_width);      // (B, I) or (B, dim)
  float* lin = Grow(w.linear, b * std::max({dim, hidden, vocab, 2 * q_width, proj_width}));
  // Gated attention: wq's (B, H, [q | gate]) rows, then the gates (B, H*D).
  float* q_gate = config_.attention_gate ? Grow(w.q_gate, 3 * b * q_width) : nullptr;
  float* gdn_z = has_gdn ? Grow(w.gdn_z, b * gdn_values) : nullptr;
  float* gdn_beta = has_gdn ? Grow(w.gdn_beta, b * gdn_heads) : nullptr;
  float* gdn_alpha = has_gdn ? Grow(w.gdn_alpha, b * gdn_heads) : nullptr;

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
    if (config_.embedding_scale != 1.0f) {
      for (int64_t j = 0; j < dim; ++j) x[i * dim + j] *= config_.embedding_scale;
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
  // `rows` rows: B for the layers, R for the head.
  auto linear_rows = [&](int64_t rows, const float* in, int64_t n, const at::Tensor& dense,
                         const Packed& packed, const Bf16Matrix* w16, int64_t out, float* y,
                         float beta) {
    if (packed != nullptr) {
      weights::PackedLinear(in, rows, *packed, y, beta, w.packed);
    } else if (bf16_ != nullptr && rows <= kBf16MaxRows && w16 != nullptr &&
               !w16->packed.empty()) {
      LinearBf16(in, rows, *w16, y, beta);
    } else {
      Linear(in, rows, n, Data(dense), out, y, beta, lin);
    }
  };
  auto linear = [&](const float* in, int64_t n, const at::Tensor& dense, const Packed& packed,
                    const Bf16Matrix* w16, int64_t out, float* y, float beta) {
    linear_rows(b, in, n, dense, packed, w16, out, y, beta);
  };
  // rows (B, width) += bias (width), row by row.
  auto add_bias = [&](float* rows, const at::Tensor& bias, int64_t width) {
    const float* bv = Data(bias);
    for (int64_t i = 0; i < b; ++i) {
      for (int64_t j = 0; j < width; ++j) rows[i * width + j] += bv[j];
    }
  };
  // The states of the decode rows in layer li (for StepRaw and the recurrent steps).
  std::vector<attention::AttentionState*> layer_states(decode);
  std::vector<float*> conv_states(decode), ssm_states(decode);
  auto decode_states = [&](size_t li) {
    for (int64_t r = 0; r < decode; ++r) {
      layer_states[r] = groups.decode_states[r]->layers_[li].get();
    }
  };
  for (size_t li = 0; li < layers_.size(); ++li) {
    const Layer& l = layers_[li];
    const Bf16Matrix* w16 = bf16 ? bf16_->layers[li].data() : nullptr;  // by Matrix
    auto lin_m = [&](const float* in, int64_t n, Matrix m, int64_t out, float* y, float beta) {
      linear(in, n, l.dense(m), l.packed[m], w16 == nullptr ? nullptr : w16 + m, out, y, beta);
    };
    // x += rs * (in W^T): straight into x when rs is 1.
    auto residual = [&](const float* in, int64_t n, Matrix m) {
      if (rs == 1.0f) {
        lin_m(in, n, m, dim, x, /*beta=*/1.0f);
        return;
      }
      lin_m(in, n, m, dim, o, 0.0f);
      for (int64_t i = 0; i < b * dim; ++i) x[i] += rs * o[i];
    };
    RmsNormRows(x, b, dim, Data(l.attn_norm), eps, hn);
    decode_states(li);
    if (l.mixer == kAttentionMixer) {
      if (config_.attention_gate) {  // (B, H, [q | gate]) -> q (B, H*D), gates (B, H*D)
        lin_m(hn, dim, kWq, 2 * q_width, q_gate, 0.0f);
        float* gates = q_gate + 2 * b * q_width;
        for (int64_t r = 0; r < b * heads; ++r) {
          std::memcpy(q + r * d, q_gate + 2 * r * d, d * sizeof(float));
          std::memcpy(gates + r * d, q_gate + (2 * r + 1) * d, d * sizeof(float));
        }
      } else {
        lin_m(hn, dim, kWq, q_width, q, 0.0f);  // (B, H*D)
      }
      lin_m(hn, dim, kWk, kv_width, k, 0.0f);  // (B, Hkv*D)
      lin_m(hn, dim, kWv, kv_width, v, 0.0f);  // (B, Hkv*Dv)
      if (config_.attention_bias) {
        add_bias(q, l.bq, q_width);
        add_bias(k, l.bk, kv_width);
        add_bias(v, l.bv, kv_width);
      }
      if (config_.qk_head_norm) {  // each head's D values: (B * H, D), (B * Hkv, D)
        RmsNormRows(q, b * heads, d, Data(l.q_norm), eps, q);
        RmsNormRows(k, b * kv_heads, d, Data(l.k_norm), eps, k);
      }
      if (config_.rope) {
        RopeRows(q, b, heads, d, cos, sin, rot);
        RopeRows(k, b, kv_heads, d, cos, sin, rot);
      }
      if (config_.attention_scale != 0) {  // in place of the modules' 1/sqrt(D)
        const float f = config_.attention_scale * std::sqrt(float(d));
        for (int64_t i = 0; i < b * q_width; ++i) q[i] *= f;
      }
      if (decode > 0) l.attention->StepRaw(layer_states, q, k, v, o, scratch);  // (B, H, Dv)
      for (const RowGroups::Prefill& p : groups.prefills) {
        const int64_t qa = p.first * q_width, ka = p.first * kv_width;
        l.attention->PrefillRaw(*p.state->layers_[li], p.count, q + qa, k + ka, v + ka, o + qa,
                                scratch);
      }
      if (config_.attention_gate) SigmoidGate(o, q_gate + 2 * b * q_width, b * q_width);
      if (rs == 1.0f) {
        lin_m(o, q_width, kWo, dim, x, /*beta=*/1.0f);  // x += o W_o^T
      } else {
        lin_m(o, q_width, kWo, dim, hn, 0.0f);  // hn is free until the MLP's norm
        for (int64_t i = 0; i < b * dim; ++i) x[i] += rs * hn[i];
      }
    } else if (l.mixer == kGatedDeltaNetMixer) {
      const int64_t c = gdn_channels, vd = gdn_values, nv = gdn_heads;
      lin_m(hn, dim, kInProj, c, proj, 0.0f);          // (B, q | k | v)
      lin_m(hn, dim, kGdnZ, vd, gdn_z, 0.0f);          // (B, n_v d_v)
      lin_m(hn, dim, kGdnBeta, nv, gdn_beta, 0.0f);    // (B, n_v)
      lin_m(hn, dim, kGdnAlpha, nv, gdn_alpha, 0.0f);  // (B, n_v)
      const mixer::ConvWeights cw{Data(l.conv_w), nullptr, c, config_.conv_kernel,
                                  /*silu=*/true};
      const mixer::GdnWeights gw{Data(l.ssm_a),      Data(l.dt_bias),
                                 config_.ssm_groups, nv,
                                 config_.ssm_state,  vd / nv,
                                 eps};
      // Row r's inputs: q, k, v in the conv output, beta and alpha in their products.
      auto inputs = [&](int64_t r) {
        const float* qkv = conv + r * c;
        return mixer::GdnInputs{qkv, qkv + gdn_key, qkv + 2 * gdn_key, c, gdn_beta + r * nv, nv,
                                gdn_alpha + r * nv, nv};
      };
      for (int64_t r = 0; r < decode; ++r) {
        auto* st = static_cast<RecurrentState*>(layer_states[r]);
        conv_states[r] = st->conv();
        ssm_states[r] = st->ssm();
      }
      if (decode > 0) {
        mixer::CausalConv1dStep(cw, proj, c, decode, conv_states.data(), conv, c);
        mixer::GdnStep(gw, inputs(0), decode, ssm_states.data(), mixed, vd);
      }
      constexpr int64_t kGdnChunk = 64;  // llama.cpp's
      for (const RowGroups::Prefill& p : groups.prefills) {
        auto& st = static_cast<RecurrentState&>(*p.state->layers_[li]);
        mixer::CausalConv1dPrefill(cw, proj + p.first * c, c, p.count, st.conv(),
                                   conv + p.first * c, c);
        mixer::GdnPrefill(gw, inputs(p.first), p.count, kGdnChunk, st.ssm(),
                          mixed + p.first * vd, vd);
      }
      mixer::GdnGatedRmsNorm(mixed, vd, gdn_z, vd, Data(l.ssm_norm), b, nv, vd / nv, eps, mixed,
                             vd);
      if (config_.gdn_grouped_heads) {  // the file's head order for out_proj, into the
        // conv's buffer (read by now)
        UngroupHeads(mixed, b, config_.ssm_groups, nv, vd / nv, conv);
        residual(conv, vd, kOutProj);
      } else {
        residual(mixed, vd, kOutProj);
      }
    } else if (l.mixer == kShortConvMixer) {
      lin_m(hn, dim, kInProj, 3 * dim, proj, 0.0f);  // (B, 3 dim): b | c | x
      const float* cw = Data(l.conv_w);
      const int64_t kk = config_.conv_kernel;
      for (int64_t r = 0; r < decode; ++r) {
        conv_states[r] = static_cast<RecurrentState*>(layer_states[r])->conv();
      }
      if (decode > 0) {
        mixer::ShortConvStep(cw, dim, kk, proj, 3 * dim, decode, conv_states.data(), mixed, dim);
      }
      for (const RowGroups::Prefill& p : groups.prefills) {
        auto& st = static_cast<RecurrentState&>(*p.state->layers_[li]);
        mixer::ShortConvPrefill(cw, dim, kk, proj + p.first * 3 * dim, 3 * dim, p.count,
                                st.conv(), mixed + p.first * dim, dim);
      }
      residual(mixed, dim, kOutProj);
    } else {  // Mamba-2
      const int64_t h = config_.ssm_heads, pw = inner + conv_channels + h;
      lin_m(hn, dim, kInProj, pw, proj, 0.0f);  // (B, z | xBC | dt)
      const mixer::ConvWeights cw{Data(l.conv_w), Data(l.conv_b), conv_channels,
                                  config_.conv_kernel, /*silu=*/true};
      const mixer::SsdWeights sw{Data(l.ssm_a), Data(l.ssm_d), Data(l.dt_bias), h, inner / h,
                                 config_.ssm_groups, config_.ssm_state};
      // Row r's inputs: x, B, C in the conv output, dt in the projection.
      auto inputs = [&](int64_t r) {
        const float* xp = conv + r * conv_channels;
        return mixer::SsdInputs{xp,           conv_channels, xp + inner, xp + inner + groups_n,
                                conv_channels, proj + r * pw + inner + conv_channels, pw};
      };
      for (int64_t r = 0; r < decode; ++r) {
        auto* st = static_cast<RecurrentState*>(layer_states[r]);
        conv_states[r] = st->conv();
        ssm_states[r] = st->ssm();
      }
      if (decode > 0) {
        mixer::CausalConv1dStep(cw, proj + inner, pw, decode, conv_states.data(), conv,
                                conv_channels);
        mixer::SsdStep(sw, inputs(0), decode, ssm_states.data(), mixed, inner);
      }
      constexpr int64_t kSsdChunk = 64;
      for (const RowGroups::Prefill& p : groups.prefills) {
        auto& st = static_cast<RecurrentState&>(*p.state->layers_[li]);
        mixer::CausalConv1dPrefill(cw, proj + p.first * pw + inner, pw, p.count, st.conv(),
                                   conv + p.first * conv_channels, conv_channels);
        mixer::SsdPrefill(sw, inputs(p.first), p.count, kSsdChunk, st.ssm(),
                          mixed + p.first * inner, inner);
      }
      mixer::GatedGroupRmsNorm(mixed, inner, proj, pw, Data(l.ssm_norm), b, inner,
                               config_.ssm_groups, eps, mixed, inner);
      residual(mixed, inner, kOutProj);
    }
    if (l.attention == nullptr) {  // the states' positions (attention modules keep their own)
      for (int64_t r = 0; r < decode; ++r) static_cast<RecurrentState*>(layer_states[r])->Advance(1);
      for (const RowGroups::Prefill& p : groups.prefills) {
        static_cast<RecurrentState&>(*p.state->layers_[li]).Advance(p.count);
      }
    }
    if (!config_.mlp) continue;
    RmsNormRows(x, b, dim, Data(l.mlp_norm), eps, hn);
    if (config_.HasExperts(int(li))) {  // x += rs * MoE(hn)
      if (rs == 1.0f) {
        MoeRows(l, hn, b, x, 1.0f);
      } else {
        MoeRows(l, hn, b, o, 0.0f);
        for (int64_t i = 0; i < b * dim; ++i) x[i] += rs * o[i];
      }
      continue;
    }
    lin_m(hn, dim, kWGate, hidden, gate, 0.0f);
    lin_m(hn, dim, kWUp, hidden, up, 0.0f);
    SiluMul(gate, up, b * hidden);
    residual(gate, hidden, kWDown);  // x += rs * . W_down^T
  }
  // The head over the rows whose logits are wanted only (a prompt's last token, not each
  // of its 512): (R, V).
  const int64_t r = logit_rows.empty() ? b : int64_t(logit_rows.size());
  if (!logit_rows.empty()) {
    for (int64_t i = 0; i < r; ++i) {
      std::memmove(x + i * dim, x + logit_rows[i] * dim, dim * sizeof(float));  // rows ascend
    }
  }
  RmsNormRows(x, r, dim, Data(norm_), eps, hn);
  at::Tensor logits = at::empty({r, vocab}, at::kFloat);
  linear_rows(r, hn, dim, head_, head_packed_, bf16_ == nullptr ? nullptr : &bf16_->head, vocab,
              logits.data_ptr<float>(), 0.0f);
  if (config_.logit_scale != 1.0f) logits.div_(config_.logit_scale);
  return logits;
}

at::Tensor Model::StepFused(absl::Span<DecodeState* const> states,
                            absl::Span<const int32_t> tokens) const {
  const int64_t b = int64_t(states.size());
  std::lock_guard<std::mutex> lock(workspace_.mu);
  std::vector<int64_t> positions(b);
  for (int64_t i = 0; i < b; ++i) positions[i] = states[i]->position_;
  RowGroups groups;
  groups.decode_states.assign(states.begin(), states.end());
  // Moved before any layer is: a step that throws leaves a state it touched at a new
  // position (Model::Batch, on failure).
  for (DecodeState* s : states) s->position_ += 1;
  return RunRowsFused(tokens, positions.data(), groups);
}

at::Tensor Model::PrefillFused(DecodeState& state, absl::Span<const int32_t> tokens) const {
  // The prompt in blocks of at most kPrefillBlock tokens, each through every layer before
  // the next: exact, since each block's mixers see the state the blocks before it left,
  // and it bounds the workspace whatever the prompt's length.
  constexpr int64_t kPrefillBlock = 512;
  const int64_t t = int64_t(tokens.size());
  std::lock_guard<std::mutex> lock(workspace_.mu);
  at::Tensor logits = at::empty({t, config_.vocab_size}, at::kFloat);  // (T, V)
  std::vector<int64_t> positions;
  for (int64_t start = 0; start < t; start += kPrefillBlock) {
    const int64_t len = std::min(kPrefillBlock, t - start);
    positions.resize(len);
    for (int64_t i = 0; i < len; ++i) positions[i] = state.position_ + i;
    state.position_ += len;  // before the layers change (Model::Batch, on failure)
    RowGroups groups;
    groups.prefills.push_back({&state, 0, len});
    at::Tensor block = RunRowsFused(tokens.subspan(start, len), positions.data(), groups);
    logits.narrow(0, start, len).copy_(block);
  }
  return logits;
}

at::Tensor Model::BatchFused(absl::Span<const Segment> segments) const {
  // Rows: first the one-token segments (one step over them all), then each longer
  // segment's tokens (its own prefill on its rows). Every row goes through the
  // projections and MLPs in the same calls.
  RowGroups groups;
  std::vector<size_t> order;  // segment index by row group
  for (size_t i = 0; i < segments.size(); ++i) {
    if (segments[i].tokens.size() == 1) order.push_back(i);
  }
  const size_t decode = order.size();
  for (size_t i = 0; i < segments.size(); ++i) {
    if (segments[i].tokens.size() != 1) order.push_back(i);
  }
  std::vector<int32_t> tokens;
  std::vector<int64_t> positions, last_row(segments.size());
  for (size_t g = 0; g < order.size(); ++g) {
    const Segment& seg = segments[order[g]];
    const int64_t first = int64_t(tokens.size());
    if (g < decode) {
      groups.decode_states.push_back(seg.state);
    } else {
      groups.prefills.push_back({seg.state, first, int64_t(seg.tokens.size())});
    }
    for (size_t j = 0; j < seg.tokens.size(); ++j) {
      tokens.push_back(seg.tokens[j]);
      positions.push_back(seg.state->position_ + int64_t(j));
    }
    last_row[order[g]] = int64_t(tokens.size()) - 1;
  }
  std::lock_guard<std::mutex> lock(workspace_.mu);
  // Before any layer changes (Model::Batch, on failure).
  for (const Segment& seg : segments) seg.state->position_ += int64_t(seg.tokens.size());
  // Logits of each segment's last row only, in row order (ascending), then by segment.
  std::vector<int64_t> wanted(last_row.begin(), last_row.end());
  std::sort(wanted.begin(), wanted.end());
  at::Tensor rows = RunRowsFused(tokens, positions.data(), groups, wanted);  // (S, V)
  at::Tensor out = at::empty({int64_t(segments.size()), config_.vocab_size}, at::kFloat);
  for (size_t i = 0; i < segments.size(); ++i) {
    const int64_t at = std::lower_bound(wanted.begin(), wanted.end(), last_row[i]) - wanted.begin();
    out[int64_t(i)].copy_(rows[at]);
  }
  return out;  // (S, V)
}

}  // namespace attnserve::model
