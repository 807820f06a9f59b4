#include "server/model/tokenizer.h"

#include "absl/strings/str_cat.h"

namespace attnserve::model {

std::vector<int32_t> Encode(std::string_view bytes) {
  std::vector<int32_t> ids;
  ids.reserve(bytes.size());
  for (unsigned char b : bytes) ids.push_back(int32_t(b));
  return ids;
}

absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids, int vocab_size) {
  std::string out;
  out.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", id, " at position ", i,
                                                     " is outside [0, ", vocab_size, ")"));
    }
    if (id < 256) out.push_back(char(id));
  }
  return out;
}

std::string TokenBytes(int32_t id) {
  return id >= 0 && id < 256 ? std::string(1, char(id)) : std::string();
}

bool IsSpecialToken(int32_t id) { return id >= 256; }

}  // namespace attnserve::model
