#include "server/model/model.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <algorithm>
#include <map>
#include <unordered_set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/attention/registry.h"
#include "server/common/torch_status.h"
#include "server/mixer/conv_kernels.h"
#include "server/mixer/gdn_kernels.h"
#include "server/mixer/ssd_kernels.h"
#include "server/model/recurrent_state.h"

namespace attnserve::model {
namespace {

// x: (..., dim) -> (..., dim), scaled to unit RMS, times the gain g: (dim).
at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& g, double eps) {
  return x * at::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps) * g;
}

// x: (B, T, H, D); cos, sin: (B, T, 1, R/2) for the first R <= D dimensions of each
// head. Rotates the pairs (x_i, x_{i+R/2}), i < R/2; x_R .. x_{D-1} pass through.
at::Tensor Rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t half = cos.size(-1), d = x.size(-1);
  at::Tensor x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
  at::Tensor rotated = at::cat({x1 * cos - x2 * sin, x1 * sin + x2 * cos}, -1);
  return 2 * half == d ? rotated : at::cat({rotated, x.narrow(-1, 2 * half, d - 2 * half)}, -1);
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

const at::Tensor& Model::Layer::dense(Matrix m) const {
  const at::Tensor* const all[kMatrices] = {&wq,      &wk,       &wv,    &wo,        &w_gate,
                                            &w_up,    &w_down,   &in_proj, &out_proj, &gdn_z,
                                            &gdn_beta, &gdn_alpha, &router};
  return *all[m];
}

absl::StatusOr<std::unique_ptr<Model>> Model::CreateEmpty(const ModelConfig& config) {
  if (absl::Status s = ValidateModelConfig(config); !s.ok()) return s;
  std::unique_ptr<Model> m(new Model(config));
  for (int i = 0; i < config.num_layers; ++i) {
    m->layers_.push_back(Layer{});
    m->layers_.back().mixer = config.Mixer(i);
    if (!config.IsAttention(i)) continue;
    auto attn = attention::CreateAttention(config.attention);
    if (!attn.ok()) return attn.status();
    m->layers_.back().attention = std::move(attn).value();
  }
  absl::Status rope = CatchTorch("initialising model", [&]() -> absl::Status {
    // RoPE over the first R = rope_dims (or all D) of each head: (R/2) frequencies, 0
    // where Qwen3.5's M-RoPE sections leave a pair of a text token unrotated.
    const int64_t r = config.rope_dims != 0 ? config.rope_dims : config.attention.head_dim;
    m->inv_freq_ = at::pow(double(config.rope_theta),
                           -at::arange(0, r, 2, at::kDouble) / double(r));  // (R/2)
    const std::vector<int>& sec = config.rope_sections;
    if (!sec.empty()) {
      int64_t total = 0;
      for (int v : sec) total += v;
      for (int64_t i = 0; i < r / 2; ++i) {
        const int64_t s = total > 0 ? i % total : i;
        bool text = false;
        for (int64_t j = 0; j < 3 && j < int64_t(sec.size()); ++j) {
          text = text || (s % 3 == j && s < 3 * int64_t{sec[size_t(j)]});
        }
        if (!text) m->inv_freq_[i] = 0.0;
      }
    }
    return absl::OkStatus();
  });
  if (!rope.ok()) return rope;
  return m;
}

