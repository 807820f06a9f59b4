#include "server/model/model.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "server/attention/registry.h"
#include "server/common/torch_status.h"

namespace attnserve::model {
namespace {

// x: (..., dim) -> (..., dim), scaled to unit RMS, times the gain g: (dim).
at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& g, double eps) {
  return x * at::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps) * g;
}

// x: (B, T, H, D); cos, sin: (B, T, 1, D/2). Rotates the pairs (x_i, x_{i+D/2}).
at::Tensor Rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  at::Tensor x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
  return at::cat({x1 * cos - x2 * sin, x1 * sin + x2 * cos}, -1);
}

}  // namespace

int64_t DecodeState::Bytes() const {
  int64_t total = 0;
  for (const auto& l : layers_) total += l->Bytes();
  return total;
}

int64_t DecodeState::BytesAfter(int64_t extra) const {
  int64_t total = 0;
  for (const auto& l : layers_) total += l->BytesAfter(extra);
  return total;
}

std::unique_ptr<DecodeState> DecodeState::Clone() const {
  auto copy = std::make_unique<DecodeState>();
  for (const auto& l : layers_) copy->layers_.push_back(l->Clone());
  copy->position_ = position_;
  copy->owner_ = owner_;
  return copy;
}

std::unique_ptr<DecodeState> DecodeState::Checkpoint() const {
  auto copy = std::make_unique<DecodeState>();
  for (const auto& l : layers_) copy->layers_.push_back(l->Checkpoint());
  copy->position_ = position_;
  copy->owner_ = owner_;
  return copy;
}

void DecodeState::Rewind(std::unique_ptr<DecodeState> checkpoint) {
  layers_ = std::move(checkpoint->layers_);
  position_ = checkpoint->position_;
}

absl::StatusOr<std::unique_ptr<Model>> Model::Create(const ModelConfig& config,
                                                     uint64_t seed) {
  if (absl::Status s = ValidateModelConfig(config); !s.ok()) return s;
  std::unique_ptr<Model> m(new Model(config));
  for (int i = 0; i < config.num_layers; ++i) {
    auto attn = attention::CreateAttention(config.attention);
    if (!attn.ok()) return attn.status();
    m->layers_.push_back(Layer{});
    m->layers_.back().attention = std::move(attn).value();
  }
  absl::Status init = CatchTorch("initialising model", [&]() -> absl::Status {
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    const int64_t dim = config.dim, hidden = config.mlp_hidden, vocab = config.vocab_size;
    const int64_t q_width = int64_t{config.attention.num_heads} * config.attention.head_dim;
    const int64_t kv_width = int64_t{config.attention.num_kv_heads} * config.attention.head_dim;
    const double out_std = 0.02 / std::sqrt(2.0 * config.num_layers);
    auto normal = [&](std::vector<int64_t> shape, double std) {
      return at::normal(0.0, std, shape, gen, at::kFloat);
    };
    m->embed_ = normal({vocab, dim}, 0.02);
    for (Layer& l : m->layers_) {
      l.attn_norm = at::ones({dim});
      l.wq = normal({q_width, dim}, 0.02);   // (H*D, dim)
      l.wk = normal({kv_width, dim}, 0.02);  // (Hkv*D, dim)
      l.wv = normal({kv_width, dim}, 0.02);  // (Hkv*Dv, dim)
      l.wo = normal({dim, q_width}, out_std);  // (dim, H*Dv)
      l.mlp_norm = at::ones({dim});
      l.w_gate = normal({hidden, dim}, 0.02);
      l.w_up = normal({hidden, dim}, 0.02);
      l.w_down = normal({dim, hidden}, out_std);
    }
    m->norm_ = at::ones({dim});
    // Tied: the head is the embedding tensor itself (one copy; NamedParameters lists it
    // once, as "embed").
    m->head_ = config.tie_embeddings ? m->embed_ : normal({vocab, dim}, 0.02);
    const int64_t d = config.attention.head_dim;
    m->inv_freq_ = at::pow(double(config.rope_theta),
                           -at::arange(0, d, 2, at::kDouble) / double(d));  // (D/2)
    return absl::OkStatus();
  });
  if (!init.ok()) return init;
  m->ChooseStepPath();
  return m;
}

