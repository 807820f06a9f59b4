#include "server/tokenizer/bpe_tokenizer_json.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"

namespace attnserve::tokenizer {
namespace {

using Json = nlohmann::json;

// How many ids past the number of tokens a file may leave without one (ids are dense in
// real files; a stray huge id must not allocate a huge table).
constexpr int64_t kMaxIdGap = 1 << 16;

absl::Status Bad(absl::string_view field, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: ", field, ": ", message));
}

// `object`[`key`], or null when absent.
const Json& Field(const Json& object, const char* key) {
  static const Json kNull;
  if (!object.is_object()) return kNull;
  const auto it = object.find(key);
  return it == object.end() ? kNull : *it;
}

std::string TypeOf(const Json& object) {
  const Json& type = Field(object, "type");
  return type.is_string() ? type.get<std::string>() : type.dump();
}

// A boolean field that must have the value `served` (absent: `absent`).
absl::Status Expect(const Json& object, const char* key, bool served, bool absent,
                    absl::string_view where) {
  const Json& value = Field(object, key);
  if (!value.is_null() && !value.is_boolean()) {
    return Bad(absl::StrCat(where, ".", key), absl::StrCat("not a boolean: ", value.dump()));
  }
  const bool v = value.is_null() ? absent : value.get<bool>();
  if (v == served) return absl::OkStatus();
  return Bad(absl::StrCat(where, ".", key),
             absl::StrCat(v ? "true" : "false", value.is_null() ? " (its default)" : "",
                          " is not supported, only ", served ? "true" : "false"));
}

absl::Status ReadModel(const Json& model, BpeTokenizer::Vocabulary& v) {
  if (!model.is_object()) return Bad("model", "missing or not an object");
  if (TypeOf(model) != "BPE") {
    return Bad("model.type", absl::StrCat(TypeOf(model), " is not BPE"));
  }
  const Json& dropout = Field(model, "dropout");
  if (!dropout.is_null() && !(dropout.is_number() && dropout.get<double>() == 0)) {
    return Bad("model.dropout", absl::StrCat(dropout.dump(), ": BPE dropout is not supported"));
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const Json& affix = Field(model, key);
    if (!affix.is_null() && affix != "") {
      return Bad(absl::StrCat("model.", key), absl::StrCat(affix.dump(), " is not supported"));
    }
  }
  if (absl::Status st = Expect(model, "byte_fallback", false, false, "model"); !st.ok()) {
    return st;
  }
  const Json& ignore = Field(model, "ignore_merges");
  if (!ignore.is_null() && !ignore.is_boolean()) {
    return Bad("model.ignore_merges", absl::StrCat("not a boolean: ", ignore.dump()));
  }
  v.ignore_merges = ignore.is_boolean() && ignore.get<bool>();

  const Json& vocab = Field(model, "vocab");
  if (!vocab.is_object() || vocab.empty()) return Bad("model.vocab", "missing or empty");
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() >= int64_t(vocab.size()) + kMaxIdGap) {
      return Bad("model.vocab", absl::StrCat("the id of \"", token, "\" is ", id.dump(),
                                             ", not an id in [0, ", vocab.size() + kMaxIdGap,
                                             ")"));
    }
    const size_t i = id.get<size_t>();
    if (i >= v.tokens.size()) v.tokens.resize(i + 1);
    if (!v.tokens[i].empty()) {
      return Bad("model.vocab", absl::StrCat("\"", v.tokens[i], "\" and \"", token,
                                             "\" have the same id ", i));
    }
    if (token.empty()) return Bad("model.vocab", absl::StrCat("token ", i, " is empty"));
    v.tokens[i] = token;
  }

  const Json& merges = Field(model, "merges");
  if (!merges.is_array()) {
    return Bad("model.merges", merges.is_null() ? "missing" : "not an array");
  }
  if (merges.empty()) return Bad("model.merges", "empty: a BPE without merges");
  v.merges.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const Json& m = merges[rank];
    std::vector<std::string> parts;
    if (m.is_string()) {
      parts = absl::StrSplit(m.get<std::string>(), ' ');
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      parts = {m[0].get<std::string>(), m[1].get<std::string>()};
    }
    if (parts.size() != 2 || parts[0].empty() || parts[1].empty()) {
      return Bad("model.merges", absl::StrCat("merge ", rank, " is ", m.dump(),
                                              ", not \"a b\" or [\"a\", \"b\"]"));
    }
    v.merges.emplace_back(std::move(parts[0]), std::move(parts[1]));
  }
  return absl::OkStatus();
}

