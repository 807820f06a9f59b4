#include "server/grammar/schema_compiler.h"

#include <cctype>
#include <cmath>
#include <functional>

#include "absl/strings/str_cat.h"

namespace attnserve::grammar::schema {

bool IsValidationKeyword(const std::string& key) {
  // Every draft's (3 to 2020-12) validation and applicator keywords, and those that
  // locate subschemas. Not here, so ignored: annotations (title, description, default,
  // examples, deprecated, readOnly, writeOnly, $comment, content*), identifiers and
  // anchors ($id, id, $anchor, $dynamicAnchor, $recursiveAnchor: schema_compiler.cc
  // refuses a $ref whose resolution an $id would change), $schema, $vocabulary, and any
  // name no draft defines (x-..., nullable, ...).
  static const std::set<std::string> k = {
      "type", "enum", "const", "multipleOf", "divisibleBy", "maximum", "exclusiveMaximum",
      "minimum", "exclusiveMinimum", "maxLength", "minLength", "pattern", "format",
      "items", "prefixItems", "additionalItems", "maxItems", "minItems", "uniqueItems",
      "contains", "maxContains", "minContains", "unevaluatedItems", "properties",
      "patternProperties", "additionalProperties", "required", "maxProperties",
      "minProperties", "dependencies", "dependentRequired", "dependentSchemas",
      "propertyNames", "unevaluatedProperties", "allOf", "anyOf", "oneOf", "not", "if",
      "then", "else", "$ref", "$dynamicRef", "$recursiveRef", "$defs", "definitions",
      "extends", "disallow"};
  return k.count(key) > 0;
}
const std::set<std::string>& ObjectKeywords() {
  static const std::set<std::string> k = {"properties",    "required",      "additionalProperties",
                                          "patternProperties", "minProperties", "maxProperties",
                                          "dependentRequired", "dependencies"};
  return k;
}
const std::set<std::string>& ArrayKeywords() {
  static const std::set<std::string> k = {"items", "prefixItems", "minItems", "maxItems"};
  return k;
}
const std::set<std::string>& StringKeywords() {
  static const std::set<std::string> k = {"minLength", "maxLength", "pattern", "format"};
  return k;
}
const std::set<std::string>& NumberKeywords() {
  static const std::set<std::string> k = {"minimum", "maximum", "exclusiveMinimum",
                                          "exclusiveMaximum", "multipleOf"};
  return k;
}
namespace {
const std::set<std::string>& OtherKeywords() {
  static const std::set<std::string> k = {"type",  "enum", "const", "anyOf",       "oneOf",
                                          "allOf", "$ref", "$defs", "definitions", "not",
                                          "uniqueItems", "additionalItems"};
  return k;
}

// Calls `f(subschema, pointer)` for each subschema `s` holds directly.
template <typename F>
void ForEachSubschema(const json& s, const std::string& ptr, F f) {
  if (!s.is_object()) return;
  for (auto it = s.begin(); it != s.end(); ++it) {
    const std::string& k = it.key();
    const json& v = it.value();
    const std::string at = ptr + "/" + Token(k);
    if (k == "properties" || k == "patternProperties" || k == "$defs" || k == "definitions" ||
        k == "dependentSchemas" || k == "dependencies") {
      if (!v.is_object()) continue;
      for (auto e = v.begin(); e != v.end(); ++e) f(e.value(), at + "/" + Token(e.key()));
    } else if (k == "allOf" || k == "anyOf" || k == "oneOf" || k == "prefixItems" ||
               (k == "items" && v.is_array())) {
      if (!v.is_array()) continue;
      for (size_t i = 0; i < v.size(); ++i) f(v[i], absl::StrCat(at, "/", i));
    } else if (k == "items" || k == "additionalItems" || k == "additionalProperties" ||
               k == "not" || k == "if" || k == "then" || k == "else" || k == "contains" ||
               k == "propertyNames" || k == "unevaluatedItems" || k == "unevaluatedProperties") {
      f(v, at);
    }
  }
}

}  // namespace

bool AlwaysTrue(const json& s) {
  if (s.is_boolean()) return s.get<bool>();
  if (!s.is_object() || s.contains(kMergeAll) || s.contains(kMergeRef)) return false;
  for (auto it = s.begin(); it != s.end(); ++it) {
    if (IsValidationKeyword(it.key()) && it.key() != "$defs" && it.key() != "definitions") {
      return false;
    }
  }
  return true;
}

unsigned TypeOfValue(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return kNull;
    case json::value_t::boolean: return kBool;
    case json::value_t::object: return kObject;
    case json::value_t::array: return kArray;
    case json::value_t::string: return kString;
    case json::value_t::number_float: {
      const double d = v.get<double>();
      return std::floor(d) == d ? kInt : kFrac;
    }
    default: return kInt;
  }
}

