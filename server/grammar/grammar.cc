#include "server/grammar/grammar.h"

#include <functional>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "server/grammar/mask_cache.h"

namespace attnserve::grammar {

Symbol Symbol::Range(uint8_t lo, uint8_t hi) {
  ByteSet set;
  for (int b = lo; b <= hi; ++b) set.set(size_t(b));
  return Bytes(set);
}

Sequence Literal(std::string_view text) {
  Sequence out;
  out.reserve(text.size());
  for (char c : text) out.push_back(Symbol::Byte(uint8_t(c)));
  return out;
}

Sequence Concat(Sequence a, const Sequence& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

int GrammarBuilder::NewRule(std::string name) {
  rules_.push_back(Rule{std::move(name), {}});
  return int(rules_.size()) - 1;
}

void GrammarBuilder::AddAlternative(int rule, Sequence sequence) {
  rules_[size_t(rule)].alternatives.push_back(std::move(sequence));
}

int GrammarBuilder::Star(std::string name, const Sequence& item) {
  const int r = NewRule(std::move(name));  // r ::= item r | ε
  AddAlternative(r, Concat(item, {Symbol::Ref(r)}));
  AddAlternative(r, {});
  return r;
}

int GrammarBuilder::Plus(std::string name, const Sequence& item) {
  const int star = Star(name + "-rest", item);  // r ::= item item*
  return RuleOf(std::move(name), Concat(item, {Symbol::Ref(star)}));
}

int GrammarBuilder::Optional(std::string name, const Sequence& item) {
  const int r = NewRule(std::move(name));
  AddAlternative(r, item);
  AddAlternative(r, {});
  return r;
}

int GrammarBuilder::Repeat(std::string name, const Sequence& item, int min, int max,
                           const Sequence& separator) {
  // item{min,max} with separators: the first item, then (sep item) min-1 times, then
  // up to max-min optional (sep item), nested so that each is tried once.
  const Sequence next = Concat(separator, item);
  // tail(k): up to k more of `next` (k < 0: any number).
  int tail;
  if (max < 0) {
    tail = Star(name + "-more", next);
  } else {
    tail = NewRule(name + "-end");
    AddAlternative(tail, {});
    for (int k = 1; k <= max - std::max(min, 1); ++k) {
      const int t = NewRule(absl::StrCat(name, "-up-to-", k));
      AddAlternative(t, Concat(next, {Symbol::Ref(tail)}));
      AddAlternative(t, {});
      tail = t;
    }
  }
  if (max == 0) return RuleOf(std::move(name), {});
  Sequence body = item;
  for (int i = 1; i < min; ++i) body = Concat(std::move(body), next);
  body.push_back(Symbol::Ref(tail));
  const int r = NewRule(std::move(name));
  AddAlternative(r, body);
  if (min == 0) AddAlternative(r, {});
  return r;
}

Grammar::Grammar() : mask_cache_(std::make_unique<MaskCache>()) {}
Grammar::~Grammar() = default;

absl::StatusOr<std::shared_ptr<const Grammar>> GrammarBuilder::Build(
    int root, const GrammarLimits& limits) const {
  const int n = int(rules_.size());
  if (root < 0 || root >= n) return absl::InvalidArgumentError("grammar: no root rule");
  if (n > limits.max_rules) {
    return absl::InvalidArgumentError(
        absl::StrCat("grammar: ", n, " rules, over the limit of ", limits.max_rules));
  }
  size_t symbols = 0;
  for (const Rule& r : rules_) {
    if (r.alternatives.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("grammar: rule '", r.name, "' has no alternatives"));
    }
    for (const Sequence& alt : r.alternatives) {
      symbols += alt.size();
      for (const Symbol& s : alt) {
        if (s.kind == Symbol::Kind::kRule && (s.rule < 0 || s.rule >= n)) {
          return absl::InvalidArgumentError(
              absl::StrCat("grammar: rule '", r.name, "' refers to no rule"));
        }
      }
    }
  }
  if (symbols > size_t(limits.max_symbols)) {
    return absl::InvalidArgumentError(absl::StrCat("grammar: ", symbols,
                                                   " symbols, over the limit of ",
                                                   limits.max_symbols));
  }
  // Nullable rules (match the empty text), to a fixpoint.
  std::vector<bool> nullable(static_cast<size_t>(n), false);
  for (bool changed = true; changed;) {
    changed = false;
    for (int i = 0; i < n; ++i) {
      if (nullable[size_t(i)]) continue;
      for (const Sequence& alt : rules_[size_t(i)].alternatives) {
        bool all = true;
        for (const Symbol& s : alt) {
          if (s.kind == Symbol::Kind::kBytes || !nullable[size_t(s.rule)]) {
            all = false;
            break;
          }
        }
        if (all) {
          nullable[size_t(i)] = changed = true;
          break;
        }
      }
    }
  }
  // Left recursion: a rule reachable from itself through leftmost references (each
  // preceded only by nullable rules) would expand forever.
  std::vector<std::vector<int>> left(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    for (const Sequence& alt : rules_[size_t(i)].alternatives) {
      for (const Symbol& s : alt) {
        if (s.kind == Symbol::Kind::kBytes) break;
        left[size_t(i)].push_back(s.rule);
        if (!nullable[size_t(s.rule)]) break;
      }
    }
  }
  std::vector<int> color(static_cast<size_t>(n), 0);  // 0 new, 1 on the path, 2 done
  std::string cycle;
  std::function<bool(int)> dfs = [&](int v) {
    color[size_t(v)] = 1;
    for (int w : left[size_t(v)]) {
      if (color[size_t(w)] == 1) {
        cycle = rules_[size_t(w)].name;
        return true;
      }
      if (color[size_t(w)] == 0 && dfs(w)) return true;
    }
    color[size_t(v)] = 2;
    return false;
  };
  for (int i = 0; i < n; ++i) {
    if (color[size_t(i)] == 0 && dfs(i)) {
      return absl::InvalidArgumentError(
          absl::StrCat("grammar: rule '", cycle, "' is left-recursive"));
    }
  }

  auto g = std::shared_ptr<Grammar>(new Grammar());
  g->root_ = root;
  g->alternatives_.resize(size_t(n));
  g->names_.reserve(size_t(n));
  std::unordered_map<ByteSet, int32_t> set_index;
  for (int i = 0; i < n; ++i) {
    g->names_.push_back(rules_[size_t(i)].name);
    for (const Sequence& alt : rules_[size_t(i)].alternatives) {
      g->alternatives_[size_t(i)].push_back(int32_t(g->elements_.size()));
      for (const Symbol& s : alt) {
        if (s.kind == Symbol::Kind::kRule) {
          g->elements_.push_back({Grammar::Element::Kind::kRule, s.rule});
          continue;
        }
        // Byte sets deduplicated (a JSON grammar repeats a few sets many times), through
        // a hash map: a grammar of 400,000 symbols may hold thousands of distinct sets.
        auto [it, added] = set_index.try_emplace(s.bytes, int32_t(g->byte_sets_.size()));
        if (added) g->byte_sets_.push_back(s.bytes);
        g->elements_.push_back({Grammar::Element::Kind::kBytes, it->second});
      }
      g->elements_.push_back({Grammar::Element::Kind::kEnd, -1});
    }
  }
  return std::shared_ptr<const Grammar>(std::move(g));
}

namespace {
std::string DescribeSet(const ByteSet& set) {
  if (set.count() == 1) {
    for (int b = 0; b < 256; ++b) {
      if (!set.test(size_t(b))) continue;
      if (b >= 0x20 && b < 0x7f && b != '"' && b != '\\') return absl::StrCat("\"", std::string(1, char(b)), "\"");
      return absl::StrCat("[\\x", absl::Hex(b, absl::kZeroPad2), "]");
    }
  }
  std::string out = "[";
  for (int b = 0; b < 256;) {
    if (!set.test(size_t(b))) {
      ++b;
      continue;
    }
    int e = b;
    while (e + 1 < 256 && set.test(size_t(e + 1))) ++e;
    auto one = [](int c) {
      if (c >= 0x21 && c < 0x7f && c != ']' && c != '\\' && c != '-') return std::string(1, char(c));
      return absl::StrCat("\\x", absl::Hex(c, absl::kZeroPad2));
    };
    out += one(b);
    if (e > b) out += "-" + one(e);
    b = e + 1;
  }
  return out + "]";
}
}  // namespace

std::string Grammar::Describe() const {
  std::string out;
  for (int r = 0; r < rule_count(); ++r) {
    absl::StrAppend(&out, names_[size_t(r)], " ::=");
    bool first = true;
    for (int32_t p : alternatives_[size_t(r)]) {
      absl::StrAppend(&out, first ? "" : " |");
      first = false;
      for (; elements_[size_t(p)].kind != Element::Kind::kEnd; ++p) {
        const Element& e = elements_[size_t(p)];
        if (e.kind == Element::Kind::kRule) {
          absl::StrAppend(&out, " ", names_[size_t(e.index)]);
        } else {
          absl::StrAppend(&out, " ", DescribeSet(byte_sets_[size_t(e.index)]));
        }
      }
    }
    out += "\n";
  }
  return out;
}

}  // namespace attnserve::grammar
