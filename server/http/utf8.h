// Whole UTF-8 characters out of a byte stream: tokens carry bytes, and a character may
// span tokens (a byte-level model emits one byte per token), but every JSON string the
// HTTP front writes must be valid UTF-8.
#pragma once

#include <string>

namespace attnserve::http {

// Appends `bytes` to `*pending` and returns its longest prefix of whole characters,
// leaving in `*pending` only the start of a character that later bytes may complete.
// Bytes that cannot be (or start) a valid UTF-8 sequence become U+FFFD, one per byte.
// With `final`, an incomplete character at the end becomes U+FFFD too and `*pending`
// is left empty.
std::string TakeWholeCharacters(std::string* pending, const std::string& bytes, bool final);

// `bytes` as valid UTF-8: TakeWholeCharacters of them alone, final.
std::string ValidUtf8(const std::string& bytes);

}  // namespace attnserve::http
