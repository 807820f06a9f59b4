// allOf, $ref beside other keywords, `type` (or any keyword) beside anyOf/oneOf, and
// `not` of true or false (SchemaCompiler, schema_compiler.h): the schemas a value must
// satisfy together, merged into one schema where their keywords combine exactly
// (json_schema.h lists how); anything else is refused by name.
//
// The merged schema refers to the subschemas it takes (a property's schema, items, ...)
// by JSON Pointer ({kMergeRef: "/allOf/0/properties/a"}) or holds them as merges of
// several ({kMergeAll: [...]}), so that merging copies no subschema. Such a schema is
// compiled once per text (merges_): one met again inside itself, behind some text
// (recursion through properties or items), refers to its rule; one met again before any
// text is left recursion, refused.
#include <algorithm>
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "server/grammar/schema_compiler.h"

namespace attnserve::grammar::schema {
namespace {

constexpr int kMaxMergeDepth = 64;     // nested merges (flattening, or compiling one)
constexpr int kMaxMerges = 2000;       // merged schemas per compilation
constexpr size_t kMaxBranches = 64;    // anyOf/oneOf branches after distributing

const char* const kLowerCounts[] = {"minLength", "minItems", "minProperties"};
const char* const kUpperCounts[] = {"maxLength", "maxItems", "maxProperties"};

json RefTo(const std::string& pointer) { return json{{kMergeRef, pointer}}; }

// Several schemas as one: nothing for none, itself for one.
json AllOf(std::vector<json> parts, bool never) {
  if (never) return false;
  if (parts.empty()) return true;
  if (parts.size() == 1) return std::move(parts[0]);
  return json{{kMergeAll, std::move(parts)}};
}

}  // namespace

struct SchemaCompiler::Merged {
  unsigned types = kAllTypes;
  bool never = false;
  std::optional<std::vector<json>> values;  // enum and const: the values all of them allow
  json bounds = json::object();             // numeric keyword -> its tightest value
  json texts = json::object();              // pattern, format, multipleOf: one value each
  std::vector<std::string> required;
  json depends = json::object();  // dependentRequired of every member, joined
  std::vector<Member> objects;  // members with properties, additionalProperties or patternProperties
  std::vector<Member> arrays;   // members with items or prefixItems
  std::vector<std::pair<std::string, std::vector<Member>>> choices;  // anyOf, oneOf
};

namespace {

// A member's subschema at `rel` below it: by pointer when the member is in the root.
json SubOf(const SchemaCompiler::Member& m, const json& sub, const std::string& rel) {
  return m.real ? RefTo(m.ptr + rel) : sub;
}

}  // namespace

absl::Status SchemaCompiler::Flatten(const Member& m, Merged& acc,
                                     std::set<std::string>& inlining, int depth) {
  if (depth > kMaxMergeDepth) {
    return absl::InvalidArgumentError(absl::StrCat("schema at ", Where(m.ptr), " nests allOf and $ref deeper than ",
                                                   kMaxMergeDepth));
  }
  const json& s = *m.s;
  if (s.is_boolean()) {
    if (!s.get<bool>()) acc.never = true;
    return absl::OkStatus();
  }
  if (!s.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("schema at ", Where(m.ptr), " is not an object or a boolean"));
  }
  if (s.contains(kMergeAll)) {
    for (const json& e : s[kMergeAll]) {
      if (absl::Status st = Flatten(Member{&e, m.ptr, false}, acc, inlining, depth + 1); !st.ok()) {
        return st;
      }
    }
    return absl::OkStatus();
  }
  if (s.contains(kMergeRef)) {
    const std::string& p = s[kMergeRef].get_ref<const std::string&>();
    return Flatten(Member{&root_.at(json::json_pointer(p)), p, true}, acc, inlining, depth + 1);
  }
  if (absl::Status st = CheckKeywords(s, m.ptr); !st.ok()) return st;
  if (Has(s, "$ref")) {
    std::string target;
    absl::StatusOr<const json*> r = Resolve(s, m.real ? m.ptr : "", &target);
    if (!r.ok()) return r.status();
    if (!inlining.insert(target).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "schema at ", Where(target), " contains itself before any text through $ref at ",
          Where(m.ptr), " (left recursion: no JSON value would end)"));
    }
    ref_sites_.emplace(target, m.ptr);
    absl::Status st = Flatten(Member{*r, target, true}, acc, inlining, depth + 1);
    inlining.erase(target);
    if (!st.ok()) return st;
  }
  for (const char* key : {"allOf", "anyOf", "oneOf"}) {
    if (!Has(s, key)) continue;
    const json& list = s[key];
    if (!list.is_array() || list.empty()) return Invalid(key, m.ptr, "must be a non-empty array");
    std::vector<Member> members;
    for (size_t i = 0; i < list.size(); ++i) {
      members.push_back(Member{&list[i], absl::StrCat(m.ptr, "/", key, "/", i), m.real});
    }
    if (std::string(key) != "allOf") {
      acc.choices.emplace_back(key, std::move(members));
      continue;
    }
    for (const Member& e : members) {
      if (absl::Status st = Flatten(e, acc, inlining, depth + 1); !st.ok()) return st;
    }
  }
  if (Has(s, "not")) {
    const json& n = s["not"];
    if (AlwaysTrue(n)) {
      acc.never = true;
    } else if (n.is_object()) {  // CheckKeywords: only `type` there
      absl::StatusOr<unsigned> t = Types(n, m.ptr + "/not");
      if (!t.ok()) return t.status();
      acc.types &= ~*t;
    }
  }
  if (Has(s, "type")) {
    absl::StatusOr<unsigned> t = Types(s, m.ptr);
    if (!t.ok()) return t.status();
    acc.types &= *t;
  }
  if (Has(s, "enum") || Has(s, "const")) {
    std::vector<json> values;
    if (Has(s, "enum")) {
      if (!s["enum"].is_array()) return Invalid("enum", m.ptr, "must be an array");
      values.assign(s["enum"].begin(), s["enum"].end());
    }
    if (Has(s, "const")) {
      const std::string c = JsonLexicon::CanonicalText(s["const"]);
      std::vector<json> kept;
      if (!Has(s, "enum")) kept.push_back(s["const"]);
      for (const json& v : values) {
        if (JsonLexicon::CanonicalText(v) == c) kept.push_back(v);
      }
      values = std::move(kept);
    }
    if (acc.values) {
      // Both: the values of each (compared as canonical texts: an object whose members
      // come in another order is dropped, fewer values, all valid).
      std::set<std::string> mine;
      for (const json& v : values) mine.insert(JsonLexicon::CanonicalText(v));
      std::vector<json> kept;
      for (const json& v : *acc.values) {
        if (mine.count(JsonLexicon::CanonicalText(v))) kept.push_back(v);
      }
      acc.values = std::move(kept);
    } else {
      acc.values = std::move(values);
    }
  }
  for (const char* key : kLowerCounts) {
    absl::StatusOr<int64_t> n = Count(s, key, m.ptr, -1);
    if (!n.ok()) return n.status();
    if (*n >= 0 && (!acc.bounds.contains(key) || acc.bounds[key].get<int64_t>() < *n)) acc.bounds[key] = *n;
  }
  for (const char* key : kUpperCounts) {
    absl::StatusOr<int64_t> n = Count(s, key, m.ptr, -1);
    if (!n.ok()) return n.status();
    if (*n >= 0 && (!acc.bounds.contains(key) || acc.bounds[key].get<int64_t>() > *n)) acc.bounds[key] = *n;
  }
  // Numeric bounds, draft 4's boolean exclusiveMinimum/Maximum read as the later form.
  for (const auto& [bound, exclusive, lower] :
       {std::tuple<const char*, const char*, bool>{"minimum", "exclusiveMinimum", true},
        {"maximum", "exclusiveMaximum", false}}) {
    std::vector<std::pair<std::string, const json*>> found;
    const bool draft4 = Has(s, exclusive) && s[exclusive].is_boolean();
    if (Has(s, bound)) {
      found.emplace_back(draft4 && s[exclusive].get<bool>() ? exclusive : bound, &s[bound]);
    }
    if (Has(s, exclusive) && !draft4) found.emplace_back(exclusive, &s[exclusive]);
    for (const auto& [key, value] : found) {
      if (!value->is_number()) return Invalid(key, m.ptr, "must be a number");
      const double v = value->get<double>();
      if (!acc.bounds.contains(key) ||
          (lower ? acc.bounds[key].get<double>() < v : acc.bounds[key].get<double>() > v)) {
        acc.bounds[key] = *value;
      }
    }
  }
  for (const char* key : {"pattern", "format", "multipleOf"}) {
    if (!Has(s, key)) continue;
    if (acc.texts.contains(key) && acc.texts[key] != s[key]) {
      return Unsupported(key, m.ptr, absl::StrCat("beside another ", key, " in allOf"));
    }
    acc.texts[key] = s[key];
  }
  if (Has(s, "required")) {
    const json& r = s["required"];
    if (!r.is_array()) return Invalid("required", m.ptr, "must be an array of distinct strings");
    for (const json& n : r) {
      if (!n.is_string()) return Invalid("required", m.ptr, "must be an array of distinct strings");
      if (std::find(acc.required.begin(), acc.required.end(), n.get<std::string>()) ==
          acc.required.end()) {
        acc.required.push_back(n.get<std::string>());
      }
    }
  }
  for (const char* key : {"dependentRequired", "dependencies"}) {
    if (!Has(s, key)) continue;
    if (!s[key].is_object()) return Invalid(key, m.ptr, "must be an object");
    for (auto it = s[key].begin(); it != s[key].end(); ++it) {
      if (!it.value().is_array()) return Unsupported(key, m.ptr, "with a schema: only arrays of names");
      json& mine = acc.depends[it.key()];
      if (mine.is_null()) mine = json::array();
      for (const json& n : it.value()) mine.push_back(n);
    }
  }
  if (Has(s, "properties") || Has(s, "additionalProperties") || Has(s, "patternProperties")) {
    for (const char* key : {"properties", "patternProperties"}) {
      if (Has(s, key) && !s[key].is_object()) return Invalid(key, m.ptr, "must be an object");
    }
    acc.objects.push_back(m);
  }
  if (Has(s, "items") || Has(s, "prefixItems")) {
    if (Has(s, "prefixItems") && !s["prefixItems"].is_array()) {
      return Invalid("prefixItems", m.ptr, "must be an array");
    }
    acc.arrays.push_back(m);
  }
  return absl::OkStatus();
}

