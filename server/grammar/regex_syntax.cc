#include "server/grammar/regex_syntax.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"

namespace attnserve::grammar::regex {
namespace {
// a * b, both in [0, kLengthCap], capped at kLengthCap.
int64_t Times(int64_t a, int64_t b) { return (a != 0 && b > kLengthCap / a) ? kLengthCap : a * b; }
}  // namespace

std::pair<int64_t, int64_t> Lengths(const Node& n) {
  switch (n.kind) {
    case Node::Kind::kSet:
      return {1, 1};
    case Node::Kind::kConcat: {
      int64_t lo = 0, hi = 0;
      for (const Node& k : n.kids) {
        auto [a, b] = Lengths(k);
        lo = std::min(kLengthCap, lo + a);
        hi = (hi < 0 || b < 0) ? -1 : std::min(kLengthCap, hi + b);
      }
      return {lo, hi};
    }
    case Node::Kind::kAlt: {
      int64_t lo = kLengthCap, hi = 0;
      for (const Node& k : n.kids) {
        auto [a, b] = Lengths(k);
        lo = std::min(lo, a);
        hi = (hi < 0 || b < 0) ? -1 : std::max(hi, b);
      }
      return {lo, hi};
    }
    case Node::Kind::kRepeat: {
      auto [a, b] = Lengths(n.kids[0]);
      const int64_t lo = Times(a, n.min);
      if (b == 0) return {lo, 0};
      if (b < 0 || n.max < 0) return {lo, -1};
      return {lo, Times(b, n.max)};
    }
  }
  return {0, -1};
}

namespace {

CodePointSet Dot() {
  CodePointSet s;
  s.Add('\n', '\n');
  s.Add('\r', '\r');
  s.Add(0x2028, 0x2029);
  return s.Complement();
}

CodePointSet ClassSet(char32_t c) {  // d D w W s S
  CodePointSet s;
  switch (c | 0x20) {
    case 'd':
      s.Add('0', '9');
      break;
    case 'w':
      s.Add('0', '9');
      s.Add('A', 'Z');
      s.Add('a', 'z');
      s.Add('_', '_');
      break;
    default:  // s: ECMAScript's WhiteSpace and LineTerminator
      s.Add('\t', '\r');
      s.Add(' ', ' ');
      s.Add(0xA0, 0xA0);
      s.Add(0x1680, 0x1680);
      s.Add(0x2000, 0x200A);
      s.Add(0x2028, 0x2029);
      s.Add(0x202F, 0x202F);
      s.Add(0x205F, 0x205F);
      s.Add(0x3000, 0x3000);
      s.Add(0xFEFF, 0xFEFF);
  }
  return (c >= 'A' && c <= 'Z') ? s.Complement() : s;
}

bool IsSyntax(char32_t c) {
  return c < 0x80 && std::string_view("^$\\.*+?()[]{}|/").find(char(c)) != std::string_view::npos;
}

int HexValue(char32_t c) {
  if (c >= '0' && c <= '9') return int(c - '0');
  if (c >= 'a' && c <= 'f') return int(c - 'a' + 10);
  if (c >= 'A' && c <= 'F') return int(c - 'A' + 10);
  return -1;
}

// A class atom: a code point, or a set (\d and the like).
struct ClassAtom {
  bool is_set = false;
  char32_t c = 0;
  CodePointSet set;
};

// ECMAScript's pattern grammar with the u flag, the subset schema_pattern.h names.
class Parser {
 public:
  Parser(std::u32string text, std::string where, int max_depth)
      : s_(std::move(text)), where_(std::move(where)), max_depth_(max_depth) {}

  absl::StatusOr<std::vector<Branch>> Top() {
    std::vector<Branch> branches;
    while (true) {
      Branch b;
      if (Peek('^')) {
        b.start = true;
        ++pos_;
      }
      while (pos_ < s_.size() && !Peek('|')) {
        if (Peek('$')) {
          ++pos_;
          if (pos_ < s_.size() && !Peek('|')) return Unsupported("an anchor $ before the end");
          b.end = true;
          break;
        }
        if (Peek(')')) return Invalid("an unmatched )");
        absl::StatusOr<Node> term = Term(0);
        if (!term.ok()) return term.status();
        b.node.kids.push_back(*std::move(term));
      }
      branches.push_back(std::move(b));
      if (!Peek('|')) break;
      ++pos_;
    }
    return branches;
  }

 private:
  bool Peek(char32_t c) const { return pos_ < s_.size() && s_[pos_] == c; }

