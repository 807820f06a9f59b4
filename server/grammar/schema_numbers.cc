// Integers and numbers within minimum / maximum / exclusiveMinimum / exclusiveMaximum
// (SchemaCompiler::CompileNumber, schema_compiler.h): the decimal texts of a range, as
// rules whose alternatives start with different digits (one parse at a time).
//
// A text is a sign, a magnitude's integer part (no leading zero, at most 16 digits) and
// for numbers a fraction (.d{1,16}); under a bound, numbers are written without an
// exponent (json_schema.h). The range is split by sign ("-0" is 0, as Ajv reads it),
// then the magnitude's integer part by its count of digits and by the first digit where
// the bounds differ.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <tuple>
#include <set>

#include "absl/strings/str_cat.h"
#include "server/grammar/schema_compiler.h"

namespace attnserve::grammar::schema {
namespace {

constexpr int64_t kMaxMagnitude = 9999999999999999;  // 16 digits

struct Bound {
  int64_t k;
  bool strict;
};

ByteSet DigitRange(char lo, char hi) {
  ByteSet set;
  for (char c = lo; c <= hi; ++c) set.set(uint8_t(c));
  return set;
}

// Rules for the texts of integer ranges and fractions, named after the schema.
class Digits {
 public:
  Digits(GrammarBuilder& b, std::string name) : b_(b), name_(std::move(name)) {}
  GrammarBuilder& builder() { return b_; }
  const std::string& name() const { return name_; }

  // The integer parts in [lo, hi] (0 <= lo <= hi <= kMaxMagnitude), no leading zeros.
  Sequence Range(int64_t lo, int64_t hi) {
    std::vector<Sequence> alts;
    if (lo == 0) {
      alts.push_back(Literal("0"));
      lo = 1;
    }
    for (int len = 1; len <= 16 && lo <= hi; ++len) {
      const int64_t top = len == 16 ? kMaxMagnitude : Pow10(len) - 1;
      if (lo > top) continue;
      const int64_t end = std::min(hi, top);
      alts.push_back(Fixed(std::to_string(lo), std::to_string(end)));
      lo = end + 1;
    }
    return One(std::move(alts), "int");
  }

  // A fraction, or none: any; one whose digits are all 0 (or none); one with a digit
  // that is not 0.
  Sequence AnyFraction() {
    const int digits = b_.Repeat(name_ + " frac-digits", {Digit()}, 1, 16);
    return {Symbol::Ref(b_.Optional(name_ + " frac", {Symbol::Byte('.'), Symbol::Ref(digits)}))};
  }
  Sequence ZeroFraction() {
    const int zeros = b_.Repeat(name_ + " frac-zeros", {Symbol::Byte('0')}, 1, 16);
    return {Symbol::Ref(b_.Optional(name_ + " frac-zero", {Symbol::Byte('.'), Symbol::Ref(zeros)}))};
  }
  Sequence NonZeroFraction() {
    // z(n): at most n digits, one not 0: [1-9] d{0,n-1} | 0 z(n-1).
    int z = -1;
    for (int n = 1; n <= 16; ++n) {
      const int r = b_.NewRule(absl::StrCat(name_, " frac-nonzero-", n));
      Sequence first = {Symbol::Bytes(DigitRange('1', '9'))};
      if (n > 1) first.push_back(Symbol::Ref(b_.Repeat(absl::StrCat(name_, " frac-any-", n - 1), {Digit()}, 0, n - 1)));
      b_.AddAlternative(r, std::move(first));
      if (z >= 0) b_.AddAlternative(r, {Symbol::Byte('0'), Symbol::Ref(z)});
      z = r;
    }
    return {Symbol::Byte('.'), Symbol::Ref(z)};
  }

 private:
  static int64_t Pow10(int n) {
    int64_t p = 1;
    for (int i = 0; i < n; ++i) p *= 10;
    return p;
  }
  static Symbol Digit() { return Symbol::Bytes(DigitRange('0', '9')); }

  Sequence One(std::vector<Sequence> alts, const std::string& what) {
    if (alts.size() == 1) return std::move(alts[0]);
    const int r = b_.NewRule(absl::StrCat(name_, " ", what));
    for (Sequence& a : alts) b_.AddAlternative(r, std::move(a));
    return {Symbol::Ref(r)};
  }

