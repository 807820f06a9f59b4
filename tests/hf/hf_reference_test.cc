// attnserve against an oracle it did not write: the model directories that
// tests/hf/make_reference.py trains and saves in plain PyTorch, and the logits and greedy
// continuations PyTorch recorded for them (tests/README.md, "tests/hf"). Every path of the model
// (Forward, chunked Prefill, Step one token at a time, fused and reference) must give
// PyTorch's logits within kTolerance and its greedy continuation exactly.
//
// ATTNSERVE_HF_REFERENCE names make_reference.py's output directory (models/NAME and
// reference/NAME); CTest's fixture hf_make_reference writes it first.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "server/model/model.h"

namespace attnserve::model {
namespace {

// Largest |attnserve - PyTorch| allowed in any logit, every directory. The bf16 one too:
// its reference ran the same bf16-rounded weights in fp32 arithmetic, so only the order
// of fp32 operations differs. Logits here span about +-15.
constexpr double kTolerance = 1e-4;

// LoadOptions::quantize = "q8_0": every matrix and the embedding quantized at load to
// ggml's Q8_0 (blocks of 32 weights: an f16 scale and 32 int8, 34 bytes), the norms and
// biases left fp32. make_reference.py records PyTorch's logits on the weights rounded as
// ggml rounds them (logits_full_q8_0): the LibTorch paths, which dequantize and run fp32,
// must give those within kTolerance. The fused step's dot products also take the
// activations to 8 bits (weights::PackedLinear, as ggml's Q8_0 x Q8_0 dot): within
// kQ8FusedBound of them (measured 0.053 on logits of std 2.1). Against PyTorch's fp32
// logits every path stays within kQ8Bound (measured 0.064), so greedy decoding must give
// PyTorch's ids for as long as PyTorch's top-1 leads by more than 2 x kQ8Bound: logits
// that close to PyTorch's cannot reorder its top two.
constexpr double kQ8Bound = 0.1;
constexpr double kQ8FusedBound = 0.1;

// The directories make_reference.py writes, with what each one exercises and what its
// config.json must give.
struct Dir {
  const char* name;
  const char* what;
  int kv_heads;  // of 4 query heads
  int head_dim;
  bool tied;
  const char* module;
  float eps, theta;
  bool attention_bias;  // Qwen2's q/k/v biases
  bool qk_head_norm;    // Qwen3's per-head q/k RMSNorm
  const char* sixteen_bit_of;  // a 16-bit directory: its fp32 twin (same weights, rounded)
  const char* weight_type;     // the packed matrices' WeightTypes(), or "F32"
};
const Dir kDirs[] = {
    {"gqa_tied", "4 query heads on 2 KV heads, tied head (no lm_head.weight), BPE", 2, 16, true,
     "softmax", 1e-5f, 1e4f, false, false, nullptr, "F32"},
    {"gqa_tied_bf16", "the same weights stored as BF16", 2, 16, true, "softmax", 1e-5f, 1e4f,
     false, false, "gqa_tied", "BF16 100%"},
    {"mha", "untied, head_dim 32 with hidden 64 (4 x 32 != 64), eps 1e-6, theta 5e5", 4, 32,
     false, "softmax", 1e-6f, 5e5f, false, false, nullptr, "F32"},
    {"mha_sharded", "the same weights in model.safetensors.index.json + 2 shards", 4, 32, false,
     "softmax", 1e-6f, 5e5f, false, false, nullptr, "F32"},
    {"taylor2", "taylor order 2, 4 on 2 KV heads, prefill chunks of 8, unigram", 2, 16, false,
     "taylor", 1e-5f, 1e4f, false, false, nullptr, "F32"},
    {"qwen2", "model_type qwen2: q/k/v biases, 4 on 2 KV heads, untied, sliding_window 4096 "
     "unused", 2, 16, false, "softmax", 1e-6f, 1e6f, true, false, nullptr, "F32"},
    {"qwen2_f16", "the same weights stored as F16 (biases and norms too)", 2, 16, false,
     "softmax", 1e-6f, 1e6f, true, false, "qwen2", "F16 100%"},
    {"qwen3", "model_type qwen3: per-head q/k RMSNorm, head_dim 32 with hidden 64, 4 on 2 KV "
     "heads, tied", 2, 32, true, "softmax", 1e-6f, 1e6f, false, true, nullptr, "F32"},
};

// The recurrent and hybrid layouts: tests/hf/hybrid_reference.py's random-weight
// directories (ATTNSERVE_HF_HYBRID_REFERENCE), what each one's config.json must give.
struct HybridDir {
  const char* name;
  const char* what;
  std::vector<std::string> mixers;  // empty: every layer attention
  bool mlp, rope, tied, qk_head_norm;
  int kv_heads, mlp_hidden, conv_kernel;
  float embedding_scale, residual_scale, logit_scale, attention_scale;
  const char* weight_type;  // WeightTypes()
};
const HybridDir kHybridDirs[] = {
    {"mamba2", "Mamba2ForCausalLM: 2 Mamba-2 layers (8 heads of 16, state 16, conv 4 with "
     "bias), no MLP, untied, time_step_limit [0.0, Infinity]",
     {"mamba2", "mamba2"}, false, false, false, false, 1, 0, 4, 1, 1, 1, 0, "F32"},
    {"granitehybrid", "GraniteMoeHybridForCausalLM, dense: mamba / GQA attention (4 on 2) "
     "without RoPE, Granite's multipliers, conv bias, untied",
     {"mamba2", "attention", "mamba2", "attention"}, true, false, false, false, 2, 96, 4, 12.0f,
     0.22f, 4.0f, 0.0078125f, "F32"},
    {"granitehybrid_rope", "the same kinds with RoPE, no conv1d.bias (mamba_conv_bias false), "
     "tied, shared_mlp.input_linear stored as BF16 (split into gate and up in 16 bits)",
     {"mamba2", "attention", "mamba2", "attention"}, true, true, true, false, 2, 96, 4, 0.5f,
     1.5f, 0.5f, 0.25f, "BF16 100%"},
    {"lfm2", "Lfm2ForCausalLM: short conv / GQA attention (4 on 2) with q/k layernorms, "
     "conv_L_cache 3, tied by default, MLP width 128 from intermediate_size 192",
     {"shortconv", "attention", "shortconv", "attention"}, true, true, true, true, 2, 128, 3, 1,
     1, 1, 0, "F32"},
};

const HybridDir* HybridNamed(const std::string& name) {
  for (const HybridDir& d : kHybridDirs) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

std::string HybridOutDir() {
  const char* dir = std::getenv("ATTNSERVE_HF_HYBRID_REFERENCE");
  return dir ? dir : "";
}

const Dir& DirNamed(const std::string& name) {
  for (const Dir& d : kDirs) {
    if (name == d.name) return d;
  }
  ADD_FAILURE() << "no directory " << name;
  return kDirs[0];
}

std::string OutDir() {
  const char* dir = std::getenv("ATTNSERVE_HF_REFERENCE");
  return dir ? dir : "";
}

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The F32 tensors of a safetensors file (the oracle's own output; read here without
// the server's reader so that the two are independent).
std::map<std::string, at::Tensor> ReadF32Safetensors(const std::filesystem::path& path) {
  const std::string bytes = ReadFile(path);
  std::map<std::string, at::Tensor> out;
  if (bytes.size() < 8) return out;
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(bytes[i]);
  const nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
  const char* buffer = bytes.data() + 8 + n;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    EXPECT_EQ(info["dtype"], "F32") << name;
    std::vector<int64_t> shape = info["shape"].get<std::vector<int64_t>>();
    const auto offsets = info["data_offsets"].get<std::vector<uint64_t>>();
    at::Tensor t = at::empty(shape, at::kFloat);
    EXPECT_EQ(offsets[1] - offsets[0], uint64_t(t.numel()) * 4) << name;
    std::memcpy(t.data_ptr<float>(), buffer + offsets[0], t.numel() * 4);
    out[name] = t;
  }
  return out;
}

struct Reference {
  std::string name;  // the model's name (config.json "name")
  std::vector<int32_t> prompt;  // ids of the fixed text, BOS first
  std::vector<int32_t> greedy;  // PyTorch's greedy continuation
  bool stopped_at_eos = false;
  double min_margin = 0;  // smallest top-1 minus top-2 logit over the greedy steps
  std::vector<double> margins;  // top-1 minus top-2 logit at each greedy step
  // Qwen directories: how far PyTorch's logits move without the family's own part
  // (reference.json "ablated"); -1 elsewhere.
  double ablated_diff = -1;
  at::Tensor logits;       // (T, V) over the prompt
  at::Tensor logits_full;  // (T + n, V) over prompt + continuation
  at::Tensor logits_full_q8_0;  // the same with the matrices rounded to Q8_0 (qwen2, hybrids)
  std::vector<int32_t> Full() const {
    std::vector<int32_t> ids = prompt;
    ids.insert(ids.end(), greedy.begin(), greedy.end());
    return ids;
  }
};

Reference LoadReference(const std::string& root, const std::string& dir_name) {
  const std::filesystem::path dir = std::filesystem::path(root) / "reference" / dir_name;
  const nlohmann::json j = nlohmann::json::parse(ReadFile(dir / "reference.json"));
  Reference r;
  r.name = j["model"];
  r.prompt = j["ids"].get<std::vector<int32_t>>();
  r.greedy = j["greedy"]["ids"].get<std::vector<int32_t>>();
  r.stopped_at_eos = j["greedy"]["stopped_at_eos"];
  r.min_margin = j["greedy"]["min_margin"];
  r.margins = j["greedy"]["margins"].get<std::vector<double>>();
  if (j.contains("ablated")) r.ablated_diff = j["ablated"]["max_logit_diff"];
  auto tensors = ReadF32Safetensors(dir / "reference.safetensors");
  r.logits = tensors["logits"];
  r.logits_full = tensors["logits_full"];
  if (tensors.count("logits_full_q8_0") > 0) r.logits_full_q8_0 = tensors["logits_full_q8_0"];
  return r;
}

at::Tensor AsBatch(const std::vector<int32_t>& ids) {  // (1, T) int64
  return at::tensor(std::vector<int64_t>(ids.begin(), ids.end()), at::kLong).unsqueeze(0);
}

double MaxAbsDiff(const at::Tensor& a, const at::Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  if (a.sizes() != b.sizes()) return 1e9;
  return (a - b).abs().max().item<double>();
}

// Every measured difference, printed at the end (the closing note quotes them).
class Report : public testing::Environment {
 public:
  static void Add(const std::string& dir, const std::string& path, double diff) {
    std::lock_guard<std::mutex> lock(mu_);
    rows_.push_back({dir, path, diff});
  }
  void TearDown() override {
    std::cout << "\nmax |attnserve - PyTorch| per directory and path (bound "
              << kTolerance << "; q8_0 rows " << kQ8Bound << "):\n";
    for (const auto& [dir, path, diff] : rows_) {
      std::printf("  %-14s %-26s %.3g\n", dir.c_str(), path.c_str(), diff);
    }
  }

 private:
  struct Row {
    std::string dir, path;
    double diff;
  };
  static inline std::mutex mu_;
  static inline std::vector<Row> rows_;
};

class HfReference : public testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ASSERT_FALSE(Root().empty())
        << (hybrid_ != nullptr ? "ATTNSERVE_HF_HYBRID_REFERENCE is not set (hybrid_reference.py's"
                               : "ATTNSERVE_HF_REFERENCE is not set (make_reference.py's")
        << " output directory)";
    at::set_num_threads(1);
    ref_ = LoadReference(Root(), GetParam());
    ASSERT_TRUE(ref_.logits.defined() && ref_.logits_full.defined()) << GetParam();
    model_ = LoadModel();
    ASSERT_NE(model_, nullptr);
  }

