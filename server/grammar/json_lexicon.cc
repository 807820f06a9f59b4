#include "server/grammar/json_lexicon.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace attnserve::grammar {
namespace {

using json = nlohmann::ordered_json;

constexpr char32_t kMaxCodePoint = 0x10FFFF;

ByteSet Bytes(std::string_view chars) {
  ByteSet set;
  for (char c : chars) set.set(uint8_t(c));
  return set;
}

ByteSet ByteRange(int lo, int hi) {
  ByteSet set;
  for (int b = lo; b <= hi; ++b) set.set(size_t(b));
  return set;
}

const ByteSet& Digits() {
  static const ByteSet set = ByteRange('0', '9');
  return set;
}

const ByteSet& HexDigits() {
  static const ByteSet set = Bytes("0123456789abcdefABCDEF");
  return set;
}

int Encode(char32_t c, uint8_t* out) {
  if (c < 0x80) {
    out[0] = uint8_t(c);
    return 1;
  }
  if (c < 0x800) {
    out[0] = uint8_t(0xC0 | (c >> 6));
    out[1] = uint8_t(0x80 | (c & 0x3F));
    return 2;
  }
  if (c < 0x10000) {
    out[0] = uint8_t(0xE0 | (c >> 12));
    out[1] = uint8_t(0x80 | ((c >> 6) & 0x3F));
    out[2] = uint8_t(0x80 | (c & 0x3F));
    return 3;
  }
  out[0] = uint8_t(0xF0 | (c >> 18));
  out[1] = uint8_t(0x80 | ((c >> 12) & 0x3F));
  out[2] = uint8_t(0x80 | ((c >> 6) & 0x3F));
  out[3] = uint8_t(0x80 | (c & 0x3F));
  return 4;
}

// The UTF-8 encodings of the code points [lo, hi] as sequences of byte ranges (the
// split RE2 and Go's regexp use: cut where a continuation byte's range is not whole).
// Surrogates have no UTF-8 form and are left out.
void Utf8Sequences(char32_t lo, char32_t hi, std::vector<Sequence>& out) {
  if (lo > hi) return;
  if (lo <= 0xDFFF && hi >= 0xD800) {
    if (lo < 0xD800) Utf8Sequences(lo, 0xD7FF, out);
    if (hi > 0xDFFF) Utf8Sequences(0xE000, hi, out);
    return;
  }
  static constexpr char32_t kLengthEnds[] = {0x7F, 0x7FF, 0xFFFF};
  for (char32_t end : kLengthEnds) {
    if (lo <= end && hi > end) {
      Utf8Sequences(lo, end, out);
      Utf8Sequences(end + 1, hi, out);
      return;
    }
  }
  for (int i = 1; i < 4; ++i) {
    const char32_t m = (char32_t(1) << (6 * i)) - 1;
    if ((lo & ~m) == (hi & ~m)) continue;
    if ((lo & m) != 0) {
      Utf8Sequences(lo, lo | m, out);
      Utf8Sequences((lo | m) + 1, hi, out);
      return;
    }
    if ((hi & m) != m) {
      Utf8Sequences(lo, (hi & ~m) - 1, out);
      Utf8Sequences(hi & ~m, hi, out);
      return;
    }
  }
  uint8_t a[4], b[4];
  const int n = Encode(lo, a);
  Encode(hi, b);
  Sequence seq;
  for (int i = 0; i < n; ++i) seq.push_back(Symbol::Bytes(ByteRange(a[i], b[i])));
  out.push_back(std::move(seq));
}

// How JSON.stringify escapes `c` (< 0x20, '"' or '\'), else empty.
std::string Escape(char32_t c) {
  switch (c) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\b': return "\\b";
    case '\f': return "\\f";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    default: break;
  }
  if (c < 0x20) {
    static const char kHex[] = "0123456789abcdef";
    return absl::StrCat("\\u00", std::string(1, kHex[c >> 4]), std::string(1, kHex[c & 15]));
  }
  return "";
}

}  // namespace

CodePointSet CodePointSet::Range(char32_t lo, char32_t hi) {
  CodePointSet set;
  set.Add(lo, hi);
  return set;
}

