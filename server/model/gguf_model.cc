#include "server/model/gguf_model.h"

#include <algorithm>
#include <map>
#include <optional>
#include <climits>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace attnserve::model {
namespace {

using nlohmann::json;

absl::Status BadKey(const std::string& key, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("GGUF metadata ", key, ": ", what));
}

// An unsigned integer key; `fallback` when absent (required when it is null).
absl::StatusOr<int64_t> UInt(const json& m, const std::string& key,
                             std::optional<int64_t> fallback = std::nullopt) {
  if (!m.contains(key)) {
    if (fallback.has_value()) return *fallback;
    return BadKey(key, "is missing");
  }
  const json& v = m[key];
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX) {
    return BadKey(key, absl::StrCat("must be a non-negative integer, got ", GgufValueText(v)));
  }
  return v.get<int64_t>();
}

absl::StatusOr<double> Float(const json& m, const std::string& key, double fallback) {
  if (!m.contains(key)) return fallback;
  const json& v = m[key];
  if (!v.is_number()) return BadKey(key, absl::StrCat("must be a number, got ", GgufValueText(v)));
  return v.get<double>();
}

}  // namespace

bool IsGgufPath(const std::string& path) { return absl::EndsWith(path, kGgufSuffix); }

// The architectures served: llama (and the Mistral files llama.cpp writes as llama),
// qwen2 (q/k/v biases) and qwen3 (per-head q/k RMSNorm): one decoder with two options.
// llama.cpp's converter stores llama's q and k rows in interleaved RoPE pairs; the Qwen
// families use NEOX RoPE, which is our rotate-half layout.
// The recurrent and hybrid ones (server/DESIGN.md §11): mamba2 (every layer Mamba-2, no
// MLP), granitehybrid (Granite 4.0-H: Mamba-2 and attention layers, the layer's
// attention.head_count_kv 0 for Mamba-2; Granite's multipliers; RoPE only when
// rope.scaling.finetuned) and lfm2 (short-conv and attention layers likewise, per-head q/k
// norms, the final norm token_embd_norm).
constexpr const char* kGgufArchitectures[] = {"llama", "qwen2", "qwen3", "mamba2",
                                              "granitehybrid", "lfm2"};

bool GgufInterleavedRope(const GgufFile& file) {
  const json arch = file.metadata.value("general.architecture", json());
  // Granite's attention layers rotate adjacent pairs (llama.cpp's NORM RoPE) when they
  // rotate at all: rope.scaling.finetuned is its switch, true when absent as llama.cpp
  // reads it.
  return arch == "llama" ||
         (arch == "granitehybrid" &&
          file.metadata.value("granitehybrid.rope.scaling.finetuned", json(true)) == true);
}

namespace {

// A per-layer integer key (hybrids write head counts as arrays), or a scalar for every
// layer; `fallback` for every layer when absent.
absl::StatusOr<std::vector<int64_t>> PerLayer(const json& m, const std::string& key,
                                              int64_t layers, int64_t fallback) {
  if (!m.contains(key)) return std::vector<int64_t>(size_t(layers), fallback);
  const json& v = m[key];
  if (!v.is_array()) {
    auto one = UInt(m, key);
    if (!one.ok()) return one.status();
    return std::vector<int64_t>(size_t(layers), *one);
  }
  if (int64_t(v.size()) != layers) {
    return BadKey(key, absl::StrCat("has ", v.size(), " entries for ", layers, " layers"));
  }
  std::vector<int64_t> out;
  for (const json& e : v) {
    if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() > INT32_MAX) {
      return BadKey(key, absl::StrCat("must hold non-negative integers, got ", GgufValueText(e)));
    }
    out.push_back(e.get<int64_t>());
  }
  return out;
}

// The one non-zero value of `per_layer` (the attention layers'); 0 when there is none.
absl::StatusOr<int64_t> Uniform(const std::vector<int64_t>& per_layer, const std::string& key) {
  int64_t value = 0;
  for (int64_t v : per_layer) {
    if (v == 0) continue;
    if (value != 0 && v != value) {
      return BadKey(key, "differs between attention layers: attnserve's attention layers share "
                         "one shape");
    }
    value = v;
  }
  return value;
}

}  // namespace

