// The JSON Schema compiler behind json_schema.h (internal to server/grammar): one
// schema's walk, its $ref targets compiled once each from a worklist (so recursion costs
// no C++ stack beyond the schema document's own depth). schema_compiler.cc holds the
// walk, $ref, the combinators and the oneOf overlap test; schema_merge.cc allOf, $ref
// beside other keywords and `type` beside anyOf/oneOf (merged into one schema);
// schema_types.cc the typed schemas (objects, arrays, strings, enum and const);
// schema_numbers.cc integers and numbers with bounds.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "server/grammar/json_lexicon.h"
#include "server/grammar/json_schema.h"

namespace attnserve::grammar::schema {

using json = nlohmann::ordered_json;

inline constexpr int kNever = -1;  // a schema no JSON value satisfies
// oneOf branches compared pair by pair at most (past it, only values are compared).
inline constexpr size_t kPairwiseBranches = 128;

// JSON types as Ajv tells them apart; numbers split into integers and the rest, so that
// "integer" and "number" overlap where they do.
inline constexpr unsigned kNull = 1, kBool = 2, kObject = 4, kArray = 8, kString = 16,
                         kInt = 32, kFrac = 64, kAllTypes = 127;

unsigned TypeOfValue(const json& v);
// The bits of a `type` name; 0 for none.
unsigned TypeNamed(const std::string& name);
// `key` as a JSON Pointer token (~ and / escaped).
std::string Token(std::string_view key);

// Whether some JSON Schema draft defines `key` as a keyword that validates (or that
// locates subschemas, as $defs). Any other key (title, description, x-..., id, $id,
// unknown names) only annotates: ignored.
bool IsValidationKeyword(const std::string& key);
// Keywords by what they apply to.
const std::set<std::string>& ObjectKeywords();
const std::set<std::string>& ArrayKeywords();
const std::set<std::string>& StringKeywords();
const std::set<std::string>& NumberKeywords();
// ajv-formats' formats of numbers: int32, int64, float, double.
bool NumberFormat(const json& format);

// Keys the merge writes into the schemas it makes (schema_merge.cc): not valid UTF-8, so
// that no parsed schema holds them. {kMergeAll: [...]} holds when each element does;
// {kMergeRef: "/pointer"} is the schema at that JSON Pointer of the root.
inline constexpr char kMergeAll[] = "\xff" "allOf";
inline constexpr char kMergeRef[] = "\xff" "$ref";

// Whether `s` holds for every value: true, or an object without validation keywords.
bool AlwaysTrue(const json& s);

inline bool Has(const json& s, const char* key) { return s.is_object() && s.contains(key); }

class SchemaCompiler {
 public:
  // `root` must outlive the compiler.
  SchemaCompiler(GrammarBuilder& b, const json& root, std::string path,
                 const JsonSchemaOptions& options)
      : b_(b), lex_(b, options.max_rules), root_(root), path_(std::move(path)), opt_(options) {}

  // The rule of the root schema, every $ref target compiled.
  absl::StatusOr<int> Run();

  // A schema merged with others (schema_merge.cc).
  struct Member {
    const json* s;
    std::string ptr;  // its JSON Pointer (real) or the place it is merged at (not)
    bool real;        // `s` is root_ at `ptr`: its subschemas may be referred to
  };

 private:
  // Errors and rule names: `path` then the pointer ("/" for the root itself).
  std::string Where(const std::string& ptr) const {
    const std::string p = path_ + ptr;
    return p.empty() ? "/" : p;
  }
  absl::Status Unsupported(const std::string& key, const std::string& ptr,
                           std::string_view note = "") const;
  absl::Status Invalid(const std::string& key, const std::string& ptr, std::string_view what) const;
  int Rule(const std::string& ptr, std::string_view what, std::vector<Sequence> alts);

  // A schema's rule, or kNever.
  absl::StatusOr<int> Compile(const json& s, const std::string& ptr);
  // The same for a subschema behind text (a property value, an array item): its $refs are
  // not left recursion.
  absl::StatusOr<int> CompileInside(const json& s, const std::string& ptr);
  // INVALID_ARGUMENT naming the first keyword of `s` other than `main`, `also`,
  // annotations and $defs.
  absl::Status OnlyBeside(const json& s, const std::string& ptr, const std::string& main,
                          const std::set<std::string>& also = {}) const;
  absl::StatusOr<const json*> Resolve(const json& s, const std::string& ptr,
                                      std::string* target) const;
  absl::StatusOr<int> CompileRef(const json& s, const std::string& ptr);
  absl::StatusOr<int> CompileAlternatives(const json& s, const std::string& ptr,
                                          const std::string& key);
  absl::Status CheckLeftRecursion() const;
  // The first validation keyword of `s` the compiler does not enforce, refused.
  absl::Status CheckKeywords(const json& s, const std::string& ptr) const;
  // Whether `s` needs merging: allOf, or $ref / anyOf / oneOf beside other validation
  // keywords.
  static bool NeedsMerge(const json& s);
  // Pointers (below the root) of schemas whose $id or id changes the base URI.
  void FindBases(const json& s, const std::string& ptr, int depth);