void CodePointSet::Add(char32_t lo, char32_t hi) {
  if (lo > hi) return;
  hi = std::min(hi, kMaxCodePoint);
  if (normal_ && !ranges_.empty() && lo <= ranges_.back().second + 1 &&
      lo >= ranges_.back().first) {
    ranges_.back().second = std::max(ranges_.back().second, hi);  // extends the last
    return;
  }
  if (!ranges_.empty() && lo <= ranges_.back().second + 1) normal_ = false;
  ranges_.emplace_back(lo, hi);
}

void CodePointSet::Add(const CodePointSet& other) {
  for (const auto& r : other.ranges()) Add(r.first, r.second);
}

void CodePointSet::Normalize() const {
  if (normal_) return;
  std::sort(ranges_.begin(), ranges_.end());
  std::vector<std::pair<char32_t, char32_t>> merged;
  for (const auto& r : ranges_) {
    if (!merged.empty() && r.first <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, r.second);
    } else {
      merged.push_back(r);
    }
  }
  ranges_ = std::move(merged);
  normal_ = true;
}

CodePointSet CodePointSet::Complement() const {
  CodePointSet out;
  char32_t next = 0;
  for (const auto& r : ranges()) {
    if (r.first > next) out.ranges_.emplace_back(next, r.first - 1);
    next = r.second + 1;
  }
  if (next <= kMaxCodePoint) out.ranges_.emplace_back(next, kMaxCodePoint);
  return out;
}

JsonLexicon::JsonLexicon(GrammarBuilder& builder, int max_rules)
    : builder_(builder), first_rule_(builder.rule_count()), max_rules_(max_rules) {}

absl::Status JsonLexicon::Reserve(int64_t rules, std::string_view what) const {
  if (rules_used() + rules <= max_rules_) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "schema needs more than max_rules (", max_rules_, ") grammar rules",
      what.empty() ? "" : absl::StrCat(" (", std::string(what), ")")));
}

template <typename Define>
int JsonLexicon::Shared(const std::string& name, Define define) {
  if (auto it = shared_.find(name); it != shared_.end()) return it->second;
  for (int r = 0; r < first_rule_; ++r) {
    if (builder_.rule_name(r) == name) return shared_[name] = r;
  }
  const int r = builder_.NewRule(name);
  shared_[name] = r;  // before `define`, which may refer to it
  define(r);
  return r;
}

namespace {
// u(k) ::= ε | item u(k-1): up to `count` of `item`, named name-k.
int UpTo(GrammarBuilder& b, const std::string& name, const Symbol& item, int count) {
  int rule = -1;
  for (int k = 1; k <= count; ++k) {
    const int r = b.NewRule(absl::StrCat(name, "-", k));
    b.AddAlternative(r, {});
    Sequence more = {item};
    if (rule >= 0) more.push_back(Symbol::Ref(rule));
    b.AddAlternative(r, std::move(more));
    rule = r;
  }
  return rule;
}
}  // namespace

Symbol JsonLexicon::Ws() {
  return Symbol::Ref(Shared("json:ws", [&](int r) {
    const int indent = UpTo(builder_, "json:ws-indent", Symbol::Bytes(Bytes(" \t")), 20);
    builder_.AddAlternative(r, {});
    builder_.AddAlternative(r, Literal(" "));
    builder_.AddAlternative(r, {Symbol::Byte('\n'), Symbol::Ref(indent)});
  }));
}

