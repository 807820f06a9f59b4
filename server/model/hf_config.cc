#include "server/model/hf_config.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/attention/options.h"

namespace attnserve::model {
namespace {

using Json = nlohmann::json;

absl::Status Bad(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(field, " ", why));
}

std::string Shown(const Json& v) { return v.dump(); }

// Typed fields of an object; absent or null keys leave the target as it is unless
// `required`. Errors name the field (with `prefix`, e.g. "attention.").
class Fields {
 public:
  Fields(const Json& object, std::string prefix) : j_(object), prefix_(std::move(prefix)) {}

  const Json* Find(const std::string& key) const {
    auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  absl::Status Int(const std::string& key, int64_t* out, bool required = false) const {
    const Json* v = Find(key);
    if (v == nullptr) return required ? Bad(prefix_ + key, "is missing") : absl::OkStatus();
    if (!v->is_number_integer()) return Bad(prefix_ + key, "must be an integer, got " + Shown(*v));
    *out = v->get<int64_t>();
    return absl::OkStatus();
  }
  absl::Status Int(const std::string& key, int* out, bool required = false) const {
    int64_t v = *out;
    if (absl::Status s = Int(key, &v, required); !s.ok()) return s;
    if (v < INT32_MIN || v > INT32_MAX) {
      return Bad(prefix_ + key, absl::StrCat("is out of range, got ", v));
    }
    *out = int(v);
    return absl::OkStatus();
  }
  absl::Status Float(const std::string& key, float* out) const {
    const Json* v = Find(key);
    if (v == nullptr) return absl::OkStatus();
    if (!v->is_number()) return Bad(prefix_ + key, "must be a number, got " + Shown(*v));
    *out = float(v->get<double>());
    return absl::OkStatus();
  }
  absl::Status Bool(const std::string& key, bool* out) const {
    const Json* v = Find(key);
    if (v == nullptr) return absl::OkStatus();
    if (!v->is_boolean()) return Bad(prefix_ + key, "must be true or false, got " + Shown(*v));
    *out = v->get<bool>();
    return absl::OkStatus();
  }
  absl::Status String(const std::string& key, std::string* out) const {
    const Json* v = Find(key);
    if (v == nullptr) return absl::OkStatus();
    if (!v->is_string()) return Bad(prefix_ + key, "must be a string, got " + Shown(*v));
    *out = v->get<std::string>();
    return absl::OkStatus();
  }

 private:
  const Json& j_;
  std::string prefix_;
};

#define RETURN_IF_ERROR(expr)                       \
  do {                                              \
    if (absl::Status s_ = (expr); !s_.ok()) return s_; \
  } while (0)

// The "attention" object: exactly AttentionConfig's fields.
absl::Status ReadAttention(const Json& a, attention::AttentionOptions* o) {
  if (!a.is_object()) return Bad("attention", "must be an object, got " + Shown(a));
  static const char* const kKnown[] = {"module",         "order",           "qk_norm",
                                       "qk_temperature", "learn_temperature", "chunk_size",
                                       "decay_horizon",  "unscaled_query"};
  for (const auto& [key, value] : a.items()) {
    if (std::find(std::begin(kKnown), std::end(kKnown), key) == std::end(kKnown)) {
      return Bad("attention." + key, absl::StrCat("is not an attention field (known: ",
                                                  absl::StrJoin(kKnown, ", "), ")"));
    }
  }
  Fields f(a, "attention.");
  RETURN_IF_ERROR(f.String("module", &o->module));
  RETURN_IF_ERROR(f.Int("order", &o->order));
  RETURN_IF_ERROR(f.Bool("qk_norm", &o->qk_norm));
  RETURN_IF_ERROR(f.Float("qk_temperature", &o->qk_temperature));
  RETURN_IF_ERROR(f.Bool("learn_temperature", &o->learn_temperature));
  RETURN_IF_ERROR(f.Int("chunk_size", &o->chunk_size));
  if (o->chunk_size == 0) o->chunk_size = attention::AttentionOptions{}.chunk_size;
  RETURN_IF_ERROR(f.Float("decay_horizon", &o->decay_horizon));
  RETURN_IF_ERROR(f.Bool("unscaled_query", &o->unscaled_query));
  return absl::OkStatus();
}

// The paper's attention_type values and what serves them.
absl::Status ReadAttentionType(const std::string& type, attention::AttentionOptions* o) {
  static const char kNorm[] = "gated_softmax_no_gate_L2norm_nodivS_noclamp";
  if (type == "softmax") {
    o->module = "softmax";
  } else if (type == kNorm) {
    o->module = "softmax_norm";
  } else if (type == "linear_elu") {
    o->module = "linear";
    o->unscaled_query = true;
  } else {
    return Bad("attention_type", absl::StrCat("'", type, "' is not served; served: softmax, ",
                                              kNorm, " (as softmax_norm), linear_elu (as "
                                              "linear with unscaled_query)"));
  }
  return absl::OkStatus();
}

// rope_scaling / rope_parameters: only plain RoPE.
absl::Status CheckRopeType(const std::string& field, const Json& v) {
  if (!v.is_object()) return Bad(field, "must be an object or null, got " + Shown(v));
  for (const char* key : {"rope_type", "type"}) {
    auto it = v.find(key);
    if (it != v.end() && *it != "default") {
      return Bad(absl::StrCat(field, ".", key),
                 absl::StrCat(Shown(*it), " is not supported: attnserve implements plain "
                              "RoPE (rope_type \"default\") only"));
    }
  }
  return absl::OkStatus();
}

absl::Status ReadRope(const Json& j, float* theta) {
  if (auto it = j.find("rope_scaling"); it != j.end() && !it->is_null()) {
    RETURN_IF_ERROR(CheckRopeType("rope_scaling", *it));
    // An object saying "default" and nothing else scales nothing.
    for (const auto& [key, value] : it->items()) {
      if (key != "rope_type" && key != "type") {
        return Bad("rope_scaling", "is not supported: attnserve implements plain RoPE only, got " +
                                       Shown(*it));
      }
    }
  }
  RETURN_IF_ERROR(Fields(j, "").Float("rope_theta", theta));
  if (auto it = j.find("rope_parameters"); it != j.end() && !it->is_null()) {
    RETURN_IF_ERROR(CheckRopeType("rope_parameters", *it));
    RETURN_IF_ERROR(Fields(*it, "rope_parameters.").Float("rope_theta", theta));
  }
  return absl::OkStatus();
}

// bos_token_id (null: none) and eos_token_id (an int, a list of ints, or null); absent,
// the family's defaults (LlamaConfig's 1 and 2).
absl::Status ReadSpecialTokens(const Json& j, ModelConfig* c, int default_bos = 1,
                               int default_eos = 2) {
  c->bos_token_id = default_bos;
  c->eos_token_ids = {default_eos};
  if (auto it = j.find("bos_token_id"); it != j.end()) {
    if (it->is_null()) {
      c->bos_token_id = -1;
    } else {
      RETURN_IF_ERROR(Fields(j, "").Int("bos_token_id", &c->bos_token_id));
    }
  }
  if (auto it = j.find("eos_token_id"); it != j.end()) {
    c->eos_token_ids.clear();
    if (it->is_number_integer()) {
      c->eos_token_ids.push_back(it->get<int>());
    } else if (it->is_array()) {
      for (const Json& id : *it) {
        if (!id.is_number_integer()) {
          return Bad("eos_token_id", "must be an integer or a list of integers, got " + Shown(*it));
        }
        c->eos_token_ids.push_back(id.get<int>());
      }
    } else if (!it->is_null()) {
      return Bad("eos_token_id", "must be an integer or a list of integers, got " + Shown(*it));
    }
  }
  return absl::OkStatus();
}

// The shortest decimal that reads back as `f`, as a JSON number (1e-05, not
// 9.99999974737875e-06).
double ShortestDouble(float f) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf - 1, f);
  *end = '\0';
  return std::strtod(buf, nullptr);
}

