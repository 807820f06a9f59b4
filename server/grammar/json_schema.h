// JSON Schema to grammar (server/DESIGN.md §12): the text of a JSON value valid under a
// schema, as rules of a GrammarBuilder. Every text the grammar matches is valid under the
// schema (Ajv's verdict, 2020-12 with ajv-formats: tests/grammar/schema_oracle_test.mjs
// holds us to it); where the schema allows more than we write, the grammar matches the
// part described below, never text the schema refuses. Anything outside the subset is
// refused with INVALID_ARGUMENT naming the keyword and the JSON Pointer of its schema
// ("unsupported keyword 'patternProperties' at /properties/a"), never ignored.
//
// The subset. `type` (object, array, string, number, integer, boolean, null, or a list);
// `properties`, `required`, `additionalProperties` (true, false or a schema),
// `patternProperties` (patterns as `pattern`'s), `minProperties` and `maxProperties`
// where every object written keeps them (at most the required ones, at least the
// declared ones; 1 on an object whose other members are written); `dependentRequired`
// and `dependencies` of names; `items` (a schema), `prefixItems`, draft 4-7's `items`
// as an array with `additionalItems`, `minItems`, `maxItems`, `uniqueItems: false`;
// `minLength`, `maxLength`, `pattern` and `format` (date, time, date-time, uuid, email,
// ipv4, hostname, uri, uri-reference, url, byte, password, binary) on strings
// (schema_pattern.h says which patterns, and which part of each format is written);
// `format` int32, int64, float, double on numbers; `minimum`, `maximum`,
// `exclusiveMinimum`, `exclusiveMaximum` (numbers, or draft 4's booleans) on integers
// and numbers (bounds of at most 16 fraction digits); `multipleOf: 1` on integers; `enum` and
// `const` (any JSON values; beside them `type`, and string lengths and numeric bounds,
// which drop the values they refuse); `anyOf`; `oneOf` where its branches cannot overlap
// (their types are disjoint, or they are objects that require one property with
// disjoint const/enum values), so that it equals anyOf, or whose branches only require
// names (each branch is written without one name of each other branch, so that no
// other holds); `not` of true, false, {} or a `type`;
// `$ref` to "#", "#/$defs/...", "#/definitions/..." or any local JSON Pointer (recursion
// included: each referenced schema is one rule); `$defs`, `definitions`. `{}` and `true`
// are any JSON value, `false` none.
//
// Merged (schema_merge.cc, 2019+ semantics): `allOf`, `$ref` beside other keywords, and
// anyOf/oneOf beside other keywords are one schema whose keywords are every member's:
// types intersected, enum/const values intersected, bounds (lengths, counts, minimum
// ...) the tightest, required joined, properties joined (a name several members declare
// gets all their schemas; a name one member declares gets another member's
// additionalProperties), items and prefixItems item by item; the same pattern, format
// or multipleOf in several members is one, different ones are refused (as is
// patternProperties beside another member's properties). anyOf/oneOf beside the rest is
// each branch merged with the rest (a oneOf's branches must not overlap once merged).
//
// Keywords that only annotate are ignored, as every validator ignores them: title,
// description, default, examples, deprecated, readOnly, $comment, $schema, links, x-...,
// and any keyword no draft defines; so are $id and id, except that a $ref inside a
// subschema whose $id changes the base URI is refused (it would resolve against that
// base). Every other keyword some draft defines to validate (not, if/then/else,
// dependencies, contains, uniqueItems: true, ...) is refused. A schema that no JSON value
// satisfies is refused ("... matches no JSON value").
//
// What the grammar writes, where the schema allows more (the text is otherwise any JSON
// the schema allows):
// - Whitespace. Between two tokens (after { [ , : and before } ] , :): nothing, one
//   space, or one newline followed by up to 20 spaces or tabs. Nothing before the value
//   or after it. (JSON allows any amount; small models given that often never stop.)
// - Objects: the declared properties (`properties`, then names only in `required`), each
//   at most once, in declared order (the order of the ordered_json the schema is given
//   as: parse schemas as nlohmann::ordered_json to keep it), required ones always,
//   optional ones or not. A declared name that a patternProperties pattern matches takes
//   both schemas. Then other members: when additionalProperties is a schema (and no
//   pattern is there), any number of them with keys other than the declared names,
//   values under that schema; with one pattern that no declared name matches, keys the
//   pattern matches, values under its schema; none under maxProperties. No others, even
//   where additionalProperties is absent or true (what is left out is still valid).
//   Without `properties`, `required`, `patternProperties` and an additionalProperties
//   schema: any object, unless additionalProperties is false (then {}). Keys are written
//   as JSON.stringify writes them.
// - Without `type`, the types the keywords name: object for properties, required,
//   additionalProperties, patternProperties, minProperties or maxProperties; array for
//   items, prefixItems, minItems or maxItems; string for minLength, maxLength, pattern or
//   format; number for minimum, maximum, exclusiveMinimum, exclusiveMaximum or
//   multipleOf; any value if none of them is there.
// - Numbers: -?(0|[1-9][0-9]{0,15}), then for `number` an optional .[0-9]{1,16} and
//   [eE][+-]?[0-9]{1,2} (every one finite in a double); under a numeric bound, no
//   exponent. `integer`: no fraction or exponent.
// - Strings: any code point raw in UTF-8 except " \ and U+0000..U+001F, or escaped:
//   \" \\ \/ \b \f \n \r \t \uXXXX (surrogates only as a high-low pair). minLength and
//   maxLength count code points, as Ajv does. A maxLength past 1000 (without pattern or format): strings
//   of at most 1000 code points. Under `pattern` or `format`, and for enum
//   and const values, keys and strings are written as JSON.stringify writes them (only
//   " \ and controls escaped, as \" \\ \b \f \n \r \t or \u00xx).
// - enum and const values: their canonical tokens (strings as above, numbers as
//   JavaScript prints them: 1.0 as 1), object members in the value's order, whitespace
//   between tokens as everywhere.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "server/grammar/grammar.h"

namespace attnserve::grammar {

struct JsonSchemaOptions {
  // Limits that refuse a schema before or while compiling it (each named in the refusal).
  int max_schema_bytes = 64 * 1024;  // the schema as compact JSON text
  int max_depth = 32;                // nesting of the schema document; of a pattern's groups
  int max_rules = 4000;              // rules the compiled grammar may have
  int max_enum_values = 512;         // enum / const values, over the schema
};

// A rule matching the JSON texts valid under `schema` described above, added to `builder`
// (the tool-call grammars embed argument schemas this way). `path` prefixes the JSON
// Pointer in errors and rule names (e.g. "/tools/0/function/parameters"); "#" in a $ref is
// `schema` itself. A nlohmann::json converts, but its objects are sorted by key: pass an
// ordered_json to keep the declared order of properties.
absl::StatusOr<int> AddJsonSchema(GrammarBuilder& builder, const nlohmann::ordered_json& schema,
                                  const std::string& path = "",
                                  const JsonSchemaOptions& options = {});
// A rule matching any JSON object, any values in it (response_format json_object).
int AddAnyJsonObject(GrammarBuilder& builder);

// The grammar of `schema` alone (Build with options.max_rules).
absl::StatusOr<std::shared_ptr<const Grammar>> CompileJsonSchema(
    const nlohmann::ordered_json& schema, const JsonSchemaOptions& options = {});

}  // namespace attnserve::grammar
