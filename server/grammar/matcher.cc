#include "server/grammar/matcher.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"

namespace attnserve::grammar {
namespace {

using Kind = Grammar::Element::Kind;

// One byte's expansion: the stacks written so far (flat, as StackSet), and every
// configuration entered so far, so that each is entered once however many paths reach
// it. The configurations live in `arena`, keyed by (offset, length) with their hash.
class Expansion {
 public:
  Expansion(const Grammar& g, Work& work, int64_t byte_limit)
      : g_(g), work_(work), stop_at_(work.spent() + byte_limit) {
    arena_.clear();
    seen_.Clear();
    out_.clear();
  }

  // Appends every stack `cur` becomes once its top is a byte set (or it is empty): rule
  // references entered (each alternative a stack of its own), ends of alternatives
  // popped. `cur` is restored before returning. False once the work runs out. Left
  // recursion is refused at Build and each configuration is entered once, so this ends.
  bool Expand(std::vector<int32_t>& cur) {
    if (!Charge(int64_t(cur.size()) + 1)) return false;
    if (!Enter(cur)) return true;  // reached before by another path
    if (!cur.empty()) {
      const int32_t p = cur.back();
      const Grammar::Element& e = g_.elements()[size_t(p)];
      if (e.kind != Kind::kBytes) {
        bool ok = true;
        cur.pop_back();
        if (e.kind == Kind::kEnd) {
          ok = Expand(cur);
        } else {
          // A reference: come back after it, unless the alternative ends there (a tail
          // call: right recursion costs no depth).
          const bool returns = g_.elements()[size_t(p) + 1].kind != Kind::kEnd;
          if (returns) cur.push_back(p + 1);
          for (int32_t alt : g_.alternatives(e.index)) {
            cur.push_back(alt);
            ok = Expand(cur);
            cur.pop_back();
            if (!ok) break;
          }
          if (returns) cur.pop_back();
        }
        cur.push_back(p);
        return ok;
      }
    }
    if (++stacks_ > GrammarBudget::kMaxStacks) return Fail();
    out_.push_back(int32_t(cur.size()));
    out_.insert(out_.end(), cur.begin(), cur.end());
    return true;
  }

  // The stacks written, as a StackSet (distinct already). Sets of up to kSortedStacks
  // are sorted, so that a state reached by other paths has the same key in the mask
  // cache; larger ones (rare: an ambiguous grammar) keep the order of their expansion,
  // which costs a cache miss at worst and spares a sort that would cost more than the
  // expansion itself.
  void Into(StackSet& to) const {
    constexpr int64_t kSortedStacks = 256;
    to.data.clear();
    if (stacks_ <= 1 || stacks_ > kSortedStacks) {
      to.data.assign(out_.begin(), out_.end());
      return;
    }
    thread_local std::vector<std::pair<uint32_t, uint32_t>> spans;  // (offset, length)
    spans.clear();
    for (size_t i = 0; i < out_.size(); i += 1 + size_t(out_[i])) {
      spans.emplace_back(uint32_t(i + 1), uint32_t(out_[i]));
    }
    const int32_t* base = out_.data();
    std::sort(spans.begin(), spans.end(), [base](const auto& a, const auto& b) {
      return std::lexicographical_compare(base + a.first, base + a.first + a.second,
                                          base + b.first, base + b.first + b.second);
    });
    for (const auto& [offset, length] : spans) {
      to.data.push_back(int32_t(length));
      to.data.insert(to.data.end(), base + offset, base + offset + length);
    }
  }

  bool produced() const { return stacks_ > 0; }

 private:
  // An open-addressing set of configurations, cleared by the slots it used (a byte's
  // expansion is usually a few entries; a mask walk runs hundreds of thousands).
  struct Key {
    uint32_t offset = 0, length = 0;  // in arena_; length + 1, 0 for an empty slot
    uint64_t hash = 0;
  };
  struct Seen {
    std::vector<Key> slots = std::vector<Key>(64);
    std::vector<uint32_t> used;
    void Clear() {
      for (uint32_t i : used) slots[i] = Key{};
      used.clear();
    }
  };

  bool Charge(int64_t n) {
    if (!work_.Spend(n) || work_.spent() > stop_at_) return Fail();
    return true;
  }
  bool Fail() {
    if (!work_.exhausted()) work_.Spend(work_.limit());  // the caller sees it spent
    return false;
  }