  absl::Status Unsupported(std::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("unsupported keyword 'pattern' at ", where_,
                                                   ": ", std::string(what), " (offset ", pos_, ")"));
  }
  absl::Status Invalid(std::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported keyword 'pattern' at ", where_,
                     ": not an ECMAScript regular expression (u flag): ", std::string(what), " (offset ",
                     pos_, ")"));
  }

  // Alternatives up to a ')' (not consumed), inside a group.
  absl::StatusOr<Node> Disjunction(int depth) {
    Node alt;
    alt.kind = Node::Kind::kAlt;
    while (true) {
      Node seq;
      while (pos_ < s_.size() && !Peek('|') && !Peek(')')) {
        if (Peek('^') || Peek('$')) return Unsupported("an anchor inside a group");
        absl::StatusOr<Node> term = Term(depth);
        if (!term.ok()) return term.status();
        seq.kids.push_back(*std::move(term));
      }
      alt.kids.push_back(std::move(seq));
      if (!Peek('|')) break;
      ++pos_;
    }
    if (alt.kids.size() == 1) return std::move(alt.kids[0]);
    return alt;
  }

  absl::StatusOr<Node> Term(int depth) {
    absl::StatusOr<Node> atom = Atom(depth);
    if (!atom.ok()) return atom.status();
    int64_t min = 0, max = -1;
    if (Peek('*')) {
      ++pos_;
    } else if (Peek('+')) {
      ++pos_;
      min = 1;
    } else if (Peek('?')) {
      ++pos_;
      max = 1;
    } else if (Peek('{')) {
      ++pos_;
      if (!Count(min)) return Invalid("a { that is not a quantifier");
      max = min;
      if (Peek(',')) {
        ++pos_;
        max = -1;
        if (!Peek('}') && !Count(max)) return Invalid("a { that is not a quantifier");
      }
      if (!Peek('}')) return Invalid("a { that is not a quantifier");
      ++pos_;
      if (max >= 0 && min > max) return Invalid("a quantifier {n,m} with n > m");
    } else {
      return atom;
    }
    if (Peek('?')) ++pos_;  // lazy: the same strings match
    if (Peek('*') || Peek('+') || Peek('?') || Peek('{')) return Invalid("nothing to repeat");
    Node rep;
    rep.kind = Node::Kind::kRepeat;
    rep.min = min;
    rep.max = max;
    rep.kids.push_back(*std::move(atom));
    return rep;
  }

  bool Count(int64_t& out) {
    if (pos_ >= s_.size() || s_[pos_] < '0' || s_[pos_] > '9') return false;
    out = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      out = std::min<int64_t>(kLengthCap, out * 10 + int64_t(s_[pos_] - '0'));
      ++pos_;
    }
    return true;
  }

  absl::StatusOr<Node> Atom(int depth) {
    const char32_t c = s_[pos_++];
    switch (c) {
      case '.':
        return Node::Set(Dot());
      case '[': {
        absl::StatusOr<CodePointSet> set = Class();
        if (!set.ok()) return set.status();
        return Node::Set(*std::move(set));
      }
      case '(':
        return Group(depth);
      case '\\':
        return AtomEscape();
      case '*': case '+': case '?': case '{':
        --pos_;
        return Invalid("nothing to repeat");
      case '^': case '$':
        --pos_;
        return Unsupported("an anchor ^ or $ inside the pattern");
      case ')': case ']': case '}':
        --pos_;
        return Invalid(absl::StrCat("a lone ", std::string(1, char(c))));
      default:
        return Node::Char(c);
    }
  }

  absl::StatusOr<Node> Group(int depth) {
    if (depth + 1 > max_depth_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "pattern at ", where_, " nests groups deeper than max_depth (", max_depth_, ")"));
    }
    if (Peek('?')) {
      ++pos_;
      if (Peek(':')) {
        ++pos_;
      } else if (Peek('<') && pos_ + 1 < s_.size() && s_[pos_ + 1] != '=' && s_[pos_ + 1] != '!') {
        ++pos_;  // a named group: the name, then the group
        while (pos_ < s_.size() && !Peek('>')) {
          const char32_t n = s_[pos_++];
          if (!(n == '_' || n == '$' || (n >= '0' && n <= '9') || ((n | 0x20) >= 'a' && (n | 0x20) <= 'z'))) {
            return Unsupported("a group name other than ASCII letters, digits, _ and $");
          }
        }
        if (!Peek('>')) return Invalid("an unterminated group name");
        ++pos_;
      } else if (Peek('=') || Peek('!') || Peek('<')) {
        return Unsupported("lookaround ((?=, (?!, (?<=, (?<!)");
      } else {
        return Invalid("a group (? of no known kind");
      }
    }
    absl::StatusOr<Node> inner = Disjunction(depth + 1);
    if (!inner.ok()) return inner.status();
    if (!Peek(')')) return Invalid("an unterminated group");
    ++pos_;
    return inner;
  }

  absl::StatusOr<Node> AtomEscape() {
    if (pos_ >= s_.size()) return Invalid("a \\ at the end");
    const char32_t c = s_[pos_];
    if (std::u32string_view(U"dDwWsS").find(c) != std::u32string_view::npos) {
      ++pos_;
      return Node::Set(ClassSet(c));
    }
    if (c == 'b' || c == 'B') return Unsupported("a word boundary (\\b, \\B)");
    if (c == 'k' || (c >= '1' && c <= '9')) return Unsupported("a back reference");
    absl::StatusOr<char32_t> e = CharacterEscape(false);
    if (!e.ok()) return e.status();
    return Node::Char(*e);
  }

  // After a '\\': a character escape (the u flag's set). `in_class`: \- too.
  absl::StatusOr<char32_t> CharacterEscape(bool in_class) {
    const char32_t c = s_[pos_++];
    switch (c) {
      case 'f': return char32_t('\f');
      case 'n': return char32_t('\n');
      case 'r': return char32_t('\r');
      case 't': return char32_t('\t');
      case 'v': return char32_t('\v');
      case '0':
        if (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') return Invalid("an octal escape");
        return char32_t(0);
      case 'c':
        if (pos_ < s_.size() && (s_[pos_] | 0x20) >= 'a' && (s_[pos_] | 0x20) <= 'z') {
          return char32_t(s_[pos_++] % 32);
        }
        return Invalid("\\c not followed by a letter");
      case 'x': {
        if (pos_ + 2 > s_.size() || HexValue(s_[pos_]) < 0 || HexValue(s_[pos_ + 1]) < 0) {
          return Invalid("\\x not followed by two hex digits");
        }
        const char32_t v = char32_t(HexValue(s_[pos_]) * 16 + HexValue(s_[pos_ + 1]));
        pos_ += 2;
        return v;
      }
      case 'u':
        return UnicodeEscape();
      case 'p': case 'P':
        return Unsupported("a Unicode property escape (\\p, \\P)");
      default:
        if (IsSyntax(c) || (in_class && c == '-')) return c;
        --pos_;
        return Invalid("an escape the u flag does not allow");
    }
  }

  absl::StatusOr<char32_t> UnicodeEscape() {
    if (Peek('{')) {
      ++pos_;
      char32_t v = 0;
      size_t digits = 0;
      for (; pos_ < s_.size() && HexValue(s_[pos_]) >= 0; ++pos_, ++digits) {
        v = v * 16 + char32_t(HexValue(s_[pos_]));
        if (v > 0x10FFFF) return Invalid("a \\u{...} past U+10FFFF");
      }
      if (digits == 0 || !Peek('}')) return Invalid("a malformed \\u{...}");
      ++pos_;
      return v;
    }
    auto hex4 = [&](size_t at, char32_t& out) {
      if (at + 4 > s_.size()) return false;
      out = 0;
      for (size_t i = at; i < at + 4; ++i) {
        if (HexValue(s_[i]) < 0) return false;
        out = out * 16 + char32_t(HexValue(s_[i]));
      }
      return true;
    };
    char32_t v;
    if (!hex4(pos_, v)) return Invalid("\\u not followed by four hex digits");
    pos_ += 4;
    // With the u flag, \uD83D\uDE00 is one code point.
    char32_t low;
    if (v >= 0xD800 && v <= 0xDBFF && pos_ + 6 <= s_.size() && s_[pos_] == '\\' &&
        s_[pos_ + 1] == 'u' && hex4(pos_ + 2, low) && low >= 0xDC00 && low <= 0xDFFF) {
      pos_ += 6;
      return 0x10000 + ((v - 0xD800) << 10) + (low - 0xDC00);
    }
    return v;
  }

  absl::StatusOr<ClassAtom> ClassAtomAt() {
    ClassAtom a;
    const char32_t c = s_[pos_++];
    if (c != '\\') {
      a.c = c;
      return a;
    }
    if (pos_ >= s_.size()) return Invalid("a \\ at the end");
    const char32_t e = s_[pos_];
    if (std::u32string_view(U"dDwWsS").find(e) != std::u32string_view::npos) {
      ++pos_;
      a.is_set = true;
      a.set = ClassSet(e);
      return a;
    }
    if (e == 'b') {
      ++pos_;
      a.c = '\b';
      return a;
    }
    if (e == 'B' || e == 'k' || (e >= '1' && e <= '9')) return Invalid("an escape a class does not allow");
    absl::StatusOr<char32_t> v = CharacterEscape(true);
    if (!v.ok()) return v.status();
    a.c = *v;
    return a;
  }

  // After '[': the class, through its ']'.
  absl::StatusOr<CodePointSet> Class() {
    bool negate = false;
    if (Peek('^')) {
      negate = true;
      ++pos_;
    }
    CodePointSet set;
    while (true) {
      if (pos_ >= s_.size()) return Invalid("an unterminated class");
      if (Peek(']')) break;
      absl::StatusOr<ClassAtom> a = ClassAtomAt();
      if (!a.ok()) return a.status();
      if (Peek('-') && pos_ + 1 < s_.size() && s_[pos_ + 1] != ']') {
        ++pos_;
        absl::StatusOr<ClassAtom> b = ClassAtomAt();
        if (!b.ok()) return b.status();
        if (a->is_set || b->is_set) return Invalid("a range with a class escape at an end");
        if (a->c > b->c) return Invalid("a range out of order");
        set.Add(a->c, b->c);
      } else if (a->is_set) {
        set.Add(a->set);
      } else {
        set.Add(a->c, a->c);
      }
    }
    ++pos_;
    return negate ? set.Complement() : set;
  }

  std::u32string s_;
  std::string where_;
  int max_depth_;
  size_t pos_ = 0;
};