std::vector<Model::Slot> Model::Slots() {
  const int64_t dim = config_.dim, hidden = config_.mlp_hidden, vocab = config_.vocab_size;
  const int64_t d = config_.attention.head_dim;
  const int64_t q_width = int64_t{config_.attention.num_heads} * d;
  const int64_t kv_width = int64_t{config_.attention.num_kv_heads} * d;
  const int64_t q_rows = config_.attention_gate ? 2 * q_width : q_width;  // [q | gate] per head
  std::vector<Slot> out = {{"embed", &embed_, &embed_packed_, {vocab, dim}}};
  for (size_t i = 0; i < layers_.size(); ++i) {
    Layer& l = layers_[i];
    const std::string p = absl::StrCat("layers.", i, ".");
    out.push_back({p + "attn_norm", &l.attn_norm, nullptr, {dim}});
    if (l.mixer == kMamba2Mixer) {
      const int64_t inner = config_.ssm_inner, heads = config_.ssm_heads;
      const int64_t groups = config_.ssm_groups;
      const int64_t channels = inner + 2 * groups * config_.ssm_state;  // x, B, C
      out.push_back({p + "ssm_in", &l.in_proj, &l.packed[kInProj],
                     {inner + channels + heads, dim}});  // z | xBC | dt
      out.push_back({p + "ssm_conv_w", &l.conv_w, nullptr, {channels, config_.conv_kernel}});
      out.push_back({p + "ssm_conv_b", &l.conv_b, nullptr, {channels}});
      out.push_back({p + "ssm_dt_bias", &l.dt_bias, nullptr, {heads}});
      out.push_back({p + "ssm_a", &l.ssm_a, nullptr, {heads, 1}});
      out.push_back({p + "ssm_d", &l.ssm_d, nullptr, {heads, 1}});
      out.push_back({p + "ssm_norm", &l.ssm_norm, nullptr, {groups, inner / groups}});
      out.push_back({p + "ssm_out", &l.out_proj, &l.packed[kOutProj], {dim, inner}});
    } else if (l.mixer == kGatedDeltaNetMixer) {
      const int64_t nv = config_.ssm_heads, values = config_.ssm_inner;
      const int64_t channels = 2 * int64_t{config_.ssm_groups} * config_.ssm_state + values;
      out.push_back({p + "gdn_qkv", &l.in_proj, &l.packed[kInProj], {channels, dim}});
      out.push_back({p + "gdn_z", &l.gdn_z, &l.packed[kGdnZ], {values, dim}});
      out.push_back({p + "gdn_beta", &l.gdn_beta, &l.packed[kGdnBeta], {nv, dim}});
      out.push_back({p + "gdn_alpha", &l.gdn_alpha, &l.packed[kGdnAlpha], {nv, dim}});
      out.push_back({p + "ssm_conv_w", &l.conv_w, nullptr, {channels, config_.conv_kernel}});
      out.push_back({p + "ssm_dt_bias", &l.dt_bias, nullptr, {nv}});
      out.push_back({p + "ssm_a", &l.ssm_a, nullptr, {nv}});
      out.push_back({p + "ssm_norm", &l.ssm_norm, nullptr, {values / nv}});
      out.push_back({p + "ssm_out", &l.out_proj, &l.packed[kOutProj], {dim, values}});
    } else if (l.mixer == kShortConvMixer) {
      out.push_back({p + "conv_in", &l.in_proj, &l.packed[kInProj], {3 * dim, dim}});  // b | c | x
      out.push_back({p + "conv_w", &l.conv_w, nullptr, {dim, config_.conv_kernel}});
      out.push_back({p + "conv_out", &l.out_proj, &l.packed[kOutProj], {dim, dim}});
    } else {
      out.push_back({p + "wq", &l.wq, &l.packed[kWq], {q_rows, dim}});
      out.push_back({p + "wk", &l.wk, &l.packed[kWk], {kv_width, dim}});
      out.push_back({p + "wv", &l.wv, &l.packed[kWv], {kv_width, dim}});
      out.push_back({p + "wo", &l.wo, &l.packed[kWo], {dim, q_width}});
    }
    if (config_.HasExperts(int(i))) {
      const int64_t e = config_.experts, f = config_.expert_hidden;
      const int64_t shared = config_.shared_expert_hidden;
      out.push_back({p + "mlp_norm", &l.mlp_norm, nullptr, {dim}});
      out.push_back({p + "router", &l.router, &l.packed[kRouter], {e, dim}});
      if (config_.expert_routing == "sigmoid") {
        out.push_back({p + "expert_bias", &l.expert_bias, nullptr, {e}});
      }
      if (shared > 0) {
        out.push_back({p + "w_gate", &l.w_gate, &l.packed[kWGate], {shared, dim}});
        out.push_back({p + "w_up", &l.w_up, &l.packed[kWUp], {shared, dim}});
        out.push_back({p + "w_down", &l.w_down, &l.packed[kWDown], {dim, shared}});
        if (config_.shared_expert_gate) {
          out.push_back({p + "shared_gate", &l.shared_gate, nullptr, {dim}});
        }
      }
      l.experts.resize(size_t(e));
      for (int64_t j = 0; j < e; ++j) {
        Expert& x = l.experts[size_t(j)];
        const std::string q = absl::StrCat(p, "experts.", j, ".");
        out.push_back({q + "w_gate", &x.gate, &x.gate_packed, {f, dim}});
        out.push_back({q + "w_up", &x.up, &x.up_packed, {f, dim}});
        out.push_back({q + "w_down", &x.down, &x.down_packed, {dim, f}});
      }
    } else if (config_.mlp) {
      out.push_back({p + "mlp_norm", &l.mlp_norm, nullptr, {dim}});
      out.push_back({p + "w_gate", &l.w_gate, &l.packed[kWGate], {hidden, dim}});
      out.push_back({p + "w_up", &l.w_up, &l.packed[kWUp], {hidden, dim}});
      out.push_back({p + "w_down", &l.w_down, &l.packed[kWDown], {dim, hidden}});
    }
    if (l.mixer == kAttentionMixer && config_.attention_bias) {
      out.push_back({p + "bq", &l.bq, nullptr, {q_width}});
      out.push_back({p + "bk", &l.bk, nullptr, {kv_width}});
      out.push_back({p + "bv", &l.bv, nullptr, {kv_width}});
    }
    if (l.mixer == kAttentionMixer && config_.qk_head_norm) {
      out.push_back({p + "q_norm", &l.q_norm, nullptr, {d}});
      out.push_back({p + "k_norm", &l.k_norm, nullptr, {d}});
    }
  }
  out.push_back({"norm", &norm_, nullptr, {dim}});
  if (!config_.tie_embeddings) out.push_back({"head", &head_, &head_packed_, {vocab, dim}});
  return out;
}