  // schema_merge.cc
  struct Merged;
  absl::StatusOr<int> CompileMerge(const Member& m, const std::string& ptr);
  absl::StatusOr<int> CompileMerged(const json& s, const std::string& ptr);
  absl::Status Flatten(const Member& m, Merged& acc, std::set<std::string>& inlining,
                       int depth);
  absl::StatusOr<json> Emit(Merged& acc, const std::string& ptr);

  // schema_types.cc
  absl::StatusOr<int> CompileEnum(const json& s, const std::string& ptr);
  // Whether the enum/const value `v` satisfies the other keywords of `s` (lengths and
  // numeric bounds); INVALID_ARGUMENT naming a keyword that would apply to it and that
  // this does not check.
  absl::StatusOr<bool> ValueAllowed(const json& s, const json& v, const std::string& ptr) const;
  absl::StatusOr<int> CompileTyped(const json& s, const std::string& ptr);
  absl::StatusOr<int> CompileObject(const json& s, const std::string& ptr);
  absl::StatusOr<int> CompileArray(const json& s, const std::string& ptr);
  absl::StatusOr<int> CompileString(const json& s, const std::string& ptr);
  // schema_numbers.cc: integer (and number unless `integer_only`) texts within the
  // schema's bounds; kNever when none.
  absl::StatusOr<int> CompileNumber(const json& s, const std::string& ptr, bool integer_only);
  absl::StatusOr<unsigned> Types(const json& s, const std::string& ptr) const;
  absl::StatusOr<int64_t> Count(const json& s, const char* key, const std::string& ptr,
                                int64_t absent) const;
  // Whether `s` is the root's schema at `ptr` (its subschemas may then be referred to).
  bool IsReal(const json& s, const std::string& ptr) const;
  // A JSON string, keys written as JSON.stringify writes them, other than `names`.
  absl::StatusOr<int> KeysExcept(const std::vector<std::string>& names, const std::string& ptr);
  // One rule matching exactly the byte strings `texts` (a trie: one parse at a time).
  absl::StatusOr<int> Trie(const std::vector<std::string>& texts, const std::string& ptr);

  // oneOf: whether two branches' valid values cannot overlap (over-approximations of
  // what Ajv accepts, so "disjoint" is a proof).
  bool Disjoint(const json& a, const json& b);
  // A oneOf of more than kPairwiseBranches: refused unless its branches are values, none
  // in two of them.
  absl::Status CheckManyBranches(const json& list, const std::string& ptr);
  unsigned ValidTypes(const json& s, int depth);
  const json* Plain(const json& s, int depth) const;
  std::optional<std::set<std::string>> ValueSet(const json& s) const;

  GrammarBuilder& b_;
  JsonLexicon lex_;
  const json& root_;
  std::string path_;
  JsonSchemaOptions opt_;
  int enum_values_ = 0;
  std::map<std::string, int> refs_;                   // target pointer -> its rule
  std::vector<std::pair<std::string, int>> pending_;  // targets not compiled yet
  std::map<std::string, std::string> ref_sites_;      // target -> a $ref naming it
  // Left recursion: the targets each target reaches through $ref before any text.
  std::string target_;  // the target being compiled
  bool pure_ = true;    // no text yet in it
  std::map<std::string, std::set<std::string>> left_refs_;
  std::map<std::string, unsigned> valid_types_;  // ValidTypes of $ref targets
  std::vector<std::string> bases_;               // FindBases
  // Merged schemas made while compiling (stable addresses), and each one's rule by its
  // text: a merged schema met again inside itself (recursion) refers to its rule.
  std::vector<std::unique_ptr<json>> made_;
  struct MergeState {
    int rule = -1;          // allocated when met again while compiling
    int result = kNever;
    bool done = false;
    int text_depth = 0;     // text_depth_ when it started
  };
  std::map<std::string, MergeState> merges_;
  int text_depth_ = 0;   // CompileInside nesting: text written since the walk started
  int merge_depth_ = 0;  // CompileMerged nesting
  int merge_count_ = 0;
};

}  // namespace attnserve::grammar::schema