bool DecodeUtf8(std::string_view in, std::u32string& out) {
  for (size_t i = 0; i < in.size();) {
    const uint8_t b = uint8_t(in[i]);
    int n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + size_t(n) > in.size()) return false;
    char32_t c = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
    for (int k = 1; k < n; ++k) {
      const uint8_t t = uint8_t(in[i + size_t(k)]);
      if ((t >> 6) != 2) return false;
      c = (c << 6) | (t & 0x3F);
    }
    out.push_back(c);
    i += size_t(n);
  }
  return true;
}

}  // namespace

absl::StatusOr<std::vector<Branch>> Parse(std::string_view pattern, const std::string& where,
                                          int max_depth) {
  std::u32string text;
  if (!DecodeUtf8(pattern, text)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported keyword 'pattern' at ", where, ": not UTF-8"));
  }
  return Parser(std::move(text), where, max_depth).Top();
}

}  // namespace attnserve::grammar::regex

namespace attnserve::grammar::regex {
namespace {

// The positions where a match of `n` starting at one of `from` may end, in `text`.
std::set<size_t> Ends(const Node& n, const std::u32string& text, const std::set<size_t>& from) {
  std::set<size_t> out;
  switch (n.kind) {
    case Node::Kind::kSet:
      for (size_t i : from) {
        if (i >= text.size()) continue;
        for (const auto& [lo, hi] : n.set.ranges()) {
          if (text[i] >= lo && text[i] <= hi) {
            out.insert(i + 1);
            break;
          }
        }
      }
      return out;
    case Node::Kind::kConcat: {
      std::set<size_t> cur = from;
      for (const Node& k : n.kids) {
        if (cur.empty()) break;
        cur = Ends(k, text, cur);
      }
      return cur;
    }
    case Node::Kind::kAlt:
      for (const Node& k : n.kids) {
        std::set<size_t> e = Ends(k, text, from);
        out.insert(e.begin(), e.end());
      }
      return out;
    case Node::Kind::kRepeat: {
      std::set<size_t> cur = from, seen;
      if (n.min == 0) out = from;
      for (int64_t k = 1; (n.max < 0 || k <= n.max) && !cur.empty(); ++k) {
        cur = Ends(n.kids[0], text, cur);
        if (k >= n.min) {
          // Past min, a position seen before adds nothing new.
          std::set<size_t> fresh;
          for (size_t p : cur) {
            if (seen.insert(p).second) fresh.insert(p);
          }
          out.insert(cur.begin(), cur.end());
          cur = std::move(fresh);
        }
        if (k > int64_t(text.size()) + n.min + 1 && n.max < 0) break;
      }
      return out;
    }
  }
  return out;
}

}  // namespace

std::optional<bool> Matches(const std::vector<Branch>& branches, std::string_view utf8) {
  std::u32string text;
  if (!DecodeUtf8(utf8, text)) return std::nullopt;
  for (const Branch& b : branches) {
    std::set<size_t> from;
    if (b.start) {
      from.insert(0);
    } else {
      for (size_t i = 0; i <= text.size(); ++i) from.insert(i);
    }
    const std::set<size_t> ends = Ends(b.node, text, from);
    if (b.end ? ends.count(text.size()) > 0 : !ends.empty()) return true;
  }
  return false;
}

}  // namespace attnserve::grammar::regex