  // The digit strings of x's length from x to y (x <= y, same length).
  Sequence Fixed(const std::string& x, const std::string& y) {
    size_t i = 0;
    while (i < x.size() && x[i] == y[i]) ++i;
    Sequence out = Literal(x.substr(0, i));
    if (i == x.size()) return out;
    const size_t rest = x.size() - i - 1;
    const std::string xs = x.substr(i + 1), ys = y.substr(i + 1);
    const bool x_low = xs == std::string(rest, '0'), y_high = ys == std::string(rest, '9');
    std::vector<Sequence> alts;
    const char lo = x_low ? x[i] : char(x[i] + 1), hi = y_high ? y[i] : char(y[i] - 1);
    if (!x_low) alts.push_back(Concat({Symbol::Byte(uint8_t(x[i]))}, Fixed(xs, std::string(rest, '9'))));
    if (lo <= hi) {
      Sequence any = {Symbol::Bytes(DigitRange(lo, hi))};
      for (size_t k = 0; k < rest; ++k) any.push_back(Digit());
      alts.push_back(std::move(any));
    }
    if (!y_high) alts.push_back(Concat({Symbol::Byte(uint8_t(y[i]))}, Fixed(std::string(rest, '0'), ys)));
    return Concat(std::move(out), One(std::move(alts), "digits"));
  }

