// What the SentencePiece tokenizer needs from a tokenizer.model that the library does
// not expose (Debian ships no sentencepiece_model.pb.h), read from the serialized
// ModelProto's protobuf wire format, and the one edit it makes to it. Field numbers are
// those of sentencepiece_model.proto:
//   ModelProto { repeated SentencePiece pieces = 1; NormalizerSpec normalizer_spec = 3;
//                SelfTestData self_test_data = 4; NormalizerSpec denormalizer_spec = 5; }
//   SentencePiece { string piece = 1; float score = 2; Type type = 3 (NORMAL = 1); }
//   NormalizerSpec { bytes precompiled_charsmap = 2; bool add_dummy_prefix = 3;
//                    bool remove_extra_whitespaces = 4; }  (both bools default true)
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace attnserve::tokenizer::internal {

// SentencePiece::Type.
enum class PieceType { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4,
                       kUnused = 5, kByte = 6 };

struct SentencePieceFacts {
  std::vector<PieceType> types;  // per id
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = true;
  bool has_denormalizer = false;  // denormalizer_spec with a charsmap
};

// DATA_LOSS when `serialized` is not a well-formed ModelProto at the fields read.
absl::StatusOr<SentencePieceFacts> ReadSentencePieceFacts(std::string_view serialized);

// `serialized` with normalizer_spec.add_dummy_prefix false and no self_test_data (its
// samples were encoded with the prefix, and the library checks them at load).
absl::StatusOr<std::string> WithoutDummyPrefix(std::string_view serialized);

}  // namespace attnserve::tokenizer::internal
