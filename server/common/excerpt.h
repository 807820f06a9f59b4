// Bounded echoes of client input in error messages.
#pragma once

#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"

namespace attnserve {

// `value` as is when short, else its first 40 bytes and its length, so an error message
// never echoes unbounded input back.
inline std::string Excerpt(std::string_view value) {
  constexpr size_t kShown = 40;
  if (value.size() <= kShown) return std::string(value);
  return absl::StrCat(std::string(value.substr(0, kShown)), "... (", value.size(), " bytes)");
}

}  // namespace attnserve
