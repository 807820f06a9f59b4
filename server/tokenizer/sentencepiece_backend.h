// libsentencepiece behind a small interface with std types only, loaded at run time.
//
// Debian's libsentencepiece.so.0 carries its own copy of protobuf-lite and exports its
// symbols. A process that also links libprotobuf (every attnserve binary: the API and the
// model config are protobuf) crashes at start-up when the two copies interpose each other.
// So the library is linked only into a module of ours (libattnserve_sentencepiece.so,
// sentencepiece_module.cc) that Load opens with RTLD_LOCAL | RTLD_DEEPBIND: its symbols
// stay out of the process's global scope, and it resolves protobuf to its own copy.
// (Its header also declares `namespace absl { using std::string_view; }`, which clashes
// with abseil's absl::string_view: another reason to keep it to that one file.)
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace attnserve::tokenizer::internal {

class SentencePieceBackend {
 public:
  virtual ~SentencePieceBackend() = default;

  // A processor for the serialized ModelProto; null with `*error` set on failure (the
  // module not found or not loadable included).
  static std::unique_ptr<SentencePieceBackend> Load(std::string_view serialized,
                                                    std::string* error);
  // Whether the module loads; false with `*why` otherwise.
  static bool Available(std::string* why);

  // The ids of `text` as the library encodes it; false with `*error` on failure.
  virtual bool Encode(std::string_view text, std::vector<int>* ids,
                      std::string* error) const = 0;
  // The library's own decoding of `ids` (tests compare the stream with it).
  virtual std::string Decode(const std::vector<int>& ids) const = 0;

  virtual int size() const = 0;
  virtual std::string Piece(int id) const = 0;
  virtual int bos_id() const = 0;
  virtual int eos_id() const = 0;
  virtual int unk_id() const = 0;
};

// The module's one entry point (extern "C", looked up by name).
using SentencePieceLoadFn = SentencePieceBackend* (*)(const char* serialized, size_t size,
                                                     std::string* error);
inline constexpr char kSentencePieceLoadSymbol[] = "AttnServeSentencePieceLoad";

}  // namespace attnserve::tokenizer::internal