absl::StatusOr<ModelConfig> GgufModelConfig(const GgufFile& file, const std::string& name) {
  const json& m = file.metadata;
  const json arch = m.value("general.architecture", json());
  bool known = false;
  for (const char* a : kGgufArchitectures) known = known || arch == a;
  if (!known) {
    return BadKey("general.architecture",
                  absl::StrCat(GgufValueText(arch), ": attnserve serves the architectures ",
                               absl::StrJoin(kGgufArchitectures, ", ")));
  }
  const std::string p = arch.get<std::string>() + ".";  // the architecture's keys
  for (const std::string& key : {p + "rope.scaling.type", p + "rope.scaling.factor"}) {
    if (m.contains(key) && !(m[key] == "none" || m[key] == 1.0)) {
      return BadKey(key, absl::StrCat(GgufValueText(m[key]), ": RoPE scaling is not supported"));
    }
  }
  if (m.contains(p + "expert_count") && m[p + "expert_count"] != 0) {
    return BadKey(p + "expert_count", "mixtures of experts are not supported");
  }
  ModelConfig c;
  c.name = name;
  attention::AttentionOptions& a = c.attention;
  a = attention::AttentionOptions();
  a.module = "softmax";
  const bool mamba2 = arch == "mamba2", lfm2 = arch == "lfm2";
  const bool hybrid = arch == "granitehybrid" || lfm2;
  auto dim = UInt(m, p + "embedding_length");
  auto layers = UInt(m, p + "block_count");
  for (const auto* v : {&dim, &layers}) {
    if (!v->ok()) return v->status();
  }
  if (*layers < 1) return BadKey(p + "block_count", "must be at least 1");
  // Every layer has tensors of its own, so the file bounds the count: the per-layer lists
  // below are not allocated for layers the file cannot hold.
  if (*layers > int64_t(file.tensors.size())) {
    return BadKey(p + "block_count", absl::StrCat(*layers, " layers, but the file holds ",
                                                  file.tensors.size(), " tensors"));
  }
  auto hidden = UInt(m, p + "feed_forward_length", mamba2 ? std::optional<int64_t>(0) : std::nullopt);
  if (!hidden.ok()) return hidden.status();
  auto head_counts = PerLayer(m, p + "attention.head_count", *layers, 0);
  if (!head_counts.ok()) return head_counts.status();
  auto heads_or = Uniform(*head_counts, p + "attention.head_count");
  if (!heads_or.ok()) return heads_or.status();
  auto kv_counts = PerLayer(m, p + "attention.head_count_kv", *layers, *heads_or);
  if (!kv_counts.ok()) return kv_counts.status();
  auto kv_or = Uniform(*kv_counts, p + "attention.head_count_kv");
  if (!kv_or.ok()) return kv_or.status();
  // Each layer's mixer: a hybrid's head_count_kv of 0 marks a recurrent layer.
  c.mixers.clear();
  int attention_layers = 0, last_attention = -1;
  for (int64_t l = 0; l < *layers; ++l) {
    const bool attends = !mamba2 && (!hybrid || (*kv_counts)[size_t(l)] != 0);
    c.mixers.push_back(attends ? kAttentionMixer : lfm2 ? kShortConvMixer : kMamba2Mixer);
    if (attends) {
      ++attention_layers;
      last_attention = int(l);
    }
  }
  if (attention_layers == *layers) c.mixers.clear();  // every layer attention: as before
  if (!mamba2 && !hybrid && *heads_or < 1) {
    return BadKey(p + "attention.head_count", "must be at least 1");
  }
  // A model without attention layers still names a head shape: one head of dim, what a
  // full-attention model of its width would cache (its break-even's reference).
  auto heads = absl::StatusOr<int64_t>(attention_layers > 0 ? *heads_or : 1);
  auto kv_heads = absl::StatusOr<int64_t>(attention_layers > 0 ? *kv_or : 1);
  if (attention_layers > 0 && *heads < 1) {
    return BadKey(p + "attention.head_count", "must be at least 1 in the attention layers");
  }
  auto key_length = UInt(m, p + "attention.key_length", *dim / *heads);
  if (!key_length.ok()) return key_length.status();
  auto value_length = UInt(m, p + "attention.value_length", *key_length);
  if (!value_length.ok()) return value_length.status();
  if (*value_length != *key_length) {
    return BadKey(p + "attention.value_length", "must equal key_length");
  }
  if (mamba2 || arch == "granitehybrid") {
    auto conv = UInt(m, p + "ssm.conv_kernel");
    auto inner = UInt(m, p + "ssm.inner_size");
    auto state = UInt(m, p + "ssm.state_size");
    auto ssm_heads = UInt(m, p + "ssm.time_step_rank");
    auto groups = UInt(m, p + "ssm.group_count", 1);
    for (const auto* v : {&conv, &inner, &state, &ssm_heads, &groups}) {
      if (!v->ok()) return v->status();
    }
    c.conv_kernel = int(*conv);
    c.ssm_inner = int(*inner);
    c.ssm_state = int(*state);
    c.ssm_heads = int(*ssm_heads);
    c.ssm_groups = int(*groups);
  }
  if (lfm2) {
    auto taps = UInt(m, p + "shortconv.l_cache");
    if (!taps.ok()) return taps.status();
    c.conv_kernel = int(*taps);
  }
  c.mlp = !mamba2;
  if (arch == "granitehybrid") {
    c.rope = GgufInterleavedRope(file);
    auto embedding_scale = Float(m, p + "embedding_scale", 1.0);
    auto residual_scale = Float(m, p + "residual_scale", 1.0);
    auto logit_scale = Float(m, p + "logit_scale", 1.0);
    auto attention_scale = Float(m, p + "attention.scale", 0.0);
    for (const auto* v : {&embedding_scale, &residual_scale, &logit_scale, &attention_scale}) {
      if (!v->ok()) return v->status();
    }
    c.embedding_scale = float(*embedding_scale);
    c.residual_scale = float(*residual_scale);
    c.logit_scale = float(*logit_scale);
    c.attention_scale = float(*attention_scale);
  }
  if (mamba2) c.rope = false;
  auto rope_dims = UInt(m, p + "rope.dimension_count", *key_length);
  if (!rope_dims.ok()) return rope_dims.status();
  if (*rope_dims != *key_length) {
    return BadKey(p + "rope.dimension_count",
                  absl::StrCat(*rope_dims, " is not the head dimension ", *key_length,
                               ": partial RoPE is not supported"));
  }
  auto theta = Float(m, p + "rope.freq_base", 10000.0);
  auto eps = Float(m, p + "attention.layer_norm_rms_epsilon", 1e-5);
  auto context = UInt(m, p + "context_length", 2048);
  for (const auto* v : {&theta, &eps}) {
    if (!v->ok()) return v->status();
  }
  if (!context.ok()) return context.status();
  const GgufTensor* embed = file.Find("token_embd.weight");
  if (embed == nullptr || embed->dims.size() != 2) {
    return absl::InvalidArgumentError("GGUF: tensor token_embd.weight is missing or not a matrix");
  }
  // The sizes must be those of the tensors that are there (bounded by the file), before
  // anything is allocated for them.
  auto expect = [&](const std::string& name, std::vector<int64_t> dims) -> absl::Status {
    const GgufTensor* t = file.Find(name);
    if (t == nullptr) return absl::InvalidArgumentError(absl::StrCat("GGUF: tensor '", name, "' is missing"));
    if (t->dims != dims) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GGUF: tensor '", name, "' has dims [", absl::StrJoin(t->dims, ", "),
          "] (innermost first); the metadata needs [", absl::StrJoin(dims, ", "), "]"));
    }
    return absl::OkStatus();
  };
  if (*kv_heads < 1 || *heads % *kv_heads != 0) {
    return BadKey(p + "attention.head_count_kv",
                  absl::StrCat(*kv_heads, " must divide head_count ", *heads));
  }
  if (absl::Status s = expect("token_embd.weight", {*dim, embed->dims[1]}); !s.ok()) return s;
  if (last_attention >= 0) {
    const std::string last = absl::StrCat("blk.", last_attention, ".");
    for (absl::Status s : {expect(last + "attn_q.weight", {*dim, *heads * *key_length}),
                           expect(last + "attn_k.weight", {*dim, *kv_heads * *key_length})}) {
      if (!s.ok()) return s;
    }
  }
  if (c.mlp) {
    const std::string last = absl::StrCat("blk.", *layers - 1, ".");
    if (absl::Status s = expect(last + "ffn_up.weight", {*dim, *hidden}); !s.ok()) return s;
  }
  c.dim = int(*dim);
  c.num_layers = int(*layers);
  c.mlp_hidden = int(*hidden);
  a.num_heads = int(*heads);
  a.num_kv_heads = int(*kv_heads);
  a.head_dim = int(*key_length);
  a.value_dim = a.head_dim;
  c.rope_theta = float(*theta);
  c.norm_eps = float(*eps);
  c.max_context = *context;
  c.vocab_size = int(embed->dims[1]);
  c.tie_embeddings = file.Find("output.weight") == nullptr;
  // Qwen2's q/k/v biases (llama.cpp reads them where present); Qwen3's per-head norms.
  c.attention_bias = last_attention >= 0 &&
                     file.Find(absl::StrCat("blk.", last_attention, ".attn_q.bias")) != nullptr;
  c.qk_head_norm = last_attention >= 0 &&
                   file.Find(absl::StrCat("blk.", last_attention, ".attn_q_norm.weight")) != nullptr;
  if (arch == "qwen3" && !c.qk_head_norm) {
    return absl::InvalidArgumentError("GGUF: a qwen3 file needs blk.N.attn_q_norm.weight");
  }
  c.tokenizer_class.clear();
  c.bos_token_id = -1;
  if (m.contains("tokenizer.ggml.bos_token_id")) {
    auto bos = UInt(m, "tokenizer.ggml.bos_token_id");
    if (!bos.ok()) return bos.status();
    c.bos_token_id = int(*bos);
  }
  c.eos_token_ids.clear();
  if (m.contains("tokenizer.ggml.eos_token_id")) {
    auto eos = UInt(m, "tokenizer.ggml.eos_token_id");
    if (!eos.ok()) return eos.status();
    c.eos_token_ids.push_back(int(*eos));
  }
  if (m.contains("tokenizer.ggml.eot_token_id")) {
    auto eot = UInt(m, "tokenizer.ggml.eot_token_id");
    if (!eot.ok()) return eot.status();
    if (c.eos_token_ids.empty() || c.eos_token_ids[0] != *eot) c.eos_token_ids.push_back(int(*eot));
  }
  if (absl::Status s = ValidateModelConfig(c); !s.ok()) return s;
  return c;
}

