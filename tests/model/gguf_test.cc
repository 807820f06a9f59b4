// The GGUF reader (server/model/gguf.h) and the llama mapping (gguf_model.h) on files
// built here byte by byte: what a good file reads as, and every refusal naming its rule.
// tests/gguf holds the same reader to llama.cpp itself on trained models.
#include "server/model/gguf.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <climits>
#include <cstring>

#include "server/model/gguf_model.h"
#include "server/model/safetensors.h"

namespace attnserve::model {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A GGUF file, written field by field (little-endian hosts).
class Builder {
 public:
  template <typename T>
  static void Put(std::string* out, T v) {
    out->append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  static void Str(std::string* out, const std::string& s) {
    Put<uint64_t>(out, s.size());
    out->append(s);
  }
  Builder& U32(const std::string& key, uint32_t v) { return Kv(key, 4, [&](std::string* o) { Put(o, v); }); }
  Builder& F32(const std::string& key, float v) { return Kv(key, 6, [&](std::string* o) { Put(o, v); }); }
  Builder& Bool(const std::string& key, uint8_t v) { return Kv(key, 7, [&](std::string* o) { Put(o, v); }); }
  Builder& String(const std::string& key, const std::string& v) {
    return Kv(key, 8, [&](std::string* o) { Str(o, v); });
  }
  Builder& Strings(const std::string& key, const std::vector<std::string>& v) {
    return Kv(key, 9, [&](std::string* o) {
      Put<uint32_t>(o, 8);
      Put<uint64_t>(o, v.size());
      for (const auto& s : v) Str(o, s);
    });
  }
  Builder& Raw(const std::string& key, uint32_t type, const std::string& value) {
    return Kv(key, type, [&](std::string* o) { o->append(value); });
  }
  // A tensor: dims innermost first, `data` its bytes (padded to 32 here).
  Builder& Tensor(const std::string& name, std::vector<uint64_t> dims, uint32_t type,
                  const std::string& data, std::optional<uint64_t> offset = std::nullopt) {
    Str(&infos_, name);
    Put<uint32_t>(&infos_, dims.size());
    for (uint64_t d : dims) Put(&infos_, d);
    Put(&infos_, type);
    Put<uint64_t>(&infos_, offset.value_or(data_.size()));
    data_ += data;
    data_.resize((data_.size() + 31) / 32 * 32, '\0');
    ++tensors_;
    return *this;
  }
  std::string Bytes(uint32_t version = 3) const {
    std::string out = "GGUF";
    Put(&out, version);
    Put<uint64_t>(&out, tensors_);
    Put<uint64_t>(&out, kvs_);
    out += kv_ + infos_;
    out.resize((out.size() + 31) / 32 * 32, '\0');
    return out + data_;
  }

 private:
  template <typename F>
  Builder& Kv(const std::string& key, uint32_t type, F value) {
    Str(&kv_, key);
    Put(&kv_, type);
    value(&kv_);
    ++kvs_;
    return *this;
  }
  std::string kv_, infos_, data_;
  uint64_t kvs_ = 0, tensors_ = 0;
};

std::string Floats(std::vector<float> v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

std::string ErrorOf(const std::string& bytes) {
  auto f = ParseGguf(bytes);
  EXPECT_FALSE(f.ok());
  return f.ok() ? "" : std::string(f.status().message());
}

TEST(GgufTest, ReadsMetadataAndEveryTensorType) {
  std::string f16, bf16, q8;
  for (float v : {1.0f, -2.0f}) Builder::Put(&f16, FloatToHalf(v));
  for (float v : {0.5f, 3.0f}) Builder::Put(&bf16, FloatToBf16(v));
  Builder::Put(&q8, FloatToHalf(0.25f));
  for (int i = 0; i < 32; ++i) Builder::Put<int8_t>(&q8, int8_t(i - 16));
  Builder b;
  b.String("general.architecture", "llama").U32("llama.block_count", 2).F32("x.f", 0.5f)
      .Bool("x.b", 1).Strings("tokenizer.ggml.tokens", {"a", "\xe2\x96\x81" "b"})
      .Tensor("t32", {2, 1}, 0, Floats({1.5f, -1.0f}))
      .Tensor("t16", {2}, 1, f16)
      .Tensor("tb16", {2}, 30, bf16)
      .Tensor("tq8", {32}, 8, q8);
  const std::string bytes = b.Bytes();
  auto f = ParseGguf(bytes);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->version, 3u);
  EXPECT_EQ(f->metadata["general.architecture"], "llama");
  EXPECT_EQ(f->metadata["llama.block_count"], 2);
  EXPECT_EQ(f->metadata["x.f"], 0.5);
  EXPECT_EQ(f->metadata["x.b"], true);
  EXPECT_EQ(f->metadata["tokenizer.ggml.tokens"][1], "\xe2\x96\x81" "b");
  ASSERT_EQ(f->tensors.size(), 4u);
  EXPECT_THAT(f->Find("t32")->shape(), ElementsAre(1, 2));
  EXPECT_THAT(*GgufToFloat32(*f->Find("t32")), ElementsAre(1.5f, -1.0f));
  EXPECT_THAT(*GgufToFloat32(*f->Find("t16")), ElementsAre(1.0f, -2.0f));
  EXPECT_THAT(*GgufToFloat32(*f->Find("tb16")), ElementsAre(0.5f, 3.0f));
  auto q = GgufToFloat32(*f->Find("tq8"));
  ASSERT_TRUE(q.ok());
  for (int i = 0; i < 32; ++i) EXPECT_EQ((*q)[i], 0.25f * float(i - 16)) << i;
  EXPECT_EQ(f->Find("nope"), nullptr);
}

TEST(GgufTest, RefusesEachMalformedPartNamingIt) {
  const std::string good = Builder().U32("k", 1).Tensor("t", {2}, 0, Floats({1, 2})).Bytes();
  EXPECT_THAT(ErrorOf("GGUX" + good.substr(4)), HasSubstr("no \"GGUF\" magic"));
  EXPECT_THAT(ErrorOf(Builder().Bytes(1)), HasSubstr("version 1"));
  EXPECT_THAT(ErrorOf(good.substr(0, 10)), HasSubstr("header is cut short"));
  std::string many = good;
  uint64_t huge = uint64_t{1} << 40;
  std::memcpy(&many[16], &huge, 8);
  EXPECT_THAT(ErrorOf(many), HasSubstr("metadata pairs cannot fit"));
  std::memcpy(&many[8], &huge, 8);
  std::memcpy(&many[16], "\x01\0\0\0\0\0\0\0", 8);
  EXPECT_THAT(ErrorOf(many), HasSubstr("tensors cannot fit"));
  EXPECT_THAT(ErrorOf(good.substr(0, 30)), HasSubstr("1 metadata pairs cannot fit"));
  EXPECT_THAT(ErrorOf(good.substr(0, 38)), HasSubstr("metadata 'k' is cut short"));
  EXPECT_THAT(ErrorOf(Builder().U32("k", 1).U32("k", 2).Bytes()), HasSubstr("'k' appears twice"));
  EXPECT_THAT(ErrorOf(Builder().Raw("k", 13, "").Bytes()), HasSubstr("value type 13"));
  EXPECT_THAT(ErrorOf(Builder().Bool("k", 2).Bytes()), HasSubstr("bool 2"));
  std::string nested;
  Builder::Put<uint32_t>(&nested, 9);
  Builder::Put<uint64_t>(&nested, 1);
  EXPECT_THAT(ErrorOf(Builder().Raw("k", 9, nested).Bytes()), HasSubstr("array of arrays"));
  std::string endless;
  Builder::Put<uint32_t>(&endless, 4);
  Builder::Put<uint64_t>(&endless, uint64_t{1} << 50);
  EXPECT_THAT(ErrorOf(Builder().Raw("k", 9, endless).Bytes()), HasSubstr("'k' is cut short"));
  EXPECT_THAT(ErrorOf(Builder().U32("general.alignment", 24).Bytes()), HasSubstr("power of two"));
  // A string of bytes that are not UTF-8 is named, not thrown (found by gguf_fuzz).
  EXPECT_THAT(ErrorOf(Builder().String("general.alignment", "\x80\xff").Bytes()),
              HasSubstr("general.alignment \"\xef\xbf\xbd\xef\xbf\xbd\" is not a power of two"));
  EXPECT_THAT(ErrorOf(Builder().Tensor("t", {}, 0, "").Bytes()), HasSubstr("0 dimensions"));
  EXPECT_THAT(ErrorOf(Builder().Tensor("t", {1, 1, 1, 1, 1}, 0, Floats({1})).Bytes()),
              HasSubstr("5 dimensions"));
  EXPECT_THAT(ErrorOf(Builder().Tensor("t", {0}, 0, "").Bytes()), HasSubstr("dimension 0"));
  EXPECT_THAT(ErrorOf(Builder().Tensor("t", {uint64_t{1} << 30, uint64_t{1} << 30}, 0, "").Bytes()),
              HasSubstr("out of range"));
  EXPECT_THAT(ErrorOf(Builder().Tensor("t", {2}, 99, "").Bytes()), HasSubstr("ggml type 99"));
  EXPECT_THAT(ErrorOf(Builder().Tensor("t", {16}, 8, std::string(34, '\0')).Bytes()),
              HasSubstr("not whole Q8_0 blocks of 32"));
  EXPECT_THAT(ErrorOf(Builder().Tensor("t", {2}, 0, Floats({1, 2}), 4).Bytes()),
              HasSubstr("not aligned"));
  EXPECT_THAT(ErrorOf(Builder().Tensor("t", {2}, 0, Floats({1, 2})).Tensor("t", {2}, 0, Floats({1, 2})).Bytes()),
              HasSubstr("'t' appears twice"));
  EXPECT_THAT(ErrorOf(good.substr(0, good.size() - 32)), HasSubstr("runs past the end"));
  EXPECT_THAT(ErrorOf(Builder().Tensor("t", {2}, 0, Floats({1, 2}), 64).Bytes()),
              HasSubstr("runs past the end"));
}

TEST(GgufTest, TypesNotReadAreRefusedByName) {
  // Q5_0 (type 6, 22 bytes per 32) is laid out and checked, but not read.
  const std::string bytes = Builder().Tensor("w", {32}, 6, std::string(22, '\0')).Bytes();
  auto f = ParseGguf(bytes);
  ASSERT_TRUE(f.ok()) << f.status();
  auto v = GgufToFloat32(f->tensors[0]);
  EXPECT_TRUE(absl::IsInvalidArgument(v.status()));
  EXPECT_THAT(v.status().message(), HasSubstr("tensor 'w' is Q5_0"));
  // Q4_0 is read now: a zero scale gives zeros.
  const std::string q4 = Builder().Tensor("w", {32}, 2, std::string(18, '\0')).Bytes();
  auto g = ParseGguf(q4);
  ASSERT_TRUE(g.ok()) << g.status();
  auto zeros = GgufToFloat32(g->tensors[0]);
  ASSERT_TRUE(zeros.ok()) << zeros.status();
  EXPECT_EQ(*zeros, std::vector<float>(32, 0.0f));
}

TEST(GgufModelTest, UninterleavesRopeRowsPerHead) {
  // 2 heads of head_dim 4, one column: stored pairs (0,1) (2,3) per head.
  const std::vector<float> stored = {0, 1, 2, 3, 10, 11, 12, 13};
  EXPECT_THAT(UninterleaveRopeRows(stored, 2, 4, 1), ElementsAre(0, 2, 1, 3, 10, 12, 11, 13));
}

TEST(GgufModelTest, ConfigFromMetadataAndItsRefusals) {
  auto file_with = [](const std::function<void(Builder&)>& edit) {
    Builder b;
    edit(b);
    b.Tensor("token_embd.weight", {16, 300}, 0, std::string(16 * 300 * 4, '\0'))
        .Tensor("blk.1.attn_q.weight", {16, 16}, 0, std::string(16 * 16 * 4, '\0'))
        .Tensor("blk.1.attn_k.weight", {16, 8}, 0, std::string(16 * 8 * 4, '\0'))
        .Tensor("blk.1.ffn_up.weight", {16, 32}, 0, std::string(16 * 32 * 4, '\0'));
    return b.Bytes();
  };
  auto llama = [](Builder& b) {
    b.String("general.architecture", "llama").U32("llama.embedding_length", 16)
        .U32("llama.block_count", 2).U32("llama.feed_forward_length", 32)
        .U32("llama.attention.head_count", 4);
  };
  const std::string good = file_with([&](Builder& b) {
    llama(b);
    b.U32("llama.attention.head_count_kv", 2).F32("llama.rope.freq_base", 500000.0f)
        .U32("tokenizer.ggml.bos_token_id", 1).U32("tokenizer.ggml.eos_token_id", 2);
  });
  auto f = ParseGguf(good);
  ASSERT_TRUE(f.ok()) << f.status();
  auto c = GgufModelConfig(*f, "m");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->name, "m");
  EXPECT_EQ(c->dim, 16);
  EXPECT_EQ(c->num_layers, 2);
  EXPECT_EQ(c->mlp_hidden, 32);
  EXPECT_EQ(c->vocab_size, 300);
  EXPECT_EQ(c->attention.module, "softmax");
  EXPECT_EQ(c->attention.num_heads, 4);
  EXPECT_EQ(c->attention.num_kv_heads, 2);
  EXPECT_EQ(c->attention.head_dim, 4);
  EXPECT_EQ(c->rope_theta, 500000.0f);
  EXPECT_EQ(c->norm_eps, 1e-5f);
  EXPECT_EQ(c->max_context, 2048);
  EXPECT_TRUE(c->tie_embeddings);  // no output.weight
  EXPECT_EQ(c->bos_token_id, 1);
  EXPECT_THAT(c->eos_token_ids, ElementsAre(2));

