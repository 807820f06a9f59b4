#include "server/grammar/schema_pattern.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/grammar/regex_syntax.h"

namespace attnserve::grammar {
namespace {

using regex::Branch;
using regex::Lengths;
using regex::Node;
using regex::kLengthCap;

// Compiles regular expression nodes to the bytes of their strings' JSON bodies.
class Compiler {
 public:
  Compiler(JsonLexicon& lex, std::string where) : lex_(lex), where_(std::move(where)) {}

  // nullopt: the node matches no string we can write.
  absl::StatusOr<std::optional<Sequence>> Compile(const Node& n) {
    GrammarBuilder& b = lex_.builder();
    switch (n.kind) {
      case Node::Kind::kSet: {
        std::optional<Symbol> s = lex_.EncodedChar(n.set);
        if (!s) return std::optional<Sequence>();
        return std::optional<Sequence>(Sequence{*s});
      }
      case Node::Kind::kConcat: {
        Sequence out;
        for (const Node& k : n.kids) {
          absl::StatusOr<std::optional<Sequence>> s = Compile(k);
          if (!s.ok() || !s->has_value()) return s;
          out = Concat(std::move(out), **s);
        }
        return std::optional<Sequence>(std::move(out));
      }
      case Node::Kind::kAlt: {
        std::vector<Sequence> alts;
        for (const Node& k : n.kids) {
          absl::StatusOr<std::optional<Sequence>> s = Compile(k);
          if (!s.ok()) return s;
          if (s->has_value()) alts.push_back(**std::move(s));
        }
        if (alts.empty()) return std::optional<Sequence>();
        if (alts.size() == 1) return std::optional<Sequence>(std::move(alts[0]));
        if (absl::Status st = lex_.Reserve(1, Where()); !st.ok()) return st;
        const int r = b.NewRule("pattern-alt");
        for (Sequence& a : alts) b.AddAlternative(r, std::move(a));
        return std::optional<Sequence>(Sequence{Symbol::Ref(r)});
      }
      case Node::Kind::kRepeat:
        return Repeat(n);
    }
    return std::optional<Sequence>();
  }

 private:
  std::string Where() const { return absl::StrCat("pattern at ", where_); }

  absl::StatusOr<std::optional<Sequence>> Repeat(const Node& n) {
    GrammarBuilder& b = lex_.builder();
    absl::StatusOr<std::optional<Sequence>> body = Compile(n.kids[0]);
    if (!body.ok()) return body;
    if (!body->has_value()) {
      return n.min == 0 ? std::optional<Sequence>(Sequence{}) : std::optional<Sequence>();
    }
    if ((*body)->empty() || n.max == 0) return std::optional<Sequence>(Sequence{});
    const bool unbounded = n.max < 0;
    if (unbounded && Lengths(n.kids[0]).first == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unsupported keyword 'pattern' at ", where_,
          ": an unbounded repetition (*, +, {n,}) of a part that can match the empty string"));
    }
    if (absl::Status st = lex_.Reserve(1, Where()); !st.ok()) return st;
    Symbol item = (**body)[0];
    if ((*body)->size() > 1) item = Symbol::Ref(b.RuleOf("pattern-item", **body));
    absl::StatusOr<Sequence> out = lex_.Repeat(item, n.min, n.max, "pattern-repeat");
    if (!out.ok()) return out.status();
    return std::optional<Sequence>(*std::move(out));
  }

  JsonLexicon& lex_;
  std::string where_;
};

absl::StatusOr<std::optional<StringBodyRule>> AddRegex(JsonLexicon& lex, std::string_view pattern,
                                                       const std::string& where, int max_depth) {
  absl::StatusOr<std::vector<Branch>> branches = regex::Parse(pattern, where, max_depth);
  if (!branches.ok()) return branches.status();
  Compiler compiler(lex, where);
  GrammarBuilder& b = lex.builder();
  std::vector<Sequence> alts;
  StringBodyRule out;
  out.min_length = kLengthCap;
  out.max_length = 0;
  std::optional<Symbol> any;  // any code point, any number of times
  for (const Branch& br : *branches) {
    absl::StatusOr<std::optional<Sequence>> seq = compiler.Compile(br.node);
    if (!seq.ok()) return seq.status();
    if (!seq->has_value()) continue;
    if ((!br.start || !br.end) && !any) {
      if (absl::Status st = lex.Reserve(2, "pattern at " + where); !st.ok()) return st;
      any = Symbol::Ref(b.Star("pattern-any", {*lex.EncodedChar(CodePointSet::Range(0, 0x10FFFF))}));
    }
    Sequence alt;
    if (!br.start) alt.push_back(*any);
    alt = Concat(std::move(alt), **seq);
    if (!br.end) alt.push_back(*any);
    alts.push_back(std::move(alt));
    auto [lo, hi] = Lengths(br.node);
    out.min_length = std::min(out.min_length, lo);
    if (!br.start || !br.end || hi < 0) {
      out.max_length = -1;
    } else if (out.max_length >= 0) {
      out.max_length = std::max(out.max_length, hi);
    }
  }
  if (alts.empty()) return std::optional<StringBodyRule>();
  if (absl::Status st = lex.Reserve(1, "pattern at " + where); !st.ok()) return st;
  out.rule = b.NewRule(absl::StrCat("pattern ", where));
  for (Sequence& a : alts) b.AddAlternative(out.rule, std::move(a));
  return std::optional<StringBodyRule>(out);
}

