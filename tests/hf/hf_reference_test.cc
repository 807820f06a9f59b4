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
#include <sstream>
#include <string>
#include <vector>

#include "server/model/model.h"

namespace attnserve::model {
namespace {

// Largest |attnserve - PyTorch| allowed in any logit, every directory. The bf16 one too:
// its reference ran the same bf16-rounded weights in fp32 arithmetic, so only the order
// of fp32 operations differs. Logits here span about +-15.
constexpr double kTolerance = 1e-4;

// The directories make_reference.py writes, with what each one exercises.
const char* const kDirs[] = {
    "gqa_tied",       // 4 query heads on 2 KV heads, tied head (no lm_head.weight), BPE
    "gqa_tied_bf16",  // the same weights stored as BF16
    "mha",            // untied, head_dim 32 with hidden 64 (4 x 32 != 64), eps 1e-6, theta 5e5
    "mha_sharded",    // the same weights in model.safetensors.index.json + 2 shards
    "taylor2",        // taylor order 2, 4 on 2 KV heads, prefill chunks of 8, unigram
};

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
  at::Tensor logits;       // (T, V) over the prompt
  at::Tensor logits_full;  // (T + n, V) over prompt + continuation
  std::vector<int32_t> Full() const {
    std::vector<int32_t> ids = prompt;
    ids.insert(ids.end(), greedy.begin(), greedy.end());
    return ids;
  }
};

Reference LoadReference(const std::string& dir_name) {
  const std::filesystem::path dir = std::filesystem::path(OutDir()) / "reference" / dir_name;
  const nlohmann::json j = nlohmann::json::parse(ReadFile(dir / "reference.json"));
  Reference r;
  r.name = j["model"];
  r.prompt = j["ids"].get<std::vector<int32_t>>();
  r.greedy = j["greedy"]["ids"].get<std::vector<int32_t>>();
  r.stopped_at_eos = j["greedy"]["stopped_at_eos"];
  r.min_margin = j["greedy"]["min_margin"];
  auto tensors = ReadF32Safetensors(dir / "reference.safetensors");
  r.logits = tensors["logits"];
  r.logits_full = tensors["logits_full"];
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
              << kTolerance << "):\n";
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
    ASSERT_FALSE(OutDir().empty())
        << "ATTNSERVE_HF_REFERENCE is not set (make_reference.py's output directory)";
    at::set_num_threads(1);
    ref_ = LoadReference(GetParam());
    ASSERT_TRUE(ref_.logits.defined() && ref_.logits_full.defined()) << GetParam();
    model_ = LoadModel();
    ASSERT_NE(model_, nullptr);
  }

  std::string ModelDir() const {
    return (std::filesystem::path(OutDir()) / "models" / GetParam()).string();
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

  Reference ref_;
  std::unique_ptr<Model> model_;
};

TEST_P(HfReference, ConfigIsTheDirectorysOwn) {
  const ModelConfig& c = model_->config();
  EXPECT_EQ(c.name, ref_.name);
  EXPECT_EQ(c.vocab_size, ref_.logits.size(1));
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.num_layers, 2);
  EXPECT_EQ(c.mlp_hidden, 192);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{2});
  EXPECT_EQ(c.attention.num_heads, 4);
  const bool gqa = GetParam().rfind("mha", 0) != 0;
  EXPECT_EQ(c.attention.num_kv_heads, gqa ? 2 : 4);
  EXPECT_EQ(c.attention.head_dim, gqa ? 16 : 32);
  EXPECT_EQ(c.tie_embeddings, GetParam().rfind("gqa_tied", 0) == 0);
  EXPECT_EQ(c.attention.module, GetParam() == "taylor2" ? "taylor" : "softmax");
  if (GetParam() == "taylor2") {
    EXPECT_EQ(c.attention.order, 2);
    EXPECT_EQ(c.attention.chunk_size, 8);
  }
  if (GetParam().rfind("mha", 0) == 0) {
    EXPECT_FLOAT_EQ(c.norm_eps, 1e-6f);
    EXPECT_FLOAT_EQ(c.rope_theta, 500000.0f);
  }
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

INSTANTIATE_TEST_SUITE_P(Dirs, HfReference,
                         testing::ValuesIn(std::vector<std::string>(std::begin(kDirs),
                                                                    std::end(kDirs))),
                         [](const testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

const testing::Environment* const kReport = testing::AddGlobalTestEnvironment(new Report);

}  // namespace
}  // namespace attnserve::model