  GrammarBuilder& b_;
  std::string name_;
};

// A bound as an exact decimal: -(i.f) when neg; f without trailing zeros.
struct Dec {
  bool neg = false;
  int64_t i = 0;
  std::string f;
  bool strict = false;
};

// `v` as a Dec: its JavaScript text (what Ajv compares); past our 16 digits clamped,
// nullopt when its fraction has more digits than we write.
std::optional<Dec> ToDec(const json& v) {
  std::string t = JsonLexicon::NumberText(v);
  Dec d;
  if (!t.empty() && t[0] == '-') {
    d.neg = true;
    t.erase(0, 1);
  }
  const size_t dot = t.find('.');
  const std::string ip = t.substr(0, dot);
  if (t.find('e') != std::string::npos || ip.size() > 17) {
    if (!(std::fabs(v.get<double>()) >= 1e16)) return std::nullopt;
    d.i = kMaxMagnitude + 2;  // past every text
    return d;
  }
  d.i = std::stoll(ip);
  d.f = dot == std::string::npos ? "" : t.substr(dot + 1);
  if (d.f.size() > 16) return std::nullopt;
  if (d.i == 0 && d.f.empty()) d.neg = false;
  return d;
}

// The fractions (none, or "." and 1 to 16 digits) F with lo <= 0.F <= hi (or <), each
// bound given by its digits; nullopt when there is none. States: the digits written and
// whether they equal each bound's so far.
std::optional<Sequence> FracRange(GrammarBuilder& b, const std::string& name, const std::optional<Dec>& lo,
                                  const std::optional<Dec>& hi) {
  const std::string lf = lo ? lo->f : "", hf = hi ? hi->f : "";
  auto digit = [](const std::string& f, int i) { return i < int(f.size()) ? f[size_t(i)] : '0'; };
  auto end_ok = [&](int i, bool tl, bool th) {
    return (!tl || (i >= int(lf.size()) && !lo->strict)) && (!th || i < int(hf.size()) || !hi->strict);
  };
  struct Step {
    char from, to;
    bool tl, th;
  };
  // The digit ranges from state (i, tl, th), with the state each leads to.
  auto steps = [&](int i, bool tl, bool th) {
    std::vector<Step> out;
    const char lo_d = tl ? digit(lf, i) : '0', hi_d = th ? digit(hf, i) : '9';
    for (char c = lo_d; c <= hi_d; ++c) {
      const bool ntl = tl && c == digit(lf, i), nth = th && c == digit(hf, i);
      if (!out.empty() && out.back().to == c - 1 && out.back().tl == ntl && out.back().th == nth) {
        out.back().to = c;
      } else {
        out.push_back({c, c, ntl, nth});
      }
    }
    return out;
  };
  std::map<std::tuple<int, bool, bool>, int> memo;  // -1: no fraction from there
  std::function<int(int, bool, bool)> state = [&](int i, bool tl, bool th) -> int {
    if (auto it = memo.find({i, tl, th}); it != memo.end()) return it->second;
    std::vector<Sequence> alts;
    if (end_ok(i, tl, th)) alts.emplace_back();
    if (i < 16) {
      for (const Step& st : steps(i, tl, th)) {
        const int next = state(i + 1, st.tl, st.th);
        if (next >= 0) alts.push_back({Symbol::Bytes(DigitRange(st.from, st.to)), Symbol::Ref(next)});
      }
    }
    int r = -1;
    if (!alts.empty()) {
      r = b.NewRule(absl::StrCat(name, " frac-", i, tl ? "l" : "", th ? "h" : ""));
      for (Sequence& a : alts) b.AddAlternative(r, std::move(a));
    }
    return memo[{i, tl, th}] = r;
  };
  std::vector<Sequence> alts;
  const bool tl = lo.has_value(), th = hi.has_value();
  if (end_ok(0, tl, th)) alts.emplace_back();
  for (const Step& st : steps(0, tl, th)) {
    const int next = state(1, st.tl, st.th);
    if (next >= 0) alts.push_back({Symbol::Byte('.'), Symbol::Bytes(DigitRange(st.from, st.to)), Symbol::Ref(next)});
  }
  if (alts.empty()) return std::nullopt;
  const int r = b.NewRule(name + " frac");
  for (Sequence& a : alts) b.AddAlternative(r, std::move(a));
  return Sequence{Symbol::Ref(r)};
}

// The magnitudes m (integer part and fraction) with lower <= m <= upper (or <): an
// integer part strictly between the bounds' with any fraction, and at each bound's
// integer part the fractions FracRange allows.
void DecimalMagnitudes(Digits& d, std::optional<Dec> lower, std::optional<Dec> upper,
                       const Sequence& sign, std::vector<Sequence>& alts) {
  if (lower && lower->i > kMaxMagnitude) return;
  if (upper && upper->i > kMaxMagnitude) upper.reset();
  auto at = [&](int64_t k, const std::optional<Dec>& lo, const std::optional<Dec>& hi) {
    if (std::optional<Sequence> f = FracRange(d.builder(), d.name(), lo, hi)) {
      alts.push_back(Concat(Concat(sign, d.Range(k, k)), *f));
    }
  };
  if (lower && upper) {
    if (lower->i > upper->i) return;
    if (lower->i == upper->i) {
      at(lower->i, lower, upper);
      return;
    }
  }
  if (lower) at(lower->i, lower, std::nullopt);
  const int64_t start = lower ? lower->i + 1 : 0, end = upper ? upper->i - 1 : kMaxMagnitude;
  if (start <= end) alts.push_back(Concat(Concat(sign, d.Range(start, end)), d.AnyFraction()));
  if (upper) at(upper->i, std::nullopt, upper);
}

// The magnitudes m (integer part, fraction unless integer_only) with lower <= m (or <)
// and m <= upper (or <); alternatives appended to `alts` after `sign`.
void Magnitudes(Digits& d, std::optional<Bound> lower, std::optional<Bound> upper,
                bool integer_only, const Sequence& sign, std::vector<Sequence>& alts) {
  if (integer_only) {
    // Inclusive bounds on the integer itself.
    int64_t lo = lower ? lower->k + (lower->strict ? 1 : 0) : 0;
    int64_t hi = upper ? upper->k - (upper->strict ? 1 : 0) : kMaxMagnitude;
    lo = std::max<int64_t>(lo, 0);
    hi = std::min(hi, kMaxMagnitude);
    if (lo <= hi) alts.push_back(Concat(sign, d.Range(lo, hi)));
    return;
  }
  const int64_t a = lower ? lower->k : 0;
  // Integer parts with any fraction: from a (a+1 when strict) to below the upper bound.
  const int64_t lo = lower && lower->strict ? a + 1 : a;
  const int64_t hi = upper ? upper->k - 1 : kMaxMagnitude;
  if (std::max<int64_t>(lo, 0) <= std::min(hi, kMaxMagnitude)) {
    alts.push_back(Concat(Concat(sign, d.Range(std::max<int64_t>(lo, 0), std::min(hi, kMaxMagnitude))),
                          d.AnyFraction()));
  }
  // a itself (strict lower): a fraction that is not 0, below the upper bound.
  if (lower && lower->strict && a <= kMaxMagnitude && (!upper || a + 1 <= upper->k)) {
    alts.push_back(Concat(Concat(sign, d.Range(a, a)), d.NonZeroFraction()));
  }
  // The upper bound itself (not strict): no fraction but zeros.
  if (upper && !upper->strict && upper->k <= kMaxMagnitude &&
      (!lower || upper->k > a || (upper->k == a && !lower->strict))) {
    alts.push_back(Concat(Concat(sign, d.Range(upper->k, upper->k)), d.ZeroFraction()));
  }
}

}  // namespace

absl::StatusOr<int> SchemaCompiler::CompileNumber(const json& s, const std::string& ptr,
                                                  bool integer_only) {
  // The bounds, each as (value, strict, keyword).
  struct Found {
    double v;
    bool strict;
    std::string key;
    json value;
  };
  std::optional<Found> lower, upper;
  for (const auto& side :
       {std::tuple<const char*, const char*, bool>{"minimum", "exclusiveMinimum", true},
        {"maximum", "exclusiveMaximum", false}}) {
    // Named copies, not a structured binding: the lambda below captures them, which
    // clang (the sanitizer builds) refuses for bindings.
    const char* const bound = std::get<0>(side);
    const char* const exclusive = std::get<1>(side);
    const bool is_lower = std::get<2>(side);
    std::optional<Found>& slot = is_lower ? lower : upper;
    const bool draft4 = Has(s, exclusive) && s[exclusive].is_boolean();
    auto take = [&](const char* key, bool strict) -> absl::Status {
      if (!s[key].is_number()) return Invalid(key, ptr, "must be a number");
      const double v = s[key].get<double>();
      if (!std::isfinite(v)) return Invalid(key, ptr, "must be a finite number");
      const bool tighter = !slot || (is_lower ? (v > slot->v || (v == slot->v && strict))
                                              : (v < slot->v || (v == slot->v && strict)));
      if (tighter) slot = Found{v, strict, key, s[key]};
      return absl::OkStatus();
    };
    if (Has(s, bound)) {
      if (absl::Status st = take(bound, draft4 && s[exclusive].get<bool>()); !st.ok()) return st;
    }
    if (Has(s, exclusive) && !draft4) {
      if (absl::Status st = take(exclusive, true); !st.ok()) return st;
    }
  }
  // ajv-formats' int32 and int64 (integers, int32 within 32 bits); float and double hold
  // for any number; the formats of strings do not apply to numbers.
  if (Has(s, "format") && !NumberFormat(s["format"])) {
    // ajv-formats' formats of strings (which do not apply to numbers); any other is not
    // known to hold for numbers or not.
    static const std::set<std::string> kStringFormats = {
        "date", "time", "date-time", "iso-time", "iso-date-time", "duration", "uri",
        "uri-reference", "uri-template", "url", "email", "hostname", "ipv4", "ipv6", "regex",
        "uuid", "json-pointer", "json-pointer-uri-fragment", "relative-json-pointer", "byte",
        "password", "binary"};
    if (!s["format"].is_string() || !kStringFormats.count(s["format"].get<std::string>())) {
      return Unsupported("format", ptr, "on a number: only int32, int64, float, double");
    }
  }
  if (Has(s, "format") && NumberFormat(s["format"])) {
    if (s["format"] == "int32" || s["format"] == "int64") integer_only = true;
    if (s["format"] == "int32") {
      for (auto [v, is_lower] : {std::pair<double, bool>{-2147483648.0, true}, {2147483647.0, false}}) {
        std::optional<Found>& slot = is_lower ? lower : upper;
        if (!slot || (is_lower ? v > slot->v : v < slot->v)) slot = Found{v, false, "format", json(int64_t(v))};
      }
    }
  }
  if (Has(s, "multipleOf")) {
    const json& m = s["multipleOf"];
    if (!m.is_number() || !(m.get<double>() > 0)) return Invalid("multipleOf", ptr, "must be a number above 0");
    if (!(integer_only && m.get<double>() == 1)) {
      return Unsupported("multipleOf", ptr, "only multipleOf 1 on integers");
    }
  }
  if (!lower && !upper) return (integer_only ? lex_.Integer() : lex_.Number()).rule;

  if (!integer_only) {
    std::optional<Dec> lo, hi;
    for (auto [f, slot] : {std::pair<const std::optional<Found>*, std::optional<Dec>*>{&lower, &lo}, {&upper, &hi}}) {
      if (!*f) continue;
      *slot = ToDec((*f)->value);
      if (!*slot) {
        return Unsupported((*f)->key, ptr, "a bound with more than 16 fraction digits");
      }
      (*slot)->strict = (*f)->strict;
    }
    if (absl::Status st = lex_.Reserve(6 * 16 * 4 + 200, "number bounds at " + Where(ptr)); !st.ok()) {
      return st;
    }
    Digits d(b_, Where(ptr));
    std::vector<Sequence> alts;
    auto zero = [](const Dec& x) { return x.i == 0 && x.f.empty(); };
    auto abs = [](Dec x) { x.neg = false; return x; };
    // Without a sign: m = x.
    {
      std::optional<Dec> ml, mu;
      bool none = false;
      if (lo && !lo->neg && (!zero(*lo) || lo->strict)) ml = lo;
      if (hi) {
        if ((hi->neg && !zero(*hi)) || (zero(*hi) && hi->strict)) none = true;
        mu = hi;
      }
      if (!none) DecimalMagnitudes(d, ml, mu, {}, alts);
    }
    // With a minus: x = -m, so x >= L is m <= -L and x <= U is m >= -U.
    {
      std::optional<Dec> ml, mu;
      bool none = false;
      if (hi && ((hi->neg && !zero(*hi)) || (zero(*hi) && hi->strict))) ml = abs(*hi);
      if (lo) {
        if ((!lo->neg && !zero(*lo)) || (zero(*lo) && lo->strict)) none = true;
        mu = abs(*lo);
      }
      if (!none) DecimalMagnitudes(d, ml, mu, {Symbol::Byte('-')}, alts);
    }
    if (alts.empty()) return kNever;
    return Rule(ptr, "number", std::move(alts));
  }

  // As integer bounds: ceil/floor (inclusive).
  auto integral = [&](const Found& f, bool is_lower) -> absl::StatusOr<Bound> {
    double v = f.v;
    bool strict = f.strict;
    if (std::floor(v) != v) {
      v = is_lower ? std::ceil(v) : std::floor(v);
      strict = false;
    }
    const double cap = 1e17;  // past every text we write: clamp
    v = std::max(-cap, std::min(cap, v));
    return Bound{int64_t(v), strict};
  };
  std::optional<Bound> lo, hi;
  if (lower) {
    absl::StatusOr<Bound> b = integral(*lower, true);
    if (!b.ok()) return b.status();
    lo = *b;
  }
  if (upper) {
    absl::StatusOr<Bound> b = integral(*upper, false);
    if (!b.ok()) return b.status();
    hi = *b;
  }
  if (absl::Status st = lex_.Reserve(3 * 16 * 16 + 80, "number bounds at " + Where(ptr)); !st.ok()) {
    return st;
  }
  Digits d(b_, Where(ptr));
  std::vector<Sequence> alts;
  // Without a sign: m = x. x >= k holds for every m >= 0 when k < 0 (or k == 0, not strict).
  {
    std::optional<Bound> ml, mu;
    if (lo && (lo->k > 0 || (lo->k == 0 && lo->strict))) ml = lo;
    bool none = false;
    if (hi) {
      if (hi->k < 0 || (hi->k == 0 && hi->strict)) none = true;
      mu = hi;
    }
    if (!none) Magnitudes(d, ml, mu, integer_only, {}, alts);
  }
  // With a minus: x = -m, so x >= k is m <= -k and x <= k is m >= -k.
  {
    std::optional<Bound> ml, mu;
    bool none = false;
    if (lo) {
      if (-lo->k < 0 || (lo->k == 0 && lo->strict)) none = true;
      mu = Bound{-lo->k, lo->strict};
    }
    if (hi && (-hi->k > 0 || (hi->k == 0 && hi->strict))) ml = Bound{-hi->k, hi->strict};
    if (!none) Magnitudes(d, ml, mu, integer_only, {Symbol::Byte('-')}, alts);
  }
  if (alts.empty()) return kNever;
  return Rule(ptr, integer_only ? "integer" : "number", std::move(alts));
}

}  // namespace attnserve::grammar::schema
