#include "server/tokenizer/gguf_vocab.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "server/tokenizer/bpe_tokenizer.h"
#include "server/tokenizer/sentencepiece_tokenizer.h"

namespace attnserve::tokenizer {
namespace {

using nlohmann::json;

absl::Status BadKey(const std::string& key, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("GGUF metadata ", key, ": ", what));
}

// Protobuf wire format, the few pieces a ModelProto needs.
void Varint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(char(v | 0x80));
    v >>= 7;
  }
  out->push_back(char(v));
}
void Tag(std::string* out, int field, int wire) { Varint(out, uint64_t(field) << 3 | wire); }
void Bytes(std::string* out, int field, const std::string& bytes) {
  Tag(out, field, 2);
  Varint(out, bytes.size());
  out->append(bytes);
}
void Int(std::string* out, int field, int64_t v) {
  Tag(out, field, 0);
  Varint(out, uint64_t(v));
}
void Float(std::string* out, int field, float v) {
  Tag(out, field, 5);
  char b[4];
  std::memcpy(b, &v, 4);  // little-endian hosts
  out->append(b, 4);
}

// tokenizer.ggml.tokens as strings (required) and a same-length array at `key` (optional).
absl::StatusOr<const json*> Tokens(const json& m) {
  const char* key = "tokenizer.ggml.tokens";
  if (!m.contains(key)) return BadKey(key, "is missing");
  const json& tokens = m[key];
  if (!tokens.is_array() || tokens.empty()) return BadKey(key, "must be a non-empty array");
  for (const json& t : tokens) {
    if (!t.is_string()) return BadKey(key, "must hold strings");
  }
  return &tokens;
}
absl::StatusOr<const json*> Parallel(const json& m, const char* key, size_t n, bool numbers) {
  if (!m.contains(key)) return nullptr;
  const json& a = m[key];
  if (!a.is_array() || a.size() != n) {
    return BadKey(key, absl::StrCat("must be an array of ", n, " (one per token)"));
  }
  for (const json& v : a) {
    if (!v.is_number()) return BadKey(key, numbers ? "must hold numbers" : "must hold integers");
  }
  return &a;
}

absl::StatusOr<bool> Bool(const json& m, const char* key, bool fallback) {
  if (!m.contains(key)) return fallback;
  if (!m[key].is_boolean()) return BadKey(key, "must be a bool");
  return m[key].get<bool>();
}

std::vector<int32_t> Ids(const std::vector<int>& ids) { return {ids.begin(), ids.end()}; }

absl::StatusOr<std::shared_ptr<const Tokenizer>> Gpt2(const json& m,
                                                      const model::ModelConfig& config) {
  auto tokens = Tokens(m);
  if (!tokens.ok()) return tokens.status();
  const size_t n = (*tokens)->size();
  auto types = Parallel(m, "tokenizer.ggml.token_type", n, false);
  if (!types.ok()) return types.status();
  BpeTokenizer::Vocabulary v;
  for (size_t i = 0; i < n; ++i) {
    v.tokens.push_back((**tokens)[i].get<std::string>());
    const int type = *types != nullptr ? (**types)[i].get<int>() : 1;
    if (type == 3 || type == 4) {  // control, user-defined: matched before the split
      v.added.push_back({v.tokens.back(), int32_t(i), /*special=*/type == 3,
                         /*normalized=*/false});
    }
  }
  const char* merges_key = "tokenizer.ggml.merges";
  if (!m.contains(merges_key) || !m[merges_key].is_array() || m[merges_key].empty()) {
    return BadKey(merges_key, "is missing or empty: a gpt2 vocabulary needs its merges");
  }
  for (const json& merge : m[merges_key]) {
    const std::string s = merge.is_string() ? merge.get<std::string>() : "";
    const size_t space = s.find(' ', 1);
    if (space == std::string::npos || space + 1 >= s.size()) {
      return BadKey(merges_key, absl::StrCat("\"", s, "\" is not two tokens \"a b\""));
    }
    v.merges.emplace_back(s.substr(0, space), s.substr(space + 1));
  }
  // llama.cpp's names for the splits (its llama-vocab.cpp); "default" (also what a file
  // without the key gets) is a split of llama.cpp's own that no tokenizer.json has.
  const json pre_value = m.value("tokenizer.ggml.pre", json(""));
  if (!pre_value.is_string()) return BadKey("tokenizer.ggml.pre", "must be a string");
  const std::string pre = pre_value.get<std::string>();
  if (pre == "gpt-2") {
    v.split_patterns = {kGpt2SplitPattern};
  } else if (pre == "llama-bpe") {
    v.split_patterns = {kLlama3SplitPattern};
    v.ignore_merges = true;
  } else if (pre == "qwen2") {
    v.split_patterns = {kQwen2SplitPattern};
  } else {
    return BadKey("tokenizer.ggml.pre",
                  absl::StrCat(pre.empty() ? "is missing" : absl::StrCat("'", pre, "'"),
                               ": attnserve splits gpt2 vocabularies as 'gpt-2' (GPT-2), "
                               "'llama-bpe' (Llama-3) and 'qwen2' (Qwen2, Qwen3)"));
  }
  auto add_bos = Bool(m, "tokenizer.ggml.add_bos_token", false);
  if (!add_bos.ok()) return add_bos.status();
  BpeTokenizer::Options options;
  options.add_bos = *add_bos;
  options.bos_id = config.bos_token_id;
  options.eos_ids = Ids(config.eos_token_ids);
  auto bpe = BpeTokenizer::Create(std::move(v), options);
  if (!bpe.ok()) return bpe.status();
  return std::shared_ptr<const Tokenizer>(*std::move(bpe));
}

}  // namespace