unsigned TypeNamed(const std::string& name) {
  if (name == "null") return kNull;
  if (name == "boolean") return kBool;
  if (name == "object") return kObject;
  if (name == "array") return kArray;
  if (name == "string") return kString;
  if (name == "number") return kInt | kFrac;
  if (name == "integer") return kInt;
  return 0;
}

std::string Token(std::string_view key) {
  std::string out;
  for (char c : key) {
    if (c == '~') out += "~0"; else if (c == '/') out += "~1"; else out += c;
  }
  return out;
}

absl::Status SchemaCompiler::Unsupported(const std::string& key, const std::string& ptr,
                                         std::string_view note) const {
  return absl::InvalidArgumentError(absl::StrCat("unsupported keyword '", key, "' at ", Where(ptr),
                                                 note.empty() ? "" : " (", std::string(note),
                                                 note.empty() ? "" : ")"));
}

absl::Status SchemaCompiler::Invalid(const std::string& key, const std::string& ptr,
                                     std::string_view what) const {
  return absl::InvalidArgumentError(
      absl::StrCat("keyword '", key, "' at ", Where(ptr), " ", std::string(what)));
}

int SchemaCompiler::Rule(const std::string& ptr, std::string_view what, std::vector<Sequence> alts) {
  const int r = b_.NewRule(absl::StrCat(Where(ptr), what.empty() ? "" : " ", std::string(what)));
  for (Sequence& a : alts) b_.AddAlternative(r, std::move(a));
  return r;
}

absl::StatusOr<int> SchemaCompiler::Run() {
  FindBases(root_, "", 0);
  const int root = b_.NewRule(absl::StrCat("schema ", Where("")));
  refs_[""] = root;
  pending_.emplace_back("", root);
  while (!pending_.empty()) {
    auto [target, rule] = pending_.back();
    pending_.pop_back();
    target_ = target;
    pure_ = true;
    absl::StatusOr<int> r = Compile(root_.at(json::json_pointer(target)), target);
    if (!r.ok()) return r.status();
    if (*r == kNever) {
      return absl::InvalidArgumentError(absl::StrCat(
          "schema at ", Where(target), " matches no JSON value",
          target.empty() ? "" : absl::StrCat(" ($ref at ", Where(ref_sites_[target]), ")")));
    }
    b_.AddAlternative(rule, {Symbol::Ref(*r)});
  }
  if (absl::Status s = CheckLeftRecursion(); !s.ok()) return s;
  if (absl::Status s = lex_.Reserve(0, ""); !s.ok()) return s;
  return root;
}

absl::Status SchemaCompiler::CheckLeftRecursion() const {
  std::map<std::string, int> color;  // 1: on the path, 2: done
  std::function<std::optional<std::string>(const std::string&)> visit =
      [&](const std::string& t) -> std::optional<std::string> {
    color[t] = 1;
    if (auto it = left_refs_.find(t); it != left_refs_.end()) {
      for (const std::string& next : it->second) {
        if (color[next] == 1) return next;
        if (color[next] == 0) {
          if (auto cycle = visit(next)) return cycle;
        }
      }
    }
    color[t] = 2;
    return std::nullopt;
  };
  for (const auto& entry : left_refs_) {
    if (color[entry.first] != 0) continue;
    if (auto cycle = visit(entry.first)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "schema at ", Where(*cycle), " contains itself before any text through $ref at ",
          Where(ref_sites_.at(*cycle)), " (left recursion: no JSON value would end)"));
    }
  }
  return absl::OkStatus();
}

absl::Status SchemaCompiler::OnlyBeside(const json& s, const std::string& ptr,
                                        const std::string& main,
                                        const std::set<std::string>& also) const {
  for (auto it = s.begin(); it != s.end(); ++it) {
    const std::string& k = it.key();
    if (k == main || !IsValidationKeyword(k) || k == "$defs" || k == "definitions" ||
        also.count(k)) {
      continue;
    }
    return Unsupported(k, ptr, absl::StrCat("beside ", main));
  }
  return absl::OkStatus();
}

