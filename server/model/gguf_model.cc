#include "server/model/gguf_model.h"

#include <algorithm>
#include <map>
#include <optional>
#include <climits>
#include <cstdlib>

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
// The 2026 families (server/DESIGN.md §14): qwen35 (Gated DeltaNet layers and gated
// full-attention layers with partial, sectioned RoPE; the pre-FFN norm is
// post_attention_norm), qwen35moe (the same with a MoE FFN and a sigmoid-gated shared
// expert), qwen3next (as qwen35moe, with NEOX RoPE, beta and alpha in one matrix ssm_ba,
// and value head h reading key head h / (n_v / n_k): gdn_grouped_heads) and qwen3moe
// (Qwen3's attention, a MoE FFN: softmax, top-k, renormalised). With experts too:
// granitehybrid (every layer; softmax, renormalised; an ungated shared expert; experts of
// feed_forward_length) and lfm2moe (lfm2's layers; after leading_dense_block_count dense
// ones, experts routed by expert_gating_func: 2 sigmoid with the selection bias
// exp_probs_b); llama (Mixtral: softmax, renormalised, experts of feed_forward_length).
constexpr const char* kGgufArchitectures[] = {
    "llama", "qwen2", "qwen3", "mamba2", "granitehybrid", "lfm2", "lfm2moe", "qwen35",
    "qwen35moe", "qwen3next", "qwen3moe"};