absl::StatusOr<std::unique_ptr<Model>> Model::Create(const ModelConfig& config,
                                                     uint64_t seed) {
  auto created = CreateEmpty(config);
  if (!created.ok()) return created.status();
  std::unique_ptr<Model> m = std::move(created).value();
  absl::Status init = CatchTorch("initialising model", [&]() -> absl::Status {
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    const double out_std = 0.02 / std::sqrt(2.0 * config.num_layers);
    auto normal = [&](std::vector<int64_t> shape, double std) {
      return at::normal(0.0, std, shape, gen, at::kFloat);
    };
    // Gains 1, biases 0, matrices N(0, 0.02), residual outputs (wo, w_down) N(0, out_std),
    // drawn in the order the model has always drawn them (embedding, then each layer's
    // matrices, then the head) so a seed gives the weights it gave before.
    for (Slot& slot : m->Slots()) {
      const std::string& n = slot.name;
      if (absl::EndsWith(n, "norm")) {
        *slot.dense = at::ones(slot.shape);
      } else if (absl::EndsWith(n, ".ssm_a")) {  // A = -exp(A_log), A_log in [0, log 16]
        *slot.dense = -at::exp(at::rand(slot.shape, gen) * std::log(16.0));
      } else if (absl::EndsWith(n, ".ssm_d") || absl::EndsWith(n, ".ssm_dt_bias")) {
        *slot.dense = at::ones(slot.shape);
      } else if (absl::EndsWith(n, ".ssm_conv_b") || absl::EndsWith(n, ".expert_bias")) {
        *slot.dense = at::zeros(slot.shape);
      } else if (absl::EndsWith(n, "_conv_w") || absl::EndsWith(n, ".conv_w")) {
        *slot.dense = normal(slot.shape, 0.5);
      } else if (absl::EndsWith(n, ".bq") || absl::EndsWith(n, ".bk") ||
                 absl::EndsWith(n, ".bv")) {
        *slot.dense = at::zeros(slot.shape);
      } else if (n == "head") {
        continue;  // after the layers, below
      } else {
        const bool residual = absl::EndsWith(n, ".wo") || absl::EndsWith(n, ".w_down") ||
                              absl::EndsWith(n, "_out");
        *slot.dense = normal(slot.shape, residual ? out_std : 0.02);
      }
    }
    // Tied: the head is the embedding tensor itself (one copy; NamedParameters lists it
    // once, as "embed").
    m->head_ = config.tie_embeddings ? m->embed_ : normal({config.vocab_size, config.dim}, 0.02);
    return absl::OkStatus();
  });
  if (!init.ok()) return init;
  m->ChooseStepPath();
  return m;
}