absl::Status SchemaCompiler::CheckKeywords(const json& s, const std::string& ptr) const {
  for (auto it = s.begin(); it != s.end(); ++it) {
    const std::string& k = it.key();
    if (!IsValidationKeyword(k)) continue;  // annotations and unknown keywords
    if (k == "uniqueItems") {
      if (it.value().is_boolean() && !it.value().get<bool>()) continue;
      return Unsupported(k, ptr, "true: the grammar cannot compare items");
    }
    if (k == "not") {
      const json& n = it.value();
      bool type_only = n.is_object() && n.contains("type");
      for (auto e = n.begin(); type_only && e != n.end(); ++e) {
        type_only = e.key() == "type" || !IsValidationKeyword(e.key());
      }
      if (n.is_boolean() || AlwaysTrue(n) || type_only) continue;
      return Unsupported(k, ptr, "only not of true, false, {} or a type");
    }
    if (ObjectKeywords().count(k) || ArrayKeywords().count(k) || StringKeywords().count(k) ||
        NumberKeywords().count(k) || OtherKeywords().count(k)) {
      continue;
    }
    return Unsupported(k, ptr);
  }
  return absl::OkStatus();
}

bool SchemaCompiler::NeedsMerge(const json& s) {
  if (Has(s, "allOf") || Has(s, "not")) return true;
  const bool ref = Has(s, "$ref");
  const int combinators = int(Has(s, "anyOf")) + int(Has(s, "oneOf"));
  if (!ref && combinators == 0) return false;
  if (int(ref) + combinators > 1) return true;
  for (auto it = s.begin(); it != s.end(); ++it) {
    const std::string& k = it.key();
    if (IsValidationKeyword(k) && k != "$ref" && k != "anyOf" && k != "oneOf" && k != "$defs" &&
        k != "definitions") {
      return true;
    }
  }
  return false;
}

void SchemaCompiler::FindBases(const json& s, const std::string& ptr, int depth) {
  if (!s.is_object() || depth > 64) return;
  if (!ptr.empty()) {
    for (const char* key : {"$id", "id"}) {
      if (Has(s, key) && s[key].is_string()) {
        const std::string& id = s[key].get_ref<const std::string&>();
        if (!id.empty() && id[0] != '#') {
          bases_.push_back(ptr);
          return;  // all below is in its scope
        }
      }
    }
  }
  ForEachSubschema(s, ptr, [&](const json& sub, const std::string& at) { FindBases(sub, at, depth + 1); });
}

absl::StatusOr<int> SchemaCompiler::Compile(const json& s, const std::string& ptr) {
  if (s.is_boolean()) return s.get<bool>() ? lex_.AnyValue().rule : kNever;
  if (!s.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("schema at ", Where(ptr), " is not an object or a boolean"));
  }
  if (s.contains(kMergeAll) || s.contains(kMergeRef)) return CompileMerged(s, ptr);
  if (absl::Status st = CheckKeywords(s, ptr); !st.ok()) return st;
  for (const char* defs : {"$defs", "definitions"}) {
    if (Has(s, defs) && !s[defs].is_object()) return Invalid(defs, ptr, "must be an object");
  }
  if (NeedsMerge(s)) return CompileMerge(Member{&s, ptr, true}, ptr);
  if (Has(s, "$ref")) return CompileRef(s, ptr);
  for (const char* key : {"anyOf", "oneOf"}) {
    if (Has(s, key)) return CompileAlternatives(s, ptr, key);
  }
  if (Has(s, "enum") || Has(s, "const")) return CompileEnum(s, ptr);
  return CompileTyped(s, ptr);
}

absl::StatusOr<int> SchemaCompiler::CompileInside(const json& s, const std::string& ptr) {
  const bool pure = pure_;
  pure_ = false;
  ++text_depth_;
  absl::StatusOr<int> r = Compile(s, ptr);
  --text_depth_;
  pure_ = pure;
  return r;
}