  // make_reference.py's output, or hybrid_reference.py's for its directories.
  std::string Root() const { return hybrid_ != nullptr ? HybridOutDir() : OutDir(); }

  std::string ModelDir() const {
    return (std::filesystem::path(Root()) / "models" / GetParam()).string();
  }

  std::unique_ptr<Model> LoadModel() const {
    auto model = Model::Load(ModelDir());
    EXPECT_TRUE(model.ok()) << ModelDir() << ": " << model.status();
    return model.ok() ? std::move(model).value() : nullptr;
  }

  void Check(const std::string& path, const at::Tensor& got, const at::Tensor& want) {
    const double diff = MaxAbsDiff(got, want);
    Report::Add(GetParam(), path, diff);
    EXPECT_LT(diff, kTolerance) << GetParam() << " " << path;
  }

  // Prefill of `ids` in pieces of 1, 2, 3, ... tokens: every piece's logits rows.
  at::Tensor PrefillInPieces(const Model& model, const std::vector<int32_t>& ids) {
    auto state = model.NewState();
    std::vector<at::Tensor> rows;
    for (size_t at = 0, n = 1; at < ids.size(); at += n, ++n) {
      const size_t len = std::min(n, ids.size() - at);
      auto logits = model.Prefill(*state, absl::MakeConstSpan(ids.data() + at, len));
      EXPECT_TRUE(logits.ok()) << logits.status();
      if (!logits.ok()) return at::Tensor();
      rows.push_back(*logits);
    }
    EXPECT_EQ(state->position(), int64_t(ids.size()));
    return at::cat(rows, 0);
  }

