#include "server/grammar/schema_compiler.h"

#include <cctype>
#include <cmath>
#include <functional>

#include "absl/strings/str_cat.h"

namespace attnserve::grammar::schema {

const std::set<std::string>& Annotations() {
  static const std::set<std::string> k = {
      "title",     "description", "default", "examples", "deprecated", "readOnly",
      "writeOnly", "$comment",    "$schema", "$id",      "strict",     "name"};
  return k;
}
const std::set<std::string>& ObjectKeywords() {
  static const std::set<std::string> k = {"properties", "required", "additionalProperties"};
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
namespace {
const std::set<std::string>& OtherKeywords() {
  static const std::set<std::string> k = {"type", "enum",  "const", "anyOf",      "oneOf",
                                          "allOf", "$ref", "$defs", "definitions"};
  return k;
}
}  // namespace

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
    if (k == main || Annotations().count(k) || k == "$defs" || k == "definitions" ||
        also.count(k)) {
      continue;
    }
    return Unsupported(k, ptr, absl::StrCat("beside ", main));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> SchemaCompiler::Compile(const json& s, const std::string& ptr) {
  if (s.is_boolean()) return s.get<bool>() ? lex_.AnyValue().rule : kNever;
  if (!s.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("schema at ", Where(ptr), " is not an object or a boolean"));
  }
  for (auto it = s.begin(); it != s.end(); ++it) {
    const std::string& k = it.key();
    if (k == "$id" && !ptr.empty()) {
      return Unsupported(k, ptr, "below the root, where it changes what $ref resolves against");
    }
    if (Annotations().count(k) || ObjectKeywords().count(k) || ArrayKeywords().count(k) ||
        StringKeywords().count(k) || OtherKeywords().count(k)) {
      continue;
    }
    return Unsupported(k, ptr);
  }
  for (const char* defs : {"$defs", "definitions"}) {
    if (Has(s, defs) && !s[defs].is_object()) return Invalid(defs, ptr, "must be an object");
  }
  if (Has(s, "$ref")) return CompileRef(s, ptr);
  for (const char* key : {"allOf", "anyOf", "oneOf"}) {
    if (Has(s, key)) return CompileAlternatives(s, ptr, key);
  }
  if (Has(s, "enum") || Has(s, "const")) return CompileEnum(s, ptr);
  return CompileTyped(s, ptr);
}

absl::StatusOr<int> SchemaCompiler::CompileInside(const json& s, const std::string& ptr) {
  const bool pure = pure_;
  pure_ = false;
  absl::StatusOr<int> r = Compile(s, ptr);
  pure_ = pure;
  return r;
}

absl::StatusOr<const json*> SchemaCompiler::Resolve(const json& s, const std::string& ptr,
                                                    std::string* target) const {
  if (!s["$ref"].is_string()) return Invalid("$ref", ptr, "must be a string");
  const std::string& ref = s["$ref"].get_ref<const std::string&>();
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
  if (key == "allOf") {
    if (list.size() != 1) return Unsupported(key, ptr, "of more than one schema");
    return Compile(list[0], ptr + "/allOf/0");
  }
  if (key == "oneOf") {
    for (size_t i = 0; i < list.size(); ++i) {
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
  if (Has(s, "$ref")) {
    std::string target;
    absl::StatusOr<const json*> r = Resolve(s, "", &target);
    if (!r.ok()) return kAllTypes;
    if (auto it = valid_types_.find(target); it != valid_types_.end()) return it->second;
    valid_types_[target] = kAllTypes;  // while in progress: a recursive one may be anything
    return valid_types_[target] = ValidTypes(**r, depth + 1);
  }
  for (const char* key : {"allOf", "anyOf", "oneOf"}) {
    if (!Has(s, key) || !s[key].is_array()) continue;
    unsigned mask = 0;
    for (const json& branch : s[key]) mask |= ValidTypes(branch, depth + 1);
    return mask;
  }
  unsigned mask = kAllTypes;
  if (absl::StatusOr<unsigned> t = Types(s, ""); t.ok()) mask = *t;
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