// Gated DeltaNet hybrids.
namespace {
bool GdnArchitecture(const json& arch) {
  return arch == "qwen35" || arch == "qwen35moe" || arch == "qwen3next";
}
}  // namespace

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
  const bool has_experts = m.contains(p + "expert_count") && m[p + "expert_count"] != 0;
  const bool moe_arch = arch == "qwen35moe" || arch == "qwen3moe" || arch == "qwen3next" ||
                        arch == "lfm2moe" ||
                        ((arch == "granitehybrid" || arch == "llama") && has_experts);
  if (!moe_arch && has_experts) {
    return BadKey(p + "expert_count",
                  absl::StrCat("mixtures of experts are served for qwen3moe, qwen35moe, "
                               "qwen3next, lfm2moe, granitehybrid and llama, not ",
                               GgufValueText(arch)));
  }
  ModelConfig c;
  c.name = name;
  attention::AttentionOptions& a = c.attention;
  a = attention::AttentionOptions();
  a.module = "softmax";
  const bool mamba2 = arch == "mamba2", lfm2 = arch == "lfm2" || arch == "lfm2moe";
  const bool gdn = GdnArchitecture(arch);
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
  // Multi-token-prediction blocks (Qwen3.5's converter appends nextn_predict_layers of
  // them after the trunk, counted in block_count and in the per-layer keys) are not run:
  // the model is the trunk, and their tensors are left unread.
  const int64_t all_layers = *layers;
  auto nextn = UInt(m, p + "nextn_predict_layers", 0);
  if (!nextn.ok()) return nextn.status();
  if (*nextn >= all_layers) {
    return BadKey(p + "nextn_predict_layers",
                  absl::StrCat(*nextn, " leaves no layer of the ", all_layers, " to run"));
  }
  *layers = all_layers - *nextn;
  auto hidden = UInt(m, p + "feed_forward_length",
                     mamba2 || (moe_arch && arch != "granitehybrid" && arch != "llama")
                         ? std::optional<int64_t>(0)
                         : std::nullopt);
  if (!hidden.ok()) return hidden.status();
  auto head_counts = PerLayer(m, p + "attention.head_count", all_layers, 0);
  if (!head_counts.ok()) return head_counts.status();
  head_counts->resize(size_t(*layers));
  auto heads_or = Uniform(*head_counts, p + "attention.head_count");
  if (!heads_or.ok()) return heads_or.status();
  auto kv_counts = PerLayer(m, p + "attention.head_count_kv", all_layers, *heads_or);
  if (!kv_counts.ok()) return kv_counts.status();
  kv_counts->resize(size_t(*layers));
  auto kv_or = Uniform(*kv_counts, p + "attention.head_count_kv");
  if (!kv_or.ok()) return kv_or.status();
  // Each layer's mixer: a hybrid's head_count_kv of 0 marks a recurrent layer; Qwen3.5's
  // attention.recurrent_layers (booleans) does, or else every full_attention_interval-th
  // layer (4) is attention and the rest Gated DeltaNet (llama.cpp's qwen35.cpp).
  std::vector<bool> recurrent(size_t(*layers), false);
  if (gdn) {
    const std::string key = p + "attention.recurrent_layers";
    if (m.contains(key)) {
      const json& v = m[key];
      if (!v.is_array() || int64_t(v.size()) != all_layers) {
        return BadKey(key, absl::StrCat("must list one boolean per layer (", all_layers, ")"));
      }
      for (int64_t l = 0; l < *layers; ++l) {
        const json& e = v[size_t(l)];
        if (!e.is_boolean() && !e.is_number_integer()) return BadKey(key, "must hold booleans");
        recurrent[size_t(l)] = e.is_boolean() ? e.get<bool>() : e.get<int64_t>() != 0;
      }
    } else {
      auto interval = UInt(m, p + "full_attention_interval", 4);
      if (!interval.ok()) return interval.status();
      if (*interval < 1) return BadKey(p + "full_attention_interval", "must be at least 1");
      for (int64_t l = 0; l < *layers; ++l) recurrent[size_t(l)] = (l + 1) % *interval != 0;
    }
  }
  c.mixers.clear();
  int attention_layers = 0, last_attention = -1;
  for (int64_t l = 0; l < *layers; ++l) {
    const bool attends =
        !mamba2 && (!hybrid || (*kv_counts)[size_t(l)] != 0) && !recurrent[size_t(l)];
    c.mixers.push_back(attends   ? kAttentionMixer
                       : gdn     ? kGatedDeltaNetMixer
                       : lfm2    ? kShortConvMixer
                                 : kMamba2Mixer);
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
  if (mamba2 || arch == "granitehybrid" || gdn) {
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
  if (*rope_dims != *key_length && !gdn) {
    return BadKey(p + "rope.dimension_count",
                  absl::StrCat(*rope_dims, " is not the head dimension ", *key_length,
                               ": partial RoPE is served for qwen35, qwen35moe and qwen3next only"));
  }
  if (gdn) {
    if (*rope_dims > *key_length || *rope_dims % 2 != 0) {
      return BadKey(p + "rope.dimension_count",
                    absl::StrCat(*rope_dims, " must be even and at most the head dimension ",
                                 *key_length));
    }
    c.rope_dims = *rope_dims == *key_length ? 0 : int(*rope_dims);
    c.attention_gate = true;
    c.gdn_grouped_heads = arch == "qwen3next";
    // Interleaved M-RoPE: text positions rotate the pairs the first three sections hold
    // (Qwen3-Next: plain NEOX RoPE).
    const std::string key = p + "rope.dimension_sections";
    if (arch == "qwen3next") {
      // no sections
    } else if (!m.contains(key) || !m[key].is_array() || m[key].empty() || m[key].size() > 4) {
      return BadKey(key, "is required (up to 4 non-negative integers)");
    }
    for (const json& e : arch == "qwen3next" ? json::array() : m[key]) {
      if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() > 65536) {
        return BadKey(key, absl::StrCat("must hold non-negative integers, got ", GgufValueText(e)));
      }
      c.rope_sections.push_back(int(e.get<int64_t>()));
    }
  }
  if (moe_arch) {
    auto experts = UInt(m, p + "expert_count");
    auto used = UInt(m, p + "expert_used_count");
    for (const auto* v : {&experts, &used}) {
      if (!v->ok()) return v->status();
    }
    if (*experts < 1 || *used < 1 || *used > *experts) {
      return BadKey(p + "expert_used_count",
                    absl::StrCat(*used, " must be in [1, expert_count ", *experts, "]"));
    }
    auto lead = UInt(m, p + "leading_dense_block_count", 0);
    if (!lead.ok()) return lead.status();
    if (*lead >= *layers) {
      return BadKey(p + "leading_dense_block_count", "leaves no layer with experts");
    }
    // Bounded by the file: one tensor set per expert would not fit otherwise.
    const std::string first = absl::StrCat("blk.", *lead, ".");
    const GgufTensor* router = file.Find(first + "ffn_gate_inp.weight");
    if (router == nullptr || router->dims.size() != 2 || router->dims[1] != *experts) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GGUF: tensor '", first, "ffn_gate_inp.weight' is missing or not {embedding_length, ",
          *experts, "}"));
    }
    // Granite's and Mixtral's experts are feed_forward_length wide; else the key, or
    // llama.cpp's fallback.
    auto expert_ff = arch == "granitehybrid" || arch == "llama"
                         ? hidden
                         : UInt(m, p + "expert_feed_forward_length",
                                *used > 0 ? *hidden / *used : 0);
    if (!expert_ff.ok()) return expert_ff.status();
    auto gating = UInt(m, p + "expert_gating_func", 1);  // read by lfm2moe only
    if (!gating.ok()) return gating.status();
    if (arch == "lfm2moe") {
      if (*gating < 1 || *gating > 3) {
        return BadKey(p + "expert_gating_func",
                      absl::StrCat(*gating, ": served are 1 (softmax), 2 (sigmoid) and 3 "
                                            "(softmax over the chosen)"));
      }
      c.expert_routing = *gating == 2 ? "sigmoid" : *gating == 3 ? "softmax_topk" : "softmax";
    }
    c.leading_dense_layers = int(*lead);
    c.experts = int(*experts);
    c.experts_used = int(*used);
    c.expert_hidden = int(*expert_ff);
    if (arch != "lfm2moe") c.expert_routing = "softmax";
    c.expert_renormalize = true;  // all renormalise (norm_topk_prob is not read)
    auto scale = Float(m, p + "expert_weights_scale", 0.0);  // llama.cpp: 0 and 1 are none
    if (!scale.ok()) return scale.status();
    if (*scale != 0.0) c.expert_weights_scale = float(*scale);
    const GgufTensor* shared = file.Find(first + "ffn_up_shexp.weight");
    if (shared != nullptr) {
      if (shared->dims.size() != 2) {
        return absl::InvalidArgumentError(
            absl::StrCat("GGUF: tensor '", first, "ffn_up_shexp.weight' is not a matrix"));
      }
      c.shared_expert_hidden = int(shared->dims[1]);
      c.shared_expert_gate = file.Find(first + "ffn_gate_inp_shexp.weight") != nullptr;
    }
    if (*lead == 0) *hidden = c.shared_expert_hidden > 0 ? c.shared_expert_hidden : c.expert_hidden;
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
    const int64_t q_rows = (gdn ? 2 : 1) * *heads * *key_length;  // Qwen3.5: [q | gate]
    for (absl::Status s : {expect(last + "attn_q.weight", {*dim, q_rows}),
                           expect(last + "attn_k.weight", {*dim, *kv_heads * *key_length})}) {
      if (!s.ok()) return s;
    }
  }
  if (c.mlp && c.experts == 0) {
    const std::string last = absl::StrCat("blk.", *layers - 1, ".");
    if (absl::Status s = expect(last + "ffn_up.weight", {*dim, *hidden}); !s.ok()) return s;
  }
  if (c.experts > 0) {
    const std::string last = absl::StrCat("blk.", *layers - 1, ".");
    const bool merged = file.Find(last + "ffn_gate_up_exps.weight") != nullptr &&
                        file.Find(last + "ffn_up_exps.weight") == nullptr;
    if (absl::Status s = merged ? expect(last + "ffn_gate_up_exps.weight",
                                         {*dim, 2 * c.expert_hidden, c.experts})
                                : expect(last + "ffn_up_exps.weight",
                                         {*dim, c.expert_hidden, c.experts});
        !s.ok()) {
      return s;
    }
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
  if ((arch == "qwen3" || arch == "qwen3moe" || gdn) && last_attention >= 0 &&
      !c.qk_head_norm) {
    return absl::InvalidArgumentError(absl::StrCat("GGUF: a ", arch.get<std::string>(),
                                                   " file needs blk.N.attn_q_norm.weight"));
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
      {"conv_out", "shortconv.out_proj"},
      // Gated DeltaNet (with ssm_conv_w, ssm_dt_bias, ssm_a, ssm_norm, ssm_out above).
      {"gdn_qkv", "attn_qkv"},    {"gdn_z", "attn_gate"}, {"gdn_beta", "ssm_beta"},
      {"gdn_alpha", "ssm_alpha"},
      // Mixtures of experts: each expert is a slice of a 3-D tensor (GgufExpertIndex).
      {"router", "ffn_gate_inp"}, {"expert_bias", "exp_probs_b.bias"},
      {"shared_gate", "ffn_gate_inp_shexp"}};
  // "layers.N.rest"
  const size_t dot = name.find('.', 7);
  const std::string layer = name.substr(7, dot - 7);
  std::string rest = name.substr(dot + 1);
  if (absl::StartsWith(rest, "experts.")) {  // "experts.E.w_gate" -> ffn_gate_exps
    const std::string matrix = rest.substr(rest.rfind('.') + 1);
    const char* kind = matrix == "w_gate" ? "gate" : matrix == "w_up" ? "up" : "down";
    return absl::StrCat("blk.", layer, ".ffn_", kind, "_exps.weight");
  }
  auto it = kLayer.find(rest);
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
  const json arch = file.metadata.value("general.architecture", json());
  if (name == "norm" && (arch == "lfm2" || arch == "lfm2moe")) {
    return "token_embd_norm.weight";  // LFM2's final norm
  }
  std::string gguf = GgufTensorName(name);
  if (GgufMergedGateUp(file, name)) {  // converted with --fuse-gate-up-exps
    return absl::StrCat(gguf.substr(0, gguf.find(".ffn_")), ".ffn_gate_up_exps.weight");
  }
  if (GgufExpertIndex(name) < 0 && absl::StartsWith(name, "layers.") &&
      config.HasExperts(std::atoi(name.c_str() + 7)) &&
      (absl::EndsWith(name, ".w_gate") || absl::EndsWith(name, ".w_up") ||
       absl::EndsWith(name, ".w_down"))) {
    // Beside experts, the SwiGLU is the shared expert: ffn_gate -> ffn_gate_shexp.
    gguf = absl::StrCat(gguf.substr(0, gguf.size() - 7), "_shexp.weight");
  }
  if (absl::EndsWith(name, ".mlp_norm") && GdnArchitecture(arch)) {
    gguf = absl::StrCat(gguf.substr(0, gguf.rfind("ffn_norm")), "post_attention_norm.weight");
  }
  if (arch == "qwen3next" &&
      (absl::EndsWith(name, ".gdn_beta") || absl::EndsWith(name, ".gdn_alpha"))) {
    gguf = absl::StrCat(gguf.substr(0, gguf.rfind("ssm_")), "ssm_ba.weight");  // both in one
  }
  if (LegacyQkvz(file, name)) {  // "blk.N.attn_qkv.weight" -> "blk.N.ssm_in.weight"
    gguf = absl::StrCat(gguf.substr(0, gguf.find('.', 4)), ".ssm_in.weight");
  }
  return gguf;
}