absl::StatusOr<const json*> SchemaCompiler::Resolve(const json& s, const std::string& ptr,
                                                    std::string* target) const {
  if (!s["$ref"].is_string()) return Invalid("$ref", ptr, "must be a string");
  const std::string& ref = s["$ref"].get_ref<const std::string&>();
  for (const std::string& base : bases_) {
    if (!ptr.empty() && (ptr == base || ptr.rfind(base + "/", 0) == 0)) {
      return Unsupported("$ref", ptr,
                         absl::StrCat("inside the $id at ", Where(base),
                                      ", which changes what it resolves against"));
    }
  }
  if (ref.empty() || ref[0] != '#') {
    return Unsupported("$ref", ptr, "a remote reference '" + ref + "'");
  }
  std::string pointer;  // the fragment, %-decoded
  auto hex = [](char c) { return std::isxdigit(uint8_t(c)) != 0; };
  for (size_t i = 1; i < ref.size(); ++i) {
    if (ref[i] == '%' && i + 2 < ref.size() && hex(ref[i + 1]) && hex(ref[i + 2])) {
      pointer += char(std::stoi(ref.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      pointer += ref[i];
    }
  }
  if (!pointer.empty() && pointer[0] != '/') {
    return Unsupported("$ref", ptr, "a plain-name fragment '" + ref + "'");
  }
  const json* found = nullptr;
  try {
    const json::json_pointer jp(pointer);
    if (root_.contains(jp)) found = &root_.at(jp);
  } catch (const json::exception&) {
  }
  if (found == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("$ref '", ref, "' at ", Where(ptr), " resolves to no schema"));
  }
  *target = pointer;
  return found;
}

absl::StatusOr<int> SchemaCompiler::CompileRef(const json& s, const std::string& ptr) {
  if (absl::Status st = OnlyBeside(s, ptr, "$ref"); !st.ok()) return st;
  std::string target;
  if (absl::StatusOr<const json*> r = Resolve(s, ptr, &target); !r.ok()) return r.status();
  ref_sites_.emplace(target, ptr);
  if (pure_) left_refs_[target_].insert(target);
  if (auto it = refs_.find(target); it != refs_.end()) return it->second;
  const int rule = b_.NewRule(absl::StrCat("schema ", Where(target)));
  refs_[target] = rule;
  pending_.emplace_back(target, rule);
  return rule;
}

absl::StatusOr<int> SchemaCompiler::CompileAlternatives(const json& s, const std::string& ptr,
                                                        const std::string& key) {
  if (absl::Status st = OnlyBeside(s, ptr, key); !st.ok()) return st;
  const json& list = s[key];
  if (!list.is_array() || list.empty()) return Invalid(key, ptr, "must be a non-empty array");
  if (key == "oneOf") {
    if (absl::Status st = CheckManyBranches(list, ptr); !st.ok()) return st;
    for (size_t i = 0; i < list.size() && list.size() <= kPairwiseBranches; ++i) {
      for (size_t j = i + 1; j < list.size(); ++j) {
        if (!Disjoint(list[i], list[j])) {
          return Unsupported(key, ptr, absl::StrCat("branches ", i, " and ", j,
                                                    " may both match; anyOf would not refuse that"));
        }
      }
    }
  }
  std::vector<Sequence> alts;
  for (size_t i = 0; i < list.size(); ++i) {
    absl::StatusOr<int> r = Compile(list[i], absl::StrCat(ptr, "/", key, "/", i));
    if (!r.ok()) return r.status();
    if (*r != kNever) alts.push_back({Symbol::Ref(*r)});
  }
  if (alts.empty()) return kNever;
  if (alts.size() == 1) return alts[0][0].rule;
  return Rule(ptr, key, std::move(alts));
}

absl::Status SchemaCompiler::CheckManyBranches(const json& list, const std::string& ptr) {
  if (list.size() <= kPairwiseBranches) return absl::OkStatus();
  // Past the pairs checked one by one: branches that are each a const or an enum of
  // scalars, no value in two of them (one pass over the values).
  std::set<std::string> seen;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::optional<std::set<std::string>> values = ValueSet(list[i]);
    if (!values) {
      return Unsupported("oneOf", ptr, absl::StrCat("more than ", kPairwiseBranches,
                                                    " branches that are not all const or enum values"));
    }
    for (const std::string& v : *values) {
      if (!seen.insert(v).second) {
        return Unsupported("oneOf", ptr, absl::StrCat("branch ", i, " repeats the value ", v,
                                                      "; anyOf would not refuse that"));
      }
    }
  }
  return absl::OkStatus();
}

// --- oneOf: can two branches both hold for one value? ---

