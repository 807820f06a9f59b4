// Where a text stands in a grammar: the set of parse stacks (a pushdown automaton over
// bytes, run on every parse at once, as llama.cpp's GBNF sampler does). A stack lists
// positions in Grammar::elements(), bottom first: the top is the byte set the next byte
// must be in, each entry under it where to go on when the rule above it ends. The empty
// stack means the text so far is a whole sentence of the grammar.
//
// A reference followed by the end of its alternative replaces its frame instead of
// pushing (a tail call), so right recursion (`r ::= x r | ε`) runs in constant depth.
//
// Bounded work (server/DESIGN.md §12). Expanding a byte merges stacks as it goes: a
// configuration (a whole stack) is entered once per byte, however many alternatives
// lead to it, so `(?:|){N}` or N nested anyOf of two equal $refs cost O(N) per byte, not
// 2^N. What is left is counted in a Work budget (one unit per stack entry visited or
// written) and refused with RESOURCE_EXHAUSTED when spent, never run past it: a byte's
// expansion, a token mask, a whole sampling step each have a limit (GrammarBudget).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "server/grammar/grammar.h"

namespace attnserve::grammar {

// A set of stacks, flat: each stack as its length then its positions (bottom first),
// stacks sorted and distinct, so that two equal sets have equal `data`.
struct StackSet {
  std::vector<int32_t> data;
  bool empty() const { return data.empty(); }
  bool operator==(const StackSet& o) const { return data == o.data; }
  // How many stacks the set holds.
  int64_t size() const;
};

// The limits grammar work runs under. One unit of work is one stack entry visited or
// written while expanding: 1-8 ns on these machines once the buffers are warm
// (tests/bench/README.md, "Bounded grammar work"), so kStepWork is 8-67 ms of a step at
// most, against the 50 ms a step may spend on its grammar (the slow end is an ambiguous
// grammar's thousands of stacks). A mask's walk meets each state once (vocabulary.h), so
// a mask inside a JSON string over a 151k vocabulary (333k trie nodes) spends a unit per
// node and a few thousand for its states: no MaskBench sample walk came near the budget.
struct GrammarBudget {
  // Distinct stacks one state may hold (each costs its length in memory and in every
  // later byte's work).
  static constexpr int64_t kMaxStacks = 16384;
  // Work to consume one byte (Matcher::Accept, each step of a mask's walk).
  static constexpr int64_t kByteWork = int64_t(1) << 20;
  // Work for one token mask, or for one sampling step's grammar (mask, checks, advance).
  static constexpr int64_t kStepWork = int64_t(1) << 23;
};

// A work budget, spent by the matcher and the mask walk. Not thread-safe: one per call.
class Work {
 public:
  explicit Work(int64_t limit = GrammarBudget::kStepWork) : limit_(limit), left_(limit) {}
  // Takes `n` units; false once the budget is spent (and from then on).
  bool Spend(int64_t n) {
    left_ -= n;
    return left_ >= 0;
  }
  bool exhausted() const { return left_ < 0; }
  int64_t spent() const { return limit_ - left_; }
  int64_t limit() const { return limit_; }
  // RESOURCE_EXHAUSTED naming what ran out of work (`what`: "a token mask", ...).
  absl::Status Exhausted(const std::string& what) const;

 private:
  int64_t limit_;
  int64_t left_;
};

class Matcher {
 public:
  // At the start of `grammar` (which must outlive the matcher). The start's expansion is
  // bounded like a byte's: when it runs out of work the matcher has no stacks and
  // start_status() says why.
  explicit Matcher(std::shared_ptr<const Grammar> grammar);

  // Consumes `bytes`. INVALID_ARGUMENT (and the state unchanged) when the grammar refuses
  // them, naming the offset of the first refused byte; RESOURCE_EXHAUSTED (unchanged too)
  // when a byte needs more than GrammarBudget::kByteWork or kMaxStacks, or `work` (when
  // given) is spent.
  absl::Status Accept(std::string_view bytes, Work* work = nullptr);
  // Whether Accept(bytes) would succeed; the state unchanged. False too when `work` (or a
  // byte's own budget) runs out: check work->exhausted() to tell the two apart.
  bool Accepts(std::string_view bytes, Work* work = nullptr) const;
  // The text so far is a sentence of the grammar (end-of-sequence may come now).
  bool CanEnd() const;
  // The text so far is a sentence and nothing may follow it: the answer is over.
  bool MustEnd() const;

  const StackSet& state() const { return state_; }
  const Grammar& grammar() const { return *grammar_; }
  const std::shared_ptr<const Grammar>& shared_grammar() const { return grammar_; }
  // OK, or why the start could not be expanded within its budget.
  const absl::Status& start_status() const { return start_status_; }

  // The stacks after `from` consumes byte `b`, into `to` (cleared first). False when
  // none survives, or when the work runs out: a byte's own kByteWork, kMaxStacks, or
  // `work` when given (then work->exhausted(); without `work` the byte's own budget
  // only, and a spent one looks like a refusal). `to` is empty whenever false.
  static bool Advance(const Grammar& grammar, const StackSet& from, uint8_t b, StackSet& to,
                      Work* work = nullptr);

 private:
  std::shared_ptr<const Grammar> grammar_;
  StackSet state_;
  absl::Status start_status_;
};

}  // namespace attnserve::grammar
