#include "server/grammar/constraint.h"

#include <algorithm>
#include <limits>
#include <queue>
#include <set>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace attnserve::grammar {

absl::Status DryRun(const Grammar& grammar) {
  auto shared = std::shared_ptr<const Grammar>(&grammar, [](const Grammar*) {});
  const Matcher start(shared);
  if (!start.start_status().ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the grammar's start needs more than ", GrammarBudget::kByteWork,
                     " steps or ", GrammarBudget::kMaxStacks, " parse stacks"));
  }
  struct Seen {
    int64_t stacks;
    std::string text;  // the bytes that reach the state (for the error)
    StackSet state;
    bool operator<(const Seen& o) const { return stacks < o.stacks; }
  };
  std::priority_queue<Seen> frontier;
  std::set<std::vector<int32_t>> seen = {start.state().data};
  frontier.push({start.state().size(), "", start.state()});
  Work total(kDryRunWork);
  StackSet next;
  for (int expanded = 0; !frontier.empty() && expanded < kDryRunStates; ++expanded) {
    const Seen at = frontier.top();
    frontier.pop();
    // The bytes some stack's top allows.
    ByteSet allowed;
    for (size_t i = 0; i < at.state.data.size(); i += 1 + size_t(at.state.data[i])) {
      const size_t len = size_t(at.state.data[i]);
      if (len == 0) continue;
      const int32_t top = at.state.data[i + len];
      allowed |= grammar.byte_sets()[size_t(grammar.elements()[size_t(top)].index)];
    }
    for (int b = 0; b < 256; ++b) {
      if (!allowed.test(size_t(b))) continue;
      Work byte(GrammarBudget::kByteWork);
      const bool ok = Matcher::Advance(grammar, at.state, uint8_t(b), next, &byte);
      if (byte.exhausted()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the grammar needs more than ", GrammarBudget::kByteWork, " steps or ",
            GrammarBudget::kMaxStacks, " parse stacks for one byte after the text \"",
            absl::CHexEscape(at.text + char(b)), "\""));
      }
      if (!total.Spend(byte.spent())) return absl::OkStatus();  // as far as it may look
      if (ok && seen.insert(next.data).second) {
        frontier.push({next.size(), at.text + char(b), next});
      }
    }
  }
  return absl::OkStatus();
}

namespace {

// A step whose grammar work ran out: the turn cannot go on under this grammar (as when
// no token continues it), FAILED_PRECONDITION, which no client should retry as is.
absl::Status OverBudget(const Work& work) {
  return absl::FailedPreconditionError(absl::StrCat(
      "the answer's grammar needs more work at this point than a sampling step allows (",
      work.limit(), " steps; an ambiguous schema: the same text parses too many ways)"));
}

}  // namespace

ConstraintState::ConstraintState(Constraint constraint)
    : constraint_(std::move(constraint)) {
  if (constraint_.trigger.empty()) matcher_.emplace(constraint_.grammar);
}

absl::Status ConstraintState::ApplyMask(
    float* logits, int64_t vocab, const Vocabulary& vocabulary,
    const std::function<std::string(int32_t)>* at_start_bytes) {
  constexpr float kRefused = -std::numeric_limits<float>::infinity();
  Work work;  // the whole step's grammar work: GrammarBudget::kStepWork
  if (!matcher_) {
    // Free text, but a token that completes the trigger must go on as the grammar does:
    // only ids holding the trigger's last byte can, and the text from the trigger on
    // (the trigger, then the rest of the token) must be a start of the grammar.
    if (!start_) start_.emplace(constraint_.grammar);
    for (int32_t id : vocabulary.IdsWithByte(uint8_t(constraint_.trigger.back()))) {
      if (id >= vocab) continue;
      const std::string text = tail_ + vocabulary.bytes(id);
      const size_t at = text.find(constraint_.trigger);
      if (at != std::string::npos && !start_->Accepts(std::string_view(text).substr(at), &work)) {
        if (work.exhausted()) return OverBudget(work);
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
        allowed = !bytes.empty() && matcher_->Accepts(bytes, &work);
        if (work.exhausted()) return OverBudget(work);
      }
      if (!allowed) logits[id] = kRefused;
      any = any || allowed;
    }
  } else {
    absl::StatusOr<std::shared_ptr<const TokenMask>> masked = vocabulary.Mask(*matcher_, work);
    if (!masked.ok()) return OverBudget(work);
    const TokenMask& mask = **masked;
    const int64_t known = std::min<int64_t>(vocab, vocabulary.size());
    for (int64_t id = 0; id < known; ++id) {
      if (MaskAllows(mask, int32_t(id))) {
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
    Work work;
    if (absl::Status s = matcher_->Accept(from, &work); !s.ok()) {
      return absl::InternalError(absl::StrCat("the answer opened a constrained part (",
                                              constraint_.trigger, ") but ", s.message()));
    }
    return absl::OkStatus();
  }
  Work work;
  if (absl::Status s = matcher_->Accept(bytes, &work); !s.ok()) {
    if (absl::IsResourceExhausted(s)) return OverBudget(work);
    return absl::InternalError(absl::StrCat("constrained decoding: ", s.message()));
  }
  return absl::OkStatus();
}

bool ConstraintState::MustEnd() const { return matcher_ && matcher_->MustEnd(); }

bool ConstraintState::CanEnd() const { return !matcher_ || matcher_->CanEnd(); }

}  // namespace attnserve::grammar