// Python's json module writes float("inf") as the bare word Infinity and nan as NaN,
// which no JSON parser takes; Mamba-2 and Granite configs carry time_step_limit
// [0.0, Infinity]. Outside strings they become 1e308 (beyond any real value: read as
// infinite where a field allows it; -Infinity likewise negative) and null.
std::string WithoutPythonNonFinite(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    if (in_string) {
      out += ch;
      if (ch == '\\' && i + 1 < text.size()) {
        out += text[++i];
      } else if (ch == '"') {
        in_string = false;
      }
    } else if (ch == '"') {
      in_string = true;
      out += ch;
    } else if (text.substr(i, 8) == "Infinity") {
      out += "1e308";
      i += 7;
    } else if (text.substr(i, 3) == "NaN") {
      out += "null";
      i += 2;
    } else {
      out += ch;
    }
  }
  return out;
}

// time_step_limit, the clamp of Mamba-2's dt: only (0, Infinity), which clamps nothing.
absl::Status CheckTimeStepLimit(const Json& j) {
  auto it = j.find("time_step_limit");
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  const bool unclamped = it->is_array() && it->size() == 2 && (*it)[0].is_number() &&
                         (*it)[1].is_number() && (*it)[0].get<double>() == 0 &&
                         (*it)[1].get<double>() >= 1e300;
  if (!unclamped) {
    return Bad("time_step_limit", Shown(*it) + " is not supported: attnserve's Mamba-2 layers "
                                  "do not clamp dt ([0.0, Infinity] only)");
  }
  return absl::OkStatus();
}

