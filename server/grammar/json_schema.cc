#include "server/grammar/json_schema.h"

#include <climits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/grammar/json_lexicon.h"
#include "server/grammar/schema_compiler.h"

namespace attnserve::grammar {
namespace {

using json = nlohmann::ordered_json;

// The pointer of the first place `value` nests deeper than `max_depth` objects and
// arrays, if any (recursion stops there, so the C++ stack is bounded too).
std::optional<std::string> TooDeep(const json& value, int max_depth, int depth,
                                   const std::string& ptr) {
  if (!value.is_object() && !value.is_array()) return std::nullopt;
  if (depth >= max_depth) return ptr;
  if (value.is_object()) {
    for (auto it = value.begin(); it != value.end(); ++it) {
      if (auto p = TooDeep(it.value(), max_depth, depth + 1, ptr + "/" + schema::Token(it.key()))) {
        return p;
      }
    }
  } else {
    for (size_t i = 0; i < value.size(); ++i) {
      if (auto p = TooDeep(value[i], max_depth, depth + 1, absl::StrCat(ptr, "/", i))) return p;
    }
  }
  return std::nullopt;
}

}  // namespace

absl::StatusOr<int> AddJsonSchema(GrammarBuilder& builder, const json& schema,
                                  const std::string& path, const JsonSchemaOptions& options) {
  try {
    const size_t bytes = schema.dump(-1, ' ', false, json::error_handler_t::replace).size();
    if (bytes > size_t(options.max_schema_bytes)) {
      return absl::InvalidArgumentError(absl::StrCat("schema at ", path.empty() ? "/" : path,
                                                     " is ", bytes, " bytes, over max_schema_bytes (",
                                                     options.max_schema_bytes, ")"));
    }
    if (auto deep = TooDeep(schema, options.max_depth, 0, "")) {
      const std::string where = path + *deep;
      return absl::InvalidArgumentError(absl::StrCat("schema at ", where.empty() ? "/" : where,
                                                     " nests deeper than max_depth (",
                                                     options.max_depth, ")"));
    }
    return schema::SchemaCompiler(builder, schema, path, options).Run();
  } catch (const json::exception& e) {
    // The compiler checks every type it reads; this is a backstop, not a path.
    return absl::InvalidArgumentError(absl::StrCat("schema at ", path.empty() ? "/" : path,
                                                   ": ", e.what()));
  }
}

int AddAnyJsonObject(GrammarBuilder& builder) {
  return JsonLexicon(builder, INT_MAX).AnyObject().rule;
}

absl::StatusOr<std::shared_ptr<const Grammar>> CompileJsonSchema(const json& schema,
                                                                 const JsonSchemaOptions& options) {
  GrammarBuilder builder;
  absl::StatusOr<int> root = AddJsonSchema(builder, schema, "", options);
  if (!root.ok()) return root.status();
  GrammarLimits limits;
  limits.max_rules = options.max_rules;
  return builder.Build(*root, limits);
}

}  // namespace attnserve::grammar
