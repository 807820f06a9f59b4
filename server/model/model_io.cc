// Model::Load and Model::Save: the model directory (server/DESIGN.md §8) with Hugging
// Face's tensor names.
#include <ATen/ATen.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/common/torch_status.h"
#include "server/model/gguf_model.h"
#include "server/model/hf_config.h"
#include "server/model/model.h"
#include "server/model/safetensors.h"

namespace attnserve::model {
namespace {

// Internal per-layer names (Model::NamedParameters) -> Hugging Face's, after
// "model.layers.N.". Attention-module parameters ("attn.NAME") go under "self_attn.NAME".
const std::map<std::string, std::string>& LayerNames() {
  static const auto* kNames = new std::map<std::string, std::string>{
      {"attn_norm", "input_layernorm.weight"},
      // q and k load as they are: Hugging Face's rotate-half RoPE layout (pairs i and
      // i + D/2) is ours. A source with interleaved RoPE pairs (Meta's originals,
      // llama2.c, GGUF) needs the rows of q_proj and k_proj permuted within each head to
      // [0, 2, 4, ..., D-2, 1, 3, 5, ..., D-1] first.
      {"wq", "self_attn.q_proj.weight"},
      {"wk", "self_attn.k_proj.weight"},
      {"wv", "self_attn.v_proj.weight"},
      {"wo", "self_attn.o_proj.weight"},
      {"mlp_norm", "post_attention_layernorm.weight"},
      {"w_gate", "mlp.gate_proj.weight"},
      {"w_up", "mlp.up_proj.weight"},
      {"w_down", "mlp.down_proj.weight"},
      // Qwen2's projection biases and Qwen3's per-head q/k norms.
      {"bq", "self_attn.q_proj.bias"},
      {"bk", "self_attn.k_proj.bias"},
      {"bv", "self_attn.v_proj.bias"},
      {"q_norm", "self_attn.q_norm.weight"},
      {"k_norm", "self_attn.k_norm.weight"},
  };
  return *kNames;
}

constexpr char kHeadName[] = "lm_head.weight";

// Buffers some checkpoints carry that are not weights: skipped, and listed in the load
// log. The paper's checkpoints hold an unused positional table per layer
// (self_attn.abs_pos_enc.pe); older transformers saved RoPE's inv_freq.
bool IsIgnoredBuffer(const std::string& name) {
  return absl::EndsWith(name, ".self_attn.abs_pos_enc.pe") ||
         absl::EndsWith(name, "rotary_emb.inv_freq");
}

std::string ShapeText(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// The directory's name for a model without "name" in config.json.
std::string DirName(const std::string& dir) {
  std::filesystem::path p = std::filesystem::path(dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

// Where a parameter of a recurrent family's directory (hf_config.h: mamba2,
// granitemoehybrid, lfm2) is, and how its values become the parameter's.
struct HfSource {
  std::string name;            // the tensor in the directory; empty: not read
  std::vector<int64_t> shape;  // its shape there
  std::string alias;           // another name the tensor may have
  // The parameter is rows [row_begin, row_begin + its rows) of the tensor (Granite's
  // shared_mlp.input_linear holds the gate's rows, then the up projection's).
  int64_t row_begin = 0;
  bool neg_exp = false;  // the parameter is -exp(tensor): A from A_log
  bool absent = false;   // not in the directory (a conv bias the config says is none): zeros
};

// The parameter `name` (internal, Model::Slots) of shape `shape` in a recurrent family's
// directory: Hugging Face's modelling files' names (modeling_mamba2.py: backbone.embeddings,
// backbone.layers.N.norm / .mixer.*, backbone.norm_f; modeling_granitemoehybrid.py:
// model.layers.N.input_layernorm, .self_attn.*, .mamba.*, .post_attention_layernorm,
// .shared_mlp.*; modeling_lfm2.py: model.layers.N.operator_norm, .self_attn.{q,k,v,out}_proj,
// .self_attn.{q,k}_layernorm, .conv.*, .ffn_norm, .feed_forward.w1/w3/w2,
// model.embedding_norm). Layouts that differ from ours: conv1d / conv weights (C, 1, K),
// A_log (H) where we hold A = -exp(A_log) as (H, 1), D (H) as (H, 1), the gated norm's
// weight (I) as (1, I) (one group).
HfSource RecurrentHfSource(const HfLayout& layout, const std::string& name,
                           const std::vector<int64_t>& shape) {
  const bool mamba2 = layout.model_type == "mamba2", lfm2 = layout.model_type == "lfm2";
  const std::string root = mamba2 ? "backbone." : "model.";
  if (name == "embed") {
    // Mamba2Model's load hook renames an "embedding." checkpoint's tensor.
    return {root + (mamba2 ? "embeddings.weight" : "embed_tokens.weight"), shape,
            mamba2 ? "backbone.embedding.weight" : ""};
  }
  if (name == "norm") {
    return {mamba2 ? "backbone.norm_f.weight"
                   : lfm2 ? "model.embedding_norm.weight" : "model.norm.weight",
            shape};
  }
  if (name == "head") return {kHeadName, shape};
  const size_t dot = name.find('.', 7);  // "layers.N.rest"
  if (!absl::StartsWith(name, "layers.") || dot == std::string::npos) return {"", shape};
  const std::string layer = root + name.substr(0, dot) + ".";
  const std::string rest = name.substr(dot + 1);
  const std::string mamba = layer + (mamba2 ? "mixer." : "mamba.");
  const int64_t rows = shape.empty() ? 0 : shape[0];
  auto at = [&](const std::string& n) { return HfSource{n, shape}; };
  if (rest == "attn_norm") {
    return at(layer + (mamba2 ? "norm.weight" : lfm2 ? "operator_norm.weight"
                                                      : "input_layernorm.weight"));
  }
  if (rest == "mlp_norm") {
    return at(layer + (lfm2 ? "ffn_norm.weight" : "post_attention_layernorm.weight"));
  }
  if (rest == "wq") return at(layer + "self_attn.q_proj.weight");
  if (rest == "wk") return at(layer + "self_attn.k_proj.weight");
  if (rest == "wv") return at(layer + "self_attn.v_proj.weight");
  if (rest == "wo") {
    return at(layer + (lfm2 ? "self_attn.out_proj.weight" : "self_attn.o_proj.weight"));
  }
  if (rest == "q_norm") return at(layer + "self_attn.q_layernorm.weight");
  if (rest == "k_norm") return at(layer + "self_attn.k_layernorm.weight");
  if (rest == "w_gate" || rest == "w_up") {
    if (lfm2) {
      return at(layer + (rest == "w_gate" ? "feed_forward.w1.weight" : "feed_forward.w3.weight"));
    }
    HfSource s{layer + "shared_mlp.input_linear.weight", {2 * rows, shape[1]}};
    s.row_begin = rest == "w_gate" ? 0 : rows;  // chunk(2): silu(first half) * second
    return s;
  }
  if (rest == "w_down") {
    return at(layer + (lfm2 ? "feed_forward.w2.weight" : "shared_mlp.output_linear.weight"));
  }
  if (rest == "ssm_in") return at(mamba + "in_proj.weight");
  if (rest == "ssm_conv_w") return {mamba + "conv1d.weight", {rows, 1, shape[1]}};
  if (rest == "ssm_conv_b") {
    HfSource s = at(mamba + "conv1d.bias");
    s.absent = !layout.conv_bias;
    return s;
  }
  if (rest == "ssm_dt_bias") return at(mamba + "dt_bias");
  if (rest == "ssm_a") {
    HfSource s{mamba + "A_log", {rows}};
    s.neg_exp = true;
    return s;
  }
  if (rest == "ssm_d") return {mamba + "D", {rows}};
  if (rest == "ssm_norm") return {mamba + "norm.weight", {rows * shape[1]}};  // one group
  if (rest == "ssm_out") return at(mamba + "out_proj.weight");
  if (rest == "conv_in") return at(layer + "conv.in_proj.weight");
  if (rest == "conv_w") return {layer + "conv.conv.weight", {rows, 1, shape[1]}};
  if (rest == "conv_out") return at(layer + "conv.out_proj.weight");
  if (absl::StartsWith(rest, "attn.")) return at(layer + "self_attn." + rest.substr(5));
  return {"", shape};
}

}  // namespace

std::string HfTensorName(const std::string& name) {
  if (name == "embed") return "model.embed_tokens.weight";
  if (name == "norm") return "model.norm.weight";
  if (name == "head") return kHeadName;
  // "layers.N.rest"
  const size_t dot = name.find('.', 7);
  const std::string prefix = absl::StrCat("model.", name.substr(0, dot), ".");
  const std::string rest = name.substr(dot + 1);
  if (absl::StartsWith(rest, "attn.")) return prefix + "self_attn." + rest.substr(5);
  return prefix + LayerNames().at(rest);
}

// A GGUF file (gguf_model.h): the same steps as a directory, with the file's metadata
// as the config and its tensors dequantized.
absl::StatusOr<std::unique_ptr<Model>> Model::LoadGguf(const std::string& path,
                                                       const LoadOptions& options) {
  auto reader = GgufReader::Open(path);
  if (!reader.ok()) return reader.status();
  const GgufFile& file = (*reader)->file();
  std::string name = std::filesystem::path(path).filename().string();
  name = name.substr(0, name.size() - std::strlen(kGgufSuffix));
  auto config = GgufModelConfig(file, name);
  if (!config.ok()) {
    return absl::Status(config.status().code(), absl::StrCat(path, ": ", config.status().message()));
  }
  config->attention.max_state_bytes_per_layer = options.max_state_bytes_per_layer;
  config->attention.state_bf16 = options.state_bf16;
  config->attention.kv_cache_type = options.kv_cache_type;
  if (!options.attention_module.empty()) {
    if (absl::Status s = attention::CheckServableAs(
            config->attention, options.attention_module, options.attention_order);
        !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(path, ": ", s.message(),
                                                 " (a GGUF model is softmax attention)"));
    }
  }
  if (absl::Status s = ValidateModelConfig(*config); !s.ok()) {  // with the state budget
    return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
  }
  // Every tensor the network reads, checked (present, its shape, a type read) before
  // anything is allocated for it.
  {
    auto checked = CreateEmpty(*config);
    if (!checked.ok()) return checked.status();
    for (const Slot& slot : (*checked)->Slots()) {
      const std::string gguf = GgufFileTensorName(file, *config, slot.name);
      const GgufTensor* t = file.Find(gguf);
      if (t == nullptr && GgufOptionalTensor(slot.name)) continue;
      if (t == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ": GGUF: tensor '", gguf, "' is missing (the model needs shape [",
            absl::StrJoin(slot.shape, ", "), "])"));
      }
      const std::vector<int64_t> want = GgufFileShape(file, *config, slot.name, slot.shape);
      if (t->shape() != want) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ": GGUF: tensor '", gguf, "' has shape [", absl::StrJoin(t->shape(), ", "),
            "], the model needs [", absl::StrJoin(want, ", "), "]"));
      }
      if (auto type = GgufWeightType(*t); !type.ok()) {
        return absl::Status(type.status().code(), absl::StrCat(path, ": ", type.status().message()));
      }
    }
  }
  // Validated: now the network, with no weights until each is read from the file.
  auto model = CreateEmpty(*config);
  if (!model.ok()) return model.status();
  std::set<std::string> used;
  absl::Status copied = CatchTorch("loading weights", [&]() -> absl::Status {
    c10::NoGradGuard no_grad;
    for (Slot& slot : (*model)->Slots()) {
      auto fail = [&](const absl::Status& s) {
        return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
      };
      const std::string gguf = GgufFileTensorName(file, *config, slot.name);
      if (file.Find(gguf) == nullptr && GgufOptionalTensor(slot.name)) {
        *slot.dense = at::zeros(slot.shape);
        continue;
      }
      if (slot.packed != nullptr && !options.dequantize) {
        // A matrix or the embedding: kept as the file holds it (F32 as a tensor).
        auto matrix = GgufMatrixParameter(file, *config, slot.name, slot.shape);
        if (!matrix.ok()) return fail(matrix.status());
        if (matrix->packed != nullptr) {
          *slot.packed = matrix->packed;
        } else {
          *slot.dense = at::from_blob(matrix->dense.data(), slot.shape, at::kFloat).clone();
        }
      } else {
        auto values = GgufParameter(file, *config, slot.name, slot.shape);
        if (!values.ok()) return fail(values.status());
        *slot.dense = at::from_blob(values->data(), slot.shape, at::kFloat).clone();
      }
      used.insert(gguf);
      (*reader)->Release(file.Find(gguf)->bytes);  // copied: the file's pages may go
    }
    if (config->tie_embeddings) {  // the head is the embedding (Slots has no "head")
      (*model)->head_ = (*model)->embed_;
      (*model)->head_packed_ = (*model)->embed_packed_;
    }
    return absl::OkStatus();
  });
  (*model)->ChooseStepPath();
  if (!copied.ok()) return copied;
  std::vector<std::string> ignored;
  for (const GgufTensor& t : file.tensors) {
    if (used.count(t.name) == 0) ignored.push_back(t.name);
  }
  if (!ignored.empty()) {
    std::fprintf(stderr, "attnserve: %s: ignored %zu tensors that are not weights: %s\n",
                 path.c_str(), ignored.size(), absl::StrJoin(ignored, ", ").c_str());
  }
  if (options.weights_bf16) (*model)->UseBf16Weights();
  return model;
}