attention::NamedTensors Model::NamedParameters() const {
  attention::NamedTensors out;
  // Each layer's slots, then its attention module's own parameters ("layers.N.attn.NAME").
  int layer = -1;
  auto module_parameters = [&] {
    if (layer < 0 || layers_[layer].attention == nullptr) return;
    for (auto& [name, t] : layers_[layer].attention->NamedParameters()) {
      out.emplace_back(absl::StrCat("layers.", layer, ".attn.", name), t);
    }
  };
  for (const Slot& slot : const_cast<Model*>(this)->Slots()) {
    const int slot_layer =
        absl::StartsWith(slot.name, "layers.") ? std::stoi(slot.name.substr(7)) : -1;
    if (slot_layer != layer) {
      module_parameters();
      layer = slot_layer;
    }
    if (slot.dense->defined()) out.emplace_back(slot.name, *slot.dense);
  }
  module_parameters();
  return out;
}

std::vector<std::pair<std::string, Model::Packed>> Model::PackedParameters() const {
  std::vector<std::pair<std::string, Packed>> out;
  for (const Slot& slot : const_cast<Model*>(this)->Slots()) {
    if (slot.packed != nullptr && *slot.packed != nullptr) out.emplace_back(slot.name, *slot.packed);
  }
  return out;
}

bool Model::HasPackedWeights() const { return !PackedParameters().empty(); }

int64_t Model::ParameterCount() const {
  int64_t n = 0;
  for (const auto& [name, t] : NamedParameters()) n += t.numel();
  for (const auto& [name, p] : PackedParameters()) n += p->out() * p->in();
  return n;
}

int64_t Model::WeightBytes() const {
  int64_t n = 0;
  for (const auto& [name, t] : NamedParameters()) n += int64_t(t.nbytes());
  for (const auto& [name, p] : PackedParameters()) n += p->bytes();
  if (bf16_ != nullptr) {
    for (const auto& layer : bf16_->layers) {
      for (const Bf16Matrix& w : layer) n += int64_t(w.packed.size() * sizeof(uint16_t));
    }
    n += int64_t(bf16_->head.packed.size() * sizeof(uint16_t));
  }
  return n;
}

std::string Model::WeightTypes() const {
  std::map<std::string, int64_t> bytes;
  int64_t total = 0;
  for (const auto& [name, p] : PackedParameters()) {
    bytes[weights::WeightTypeName(p->type())] += p->bytes();
    total += p->bytes();
  }
  if (total == 0) return "F32";
  std::vector<std::pair<int64_t, std::string>> order;
  for (const auto& [type, n] : bytes) order.emplace_back(-n, type);
  std::sort(order.begin(), order.end());
  std::string out;
  for (const auto& [n, type] : order) {
    absl::StrAppend(&out, out.empty() ? "" : ", ", type, " ", (-n * 100 + total / 2) / total, "%");
  }
  return out;
}

int64_t Model::StateBytes(int64_t context) const {
  int64_t total = 0;
  for (int l = 0; l < config_.num_layers; ++l) {
    total += config_.IsAttention(l)
                 ? attention::StateBytesPerLayer(config_.attention, context)
                 : RecurrentState::BytesOf(config_, config_.Mixer(l));
  }
  return total;
}

std::vector<Model::MixerBytes> Model::StateBytesByMixer(int64_t context) const {
  std::vector<MixerBytes> out;
  for (int l = 0; l < config_.num_layers; ++l) {
    const std::string& mixer = config_.Mixer(l);
    auto it = std::find_if(out.begin(), out.end(),
                           [&](const MixerBytes& m) { return m.mixer == mixer; });
    if (it == out.end()) it = out.insert(out.end(), MixerBytes{mixer, 0, 0});
    it->layers += 1;
    it->bytes += config_.IsAttention(l) ? attention::StateBytesPerLayer(config_.attention, context)
                                        : RecurrentState::BytesOf(config_, mixer);
  }
  return out;
}