// A key that must be false (a bias attnserve's layers do not have).
absl::Status RefuseTrue(const Fields& f, const std::string& key, const std::string& why) {
  bool v = false;
  RETURN_IF_ERROR(f.Bool(key, &v));
  if (v) return Bad(key, "is true: " + why);
  return absl::OkStatus();
}

// layer_types (or its alias) as each layer's mixer: `attention` names the attention
// layers, `recurrent` the others (as `mixer`); absent: every layer `absent_mixer`.
absl::Status ReadLayerTypes(const Json& j, const std::vector<std::string>& keys, int layers,
                            const std::string& attention, const std::string& recurrent,
                            const std::string& mixer, const std::string& absent_mixer,
                            std::vector<std::string>* mixers) {
  for (const std::string& key : keys) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    if (!it->is_array() || int(it->size()) != layers) {
      return Bad(key, absl::StrCat("must list one of \"", attention, "\" or \"", recurrent,
                                   "\" per layer (", layers, "), got ", Shown(*it)));
    }
    mixers->clear();
    for (const Json& t : *it) {
      if (t == attention) {
        mixers->push_back(kAttentionMixer);
      } else if (t == recurrent) {
        mixers->push_back(mixer);
      } else {
        return Bad(key, absl::StrCat(Shown(t), " is not a layer type attnserve serves (\"",
                                     attention, "\", \"", recurrent, "\")"));
      }
    }
    return absl::OkStatus();
  }
  mixers->assign(size_t(layers), absent_mixer);
  return absl::OkStatus();
}

