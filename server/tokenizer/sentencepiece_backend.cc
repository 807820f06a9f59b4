// No abseil headers in this file: see sentencepiece_backend.h.
#include "server/tokenizer/sentencepiece_backend.h"

#include <sentencepiece_processor.h>

namespace attnserve::tokenizer::internal {

SentencePieceBackend::SentencePieceBackend()
    : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {}

SentencePieceBackend::~SentencePieceBackend() = default;

std::unique_ptr<SentencePieceBackend> SentencePieceBackend::Load(std::string_view serialized,
                                                                 std::string* error) {
  std::unique_ptr<SentencePieceBackend> backend(new SentencePieceBackend());
  const sentencepiece::util::Status status = backend->sp_->LoadFromSerializedProto(serialized);
  if (!status.ok()) {
    *error = status.ToString();
    return nullptr;
  }
  return backend;
}

bool SentencePieceBackend::Encode(std::string_view text, std::vector<int>* ids,
                                  std::string* error) const {
  const sentencepiece::util::Status status = sp_->Encode(text, ids);
  if (status.ok()) return true;
  *error = status.ToString();
  return false;
}

std::string SentencePieceBackend::Decode(const std::vector<int>& ids) const {
  return sp_->DecodeIds(ids);
}

int SentencePieceBackend::size() const { return sp_->GetPieceSize(); }
const std::string& SentencePieceBackend::Piece(int id) const { return sp_->IdToPiece(id); }
int SentencePieceBackend::bos_id() const { return sp_->bos_id(); }
int SentencePieceBackend::eos_id() const { return sp_->eos_id(); }
int SentencePieceBackend::unk_id() const { return sp_->unk_id(); }

}  // namespace attnserve::tokenizer::internal