absl::StatusOr<std::unique_ptr<Model>> Model::Load(const std::string& dir,
                                                   const LoadOptions& options) {
  if (IsGgufPath(dir)) return LoadGguf(dir, options);
  HfLayout layout;
  auto config = ReadHfConfigFile(dir + "/" + kHfConfigFile, DirName(dir), &layout);
  if (!config.ok()) return config.status();
  auto weights = SafetensorsReader::OpenDir(dir);
  if (!weights.ok()) return weights.status();
  const bool recurrent_layout = IsHfRecurrentModelType(layout.model_type);
  // Where each parameter is in the directory.
  auto source = [&](const std::string& name, const std::vector<int64_t>& shape) {
    return recurrent_layout ? RecurrentHfSource(layout, name, shape)
                            : HfSource{HfTensorName(name), shape};
  };
  auto find = [&](const HfSource& s) -> const SafetensorsEntry* {
    const SafetensorsEntry* e = s.name.empty() ? nullptr : (*weights)->Find(s.name);
    if (e == nullptr && !s.alias.empty()) e = (*weights)->Find(s.alias);
    return e;
  };
  // The vocabulary is the embedding's rows: configs pad it or add tokens.
  const SafetensorsEntry* embed = find(source("embed", {}));
  if (embed != nullptr && embed->shape.size() == 2 && embed->shape[0] != config->vocab_size) {
    std::fprintf(stderr, "attnserve: %s: config.json says vocab_size %d, the embedding has %lld "
                 "rows: serving %lld\n", dir.c_str(), config->vocab_size,
                 static_cast<long long>(embed->shape[0]), static_cast<long long>(embed->shape[0]));
    config->vocab_size = int(embed->shape[0]);
  }
  config->attention.max_state_bytes_per_layer = options.max_state_bytes_per_layer;
  config->attention.state_bf16 = options.state_bf16;
  config->attention.kv_cache_type = options.kv_cache_type;
  if (!options.attention_module.empty()) {
    if (absl::Status s = attention::CheckServableAs(
            config->attention, options.attention_module, options.attention_order);
        !s.ok()) {
      return s;
    }
    config->attention.module = options.attention_module;
    if (options.attention_order != 0) config->attention.order = options.attention_order;
  }
  if (absl::Status s = ValidateModelConfig(*config); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(dir, ": ", s.message()));
  }
  std::optional<weights::WeightType> quantize;
  if (!options.quantize.empty()) {
    for (auto type : {weights::WeightType::kQ8_0, weights::WeightType::kQ4_0,
                      weights::WeightType::kQ4_K, weights::WeightType::kQ5_K,
                      weights::WeightType::kQ6_K}) {
      if (absl::AsciiStrToLower(weights::WeightTypeName(type)) == options.quantize) quantize = type;
    }
    if (!quantize.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "quantize '", options.quantize, "': attnserve quantizes to q8_0, q4_0, q4_k, q5_k or q6_k"));
    }
  }
  // The network with no weights; each slot is filled from the file below.
  auto model = CreateEmpty(*config);
  if (!model.ok()) return model.status();
  std::set<std::string> used;
  absl::Status copied = CatchTorch("loading weights", [&]() -> absl::Status {
    c10::NoGradGuard no_grad;
    // Every slot, then the attention modules' own parameters (copied into their tensors).
    struct Wanted {
      std::string name;
      std::vector<int64_t> shape;
      at::Tensor* dense;   // null: `into` receives the values
      Packed* packed;      // null: never packed
      at::Tensor into;
    };
    std::vector<Wanted> wanted;
    for (Slot& slot : (*model)->Slots()) {
      wanted.push_back({slot.name, slot.shape, slot.dense, slot.packed, at::Tensor()});
    }
    for (auto& [name, param] : (*model)->NamedParameters()) {
      if (name.find(".attn.") == std::string::npos) continue;
      wanted.push_back({name, param.sizes().vec(), nullptr, nullptr, param});
    }
    for (Wanted& w : wanted) {
      const HfSource src = source(w.name, w.shape);
      const std::string& hf = src.name;
      if (src.absent && w.dense != nullptr) {
        *w.dense = at::zeros(w.shape);
        continue;
      }
      const SafetensorsEntry* e = find(src);
      if (e == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            dir, ": tensor '", hf.empty() ? w.name : hf, "' is missing (the config needs shape ",
            ShapeText(src.shape), ")"));
      }
      if (absl::Span<const int64_t>(e->shape) != absl::Span<const int64_t>(src.shape)) {
        return absl::InvalidArgumentError(absl::StrCat(
            dir, ": tensor '", e->name, "' has shape ", ShapeText(e->shape), ", the config needs ",
            ShapeText(src.shape)));
      }
      used.insert(e->name);
      const int64_t row_width =
          w.shape.size() == 2 ? w.shape[1] : 1;  // values per row of a matrix
      const bool sixteen = e->dtype == "F16" || e->dtype == "BF16";
      if (w.packed != nullptr && !options.dequantize && !quantize.has_value() && sixteen) {
        // 16-bit matrices stay 16-bit (the file's bytes; rows are contiguous).
        auto packed = weights::PackedMatrix::Copy(
            e->dtype == "F16" ? weights::WeightType::kF16 : weights::WeightType::kBF16,
            w.shape[0], w.shape[1], e->bytes.data() + src.row_begin * row_width * 2);
        if (!packed.ok()) return packed.status();
        *w.packed = std::make_shared<const weights::PackedMatrix>(std::move(packed).value());
        continue;
      }
      auto values = ToFloat32(*e);
      if (!values.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(dir, ": ", values.status().message()));
      }
      if (src.row_begin > 0 || src.shape != w.shape) {  // a block of rows, or reshaped
        int64_t count = 1;
        for (int64_t d : w.shape) count *= d;
        values->erase(values->begin(), values->begin() + src.row_begin * row_width);
        values->resize(size_t(count));
      }
      if (src.neg_exp) {
        for (float& v : *values) v = -std::exp(v);
      }
      if (w.packed != nullptr && !options.dequantize && quantize.has_value()) {
        auto packed =
            weights::PackedMatrix::Quantize(*quantize, w.shape[0], w.shape[1], values->data());
        if (!packed.ok()) {
          return absl::InvalidArgumentError(absl::StrCat(dir, ": tensor '", hf, "': ",
                                                         packed.status().message()));
        }
        *w.packed = std::make_shared<const weights::PackedMatrix>(std::move(packed).value());
      } else if (w.dense != nullptr) {
        *w.dense = at::from_blob(values->data(), w.shape, at::kFloat).clone();
      } else {
        w.into.copy_(at::from_blob(values->data(), w.shape, at::kFloat));
      }
    }
    if (config->tie_embeddings) {  // the head is the embedding (Slots has no "head")
      (*model)->head_ = (*model)->embed_;
      (*model)->head_packed_ = (*model)->embed_packed_;
    }
    return absl::OkStatus();
  });
  (*model)->ChooseStepPath();
  if (!copied.ok()) return copied;
  std::vector<std::string> ignored;
  for (const SafetensorsEntry& e : (*weights)->tensors()) {
    if (used.count(e.name) > 0) continue;
    // Tied: the head is the embedding, as transformers ties it; a stored copy is unused.
    if (IsIgnoredBuffer(e.name) || (config->tie_embeddings && e.name == kHeadName)) {
      ignored.push_back(e.name);
      continue;
    }
    if (recurrent_layout) {
      return absl::InvalidArgumentError(absl::StrCat(
          dir, ": tensor '", e.name, "' is not a parameter of this ", layout.model_type,
          " model (", config->tie_embeddings ? "tied" : "untied", "; layers ",
          absl::StrJoin(config->mixers.empty() ? std::vector<std::string>{kAttentionMixer}
                                               : config->mixers, ", "),
          "): attnserve reads the names of Hugging Face's modeling_", layout.model_type, ".py"));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        dir, ": tensor '", e.name, "' is not a parameter of this model (",
        config->tie_embeddings ? "tied" : "untied", " Llama with attention module ",
        config->attention.module, "); attnserve reads model.embed_tokens.weight, "
        "model.layers.N.{input_layernorm,post_attention_layernorm}.weight, "
        "model.layers.N.self_attn.{q,k,v,o}_proj.weight, "
        "model.layers.N.mlp.{gate,up,down}_proj.weight, model.norm.weight, lm_head.weight"));
  }
  if (!ignored.empty()) {
    std::fprintf(stderr, "attnserve: %s: ignored %zu tensors that are not weights: %s\n",
                 dir.c_str(), ignored.size(), absl::StrJoin(ignored, ", ").c_str());
  }
  if (options.weights_bf16) (*model)->UseBf16Weights();
  return model;
}

