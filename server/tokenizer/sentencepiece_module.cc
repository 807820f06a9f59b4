// libattnserve_sentencepiece.so: SentencePieceBackend over libsentencepiece, opened by
// SentencePieceBackend::Load (sentencepiece_backend.h says why it is a module). No
// abseil headers in this file: sentencepiece_processor.h defines absl::string_view.
#include <sentencepiece_processor.h>

#include "server/tokenizer/sentencepiece_backend.h"

namespace attnserve::tokenizer::internal {
namespace {

class LibrarySentencePiece final : public SentencePieceBackend {
 public:
  bool Load(std::string_view serialized, std::string* error) {
    const sentencepiece::util::Status status = sp_.LoadFromSerializedProto(serialized);
    if (!status.ok()) *error = status.ToString();
    return status.ok();
  }
  bool Encode(std::string_view text, std::vector<int>* ids,
              std::string* error) const override {
    const sentencepiece::util::Status status = sp_.Encode(text, ids);
    if (!status.ok()) *error = status.ToString();
    return status.ok();
  }
  std::string Decode(const std::vector<int>& ids) const override { return sp_.DecodeIds(ids); }
  int size() const override { return sp_.GetPieceSize(); }
  std::string Piece(int id) const override { return sp_.IdToPiece(id); }
  int bos_id() const override { return sp_.bos_id(); }
  int eos_id() const override { return sp_.eos_id(); }
  int unk_id() const override { return sp_.unk_id(); }

 private:
  sentencepiece::SentencePieceProcessor sp_;
};

}  // namespace
}  // namespace attnserve::tokenizer::internal

extern "C" __attribute__((visibility("default")))
attnserve::tokenizer::internal::SentencePieceBackend* AttnServeSentencePieceLoad(
    const char* serialized, size_t size, std::string* error) {
  auto backend = std::make_unique<attnserve::tokenizer::internal::LibrarySentencePiece>();
  if (!backend->Load(std::string_view(serialized, size), error)) return nullptr;
  return backend.release();
}