absl::Status ReadAddedTokens(const Json& added, BpeTokenizer::Vocabulary& v) {
  if (added.is_null()) return absl::OkStatus();
  if (!added.is_array()) return Bad("added_tokens", "not an array");
  const int64_t limit = int64_t(v.tokens.size()) + kMaxIdGap;
  for (size_t i = 0; i < added.size(); ++i) {
    const Json& a = added[i];
    const std::string where = absl::StrCat("added_tokens[", i, "]");
    const Json& id = Field(a, "id");
    const Json& content = Field(a, "content");
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= limit) {
      return Bad(where, absl::StrCat("id ", id.dump(), " is not in [0, ", limit, ")"));
    }
    if (!content.is_string() || content.get<std::string>().empty()) {
      return Bad(where, "content is missing or empty");
    }
    for (const char* key : {"lstrip", "rstrip", "single_word"}) {
      if (absl::Status st = Expect(a, key, false, false, where); !st.ok()) return st;
    }
    const Json& special = Field(a, "special");
    const Json& normalized = Field(a, "normalized");
    if ((!special.is_null() && !special.is_boolean()) ||
        (!normalized.is_null() && !normalized.is_boolean())) {
      return Bad(where, "special and normalized must be true or false");
    }
    BpeTokenizer::AddedToken token;
    token.id = id.get<int32_t>();
    token.content = content.get<std::string>();
    token.special = special.is_boolean() && special.get<bool>();
    token.normalized = normalized.is_boolean() ? normalized.get<bool>() : !token.special;
    v.added.push_back(std::move(token));
  }
  return absl::OkStatus();
}

// ByteLevel, or Sequence[Split..., ByteLevel]: the split patterns in order.
absl::Status ReadPreTokenizer(const Json& pre, BpeTokenizer::Vocabulary& v) {
  const std::string served =
      "only ByteLevel, or a Sequence of Split pre-tokenizers ending in ByteLevel, is "
      "supported";
  std::vector<const Json*> steps = {&pre};
  if (TypeOf(pre) == "Sequence") {
    const Json& list = Field(pre, "pretokenizers");
    if (!list.is_array() || list.empty()) return Bad("pre_tokenizer.pretokenizers", served);
    steps.clear();
    for (const Json& step : list) steps.push_back(&step);
  }
  v.split_patterns.clear();
  for (size_t i = 0; i < steps.size(); ++i) {
    const Json& step = *steps[i];
    const std::string where =
        steps.size() == 1 ? "pre_tokenizer" : absl::StrCat("pre_tokenizer.pretokenizers[", i, "]");
    const std::string type = TypeOf(step);
    const bool last = i + 1 == steps.size();
    if (type == "ByteLevel" && last) {
      // tokenizers' default add_prefix_space is true.
      if (absl::Status st = Expect(step, "add_prefix_space", false, true, where); !st.ok()) {
        return st;
      }
      const Json& use_regex = Field(step, "use_regex");
      if (use_regex.is_null() || use_regex == true) v.split_patterns.push_back(kGpt2SplitPattern);
    } else if (type == "Split" && !last) {
      const Json& behavior = Field(step, "behavior");
      if (behavior != "Isolated") {
        return Bad(where + ".behavior", absl::StrCat(behavior.dump(), " is not supported, only "
                                                     "\"Isolated\""));
      }
      if (absl::Status st = Expect(step, "invert", false, false, where); !st.ok()) return st;
      const Json& regex = Field(Field(step, "pattern"), "Regex");
      const Json& literal = Field(Field(step, "pattern"), "String");
      if (regex.is_string()) {
        v.split_patterns.push_back(regex.get<std::string>());
      } else if (literal.is_string() && !literal.get<std::string>().empty()) {
        v.split_patterns.push_back(absl::StrCat(
            "\\Q", absl::StrReplaceAll(literal.get<std::string>(), {{"\\E", "\\E\\\\E\\Q"}}),
            "\\E"));
      } else {
        return Bad(where + ".pattern", "neither {\"Regex\": ...} nor {\"String\": ...}");
      }
    } else {
      return Bad(where, absl::StrCat(type, " here: ", served));
    }
  }
  return absl::OkStatus();
}

// The template's leading special token, -1 when none. Tokens after the text refused.
absl::StatusOr<int32_t> ReadPostProcessor(const Json& post, const BpeTokenizer::Vocabulary& v) {
  std::vector<const Json*> steps = {&post};
  if (TypeOf(post) == "Sequence") {
    steps.clear();
    for (const Json& step : Field(post, "processors")) steps.push_back(&step);
  }
  int32_t bos = -1;
  for (const Json* step : steps) {
    const std::string type = TypeOf(*step);
    if (step->is_null() || type == "ByteLevel") continue;
    if (type != "TemplateProcessing") {
      return Bad("post_processor", absl::StrCat(type, " is not supported (only ByteLevel "
                                                "and TemplateProcessing)"));
    }
    const Json& single = Field(*step, "single");
    bool text_seen = false;
    for (const Json& item : single.is_array() ? single : Json::array()) {
      if (item.contains("Sequence")) {
        text_seen = true;
        continue;
      }
      const Json& name = Field(Field(item, "SpecialToken"), "id");
      if (!name.is_string() || text_seen || bos >= 0) {
        return Bad("post_processor.single",
                   absl::StrCat(single.dump(), ": only one special token before the text "
                                               "is supported"));
      }
      const Json& ids = Field(Field(Field(*step, "special_tokens"), name.get<std::string>().c_str()), "ids");
      for (const auto& a : v.added) {
        if (a.content == name) bos = a.id;
      }
      if (ids.is_array() && ids.size() == 1 && ids[0].is_number_integer()) bos = ids[0].get<int32_t>();
      if (bos < 0) {
        return Bad("post_processor.single", absl::StrCat(name.dump(), " is not a token"));
      }
    }
    if (!text_seen) return Bad("post_processor.single", "has no Sequence A");
  }
  return bos;
}

}  // namespace

