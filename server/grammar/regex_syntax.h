// ECMAScript regular expressions (the u flag, as Ajv runs JSON Schema patterns), parsed
// into a tree of code point sets, concatenations, alternations and repetitions: the
// subset schema_pattern.h names, everything else refused with INVALID_ARGUMENT naming
// `pattern`. Internal to server/grammar (schema_pattern.cc compiles the tree).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "server/grammar/json_lexicon.h"

namespace attnserve::grammar::regex {

// A regular expression, parsed.
struct Node {
  enum class Kind { kSet, kConcat, kAlt, kRepeat };
  Kind kind = Kind::kConcat;
  CodePointSet set;         // kSet
  std::vector<Node> kids;   // kConcat, kAlt; kRepeat: one
  int64_t min = 0, max = -1;  // kRepeat; max -1: unbounded

  static Node Set(CodePointSet s) {
    Node n;
    n.kind = Kind::kSet;
    n.set = std::move(s);
    return n;
  }
  static Node Char(char32_t c) { return Set(CodePointSet::Range(c, c)); }
};

// A top-level alternative and whether ^ and $ anchor it.
struct Branch {
  bool start = false, end = false;
  Node node;
};

// Lengths are capped here (a count past it is as good as unbounded for any limit).
inline constexpr int64_t kLengthCap = int64_t(1) << 40;

// (min, max) code points a node matches; max -1: unbounded.
std::pair<int64_t, int64_t> Lengths(const Node& n);

// The top-level alternatives of `pattern` (UTF-8). `where` (the schema's JSON Pointer)
// goes into errors; `max_depth` bounds the nesting of groups.
absl::StatusOr<std::vector<Branch>> Parse(std::string_view pattern, const std::string& where,
                                          int max_depth);

// Whether `utf8` holds a match of the parsed pattern (what the pattern's test() says in
// JavaScript); nullopt when it is not UTF-8.
std::optional<bool> Matches(const std::vector<Branch>& branches, std::string_view utf8);

}  // namespace attnserve::grammar::regex