bool LegacyQkvz(const GgufFile& file, const std::string& name) {
  if (!absl::EndsWith(name, ".gdn_qkv") && !absl::EndsWith(name, ".gdn_z")) return false;
  const std::string block = absl::StrCat("blk.", name.substr(7, name.find('.', 7) - 7), ".");
  return file.metadata.value("general.architecture", json()) == "qwen3next" &&
         file.Find(block + "attn_qkv.weight") == nullptr &&
         file.Find(block + "ssm_in.weight") != nullptr;
}

std::vector<int64_t> GgufRowMap(const GgufFile& file, const ModelConfig& config,
                                const std::string& name) {
  if (!config.gdn_grouped_heads || !absl::StartsWith(name, "layers.")) return {};
  const std::string rest = name.substr(name.find('.', 7) + 1);
  const int64_t nk = config.ssm_groups, nv = config.ssm_heads, r = nv / nk;
  const int64_t dk = config.ssm_state, dv = config.ssm_inner / nv, keys = 2 * nk * dk;
  // Our value head h' = j n_k + g is the file's head g r + j.
  auto head_of = [&](int64_t h) { return (h % nk) * r + h / nk; };
  std::vector<int64_t> map;
  if (LegacyQkvz(file, name)) {
    // ssm_in: per key head g, [q (d_k) | k (d_k) | v (r d_v) | z (r d_v)] (llama.cpp's
    // legacy qwen3next path).
    const int64_t per_key = 2 * dk + 2 * r * dv;
    if (rest == "gdn_qkv") {
      for (int64_t i = 0; i < keys; ++i) {  // q of every key head, then k
        const int64_t part = i / (nk * dk), g = i % (nk * dk) / dk;
        map.push_back(g * per_key + part * dk + i % dk);
      }
    }
    for (int64_t i = 0; i < config.ssm_inner; ++i) {  // v (or z) of our head i / d_v
      const int64_t h = head_of(i / dv), g = h / r, j = h % r;
      map.push_back(g * per_key + 2 * dk + (rest == "gdn_z" ? r * dv : 0) + j * dv + i % dv);
    }
    return map;
  }
  if (rest == "gdn_qkv" || rest == "ssm_conv_w") {  // q | k as they are, v by head
    for (int64_t i = 0; i < keys + config.ssm_inner; ++i) {
      map.push_back(i < keys ? i : keys + head_of((i - keys) / dv) * dv + (i - keys) % dv);
    }
  } else if (rest == "gdn_z") {
    for (int64_t i = 0; i < config.ssm_inner; ++i) map.push_back(head_of(i / dv) * dv + i % dv);
  } else if (rest == "gdn_beta" || rest == "gdn_alpha") {
    // ssm_ba: per key head g, the beta rows of its r value heads, then their alpha rows.
    for (int64_t i = 0; i < nv; ++i) {
      const int64_t h = head_of(i);
      map.push_back(h / r * 2 * r + (rest == "gdn_alpha" ? r : 0) + h % r);
    }
  } else if (rest == "ssm_dt_bias" || rest == "ssm_a") {
    for (int64_t i = 0; i < nv; ++i) map.push_back(head_of(i));
  }
  return map;
}