  // Step over `ids` one token at a time from a new state: (T, V).
  at::Tensor StepOneByOne(const Model& model, const std::vector<int32_t>& ids) {
    auto state = model.NewState();
    std::vector<at::Tensor> rows;
    DecodeState* states[] = {state.get()};
    for (int32_t id : ids) {
      auto logits = model.Step(states, {id});
      EXPECT_TRUE(logits.ok()) << logits.status();
      if (!logits.ok()) return at::Tensor();
      rows.push_back(*logits);
    }
    return at::cat(rows, 0);
  }

  const HybridDir* const hybrid_ = HybridNamed(GetParam());  // null: make_reference.py's
  Reference ref_;
  std::unique_ptr<Model> model_;
};

// A recurrent or hybrid directory's config: its layers' mixers and the family's sizes.
void ExpectHybridConfig(const HybridDir& d, const Reference& ref, const ModelConfig& c) {
  EXPECT_EQ(c.name, ref.name);
  EXPECT_EQ(c.vocab_size, 320);
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.mixers, d.mixers) << d.what;
  EXPECT_EQ(c.num_layers, int(d.mixers.size()));
  EXPECT_EQ(c.mlp, d.mlp);
  EXPECT_EQ(c.rope, d.rope);
  EXPECT_EQ(c.tie_embeddings, d.tied);
  EXPECT_EQ(c.qk_head_norm, d.qk_head_norm);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.attention.module, "softmax");
  EXPECT_EQ(c.attention.num_kv_heads, d.kv_heads);
  if (d.mlp) {
    EXPECT_EQ(c.mlp_hidden, d.mlp_hidden);
  }
  EXPECT_EQ(c.conv_kernel, d.conv_kernel);
  if (c.HasAttention()) {
    EXPECT_EQ(c.attention.num_heads, 4);
    EXPECT_EQ(c.attention.head_dim, 16);
  }
  if (d.mixers[0] == kMamba2Mixer) {
    EXPECT_EQ(c.ssm_inner, 128);
    EXPECT_EQ(c.ssm_heads, 8);
    EXPECT_EQ(c.ssm_state, 16);
    EXPECT_EQ(c.ssm_groups, 1);
  }
  EXPECT_FLOAT_EQ(c.embedding_scale, d.embedding_scale);
  EXPECT_FLOAT_EQ(c.residual_scale, d.residual_scale);
  EXPECT_FLOAT_EQ(c.logit_scale, d.logit_scale);
  EXPECT_FLOAT_EQ(c.attention_scale, d.attention_scale);
  EXPECT_EQ(c.bos_token_id, 256);
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{257});
  EXPECT_EQ(c.tokenizer_class, kByteTokenizerClass);
}