std::string GgufTensorName(const std::string& name) {
  if (name == "embed") return "token_embd.weight";
  if (name == "norm") return "output_norm.weight";
  if (name == "head") return "output.weight";
  static const std::map<std::string, std::string> kLayer = {
      {"attn_norm", "attn_norm"}, {"wq", "attn_q"},     {"wk", "attn_k"},
      {"wv", "attn_v"},           {"wo", "attn_output"}, {"mlp_norm", "ffn_norm"},
      {"w_gate", "ffn_gate"},     {"w_up", "ffn_up"},   {"w_down", "ffn_down"},
      {"bq", "attn_q.bias"},      {"bk", "attn_k.bias"}, {"bv", "attn_v.bias"},
      {"q_norm", "attn_q_norm"},  {"k_norm", "attn_k_norm"},
      // Mamba-2 (ssm_a and ssm_d have no ".weight": written whole below) and short conv.
      {"ssm_in", "ssm_in"},       {"ssm_conv_w", "ssm_conv1d"}, {"ssm_conv_b", "ssm_conv1d.bias"},
      {"ssm_dt_bias", "ssm_dt.bias"}, {"ssm_a", "ssm_a"},       {"ssm_d", "ssm_d"},
      {"ssm_norm", "ssm_norm"},   {"ssm_out", "ssm_out"},
      {"conv_in", "shortconv.in_proj"}, {"conv_w", "shortconv.conv"},
      {"conv_out", "shortconv.out_proj"}};
  // "layers.N.rest"
  const size_t dot = name.find('.', 7);
  const std::string layer = name.substr(7, dot - 7);
  auto it = kLayer.find(name.substr(dot + 1));
  if (it == kLayer.end()) return "";  // not a llama parameter (attention-module extras)
  if (absl::EndsWith(it->second, ".bias") || it->second == "ssm_a" || it->second == "ssm_d") {
    return absl::StrCat("blk.", layer, ".", it->second);
  }
  return absl::StrCat("blk.", layer, ".", it->second, ".weight");
}

