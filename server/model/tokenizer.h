// Byte-level tokenizer: ids 0..255 are the bytes themselves, then a few special ids.
// Every byte string (invalid UTF-8 included) round-trips. Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace attnserve::model {

inline constexpr int32_t kBosToken = 256;  // start of a document
inline constexpr int32_t kEosToken = 257;  // end of a document; generation stops here
inline constexpr int32_t kPadToken = 258;
inline constexpr int32_t kMinVocabSize = 259;

// One id per byte.
std::vector<int32_t> Encode(std::string_view bytes);

// The bytes of `ids`; special ids produce no bytes. An id outside [0, vocab_size) is
// an InvalidArgument error naming the position.
absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids, int vocab_size);

// The bytes of one id (empty for special ids and out-of-range ids).
std::string TokenBytes(int32_t id);

bool IsSpecialToken(int32_t id);

}  // namespace attnserve::model