int64_t Model::BreakEvenContext() const {
  if (!config_.HasRecurrent()) return attention::BreakEvenContext(config_.attention);
  // Against the same model with every layer softmax attention (a KV cache of Hkv heads
  // of D keys and values per token per layer, stored as this model's are): the first
  // context where this one's state is smaller. StateBytes grows no faster than that
  // cache, so the search is monotone.
  const int64_t per_token =
      int64_t{config_.num_layers} * attention::KvBytesPerToken(config_.attention);
  auto smaller = [&](int64_t c) { return StateBytes(c) < per_token * c; };
  int64_t hi = 1;
  while (!smaller(hi) && hi < config_.max_context) hi *= 2;
  if (!smaller(hi)) return 0;
  int64_t lo = hi / 2;  // not smaller at lo (or lo == 0)
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    (smaller(mid) ? hi : lo) = mid;
  }
  return hi;
}

attention::TensorShapes Model::StateShapes(int layer, int64_t position) const {
  const Layer& l = layers_[size_t(layer)];
  if (l.attention != nullptr) return l.attention->StateShapes(position);
  return RecurrentState::Shapes(config_, l.mixer);
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
      if (layers_[l].attention != nullptr) {
        state->layers_.push_back(layers_[l].attention->RestoreState(position, layers[l]));
      } else {
        state->layers_.push_back(
            RecurrentState::Restore(config_, layers_[l].mixer, position, layers[l]));
      }
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
      // Packed matrices by their bytes (an fp32 model has none: its digest is unchanged).
      for (const auto& [name, p] : PackedParameters()) {
        weights.Update(name);
        weights.Update(weights::WeightTypeName(p->type()));
        for (int64_t d : {p->out(), p->in()}) weights.Update(&d, sizeof d);
        weights.Update(p->data(), size_t(p->bytes()));
      }
      weights_digest_->digest = weights.Finish();
    });
    // Run-time knobs that leave the arithmetic alone are not part of the identity.
    ModelConfig identity = config_;
    identity.attention.max_state_bytes_per_layer = 0;
    identity.attention.reference_kernels = false;
    Sha256 h;
    h.Update(ModelConfigToText(identity));
    h.Update(ModelConfigExtensionText(identity));  // empty unless the config has such fields
    h.Update(weights_digest_->digest.data(), weights_digest_->digest.size());
    if (bf16_ != nullptr) h.Update("weights bf16");  // other decode arithmetic
    // bf16 states round where fp32 ones do not: a state continues byte-identically only
    // on a server that stores it alike. (Not in the config's text: a serving choice.)
    if (attention::HasFixedState(config_.attention) && config_.attention.state_bf16) {
      h.Update("state bf16");
    }
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
      Layer l{from.attn_norm, from.wq,     from.wk,   from.wv,     from.wo,
              from.mlp_norm,  from.w_gate, from.w_up, from.w_down, nullptr,
              from.bq,        from.bk,     from.bv,   from.q_norm, from.k_norm,
              from.packed,    from.mixer,  from.in_proj, from.out_proj, from.conv_w,
              from.conv_b,    from.dt_bias, from.ssm_a, from.ssm_d, from.ssm_norm,
              from.gdn_z,     from.gdn_beta, from.gdn_alpha, from.router, from.expert_bias,
              from.shared_gate, from.experts};
      if (from.attention == nullptr) {  // a recurrent layer: shared as it is
        m->layers_.push_back(std::move(l));
        continue;
      }
      auto attn = attention::CreateAttention(config.attention);
      if (!attn.ok()) return attn.status();
      l.attention = std::move(attn).value();
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
  m->embed_packed_ = embed_packed_;
  m->norm_ = norm_;
  m->head_ = head_;
  m->head_packed_ = head_packed_;
  m->inv_freq_ = inv_freq_;
  m->weights_digest_ = weights_digest_;
  m->bf16_ = bf16_;
  m->ChooseStepPath();
  return m;
}