// ajv-formats' full formats (formats.js: date, getTime(true), getDateTime(true), uuid) as
// patterns, times as RFC 3339 writes them (what every validator accepts): the offset
// as Z or +hh:mm, date and time separated by T (Ajv also takes any \s, +hhmm and +hh).
constexpr char kDate[] =
    "(?:\\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\\d|30)"
    "|02-(?:0[1-9]|1\\d|2[0-8]))"
    "|(?:\\d\\d(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)-02-29)";
constexpr char kTime[] =
    "(?:[01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(?:\\.\\d{1,9})?(?:[zZ]|[+-](?:[01]\\d|2[0-3]):[0-5]\\d)";
// ajv-formats' email (case-insensitive there: A-Z added) and ipv4, whole. For uri,
// uri-reference, url, hostname and byte, a part of what ajv-formats accepts (and what
// RFC 3986 and 1123 call valid): a scheme, "://", a host of dot-separated labels, an
// optional port, path, query and fragment of unreserved, sub-delims, ":" "@" and
// %-escapes; hostnames of up to 3 labels; base64 without line breaks.
constexpr char kEmail[] =
    "[a-zA-Z0-9!#$%&'*+/=?^_`{|}~-]+(?:\\.[a-zA-Z0-9!#$%&'*+/=?^_`{|}~-]+)*"
    "@(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?\\.)+[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?";
constexpr char kIpv4[] =
    "(?:(?:25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)\\.){3}(?:25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)";
constexpr char kLabel[] = "[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?";
constexpr char kPchar[] = "(?:[a-zA-Z0-9._~!$&'()*+,;=:@-]|%[0-9a-fA-F]{2})";
constexpr char kQueryChar[] = "(?:[a-zA-Z0-9._~!$&'()*+,;=:@/?-]|%[0-9a-fA-F]{2})";
constexpr char kUuid[] =
    "(?:[uU][rR][nN]:[uU][uU][iI][dD]:)?[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}";

}  // namespace

absl::StatusOr<std::optional<StringBodyRule>> AddPattern(JsonLexicon& lexicon,
                                                         std::string_view pattern,
                                                         const std::string& where, int max_depth) {
  return AddRegex(lexicon, pattern, where, max_depth);
}

absl::StatusOr<StringBodyRule> AddFormat(JsonLexicon& lexicon, std::string_view format,
                                         const std::string& where) {
  std::string pattern;
  if (format == "date") {
    pattern = kDate;
  } else if (format == "time") {
    pattern = kTime;
  } else if (format == "date-time") {
    pattern = absl::StrCat(kDate, "[tT]", kTime);
  } else if (format == "uuid") {
    pattern = kUuid;
  } else if (format == "email") {
    pattern = kEmail;
  } else if (format == "ipv4") {
    pattern = kIpv4;
  } else if (format == "hostname") {
    pattern = absl::StrCat(kLabel, "(?:\\.", kLabel, "){0,2}");
  } else if (format == "uri" || format == "uri-reference" || format == "url") {
    const std::string host = absl::StrCat("[a-z0-9]+(?:-[a-z0-9]+)*(?:\\.[a-z0-9]+(?:-[a-z0-9]+)*)*");
    const std::string tail = absl::StrCat("(?:/", kPchar, "*)*(?:\\?", kQueryChar, "*)?(?:#", kQueryChar, "*)?");
    if (format == "url") {
      // url: http, https or ftp, a domain whose last label is letters, then nothing or "/".
      pattern = absl::StrCat("(?:https?|ftp)://[a-z0-9]+(?:-[a-z0-9]+)*(?:\\.[a-z0-9]+(?:-[a-z0-9]+)*)*",
                             "\\.[a-z]{2,}(?::[1-9]\\d{1,4})?",
                             "(?:/(?:[a-zA-Z0-9._~!$&'()*+,;=:@/?#-]|%[0-9a-fA-F]{2})*)?");
    } else {
      pattern = absl::StrCat("[a-z][a-z0-9+.-]*://", host, "(?::\\d{1,5})?", tail);
      if (format == "uri-reference") {
        // Or a path from the root, or a fragment alone.
        pattern = absl::StrCat(pattern, "|/", kPchar, "+(?:/", kPchar, "*)*(?:\\?", kQueryChar,
                               "*)?(?:#", kQueryChar, "*)?|#", kQueryChar, "*");
      }
    }
  } else if (format == "byte") {
    pattern = "(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?";
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "unsupported keyword 'format' at ", where, " (format '", std::string(format),
        "' is not one of date, time, date-time, uuid, email, ipv4, hostname, uri, "
        "uri-reference, url, byte)"));
  }
  absl::StatusOr<std::optional<StringBodyRule>> rule =
      AddRegex(lexicon, absl::StrCat("^(?:", pattern, ")$"), where, 8);
  if (!rule.ok()) return rule.status();
  return **rule;  // never empty
}

}  // namespace attnserve::grammar