absl::StatusOr<json> SchemaCompiler::Emit(Merged& acc, const std::string& ptr) {
  if (acc.never || acc.types == 0) return json(false);
  if ((acc.types & kFrac) && !(acc.types & kInt)) {
    return Unsupported("not", ptr, "a number that is not an integer");
  }
  json out = json::object();
  if (acc.types != kAllTypes) {
    json names = json::array();
    for (const auto& [bit, name] : {std::pair<unsigned, const char*>{kNull, "null"},
                                    {kBool, "boolean"}, {kObject, "object"}, {kArray, "array"},
                                    {kString, "string"}}) {
      if (acc.types & bit) names.push_back(name);
    }
    if (acc.types & kFrac) {
      names.push_back("number");
    } else if (acc.types & kInt) {
      names.push_back("integer");
    }
    out["type"] = std::move(names);
  }
  if (acc.values) out["enum"] = *acc.values;
  for (auto it = acc.bounds.begin(); it != acc.bounds.end(); ++it) out[it.key()] = it.value();
  for (auto it = acc.texts.begin(); it != acc.texts.end(); ++it) out[it.key()] = it.value();
  if (!acc.required.empty()) out["required"] = acc.required;
  if (!acc.depends.empty()) out["dependentRequired"] = acc.depends;

  if (acc.objects.size() == 1) {
    const Member& o = acc.objects[0];
    for (const char* key : {"properties", "patternProperties"}) {
      if (!Has(*o.s, key)) continue;
      json map = json::object();
      for (auto it = (*o.s)[key].begin(); it != (*o.s)[key].end(); ++it) {
        map[it.key()] = SubOf(o, it.value(), absl::StrCat("/", key, "/", Token(it.key())));
      }
      out[key] = std::move(map);
    }
    if (Has(*o.s, "additionalProperties")) {
      const json& a = (*o.s)["additionalProperties"];
      out["additionalProperties"] = a.is_boolean() ? a : SubOf(o, a, "/additionalProperties");
    }
  } else if (acc.objects.size() > 1) {
    // A name one member declares is, in another, under that member's properties, or else
    // its additionalProperties.
    for (const Member& o : acc.objects) {
      if (Has(*o.s, "patternProperties")) {
        return Unsupported("patternProperties", o.ptr,
                           "beside the properties or additionalProperties of another schema in allOf");
      }
    }
    std::vector<std::string> names;
    for (const Member& o : acc.objects) {
      if (!Has(*o.s, "properties")) continue;
      for (auto it = (*o.s)["properties"].begin(); it != (*o.s)["properties"].end(); ++it) {
        if (std::find(names.begin(), names.end(), it.key()) == names.end()) names.push_back(it.key());
      }
    }
    json properties = json::object();
    for (const std::string& name : names) {
      std::vector<json> parts;
      bool never = false;
      for (const Member& o : acc.objects) {
        if (Has(*o.s, "properties") && (*o.s)["properties"].contains(name)) {
          parts.push_back(SubOf(o, (*o.s)["properties"][name], "/properties/" + Token(name)));
        } else if (Has(*o.s, "additionalProperties")) {
          const json& a = (*o.s)["additionalProperties"];
          if (a.is_boolean() && !a.get<bool>()) never = true;
          if (!AlwaysTrue(a)) parts.push_back(SubOf(o, a, "/additionalProperties"));
        }
      }
      properties[name] = AllOf(std::move(parts), never);
    }
    if (!names.empty()) out["properties"] = std::move(properties);
    std::vector<json> parts;
    bool never = false, any = false;
    for (const Member& o : acc.objects) {
      if (!Has(*o.s, "additionalProperties")) continue;
      const json& a = (*o.s)["additionalProperties"];
      any = true;
      if (a.is_boolean() && !a.get<bool>()) never = true;
      if (!AlwaysTrue(a)) parts.push_back(SubOf(o, a, "/additionalProperties"));
    }
    if (any) out["additionalProperties"] = AllOf(std::move(parts), never);
  }

  // Arrays: item j is under each member's prefixItems[j], or else its items.
  struct ArrayPart {
    std::vector<json> prefix;
    std::optional<json> rest;
  };
  std::vector<ArrayPart> parts;
  for (const Member& a : acc.arrays) {
    const json& s = *a.s;
    ArrayPart p;
    const bool tuple = Has(s, "items") && s["items"].is_array();  // draft 4 to 7
    const char* prefix_key = tuple ? "items" : "prefixItems";
    if (Has(s, prefix_key)) {
      for (size_t j = 0; j < s[prefix_key].size(); ++j) {
        p.prefix.push_back(SubOf(a, s[prefix_key][j], absl::StrCat("/", prefix_key, "/", j)));
      }
    }
    const char* rest_key = tuple ? "additionalItems" : "items";
    if (Has(s, rest_key)) {
      const json& r = s[rest_key];
      if (!r.is_boolean() && !r.is_object()) return Invalid(rest_key, a.ptr, "must be a schema");
      p.rest = r.is_boolean() ? r : SubOf(a, r, std::string("/") + rest_key);
    }
    parts.push_back(std::move(p));
  }
  if (!parts.empty()) {
    size_t n = 0;
    for (const ArrayPart& p : parts) n = std::max(n, p.prefix.size());
    json prefix = json::array();
    for (size_t j = 0; j < n; ++j) {
      std::vector<json> each;
      for (const ArrayPart& p : parts) {
        if (j < p.prefix.size()) {
          each.push_back(p.prefix[j]);
        } else if (p.rest) {
          each.push_back(*p.rest);
        }
      }
      prefix.push_back(AllOf(std::move(each), false));
    }
    std::vector<json> rest;
    for (const ArrayPart& p : parts) {
      if (p.rest) rest.push_back(*p.rest);
    }
    if (n > 0) out["prefixItems"] = std::move(prefix);
    if (!rest.empty()) out["items"] = AllOf(std::move(rest), false);
  }
  (void)ptr;
  return out;
}