void Model::UseBf16Weights() {
  auto copies = std::make_shared<Bf16Weights>();
  // (out, in) contiguous fp32; matrices kept packed get no copy (an empty Bf16Matrix).
  auto pack = [](const at::Tensor& w) {
    if (!w.defined()) return Bf16Matrix{};
    at::Tensor c = w.detach().to(at::kFloat).contiguous();
    return PackBf16(c.data_ptr<float>(), c.size(0), c.size(1));
  };
  for (const Layer& l : layers_) {
    copies->layers.push_back({pack(l.wq), pack(l.wk), pack(l.wv), pack(l.wo), pack(l.w_gate),
                              pack(l.w_up), pack(l.w_down), pack(l.in_proj), pack(l.out_proj),
                              pack(l.gdn_z), pack(l.gdn_beta), pack(l.gdn_alpha),
                              pack(l.router)});
  }
  copies->head = pack(head_);
  bf16_ = std::move(copies);
}

std::unique_ptr<DecodeState> Model::NewState() const {
  auto state = std::make_unique<DecodeState>();
  for (const Layer& l : layers_) {
    if (l.attention != nullptr) {
      state->layers_.push_back(l.attention->NewState());
    } else {
      state->layers_.push_back(std::make_unique<RecurrentState>(config_, l.mixer));
    }
  }
  state->owner_ = this;
  return state;
}

at::Tensor Model::Run(const at::Tensor& tokens, const at::Tensor& positions,
                      const AttendFn& attend, const RecurrentStateFn& state_of) const {
  const int64_t b = tokens.size(0), t = tokens.size(1);
  const int64_t h = config_.attention.num_heads, d = config_.attention.head_dim;
  const int64_t hkv = config_.attention.num_kv_heads;
  const double eps = config_.norm_eps;
  const double rs = config_.residual_scale;
  // RoPE angles in fp64 so that long positions keep their precision: (B, T, 1, D/2).
  at::Tensor angles = (positions.to(at::kDouble).unsqueeze(-1) * inv_freq_).unsqueeze(2);
  at::Tensor cos = angles.cos().to(at::kFloat), sin = angles.sin().to(at::kFloat);

  at::Tensor x;  // (B, T, dim)
  if (embed_packed_ == nullptr) {
    x = at::embedding(embed_, tokens);
  } else {
    at::Tensor ids = tokens.reshape({-1}).contiguous();
    x = at::empty({ids.size(0), config_.dim}, at::kFloat);
    for (int64_t i = 0; i < ids.size(0); ++i) {
      embed_packed_->DequantizeRowTo(ids[i].item<int64_t>(), x[i].data_ptr<float>());
    }
    x = x.view({b, t, config_.dim});
  }
  if (config_.embedding_scale != 1.0f) x = x * config_.embedding_scale;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& l = layers_[i];
    auto lin = [&](const at::Tensor& in, Matrix m) { return LinearRef(in, l.dense(m), l.packed[m]); };
    at::Tensor hn = RmsNorm(x, l.attn_norm, eps);
    at::Tensor mixed;  // (B, T, dim)
    if (l.attention == nullptr) {
      std::vector<at::Tensor> rows;  // each sequence through its own state
      for (int64_t s = 0; s < b; ++s) {
        rows.push_back(RecurrentRef(l, hn[s].contiguous(), state_of(int(i), s)));
      }
      mixed = at::stack(rows);
    } else {
      at::Tensor q = lin(hn, kWq), k = lin(hn, kWk), v = lin(hn, kWv);  // (B, T, H*D), ...
      at::Tensor gate;  // (B, T, H*D): Qwen3.5's per-head [q | gate] rows
      if (config_.attention_gate) {
        at::Tensor qg = q.view({b, t, h, 2, d});
        gate = qg.select(3, 1).reshape({b, t, h * d});
        q = qg.select(3, 0).reshape({b, t, h * d});
      }
      if (config_.attention_bias) {
        q = q + l.bq;
        k = k + l.bk;
        v = v + l.bv;
      }
      q = q.view({b, t, h, d});
      k = k.view({b, t, hkv, d});
      if (config_.qk_head_norm) {  // per head, over D
        q = RmsNorm(q, l.q_norm, eps);
        k = RmsNorm(k, l.k_norm, eps);
      }
      if (config_.rope) {
        q = Rope(q, cos, sin);
        k = Rope(k, cos, sin);
      }
      // Granite's attention scale in place of the modules' 1/sqrt(D).
      if (config_.attention_scale != 0) q = q * (config_.attention_scale * std::sqrt(double(d)));
      // (B, T, H, D) -> (B, H, T, D); k, v with Hkv heads.
      at::Tensor o = attend(*l.attention, int(i), q.transpose(1, 2), k.transpose(1, 2),
                            v.view({b, t, hkv, d}).transpose(1, 2));  // (B, H, T, Dv)
      at::Tensor heads_out = o.transpose(1, 2).reshape({b, t, h * d});
      if (gate.defined()) heads_out = heads_out * at::sigmoid(gate);
      mixed = lin(heads_out, kWo);
    }
    x = x + (rs == 1.0 ? mixed : mixed * rs);
    if (config_.mlp) {
      at::Tensor mn = RmsNorm(x, l.mlp_norm, eps);
      at::Tensor mlp = config_.HasExperts(int(i))
                           ? MoeRef(l, mn)
                           : lin(at::silu(lin(mn, kWGate)) * lin(mn, kWUp), kWDown);
      x = x + (rs == 1.0 ? mlp : mlp * rs);
    }
  }
  at::Tensor logits = LinearRef(RmsNorm(x, norm_, eps), head_, head_packed_);  // (B, T, V)
  if (config_.logit_scale != 1.0f) logits = logits / config_.logit_scale;
  return logits;
}

