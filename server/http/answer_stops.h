// OpenAI's `stop` over an answer's bytes as they come. As in the OpenAI API a stop string
// is not part of the answer: the answer ends before the first one, and bytes that may
// begin one are held until they do or do not.
//
// Under a constraint that applies from the answer's first byte (response_format
// json_schema or json_object, tool_choice "required" or a named function) the HTTP front
// refuses `stop` (a stop string would cut the constrained answer). Under tool_choice
// "auto" the answer is free text until a call's opening tag, and calls after it: then
// stop strings end only the free text. An occurrence counts once it lies wholly before
// the tag (bytes that may begin the tag are waited on), and from the tag on nothing is
// matched, so a call is never cut. The scheduler is not given such stop strings: the
// front ends the turn itself (TurnQueue::StopInFreeText).
//
// Torch-free and header-only (like the scheduler's StopMatcher); one per answer, used by
// one thread at a time.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace attnserve::http {

class AnswerStops {
 public:
  // `stops`: the request's stop strings (empty ones never match). `call_opening`: where
  // free text ends ("" for an answer that is free text throughout).
  explicit AnswerStops(std::vector<std::string> stops, std::string call_opening = "");

  // Appends `bytes` to the answer; returns the bytes now known to be part of it, in
  // order (nothing once a stop string matched).
  std::string Pass(std::string_view bytes);
  // The answer is over (it ended otherwise): the bytes still held, up to the first stop
  // string among them (an opening tag that never completed was free text after all).
  std::string Rest();
  // A stop string ended the answer.
  bool stopped() const { return stopped_; }

 private:
  // The answer so far ends here: outputs what precedes `at` in held_ and drops the rest.
  std::string StopAt(size_t at);

  const std::vector<std::string> stops_;
  const std::string call_opening_;
  bool stopped_ = false;
  bool in_call_ = false;  // the opening tag came before any stop string: nothing to match
  std::string held_;      // bytes not yet passed
};

// --- implementation ---

namespace answer_stops_internal {

inline constexpr size_t kNone = std::string::npos;

// Where the longest tail of `text` that is a proper, non-empty prefix of `s` begins, or
// text.size() when none is.
inline size_t TailBeginning(std::string_view text, std::string_view s) {
  if (s.empty()) return text.size();
  for (size_t k = std::min(s.size() - 1, text.size()); k > 0; --k) {
    if (text.substr(text.size() - k) == s.substr(0, k)) return text.size() - k;
  }
  return text.size();
}

}  // namespace answer_stops_internal

inline AnswerStops::AnswerStops(std::vector<std::string> stops, std::string call_opening)
    : stops_(std::move(stops)), call_opening_(std::move(call_opening)) {}

inline std::string AnswerStops::StopAt(size_t at) {
  std::string out = held_.substr(0, at);
  held_.clear();
  stopped_ = true;
  return out;
}

inline std::string AnswerStops::Pass(std::string_view bytes) {
  using answer_stops_internal::kNone;
  using answer_stops_internal::TailBeginning;
  if (stopped_) return "";
  if (in_call_ || stops_.empty()) return std::string(bytes);
  held_.append(bytes);
  // The free text ends at the opening tag, or may end where a tail begins it.
  const size_t tag = call_opening_.empty() ? kNone : held_.find(call_opening_);
  const size_t free_end = tag != kNone              ? tag
                          : call_opening_.empty()   ? held_.size()
                                                    : TailBeginning(held_, call_opening_);
  size_t first = kNone;      // the earliest stop string wholly in the free text
  size_t undecided = kNone;  // the earliest that runs into what may begin the tag
  size_t hold = free_end;    // held_ from here on may yet be cut or begin the tag
  for (const std::string& s : stops_) {
    if (s.empty()) continue;
    const size_t at = held_.find(s);
    if (at == kNone) {
      hold = std::min(hold, TailBeginning(held_, s));
    } else if (at + s.size() <= free_end) {
      first = std::min(first, at);
    } else if (tag == kNone) {
      undecided = std::min(undecided, at);
    }
    // Else it runs into the opening tag: the call's bytes, which no stop string cuts.
  }
  if (first != kNone && first < undecided) return StopAt(first);
  std::string out;
  if (tag != kNone) {  // the call starts: everything from here on is the answer's
    in_call_ = true;
    out.swap(held_);
    return out;
  }
  hold = std::min(hold, undecided);
  out = held_.substr(0, hold);
  held_.erase(0, hold);
  return out;
}

inline std::string AnswerStops::Rest() {
  using answer_stops_internal::kNone;
  if (stopped_) return "";
  size_t first = kNone;
  for (const std::string& s : stops_) {
    if (!s.empty()) first = std::min(first, held_.find(s));
  }
  if (first != kNone) return StopAt(first);
  std::string out;
  out.swap(held_);
  return out;
}

}  // namespace attnserve::http