TEST_P(HfReference, ConfigIsTheDirectorysOwn) {
  if (hybrid_ != nullptr) return ExpectHybridConfig(*hybrid_, ref_, model_->config());
  const Dir& d = DirNamed(GetParam());
  const ModelConfig& c = model_->config();
  EXPECT_EQ(c.name, ref_.name);
  EXPECT_EQ(c.vocab_size, ref_.logits.size(1));
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.num_layers, 2);
  EXPECT_EQ(c.mlp_hidden, 192);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{2});
  EXPECT_EQ(c.attention.num_heads, 4);
  EXPECT_EQ(c.attention.num_kv_heads, d.kv_heads);
  EXPECT_EQ(c.attention.head_dim, d.head_dim);
  EXPECT_EQ(c.tie_embeddings, d.tied);
  EXPECT_EQ(c.attention.module, d.module);
  EXPECT_FLOAT_EQ(c.norm_eps, d.eps);
  EXPECT_FLOAT_EQ(c.rope_theta, d.theta);
  EXPECT_EQ(c.attention_bias, d.attention_bias);
  EXPECT_EQ(c.qk_head_norm, d.qk_head_norm);
  if (GetParam() == "taylor2") {
    EXPECT_EQ(c.attention.order, 2);
    EXPECT_EQ(c.attention.chunk_size, 8);
  }
  if (d.attention_bias || d.qk_head_norm) {
    // The tests below would fail by this much if attnserve ignored the q/k/v biases
    // (Qwen2) or the q/k norms (Qwen3): PyTorch's logits without them.
    EXPECT_GT(ref_.ablated_diff, 1e4 * kTolerance);
  }
}

