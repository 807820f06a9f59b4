#include "server/grammar/matcher.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace attnserve::grammar {
namespace {

using Kind = Grammar::Element::Kind;
using Stack = std::vector<int32_t>;

// Pushes onto `out` every stack `stack` becomes once its top is a byte set (or it is
// empty): rule references are entered (each alternative a stack of its own), ends of
// alternatives popped. Left recursion is refused at Build, so this ends.
void Expand(const Grammar& g, Stack stack, std::vector<Stack>& out) {
  const auto& el = g.elements();
  while (!stack.empty()) {
    const int32_t p = stack.back();
    const Grammar::Element& e = el[size_t(p)];
    if (e.kind == Kind::kBytes) break;
    stack.pop_back();
    if (e.kind == Kind::kEnd) continue;
    // A reference: come back after it, unless the alternative ends there (a tail call).
    if (el[size_t(p) + 1].kind != Kind::kEnd) stack.push_back(p + 1);
    const std::vector<int32_t>& alts = g.alternatives(e.index);
    for (size_t i = 0; i + 1 < alts.size(); ++i) {
      Stack copy = stack;
      copy.push_back(alts[i]);
      Expand(g, std::move(copy), out);
    }
    stack.push_back(alts.back());
  }
  out.push_back(std::move(stack));
}

// `stacks` as a StackSet: sorted, distinct. False past kMaxStacks.
bool Canonical(std::vector<Stack>& stacks, StackSet& to) {
  to.data.clear();
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
  if (stacks.size() > size_t(kMaxStacks)) return false;
  for (const Stack& s : stacks) {
    to.data.push_back(int32_t(s.size()));
    to.data.insert(to.data.end(), s.begin(), s.end());
  }
  return true;
}

}  // namespace

Matcher::Matcher(std::shared_ptr<const Grammar> grammar) : grammar_(std::move(grammar)) {
  std::vector<Stack> stacks;
  for (int32_t alt : grammar_->alternatives(grammar_->root())) {
    Expand(*grammar_, Stack{alt}, stacks);
  }
  Canonical(stacks, state_);
}

bool Matcher::Advance(const Grammar& g, const StackSet& from, uint8_t b, StackSet& to) {
  thread_local std::vector<Stack> stacks;
  stacks.clear();
  const auto& el = g.elements();
  const auto& sets = g.byte_sets();
  for (size_t i = 0; i < from.data.size();) {
    const size_t len = size_t(from.data[i]);
    const int32_t* s = from.data.data() + i + 1;
    i += 1 + len;
    if (len == 0) continue;  // complete: nothing may follow
    const int32_t top = s[len - 1];
    if (!sets[size_t(el[size_t(top)].index)].test(b)) continue;
    Stack next(s, s + len);
    next.back() = top + 1;
    Expand(g, std::move(next), stacks);
  }
  if (stacks.empty() || !Canonical(stacks, to)) {
    to.data.clear();
    return false;
  }
  return true;
}

absl::Status Matcher::Accept(std::string_view bytes) {
  StackSet cur = state_, next;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (!Advance(*grammar_, cur, uint8_t(bytes[i]), next)) {
      return absl::InvalidArgumentError(
          absl::StrCat("the grammar refuses byte ", i, " (0x",
                       absl::Hex(uint8_t(bytes[i]), absl::kZeroPad2), ") of the text"));
    }
    std::swap(cur, next);
  }
  state_ = std::move(cur);
  return absl::OkStatus();
}

bool Matcher::Accepts(std::string_view bytes) const {
  StackSet cur = state_, next;
  for (char c : bytes) {
    if (!Advance(*grammar_, cur, uint8_t(c), next)) return false;
    std::swap(cur, next);
  }
  return true;
}

bool Matcher::CanEnd() const {
  for (size_t i = 0; i < state_.data.size(); i += 1 + size_t(state_.data[i])) {
    if (state_.data[i] == 0) return true;
  }
  return false;
}

bool Matcher::MustEnd() const { return state_.data.size() == 1 && state_.data[0] == 0; }

}  // namespace attnserve::grammar
