#include "server/model/config.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include "absl/strings/str_cat.h"
#include "attnserve/v1/model_config.pb.h"

namespace attnserve::model {
namespace {

class CollectErrors : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    if (first_.empty()) first_ = absl::StrCat("line ", line + 1, ":", column + 1, ": ", message);
  }
  const std::string& first() const { return first_; }

 private:
  std::string first_;
};

absl::Status Invalid(const std::string& field, const std::string& rule, int64_t got) {
  return absl::InvalidArgumentError(absl::StrCat(field, " ", rule, ", got ", got));
}

}  // namespace

absl::Status ValidateModelConfig(const ModelConfig& c) {
  if (c.vocab_size < kMinVocabSize) {
    return Invalid("vocab_size", absl::StrCat("must be >= ", kMinVocabSize,
                                              " (256 bytes + special tokens)"),
                   c.vocab_size);
  }
  if (c.dim < 1) return Invalid("dim", "must be >= 1", c.dim);
  if (c.num_layers < 1) return Invalid("num_layers", "must be >= 1", c.num_layers);
  // A model without MLPs (pure Mamba-2) has no hidden width: GGUF's feed_forward_length 0.
  if (c.mlp && c.mlp_hidden < 1) return Invalid("mlp_hidden", "must be >= 1", c.mlp_hidden);
  if (c.max_context < 1) return Invalid("max_context", "must be >= 1", c.max_context);
  if (!(c.rope_theta > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("rope_theta must be > 0, got ", c.rope_theta));
  }
  if (!(c.norm_eps > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("norm_eps must be > 0, got ", c.norm_eps));
  }
  if (absl::Status s = attention::ValidateAttentionOptions(c.attention); !s.ok()) return s;
  if (c.attention.value_dim != c.attention.head_dim) {
    return absl::InvalidArgumentError("value_dim must equal head_dim");
  }
  // dim need not equal num_heads * head_dim: the projections map between the two.
  if (!c.mixers.empty() && int(c.mixers.size()) != c.num_layers) {
    return Invalid("mixers", absl::StrCat("must list one mixer per layer (", c.num_layers, ")"),
                   int64_t(c.mixers.size()));
  }
  bool mamba2 = false, shortconv = false, gdn = false;
  for (const std::string& m : c.mixers) {
    if (m != kAttentionMixer && m != kMamba2Mixer && m != kShortConvMixer &&
        m != kGatedDeltaNetMixer) {
      return absl::InvalidArgumentError(absl::StrCat(
          "mixers: '", m, "' is not a mixer (", kAttentionMixer, ", ", kMamba2Mixer, ", ",
          kShortConvMixer, ", ", kGatedDeltaNetMixer, ")"));
    }
    mamba2 = mamba2 || m == kMamba2Mixer;
    shortconv = shortconv || m == kShortConvMixer;
    gdn = gdn || m == kGatedDeltaNetMixer;
  }
  if (c.rope_dims < 0 || c.rope_dims % 2 != 0 || c.rope_dims > c.attention.head_dim) {
    return Invalid("rope_dims", absl::StrCat("must be even and at most head_dim ",
                                             c.attention.head_dim),
                   c.rope_dims);
  }
  for (int s : c.rope_sections) {
    if (s < 0) return Invalid("rope_sections", "must be >= 0", s);
  }
  if (mamba2 || gdn) {
    if (c.ssm_heads < 1 || c.ssm_groups < 1 || c.ssm_heads % c.ssm_groups != 0) {
      return Invalid("ssm_groups", absl::StrCat("must divide ssm_heads ", c.ssm_heads), c.ssm_groups);
    }
    if (c.ssm_inner < 1 || c.ssm_inner % c.ssm_heads != 0) {
      return Invalid("ssm_inner", absl::StrCat("must be a multiple of ssm_heads ", c.ssm_heads),
                     c.ssm_inner);
    }
    if (c.ssm_state < 1) return Invalid("ssm_state", "must be >= 1", c.ssm_state);
  }
  if ((mamba2 || shortconv || gdn) && c.conv_kernel < 2) {
    return Invalid("conv_kernel", "must be >= 2", c.conv_kernel);
  }
  if (!(c.embedding_scale > 0) || !(c.residual_scale > 0) || !(c.logit_scale > 0) ||
      !(c.attention_scale >= 0)) {
    return absl::InvalidArgumentError("embedding_scale, residual_scale and logit_scale must be "
                                      "> 0, attention_scale >= 0");
  }
  if (c.experts < 0 || c.experts_used < 0 || c.experts_used > c.experts ||
      (c.experts > 0 && (c.experts_used < 1 || c.expert_hidden < 1)) ||
      c.shared_expert_hidden < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "experts ", c.experts, ", experts_used ", c.experts_used, ", expert_hidden ",
        c.expert_hidden, ": a MoE needs 1 <= experts_used <= experts and expert_hidden >= 1"));
  }
  if (c.expert_routing != "softmax" && c.expert_routing != "softmax_topk" &&
      c.expert_routing != "sigmoid") {
    return absl::InvalidArgumentError(absl::StrCat("expert_routing '", c.expert_routing,
                                                   "' is not softmax, softmax_topk or sigmoid"));
  }
  if (c.bos_token_id < -1 || c.bos_token_id >= c.vocab_size) {
    return Invalid("bos_token_id", absl::StrCat("must be -1 (none) or in [0, vocab_size ",
                                                c.vocab_size, ")"),
                   c.bos_token_id);
  }
  for (int id : c.eos_token_ids) {
    if (id < 0 || id >= c.vocab_size) {
      return Invalid("eos_token_ids",
                     absl::StrCat("must be in [0, vocab_size ", c.vocab_size, ")"), id);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelConfig> ParseModelConfig(std::string_view text) {
  v1::ModelConfig proto;
  google::protobuf::TextFormat::Parser parser;
  CollectErrors errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(std::string(text), &proto)) {
    return absl::InvalidArgumentError(
        absl::StrCat("model config is not valid ModelConfig text format: ", errors.first()));
  }
  ModelConfig c;
  const ModelConfig d;  // defaults for omitted (zero) fields
  c.name = proto.name().empty() ? d.name : proto.name();
  c.vocab_size = proto.vocab_size() ? proto.vocab_size() : d.vocab_size;
  c.dim = proto.dim();
  c.num_layers = proto.num_layers();
  c.mlp_hidden = proto.mlp_hidden();
  c.rope_theta = proto.rope_theta() != 0 ? proto.rope_theta() : d.rope_theta;
  c.norm_eps = proto.norm_eps() != 0 ? proto.norm_eps() : d.norm_eps;
  c.max_context = proto.max_context() ? proto.max_context() : d.max_context;
  const v1::AttentionConfig& a = proto.attention();
  c.attention.module = a.module();
  c.attention.order = a.order();
  c.attention.qk_norm = a.qk_norm();
  c.attention.qk_temperature = a.qk_temperature();
  c.attention.learn_temperature = a.learn_temperature();
  c.attention.chunk_size = a.chunk_size() ? a.chunk_size() : d.attention.chunk_size;
  c.attention.decay_horizon = a.decay_horizon();
  c.attention.unscaled_query = a.unscaled_query();
  c.attention.num_heads = proto.num_heads();
  if (proto.num_kv_heads() < 0) {
    return Invalid("num_kv_heads", "must be >= 0 (0: num_heads)", proto.num_kv_heads());
  }
  c.attention.num_kv_heads = proto.num_kv_heads() ? proto.num_kv_heads() : proto.num_heads();
  c.attention.head_dim = proto.head_dim();
  c.attention.value_dim = proto.head_dim();
  c.tie_embeddings = proto.tie_embeddings();
  c.attention_bias = proto.attention_bias();
  c.qk_head_norm = proto.qk_head_norm();
  c.mixers.assign(proto.mixers().begin(), proto.mixers().end());
  c.ssm_inner = proto.ssm_inner();
  c.ssm_state = proto.ssm_state();
  c.ssm_heads = proto.ssm_heads();
  c.ssm_groups = proto.ssm_groups();
  c.conv_kernel = proto.conv_kernel();
  c.mlp = !proto.no_mlp();
  c.rope = !proto.no_rope();
  c.embedding_scale = proto.embedding_scale() != 0 ? proto.embedding_scale() : 1.0f;
  c.residual_scale = proto.residual_scale() != 0 ? proto.residual_scale() : 1.0f;
  c.logit_scale = proto.logit_scale() != 0 ? proto.logit_scale() : 1.0f;
  c.attention_scale = proto.attention_scale();
  c.bos_token_id = proto.has_bos_token_id() ? proto.bos_token_id() : d.bos_token_id;
  if (proto.eos_token_ids_size() > 0) {
    c.eos_token_ids.assign(proto.eos_token_ids().begin(), proto.eos_token_ids().end());
    if (c.eos_token_ids == std::vector<int>{-1}) c.eos_token_ids.clear();
  }
  c.tokenizer_class = proto.tokenizer_class();
  if (c.attention.module.empty()) {
    return absl::InvalidArgumentError("attention.module is missing");
  }
  if (absl::Status s = ValidateModelConfig(c); !s.ok()) return s;
  return c;
}

std::string ModelConfigToText(const ModelConfig& c) {
  v1::ModelConfig proto;
  proto.set_name(c.name);
  proto.set_vocab_size(c.vocab_size);
  proto.set_dim(c.dim);
  proto.set_num_layers(c.num_layers);
  proto.set_num_heads(c.attention.num_heads);
  // 0 for multi-head, so that the text (and the fingerprint) of a config from before
  // grouped-query attention does not change.
  proto.set_num_kv_heads(c.attention.num_kv_heads == c.attention.num_heads
                             ? 0
                             : c.attention.num_kv_heads);
  proto.set_head_dim(c.attention.head_dim);
  proto.set_mlp_hidden(c.mlp_hidden);
  proto.set_rope_theta(c.rope_theta);
  proto.set_norm_eps(c.norm_eps);
  proto.set_max_context(c.max_context);
  v1::AttentionConfig* a = proto.mutable_attention();
  a->set_module(c.attention.module);
  a->set_order(c.attention.order);
  a->set_qk_norm(c.attention.qk_norm);
  a->set_qk_temperature(c.attention.qk_temperature);
  a->set_learn_temperature(c.attention.learn_temperature);
  a->set_chunk_size(c.attention.chunk_size);
  a->set_decay_horizon(c.attention.decay_horizon);
  a->set_unscaled_query(c.attention.unscaled_query);
  const ModelConfig d;  // the byte tokenizer's ids are not printed (config.h)
  proto.set_tie_embeddings(c.tie_embeddings);
  proto.set_attention_bias(c.attention_bias);
  proto.set_qk_head_norm(c.qk_head_norm);
  // Printed only where they differ from a Llama's, so its text (its fingerprint) stays.
  for (const std::string& m : c.mixers) proto.add_mixers(m);
  proto.set_ssm_inner(c.ssm_inner);
  proto.set_ssm_state(c.ssm_state);
  proto.set_ssm_heads(c.ssm_heads);
  proto.set_ssm_groups(c.ssm_groups);
  proto.set_conv_kernel(c.conv_kernel);
  proto.set_no_mlp(!c.mlp);
  proto.set_no_rope(!c.rope);
  if (c.embedding_scale != 1.0f) proto.set_embedding_scale(c.embedding_scale);
  if (c.residual_scale != 1.0f) proto.set_residual_scale(c.residual_scale);
  if (c.logit_scale != 1.0f) proto.set_logit_scale(c.logit_scale);
  proto.set_attention_scale(c.attention_scale);
  if (c.bos_token_id != d.bos_token_id) proto.set_bos_token_id(c.bos_token_id);
  if (c.eos_token_ids != d.eos_token_ids) {
    if (c.eos_token_ids.empty()) proto.add_eos_token_ids(-1);
    for (int id : c.eos_token_ids) proto.add_eos_token_ids(id);
  }
  if (c.tokenizer_class != kByteTokenizerClass) proto.set_tokenizer_class(c.tokenizer_class);
  std::string out;
  google::protobuf::TextFormat::PrintToString(proto, &out);
  return out;
}

std::string ModelConfigExtensionText(const ModelConfig& c) {
  std::string out;
  if (c.attention_gate) out += "attention_gate: true\n";
  if (c.rope_dims != 0) absl::StrAppend(&out, "rope_dims: ", c.rope_dims, "\n");
  for (int s : c.rope_sections) absl::StrAppend(&out, "rope_sections: ", s, "\n");
  if (c.gdn_grouped_heads) out += "gdn_grouped_heads: true\n";
  if (c.experts > 0) {
    absl::StrAppend(&out, "experts: ", c.experts, "\nexperts_used: ", c.experts_used,
                    "\nexpert_hidden: ", c.expert_hidden, "\nshared_expert_hidden: ",
                    c.shared_expert_hidden, "\nshared_expert_gate: ", c.shared_expert_gate,
                    "\nexpert_routing: \"", c.expert_routing, "\"\nexpert_renormalize: ",
                    c.expert_renormalize, "\nexpert_weights_scale: ", c.expert_weights_scale,
                    "\nleading_dense_layers: ", c.leading_dense_layers, "\n");
  }
  return out;
}

const std::string& ModelConfig::Mixer(int l) const {
  static const std::string* const kAttention = new std::string(kAttentionMixer);
  return mixers.empty() ? *kAttention : mixers[size_t(l)];
}

bool ModelConfig::HasAttention() const {
  for (int l = 0; l < num_layers; ++l) {
    if (IsAttention(l)) return true;
  }
  return false;
}

bool ModelConfig::HasRecurrent() const {
  for (int l = 0; l < num_layers; ++l) {
    if (!IsAttention(l)) return true;
  }
  return false;
}

int64_t ParameterCount(const ModelConfig& c) {
  const int64_t dim = c.dim, hidden = c.mlp_hidden, vocab = c.vocab_size;
  const int64_t q_width = int64_t{c.attention.num_heads} * c.attention.head_dim;
  const int64_t kv_width = int64_t{c.attention.num_kv_heads} * c.attention.head_dim;
  const int64_t attention = (c.attention_gate ? 3 : 2) * q_width * dim  // wq (and gate), wo
                            + 2 * kv_width * dim        // wk, wv
                            + (c.attention.learn_temperature ? 1 : 0)
                            + (c.attention_bias ? q_width + 2 * kv_width : 0)
                            + (c.qk_head_norm ? 2 * c.attention.head_dim : 0);
  // Mamba-2: in_proj (z, xBC, dt), conv taps and bias over xBC, dt_bias, A, D, the norm,
  // out_proj. Short conv: in_proj (b, c, x), taps, out_proj.
  const int64_t conv = int64_t{c.ssm_inner} + 2 * int64_t{c.ssm_groups} * c.ssm_state;
  const int64_t mamba2 = (c.ssm_inner + conv + c.ssm_heads) * dim + conv * (c.conv_kernel + 1) +
                         3 * int64_t{c.ssm_heads} + c.ssm_inner + dim * c.ssm_inner;
  const int64_t shortconv = 3 * dim * dim + dim * c.conv_kernel + dim * dim;
  // Gated DeltaNet: qkv (C = 2 n_k d_k + n_v d_v), z, beta, alpha; taps; dt_bias, A; the
  // norm (d_v); out_proj.
  const int64_t gdn_conv = 2 * int64_t{c.ssm_groups} * c.ssm_state + c.ssm_inner;
  const int64_t gdn = (gdn_conv + c.ssm_inner + 2 * int64_t{c.ssm_heads}) * dim +
                      gdn_conv * c.conv_kernel + 2 * int64_t{c.ssm_heads} +
                      (c.ssm_heads > 0 ? c.ssm_inner / c.ssm_heads : 0) + dim * c.ssm_inner;
  int64_t layers = 0;
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string& m = c.Mixer(l);
    layers += dim  // the mixer's norm
              + (m == kMamba2Mixer       ? mamba2
                 : m == kShortConvMixer  ? shortconv
                 : m == kGatedDeltaNetMixer ? gdn
                                         : attention)
              + (!c.mlp ? 0
                 : !c.HasExperts(l) ? dim + 3 * dim * hidden  // its norm, w_gate, w_up, w_down
                                  : dim + int64_t{c.experts} * (dim + 3 * dim * c.expert_hidden) +
                                        3 * dim * c.shared_expert_hidden +
                                        (c.shared_expert_gate ? dim : 0));
  }
  return (c.tie_embeddings ? 1 : 2) * vocab * dim  // embedding (+ the untied head)
         + layers + dim;  // + final norm
}

}  // namespace attnserve::model
