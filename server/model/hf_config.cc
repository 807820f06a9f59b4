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

// bos_token_id (null: none) and eos_token_id (an int, a list of ints, or null).
absl::Status ReadSpecialTokens(const Json& j, ModelConfig* c) {
  c->bos_token_id = 1;  // LlamaConfig's defaults
  c->eos_token_ids = {2};
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

}  // namespace

absl::StatusOr<ModelConfig> ParseHfConfig(std::string_view text, const std::string& default_name) {
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
                                          "llama, mistral, qwen2 and qwen3"));
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
                                             const std::string& default_name) {
  std::ifstream f(path);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open model config ", path));
  std::stringstream text;
  text << f.rdbuf();
  auto config = ParseHfConfig(text.str(), default_name);
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