  auto refusal = [&](const std::function<void(Builder&)>& edit) {
    const std::string bytes = file_with(edit);
    auto parsed = ParseGguf(bytes);
    EXPECT_TRUE(parsed.ok()) << parsed.status();
    auto config = GgufModelConfig(*parsed, "m");
    EXPECT_FALSE(config.ok());
    return std::string(config.status().message());
  };
  EXPECT_THAT(refusal([](Builder& b) { b.String("general.architecture", "gpt2"); }),
              HasSubstr("general.architecture: \"gpt2\""));
  EXPECT_THAT(refusal([](Builder& b) { b.String("general.architecture", "\xc3"); }),
              HasSubstr("general.architecture: \"\xef\xbf\xbd\""));
  EXPECT_THAT(refusal([](Builder& b) { b.String("general.architecture", "llama"); }),
              HasSubstr("llama.embedding_length: is missing"));
  EXPECT_THAT(refusal([&](Builder& b) {
                llama(b);
                b.U32("llama.attention.head_count_kv", 3);
              }),
              HasSubstr("must divide head_count 4"));
  // Sizes the tensors there do not have are refused before anything is allocated.
  auto sized = [](uint32_t layers, uint32_t hidden) {
    return [=](Builder& b) {
      b.String("general.architecture", "llama").U32("llama.embedding_length", 16)
          .U32("llama.block_count", layers).U32("llama.feed_forward_length", hidden)
          .U32("llama.attention.head_count", 4).U32("llama.attention.head_count_kv", 2);
    };
  };
  EXPECT_THAT(refusal(sized(2, 64)),
              HasSubstr("'blk.1.ffn_up.weight' has dims [16, 32] (innermost first); the "
                        "metadata needs [16, 64]"));
  EXPECT_THAT(refusal(sized(3, 32)), HasSubstr("tensor 'blk.2.attn_q.weight' is missing"));
  // A count the file cannot hold is refused before a per-layer list is made (a fuzzed
  // block_count of 2^31 - 1 used to spend minutes and gigabytes on them).
  EXPECT_THAT(refusal(sized(INT32_MAX, 32)),
              HasSubstr("llama.block_count: 2147483647 layers, but the file holds 4 tensors"));
  EXPECT_THAT(refusal([&](Builder& b) {
                llama(b);
                b.U32("llama.rope.dimension_count", 2);
              }),
              HasSubstr("partial RoPE"));
  EXPECT_THAT(refusal([&](Builder& b) {
                llama(b);
                b.String("llama.rope.scaling.type", "linear");
              }),
              HasSubstr("RoPE scaling"));
  EXPECT_THAT(refusal([&](Builder& b) {
                llama(b);
                b.U32("llama.expert_count", 8);  // Mixtral's keys, without the rest
              }),
              HasSubstr("llama.expert_used_count: is missing"));
  EXPECT_THAT(refusal([&](Builder& b) {
                llama(b);
                b.String("llama.context_length", "long");
              }),
              HasSubstr("llama.context_length: must be a non-negative integer"));
}

TEST(GgufModelTest, ParameterNamesAndShapeChecks) {
  EXPECT_EQ(GgufTensorName("embed"), "token_embd.weight");
  EXPECT_EQ(GgufTensorName("head"), "output.weight");
  EXPECT_EQ(GgufTensorName("norm"), "output_norm.weight");
  EXPECT_EQ(GgufTensorName("layers.12.wq"), "blk.12.attn_q.weight");
  EXPECT_EQ(GgufTensorName("layers.0.w_down"), "blk.0.ffn_down.weight");
  EXPECT_EQ(GgufTensorName("layers.0.mlp_norm"), "blk.0.ffn_norm.weight");
  EXPECT_TRUE(IsGgufPath("/m/x.gguf"));
  EXPECT_FALSE(IsGgufPath("/m/x"));
  const std::string bytes = Builder().Tensor("token_embd.weight", {2, 3}, 0, Floats({1, 2, 3, 4, 5, 6})).Bytes();
  auto f = ParseGguf(bytes);
  ASSERT_TRUE(f.ok());
  ModelConfig c;
  auto wrong = GgufParameter(*f, c, "embed", {2, 3});
  EXPECT_THAT(wrong.status().message(), HasSubstr("has shape [3, 2]"));
  auto missing = GgufParameter(*f, c, "norm", {2});
  EXPECT_THAT(missing.status().message(), HasSubstr("'output_norm.weight' is missing"));
  auto right = GgufParameter(*f, c, "embed", {3, 2});
  ASSERT_TRUE(right.ok());
  EXPECT_THAT(*right, ElementsAre(1, 2, 3, 4, 5, 6));
}

// The recurrent and hybrid architectures' metadata (server/DESIGN.md §11), as llama.cpp
// reads it: each layer's mixer from the per-layer head_count_kv (0: recurrent), the SSM
// sizes, Granite's RoPE switch rope.scaling.finetuned (true when absent), and a pure
// Mamba-2 file's feed_forward_length 0 (no MLP).
TEST(GgufModelTest, HybridConfigsFromMetadata) {
  auto i32s = [](const std::vector<int32_t>& v) {
    std::string out;
    Builder::Put<uint32_t>(&out, 5);  // GGUF's INT32
    Builder::Put<uint64_t>(&out, v.size());
    for (int32_t x : v) Builder::Put(&out, x);
    return out;
  };
  auto config_of = [&](const std::string& arch, const std::function<void(Builder&)>& edit) {
    Builder b;
    const std::string p = arch + ".";
    b.String("general.architecture", arch).U32(p + "embedding_length", 16)
        .U32(p + "block_count", 2).U32(p + "ssm.conv_kernel", 4).U32(p + "ssm.inner_size", 32)
        .U32(p + "ssm.state_size", 8).U32(p + "ssm.time_step_rank", 4)
        .U32(p + "ssm.group_count", 2);
    edit(b);
    b.Tensor("token_embd.weight", {16, 300}, 0, std::string(16 * 300 * 4, '\0'))
        .Tensor("blk.1.attn_q.weight", {16, 16}, 0, std::string(16 * 16 * 4, '\0'))
        .Tensor("blk.1.attn_k.weight", {16, 8}, 0, std::string(16 * 8 * 4, '\0'))
        .Tensor("blk.1.ffn_up.weight", {16, 32}, 0, std::string(16 * 32 * 4, '\0'));
    auto f = ParseGguf(b.Bytes());
    EXPECT_TRUE(f.ok()) << f.status();
    return GgufModelConfig(*f, "m");
  };
  auto granite = [&](std::optional<bool> finetuned) {
    return config_of("granitehybrid", [&](Builder& b) {
      b.U32("granitehybrid.feed_forward_length", 32).U32("granitehybrid.attention.head_count", 4)
          .Raw("granitehybrid.attention.head_count_kv", 9, i32s({0, 2}));
      if (finetuned.has_value()) b.Bool("granitehybrid.rope.scaling.finetuned", *finetuned);
    });
  };
  auto c = granite(std::nullopt);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->mixers, ElementsAre(kMamba2Mixer, kAttentionMixer));
  EXPECT_EQ(c->attention.num_heads, 4);
  EXPECT_EQ(c->attention.num_kv_heads, 2);
  EXPECT_EQ(c->ssm_inner, 32);
  EXPECT_EQ(c->ssm_state, 8);
  EXPECT_EQ(c->ssm_heads, 4);
  EXPECT_EQ(c->ssm_groups, 2);
  EXPECT_EQ(c->conv_kernel, 4);
  EXPECT_TRUE(c->mlp);
  EXPECT_TRUE(c->rope);  // llama.cpp: no finetuned key, RoPE on
  auto with = granite(true), without = granite(false);
  ASSERT_TRUE(with.ok() && without.ok());
  EXPECT_TRUE(with->rope);
  EXPECT_FALSE(without->rope);