std::vector<float> UninterleaveRopeRows(const std::vector<float>& values, int heads,
                                        int head_dim, int64_t columns) {
  std::vector<float> out(values.size());
  const int half = head_dim / 2;
  for (int h = 0; h < heads; ++h) {
    for (int i = 0; i < head_dim; ++i) {
      // Our row i < half is the pair's first element (stored row 2i); row half + i its
      // second (stored row 2i + 1).
      const int from = i < half ? 2 * i : 2 * (i - half) + 1;
      std::copy_n(values.begin() + (int64_t(h) * head_dim + from) * columns, columns,
                  out.begin() + (int64_t(h) * head_dim + i) * columns);
    }
  }
  return out;
}

namespace {

}  // namespace

std::string GgufFileTensorName(const GgufFile& file, const ModelConfig& config,
                               const std::string& name) {
  if (name == "head" && config.tie_embeddings) return GgufTensorName("embed");
  if (name == "norm" && file.metadata.value("general.architecture", json()) == "lfm2") {
    return "token_embd_norm.weight";  // LFM2's final norm
  }
  return GgufTensorName(name);
}

bool GgufOptionalTensor(const std::string& name) {
  return absl::EndsWith(name, ".ssm_conv_b");  // Granite's conv may have no bias: zeros
}

namespace {

// Parameter `name`'s tensor, checked against the shape the network needs.
absl::StatusOr<const GgufTensor*> FindParameter(const GgufFile& file, const ModelConfig& config,
                                                const std::string& name,
                                                const std::vector<int64_t>& shape) {
  const std::string gguf = GgufFileTensorName(file, config, name);
  const GgufTensor* t = gguf.empty() ? nullptr : file.Find(gguf);
  if (t == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GGUF: tensor '", gguf.empty() ? name : gguf, "' is missing (the model needs shape [",
        absl::StrJoin(shape, ", "), "])"));
  }
  if (t->shape() != shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GGUF: tensor '", gguf, "' has shape [", absl::StrJoin(t->shape(), ", "),
        "] (dims innermost first [", absl::StrJoin(t->dims, ", "), "]), the model needs [",
        absl::StrJoin(shape, ", "), "]"));
  }
  return t;
}