TEST_P(HfReference, WeightsStayAsTheFileHoldsThem) {
  // F32 files load as fp32 tensors; F16 / BF16 ones keep every matrix (7 per layer, the
  // embedding, an untied head) in 16 bits: about half the bytes of the fp32 twin.
  if (hybrid_ != nullptr) {
    // A hybrid's F32 directory loads as fp32 tensors; granitehybrid_rope's BF16 shared MLP
    // stays 16-bit: its gate and up projections (rows of input_linear) and output_linear.
    EXPECT_EQ(model_->WeightTypes(), hybrid_->weight_type);
    if (std::string(hybrid_->weight_type) == "F32") {
      EXPECT_FALSE(model_->HasPackedWeights());
      EXPECT_EQ(model_->WeightBytes(), 4 * model_->ParameterCount());
    } else {
      EXPECT_EQ(model_->PackedParameters().size(), 3u * model_->config().num_layers);
    }
    return;
  }
  const Dir& d = DirNamed(GetParam());
  EXPECT_EQ(model_->WeightTypes(), d.weight_type);
  if (d.sixteen_bit_of == nullptr) {
    EXPECT_FALSE(model_->HasPackedWeights());
    EXPECT_EQ(model_->WeightBytes(), 4 * model_->ParameterCount());
    return;
  }
  const size_t matrices = 7 * model_->config().num_layers + (d.tied ? 1 : 2);
  EXPECT_EQ(model_->PackedParameters().size(), matrices);
  auto twin = Model::Load((std::filesystem::path(OutDir()) / "models" / d.sixteen_bit_of).string());
  ASSERT_TRUE(twin.ok()) << twin.status();
  EXPECT_EQ(model_->ParameterCount(), (*twin)->ParameterCount());
  const double ratio = double(model_->WeightBytes()) / double((*twin)->WeightBytes());
  std::printf("%s: WeightBytes %lld, %s's %lld (x%.4f)\n", d.name,
              (long long)model_->WeightBytes(), d.sixteen_bit_of,
              (long long)(*twin)->WeightBytes(), ratio);
  // Above 0.5 only by the norms (and biases) that stay fp32: under 0.5% of the weights.
  EXPECT_GT(ratio, 0.5);
  EXPECT_LT(ratio, 0.51);
}

TEST_P(HfReference, ForwardEqualsPyTorch) {
  Check("Forward(prompt)", model_->Forward(AsBatch(ref_.prompt))[0], ref_.logits);
  Check("Forward(prompt+greedy)", model_->Forward(AsBatch(ref_.Full()))[0], ref_.logits_full);
}

TEST_P(HfReference, ChunkedPrefillEqualsPyTorch) {
  // One call over everything (the module's own chunks), then growing pieces.
  auto state = model_->NewState();
  const std::vector<int32_t> full = ref_.Full();
  auto logits = model_->Prefill(*state, full);
  ASSERT_TRUE(logits.ok()) << logits.status();
  Check("Prefill(all)", *logits, ref_.logits_full);
  Check("Prefill(pieces 1,2,3..)", PrefillInPieces(*model_, full), ref_.logits_full);
}

TEST_P(HfReference, StepByStepEqualsPyTorch) {
  Check(model_->UsesFusedStep() ? "Step(fused)" : "Step", StepOneByOne(*model_, ref_.Full()),
        ref_.logits_full);
}

TEST_P(HfReference, ReferenceStepEqualsPyTorch) {
  // ATTNSERVE_REFERENCE_STEP is read when a model is made: a second load takes the
  // LibTorch step, the reference the fused one is tested against.
  setenv("ATTNSERVE_REFERENCE_STEP", "1", 1);
  std::unique_ptr<Model> reference = LoadModel();
  unsetenv("ATTNSERVE_REFERENCE_STEP");
  ASSERT_NE(reference, nullptr);
  EXPECT_FALSE(reference->UsesFusedStep());
  const std::vector<int32_t> full = ref_.Full();
  Check("Step(reference)", StepOneByOne(*reference, full), ref_.logits_full);
  Check("Prefill(reference)", PrefillInPieces(*reference, full), ref_.logits_full);
}

TEST_P(HfReference, BatchEqualsPyTorch) {
  // One engine step with a prefilling session and a decoding one together, as the
  // scheduler runs them: each segment's last row.
  const std::vector<int32_t> full = ref_.Full();
  const size_t split = ref_.prompt.size();
  auto a = model_->NewState(), b = model_->NewState();
  ASSERT_TRUE(model_->Prefill(*b, absl::MakeConstSpan(full.data(), split)).ok());
  const Model::Segment segments[] = {
      {a.get(), absl::MakeConstSpan(full.data(), split)},  // prompt, prefilled
      {b.get(), absl::MakeConstSpan(full.data() + split, 1)},  // first greedy token
  };
  auto logits = model_->Batch(segments);
  ASSERT_TRUE(logits.ok()) << logits.status();
  Check("Batch(prefill+step)", *logits,
        at::stack({ref_.logits_full[split - 1], ref_.logits_full[split]}));
}

TEST_P(HfReference, GreedyContinuationEqualsPyTorch) {
  auto state = model_->NewState();
  auto logits = model_->Prefill(*state, ref_.prompt);
  ASSERT_TRUE(logits.ok()) << logits.status();
  at::Tensor last = (*logits)[-1];
  std::vector<int32_t> got;
  DecodeState* states[] = {state.get()};
  while (got.size() < ref_.greedy.size()) {
    got.push_back(int32_t(last.argmax().item<int64_t>()));
    if (got.size() == ref_.greedy.size()) break;
    auto next = model_->Step(states, {got.back()});
    ASSERT_TRUE(next.ok()) << next.status();
    last = (*next)[0];
  }
  EXPECT_EQ(got, ref_.greedy) << GetParam() << ": smallest top-1/top-2 margin in PyTorch's "
                              << "greedy run " << ref_.min_margin;
  if (!ref_.stopped_at_eos) {
    EXPECT_EQ(got.size(), 40u);
  }
}