Symbol JsonLexicon::StringChar() {
  return Symbol::Ref(Shared("json:char", [&](int r) {
    std::vector<Sequence> raw;
    Utf8Sequences(0x20, 0x21, raw);
    Utf8Sequences(0x23, 0x5B, raw);
    Utf8Sequences(0x5D, kMaxCodePoint, raw);
    for (Sequence& s : raw) builder_.AddAlternative(r, std::move(s));
    const Symbol hex = Symbol::Bytes(HexDigits());
    const int escape = builder_.NewRule("json:escape");
    builder_.AddAlternative(escape, {Symbol::Bytes(Bytes("\"\\/bfnrt"))});
    // \uXXXX: a code point outside the surrogates, or a high and a low surrogate.
    builder_.AddAlternative(escape, {Symbol::Byte('u'), Symbol::Bytes(Bytes("0123456789abcABCefEF")),
                                     hex, hex, hex});
    builder_.AddAlternative(escape, {Symbol::Byte('u'), Symbol::Bytes(Bytes("dD")),
                                     Symbol::Range('0', '7'), hex, hex});
    builder_.AddAlternative(escape, {Symbol::Byte('u'), Symbol::Bytes(Bytes("dD")),
                                     Symbol::Bytes(Bytes("89abAB")), hex, hex, Symbol::Byte('\\'),
                                     Symbol::Byte('u'), Symbol::Bytes(Bytes("dD")),
                                     Symbol::Bytes(Bytes("cdefCDEF")), hex, hex});
    builder_.AddAlternative(r, {Symbol::Byte('\\'), Symbol::Ref(escape)});
  }));
}

Symbol JsonLexicon::String() {
  return Symbol::Ref(Shared("json:string", [&](int r) {
    const int chars = builder_.Star("json:chars", {StringChar()});
    builder_.AddAlternative(r, {Symbol::Byte('"'), Symbol::Ref(chars), Symbol::Byte('"')});
  }));
}

Symbol JsonLexicon::Integer() {
  return Symbol::Ref(Shared("json:integer", [&](int r) {
    const int more = UpTo(builder_, "json:int-digits", Symbol::Bytes(Digits()), 15);
    const int natural = builder_.NewRule("json:int");
    builder_.AddAlternative(natural, Literal("0"));
    builder_.AddAlternative(natural, {Symbol::Range('1', '9'), Symbol::Ref(more)});
    builder_.AddAlternative(r, {Symbol::Ref(natural)});
    builder_.AddAlternative(r, {Symbol::Byte('-'), Symbol::Ref(natural)});
  }));
}

Symbol JsonLexicon::Number() {
  return Symbol::Ref(Shared("json:number", [&](int r) {
    const Symbol digit = Symbol::Bytes(Digits());
    const int frac_more = UpTo(builder_, "json:frac-digits", digit, 15);
    const int frac = builder_.Optional("json:frac", {Symbol::Byte('.'), digit, Symbol::Ref(frac_more)});
    const int exp_more = UpTo(builder_, "json:exp-digits", digit, 1);
    const int sign = builder_.Optional("json:exp-sign", {Symbol::Bytes(Bytes("+-"))});
    const int exp = builder_.Optional("json:exp", {Symbol::Bytes(Bytes("eE")), Symbol::Ref(sign),
                                                   digit, Symbol::Ref(exp_more)});
    builder_.AddAlternative(r, {Integer(), Symbol::Ref(frac), Symbol::Ref(exp)});
  }));
}

Symbol JsonLexicon::AnyValue() {
  return Symbol::Ref(Shared("json:value", [&](int r) {
    builder_.AddAlternative(r, {AnyObject()});
    const int array = builder_.NewRule("json:array");
    const int elements = builder_.NewRule("json:elements");
    const int more = builder_.NewRule("json:elements-more");
    builder_.AddAlternative(array, {Symbol::Byte('['), Ws(), Symbol::Byte(']')});
    builder_.AddAlternative(array, {Symbol::Byte('['), Ws(), Symbol::Ref(elements), Symbol::Byte(']')});
    builder_.AddAlternative(elements, {Symbol::Ref(r), Ws(), Symbol::Ref(more)});
    builder_.AddAlternative(more, {});
    builder_.AddAlternative(more, {Symbol::Byte(','), Ws(), Symbol::Ref(elements)});
    builder_.AddAlternative(r, {Symbol::Ref(array)});
    builder_.AddAlternative(r, {String()});
    builder_.AddAlternative(r, {Number()});
    builder_.AddAlternative(r, Literal("true"));
    builder_.AddAlternative(r, Literal("false"));
    builder_.AddAlternative(r, Literal("null"));
  }));
}

