// The typed schemas of SchemaCompiler (schema_compiler.h): enum and const, and the
// grammar of each type with its keywords.
#include <algorithm>
#include <climits>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "server/grammar/schema_compiler.h"
#include "server/grammar/regex_syntax.h"
#include "server/grammar/schema_pattern.h"

namespace attnserve::grammar::schema {

constexpr int64_t kLongString = 1000;

bool NumberFormat(const json& f) {
  return f.is_string() && (f == "int32" || f == "int64" || f == "float" || f == "double");
}

absl::StatusOr<unsigned> SchemaCompiler::Types(const json& s, const std::string& ptr) const {
  if (!Has(s, "type")) return kAllTypes;
  const json& t = s["type"];
  std::vector<json> names =
      t.is_array() ? std::vector<json>(t.begin(), t.end()) : std::vector<json>{t};
  unsigned mask = 0;
  std::set<std::string> seen;
  for (const json& n : names) {
    const unsigned bit = n.is_string() ? TypeNamed(n.get<std::string>()) : 0;
    if (bit == 0 || !seen.insert(n.get<std::string>()).second) {
      return Invalid("type", ptr,
                     "must be one of object, array, string, number, integer, boolean, null, "
                     "or a list of them without repeats");
    }
    mask |= bit;
  }
  if (mask == 0) return Invalid("type", ptr, "must not be an empty list");
  return mask;
}

absl::StatusOr<int64_t> SchemaCompiler::Count(const json& s, const char* key,
                                              const std::string& ptr, int64_t absent) const {
  if (!Has(s, key)) return absent;
  const json& v = s[key];
  if (v.is_number_unsigned()) return int64_t(std::min<uint64_t>(v.get<uint64_t>(), INT_MAX));
  if (v.is_number_integer() && v.get<int64_t>() >= 0) {
    return std::min<int64_t>(v.get<int64_t>(), INT_MAX);
  }
  if (v.is_number_float() && v.get<double>() >= 0 && std::floor(v.get<double>()) == v.get<double>()) {
    return int64_t(std::min<double>(v.get<double>(), INT_MAX));
  }
  return Invalid(key, ptr, "must be a non-negative integer");
}

absl::StatusOr<int> SchemaCompiler::Trie(const std::vector<std::string>& texts,
                                         const std::string& ptr) {
  struct Node {
    std::map<uint8_t, int> next;
    bool end = false;
  };
  std::vector<Node> nodes(1);
  for (const std::string& t : texts) {
    int n = 0;
    for (char c : t) {
      auto it = nodes[size_t(n)].next.find(uint8_t(c));
      if (it == nodes[size_t(n)].next.end()) {
        nodes.emplace_back();
        it = nodes[size_t(n)].next.emplace(uint8_t(c), int(nodes.size()) - 1).first;
      }
      n = it->second;
    }
    nodes[size_t(n)].end = true;
  }
  int64_t branching = 1;
  for (const Node& n : nodes) branching += (n.end || n.next.size() != 1) ? 1 : 0;
  if (absl::Status st = lex_.Reserve(branching, "enum at " + Where(ptr)); !st.ok()) return st;
  // A node's text from there: its single-child chain as bytes, then a rule where it
  // branches or may end.
  std::function<Sequence(int)> emit = [&](int n) {
    Sequence out;
    while (!nodes[size_t(n)].end && nodes[size_t(n)].next.size() == 1) {
      out.push_back(Symbol::Byte(nodes[size_t(n)].next.begin()->first));
      n = nodes[size_t(n)].next.begin()->second;
    }
    if (nodes[size_t(n)].next.empty()) return out;
    std::vector<Sequence> alts;
    if (nodes[size_t(n)].end) alts.emplace_back();
    for (const auto& [byte, child] : nodes[size_t(n)].next) {
      alts.push_back(Concat({Symbol::Byte(byte)}, emit(child)));
    }
    out.push_back(Symbol::Ref(Rule(ptr, "enum-branch", std::move(alts))));
    return out;
  };
  return Rule(ptr, "enum", {emit(0)});
}

namespace {

int64_t CodePoints(const std::string& utf8) {
  int64_t n = 0;
  for (char c : utf8) n += (uint8_t(c) & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

}  // namespace

absl::StatusOr<bool> SchemaCompiler::ValueAllowed(const json& s, const json& v,
                                                  const std::string& ptr) const {
  const unsigned type = TypeOfValue(v);
  auto refuse = [&](const std::string& key) {
    return Unsupported(key, ptr, "beside enum or const");
  };
  for (auto it = s.begin(); it != s.end(); ++it) {
    const std::string& k = it.key();
    if (k == "enum" || k == "const" || k == "type" || !IsValidationKeyword(k) || k == "$defs" ||
        k == "definitions") {
      continue;
    }
    const bool applies = (StringKeywords().count(k) && type == kString) ||
                         (NumberKeywords().count(k) && (type & (kInt | kFrac))) ||
                         (ObjectKeywords().count(k) && type == kObject) ||
                         ((ArrayKeywords().count(k) || k == "additionalItems") && type == kArray);
    const bool known = StringKeywords().count(k) || NumberKeywords().count(k) ||
                       ObjectKeywords().count(k) || ArrayKeywords().count(k) ||
                       k == "additionalItems" || k == "uniqueItems";
    if (!known) return refuse(k);
    if (k == "format" && NumberFormat(it.value())) {  // formats of numbers
      if (!(type & (kInt | kFrac)) || it.value() == "float" || it.value() == "double") continue;
      const double x = v.get<double>();
      if (std::floor(x) != x) return false;
      if (it.value() == "int32" && (x < -2147483648.0 || x > 2147483647.0)) return false;
      continue;
    }
    if (!applies) continue;
    if (k == "minLength" || k == "maxLength") {
      absl::StatusOr<int64_t> n = Count(s, k.c_str(), ptr, 0);
      if (!n.ok()) return n.status();
      const int64_t len = CodePoints(v.get_ref<const std::string&>());
      if (k == "minLength" ? len < *n : len > *n) return false;
      continue;
    }
    if (k == "minimum" || k == "maximum" || k == "exclusiveMinimum" || k == "exclusiveMaximum") {
      if (it.value().is_boolean()) continue;  // draft 4: read with its bound
      if (!it.value().is_number()) return Invalid(k, ptr, "must be a number");
      const double bound = it.value().get<double>(), x = v.get<double>();
      const bool lower = k == "minimum" || k == "exclusiveMinimum";
      const char* draft4 = lower ? "exclusiveMinimum" : "exclusiveMaximum";
      const bool strict = k[0] == 'e' || (Has(s, draft4) && s[draft4].is_boolean() && s[draft4].get<bool>());
      if (lower ? (strict ? !(x > bound) : !(x >= bound)) : (strict ? !(x < bound) : !(x <= bound))) {
        return false;
      }
      continue;
    }
    return refuse(k);
  }
  return true;
}

absl::StatusOr<int> SchemaCompiler::CompileEnum(const json& s, const std::string& ptr) {
  std::vector<json> values;
  if (Has(s, "enum")) {
    if (!s["enum"].is_array()) return Invalid("enum", ptr, "must be an array");
    values.assign(s["enum"].begin(), s["enum"].end());
  }
  enum_values_ += int(values.size()) + (Has(s, "const") ? 1 : 0);
  if (enum_values_ > opt_.max_enum_values) {
    return absl::InvalidArgumentError(
        absl::StrCat("schema has more than max_enum_values (", opt_.max_enum_values,
                     ") enum and const values (at ", Where(ptr), ")"));
  }
  if (Has(s, "const")) {
    const std::string c = JsonLexicon::CanonicalText(s["const"]);
    if (!Has(s, "enum")) {
      values = {s["const"]};
    } else {
      // Both: the enum values equal to const (compared as canonical texts; an object
      // const whose members come in another order is dropped: fewer, all valid).
      std::vector<json> kept;
      for (const json& v : values) {
        if (JsonLexicon::CanonicalText(v) == c) kept.push_back(v);
      }
      values = std::move(kept);
    }
  }
  absl::StatusOr<unsigned> types = Types(s, ptr);
  if (!types.ok()) return types.status();
  std::vector<std::string> scalars;
  std::vector<Sequence> alts;
  std::set<std::string> seen;
  for (const json& v : values) {
    if ((TypeOfValue(v) & *types) == 0) continue;
    absl::StatusOr<bool> allowed = ValueAllowed(s, v, ptr);
    if (!allowed.ok()) return allowed.status();
    if (!*allowed) continue;
    if (!seen.insert(JsonLexicon::CanonicalText(v)).second) continue;
    if (v.is_object() || v.is_array()) {
      alts.push_back(lex_.Value(v));
    } else {
      scalars.push_back(JsonLexicon::CanonicalText(v));
    }
  }
  if (!scalars.empty()) {
    absl::StatusOr<int> trie = Trie(scalars, ptr);
    if (!trie.ok()) return trie.status();
    alts.push_back({Symbol::Ref(*trie)});
  }
  if (alts.empty()) return kNever;
  if (alts.size() == 1 && alts[0].size() == 1 && alts[0][0].kind == Symbol::Kind::kRule) {
    return alts[0][0].rule;
  }
  return Rule(ptr, "values", std::move(alts));
}

absl::StatusOr<int> SchemaCompiler::CompileTyped(const json& s, const std::string& ptr) {
  absl::StatusOr<unsigned> declared = Types(s, ptr);
  if (!declared.ok()) return declared.status();
  unsigned types = *declared;
  auto any_of = [&](const std::set<std::string>& keys) {
    for (const std::string& k : keys) {
      if (s.contains(k)) return true;
    }
    return false;
  };
  const bool object_kw = any_of(ObjectKeywords()), array_kw = any_of(ArrayKeywords()),
             string_kw = any_of(StringKeywords()), number_kw = any_of(NumberKeywords());
  if (!Has(s, "type")) {
    // No type: the types the keywords are about (json_schema.h), else any value.
    const unsigned named = (object_kw ? kObject : 0) | (array_kw ? kArray : 0) |
                           (string_kw ? kString : 0) | (number_kw ? kInt | kFrac : 0);
    if (named != 0) types = named;
  }
  if (types == kAllTypes && !object_kw && !array_kw && !string_kw && !number_kw) {
    return lex_.AnyValue().rule;
  }
  std::vector<Sequence> alts;
  if (types & kNull) alts.push_back(Literal("null"));
  if (types & kBool) {
    alts.push_back(Literal("true"));
    alts.push_back(Literal("false"));
  }
  if (types & (kInt | kFrac)) {
    absl::StatusOr<int> r = CompileNumber(s, ptr, !(types & kFrac));
    if (!r.ok()) return r.status();
    if (*r != kNever) alts.push_back({Symbol::Ref(*r)});
  }
  using Part = absl::StatusOr<int> (SchemaCompiler::*)(const json&, const std::string&);
  for (auto [bit, part] : {std::pair<unsigned, Part>{kString, &SchemaCompiler::CompileString},
                           {kArray, &SchemaCompiler::CompileArray},
                           {kObject, &SchemaCompiler::CompileObject}}) {
    if (!(types & bit)) continue;
    absl::StatusOr<int> r = (this->*part)(s, ptr);
    if (!r.ok()) return r.status();
    if (*r != kNever) alts.push_back({Symbol::Ref(*r)});
  }
  if (alts.empty()) return kNever;
  if (alts.size() == 1 && alts[0].size() == 1 && alts[0][0].kind == Symbol::Kind::kRule) {
    return alts[0][0].rule;
  }
  return Rule(ptr, "", std::move(alts));
}

absl::StatusOr<int> SchemaCompiler::CompileString(const json& s, const std::string& ptr) {
  absl::StatusOr<int64_t> min = Count(s, "minLength", ptr, 0);
  if (!min.ok()) return min.status();
  absl::StatusOr<int64_t> max = Count(s, "maxLength", ptr, -1);
  if (!max.ok()) return max.status();
  if (*max >= 0 && *min > *max) return kNever;
  const Symbol quote = Symbol::Byte('"');
  // Formats of numbers (ajv-formats), and those that any string satisfies, ignored here.
  const bool format = Has(s, "format") && !NumberFormat(s["format"]) &&
                      !(s["format"].is_string() && (s["format"] == "password" || s["format"] == "binary"));
  if (!Has(s, "pattern") && !format) {
    if (*min == 0 && *max < 0) return lex_.String().rule;
    // A long maxLength: strings written up to kLongString code points (json_schema.h).
    if (*max > kLongString && *min <= kLongString) *max = kLongString;
    absl::StatusOr<Sequence> chars =
        lex_.Repeat(lex_.StringChar(), *min, *max, Where(ptr) + " chars");
    if (!chars.ok()) return chars.status();
    return Rule(ptr, "string", {Concat(Concat({quote}, *chars), {quote})});
  }
  if (Has(s, "pattern") && format) return Unsupported("pattern", ptr, "beside format");
  const char* key = Has(s, "pattern") ? "pattern" : "format";
  if (!s[key].is_string()) return Invalid(key, ptr, "must be a string");
  const std::string& text = s[key].get_ref<const std::string&>();
  std::optional<StringBodyRule> body;
  if (Has(s, "pattern")) {
    absl::StatusOr<std::optional<StringBodyRule>> r = AddPattern(lex_, text, Where(ptr), opt_.max_depth);
    if (!r.ok()) return r.status();
    body = *r;
  } else {
    absl::StatusOr<StringBodyRule> r = AddFormat(lex_, text, Where(ptr));
    if (!r.ok()) return r.status();
    body = *r;
  }
  if (!body) return kNever;
  // Lengths beside a pattern or format: only where its own strings already keep them.
  if (*min > body->min_length) {
    return Unsupported("minLength", ptr, absl::StrCat("beside ", key, ", which allows shorter strings"));
  }
  if (*max >= 0 && (body->max_length < 0 || body->max_length > *max)) {
    return Unsupported("maxLength", ptr, absl::StrCat("beside ", key, ", which allows longer strings"));
  }
  return Rule(ptr, key, {{quote, Symbol::Ref(body->rule), quote}});
}

absl::StatusOr<int> SchemaCompiler::CompileArray(const json& s, const std::string& ptr) {
  std::vector<int> prefix;
  // Draft 4 to 7's tuples: items as an array, then additionalItems.
  const bool tuple = Has(s, "items") && s["items"].is_array();
  const char* prefix_key = tuple ? "items" : "prefixItems";
  const char* rest_key = tuple ? "additionalItems" : "items";
  if (Has(s, prefix_key)) {
    if (!s[prefix_key].is_array()) return Invalid(prefix_key, ptr, "must be an array");
    for (size_t i = 0; i < s[prefix_key].size(); ++i) {
      absl::StatusOr<int> r =
          CompileInside(s[prefix_key][i], absl::StrCat(ptr, "/", prefix_key, "/", i));
      if (!r.ok()) return r.status();
      prefix.push_back(*r);
    }
  }
  int items = lex_.AnyValue().rule;
  if (Has(s, rest_key)) {
    absl::StatusOr<int> r = CompileInside(s[rest_key], ptr + "/" + rest_key);
    if (!r.ok()) return r.status();
    items = *r;
  }
  absl::StatusOr<int64_t> min = Count(s, "minItems", ptr, 0);
  if (!min.ok()) return min.status();
  absl::StatusOr<int64_t> max = Count(s, "maxItems", ptr, -1);
  if (!max.ok()) return max.status();
  const int64_t n_prefix = int64_t(prefix.size());
  auto item = [&](int64_t j) { return j < n_prefix ? prefix[size_t(j)] : items; };
  for (int64_t j = 0; j <= n_prefix; ++j) {  // no item j: at most j items
    if (item(j) == kNever && (*max < 0 || *max > j)) *max = j;
  }
  if (*max >= 0 && *min > *max) return kNever;
  const Symbol open = Symbol::Byte('['), close = Symbol::Byte(']'), ws = lex_.Ws();
  if (*max == 0) return Rule(ptr, "array", {{open, ws, close}});
  // tail(j), j items written: ε once j >= min, or "," and item j, up to max.
  const bool unbounded = *max < 0;
  const int64_t last = unbounded ? std::max<int64_t>({*min, n_prefix, 1}) : *max;
  if (absl::Status st = lex_.Reserve(last + 2, "array at " + Where(ptr)); !st.ok()) return st;
  int tail = -1;
  if (unbounded) {
    tail = b_.NewRule(Where(ptr) + " items-more");
    b_.AddAlternative(tail, {});
    b_.AddAlternative(tail, {Symbol::Byte(','), ws, Symbol::Ref(items), ws, Symbol::Ref(tail)});
  } else {
    tail = Rule(ptr, absl::StrCat("items-", last), {{}});
  }
  for (int64_t j = last - 1; j >= 1; --j) {
    std::vector<Sequence> alts;
    if (j >= *min) alts.emplace_back();
    alts.push_back({Symbol::Byte(','), ws, Symbol::Ref(item(j)), ws, Symbol::Ref(tail)});
    tail = Rule(ptr, absl::StrCat("items-", j), std::move(alts));
  }
  std::vector<Sequence> alts;
  if (*min == 0) alts.push_back({open, ws, close});
  alts.push_back({open, ws, Symbol::Ref(item(0)), ws, Symbol::Ref(tail), close});
  return Rule(ptr, "array", std::move(alts));
}

bool SchemaCompiler::IsReal(const json& s, const std::string& ptr) const {
  try {
    const json::json_pointer p(ptr);
    return root_.contains(p) && &root_.at(p) == &s;
  } catch (const json::exception&) {
    return false;
  }
}

absl::StatusOr<int> SchemaCompiler::KeysExcept(const std::vector<std::string>& names,
                                               const std::string& ptr) {
  // A trie of the names' code points; from each node: the next code point of a name (on
  // in the trie), any other (then anything), or the end where no name ends.
  struct Node {
    std::map<char32_t, int> next;
    bool end = false;
  };
  std::vector<Node> nodes(1);
  for (const std::string& name : names) {
    int n = 0;
    for (size_t i = 0; i < name.size();) {
      const uint8_t c = uint8_t(name[i]);
      const int len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
      char32_t cp = len == 1 ? c : c & (0x3F >> (len - 1));
      for (int k = 1; k < len && i + size_t(k) < name.size(); ++k) cp = (cp << 6) | (uint8_t(name[i + size_t(k)]) & 0x3F);
      i += size_t(len);
      auto it = nodes[size_t(n)].next.find(cp);
      if (it == nodes[size_t(n)].next.end()) {
        nodes.emplace_back();
        it = nodes[size_t(n)].next.emplace(cp, int(nodes.size()) - 1).first;
      }
      n = it->second;
    }
    nodes[size_t(n)].end = true;
  }
  if (absl::Status st = lex_.Reserve(int64_t(nodes.size()) + 4, "keys at " + Where(ptr)); !st.ok()) {
    return st;
  }
  const CodePointSet all = CodePointSet::Range(0, 0x10FFFF);
  const Symbol any = *lex_.EncodedChar(all);
  absl::StatusOr<Sequence> rest = lex_.Repeat(any, 0, -1, Where(ptr) + " key-chars");
  if (!rest.ok()) return rest.status();
  std::vector<int> rule(nodes.size(), -1);
  for (size_t n = nodes.size(); n-- > 0;) {  // children come after their parent
    const int r = b_.NewRule(absl::StrCat(Where(ptr), " key-", n));
    CodePointSet taken;
    for (const auto& [cp, child] : nodes[n].next) {
      taken.Add(cp, cp);
      if (std::optional<Symbol> c = lex_.EncodedChar(CodePointSet::Range(cp, cp))) {
        b_.AddAlternative(r, {*c, Symbol::Ref(rule[size_t(child)])});
      }
    }
    const CodePointSet other = taken.empty() ? all : taken.Complement();
    if (std::optional<Symbol> c = lex_.EncodedChar(other)) b_.AddAlternative(r, Concat({*c}, *rest));
    if (!nodes[n].end) b_.AddAlternative(r, {});
    rule[n] = r;
  }
  return Rule(ptr, "key", {{Symbol::Byte('"'), Symbol::Ref(rule[0]), Symbol::Byte('"')}});
}

absl::StatusOr<int> SchemaCompiler::CompileObject(const json& s, const std::string& ptr) {
  const json empty = json::object();
  for (const char* key : {"properties", "patternProperties"}) {
    if (Has(s, key) && !s[key].is_object()) return Invalid(key, ptr, "must be an object");
  }
  const json& declared = Has(s, "properties") ? s["properties"] : empty;
  const json& pattern_schemas = Has(s, "patternProperties") ? s["patternProperties"] : empty;
  // additionalProperties: absent or true (open: only the declared members written), false
  // (closed), or a schema for every other member.
  bool closed = false;
  const json* extra = nullptr;
  if (Has(s, "additionalProperties")) {
    const json& a = s["additionalProperties"];
    if (a.is_boolean()) {
      closed = !a.get<bool>();
    } else if (!a.is_object()) {
      return Invalid("additionalProperties", ptr, "must be a schema");
    } else if (!AlwaysTrue(a)) {
      extra = &a;
    }
  }
  std::vector<std::string> required;
  if (Has(s, "required")) {
    const json& r = s["required"];
    std::set<std::string> seen;
    for (const json& n : r.is_array() ? r : json::array({nullptr})) {
      if (!n.is_string() || !seen.insert(n.get<std::string>()).second) {
        return Invalid("required", ptr, "must be an array of distinct strings");
      }
      required.push_back(n.get<std::string>());
    }
  }
  // dependentRequired (and draft 4-7's dependencies with arrays): a name whose
  // dependencies are required is free; one required makes them required; any other is
  // not written (json_schema.h).
  std::map<std::string, std::vector<std::string>> depends;
  for (const char* key : {"dependentRequired", "dependencies"}) {
    if (!Has(s, key)) continue;
    if (!s[key].is_object()) return Invalid(key, ptr, "must be an object");
    for (auto it = s[key].begin(); it != s[key].end(); ++it) {
      if (!it.value().is_array()) return Unsupported(key, ptr, "with a schema: only arrays of names");
      for (const json& n : it.value()) {
        if (!n.is_string()) return Invalid(key, ptr, "must map names to arrays of names");
        depends[it.key()].push_back(n.get<std::string>());
      }
    }
  }
  auto is_required = [&](const std::string& n) {
    return std::find(required.begin(), required.end(), n) != required.end();
  };
  for (bool grew = true; grew;) {
    grew = false;
    for (const auto& [name, deps] : depends) {
      if (!is_required(name)) continue;
      for (const std::string& d : deps) {
        if (!is_required(d)) {
          required.push_back(d);
          grew = true;
        }
      }
    }
  }
  std::set<std::string> unwritable;  // depend on names that may be absent
  for (const auto& [name, deps] : depends) {
    for (const std::string& d : deps) {
      if (!is_required(d)) unwritable.insert(name);
    }
  }
  struct Pattern {
    std::string text;
    std::vector<regex::Branch> branches;
    const json* schema;
  };
  std::vector<Pattern> patterns;
  for (auto it = pattern_schemas.begin(); it != pattern_schemas.end(); ++it) {
    absl::StatusOr<std::vector<regex::Branch>> br =
        regex::Parse(it.key(), Where(ptr + "/patternProperties/" + Token(it.key())), opt_.max_depth);
    if (!br.ok()) return br.status();
    patterns.push_back({it.key(), *std::move(br), &it.value()});
  }
  const bool real = IsReal(s, ptr);
  auto sub = [&](const json& v, const std::string& rel) { return real ? json{{kMergeRef, ptr + rel}} : v; };
  // The patterns `name` matches (all of them when that cannot be told).
  auto matching = [&](const std::string& name) {
    std::vector<const Pattern*> out;
    for (const Pattern& p : patterns) {
      if (regex::Matches(p.branches, name).value_or(true)) out.push_back(&p);
    }
    return out;
  };
  // A member's value: its own schema (if declared) and each matching pattern's; else
  // additionalProperties'. kNever when no value may be there.
  auto value_rule = [&](const std::string& name, const json* own) -> absl::StatusOr<int> {
    const std::string at = ptr + "/properties/" + Token(name);
    std::vector<const Pattern*> m = matching(name);
    if (own != nullptr && m.empty()) return CompileInside(*own, at);
    std::vector<json> parts;
    if (own != nullptr) parts.push_back(sub(*own, "/properties/" + Token(name)));
    for (const Pattern* p : m) parts.push_back(sub(*p->schema, "/patternProperties/" + Token(p->text)));
    if (parts.empty()) {
      if (closed) return kNever;
      if (extra == nullptr) return lex_.AnyValue().rule;
      parts.push_back(sub(*extra, "/additionalProperties"));
    }
    made_.push_back(std::make_unique<json>(json{{kMergeAll, std::move(parts)}}));
    return CompileInside(*made_.back(), at);
  };

  struct Property {
    std::string name;
    int rule;
    bool required;
  };
  std::vector<Property> props;
  std::vector<std::string> names;
  for (const std::string& name : unwritable) {
    if (!declared.contains(name)) names.push_back(name);  // no other member by that name
  }
  for (auto it = declared.begin(); it != declared.end(); ++it) {
    const bool req = std::find(required.begin(), required.end(), it.key()) != required.end();
    names.push_back(it.key());
    if (unwritable.count(it.key())) continue;
    absl::StatusOr<int> r = value_rule(it.key(), &it.value());
    if (!r.ok()) return r.status();
    if (*r == kNever && req) return kNever;
    if (*r != kNever) props.push_back({it.key(), *r, req});
  }
  for (const std::string& name : required) {
    if (declared.contains(name)) continue;
    absl::StatusOr<int> r = value_rule(name, nullptr);
    if (!r.ok()) return r.status();
    if (*r == kNever) return kNever;  // required, yet no value may be there
    props.push_back({name, *r, true});
    names.push_back(name);
  }

  absl::StatusOr<int64_t> min_props = Count(s, "minProperties", ptr, 0);
  if (!min_props.ok()) return min_props.status();
  absl::StatusOr<int64_t> max_props = Count(s, "maxProperties", ptr, -1);
  if (!max_props.ok()) return max_props.status();

  // Members past the declared ones: under the one pattern (when no declared name matches
  // it), or additionalProperties' schema with any other name. Not under maxProperties.
  int key = -1, value = kNever;
  // No constraint on any member (a declared property no value satisfies is one).
  bool any_object = names.empty() && !closed && patterns.empty() && extra == nullptr;
  if (any_object && *min_props == 1 && *max_props < 0) {
    // Any object but {}: one member or more, any names.
    key = lex_.String().rule;
    value = lex_.AnyValue().rule;
    any_object = false;
  } else if (*max_props < 0) {
    if (patterns.size() == 1) {
      bool clash = false;
      for (const std::string& n : names) clash = clash || !matching(n).empty();
      if (!clash) {
        const std::string at = ptr + "/patternProperties/" + Token(patterns[0].text);
        absl::StatusOr<std::optional<StringBodyRule>> body =
            AddPattern(lex_, patterns[0].text, Where(at), opt_.max_depth);
        if (!body.ok()) return body.status();
        if (*body) {
          absl::StatusOr<int> v = CompileInside(*patterns[0].schema, at);
          if (!v.ok()) return v.status();
          value = *v;
          key = Rule(at, "key", {{Symbol::Byte('"'), Symbol::Ref((*body)->rule), Symbol::Byte('"')}});
        }
      }
    } else if (patterns.empty() && extra != nullptr) {
      absl::StatusOr<int> v = CompileInside(*extra, ptr + "/additionalProperties");
      if (!v.ok()) return v.status();
      value = *v;
      if (value != kNever) {
        absl::StatusOr<int> k = KeysExcept(names, ptr);
        if (!k.ok()) return k.status();
        key = *k;
      }
    }
  }
  const bool extras = key >= 0 && value != kNever;
  const Symbol ws = lex_.Ws();
  // more ::= ε | "," member more, member ::= key ":" value.
  int more = -1;
  Sequence member;
  if (extras) {
    if (absl::Status st = lex_.Reserve(1, "object at " + Where(ptr)); !st.ok()) return st;
    member = {Symbol::Ref(key), ws, Symbol::Byte(':'), ws, Symbol::Ref(value), ws};
    more = b_.NewRule(Where(ptr) + " more-members");
    b_.AddAlternative(more, {});
    b_.AddAlternative(more, Concat(Concat({Symbol::Byte(','), ws}, member), {Symbol::Ref(more)}));
  }

  // minProperties and maxProperties where every object written keeps them.
  int64_t n_required = 0;
  for (const Property& p : props) n_required += p.required ? 1 : 0;
  if (*max_props >= 0 && n_required > *max_props) return kNever;
  // Past the required members, objects written hold one member at least (no {}).
  if (*min_props > n_required && !((extras || !props.empty()) && *min_props == 1)) {
    return Unsupported("minProperties", ptr, "above the count of required properties");
  }
  if (*max_props >= 0 && (any_object || int64_t(props.size()) > *max_props)) {
    return Unsupported("maxProperties", ptr, "below the count of properties an object may have");
  }
  if (any_object) return lex_.AnyObject().rule;
  const Sequence empty_object = {Symbol::Byte('{'), ws, Symbol::Byte('}')};
  if (props.empty()) {
    std::vector<Sequence> alts;
    if (*min_props == 0) alts.push_back(empty_object);
    if (extras) alts.push_back(Concat(Concat({Symbol::Byte('{'), ws}, member), {Symbol::Ref(more), Symbol::Byte('}')}));
    return Rule(ptr, "object", std::move(alts));
  }
  const int n = int(props.size());
  int last_required = -1;
  for (int k = 0; k < n; ++k) {
    if (props[size_t(k)].required) last_required = k;
  }
  if (absl::Status st = lex_.Reserve(2 * n + 1, "object at " + Where(ptr)); !st.ok()) return st;
  // choice(k): the next property written is k, or (k optional) a later one; then rest(k+1).
  // rest(k): the object may end (no required property from k on) or go on with the other
  // members, or "," and choice(k).
  int rest = more, choice = -1;
  for (int k = n - 1; k >= 0; --k) {
    const Property& p = props[size_t(k)];
    Sequence m = Literal("\"" + JsonLexicon::StringBody(p.name) + "\"");
    m = Concat(std::move(m), {ws, Symbol::Byte(':'), ws, Symbol::Ref(p.rule), ws});
    if (rest >= 0) m.push_back(Symbol::Ref(rest));
    std::vector<Sequence> alts = {std::move(m)};
    if (!p.required && choice >= 0) alts.push_back({Symbol::Ref(choice)});
    choice = Rule(ptr, absl::StrCat("member-", k), std::move(alts));
    if (k == 0) break;
    std::vector<Sequence> rest_alts;
    if (k > last_required) rest_alts.push_back(extras ? Sequence{Symbol::Ref(more)} : Sequence{});
    rest_alts.push_back({Symbol::Byte(','), ws, Symbol::Ref(choice)});
    rest = Rule(ptr, absl::StrCat("after-", k - 1), std::move(rest_alts));
  }
  std::vector<Sequence> alts;
  if (last_required < 0) {
    if (*min_props == 0) alts.push_back(empty_object);
    if (extras) alts.push_back(Concat(Concat({Symbol::Byte('{'), ws}, member), {Symbol::Ref(more), Symbol::Byte('}')}));
  }
  alts.push_back({Symbol::Byte('{'), ws, Symbol::Ref(choice), Symbol::Byte('}')});
  return Rule(ptr, "object", std::move(alts));
}

}  // namespace attnserve::grammar::schema