absl::StatusOr<std::string> SentencePieceModelFromGguf(const model::GgufFile& file) {
  const json& m = file.metadata;
  auto tokens = Tokens(m);
  if (!tokens.ok()) return tokens.status();
  const size_t n = (*tokens)->size();
  auto scores = Parallel(m, "tokenizer.ggml.scores", n, true);
  if (!scores.ok()) return scores.status();
  if (*scores == nullptr) return BadKey("tokenizer.ggml.scores", "is missing (a llama vocabulary merges by score)");
  auto types = Parallel(m, "tokenizer.ggml.token_type", n, false);
  if (!types.ok()) return types.status();
  auto space_prefix = Bool(m, "tokenizer.ggml.add_space_prefix", true);
  if (!space_prefix.ok()) return space_prefix.status();
  std::string proto;
  int unknown = 0;
  for (size_t i = 0; i < n; ++i) {
    const int type = *types != nullptr ? (**types)[i].get<int>() : 1;
    if (type < 1 || type > 6) {
      return BadKey("tokenizer.ggml.token_type", absl::StrCat("token ", i, " has type ", type));
    }
    unknown += type == 2;
    std::string piece;
    Bytes(&piece, 1, (**tokens)[i].get<std::string>());
    Float(&piece, 2, (**scores)[i].get<float>());
    Int(&piece, 3, type);
    Bytes(&proto, 1, piece);
  }
  if (unknown != 1) {
    return BadKey("tokenizer.ggml.token_type",
                  absl::StrCat(unknown, " unknown tokens (type 2); a llama vocabulary has one"));
  }
  std::string trainer;
  Int(&trainer, 3, 2);     // model_type: BPE
  Int(&trainer, 4, int64_t(n));
  Int(&trainer, 35, 1);    // byte_fallback
  Bytes(&proto, 2, trainer);
  std::string normalizer;
  Bytes(&normalizer, 1, "identity");
  Int(&normalizer, 3, *space_prefix ? 1 : 0);  // add_dummy_prefix
  Int(&normalizer, 4, 0);                      // remove_extra_whitespaces
  Int(&normalizer, 5, 1);                      // escape_whitespaces
  Bytes(&proto, 3, normalizer);
  return proto;
}

absl::StatusOr<std::shared_ptr<const Tokenizer>> LoadGgufTokenizer(
    const model::GgufFile& file, const model::ModelConfig& config) {
  const json& m = file.metadata;
  const json kind = m.value("tokenizer.ggml.model", json());
  std::shared_ptr<const Tokenizer> tokenizer;
  if (kind == "gpt2") {
    auto bpe = Gpt2(m, config);
    if (!bpe.ok()) return bpe.status();
    tokenizer = *std::move(bpe);
  } else if (kind == "llama") {
    auto proto = SentencePieceModelFromGguf(file);
    if (!proto.ok()) return proto.status();
    auto add_bos = Bool(m, "tokenizer.ggml.add_bos_token", true);
    if (!add_bos.ok()) return add_bos.status();
    SentencePieceTokenizer::Options options;
    options.add_bos = *add_bos;
    options.bos_token_id = config.bos_token_id;
    options.eos_token_ids = config.eos_token_ids;
    auto sp = SentencePieceTokenizer::Create(*proto, options);
    if (!sp.ok()) return sp.status();
    tokenizer = *std::move(sp);
  } else {
    return BadKey("tokenizer.ggml.model",
                  absl::StrCat(model::GgufValueText(kind), ": attnserve reads llama and gpt2 vocabularies"));
  }
  if (tokenizer->vocab_size() > config.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the vocabulary has ", tokenizer->vocab_size(), " tokens but token_embd has ",
        config.vocab_size, " rows"));
  }
  return tokenizer;
}

absl::StatusOr<std::shared_ptr<const Tokenizer>> LoadGgufTokenizer(
    const std::string& path, const model::ModelConfig& config) {
  auto reader = model::GgufReader::Open(path);
  if (!reader.ok()) return reader.status();
  auto tokenizer = LoadGgufTokenizer((*reader)->file(), config);
  if (!tokenizer.ok()) {
    return absl::Status(tokenizer.status().code(),
                        absl::StrCat(path, ": ", tokenizer.status().message()));
  }
  return tokenizer;
}

}  // namespace attnserve::tokenizer