Symbol JsonLexicon::AnyObject() {
  return Symbol::Ref(Shared("json:object", [&](int r) {
    const int members = builder_.NewRule("json:members");
    const int more = builder_.NewRule("json:members-more");
    builder_.AddAlternative(r, {Symbol::Byte('{'), Ws(), Symbol::Byte('}')});
    builder_.AddAlternative(r, {Symbol::Byte('{'), Ws(), Symbol::Ref(members), Symbol::Byte('}')});
    builder_.AddAlternative(members, {String(), Ws(), Symbol::Byte(':'), Ws(), AnyValue(), Ws(),
                                      Symbol::Ref(more)});
    builder_.AddAlternative(more, {});
    builder_.AddAlternative(more, {Symbol::Byte(','), Ws(), Symbol::Ref(members)});
  }));
}

absl::StatusOr<Sequence> JsonLexicon::Repeat(const Symbol& item, int64_t min, int64_t max,
                                             const std::string& name) {
  // The chains are shared by every repetition of the same item (many properties with
  // the same maxLength cost one chain): times(k) ::= item times(k-1), a tail call each,
  // so no stack depth; up(k) ::= ε | item up(k-1).
  const std::string key = item.kind == Symbol::Kind::kRule ? absl::StrCat("r", item.rule)
                                                           : "b" + item.bytes.to_string();
  Chains& c = chains_[key];
  const bool unbounded = max < 0;
  const int64_t new_times = min > 8 ? std::max<int64_t>(0, min - int64_t(c.times.size())) : 0;
  const int64_t new_up = unbounded ? (c.star < 0 ? 1 : 0)
                                   : std::max<int64_t>(0, max - min - int64_t(c.up.size()));
  if (absl::Status s = Reserve(new_times + new_up, name); !s.ok()) return s;
  Sequence out;
  if (min <= 8) {
    out.assign(size_t(min), item);
  } else {
    while (int64_t(c.times.size()) < min) {
      Sequence seq = {item};
      if (!c.times.empty()) seq.push_back(Symbol::Ref(c.times.back()));
      c.times.push_back(builder_.RuleOf(absl::StrCat(name, "-times-", c.times.size() + 1), std::move(seq)));
    }
    out.push_back(Symbol::Ref(c.times[size_t(min - 1)]));
  }
  if (unbounded) {
    if (c.star < 0) c.star = builder_.Star(name + "-more", {item});
    out.push_back(Symbol::Ref(c.star));
  } else if (max > min) {
    while (int64_t(c.up.size()) < max - min) {
      const int r = builder_.NewRule(absl::StrCat(name, "-up-to-", c.up.size() + 1));
      builder_.AddAlternative(r, {});
      Sequence more = {item};
      if (!c.up.empty()) more.push_back(Symbol::Ref(c.up.back()));
      builder_.AddAlternative(r, std::move(more));
      c.up.push_back(r);
    }
    out.push_back(Symbol::Ref(c.up[size_t(max - min - 1)]));
  }
  return out;
}

std::optional<Symbol> JsonLexicon::EncodedChar(const CodePointSet& set) {
  ByteSet ascii;
  bool multi = false;
  for (const auto& [lo, hi] : set.ranges()) {
    for (char32_t c = lo; c <= std::min<char32_t>(hi, 0x7F); ++c) {
      if (Escape(c).empty()) ascii.set(size_t(c)); else multi = true;
    }
    if (hi >= 0x80 && !(lo >= 0xD800 && hi <= 0xDFFF)) multi = true;
  }
  if (!multi) {
    if (ascii.none()) return std::nullopt;
    return Symbol::Bytes(ascii);
  }
  if (auto it = encoded_.find(set); it != encoded_.end()) return Symbol::Ref(it->second);
  const int r = builder_.NewRule(absl::StrCat("json:char-set-", encoded_.size()));
  encoded_[set] = r;
  if (ascii.any()) builder_.AddAlternative(r, {Symbol::Bytes(ascii)});
  for (const auto& [lo, hi] : set.ranges()) {
    for (char32_t c = lo; c <= std::min<char32_t>(hi, 0x7F); ++c) {
      if (std::string e = Escape(c); !e.empty()) builder_.AddAlternative(r, Literal(e));
    }
    if (hi < 0x80) continue;
    std::vector<Sequence> seqs;
    Utf8Sequences(std::max<char32_t>(lo, 0x80), hi, seqs);
    for (Sequence& s : seqs) builder_.AddAlternative(r, std::move(s));
  }
  return Symbol::Ref(r);
}