// The schema `s` stands for once $ref and a one-schema allOf are followed; nullptr when
// that is not one plain schema object.
const json* SchemaCompiler::Plain(const json& s, int depth) const {
  if (depth > 32 || !s.is_object()) return nullptr;
  if (Has(s, "$ref")) {
    std::string target;
    absl::StatusOr<const json*> r = Resolve(s, "", &target);
    return r.ok() ? Plain(**r, depth + 1) : nullptr;
  }
  if (Has(s, "allOf")) {
    return s["allOf"].is_array() && s["allOf"].size() == 1 ? Plain(s["allOf"][0], depth + 1) : nullptr;
  }
  if (Has(s, "anyOf") || Has(s, "oneOf")) return nullptr;
  return &s;
}

unsigned SchemaCompiler::ValidTypes(const json& s, int depth) {
  if (s.is_boolean()) return s.get<bool>() ? kAllTypes : 0;
  if (!s.is_object() || depth > 64) return kAllTypes;
  // Each keyword below narrows the types (the value must satisfy all of them).
  unsigned mask = kAllTypes;
  if (Has(s, "$ref")) {
    std::string target;
    absl::StatusOr<const json*> r = Resolve(s, "", &target);
    if (r.ok()) {
      if (auto it = valid_types_.find(target); it != valid_types_.end()) {
        mask &= it->second;
      } else {
        valid_types_[target] = kAllTypes;  // while in progress: a recursive one may be anything
        mask &= valid_types_[target] = ValidTypes(**r, depth + 1);
      }
    }
  }
  if (Has(s, "allOf") && s["allOf"].is_array()) {
    for (const json& branch : s["allOf"]) mask &= ValidTypes(branch, depth + 1);
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    if (!Has(s, key) || !s[key].is_array()) continue;
    unsigned any = 0;
    for (const json& branch : s[key]) any |= ValidTypes(branch, depth + 1);
    mask &= any;
  }
  if (absl::StatusOr<unsigned> t = Types(s, ""); t.ok()) mask &= *t;
  if (Has(s, "enum") && s["enum"].is_array()) {
    unsigned values = 0;
    for (const json& v : s["enum"]) values |= TypeOfValue(v);
    mask &= values;
  }
  if (Has(s, "const")) mask &= TypeOfValue(s["const"]);
  return mask;
}

// The canonical texts of the values `s` allows when it is a const or an enum of scalars.
std::optional<std::set<std::string>> SchemaCompiler::ValueSet(const json& s) const {
  const json* p = Plain(s, 0);
  if (p == nullptr) return std::nullopt;
  std::vector<json> values;
  if (Has(*p, "const")) {
    values.push_back((*p)["const"]);
  } else if (Has(*p, "enum") && (*p)["enum"].is_array()) {
    values.assign((*p)["enum"].begin(), (*p)["enum"].end());
  } else {
    return std::nullopt;
  }
  std::set<std::string> out;
  for (const json& v : values) {
    if (v.is_object() || v.is_array()) return std::nullopt;  // Ajv's equality ignores key order
    out.insert(JsonLexicon::CanonicalText(v));
  }
  return out;
}

bool SchemaCompiler::Disjoint(const json& a, const json& b) {
  const unsigned common = ValidTypes(a, 0) & ValidTypes(b, 0);
  if (common == 0) return true;
  if (common != kObject) return false;
  // Tagged objects: both require a property whose allowed values do not meet.
  const json* pa = Plain(a, 0);
  const json* pb = Plain(b, 0);
  if (pa == nullptr || pb == nullptr || !Has(*pa, "required") || !Has(*pb, "required") ||
      !(*pa)["required"].is_array() || !(*pb)["required"].is_array() ||
      !Has(*pa, "properties") || !Has(*pb, "properties") || !(*pa)["properties"].is_object() ||
      !(*pb)["properties"].is_object()) {
    return false;
  }
  for (const json& name : (*pa)["required"]) {
    if (!name.is_string()) continue;
    const std::string& n = name.get_ref<const std::string&>();
    bool in_b = false;
    for (const json& other : (*pb)["required"]) in_b = in_b || other == name;
    if (!in_b || !(*pa)["properties"].contains(n) || !(*pb)["properties"].contains(n)) continue;
    const auto va = ValueSet((*pa)["properties"][n]);
    const auto vb = ValueSet((*pb)["properties"][n]);
    if (!va || !vb) continue;
    bool meet = false;
    for (const std::string& v : *va) meet = meet || vb->count(v) > 0;
    if (!meet) return true;
  }
  return false;
}

}  // namespace attnserve::grammar::schema