// The heads whose rows `name` holds when they are stored in interleaved RoPE pairs
// (llama's wq and wk); 0 for every other parameter.
int InterleavedHeads(const GgufFile& file, const ModelConfig& config, const std::string& name) {
  if (!GgufInterleavedRope(file)) return 0;
  if (absl::EndsWith(name, ".wq")) return config.attention.num_heads;
  if (absl::EndsWith(name, ".wk")) return config.attention.num_kv_heads;
  return 0;
}

}  // namespace

absl::StatusOr<std::vector<float>> GgufParameter(const GgufFile& file, const ModelConfig& config,
                                                 const std::string& name,
                                                 const std::vector<int64_t>& shape) {
  auto t = FindParameter(file, config, name, shape);
  if (!t.ok()) return t.status();
  auto values = GgufToFloat32(**t);
  if (!values.ok()) return values.status();
  if (const int heads = InterleavedHeads(file, config, name); heads > 0) {
    return UninterleaveRopeRows(*values, heads, config.attention.head_dim, shape[1]);
  }
  return values;
}

absl::StatusOr<GgufMatrix> GgufMatrixParameter(const GgufFile& file, const ModelConfig& config,
                                               const std::string& name,
                                               const std::vector<int64_t>& shape) {
  auto t = FindParameter(file, config, name, shape);
  if (!t.ok()) return t.status();
  auto type = GgufWeightType(**t);
  if (!type.ok()) return type.status();
  GgufMatrix out;
  if (*type == weights::WeightType::kF32) {
    auto values = GgufParameter(file, config, name, shape);
    if (!values.ok()) return values.status();
    out.dense = std::move(values).value();
    return out;
  }
  auto packed = weights::PackedMatrix::Copy(*type, shape[0], shape[1], (*t)->bytes.data());
  if (!packed.ok()) return packed.status();
  if (const int heads = InterleavedHeads(file, config, name); heads > 0) {
    // Whole rows move: a row is whole blocks.
    const int d = config.attention.head_dim, half = d / 2;
    std::vector<int64_t> perm(static_cast<size_t>(shape[0]));
    for (int h = 0; h < heads; ++h) {
      for (int i = 0; i < d; ++i) {
        perm[size_t(h) * d + i] = int64_t(h) * d + (i < half ? 2 * i : 2 * (i - half) + 1);
      }
    }
    *packed = packed->PermuteRows(perm.data());
  }
  out.packed = std::make_shared<const weights::PackedMatrix>(std::move(packed).value());
  return out;
}

}  // namespace attnserve::model