attention::NamedTensors Model::NamedParameters() const {
  attention::NamedTensors out = {{"embed", embed_}};
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& l = layers_[i];
    const std::string p = absl::StrCat("layers.", i, ".");
    for (auto& [name, t] : attention::NamedTensors{
             {"attn_norm", l.attn_norm}, {"wq", l.wq}, {"wk", l.wk}, {"wv", l.wv},
             {"wo", l.wo}, {"mlp_norm", l.mlp_norm}, {"w_gate", l.w_gate},
             {"w_up", l.w_up}, {"w_down", l.w_down}}) {
      out.emplace_back(p + name, t);
    }
    for (auto& [name, t] : l.attention->NamedParameters()) out.emplace_back(p + "attn." + name, t);
  }
  out.emplace_back("norm", norm_);
  if (!config_.tie_embeddings) out.emplace_back("head", head_);
  return out;
}

int64_t Model::ParameterCount() const {
  int64_t n = 0;
  for (const auto& [name, t] : NamedParameters()) n += t.numel();
  return n;
}

int64_t Model::StateBytes(int64_t context) const {
  return config_.num_layers * attention::StateBytesPerLayer(config_.attention, context);
}

int64_t Model::BreakEvenContext() const {
  return attention::BreakEvenContext(config_.attention);
}

attention::TensorShapes Model::StateShapes(int64_t position) const {
  return layers_.front().attention->StateShapes(position);
}