absl::StatusOr<TokenizerJson> ParseTokenizerJson(std::string_view text) {
  const Json json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    return absl::InvalidArgumentError("tokenizer.json: not a JSON object");
  }
  TokenizerJson out;
  if (absl::Status st = ReadModel(Field(json, "model"), out.vocabulary); !st.ok()) return st;
  if (absl::Status st = ReadAddedTokens(Field(json, "added_tokens"), out.vocabulary); !st.ok()) {
    return st;
  }
  const Json& normalizer = Field(json, "normalizer");
  if (!normalizer.is_null() &&
      !(TypeOf(normalizer) == "Sequence" && Field(normalizer, "normalizers") == Json::array())) {
    return Bad("normalizer", absl::StrCat(TypeOf(normalizer), " is not supported (byte-level "
                                          "BPE without a normalizer only)"));
  }
  if (absl::Status st = ReadPreTokenizer(Field(json, "pre_tokenizer"), out.vocabulary);
      !st.ok()) {
    return st;
  }
  const Json& decoder = Field(json, "decoder");
  if (TypeOf(decoder) != "ByteLevel") {
    return Bad("decoder", absl::StrCat(TypeOf(decoder), " is not ByteLevel"));
  }
  auto bos = ReadPostProcessor(Field(json, "post_processor"), out.vocabulary);
  if (!bos.ok()) return bos.status();
  out.template_bos = *bos;
  return out;
}

namespace {

// tokenizer_config.json's "bos_token" / "eos_token" (a string or {"content": ...}) as an
// id of `v`; -1 when absent or not a token.
int32_t ConfigTokenId(const Json& config, const char* key, const BpeTokenizer::Vocabulary& v) {
  const Json& field = Field(config, key);
  const Json& content = field.is_object() ? Field(field, "content") : field;
  if (!content.is_string()) return -1;
  for (const auto& a : v.added) {
    if (a.content == content) return a.id;
  }
  const auto it = std::find(v.tokens.begin(), v.tokens.end(), content.get<std::string>());
  return it == v.tokens.end() ? -1 : int32_t(it - v.tokens.begin());
}

}  // namespace

absl::StatusOr<std::shared_ptr<const BpeTokenizer>> LoadBpeTokenizer(
    std::string_view tokenizer_json, const std::optional<std::string>& tokenizer_config,
    const model::ModelConfig& config) {
  auto parsed = ParseTokenizerJson(tokenizer_json);
  if (!parsed.ok()) return parsed.status();
  Json tc = Json::object();
  if (tokenizer_config.has_value()) {
    tc = Json::parse(*tokenizer_config, nullptr, /*allow_exceptions=*/false);
    if (tc.is_discarded() || !tc.is_object()) {
      return absl::InvalidArgumentError("tokenizer_config.json: not a JSON object");
    }
  }
  const BpeTokenizer::Vocabulary& v = parsed->vocabulary;
  const auto special = [&](int id) {
    for (const auto& a : v.added) {
      if (a.id == id && a.special) return true;
    }
    return false;
  };
  BpeTokenizer::Options options;
  for (int id : config.eos_token_ids) {
    if (special(id)) options.eos_ids.push_back(id);
  }
  if (options.eos_ids.empty() && ConfigTokenId(tc, "eos_token", v) >= 0) {
    options.eos_ids.push_back(ConfigTokenId(tc, "eos_token", v));
  }
  if (options.eos_ids.empty()) {
    return absl::InvalidArgumentError(
        "tokenizer.json: no end-of-sequence id: config.json's eos_token_id names no special "
        "added token and tokenizer_config.json names no eos_token");
  }
  options.bos_id = special(config.bos_token_id)           ? config.bos_token_id
                   : ConfigTokenId(tc, "bos_token", v) >= 0 ? ConfigTokenId(tc, "bos_token", v)
                                                            : parsed->template_bos;
  const Json& add_bos = Field(tc, "add_bos_token");
  if (!add_bos.is_null() && !add_bos.is_boolean()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tokenizer_config.json: add_bos_token must be true or false, got ", add_bos.dump()));
  }
  options.add_bos = add_bos.is_boolean() ? add_bos.get<bool>() : parsed->template_bos >= 0;
  if (options.add_bos && options.bos_id < 0) {
    return absl::InvalidArgumentError(
        "tokenizer_config.json: add_bos_token is true but there is no BOS token (config.json's "
        "bos_token_id, tokenizer_config.json's bos_token)");
  }
  auto t = BpeTokenizer::Create(std::move(parsed->vocabulary), options);
  if (!t.ok()) {
    return absl::Status(t.status().code(), absl::StrCat("tokenizer.json: ", t.status().message()));
  }
  return t;
}

}  // namespace attnserve::tokenizer
