// A thin wrapper over libsentencepiece's SentencePieceProcessor with std types only:
// Debian's sentencepiece_processor.h declares `namespace absl { using std::string_view; }`,
// which clashes with abseil's own absl::string_view, so only sentencepiece_backend.cc
// includes it, and that file includes no abseil header.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace attnserve::tokenizer::internal {

class SentencePieceBackend {
 public:
  // A processor for the serialized ModelProto; null with `*error` set on failure.
  static std::unique_ptr<SentencePieceBackend> Load(std::string_view serialized,
                                                    std::string* error);
  ~SentencePieceBackend();

  // The ids of `text` as the library encodes it; false with `*error` on failure.
  bool Encode(std::string_view text, std::vector<int>* ids, std::string* error) const;
  // The library's own decoding of `ids` (tests compare the stream with it).
  std::string Decode(const std::vector<int>& ids) const;

  int size() const;
  const std::string& Piece(int id) const;
  int bos_id() const;
  int eos_id() const;
  int unk_id() const;

 private:
  SentencePieceBackend();
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
};

}  // namespace attnserve::tokenizer::internal