absl::StatusOr<int> SchemaCompiler::CompileMerge(const Member& m, const std::string& ptr) {
  if (++merge_count_ > kMaxMerges) {
    return absl::InvalidArgumentError(absl::StrCat("schema needs more than ", kMaxMerges,
                                                   " merged subschemas (allOf, $ref beside keywords; at ",
                                                   Where(ptr), ")"));
  }
  Merged acc;
  std::set<std::string> inlining;
  if (absl::Status st = Flatten(m, acc, inlining, 0); !st.ok()) return st;
  absl::StatusOr<json> merged = Emit(acc, ptr);
  if (!merged.ok()) return merged.status();
  made_.push_back(std::make_unique<json>(*std::move(merged)));
  const json& base = *made_.back();
  if (acc.choices.empty() || base.is_boolean()) return Compile(base, ptr);

  // anyOf/oneOf beside the rest: each branch merged with the rest (and with one branch of
  // each other list). A oneOf's branches must not overlap once merged (then it is anyOf).
  // A oneOf whose branches only require names: branch i is written without, for each
  // other branch, one name that branch requires and i does not, so that no other holds;
  // a branch whose names include another's always has both hold (never written).
  std::vector<std::optional<std::vector<json>>> exclusions(acc.choices.size());
  for (size_t c = 0; c < acc.choices.size(); ++c) {
    const auto& [key, list] = acc.choices[c];
    if (key != "oneOf") continue;
    std::vector<std::set<std::string>> names;
    for (const Member& b : list) {
      const json& r = b.s->is_object() ? b.s->value("required", json()) : json();
      bool only = b.s->is_object() && r.is_array();
      for (auto it = b.s->begin(); only && it != b.s->end(); ++it) {
        only = it.key() == "required" || !IsValidationKeyword(it.key());
      }
      std::set<std::string> n;
      for (const json& x : only ? r : json::array()) {
        if (x.is_string()) n.insert(x.get<std::string>()); else only = false;
      }
      if (!only) break;
      names.push_back(std::move(n));
    }
    if (names.size() != list.size()) continue;
    std::vector<json> each;
    for (size_t i = 0; i < list.size(); ++i) {
      json props = json::object();
      bool implied = false;
      // Fewest names first, each excluded name reused where it serves another branch.
      std::vector<size_t> order;
      for (size_t j = 0; j < list.size(); ++j) {
        if (j != i) order.push_back(j);
      }
      std::stable_sort(order.begin(), order.end(),
                       [&](size_t x, size_t y) { return names[x].size() < names[y].size(); });
      for (size_t j : order) {
        std::vector<std::string> missing;
        for (const std::string& n : names[j]) {
          if (!names[i].count(n)) missing.push_back(n);
        }
        if (missing.empty()) implied = true;
        bool done = false;
        for (const std::string& n : missing) done = done || props.contains(n);
        if (!done && !missing.empty()) props[missing[0]] = false;  // one name absent is enough
      }
      each.push_back(implied ? json(false) : json{{"properties", std::move(props)}});
    }
    exclusions[c] = std::move(each);
  }
  size_t total = 1;
  for (size_t c = 0; c < acc.choices.size(); ++c) {
    const auto& [key, list] = acc.choices[c];
    if (key == "oneOf" && !exclusions[c]) {
      if (list.size() > kPairwiseBranches) {
        return Unsupported(key, ptr, absl::StrCat("more than ", kPairwiseBranches, " branches beside other keywords"));
      }
      for (size_t i = 0; i < list.size(); ++i) {
        for (size_t j = i + 1; j < list.size(); ++j) {
          const bool apart = (ValidTypes(*list[i].s, 0) & ValidTypes(*list[j].s, 0) & acc.types) == 0 ||
                             Disjoint(*list[i].s, *list[j].s);
          if (!apart) {
            return Unsupported(key, ptr, absl::StrCat("branches ", i, " and ", j,
                                                      " may both match; anyOf would not refuse that"));
          }
        }
      }
    }
    total *= list.size();
    if (total > kMaxBranches) {
      return Unsupported(key, ptr, absl::StrCat("beside other anyOf/oneOf: more than ", kMaxBranches,
                                                " branches once combined"));
    }
  }
  std::vector<Sequence> alts;
  std::vector<size_t> pick(acc.choices.size(), 0);
  for (size_t n = 0; n < total; ++n) {
    std::vector<json> all = {base};
    size_t rest = n;
    for (size_t c = 0; c < acc.choices.size(); ++c) {
      const std::vector<Member>& list = acc.choices[c].second;
      const size_t i = rest % list.size();
      const Member& b = list[i];
      rest /= list.size();
      all.push_back(SubOf(b, *b.s, ""));
      if (exclusions[c]) all.push_back((*exclusions[c])[i]);
    }
    made_.push_back(std::make_unique<json>(json{{kMergeAll, std::move(all)}}));
    absl::StatusOr<int> r = Compile(*made_.back(), ptr);
    if (!r.ok()) return r.status();
    if (*r != kNever) alts.push_back({Symbol::Ref(*r)});
  }
  if (alts.empty()) return kNever;
  if (alts.size() == 1) return alts[0][0].rule;
  return Rule(ptr, acc.choices.size() == 1 ? acc.choices[0].first : "choices", std::move(alts));
}