// The fields every recurrent family shares, then the family's own (hf_config.h).
absl::Status ParseRecurrentFamily(const Json& j, const std::string& model_type, ModelConfig* c,
                                  HfLayout* layout) {
  Fields f(j, "");
  const bool mamba2 = model_type == "mamba2", granite = model_type == "granitemoehybrid";
  const bool lfm2 = model_type == "lfm2";
  RETURN_IF_ERROR(f.Int("vocab_size", &c->vocab_size, /*required=*/true));
  RETURN_IF_ERROR(f.Int("hidden_size", &c->dim, true));
  RETURN_IF_ERROR(f.Int("num_hidden_layers", &c->num_layers, true));
  if (c->dim < 1) return Bad("hidden_size", absl::StrCat("must be >= 1, got ", c->dim));
  if (c->num_layers < 1) {
    return Bad("num_hidden_layers", absl::StrCat("must be >= 1, got ", c->num_layers));
  }
  // Mamba2Config has no positional table: a pure Mamba-2 model is bounded by nothing.
  c->max_context = mamba2 ? ModelConfig().max_context : lfm2 ? 128000 : 2048;
  RETURN_IF_ERROR(f.Int("max_position_embeddings", &c->max_context));
  RETURN_IF_ERROR(f.Int("max_context", &c->max_context));
  RETURN_IF_ERROR(f.String("tokenizer_class", &c->tokenizer_class));
  for (const char* dtype : {"torch_dtype", "dtype"}) {
    std::string ignored;  // the weights' own dtypes decide (safetensors.h)
    RETURN_IF_ERROR(f.String(dtype, &ignored));
  }
  RETURN_IF_ERROR(ReadSpecialTokens(j, c, mamba2 ? 0 : 1, 2));
  if (!lfm2) {  // LFM2's activations are fixed (SiLU) and its config names none
    std::string act = "silu";
    RETURN_IF_ERROR(f.String("hidden_act", &act));
    if (act != "silu") {
      return Bad("hidden_act", absl::StrCat("'", act, "' is not supported: attnserve's Mamba-2 "
                                            "conv and MLP use silu"));
    }
  }
  c->tie_embeddings = lfm2;  // Lfm2Config's default; Mamba2's and Granite's false
  RETURN_IF_ERROR(f.Bool("tie_word_embeddings", &c->tie_embeddings));
  if (lfm2) RETURN_IF_ERROR(f.Bool("tie_embedding", &c->tie_embeddings));
  RETURN_IF_ERROR(CheckTimeStepLimit(j));
  attention::AttentionOptions& a = c->attention;
  a.module = "softmax";
  c->rope_theta = lfm2 ? 1e6f : 10000.0f;
  if (mamba2) {
    // No attention layer: one head of dim names the shape a full-attention model of this
    // width would cache (the break-even's reference), as for a GGUF mamba2 file.
    a.num_heads = a.num_kv_heads = 1;
    a.head_dim = c->dim;
    c->norm_eps = 1e-5f;
    RETURN_IF_ERROR(f.Float("layer_norm_epsilon", &c->norm_eps));
    c->mlp = false;
    c->rope = false;
    c->mlp_hidden = 0;
    c->mixers.assign(size_t(c->num_layers), kMamba2Mixer);
  } else {
    a.num_heads = 32;
    RETURN_IF_ERROR(f.Int("num_attention_heads", &a.num_heads));
    if (a.num_heads < 1 || c->dim % a.num_heads != 0) {
      return Bad("num_attention_heads",
                 absl::StrCat("must divide hidden_size ", c->dim, ", got ", a.num_heads));
    }
    a.num_kv_heads = lfm2 ? 8 : a.num_heads;
    RETURN_IF_ERROR(f.Int("num_key_value_heads", &a.num_kv_heads));
    if (a.num_kv_heads < 1 || a.num_heads % a.num_kv_heads != 0) {
      return Bad("num_key_value_heads", absl::StrCat("must divide num_attention_heads ",
                                                     a.num_heads, ", got ", a.num_kv_heads));
    }
    a.head_dim = c->dim / a.num_heads;
    RETURN_IF_ERROR(f.Int("head_dim", &a.head_dim));
    RETURN_IF_ERROR(ReadRope(j, &c->rope_theta));
    RETURN_IF_ERROR(RefuseTrue(f, "attention_bias", "biases are not supported"));
  }
  a.value_dim = a.head_dim;
  if (mamba2 || granite) {
    int heads = 128, head_dim = 64, state = mamba2 ? 128 : 256, groups = mamba2 ? 8 : 1;
    int kernel = 4;
    float expand = 2;
    const std::string heads_key = granite ? "mamba_n_heads" : "num_heads";
    const std::string groups_key = granite ? "mamba_n_groups" : "n_groups";
    const std::string head_dim_key = granite ? "mamba_d_head" : "head_dim";
    RETURN_IF_ERROR(f.Int(heads_key, &heads));
    RETURN_IF_ERROR(f.Int(granite ? "mamba_d_state" : "state_size", &state));
    RETURN_IF_ERROR(f.Int(groups_key, &groups));
    RETURN_IF_ERROR(f.Int(granite ? "mamba_d_conv" : "conv_kernel", &kernel));
    RETURN_IF_ERROR(f.Float(granite ? "mamba_expand" : "expand", &expand));
    const int inner = int(double(expand) * c->dim);  // int(expand * hidden_size)
    if (heads < 1 || inner % heads != 0) {
      return Bad(heads_key, absl::StrCat("must divide the inner width ", inner, " (expand x "
                                         "hidden_size), got ", heads));
    }
    head_dim = inner / heads;  // Granite's "auto"; Mamba2's default is 64
    if (mamba2) head_dim = 64;
    if (const Json* v = f.Find(head_dim_key); v != nullptr && *v != "auto") {
      RETURN_IF_ERROR(f.Int(head_dim_key, &head_dim));
    }
    if (int64_t{heads} * head_dim != inner) {
      return Bad(head_dim_key, absl::StrCat(head_dim, " x ", heads_key, " ", heads,
                                            " is not the inner width ", inner,
                                            " (expand x hidden_size)"));
    }
    if (groups != 1) {
      return Bad(groups_key, absl::StrCat(
          groups, " is not supported: Hugging Face's ", model_type, " normalises the gated SSM "
          "output over the whole inner width where attnserve (like mamba_ssm and llama.cpp) "
          "normalises each group; the two agree only for 1 group (its GGUF conversion loads)"));
    }
    RETURN_IF_ERROR(RefuseTrue(f, granite ? "mamba_proj_bias" : "use_bias",
                               "the Mamba-2 in_proj and out_proj have no biases in attnserve"));
    bool conv_bias = true;
    RETURN_IF_ERROR(f.Bool(granite ? "mamba_conv_bias" : "use_conv_bias", &conv_bias));
    if (layout != nullptr) layout->conv_bias = conv_bias;
    c->ssm_inner = inner;
    c->ssm_heads = heads;
    c->ssm_state = state;
    c->ssm_groups = groups;
    c->conv_kernel = kernel;
  }
  if (granite) {
    int64_t experts = 8;  // GraniteMoeHybridConfig's default
    RETURN_IF_ERROR(f.Int("num_local_experts", &experts));
    if (experts > 0) {
      return Bad("num_local_experts", absl::StrCat(
          experts, ": mixtures of experts are not supported (a dense Granite 4.0-H has 0 and "
          "only the shared MLP; the key defaults to 8 when absent)"));
    }
    c->mlp_hidden = 1024;
    RETURN_IF_ERROR(f.Int("shared_intermediate_size", &c->mlp_hidden));
    c->norm_eps = 1e-6f;
    RETURN_IF_ERROR(f.Float("rms_norm_eps", &c->norm_eps));
    RETURN_IF_ERROR(ReadLayerTypes(j, {"layer_types", "layers_block_type"}, c->num_layers,
                                   "attention", "mamba", kMamba2Mixer, kMamba2Mixer,
                                   &c->mixers));
    std::string position;
    RETURN_IF_ERROR(f.String("position_embedding_type", &position));
    c->rope = position == "rope";  // GraniteMoeHybridModel: RoPE only for "rope"
    RETURN_IF_ERROR(f.Float("embedding_multiplier", &c->embedding_scale));
    RETURN_IF_ERROR(f.Float("residual_multiplier", &c->residual_scale));
    RETURN_IF_ERROR(f.Float("logits_scaling", &c->logit_scale));
    c->attention_scale = 1.0f;  // the attention's scaling is attention_multiplier itself
    RETURN_IF_ERROR(f.Float("attention_multiplier", &c->attention_scale));
    const std::pair<const char*, float> scales[] = {
        {"embedding_multiplier", c->embedding_scale},
        {"residual_multiplier", c->residual_scale},
        {"logits_scaling", c->logit_scale},
        {"attention_multiplier", c->attention_scale}};
    for (const auto& [key, v] : scales) {
      if (!(v > 0)) return Bad(key, absl::StrCat("must be > 0, got ", v));
    }
  }
  if (lfm2) {
    c->norm_eps = 1e-5f;
    RETURN_IF_ERROR(f.Float("norm_eps", &c->norm_eps));
    c->qk_head_norm = true;  // q_layernorm, k_layernorm
    RETURN_IF_ERROR(f.Float("theta", &c->rope_theta));  // Lfm2Config: theta before rope_theta
    RETURN_IF_ERROR(RefuseTrue(f, "conv_bias", "attnserve's short convolution has no biases"));
    c->conv_kernel = 3;
    RETURN_IF_ERROR(f.Int("conv_L_cache", &c->conv_kernel));
    // Lfm2MLP's width.
    int64_t hidden = 12288;
    RETURN_IF_ERROR(f.Int("intermediate_size", &hidden));
    RETURN_IF_ERROR(f.Int("block_ff_dim", &hidden));
    bool adjust = true;
    RETURN_IF_ERROR(f.Bool("block_auto_adjust_ff_dim", &adjust));
    if (adjust) {
      hidden = int64_t(2.0 * double(hidden) / 3.0);
      float multiplier = 1.0f;
      int64_t multiple_of = 256;
      RETURN_IF_ERROR(f.Int("block_multiple_of", &multiple_of));
      if (multiple_of < 1) {
        return Bad("block_multiple_of", absl::StrCat("must be >= 1, got ", multiple_of));
      }
      // A null multiplier skips both the multiplier and the rounding (Lfm2MLP).
      if (auto it = j.find("block_ffn_dim_multiplier"); it == j.end() || !it->is_null()) {
        RETURN_IF_ERROR(f.Float("block_ffn_dim_multiplier", &multiplier));
        hidden = int64_t(double(multiplier) * double(hidden));
        hidden = multiple_of * ((hidden + multiple_of - 1) / multiple_of);
      }
    }
    if (hidden < 1 || hidden > INT32_MAX) {
      return Bad("intermediate_size", absl::StrCat("gives an MLP width of ", hidden));
    }
    c->mlp_hidden = int(hidden);
    std::vector<std::string> mixers;
    if (const Json* idxs = f.Find("full_attn_idxs"); idxs != nullptr && !f.Find("layer_types")) {
      if (!idxs->is_array()) return Bad("full_attn_idxs", "must be a list of layer indices");
      mixers.assign(size_t(c->num_layers), kShortConvMixer);
      for (const Json& i : *idxs) {
        if (!i.is_number_integer() || i.get<int64_t>() < 0 || i.get<int64_t>() >= c->num_layers) {
          return Bad("full_attn_idxs", "must hold layer indices in [0, num_hidden_layers), got " +
                                           Shown(i));
        }
        mixers[size_t(i.get<int64_t>())] = kAttentionMixer;
      }
    } else {
      RETURN_IF_ERROR(ReadLayerTypes(j, {"layer_types"}, c->num_layers, "full_attention", "conv",
                                     kShortConvMixer, kAttentionMixer, &mixers));
    }
    c->mixers = std::move(mixers);
  }
  // Every layer attention: the plain decoder's config (no list), as GGUF files read.
  if (!c->HasRecurrent()) c->mixers.clear();
  if (const Json* attn = f.Find("attention"); attn != nullptr) {
    return Bad("attention", "is not read for " + model_type + ": its attention layers are "
                            "softmax attention");
  }
  return absl::OkStatus();
}

}  // namespace