int GgufExpertIndex(const std::string& name) {
  const size_t at = name.find(".experts.");
  if (!absl::StartsWith(name, "layers.") || at == std::string::npos) return -1;
  const size_t first = at + 9, end = name.find('.', first);
  if (end == std::string::npos || end == first) return -1;
  int index = 0;
  for (size_t i = first; i < end; ++i) {
    if (name[i] < '0' || name[i] > '9' || index > 1 << 20) return -1;
    index = index * 10 + (name[i] - '0');
  }
  return index;
}

bool GgufMergedGateUp(const GgufFile& file, const std::string& name) {
  if (GgufExpertIndex(name) < 0 || absl::EndsWith(name, ".w_down")) return false;
  const std::string gate = GgufTensorName(name.substr(0, name.rfind('.')) + ".w_gate");
  const std::string merged =
      absl::StrCat(gate.substr(0, gate.find(".ffn_")), ".ffn_gate_up_exps.weight");
  return file.Find(gate) == nullptr && file.Find(merged) != nullptr;
}

std::vector<int64_t> GgufFileShape(const GgufFile& file, const ModelConfig& config,
                                   const std::string& name, const std::vector<int64_t>& shape) {
  if (config.gdn_grouped_heads &&
      (absl::EndsWith(name, ".gdn_beta") || absl::EndsWith(name, ".gdn_alpha"))) {
    return {2 * shape[0], shape[1]};  // ssm_ba holds both
  }
  if (LegacyQkvz(file, name)) {  // ssm_in holds q, k, v and z
    return {2 * int64_t{config.ssm_groups} * config.ssm_state + 2 * int64_t{config.ssm_inner},
            shape[1]};
  }
  if (GgufExpertIndex(name) < 0) return shape;
  // (E, F, in); merged gate and up: (E, 2F, in), each expert's gate rows then its up rows.
  std::vector<int64_t> out = {config.experts, (GgufMergedGateUp(file, name) ? 2 : 1) * shape[0]};
  out.insert(out.end(), shape.begin() + 1, shape.end());
  return out;
}

