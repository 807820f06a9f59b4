#include "server/grammar/matcher.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace attnserve::grammar {
namespace {

using Kind = Grammar::Element::Kind;

// Appends to `out` (as length, positions) every stack `cur` becomes once its top is a
// byte set (or it is empty): rule references are entered (each alternative a stack of
// its own), ends of alternatives popped. `cur` is restored before returning, so one
// buffer serves the whole walk without allocating. Left recursion is refused at Build,
// so this ends.
void Expand(const Grammar& g, std::vector<int32_t>& cur, std::vector<int32_t>& out) {
  if (!cur.empty()) {
    const int32_t p = cur.back();
    const Grammar::Element& e = g.elements()[size_t(p)];
    if (e.kind != Kind::kBytes) {
      cur.pop_back();
      if (e.kind == Kind::kEnd) {
        Expand(g, cur, out);
      } else {
        // A reference: come back after it, unless the alternative ends there (a tail
        // call: right recursion costs no depth).
        const bool returns = g.elements()[size_t(p) + 1].kind != Kind::kEnd;
        if (returns) cur.push_back(p + 1);
        for (int32_t alt : g.alternatives(e.index)) {
          cur.push_back(alt);
          Expand(g, cur, out);
          cur.pop_back();
        }
        if (returns) cur.pop_back();
      }
      cur.push_back(p);
      return;
    }
  }
  out.push_back(int32_t(cur.size()));
  out.insert(out.end(), cur.begin(), cur.end());
}

// The stacks in `flat` (as Expand writes them) as a StackSet: sorted, distinct. False
// past kMaxStacks.
bool Canonical(const std::vector<int32_t>& flat, StackSet& to) {
  thread_local std::vector<std::pair<uint32_t, uint32_t>> spans;  // (offset, length)
  spans.clear();
  for (size_t i = 0; i < flat.size(); i += 1 + size_t(flat[i])) {
    spans.emplace_back(uint32_t(i + 1), uint32_t(flat[i]));
  }
  to.data.clear();
  if (spans.size() == 1) {
    to.data.assign(flat.begin(), flat.end());
    return true;
  }
  const int32_t* base = flat.data();
  auto less = [base](const auto& a, const auto& b) {
    return std::lexicographical_compare(base + a.first, base + a.first + a.second,
                                        base + b.first, base + b.first + b.second);
  };
  auto same = [base](const auto& a, const auto& b) {
    return a.second == b.second && std::equal(base + a.first, base + a.first + a.second, base + b.first);
  };
  std::sort(spans.begin(), spans.end(), less);
  spans.erase(std::unique(spans.begin(), spans.end(), same), spans.end());
  if (spans.size() > size_t(kMaxStacks)) return false;
  for (const auto& [offset, length] : spans) {
    to.data.push_back(int32_t(length));
    to.data.insert(to.data.end(), base + offset, base + offset + length);
  }
  return true;
}

}  // namespace

Matcher::Matcher(std::shared_ptr<const Grammar> grammar) : grammar_(std::move(grammar)) {
  std::vector<int32_t> cur, flat;
  for (int32_t alt : grammar_->alternatives(grammar_->root())) {
    cur.assign(1, alt);
    Expand(*grammar_, cur, flat);
  }
  Canonical(flat, state_);
}

bool Matcher::Advance(const Grammar& g, const StackSet& from, uint8_t b, StackSet& to) {
  thread_local std::vector<int32_t> cur, flat;
  flat.clear();
  const auto& el = g.elements();
  const auto& sets = g.byte_sets();
  for (size_t i = 0; i < from.data.size();) {
    const size_t len = size_t(from.data[i]);
    const int32_t* s = from.data.data() + i + 1;
    i += 1 + len;
    if (len == 0) continue;  // complete: nothing may follow
    const int32_t top = s[len - 1];
    if (!sets[size_t(el[size_t(top)].index)].test(b)) continue;
    cur.assign(s, s + len);
    cur.back() = top + 1;
    Expand(g, cur, flat);
  }
  if (flat.empty() || !Canonical(flat, to)) {
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