bool IsHfRecurrentModelType(const std::string& model_type) {
  for (const char* t : kHfRecurrentModelTypes) {
    if (model_type == t) return true;
  }
  return false;
}

absl::StatusOr<ModelConfig> ParseHfConfig(std::string_view raw, const std::string& default_name,
                                          HfLayout* layout) {
  const std::string text = WithoutPythonNonFinite(raw);
  Json j;
  try {
    j = Json::parse(text.begin(), text.end());
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("not valid JSON: ", e.what()));
  }
  if (!j.is_object()) return absl::InvalidArgumentError("not a JSON object");
  Fields f(j, "");
  ModelConfig c;
  c.name = default_name;
  {
    std::string model_type = "llama";
    RETURN_IF_ERROR(f.String("model_type", &model_type));
    if (layout != nullptr) *layout = HfLayout{model_type};
    if (IsHfRecurrentModelType(model_type)) {
      RETURN_IF_ERROR(f.String("name", &c.name));
      RETURN_IF_ERROR(ParseRecurrentFamily(j, model_type, &c, layout));
      RETURN_IF_ERROR(ValidateModelConfig(c));
      return c;
    }
  }
  RETURN_IF_ERROR(f.String("name", &c.name));
  RETURN_IF_ERROR(f.Int("vocab_size", &c.vocab_size, /*required=*/true));
  RETURN_IF_ERROR(f.Int("hidden_size", &c.dim, true));
  RETURN_IF_ERROR(f.Int("intermediate_size", &c.mlp_hidden, true));
  RETURN_IF_ERROR(f.Int("num_hidden_layers", &c.num_layers, true));
  attention::AttentionOptions& a = c.attention;
  RETURN_IF_ERROR(f.Int("num_attention_heads", &a.num_heads, true));
  if (a.num_heads < 1) return Bad("num_attention_heads", absl::StrCat("must be >= 1, got ", a.num_heads));
  a.num_kv_heads = a.num_heads;
  RETURN_IF_ERROR(f.Int("num_key_value_heads", &a.num_kv_heads));
  if (a.num_kv_heads < 1 || a.num_heads % a.num_kv_heads != 0) {
    return Bad("num_key_value_heads", absl::StrCat("must divide num_attention_heads ", a.num_heads,
                                                   ", got ", a.num_kv_heads));
  }
  a.head_dim = c.dim / a.num_heads;
  RETURN_IF_ERROR(f.Int("head_dim", &a.head_dim));
  a.value_dim = a.head_dim;
  c.norm_eps = 1e-6f;
  RETURN_IF_ERROR(f.Float("rms_norm_eps", &c.norm_eps));
  RETURN_IF_ERROR(ReadRope(j, &c.rope_theta));
  c.max_context = 2048;
  RETURN_IF_ERROR(f.Int("max_position_embeddings", &c.max_context));
  RETURN_IF_ERROR(f.Int("max_context", &c.max_context));
  RETURN_IF_ERROR(f.Bool("tie_word_embeddings", &c.tie_embeddings));
  RETURN_IF_ERROR(ReadSpecialTokens(j, &c));
  RETURN_IF_ERROR(f.String("tokenizer_class", &c.tokenizer_class));
  std::string act = "silu";
  RETURN_IF_ERROR(f.String("hidden_act", &act));
  if (act != "silu") {
    return Bad("hidden_act", absl::StrCat("'", act, "' is not supported: attnserve's MLP is "
                                          "SwiGLU with silu"));
  }
  // The family: Llama (and Mistral, its layout), Qwen2 (q/k/v biases, always) or Qwen3
  // (per-head q/k RMSNorm; attention_bias as configured).
  std::string model_type = "llama";
  RETURN_IF_ERROR(f.String("model_type", &model_type));
  if (model_type != "llama" && model_type != "mistral" && model_type != "qwen2" &&
      model_type != "qwen3") {
    return Bad("model_type", absl::StrCat("'", model_type, "' is not served: attnserve reads "
                                          "llama, mistral, qwen2, qwen3, mamba2, "
                                          "granitemoehybrid and lfm2"));
  }
  // Qwen2's biases are on q, k and v only (its modelling file, whatever the config says);
  // elsewhere attention_bias puts one on o_proj too, which attnserve's layer has not.
  c.attention_bias = model_type == "qwen2";
  c.qk_head_norm = model_type == "qwen3";
  if (model_type != "qwen2") {
    bool bias = false;
    RETURN_IF_ERROR(f.Bool("attention_bias", &bias));
    if (bias) {
      return Bad("attention_bias", "is true: biases are not supported (attnserve's projections "
                                   "have none, except Qwen2's on q, k and v)");
    }
  }
  bool mlp_bias = false;
  RETURN_IF_ERROR(f.Bool("mlp_bias", &mlp_bias));
  if (mlp_bias) return Bad("mlp_bias", "is true: attnserve's MLP projections have no biases");
  // Qwen's configs carry a window that applies only under use_sliding_window.
  bool use_window = true;
  RETURN_IF_ERROR(f.Bool("use_sliding_window", &use_window));
  if (const Json* window = f.Find("sliding_window");
      window != nullptr && !window->is_null() && use_window) {
    return Bad("sliding_window", absl::StrCat(Shown(*window), " is not supported: attnserve's "
                                              "attention sees the whole context"));
  }
  for (const char* dtype : {"torch_dtype", "dtype"}) {
    std::string ignored;  // the weights' own dtypes decide (safetensors.h)
    RETURN_IF_ERROR(f.String(dtype, &ignored));
  }
  if (const Json* attn = f.Find("attention"); attn != nullptr) {
    RETURN_IF_ERROR(ReadAttention(*attn, &a));
  } else if (const Json* type = f.Find("attention_type"); type != nullptr) {
    if (!type->is_string()) return Bad("attention_type", "must be a string, got " + Shown(*type));
    RETURN_IF_ERROR(ReadAttentionType(type->get<std::string>(), &a));
  }
  RETURN_IF_ERROR(ValidateModelConfig(c));
  return c;
}