at::Tensor Model::RecurrentRef(const Layer& l, const at::Tensor& hn,
                               attention::AttentionState& state) const {
  auto& st = static_cast<RecurrentState&>(state);
  const int64_t t = hn.size(0), dim = config_.dim, k = config_.conv_kernel;
  at::Tensor proj = LinearRef(hn, l.in_proj, l.packed[kInProj]).contiguous();  // (T, in_proj)
  const int64_t ld = proj.size(1);
  const float* p = proj.data_ptr<float>();
  at::Tensor y;
  if (l.mixer == kGatedDeltaNetMixer) {
    // proj is q | k | v (C = 2 n_k d_k + n_v d_v); z, beta and alpha their own products.
    const int64_t nk = config_.ssm_groups, nv = config_.ssm_heads, dk = config_.ssm_state;
    const int64_t values = config_.ssm_inner, dv = values / nv, channels = ld;
    at::Tensor z = LinearRef(hn, l.gdn_z, l.packed[kGdnZ]).contiguous();          // (T, n_v d_v)
    at::Tensor beta = LinearRef(hn, l.gdn_beta, l.packed[kGdnBeta]).contiguous();    // (T, n_v)
    at::Tensor alpha = LinearRef(hn, l.gdn_alpha, l.packed[kGdnAlpha]).contiguous();  // (T, n_v)
    at::Tensor qkv = at::empty({t, channels}, at::kFloat);
    const mixer::ConvWeights cw{l.conv_w.data_ptr<float>(), nullptr, channels, k, /*silu=*/true};
    mixer::CausalConv1dPrefillReference(cw, p, ld, t, st.conv(), qkv.data_ptr<float>(), channels);
    const mixer::GdnWeights gw{l.ssm_a.data_ptr<float>(), l.dt_bias.data_ptr<float>(), nk, nv,
                               dk, dv, config_.norm_eps};
    const float* c = qkv.data_ptr<float>();
    const mixer::GdnInputs in{c, c + nk * dk, c + 2 * nk * dk, channels,
                              beta.data_ptr<float>(), nv, alpha.data_ptr<float>(), nv};
    y = at::empty({t, values}, at::kFloat);
    mixer::GdnPrefillReference(gw, in, t, st.ssm(), y.data_ptr<float>(), values);
    mixer::GdnGatedRmsNorm(y.data_ptr<float>(), values, z.data_ptr<float>(), values,
                           l.ssm_norm.data_ptr<float>(), t, nv, dv, config_.norm_eps,
                           y.data_ptr<float>(), values);
    if (config_.gdn_grouped_heads) {  // back to the file's head order for out_proj
      at::Tensor file_order = at::empty_like(y);
      UngroupHeads(y.data_ptr<float>(), t, nk, nv, dv, file_order.data_ptr<float>());
      y = file_order;
    }
  } else if (l.mixer == kShortConvMixer) {
    y = at::empty({t, dim}, at::kFloat);  // c * conv(b * x)
    mixer::ShortConvPrefillReference(l.conv_w.data_ptr<float>(), dim, k, p, ld, t, st.conv(),
                                     y.data_ptr<float>(), dim);
  } else {
    const int64_t inner = config_.ssm_inner, groups = config_.ssm_groups;
    const int64_t n = config_.ssm_state, channels = inner + 2 * groups * n;
    // Columns of proj: z [0, I), xBC [I, I + C), dt [I + C, I + C + H).
    at::Tensor xbc = at::empty({t, channels}, at::kFloat);
    const mixer::ConvWeights cw{l.conv_w.data_ptr<float>(), l.conv_b.data_ptr<float>(), channels,
                                k, /*silu=*/true};
    mixer::CausalConv1dPrefillReference(cw, p + inner, ld, t, st.conv(), xbc.data_ptr<float>(),
                                        channels);
    const mixer::SsdWeights sw{l.ssm_a.data_ptr<float>(), l.ssm_d.data_ptr<float>(),
                               l.dt_bias.data_ptr<float>(), config_.ssm_heads,
                               inner / config_.ssm_heads, groups, n};
    const float* xp = xbc.data_ptr<float>();
    const mixer::SsdInputs in{xp, channels, xp + inner, xp + inner + groups * n, channels,
                              p + inner + channels, ld};
    y = at::empty({t, inner}, at::kFloat);
    mixer::SsdPrefillReference(sw, in, t, st.ssm(), y.data_ptr<float>(), inner);
    mixer::GatedGroupRmsNorm(y.data_ptr<float>(), inner, p, ld, l.ssm_norm.data_ptr<float>(), t,
                             inner, groups, config_.norm_eps, y.data_ptr<float>(), inner);
  }
  st.Advance(t);
  return LinearRef(y, l.out_proj, l.packed[kOutProj]);  // (T, dim)
}