absl::Status Model::Save(const std::string& dir) const {
  const ModelConfig& c = config_;
  if (c.HasRecurrent() || !c.mlp || !c.rope || c.embedding_scale != 1.0f ||
      c.residual_scale != 1.0f || c.logit_scale != 1.0f || c.attention_scale != 0.0f ||
      c.experts > 0 || c.attention_gate || c.rope_dims != 0 || !c.rope_sections.empty()) {
    return absl::UnimplementedError(
        "a model with recurrent layers, without MLPs or RoPE, with Granite's multipliers, "
        "experts or Qwen3.5's attention is not saved as a directory: Save writes Llama / "
        "Qwen directories only");
  }
  if (HasPackedWeights()) {
    return absl::FailedPreconditionError(
        "a model with packed weights is not saved as fp32 safetensors: load it with every "
        "weight dequantized (LoadOptions::dequantize) to save it");
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  const std::string config_path = dir + "/" + kHfConfigFile;
  {
    std::ofstream f(config_path, std::ios::trunc);
    f << HfConfigToJson(config_);
    f.close();
    if (!f) return absl::InternalError(absl::StrCat("cannot write ", config_path));
  }
  return CatchTorch("writing weights", [&]() -> absl::Status {
    std::vector<at::Tensor> kept;  // contiguous fp32, alive until written
    std::vector<SafetensorsTensor> tensors;
    for (const auto& [name, t] : NamedParameters()) {
      kept.push_back(t.detach().to(at::kFloat).contiguous());
      tensors.push_back({HfTensorName(name), kept.back().sizes().vec(),
                         kept.back().data_ptr<float>()});
    }
    // transformers reads a checkpoint only when its metadata says format "pt".
    return WriteSafetensors(dir + "/" + kSafetensorsFile, tensors, SafetensorsDtype::kF32,
                            {{"format", "pt"}});
  });
}

}  // namespace attnserve::model