absl::StatusOr<ModelConfig> ReadHfConfigFile(const std::string& path,
                                             const std::string& default_name,
                                             HfLayout* layout) {
  std::ifstream f(path);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open model config ", path));
  std::stringstream text;
  text << f.rdbuf();
  auto config = ParseHfConfig(text.str(), default_name, layout);
  if (!config.ok()) {
    return absl::Status(config.status().code(),
                        absl::StrCat(path, ": ", config.status().message()));
  }
  return config;
}

std::string HfConfigToJson(const ModelConfig& c) {
  const attention::AttentionOptions& a = c.attention;
  Json j = {
      {"architectures", {c.qk_head_norm ? "Qwen3ForCausalLM"
                         : c.attention_bias ? "Qwen2ForCausalLM" : "LlamaForCausalLM"}},
      {"model_type", c.qk_head_norm ? "qwen3" : c.attention_bias ? "qwen2" : "llama"},
      {"name", c.name},
      {"vocab_size", c.vocab_size},
      {"hidden_size", c.dim},
      {"intermediate_size", c.mlp_hidden},
      {"num_hidden_layers", c.num_layers},
      {"num_attention_heads", a.num_heads},
      {"num_key_value_heads", a.num_kv_heads},
      {"head_dim", a.head_dim},
      {"hidden_act", "silu"},
      {"rms_norm_eps", ShortestDouble(c.norm_eps)},
      {"rope_theta", ShortestDouble(c.rope_theta)},
      {"rope_scaling", nullptr},
      {"max_position_embeddings", c.max_context},
      {"tie_word_embeddings", c.tie_embeddings},
      {"attention_bias", c.attention_bias},
      {"mlp_bias", false},
      {"torch_dtype", "float32"},
      {"attention",
       {{"module", a.module},
        {"order", a.order},
        {"qk_norm", a.qk_norm},
        {"qk_temperature", ShortestDouble(a.qk_temperature)},
        {"learn_temperature", a.learn_temperature},
        {"chunk_size", a.chunk_size},
        {"decay_horizon", ShortestDouble(a.decay_horizon)},
        {"unscaled_query", a.unscaled_query}}},
  };
  j["bos_token_id"] = c.bos_token_id >= 0 ? Json(c.bos_token_id) : Json(nullptr);
  if (c.eos_token_ids.size() == 1) {
    j["eos_token_id"] = c.eos_token_ids[0];
  } else if (c.eos_token_ids.empty()) {
    j["eos_token_id"] = nullptr;
  } else {
    j["eos_token_id"] = c.eos_token_ids;
  }
  if (!c.tokenizer_class.empty()) j["tokenizer_class"] = c.tokenizer_class;
  return j.dump(2) + "\n";
}

}  // namespace attnserve::model
