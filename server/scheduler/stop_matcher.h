// Stop strings over a turn's streamed bytes. A token may carry several bytes (a
// SentencePiece piece) or part of a UTF-8 character (a byte or byte-fallback piece), so a
// stop string can begin in an earlier token and end anywhere inside the latest one; the
// matcher keeps just enough of the stream's tail to see it. Torch-free; one per turn,
// used by the engine thread only.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

namespace attnserve::scheduler {

class StopMatcher {
 public:
  // Empty strings never match.
  explicit StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
    for (const std::string& s : stops_) longest_ = std::max(longest_, s.size());
  }

  // Appends one token's bytes to the stream; true when a stop string ends within them
  // (the stream so far contains a stop string that it did not contain before).
  bool Add(std::string_view bytes) {
    if (longest_ == 0 || bytes.empty()) return false;
    const size_t before = tail_.size();
    tail_.append(bytes);
    bool matched = false;
    for (const std::string& stop : stops_) {
      if (stop.empty() || stop.size() > tail_.size()) continue;
      // Occurrences that end after `before`: they start at or after before + 1 - size.
      const size_t from = before + 1 > stop.size() ? before + 1 - stop.size() : 0;
      if (tail_.find(stop, from) != std::string::npos) matched = true;
    }
    if (tail_.size() > longest_) tail_.erase(0, tail_.size() - longest_);
    return matched;
  }

 private:
  std::vector<std::string> stops_;
  size_t longest_ = 0;
  std::string tail_;  // the stream's last bytes, at most longest_
};

}  // namespace attnserve::scheduler