namespace {

// The first row of expert parameter `name` of `shape` among its file tensor's E * rows.
int64_t ExpertFirstRow(const GgufFile& file, const std::string& name,
                       const std::vector<int64_t>& shape) {
  const int64_t e = GgufExpertIndex(name);
  if (!GgufMergedGateUp(file, name)) return e * shape[0];
  return 2 * e * shape[0] + (absl::EndsWith(name, ".w_up") ? shape[0] : 0);
}

}  // namespace

bool GgufOptionalTensor(const std::string& name) {
  // Granite's conv may have no bias; a sigmoid router may have no selection bias: zeros.
  return absl::EndsWith(name, ".ssm_conv_b") || absl::EndsWith(name, ".expert_bias");
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
  const std::vector<int64_t> want = GgufFileShape(file, config, name, shape);
  if (t->shape() != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GGUF: tensor '", gguf, "' has shape [", absl::StrJoin(t->shape(), ", "),
        "] (dims innermost first [", absl::StrJoin(t->dims, ", "), "]), the model needs [",
        absl::StrJoin(want, ", "), "]"));
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
  if (GgufExpertIndex(name) >= 0) {  // the expert's slice of the 3-D tensor
    const int64_t first = ExpertFirstRow(file, name, shape) * shape[1];
    return std::vector<float>(values->begin() + first,
                              values->begin() + first + shape[0] * shape[1]);
  }
  if (const std::vector<int64_t> map = GgufRowMap(file, config, name); !map.empty()) {
    const int64_t columns = shape.size() > 1 ? shape[1] : 1;
    std::vector<float> rows(map.size() * size_t(columns));
    for (size_t i = 0; i < map.size(); ++i) {
      std::copy_n(values->begin() + map[i] * columns, columns, rows.begin() + int64_t(i) * columns);
    }
    return rows;
  }
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
  // An expert: its F rows of the 3-D tensor's rows (whole blocks each).
  const int64_t first = GgufExpertIndex(name) >= 0 ? ExpertFirstRow(file, name, shape) : 0;
  const int64_t row_bytes = weights::RowBytes(*type, shape[1]);
  const char* rows = (*t)->bytes.data() + first * row_bytes;
  std::string gathered;  // the rows GgufRowMap picks, in its order
  if (const std::vector<int64_t> map = GgufRowMap(file, config, name); !map.empty()) {
    for (int64_t r : map) gathered.append(rows + r * row_bytes, size_t(row_bytes));
    rows = gathered.data();
  }
  auto packed = weights::PackedMatrix::Copy(*type, shape[0], shape[1], rows);
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