at::Tensor Model::LinearRef(const at::Tensor& x, const at::Tensor& dense, const Packed& packed) {
  if (packed == nullptr) return at::linear(x, dense);
  at::Tensor w = at::empty({packed->out(), packed->in()}, at::kFloat);  // (out, in)
  for (int64_t r = 0; r < packed->out(); ++r) packed->DequantizeRowTo(r, w[r].data_ptr<float>());
  return at::linear(x, w);
}

at::Tensor Model::Forward(const at::Tensor& tokens) const {
  const int64_t t = tokens.size(1);
  at::Tensor positions = at::arange(t, at::kLong).unsqueeze(0).expand({tokens.size(0), t});
  // Recurrent layers from fresh states, one per sequence.
  std::vector<std::unique_ptr<DecodeState>> fresh;
  for (int64_t s = 0; s < tokens.size(0); ++s) fresh.push_back(NewState());
  return Run(
      tokens, positions,
      [](const attention::Attention& a, int, const at::Tensor& q, const at::Tensor& k,
         const at::Tensor& v) { return a.Parallel(q, k, v); },
      [&](int layer, int64_t s) -> attention::AttentionState& { return *fresh[s]->layers_[layer]; });
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
                            },
                            [&](int layer, int64_t) -> attention::AttentionState& {
                              return *state.layers_[layer];
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
                            },
                            [&](int layer, int64_t s) -> attention::AttentionState& {
                              return *states[s]->layers_[layer];
                            });
    return logits.select(1, 0);  // (B, V)
  });
}

}  // namespace attnserve::model
