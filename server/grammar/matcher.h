// Where a text stands in a grammar: the set of parse stacks (a pushdown automaton over
// bytes, run on every parse at once, as llama.cpp's GBNF sampler does). A stack lists
// positions in Grammar::elements(), bottom first: the top is the byte set the next byte
// must be in, each entry under it where to go on when the rule above it ends. The empty
// stack means the text so far is a whole sentence of the grammar.
//
// A reference followed by the end of its alternative replaces its frame instead of
// pushing (a tail call), so right recursion (`r ::= x r | ε`) runs in constant depth.
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
};

// Most stacks a set holds: an ambiguous grammar past it fails the match (Accept returns
// RESOURCE_EXHAUSTED) instead of growing without bound.
inline constexpr int kMaxStacks = 1024;

class Matcher {
 public:
  // At the start of `grammar` (which must outlive the matcher).
  explicit Matcher(std::shared_ptr<const Grammar> grammar);

  // Consumes `bytes`. INVALID_ARGUMENT (and the state unchanged) when the grammar refuses
  // them, naming the offset of the first refused byte.
  absl::Status Accept(std::string_view bytes);
  // Whether Accept(bytes) would succeed; the state unchanged.
  bool Accepts(std::string_view bytes) const;
  // The text so far is a sentence of the grammar (end-of-sequence may come now).
  bool CanEnd() const;
  // The text so far is a sentence and nothing may follow it: the answer is over.
  bool MustEnd() const;

  const StackSet& state() const { return state_; }
  const Grammar& grammar() const { return *grammar_; }
  const std::shared_ptr<const Grammar>& shared_grammar() const { return grammar_; }

  // The stacks after `from` consumes byte `b`, into `to` (cleared first). False when
  // none survives, or more than kMaxStacks would (`to` is then empty too).
  static bool Advance(const Grammar& grammar, const StackSet& from, uint8_t b, StackSet& to);

 private:
  std::shared_ptr<const Grammar> grammar_;
  StackSet state_;
};

}  // namespace attnserve::grammar
