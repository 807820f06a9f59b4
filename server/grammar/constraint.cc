#include "server/grammar/constraint.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"

namespace attnserve::grammar {

ConstraintState::ConstraintState(Constraint constraint)
    : constraint_(std::move(constraint)) {
  if (constraint_.trigger.empty()) matcher_.emplace(constraint_.grammar);
}

absl::Status ConstraintState::ApplyMask(
    float* logits, int64_t vocab, const Vocabulary& vocabulary,
    const std::function<std::string(int32_t)>* at_start_bytes) {
  constexpr float kRefused = -std::numeric_limits<float>::infinity();
  if (!matcher_) {
    // Free text, but a token that completes the trigger must go on as the grammar does:
    // only ids holding the trigger's last byte can, and the text from the trigger on
    // (the trigger, then the rest of the token) must be a start of the grammar.
    if (!start_) start_.emplace(constraint_.grammar);
    for (int32_t id : vocabulary.IdsWithByte(uint8_t(constraint_.trigger.back()))) {
      if (id >= vocab) continue;
      const std::string text = tail_ + vocabulary.bytes(id);
      const size_t at = text.find(constraint_.trigger);
      if (at != std::string::npos && !start_->Accepts(std::string_view(text).substr(at))) {
        logits[id] = kRefused;
      }
    }
    return absl::OkStatus();
  }
  const auto& eos = vocabulary.eos_ids();
  bool any = false;
  if (at_start_bytes != nullptr) {  // the text's first bytes: id by id
    const bool can_end = matcher_->CanEnd();
    for (int32_t id = 0; id < int32_t(vocab); ++id) {
      bool allowed;
      if (std::find(eos.begin(), eos.end(), id) != eos.end()) {
        allowed = can_end;
      } else {
        const std::string bytes = id < vocabulary.size() ? (*at_start_bytes)(id) : "";
        allowed = !bytes.empty() && matcher_->Accepts(bytes);
      }
      if (!allowed) logits[id] = kRefused;
      any = any || allowed;
    }
  } else {
    const std::shared_ptr<const TokenMask> mask = vocabulary.Mask(*matcher_);
    const int64_t known = std::min<int64_t>(vocab, vocabulary.size());
    for (int64_t id = 0; id < known; ++id) {
      if (MaskAllows(*mask, int32_t(id))) {
        any = true;
      } else {
        logits[id] = kRefused;
      }
    }
    for (int64_t id = known; id < vocab; ++id) logits[id] = kRefused;
  }
  if (!any) {
    return absl::FailedPreconditionError(
        "no token of the model's vocabulary continues the answer's grammar here");
  }
  return absl::OkStatus();
}

absl::Status ConstraintState::Advance(std::string_view bytes) {
  if (!matcher_) {
    // Free text until the trigger: keep just enough of it to find one that spans tokens.
    tail_.append(bytes);
    const size_t at = tail_.find(constraint_.trigger);
    if (at == std::string::npos) {
      const size_t keep = constraint_.trigger.size() - 1;
      if (tail_.size() > keep) tail_.erase(0, tail_.size() - keep);
      return absl::OkStatus();
    }
    matcher_.emplace(constraint_.grammar);
    const std::string from = tail_.substr(at);
    tail_.clear();
    if (absl::Status s = matcher_->Accept(from); !s.ok()) {
      return absl::InternalError(absl::StrCat("the answer opened a constrained part (",
                                              constraint_.trigger, ") but ", s.message()));
    }
    return absl::OkStatus();
  }
  if (absl::Status s = matcher_->Accept(bytes); !s.ok()) {
    return absl::InternalError(absl::StrCat("constrained decoding: ", s.message()));
  }
  return absl::OkStatus();
}

bool ConstraintState::MustEnd() const { return matcher_ && matcher_->MustEnd(); }

bool ConstraintState::CanEnd() const { return !matcher_ || matcher_->CanEnd(); }

}  // namespace attnserve::grammar