const char* const kQuantizedDirs[] = {"qwen2"};

class HfQuantized : public HfReference {
 protected:
  std::unique_ptr<Model> LoadQuantized(bool reference_step) const {
    LoadOptions options;
    options.quantize = "q8_0";
    if (reference_step) setenv("ATTNSERVE_REFERENCE_STEP", "1", 1);
    auto model = Model::Load(ModelDir(), options);
    unsetenv("ATTNSERVE_REFERENCE_STEP");
    EXPECT_TRUE(model.ok()) << ModelDir() << ": " << model.status();
    return model.ok() ? std::move(model).value() : nullptr;
  }
  // Against PyTorch's fp32 logits (bound kQ8Bound) and against PyTorch's on the same
  // Q8_0-rounded weights (bound `rounded_bound`).
  void CheckQ8(const std::string& path, const at::Tensor& got, double rounded_bound) {
    const double diff = MaxAbsDiff(got, ref_.logits_full);
    Report::Add(GetParam() + " q8_0", path + " vs fp32", diff);
    EXPECT_LT(diff, kQ8Bound) << GetParam() << " " << path;
    const double rounded = MaxAbsDiff(got, ref_.logits_full_q8_0);
    Report::Add(GetParam() + " q8_0", path + " vs rounded", rounded);
    EXPECT_LT(rounded, rounded_bound) << GetParam() << " " << path << " vs PyTorch on the "
                                      << "Q8_0-rounded weights";
  }
};

TEST_P(HfQuantized, Q8_0HoldsAQuarterOfTheBytes) {
  std::unique_ptr<Model> q8 = LoadQuantized(false);
  ASSERT_NE(q8, nullptr);
  EXPECT_EQ(q8->WeightTypes(), "Q8_0 100%");
  EXPECT_EQ(q8->ParameterCount(), model_->ParameterCount());
  const double ratio = double(q8->WeightBytes()) / double(model_->WeightBytes());
  std::printf("%s q8_0: WeightBytes %lld, fp32 %lld (x%.4f)\n", GetParam().c_str(),
              (long long)q8->WeightBytes(), (long long)model_->WeightBytes(), ratio);
  // 34 bytes per 32 weights = 1.0625 of 4, plus the fp32 norms and biases (0.3%).
  EXPECT_GT(ratio, 1.0625 / 4);
  EXPECT_LT(ratio, 1.0625 / 4 + 0.005);
}

TEST_P(HfQuantized, Q8_0LogitsStayNearPyTorch) {
  std::unique_ptr<Model> q8 = LoadQuantized(false);
  std::unique_ptr<Model> q8_reference = LoadQuantized(true);
  ASSERT_NE(q8, nullptr);
  ASSERT_NE(q8_reference, nullptr);
  EXPECT_TRUE(q8->UsesFusedStep());
  EXPECT_FALSE(q8_reference->UsesFusedStep());
  ASSERT_TRUE(ref_.logits_full_q8_0.defined()) << "make_reference.py writes logits_full_q8_0";
  const std::vector<int32_t> full = ref_.Full();
  // The LibTorch paths dequantize the blocks and run fp32: PyTorch's logits on the
  // rounded weights, as for the fp32 directories.
  CheckQ8("Forward", q8->Forward(AsBatch(full))[0], kTolerance);
  CheckQ8("Step(reference)", StepOneByOne(*q8_reference, full), kTolerance);
  CheckQ8("Prefill(reference)", PrefillInPieces(*q8_reference, full), kTolerance);
  // The fused step's dot products also take the activations to 8 bits.
  CheckQ8("Step(fused)", StepOneByOne(*q8, full), kQ8FusedBound);
  CheckQ8("Prefill(pieces 1,2,3..)", PrefillInPieces(*q8, full), kQ8FusedBound);
  // The rounding shows: PyTorch's fp32 and rounded logits are far apart.
  EXPECT_GT(MaxAbsDiff(ref_.logits_full_q8_0, ref_.logits_full), 100 * kTolerance);
}