absl::StatusOr<std::unique_ptr<DecodeState>> Model::RestoreState(
    int64_t position, const std::vector<attention::NamedTensors>& layers) const {
  if (position < 0 || position > config_.max_context) {
    return absl::InvalidArgumentError(absl::StrCat("state position ", position,
                                                   " is outside [0, max_context ",
                                                   config_.max_context, "]"));
  }
  if (layers.size() != layers_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("state has ", layers.size(),
                                                   " layers; the model has ", layers_.size()));
  }
  auto state = std::make_unique<DecodeState>();
  absl::Status s = CatchTorch("restoring a state", [&]() -> absl::Status {
    for (size_t l = 0; l < layers_.size(); ++l) {
      state->layers_.push_back(layers_[l].attention->RestoreState(position, layers[l]));
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  state->position_ = position;
  state->owner_ = this;
  return state;
}

const Sha256Digest& Model::Fingerprint() const {
  std::call_once(fingerprint_once_, [this] {
    std::call_once(weights_digest_->once, [this] {
      Sha256 weights;
      for (const auto& [name, t] : NamedParameters()) {
        at::Tensor c = t.detach().to(at::kFloat).contiguous();
        weights.Update(name);
        for (int64_t d : c.sizes()) weights.Update(&d, sizeof d);  // little-endian hosts
        weights.Update(c.data_ptr(), c.nbytes());
      }
      weights_digest_->digest = weights.Finish();
    });
    // Run-time knobs that leave the arithmetic alone are not part of the identity.
    ModelConfig identity = config_;
    identity.attention.max_state_bytes_per_layer = 0;
    identity.attention.reference_kernels = false;
    Sha256 h;
    h.Update(ModelConfigToText(identity));
    h.Update(weights_digest_->digest.data(), weights_digest_->digest.size());
    if (bf16_ != nullptr) h.Update("weights bf16");  // other decode arithmetic
    fingerprint_ = h.Finish();
  });
  return fingerprint_;
}

absl::StatusOr<std::unique_ptr<Model>> Model::ServeAs(const std::string& module, int order,
                                                      int64_t max_state_bytes_per_layer) const {
  if (absl::Status s = attention::CheckServableAs(config_.attention, module, order); !s.ok()) {
    return s;
  }
  ModelConfig config = config_;
  config.attention.module = module;
  if (order != 0) config.attention.order = order;
  config.attention.max_state_bytes_per_layer = max_state_bytes_per_layer;
  if (absl::Status s = ValidateModelConfig(config); !s.ok()) return s;
  std::unique_ptr<Model> m(new Model(config));
  absl::Status built = CatchTorch("serving a model as another module", [&]() -> absl::Status {
    for (const Layer& from : layers_) {
      auto attn = attention::CreateAttention(config.attention);
      if (!attn.ok()) return attn.status();
      Layer l{from.attn_norm, from.wq,     from.wk,   from.wv,     from.wo,
              from.mlp_norm,  from.w_gate, from.w_up, from.w_down, std::move(attn).value()};
      // Trained attention parameters (the qk_norm temperature) by name, where both
      // modules have them.
      attention::NamedTensors source = from.attention->NamedParameters();
      for (auto& [name, param] : l.attention->NamedParameters()) {
        for (auto& [src_name, src] : source) {
          if (src_name == name && src.sizes() == param.sizes()) param.copy_(src);
        }
      }
      m->layers_.push_back(std::move(l));
    }
    return absl::OkStatus();
  });
  if (!built.ok()) return built;
  m->embed_ = embed_;
  m->norm_ = norm_;
  m->head_ = head_;
  m->inv_freq_ = inv_freq_;
  m->weights_digest_ = weights_digest_;
  m->bf16_ = bf16_;
  m->ChooseStepPath();
  return m;
}

void Model::UseBf16Weights() {
  auto copies = std::make_shared<Bf16Weights>();
  auto pack = [](const at::Tensor& w) {  // (out, in) contiguous fp32
    at::Tensor c = w.detach().to(at::kFloat).contiguous();
    return PackBf16(c.data_ptr<float>(), c.size(0), c.size(1));
  };
  for (const Layer& l : layers_) {
    copies->layers.push_back({pack(l.wq), pack(l.wk), pack(l.wv), pack(l.wo), pack(l.w_gate),
                              pack(l.w_up), pack(l.w_down)});
  }
  copies->head = pack(head_);
  bf16_ = std::move(copies);
}

std::unique_ptr<DecodeState> Model::NewState() const {
  auto state = std::make_unique<DecodeState>();
  for (const Layer& l : layers_) state->layers_.push_back(l.attention->NewState());
  state->owner_ = this;
  return state;
}

at::Tensor Model::Run(const at::Tensor& tokens, const at::Tensor& positions,
                      const AttendFn& attend) const {
  const int64_t b = tokens.size(0), t = tokens.size(1);
  const int64_t h = config_.attention.num_heads, d = config_.attention.head_dim;
  const int64_t hkv = config_.attention.num_kv_heads;
  const double eps = config_.norm_eps;
  // RoPE angles in fp64 so that long positions keep their precision: (B, T, 1, D/2).
  at::Tensor angles = (positions.to(at::kDouble).unsqueeze(-1) * inv_freq_).unsqueeze(2);
  at::Tensor cos = angles.cos().to(at::kFloat), sin = angles.sin().to(at::kFloat);

  at::Tensor x = at::embedding(embed_, tokens);  // (B, T, dim)
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& l = layers_[i];
    at::Tensor hn = RmsNorm(x, l.attn_norm, eps);
    // (B, T, dim) -> (B, T, H, D) -> rotate -> (B, H, T, D); k, v with Hkv heads.
    at::Tensor q = Rope(at::linear(hn, l.wq).view({b, t, h, d}), cos, sin).transpose(1, 2);
    at::Tensor k = Rope(at::linear(hn, l.wk).view({b, t, hkv, d}), cos, sin).transpose(1, 2);
    at::Tensor v = at::linear(hn, l.wv).view({b, t, hkv, d}).transpose(1, 2);
    at::Tensor o = attend(*l.attention, int(i), q, k, v);  // (B, H, T, Dv)
    x = x + at::linear(o.transpose(1, 2).reshape({b, t, h * d}), l.wo);
    at::Tensor mn = RmsNorm(x, l.mlp_norm, eps);
    x = x + at::linear(at::silu(at::linear(mn, l.w_gate)) * at::linear(mn, l.w_up), l.w_down);
  }
  return at::linear(RmsNorm(x, norm_, eps), head_);  // (B, T, V)
}

at::Tensor Model::Forward(const at::Tensor& tokens) const {
  const int64_t t = tokens.size(1);
  at::Tensor positions = at::arange(t, at::kLong).unsqueeze(0).expand({tokens.size(0), t});
  return Run(tokens, positions,
             [](const attention::Attention& a, int, const at::Tensor& q, const at::Tensor& k,
                const at::Tensor& v) { return a.Parallel(q, k, v); });
}

absl::Status Model::CheckTokens(absl::Span<const int32_t> tokens) const {
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= config_.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", tokens[i], " at position ", i,
                                                     " is outside the vocabulary [0, ",
                                                     config_.vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<at::Tensor> Model::Prefill(DecodeState& state,
                                          absl::Span<const int32_t> tokens) const {
  if (state.owner_ != this) return absl::InvalidArgumentError("state belongs to another model");
  if (tokens.empty()) return absl::InvalidArgumentError("prefill needs at least one token");
  if (absl::Status s = CheckTokens(tokens); !s.ok()) return s;
  const int64_t t = int64_t(tokens.size());
  if (state.position_ + t > config_.max_context) {
    return absl::OutOfRangeError(
        absl::StrCat("session at position ", state.position_, " + ", t,
                     " tokens would pass max_context ", config_.max_context));
  }
  if (fused_step_) {
    return CatchTorch("prefill", [&]() -> at::Tensor { return PrefillFused(state, tokens); });
  }
  return CatchTorch("prefill", [&]() -> at::Tensor {
    c10::AutoGradMode no_grad(false);
    at::Tensor ids = at::tensor(std::vector<int64_t>(tokens.begin(), tokens.end()), at::kLong)
                         .unsqueeze(0);                                   // (1, T)
    at::Tensor positions = at::arange(state.position_, state.position_ + t, at::kLong)
                               .unsqueeze(0);                             // (1, T)
    state.position_ += t;  // before the layers change (Batch, on failure)
    at::Tensor logits = Run(ids, positions,
                            [&](const attention::Attention& a, int layer, const at::Tensor& q,
                                const at::Tensor& k, const at::Tensor& v) {
                              return a.Prefill(*state.layers_[layer], q[0], k[0], v[0])
                                  .unsqueeze(0);
                            });
    return logits[0];  // (T, V)
  });
}

absl::Status Model::CheckAppend(const DecodeState& state,
                                absl::Span<const int32_t> tokens) const {
  if (state.owner_ != this) return absl::InvalidArgumentError("state belongs to another model");
  if (tokens.empty()) return absl::InvalidArgumentError("no tokens to append");
  if (absl::Status s = CheckTokens(tokens); !s.ok()) return s;
  if (state.position_ + int64_t(tokens.size()) > config_.max_context) {
    return absl::OutOfRangeError(
        absl::StrCat("session at position ", state.position_, " + ", tokens.size(),
                     " tokens would pass max_context ", config_.max_context));
  }
  return absl::OkStatus();
}

absl::StatusOr<at::Tensor> Model::Batch(absl::Span<const Segment> segments) const {
  if (segments.empty()) return absl::InvalidArgumentError("batch needs at least one segment");
  std::unordered_set<const DecodeState*> seen;
  for (const Segment& seg : segments) {
    if (seg.state == nullptr) return absl::InvalidArgumentError("batch: a state is null");
    if (absl::Status s = CheckAppend(*seg.state, seg.tokens); !s.ok()) return s;
    if (!seen.insert(seg.state).second) {
      return absl::InvalidArgumentError("batch: a state appears twice");
    }
  }
  if (fused_step_) {
    return CatchTorch("batch", [&]() -> at::Tensor { return BatchFused(segments); });
  }
  // Reference: the one-token segments as one Step, every other one as its own Prefill.
  std::vector<DecodeState*> states;
  std::vector<int32_t> tokens;
  std::vector<size_t> stepped;
  for (size_t i = 0; i < segments.size(); ++i) {
    if (segments[i].tokens.size() == 1) {
      states.push_back(segments[i].state);
      tokens.push_back(segments[i].tokens[0]);
      stepped.push_back(i);
    }
  }
  at::Tensor out = at::empty({int64_t(segments.size()), config_.vocab_size}, at::kFloat);
  if (!states.empty()) {
    auto logits = Step(states, tokens);
    if (!logits.ok()) return logits.status();
    for (size_t j = 0; j < stepped.size(); ++j) out[int64_t(stepped[j])].copy_((*logits)[j]);
  }
  for (size_t i = 0; i < segments.size(); ++i) {
    if (segments[i].tokens.size() == 1) continue;
    auto logits = Prefill(*segments[i].state, segments[i].tokens);
    if (!logits.ok()) return logits.status();
    out[int64_t(i)].copy_((*logits)[-1]);
  }
  return out;
}

absl::StatusOr<at::Tensor> Model::Step(absl::Span<DecodeState* const> states,
                                       absl::Span<const int32_t> tokens) const {
  if (states.size() != tokens.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("step: ", states.size(), " states but ", tokens.size(), " tokens"));
  }
  if (states.empty()) return absl::InvalidArgumentError("step needs at least one session");
  if (absl::Status s = CheckTokens(tokens); !s.ok()) return s;
  std::unordered_set<const DecodeState*> seen;
  std::vector<int64_t> positions;
  for (const DecodeState* s : states) {
    if (s == nullptr || s->owner_ != this) {
      return absl::InvalidArgumentError("step: a state is null or belongs to another model");
    }
    if (!seen.insert(s).second) return absl::InvalidArgumentError("step: a state appears twice");
    if (s->position_ + 1 > config_.max_context) {
      return absl::OutOfRangeError(absl::StrCat(
          "session at position ", s->position_, " has reached max_context ",
          config_.max_context));
    }
    positions.push_back(s->position_);
  }
  if (fused_step_) {
    return CatchTorch("step", [&]() -> at::Tensor { return StepFused(states, tokens); });
  }
  return CatchTorch("step", [&]() -> at::Tensor {
    c10::AutoGradMode no_grad(false);
    at::Tensor ids =
        at::tensor(std::vector<int64_t>(tokens.begin(), tokens.end()), at::kLong).unsqueeze(1);
    at::Tensor pos = at::tensor(positions, at::kLong).unsqueeze(1);  // (B, 1)
    std::vector<attention::AttentionState*> layer_states(states.size());
    for (DecodeState* s : states) s->position_ += 1;  // before the layers (Batch, on failure)
    at::Tensor logits = Run(ids, pos,
                            [&](const attention::Attention& a, int layer, const at::Tensor& q,
                                const at::Tensor& k, const at::Tensor& v) {
                              for (size_t b = 0; b < states.size(); ++b) {
                                layer_states[b] = states[b]->layers_[layer].get();
                              }
                              // (B, H, 1, D) -> (B, H, D) -> module -> (B, H, 1, Dv)
                              return a.Step(layer_states, q.select(2, 0), k.select(2, 0),
                                            v.select(2, 0))
                                  .unsqueeze(2);
                            });
    return logits.select(1, 0);  // (B, V)
  });
}

}  // namespace attnserve::model