std::string JsonLexicon::StringBody(std::string_view utf8) {
  std::string out;
  out.reserve(utf8.size());
  for (char c : utf8) {
    const std::string e = Escape(char32_t(uint8_t(c)));
    if (e.empty()) out += c; else out += e;
  }
  return out;
}

std::string JsonLexicon::NumberText(const json& number) {
  constexpr double kExact = 9007199254740992.0;  // 2^53: integers JavaScript holds exactly
  if (number.is_number_integer() && !number.is_number_unsigned()) {
    const int64_t v = number.get<int64_t>();
    if (double(v) <= kExact && double(v) >= -kExact) return std::to_string(v);
  } else if (number.is_number_unsigned()) {
    const uint64_t v = number.get<uint64_t>();
    if (double(v) <= kExact) return std::to_string(v);
  }
  const double d = number.get<double>();
  if (d == 0) return "0";
  // The fewest significant digits that read back as `d` (ECMAScript's Number::toString).
  char buf[40];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*e", precision - 1, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  std::string text = buf;
  std::string sign;
  if (text[0] == '-') {
    sign = "-";
    text.erase(0, 1);
  }
  const size_t e = text.find('e');
  const int exponent = std::atoi(text.c_str() + e + 1);
  std::string digits;
  for (size_t i = 0; i < e; ++i) {
    if (text[i] != '.') digits += text[i];
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  const int k = int(digits.size());
  const int n = exponent + 1;  // the decimal point sits after n digits
  if (k <= n && n <= 21) return sign + digits + std::string(size_t(n - k), '0');
  if (0 < n && n <= 21) return sign + digits.substr(0, size_t(n)) + "." + digits.substr(size_t(n));
  if (-6 < n && n <= 0) return sign + "0." + std::string(size_t(-n), '0') + digits;
  std::string out = sign + digits.substr(0, 1);
  if (k > 1) out += "." + digits.substr(1);
  return absl::StrCat(out, "e", n - 1 >= 0 ? "+" : "-", std::abs(n - 1));
}

std::string JsonLexicon::CanonicalText(const json& value) {
  switch (value.type()) {
    case json::value_t::string:
      return "\"" + StringBody(value.get_ref<const std::string&>()) + "\"";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
    case json::value_t::number_float:
      return NumberText(value);
    case json::value_t::object: {
      std::string out = "{";
      for (auto it = value.begin(); it != value.end(); ++it) {
        if (out.size() > 1) out += ",";
        out += "\"" + StringBody(it.key()) + "\":" + CanonicalText(it.value());
      }
      return out + "}";
    }
    case json::value_t::array: {
      std::string out = "[";
      for (const json& v : value) {
        if (out.size() > 1) out += ",";
        out += CanonicalText(v);
      }
      return out + "]";
    }
    default:
      return value.dump();  // null, true, false
  }
}

Sequence JsonLexicon::Value(const json& value) {
  if (!value.is_object() && !value.is_array()) return Literal(CanonicalText(value));
  const bool object = value.is_object();
  Sequence out = {Symbol::Byte(object ? '{' : '['), Ws()};
  bool first = true;
  for (auto it = value.begin(); it != value.end(); ++it) {
    if (!first) out = Concat(std::move(out), {Symbol::Byte(','), Ws()});
    first = false;
    if (object) {
      out = Concat(std::move(out), Literal("\"" + StringBody(it.key()) + "\""));
      out = Concat(std::move(out), {Ws(), Symbol::Byte(':'), Ws()});
    }
    out = Concat(std::move(out), Value(it.value()));
    out.push_back(Ws());
  }
  out.push_back(Symbol::Byte(object ? '}' : ']'));
  return out;
}

}  // namespace attnserve::grammar