TEST_P(HfQuantized, Q8_0PicksPyTorchsTokenWhereTheMarginIsClear) {
  // Teacher-forced on PyTorch's continuation: at every greedy step where PyTorch's top-1
  // leads by more than 2 x kQ8Bound, the quantized model's top-1 is PyTorch's token.
  std::unique_ptr<Model> q8 = LoadQuantized(false);
  ASSERT_NE(q8, nullptr);
  const at::Tensor logits = StepOneByOne(*q8, ref_.Full());  // (T + n, V)
  const size_t first = ref_.prompt.size() - 1;  // the row that predicts greedy[0]
  int clear = 0;
  for (size_t i = 0; i < ref_.greedy.size(); ++i) {
    if (ref_.margins[i] <= 2 * kQ8Bound) continue;
    ++clear;
    EXPECT_EQ(logits[first + i].argmax().item<int64_t>(), ref_.greedy[i])
        << GetParam() << " q8_0: greedy step " << i << ", PyTorch's margin " << ref_.margins[i];
  }
  std::printf("%s q8_0: PyTorch's token at all %d of %zu teacher-forced steps with margins > "
              "%g\n", GetParam().c_str(), clear, ref_.greedy.size(), 2 * kQ8Bound);
  EXPECT_GE(clear, 20) << "too few clear steps to test";
}

TEST_P(HfQuantized, Q8_0GreedyIsPyTorchsWhileTheMarginsAreClear) {
  std::unique_ptr<Model> q8 = LoadQuantized(false);
  ASSERT_NE(q8, nullptr);
  size_t clear = 0;  // leading greedy steps whose PyTorch margin exceeds 2 x kQ8Bound
  while (clear < ref_.margins.size() && ref_.margins[clear] > 2 * kQ8Bound) ++clear;
  ASSERT_GE(clear, 10u) << "PyTorch's greedy run has too few clear steps to test";
  auto state = q8->NewState();
  auto logits = q8->Prefill(*state, ref_.prompt);
  ASSERT_TRUE(logits.ok()) << logits.status();
  at::Tensor last = (*logits)[-1];
  std::vector<int32_t> got;
  DecodeState* states[] = {state.get()};
  while (got.size() < clear) {
    got.push_back(int32_t(last.argmax().item<int64_t>()));
    auto next = q8->Step(states, {got.back()});
    ASSERT_TRUE(next.ok()) << next.status();
    last = (*next)[0];
  }
  EXPECT_EQ(got, std::vector<int32_t>(ref_.greedy.begin(), ref_.greedy.begin() + clear))
      << GetParam() << " q8_0: the first " << clear << " greedy ids";
  std::printf("%s q8_0: greedy ids equal PyTorch's over the first %zu steps (margins > %g)\n",
              GetParam().c_str(), clear, 2 * kQ8Bound);
}

