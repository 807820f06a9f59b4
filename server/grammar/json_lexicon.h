// The lexical rules of JSON text that every schema grammar shares (whitespace, strings,
// numbers, any value), sets of Unicode code points as the bytes a JSON string holds them
// in, and values written as their canonical tokens: the building blocks of
// json_schema.cc and schema_pattern.cc. The text they produce is json_schema.h's.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "server/grammar/grammar.h"

namespace attnserve::grammar {

// A set of code points, as sorted, disjoint, non-adjacent ranges [lo, hi]. Add appends,
// and the ranges are sorted and merged once, when next read: a character class of n
// members costs O(n log n) to build, not a sort per member (a 64 KiB class took seconds).
// Not thread-safe, reads included.
class CodePointSet {
 public:
  CodePointSet() = default;
  static CodePointSet Range(char32_t lo, char32_t hi);
  void Add(char32_t lo, char32_t hi);
  void Add(const CodePointSet& other);
  // Every code point U+0000..U+10FFFF not in the set.
  CodePointSet Complement() const;
  bool empty() const { return ranges_.empty(); }
  const std::vector<std::pair<char32_t, char32_t>>& ranges() const {
    Normalize();
    return ranges_;
  }
  bool operator<(const CodePointSet& o) const { return ranges() < o.ranges(); }

 private:
  void Normalize() const;
  mutable std::vector<std::pair<char32_t, char32_t>> ranges_;
  mutable bool normal_ = true;  // ranges_ sorted and merged
};

// The rules of one schema's compilation in `builder`. The shared ones (Ws, String, ...)
// are made once per builder and found again by name, so a tool-call grammar that embeds
// several schemas holds one copy. Counts the rules added since construction against
// `max_rules` (Reserve).
class JsonLexicon {
 public:
  JsonLexicon(GrammarBuilder& builder, int max_rules);

  GrammarBuilder& builder() { return builder_; }

  // INVALID_ARGUMENT naming max_rules (and `what`, where it was needed) when `rules` more
  // rules would take this compilation past max_rules.
  absl::Status Reserve(int64_t rules, std::string_view what) const;
  int rules_used() const { return builder_.rule_count() - first_rule_; }
  int max_rules() const { return max_rules_; }

  // Whitespace between two tokens: nothing, one space, or a newline and up to 20 spaces
  // or tabs (json_schema.h).
  Symbol Ws();
  // A JSON string, any content (any escape, \uXXXX surrogates in pairs only).
  Symbol String();
  // One character of such a string (a code point, raw or escaped).
  Symbol StringChar();
  // -?(0|[1-9][0-9]{0,15}), and that with an optional .[0-9]{1,16} and [eE][+-]?[0-9]{1,2}.
  Symbol Integer();
  Symbol Number();
  // Any JSON value; any JSON object.
  Symbol AnyValue();
  Symbol AnyObject();

  // One code point of `set` as JSON.stringify writes it inside a string (raw UTF-8, or
  // \" \\ \b \f \n \r \t \u00xx for the characters JSON escapes; surrogates, which
  // UTF-8 cannot hold, left out). nullopt when that leaves nothing.
  std::optional<Symbol> EncodedChar(const CodePointSet& set);

  // `item` min to max times (max -1: any number) as chains of rules named `name`-...,
  // reserved first: few rules for small counts, one per count past 8, shared by every
  // repetition of the same item in this compilation.
  absl::StatusOr<Sequence> Repeat(const Symbol& item, int64_t min, int64_t max,
                                  const std::string& name);

  // `value` as its canonical tokens (json_schema.h), Ws() between them.
  Sequence Value(const nlohmann::ordered_json& value);

  // The body of a JSON string holding `utf8`, as JSON.stringify writes it.
  static std::string StringBody(std::string_view utf8);
  // A number as JavaScript's Number.prototype.toString writes it (what JSON.stringify
  // writes after JSON.parse): 1.0 -> "1", 1e21 -> "1e+21", -0 -> "0".
  static std::string NumberText(const nlohmann::ordered_json& number);
  // `value` as one canonical text without whitespace (enum values, keys of a trie).
  static std::string CanonicalText(const nlohmann::ordered_json& value);

 private:
  // The rule named `name` in the builder, made by `define` if there is none yet.
  template <typename Define>
  int Shared(const std::string& name, Define define);

  GrammarBuilder& builder_;
  int first_rule_;
  int max_rules_;
  std::map<std::string, int> shared_;
  std::map<CodePointSet, int> encoded_;
  struct Chains {
    std::vector<int> times, up;  // item k+1 times; up to k+1 times
    int star = -1;
  };
  std::map<std::string, Chains> chains_;  // Repeat's, by item
};

}  // namespace attnserve::grammar
