#include "server/http/utf8.h"

#include <cstdint>

namespace attnserve::http {
namespace {

constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD

// The length of the sequence lead byte `b` starts, 0 if it starts none.
int SequenceLength(uint8_t b) {
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b >= 0xE0 && b <= 0xEF) return 3;
  if (b >= 0xF0 && b <= 0xF4) return 4;
  return 0;
}

// Whether `b` may follow `lead` as the sequence's byte number `index` (1-based), which
// excludes overlong forms, surrogates and code points above U+10FFFF.
bool ValidContinuation(uint8_t lead, int index, uint8_t b) {
  if (index == 1) {
    if (lead == 0xE0) return b >= 0xA0 && b <= 0xBF;
    if (lead == 0xED) return b >= 0x80 && b <= 0x9F;
    if (lead == 0xF0) return b >= 0x90 && b <= 0xBF;
    if (lead == 0xF4) return b >= 0x80 && b <= 0x8F;
  }
  return b >= 0x80 && b <= 0xBF;
}

}  // namespace

std::string TakeWholeCharacters(std::string* pending, const std::string& bytes, bool final) {
  pending->append(bytes);
  const std::string& in = *pending;
  std::string out;
  size_t i = 0;
  while (i < in.size()) {
    const uint8_t lead = uint8_t(in[i]);
    const int length = SequenceLength(lead);
    if (length == 0) {
      out += kReplacement;
      ++i;
      continue;
    }
    int have = 1;
    while (have < length && i + have < in.size() &&
           ValidContinuation(lead, have, uint8_t(in[i + have]))) {
      ++have;
    }
    if (have == length) {
      out.append(in, i, length);
      i += length;
    } else if (i + have == in.size() && !final) {
      break;  // a character later bytes may complete
    } else {
      out += kReplacement;  // the lead byte; what followed is looked at again
      ++i;
    }
  }
  pending->erase(0, i);
  return out;
}

std::string ValidUtf8(const std::string& bytes) {
  std::string pending;
  return TakeWholeCharacters(&pending, bytes, /*final=*/true);
}

}  // namespace attnserve::http