INSTANTIATE_TEST_SUITE_P(Dirs, HfQuantized,
                         testing::ValuesIn(std::vector<std::string>(std::begin(kQuantizedDirs),
                                                                    std::end(kQuantizedDirs))),
                         [](const testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

std::vector<std::string> DirNames() {
  std::vector<std::string> out;
  for (const Dir& d : kDirs) out.push_back(d.name);
  return out;
}

INSTANTIATE_TEST_SUITE_P(Dirs, HfReference, testing::ValuesIn(DirNames()),
                         [](const testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

std::vector<std::string> HybridDirNames() {
  std::vector<std::string> out;
  for (const HybridDir& d : kHybridDirs) out.push_back(d.name);
  return out;
}

// The same checks on the recurrent and hybrid layouts against hybrid_reference.py's
// PyTorch forward: every path within kTolerance, greedy ids equal.
INSTANTIATE_TEST_SUITE_P(Hybrid, HfReference, testing::ValuesIn(HybridDirNames()),
                         [](const testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

// Refusals a recurrent family's directory gets, each naming its field.
TEST(HfHybridLayouts, RefusesWhatIsNotServed) {
  const std::string root = HybridOutDir();
  ASSERT_FALSE(root.empty()) << "ATTNSERVE_HF_HYBRID_REFERENCE is not set";
  const std::filesystem::path work = std::filesystem::temp_directory_path() /
                                     ("hf_hybrid_refusals_" + std::to_string(getpid()));
  struct Case {
    const char* dir;
    const char* key;
    nlohmann::json value;
    const char* message;  // a part of the refusal
  };
  const Case cases[] = {
      {"granitehybrid", "num_local_experts", 4, "num_local_experts 4: mixtures of experts"},
      {"granitehybrid", "mamba_n_groups", 2, "mamba_n_groups 2 is not supported"},
      {"mamba2", "n_groups", 2, "n_groups 2 is not supported"},
      {"mamba2", "use_bias", true, "use_bias is true"},
      {"mamba2", "time_step_limit", nlohmann::json::array({0.001, 0.1}), "time_step_limit"},
      {"lfm2", "conv_bias", true, "conv_bias is true"},
      {"lfm2", "layer_types", nlohmann::json::array({"conv", "sliding_attention", "conv",
                                                     "full_attention"}),
       "layer_types \"sliding_attention\" is not a layer type"},
      // The conv biases the directory holds are then not parameters: refused by name.
      {"granitehybrid", "mamba_conv_bias", false,
       "tensor 'model.layers.0.mamba.conv1d.bias' is not a parameter of this granitemoehybrid"},
  };
  for (const Case& c : cases) {
    const std::filesystem::path dir = work / c.dir;
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    const std::filesystem::path from = std::filesystem::path(root) / "models" / c.dir;
    std::filesystem::copy_file(from / "model.safetensors", dir / "model.safetensors");
    nlohmann::json config = nlohmann::json::parse(
        // Python's Infinity (time_step_limit) is not JSON: as the loader reads it.
        std::regex_replace(ReadFile(from / "config.json"), std::regex("Infinity"), "1e308"));
    config[c.key] = c.value;
    std::ofstream(dir / "config.json") << config.dump(2);
    auto model = Model::Load(dir.string());
    ASSERT_FALSE(model.ok()) << c.dir << " with " << c.key << " = " << c.value.dump();
    EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(model.status().message().find(c.message), std::string::npos)
        << model.status().message();
  }
  std::filesystem::remove_all(work);
}

// LoadOptions::quantize on the hybrids: every matrix (the recurrent layers' in_proj and
// out_proj, Granite's gate and up rows cut from input_linear, the short conv's) and the
// embedding packed as Q8_0. The LibTorch paths dequantize and run fp32: PyTorch's logits on
// the same Q8_0-rounded weights (hybrid_reference.py's logits_full_q8_0) within kTolerance.
// The fused path also takes activations to 8 bits: printed beside them.
TEST(HfHybridLayouts, Q8_0EqualsPyTorchOnTheRoundedWeights) {
  const std::string root = HybridOutDir();
  ASSERT_FALSE(root.empty());
  at::set_num_threads(1);
  for (const HybridDir& d : kHybridDirs) {
    const std::string dir = (std::filesystem::path(root) / "models" / d.name).string();
    const Reference ref = LoadReference(root, d.name);
    ASSERT_TRUE(ref.logits_full_q8_0.defined()) << d.name;
    LoadOptions options;
    options.quantize = "q8_0";
    setenv("ATTNSERVE_REFERENCE_STEP", "1", 1);
    auto reference = Model::Load(dir, options);
    unsetenv("ATTNSERVE_REFERENCE_STEP");
    auto fused = Model::Load(dir, options);
    ASSERT_TRUE(reference.ok() && fused.ok()) << d.name;
    EXPECT_EQ((*reference)->WeightTypes(), "Q8_0 100%") << d.name;
    const std::vector<int32_t> full = ref.Full();
    const std::string name = std::string(d.name) + " q8_0";
    auto check = [&](const std::string& path, const at::Tensor& got, double bound) {
      const double diff = MaxAbsDiff(got, ref.logits_full_q8_0);
      Report::Add(name, path, diff);
      EXPECT_LT(diff, bound) << name << " " << path;
    };
    check("Forward vs rounded", (*reference)->Forward(AsBatch(full))[0], kTolerance);
    auto state = (*reference)->NewState();
    auto logits = (*reference)->Prefill(*state, full);
    ASSERT_TRUE(logits.ok()) << logits.status();
    check("Prefill(reference) vs rounded", *logits, kTolerance);
    state = (*fused)->NewState();
    logits = (*fused)->Prefill(*state, full);
    ASSERT_TRUE(logits.ok()) << logits.status();
    check("Prefill(fused) vs rounded", *logits, 1e9);  // printed
    // The rounding shows: PyTorch's fp32 and rounded logits are far apart.
    EXPECT_GT(MaxAbsDiff(ref.logits_full_q8_0, ref.logits_full), 100 * kTolerance) << name;
  }
}

// A hybrid model is not written back as a Llama directory.
TEST(HfHybridLayouts, SaveRefusesARecurrentModel) {
  const std::string root = HybridOutDir();
  ASSERT_FALSE(root.empty());
  LoadOptions options;
  options.dequantize = true;
  auto model = Model::Load((std::filesystem::path(root) / "models" / "lfm2").string(), options);
  ASSERT_TRUE(model.ok()) << model.status();
  const auto dir = std::filesystem::temp_directory_path() /
                   ("hf_hybrid_save_" + std::to_string(getpid()));
  EXPECT_EQ((*model)->Save(dir.string()).code(), absl::StatusCode::kUnimplemented);
  std::filesystem::remove_all(dir);
}

const testing::Environment* const kReport = testing::AddGlobalTestEnvironment(new Report);

}  // namespace
}  // namespace attnserve::model
