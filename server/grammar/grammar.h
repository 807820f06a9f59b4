// Grammars over bytes (server/DESIGN.md §12): a context-free grammar whose terminals are
// byte sets, built by GrammarBuilder (the JSON Schema compiler, json_schema.h, and the
// tool-call envelopes build through it), checked and flattened into an immutable Grammar
// that any number of turns match against (matcher.h). Torch-free, tokenizer-free: a leaf.
//
// A rule is a list of alternatives; an alternative a sequence of symbols, each a byte set
// (one byte of the text in the set) or a reference to a rule. An empty alternative
// matches nothing (epsilon). Repetition is written as recursion (`r ::= x r | ε`); a
// right-recursive rule costs no stack depth (matcher.h). Left recursion is refused.
#pragma once

#include <bitset>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace attnserve::grammar {

using ByteSet = std::bitset<256>;

struct Symbol {
  enum class Kind : uint8_t { kBytes, kRule };
  Kind kind = Kind::kBytes;
  ByteSet bytes;  // kBytes
  int rule = -1;  // kRule

  static Symbol Bytes(const ByteSet& set) { return Symbol{Kind::kBytes, set, -1}; }
  static Symbol Byte(uint8_t b) {
    ByteSet set;
    set.set(b);
    return Bytes(set);
  }
  // [lo, hi], both included.
  static Symbol Range(uint8_t lo, uint8_t hi);
  static Symbol Ref(int rule) { return Symbol{Kind::kRule, {}, rule}; }
};

using Sequence = std::vector<Symbol>;

// The bytes of `text`, one symbol each.
Sequence Literal(std::string_view text);
// `a` then `b`.
Sequence Concat(Sequence a, const Sequence& b);

// What a grammar may hold (limits say no instead of falling over: a schema past them is
// refused with the limit's name).
struct GrammarLimits {
  int max_rules = 20000;
  int max_symbols = 400000;  // over every alternative
};

class Grammar;

class GrammarBuilder {
 public:
  // A new rule with no alternatives yet; `name` shows in errors and Describe().
  int NewRule(std::string name);
  void AddAlternative(int rule, Sequence sequence);
  // A rule of one alternative.
  int RuleOf(std::string name, Sequence sequence) {
    const int r = NewRule(std::move(name));
    AddAlternative(r, std::move(sequence));
    return r;
  }
  // Helpers building rules for repetition of `item` (a sequence):
  //   Star: item*       Plus: item+       Optional: item?
  //   Repeat: item{min,max} (max < 0: unbounded), separated by `separator` if given.
  int Star(std::string name, const Sequence& item);
  int Plus(std::string name, const Sequence& item);
  int Optional(std::string name, const Sequence& item);
  int Repeat(std::string name, const Sequence& item, int min, int max,
             const Sequence& separator = {});

  int rule_count() const { return int(rules_.size()); }
  const std::string& rule_name(int rule) const { return rules_[rule].name; }

  // The grammar whose text is what `root` matches. INVALID_ARGUMENT for a rule with no
  // alternatives, a reference to no rule, left recursion (naming the rule), or a grammar
  // past `limits` (naming the limit).
  absl::StatusOr<std::shared_ptr<const Grammar>> Build(int root,
                                                       const GrammarLimits& limits = {}) const;

 private:
  struct Rule {
    std::string name;
    std::vector<Sequence> alternatives;
  };
  std::vector<Rule> rules_;
};

// A checked grammar, flattened: every alternative of every rule laid out in one array of
// elements ending with kEnd, so that a position (an index) names "what comes next".
class Grammar {
 public:
  struct Element {
    enum class Kind : uint8_t { kBytes, kRule, kEnd };
    Kind kind;
    int32_t index;  // kBytes: into byte_sets(); kRule: the rule
  };

  const std::vector<Element>& elements() const { return elements_; }
  const std::vector<ByteSet>& byte_sets() const { return byte_sets_; }
  // The first position of each alternative of `rule`.
  const std::vector<int32_t>& alternatives(int rule) const { return alternatives_[rule]; }
  int root() const { return root_; }
  const std::string& rule_name(int rule) const { return names_[rule]; }
  int rule_count() const { return int(names_.size()); }
  // A readable form, one rule a line (tests, errors).
  std::string Describe() const;

  // Per-state token masks, shared by every turn on this grammar (vocabulary.h).
  class MaskCache;
  MaskCache& mask_cache() const { return *mask_cache_; }

  ~Grammar();

 private:
  friend class GrammarBuilder;
  Grammar();
  std::vector<Element> elements_;
  std::vector<ByteSet> byte_sets_;
  std::vector<std::vector<int32_t>> alternatives_;
  std::vector<std::string> names_;
  int root_ = 0;
  std::unique_ptr<MaskCache> mask_cache_;
};

}  // namespace attnserve::grammar