  auto mamba2 = config_of("mamba2", [](Builder& b) {
    b.U32("mamba2.feed_forward_length", 0).U32("mamba2.attention.head_count", 0);
  });
  ASSERT_TRUE(mamba2.ok()) << mamba2.status();
  EXPECT_THAT(mamba2->mixers, ElementsAre(kMamba2Mixer, kMamba2Mixer));
  EXPECT_FALSE(mamba2->mlp);
  EXPECT_EQ(mamba2->mlp_hidden, 0);
  EXPECT_FALSE(mamba2->rope);
}

// Qwen3.5's metadata (server/DESIGN.md §14), as llama.cpp's qwen35.cpp reads it: every
// full_attention_interval-th layer attention, the rest Gated DeltaNet; gated attention
// (attn_q holds [q | gate] per head), partial RoPE (rope.dimension_count of key_length)
// and the M-RoPE sections, which are required.
TEST(GgufModelTest, Qwen35ConfigFromMetadata) {
  auto config_of = [](const std::function<void(Builder&)>& edit, uint32_t blocks = 3) {
    Builder b;
    b.String("general.architecture", "qwen35").U32("qwen35.embedding_length", 16)
        .U32("qwen35.block_count", blocks).U32("qwen35.full_attention_interval", 3)
        .U32("qwen35.feed_forward_length", 32).U32("qwen35.attention.head_count", 4)
        .U32("qwen35.attention.head_count_kv", 2).U32("qwen35.attention.key_length", 8)
        .U32("qwen35.rope.dimension_count", 4).U32("qwen35.ssm.conv_kernel", 4)
        .U32("qwen35.ssm.inner_size", 32).U32("qwen35.ssm.state_size", 8)
        .U32("qwen35.ssm.time_step_rank", 4).U32("qwen35.ssm.group_count", 2);
    edit(b);
    b.Tensor("token_embd.weight", {16, 300}, 0, std::string(16 * 300 * 4, '\0'))
        .Tensor("blk.2.attn_q.weight", {16, 64}, 0, std::string(16 * 64 * 4, '\0'))
        .Tensor("blk.2.attn_k.weight", {16, 16}, 0, std::string(16 * 16 * 4, '\0'))
        .Tensor("blk.2.attn_q_norm.weight", {8}, 0, std::string(8 * 4, '\0'))
        .Tensor("blk.2.ffn_up.weight", {16, 32}, 0, std::string(16 * 32 * 4, '\0'));
    auto f = ParseGguf(b.Bytes());
    EXPECT_TRUE(f.ok()) << f.status();
    return GgufModelConfig(*f, "m");
  };
  std::string sections;
  Builder::Put<uint32_t>(&sections, 5);  // GGUF's INT32
  Builder::Put<uint64_t>(&sections, 4);
  for (int32_t x : {1, 1, 0, 0}) Builder::Put(&sections, x);
  auto c = config_of([&](Builder& b) { b.Raw("qwen35.rope.dimension_sections", 9, sections); });
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->mixers,
              ElementsAre(kGatedDeltaNetMixer, kGatedDeltaNetMixer, kAttentionMixer));
  EXPECT_TRUE(c->attention_gate);
  EXPECT_TRUE(c->qk_head_norm);
  EXPECT_EQ(c->attention.head_dim, 8);
  EXPECT_EQ(c->rope_dims, 4);
  EXPECT_THAT(c->rope_sections, ElementsAre(1, 1, 0, 0));
  EXPECT_EQ(c->ssm_groups, 2);  // key heads
  EXPECT_EQ(c->ssm_heads, 4);   // value heads
  EXPECT_EQ(c->ssm_state, 8);   // d_k
  EXPECT_EQ(c->experts, 0);
  auto no_sections = config_of([](Builder&) {});
  EXPECT_THAT(no_sections.status().message(), HasSubstr("rope.dimension_sections"));
  // A multi-token-prediction block after the trunk (block_count counts it) is not run.
  auto mtp = config_of(
      [&](Builder& b) {
        b.Raw("qwen35.rope.dimension_sections", 9, sections).U32("qwen35.nextn_predict_layers", 1);
      },
      4);
  ASSERT_TRUE(mtp.ok()) << mtp.status();
  EXPECT_EQ(mtp->num_layers, 3);
  EXPECT_THAT(mtp->mixers,
              ElementsAre(kGatedDeltaNetMixer, kGatedDeltaNetMixer, kAttentionMixer));
}

}  // namespace
}  // namespace attnserve::model
