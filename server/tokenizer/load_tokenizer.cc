// LoadTokenizer and the interface's shared helpers (tokenizer.h).
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/tokenizer/bpe_tokenizer_json.h"
#include "server/tokenizer/byte_tokenizer.h"
#include "server/tokenizer/sentencepiece_tokenizer.h"
#include "server/tokenizer/tokenizer.h"

namespace attnserve::tokenizer {
namespace {

namespace fs = std::filesystem;

absl::StatusOr<std::string> ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.is_open() || in.bad()) {
    return absl::InvalidArgumentError(absl::StrCat(path.string(), ": cannot be read"));
  }
  return bytes;
}

// tokenizer_config.json's add_bos_token; absent (or no file): true for the Llama
// tokenizers Hugging Face writes it for and for a directory without the file, false for
// other tokenizer classes.
absl::StatusOr<bool> AddBos(const fs::path& dir, const model::ModelConfig& config) {
  const fs::path path = dir / "tokenizer_config.json";
  if (!fs::exists(path)) return true;
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  const nlohmann::json json = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path.string(), ": not a JSON object"));
  }
  const auto add = json.find("add_bos_token");
  if (add != json.end() && !add->is_null()) {
    if (!add->is_boolean()) {
      return absl::InvalidArgumentError(absl::StrCat(
          path.string(), ": add_bos_token must be true or false, got ", add->dump()));
    }
    return add->get<bool>();
  }
  std::string cls = config.tokenizer_class;
  const auto it = json.find("tokenizer_class");
  if (it != json.end() && it->is_string()) cls = it->get<std::string>();
  return cls.empty() || cls == "LlamaTokenizer" || cls == "LlamaTokenizerFast" ||
         cls == "CodeLlamaTokenizer" || cls == "CodeLlamaTokenizerFast";
}

absl::StatusOr<std::shared_ptr<const Tokenizer>> LoadSentencePiece(
    const fs::path& dir, const model::ModelConfig& config) {
  const fs::path path = dir / "tokenizer.model";
  auto bytes = ReadFile(path);
  if (!bytes.ok()) return bytes.status();
  auto add_bos = AddBos(dir, config);
  if (!add_bos.ok()) return add_bos.status();
  SentencePieceTokenizer::Options options;
  options.add_bos = *add_bos;
  options.bos_token_id = config.bos_token_id;
  options.eos_token_ids = config.eos_token_ids;
  auto sp = SentencePieceTokenizer::Create(*bytes, options);
  if (!sp.ok()) {
    return absl::Status(sp.status().code(),
                        absl::StrCat(dir.string(), "/", sp.status().message()));
  }
  return std::shared_ptr<const Tokenizer>(*std::move(sp));
}

absl::StatusOr<std::shared_ptr<const Tokenizer>> LoadBpe(const fs::path& dir,
                                                         const model::ModelConfig& config) {
  auto json = ReadFile(dir / "tokenizer.json");
  if (!json.ok()) return json.status();
  std::optional<std::string> tokenizer_config;
  if (fs::exists(dir / "tokenizer_config.json")) {
    auto text = ReadFile(dir / "tokenizer_config.json");
    if (!text.ok()) return text.status();
    tokenizer_config = *std::move(text);
  }
  auto bpe = LoadBpeTokenizer(*json, tokenizer_config, config);
  if (!bpe.ok()) {
    return absl::Status(bpe.status().code(),
                        absl::StrCat(dir.string(), "/", bpe.status().message()));
  }
  return std::shared_ptr<const Tokenizer>(*std::move(bpe));
}

// The tokenizer's ids must be rows of the model's embedding.
absl::Status CheckFits(const Tokenizer& t, const fs::path& dir,
                       const model::ModelConfig& config) {
  if (t.vocab_size() > config.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        dir.string(), ": the ", t.kind(), " tokenizer has ", t.vocab_size(),
        " tokens but the model's vocab_size is ", config.vocab_size,
        " (the embedding needs a row for every token)"));
  }
  return absl::OkStatus();
}

}  // namespace

bool Tokenizer::IsEos(int32_t id) const {
  for (int32_t eos : eos_ids()) {
    if (eos == id) return true;
  }
  return false;
}

absl::StatusOr<std::string> Decode(const Tokenizer& tokenizer,
                                   absl::Span<const int32_t> ids) {
  std::string out;
  StreamDecoder decoder(tokenizer, /*text_started=*/false);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= tokenizer.vocab_size()) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", ids[i], " at position ", i,
                                                     " is outside [0, ",
                                                     tokenizer.vocab_size(), ")"));
    }
    out += decoder.Next(ids[i]);
  }
  return out;
}

absl::StatusOr<std::shared_ptr<const Tokenizer>> LoadTokenizer(
    const std::string& dir_name, const model::ModelConfig& config) {
  const fs::path dir(dir_name);
  absl::StatusOr<std::shared_ptr<const Tokenizer>> tokenizer;
  if (config.tokenizer_class == kByteTokenizerClass) {
    tokenizer = ByteTokenizer::Create(config);
  } else if (fs::exists(dir / "tokenizer.model")) {
    tokenizer = LoadSentencePiece(dir, config);
  } else if (fs::exists(dir / "tokenizer.json")) {
    tokenizer = LoadBpe(dir, config);
  } else if (config.tokenizer_class.empty() && config.vocab_size >= kByteVocabSize) {
    tokenizer = ByteTokenizer::Create(config);  // a byte model written before tokenizer files
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        dir_name, ": no tokenizer: expected tokenizer.model (SentencePiece), tokenizer.json "
        "(byte-level BPE), or "
        "\"tokenizer_class\": \"", kByteTokenizerClass, "\" in config.json for a byte model",
        config.tokenizer_class.empty()
            ? std::string()
            : absl::StrCat(" (config.json names tokenizer_class \"", config.tokenizer_class,
                           "\")")));
  }
  if (!tokenizer.ok()) {
    if (!absl::StrContains(tokenizer.status().message(), dir_name)) {
      return absl::Status(tokenizer.status().code(),
                          absl::StrCat(dir_name, ": ", tokenizer.status().message()));
    }
    return tokenizer.status();
  }
  if (absl::Status fits = CheckFits(**tokenizer, dir, config); !fits.ok()) return fits;
  return tokenizer;
}

}  // namespace attnserve::tokenizer