  // Records `cur`; false when it was recorded before.
  bool Enter(const std::vector<int32_t>& cur) {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ cur.size();
    for (int32_t x : cur) h = (h ^ uint64_t(uint32_t(x))) * 0x100000001b3ull + (h >> 29);
    if (2 * (seen_.used.size() + 1) > seen_.slots.size()) Grow();
    const size_t mask = seen_.slots.size() - 1;
    for (size_t i = size_t(h) & mask;; i = (i + 1) & mask) {
      Key& k = seen_.slots[i];
      if (k.length == 0) {
        k = Key{uint32_t(arena_.size()), uint32_t(cur.size()) + 1, h};
        seen_.used.push_back(uint32_t(i));
        arena_.insert(arena_.end(), cur.begin(), cur.end());
        return true;
      }
      if (k.hash == h && k.length == cur.size() + 1 &&
          std::equal(cur.begin(), cur.end(), arena_.begin() + k.offset)) {
        return false;
      }
    }
  }
  void Grow() {
    std::vector<Key> old;
    old.reserve(seen_.used.size());
    for (uint32_t i : seen_.used) old.push_back(seen_.slots[i]);
    seen_.Clear();
    seen_.slots.assign(seen_.slots.size() * 2, Key{});
    const size_t mask = seen_.slots.size() - 1;
    for (const Key& k : old) {
      size_t i = size_t(k.hash) & mask;
      while (seen_.slots[i].length != 0) i = (i + 1) & mask;
      seen_.slots[i] = k;
      seen_.used.push_back(uint32_t(i));
    }
  }

  const Grammar& g_;
  Work& work_;
  int64_t stop_at_;
  int64_t stacks_ = 0;
  // Reused across bytes by each thread (the engine's, the HTTP threads' dry runs).
  static thread_local std::vector<int32_t> arena_;
  static thread_local std::vector<int32_t> out_;
  static thread_local Seen seen_;
};

thread_local std::vector<int32_t> Expansion::arena_;
thread_local std::vector<int32_t> Expansion::out_;
thread_local Expansion::Seen Expansion::seen_;

}  // namespace

int64_t StackSet::size() const {
  int64_t n = 0;
  for (size_t i = 0; i < data.size(); i += 1 + size_t(data[i])) ++n;
  return n;
}

absl::Status Work::Exhausted(const std::string& what) const {
  return absl::ResourceExhaustedError(absl::StrCat(
      "the grammar needs more work than ", what, " is allowed (a limit of ", limit_,
      " steps per operation, or ", GrammarBudget::kByteWork, " per byte and ",
      GrammarBudget::kMaxStacks, " parse stacks per state)"));
}

Matcher::Matcher(std::shared_ptr<const Grammar> grammar) : grammar_(std::move(grammar)) {
  Work work(GrammarBudget::kByteWork);
  Expansion x(*grammar_, work, GrammarBudget::kByteWork);
  std::vector<int32_t> cur;
  for (int32_t alt : grammar_->alternatives(grammar_->root())) {
    cur.assign(1, alt);
    if (!x.Expand(cur)) {
      start_status_ = work.Exhausted("the grammar's start");
      return;
    }
  }
  x.Into(state_);
}

bool Matcher::Advance(const Grammar& g, const StackSet& from, uint8_t b, StackSet& to,
                      Work* work) {
  Work own(GrammarBudget::kByteWork);
  Work& w = work != nullptr ? *work : own;
  Expansion x(g, w, GrammarBudget::kByteWork);
  thread_local std::vector<int32_t> cur;
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
    if (!x.Expand(cur)) {
      to.data.clear();
      return false;
    }
  }
  if (!x.produced()) {
    to.data.clear();
    return false;
  }
  x.Into(to);
  return w.Spend(int64_t(to.data.size())) || (to.data.clear(), false);
}

absl::Status Matcher::Accept(std::string_view bytes, Work* work) {
  Work own(std::numeric_limits<int64_t>::max() / 2);
  Work& w = work != nullptr ? *work : own;
  if (!start_status_.ok()) return start_status_;
  StackSet cur = state_, next;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (!Advance(*grammar_, cur, uint8_t(bytes[i]), next, &w)) {
      if (w.exhausted()) return w.Exhausted(absl::StrCat("byte ", i, " of the text"));
      return absl::InvalidArgumentError(
          absl::StrCat("the grammar refuses byte ", i, " (0x",
                       absl::Hex(uint8_t(bytes[i]), absl::kZeroPad2), ") of the text"));
    }
    std::swap(cur, next);
  }
  state_ = std::move(cur);
  return absl::OkStatus();
}

bool Matcher::Accepts(std::string_view bytes, Work* work) const {
  if (!start_status_.ok()) return false;
  StackSet cur = state_, next;
  for (char c : bytes) {
    if (!Advance(*grammar_, cur, uint8_t(c), next, work)) return false;
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
