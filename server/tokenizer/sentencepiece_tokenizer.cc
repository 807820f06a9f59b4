#include "server/tokenizer/sentencepiece_tokenizer.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "server/tokenizer/sentencepiece_backend.h"

namespace attnserve::tokenizer {
namespace {

using internal::PieceType;

constexpr char kSpaceSymbol[] = "\xe2\x96\x81";  // "▁"

absl::Status Refuse(const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat("tokenizer.model: ", message));
}

bool IsSpecial(PieceType type) {
  return type == PieceType::kControl || type == PieceType::kUserDefined;
}

// "<0xE2>" -> 0xE2; -1 if the piece is not of that form.
int ByteOfPiece(const std::string& piece) {
  if (piece.size() != 6 || !absl::StartsWith(piece, "<0x") || piece[5] != '>') return -1;
  int value = 0;
  for (char c : piece.substr(3, 2)) {
    const int digit = c >= '0' && c <= '9'   ? c - '0'
                      : c >= 'A' && c <= 'F' ? c - 'A' + 10
                      : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                             : -1;
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

}  // namespace

absl::Status SentencePieceAvailable() {
  std::string why;
  if (internal::SentencePieceBackend::Available(&why)) return absl::OkStatus();
  return absl::UnavailableError(why);
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

absl::StatusOr<std::shared_ptr<const SentencePieceTokenizer>> SentencePieceTokenizer::Create(
    std::string_view serialized, const Options& options) {
  auto facts = internal::ReadSentencePieceFacts(serialized);
  if (!facts.ok()) return facts.status();
  if (facts->has_denormalizer) {
    return Refuse("has a denormalizer (denormalizer_spec), whose rewriting of the decoded "
                  "text cannot be streamed token by token; not supported");
  }
  auto continuation = internal::WithoutDummyPrefix(serialized);
  if (!continuation.ok()) return continuation.status();
  std::shared_ptr<SentencePieceTokenizer> t(new SentencePieceTokenizer());
  std::string error;
  t->sp_ = internal::SentencePieceBackend::Load(serialized, &error);
  if (t->sp_ == nullptr) {
    if (absl::Status available = SentencePieceAvailable(); !available.ok()) return available;
    return Refuse(absl::StrCat("the SentencePiece library: ", error));
  }
  t->continuation_ = internal::SentencePieceBackend::Load(*continuation, &error);
  if (t->continuation_ == nullptr) {
    return Refuse(absl::StrCat("the SentencePiece library (without dummy prefix): ", error));
  }
  const int size = t->sp_->size();
  if (size != int(facts->types.size())) {
    return Refuse(absl::StrCat("the library reads ", size, " pieces, the file holds ",
                               facts->types.size()));
  }
  const bool strips_space = facts->add_dummy_prefix || facts->remove_extra_whitespaces;
  const int unk = t->sp_->unk_id();
  const std::string unk_surface = unk >= 0 ? t->sp_->Decode({unk}) : std::string();
  t->surfaces_.resize(size);
  for (int id = 0; id < size; ++id) {
    Surface& s = t->surfaces_[id];
    const std::string& piece = t->sp_->Piece(id);
    const PieceType type = facts->types[id];
    if (type == PieceType::kControl) {
      s.control = true;
    } else if (type == PieceType::kUnknown) {
      s.bytes = s.at_start = unk_surface;
    } else if (type == PieceType::kByte && ByteOfPiece(piece) >= 0) {
      s.bytes = s.at_start = std::string(1, char(ByteOfPiece(piece)));
    } else {
      s.bytes = absl::StrReplaceAll(piece, {{kSpaceSymbol, " "}});
      const bool consumed = strips_space && absl::StartsWith(piece, kSpaceSymbol);
      s.at_start = consumed ? s.bytes.substr(1) : s.bytes;
      // With remove_extra_whitespaces every leading space piece is dropped.
      s.consumes_space = consumed && !facts->remove_extra_whitespaces;
    }
  }
  const auto special = [&](int id) {
    return id >= 0 && id < size && IsSpecial(facts->types[id]);
  };
  if (options.bos_token_id >= 0) {
    t->bos_ = special(options.bos_token_id) ? options.bos_token_id : t->sp_->bos_id();
  }
  for (int id : options.eos_token_ids) {
    if (special(id)) t->eos_.push_back(id);
  }
  if (t->eos_.empty() && t->sp_->eos_id() >= 0) t->eos_.push_back(t->sp_->eos_id());
  if (t->eos_.empty()) {
    return Refuse("no end-of-sequence id: the model config's eos_token_id names no "
                  "control or user-defined piece and the model has no </s>");
  }
  t->add_bos_ = options.add_bos;
  if (t->add_bos_ && t->bos_ < 0) {
    return Refuse("add_bos_token is true but there is no BOS id (bos_token_id, or <s> "
                  "in the model)");
  }
  return std::shared_ptr<const SentencePieceTokenizer>(std::move(t));
}

absl::StatusOr<std::vector<int32_t>> SentencePieceTokenizer::Encode(std::string_view text,
                                                                    bool continuation) const {
  std::vector<int> ids;
  std::string error;
  if (!(continuation ? continuation_ : sp_)->Encode(text, &ids, &error)) {
    return absl::InternalError(absl::StrCat("SentencePiece Encode: ", error));
  }
  std::vector<int32_t> out;
  out.reserve(ids.size() + 1);
  if (!continuation && add_bos_) out.push_back(bos_);
  out.insert(out.end(), ids.begin(), ids.end());
  return out;
}

std::string SentencePieceTokenizer::StreamBytes(int32_t id, bool& at_start) const {
  if (id < 0 || id >= int32_t(surfaces_.size())) return std::string();
  const Surface& s = surfaces_[id];
  if (s.control) return std::string();
  if (!at_start) return s.bytes;
  // The library's Decode: the start ends once the text is not empty or a piece has
  // consumed the leading "▁".
  at_start = s.at_start.empty() && !s.consumes_space;
  return s.at_start;
}

std::string SentencePieceTokenizer::Piece(int32_t id) const {
  return id >= 0 && id < int32_t(surfaces_.size()) ? sp_->Piece(id) : std::string();
}

std::string SentencePieceTokenizer::LibraryDecode(absl::Span<const int32_t> ids) const {
  return sp_->Decode(std::vector<int>(ids.begin(), ids.end()));
}

}  // namespace attnserve::tokenizer