absl::StatusOr<int> SchemaCompiler::CompileMerged(const json& s, const std::string& ptr) {
  const std::string key = s.dump(-1, ' ', false, json::error_handler_t::replace);
  auto [it, fresh] = merges_.try_emplace(key);
  if (!fresh) {
    MergeState& st = it->second;
    if (st.done) return st.result;
    if (st.text_depth == text_depth_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "schema at ", Where(ptr), " contains itself before any text through allOf or $ref",
          " (left recursion: no JSON value would end)"));
    }
    if (st.rule < 0) st.rule = b_.NewRule(absl::StrCat("merged ", Where(ptr)));
    return st.rule;
  }
  it->second.text_depth = text_depth_;
  if (merge_depth_ >= kMaxMergeDepth) {
    return absl::InvalidArgumentError(absl::StrCat("schema at ", Where(ptr), " nests allOf and $ref deeper than ",
                                                   kMaxMergeDepth));
  }
  ++merge_depth_;
  absl::StatusOr<int> r = CompileMerge(Member{&s, ptr, false}, ptr);
  --merge_depth_;
  if (!r.ok()) return r;
  MergeState& st = merges_[key];
  int result = *r;
  if (st.rule >= 0) {
    if (result == kNever) {
      return absl::InvalidArgumentError(
          absl::StrCat("schema at ", Where(ptr), " matches no JSON value (it recurs into itself)"));
    }
    b_.AddAlternative(st.rule, {Symbol::Ref(result)});
    result = st.rule;
  }
  st.done = true;
  st.result = result;
  return result;
}

}  // namespace attnserve::grammar::schema
