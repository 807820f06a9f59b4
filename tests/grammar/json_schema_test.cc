// The JSON Schema compiler (server/grammar/json_schema.h) through the Matcher: the texts
// each schema's grammar accepts and refuses, refusals naming their keyword and path, the
// limits. schema_oracle_test.mjs holds the same grammars to Ajv's verdicts.
#include "server/grammar/json_schema.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/grammar/matcher.h"

namespace attnserve::grammar {
namespace {

using json = nlohmann::ordered_json;
using ::testing::HasSubstr;

std::shared_ptr<const Grammar> Compile(const std::string& schema, const JsonSchemaOptions& o = {}) {
  absl::StatusOr<std::shared_ptr<const Grammar>> g = CompileJsonSchema(json::parse(schema), o);
  EXPECT_TRUE(g.ok()) << schema << ": " << g.status();
  return g.ok() ? *g : nullptr;
}

std::string Refusal(const std::string& schema, const JsonSchemaOptions& o = {}) {
  absl::StatusOr<std::shared_ptr<const Grammar>> g = CompileJsonSchema(json::parse(schema), o);
  EXPECT_FALSE(g.ok()) << schema << " compiled";
  if (g.ok()) return "";
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(g.status().message());
}

bool Accepts(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  Matcher m(g);
  return m.Accept(text).ok() && m.CanEnd();
}

// Every text in `yes` accepted, every one in `no` refused.
void ExpectTexts(const std::string& schema, const std::vector<std::string>& yes,
                 const std::vector<std::string>& no) {
  auto g = Compile(schema);
  if (!g) return;
  for (const std::string& t : yes) EXPECT_TRUE(Accepts(g, t)) << schema << " refused " << t;
  for (const std::string& t : no) EXPECT_FALSE(Accepts(g, t)) << schema << " accepted " << t;
}

TEST(JsonSchemaTest, ScalarTypes) {
  ExpectTexts(R"({"type":"null"})", {"null"}, {"nul", "0", "\"null\""});
  ExpectTexts(R"({"type":"boolean"})", {"true", "false"}, {"True", "1"});
  ExpectTexts(R"({"type":"integer"})", {"0", "-0", "42", "-1234567890123456"},
              {"01", "1.0", "1e3", "+1", "12345678901234567", "-", ""});
  ExpectTexts(R"({"type":"number"})",
              {"0", "-0.5", "3.25e+10", "1E-99", "7e5", "0.1234567890123456"},
              {"01", "1.", ".5", "1e", "1e100", "0.12345678901234567", "NaN", "Infinity"});
  ExpectTexts(R"({"type":["string","null"]})", {"\"a\"", "null"}, {"1", "{}"});
}

TEST(JsonSchemaTest, StringsAreUtf8WithJsonEscapes) {
  ExpectTexts(R"({"type":"string"})",
              {"\"\"", "\"a b\"", "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"", "\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"",
               "\"\\u00e9\\u00E9\"", "\"\\ud83d\\ude00\"", "\"\x7f\""},
              {"\"\n\"", "\"\x01\"", "\"\xff\"", "\"\xc3\"", "\"\xed\xa0\x80\"", "\"\xc0\xaf\"",
               "\"\\ud800\"", "\"\\ude00\"", "\"\\x41\"", "\"\\u12\"", "\"a", "'a'"});
}

TEST(JsonSchemaTest, LengthsCountCodePoints) {
  ExpectTexts(R"({"type":"string","minLength":2,"maxLength":3})",
              {"\"ab\"", "\"abc\"", "\"\xc3\xa9\xf0\x9f\x98\x80\"", "\"\\ud83d\\ude00\\n\"", "\"\\\"\\\"\""},
              {"\"a\"", "\"abcd\"", "\"\xf0\x9f\x98\x80\"", "\"\\ud83d\\ude00\""});
  ExpectTexts(R"({"type":"string","minLength":12})", {"\"abcdefghijkl\""}, {"\"abcdefghijk\""});
}

TEST(JsonSchemaTest, WhitespaceIsBounded) {
  const std::string schema = R"({"type":"object","properties":{"a":{"type":"array"}}})";
  ExpectTexts(schema,
              {"{}", "{ }", "{\"a\":[]}", "{ \"a\" : [ 1 , 2 ] }", "{\n  \"a\": [\n\t\t1\n  ]\n}",
               "{\n" + std::string(20, ' ') + "\"a\":[]}"},
              {" {}", "{} ", "{}\n", "{  }", "{\n\n}", "{\r\n}", "{\n" + std::string(21, ' ') + "}",
               "{ \n}"});
}

TEST(JsonSchemaTest, PropertiesInDeclaredOrder) {
  const std::string schema = R"({"type":"object","properties":{
      "b":{"type":"integer"},"a":{"type":"string"},"c":{"type":"boolean"}},"required":["a"]})";
  ExpectTexts(schema, {R"({"a":"x"})", R"({"b":1,"a":"x"})", R"({"a":"x","c":true})",
                       R"({"b":1,"a":"x","c":false})"},
              {"{}", R"({"b":1})", R"({"a":"x","b":1})", R"({"a":"x","a":"y"})",
               R"({"a":"x","d":1})", R"({"a":"x",})", R"({,"a":"x"})"});
  // Optional only: {} and any ordered subset.
  ExpectTexts(R"({"properties":{"x":{},"y":{}},"additionalProperties":false})",
              {"{}", R"({"x":1})", R"({"y":[]})", R"({"x":null,"y":{"z":1}})"},
              {R"({"y":1,"x":1})", "[]", "1"});
}

TEST(JsonSchemaTest, ObjectsWithoutPropertiesAndEmptySchemas) {
  ExpectTexts(R"({"type":"object"})", {"{}", R"({"k":[1,{"x":null}],"k2":"v"})"}, {"[]", "1"});
  ExpectTexts(R"({"type":"object","additionalProperties":false})", {"{}", "{ }"}, {R"({"a":1})"});
  ExpectTexts(R"({"type":"object","required":["id"]})", {R"({"id":[true]})"}, {"{}", R"({"x":1})"});
  for (const char* any : {"{}", "true", R"({"description":"anything","$comment":"x"})"}) {
    ExpectTexts(any, {"1", "\"s\"", "null", "[{}]", R"({"a":{"b":[1.5e3]}})"}, {"", "nul", "[1,]"});
  }
  EXPECT_THAT(Refusal("false"), HasSubstr("matches no JSON value"));
  EXPECT_THAT(Refusal(R"({"type":"object","properties":{"a":false},"required":["a"]})"),
              HasSubstr("matches no JSON value"));
  ExpectTexts(R"({"type":"object","properties":{"a":false,"b":{"type":"null"}}})",
              {"{}", R"({"b":null})"}, {R"({"a":1})"});
  ExpectTexts(R"({"type":"object","properties":{"a":{"type":"object","enum":["x"]}}})", {"{}"},
              {R"({"a":"x"})", R"({"b":1})"});
}

TEST(JsonSchemaTest, NoTypeMeansTheTypesTheKeywordsName) {
  ExpectTexts(R"({"properties":{"a":{"type":"null"}}})", {R"({"a":null})"}, {"1", "\"s\""});
  ExpectTexts(R"({"items":{"type":"integer"},"maxLength":3})", {"[1,2]", "\"abc\""},
              {"\"abcd\"", "{}", "null"});
}

TEST(JsonSchemaTest, EnumAndConstAreCanonicalTokens) {
  ExpectTexts(R"({"enum":["red","green",1.0,2.5,null,true,{"k":[1,"a"]},[]]})",
              {"\"red\"", "\"green\"", "1", "2.5", "null", "true", R"({"k":[1,"a"]})",
               "{ \"k\" : [ 1 , \"a\" ] }", "[]", "[ ]"},
              {"\"gree\"", "\"blue\"", "1.0", "1e0", "false", R"({"k":[1]})", "\"red\" "});
  ExpectTexts(R"({"type":"string","enum":["a","b",1]})", {"\"a\"", "\"b\""}, {"1"});
  ExpectTexts(R"({"type":"integer","enum":[1,1.5,"x"]})", {"1"}, {"1.5", "\"x\""});
  ExpectTexts(R"({"const":"line\nbreak \"q\""})", {R"("line\nbreak \"q\"")"},
              {R"("line\u000abreak \"q\"")"});
  ExpectTexts(R"({"enum":["a","b"],"const":"b"})", {"\"b\""}, {"\"a\""});
  ExpectTexts(R"({"const":1e21})", {"1e+21"}, {"1e21", "1000000000000000000000"});
  ExpectTexts(R"({"enum":["ab","abc","a"]})", {"\"a\"", "\"ab\"", "\"abc\""}, {"\"abcd\"", "\"\""});
  EXPECT_THAT(Refusal(R"({"enum":["a"],"type":"integer"})"), HasSubstr("matches no JSON value"));
}

TEST(JsonSchemaTest, AnyOfOneOfAllOf) {
  ExpectTexts(R"({"anyOf":[{"type":"integer"},{"type":"string","maxLength":1}],"title":"t"})",
              {"1", "\"a\""}, {"\"ab\"", "null"});
  ExpectTexts(R"({"oneOf":[{"type":"integer"},{"type":"string"},{"type":"null"}]})",
              {"1", "\"a\"", "null"}, {"1.5"});
  ExpectTexts(R"({"oneOf":[
      {"type":"object","properties":{"kind":{"const":"a"},"x":{"type":"integer"}},"required":["kind"]},
      {"type":"object","properties":{"kind":{"enum":["b","c"]}},"required":["kind"]}]})",
              {R"({"kind":"a","x":1})", R"({"kind":"c"})"}, {R"({"kind":"d"})"});
  ExpectTexts(R"({"allOf":[{"type":"boolean"}]})", {"true"}, {"1"});
  EXPECT_THAT(Refusal(R"({"oneOf":[{"type":"number"},{"type":"integer"}]})"),
              HasSubstr("unsupported keyword 'oneOf' at / (branches 0 and 1 may both match"));
  EXPECT_THAT(Refusal(R"({"oneOf":[{"type":"object"},{"type":"object","required":["a"]}]})"),
              HasSubstr("unsupported keyword 'oneOf' at /"));
  EXPECT_THAT(Refusal(R"({"allOf":[{"type":"string","pattern":"a"},{"pattern":"b"}]})"),
              HasSubstr("unsupported keyword 'pattern' at /allOf/1 (beside another pattern in allOf)"));
  EXPECT_THAT(Refusal(R"({"allOf":[{"type":"string"},{"type":"integer"}]})"),
              HasSubstr("matches no JSON value"));
}

TEST(JsonSchemaTest, AnnotationsAndUnknownKeywordsAreIgnored) {
  ExpectTexts(R"({"type":"object","id":"http://x/y.json","self":{"href":"{id}"},"links":[{"rel":"a"}],
      "x-kubernetes-group-version-kind":[{"group":""}],"properties":{
      "a":{"type":"string","_format":"uri","readonly":true,"nullable":true,"example":"e"}},
      "required":["a"],"additionalProperties":false})",
              {R"({"a":"x"})"}, {"{}", R"({"a":1})", R"({"a":"x","b":1})"});
  // $id changes what a $ref below it resolves against: refused there, ignored elsewhere.
  ExpectTexts(R"({"$id":"http://x/root.json","$defs":{"n":{"$id":"n.json","type":"null"}},
      "$ref":"#/$defs/n"})", {"null"}, {"1"});
  EXPECT_THAT(Refusal(R"({"$defs":{"x":{"$id":"x.json","$defs":{"s":{"type":"null"}},
      "properties":{"a":{"$ref":"#/$defs/s"}}}},"$ref":"#/$defs/x"})"),
              HasSubstr("unsupported keyword '$ref' at /$defs/x/properties/a (inside the $id at /$defs/x"));
  EXPECT_THAT(Refusal(R"({"properties":{"a":{"id":"a.json","items":{"$ref":"#/definitions/t"}}},
      "definitions":{"t":{}}})"),
              HasSubstr("unsupported keyword '$ref' at /properties/a/items (inside the $id"));
  // Keywords that validate and are not enforced are still refused.
  for (const char* k : {"contains", "propertyNames", "dependentSchemas", "unevaluatedProperties"}) {
    EXPECT_THAT(Refusal(json({{k, json::object({{"type", "null"}})}}).dump()),
                HasSubstr(std::string("unsupported keyword '") + k + "' at /"));
  }
  EXPECT_THAT(Refusal(R"({"type":"array","uniqueItems":true})"), HasSubstr("'uniqueItems' at /"));
  ExpectTexts(R"({"type":"array","uniqueItems":false,"maxItems":1})", {"[]", "[1]"}, {"[1,1]"});
}

TEST(JsonSchemaTest, AllOfMergesItsSchemas) {
  // Types intersected, bounds tightened, properties and required joined.
  ExpectTexts(R"({"allOf":[{"type":["string","null"],"maxLength":3},{"type":"string","minLength":2,"maxLength":4}]})",
              {"\"ab\"", "\"abc\""}, {"null", "\"a\"", "\"abcd\""});
  ExpectTexts(R"({"allOf":[
      {"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},
      {"properties":{"b":{"type":"string"},"a":{"minimum":0}},"required":["b"]}]})",
              {R"({"a":1,"b":"x"})", R"({"a":0,"b":""})"},
              {R"({"a":1})", R"({"b":"x"})", R"({"a":-1,"b":"x"})", R"({"a":"1","b":"x"})"});
  // A member's additionalProperties holds for the names only another member declares.
  ExpectTexts(R"({"allOf":[
      {"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":false},
      {"properties":{"a":{},"b":{"type":"string"}}}]})",
              {"{}", R"({"a":1})"}, {R"({"b":"x"})", R"({"a":1,"b":"x"})"});
  ExpectTexts(R"({"allOf":[{"type":"array","items":{"type":"integer"}},
      {"prefixItems":[{"minimum":5}],"maxItems":2}]})",
              {"[]", "[5]", "[7,1]"}, {"[4]", "[5,1,2]", "[5,\"a\"]"});
  ExpectTexts(R"({"allOf":[{"enum":["a","b",1]},{"enum":["b",1,2]},{"type":"string"}]})",
              {"\"b\""}, {"\"a\"", "1", "2"});
  // `not` of true or false: a schema no value or every value satisfies.
  ExpectTexts(R"({"type":"object","properties":{"a":{"not":{}},"b":{"not":false}},"additionalProperties":false})",
              {"{}", R"({"b":[1]})"}, {R"({"a":1})"});
  ExpectTexts(R"({"not":{"type":["null","object"]},"type":["null","string","integer"]})", {"\"a\"", "1"},
              {"null", "{}"});
  ExpectTexts(R"({"not":{"type":"string"}})", {"1", "null", "[]"}, {"\"a\""});
  EXPECT_THAT(Refusal(R"({"type":"number","not":{"type":"integer"}})"),
              HasSubstr("unsupported keyword 'not' at / (a number that is not an integer"));
  EXPECT_THAT(Refusal(R"({"not":{"required":["a"]}})"), HasSubstr("unsupported keyword 'not' at /"));
}

TEST(JsonSchemaTest, RefBesideKeywordsIsMergedWithItsTarget) {
  const std::string base = R"("$defs":{"list":{"type":"array","items":{"type":"integer"}},
      "named":{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}})";
  ExpectTexts("{" + base + R"(,"$ref":"#/$defs/list","maxItems":2})", {"[]", "[1,2]"},
              {"[1,2,3]", "[\"a\"]"});
  ExpectTexts("{" + base + R"(,"$ref":"#/$defs/named","properties":{"age":{"type":"integer"}},
      "required":["age"]})",
              {R"({"name":"x","age":1})"}, {R"({"name":"x"})", R"({"age":1})"});
  // Recursive: a tree whose nodes are merged with their own bound.
  ExpectTexts(R"({"$defs":{"node":{"type":"object","properties":{
      "kids":{"type":"array","items":{"$ref":"#/$defs/node","maxProperties":1}}}}},
      "$ref":"#/$defs/node","required":["kids"]})",
              {R"({"kids":[]})", R"({"kids":[{},{"kids":[{"kids":[]}]}]})"}, {"{}", R"({"kids":[1]})"});
  // additionalProperties merged at each level of a recursion.
  ExpectTexts(R"({"definitions":{"r":{"type":"object","additionalProperties":{"minProperties":1,
      "anyOf":[{"type":"string"},{"$ref":"#/definitions/r"}]}}},"$ref":"#/definitions/r"})",
              {"{}", R"({"a":"x"})", R"({"a":{"b":"x"}})", R"({"a":{"b":{"c":"y"},"d":"z"}})"},
              {R"({"a":{}})", R"({"a":{"b":{}}})", R"({"a":{"b":{"c":{}}}})"});
  EXPECT_THAT(Refusal(R"({"$defs":{"a":{"$ref":"#/$defs/a","type":"null"}},"$ref":"#/$defs/a"})"),
              HasSubstr("contains itself before any text"));
}

TEST(JsonSchemaTest, TypeBesideAnyOfAndOneOf) {
  ExpectTexts(R"({"type":"object","anyOf":[{"required":["a"]},{"required":["b"]}],
      "properties":{"a":{"type":"integer"},"b":{"type":"string"}}})",
              {R"({"a":1})", R"({"b":"x"})", R"({"a":1,"b":"x"})"}, {"{}", "1", R"({"a":"x"})"});
  // oneOf branches that overlap only outside `type` are apart once merged.
  ExpectTexts(R"({"type":["string","null"],"oneOf":[{"type":"string","maxLength":1},{"type":["null","integer"]},
      {"type":"integer"}]})",
              {"\"a\"", "null"}, {"\"ab\"", "1"});
  // oneOf of required names: each branch written without the names only others require.
  ExpectTexts(R"({"type":"object","properties":{"r":{},"w":{},"h":{},"n":{}},
      "oneOf":[{"required":["r"]},{"required":["w","h"]},{"required":["w"],"description":"d"}]})",
              {R"({"r":1})", R"({"r":1,"h":2,"n":3})", R"({"w":1})"},
              {R"({"r":1,"w":2})", R"({"w":1,"h":2})", R"({"n":1})", "{}", R"({"w":1,"n":2,"h":3})"});
  EXPECT_THAT(Refusal(R"({"type":"integer","oneOf":[{"minimum":1},{"maximum":5}]})"),
              HasSubstr("unsupported keyword 'oneOf' at / (branches 0 and 1 may both match"));
}

TEST(JsonSchemaTest, IntegerBoundsAreExact) {
  ExpectTexts(R"({"type":"integer","minimum":0})", {"0", "-0", "7", "1234567890123456"},
              {"-1", "-10", "1.5"});
  ExpectTexts(R"({"type":"integer","minimum":-12,"maximum":345})",
              {"-12", "-9", "-0", "0", "99", "100", "299", "345"},
              {"-13", "-20", "346", "350", "400", "1000", "0345"});
  ExpectTexts(R"({"type":"integer","exclusiveMinimum":1,"exclusiveMaximum":10})",
              {"2", "9"}, {"1", "10", "0"});
  ExpectTexts(R"({"type":"integer","minimum":1,"exclusiveMinimum":true,"maximum":3})",  // draft 4
              {"2", "3"}, {"1", "4"});
  ExpectTexts(R"({"type":"integer","minimum":1.5,"maximum":3.5})", {"2", "3"}, {"1", "4"});
  ExpectTexts(R"({"type":"integer","maximum":-1})", {"-1", "-1000"}, {"0", "-0", "1"});
  ExpectTexts(R"({"type":"integer","multipleOf":1,"minimum":100,"maximum":100})", {"100"}, {"99", "101"});
  EXPECT_THAT(Refusal(R"({"type":"integer","minimum":5,"maximum":4})"), HasSubstr("matches no JSON value"));
  EXPECT_THAT(Refusal(R"({"type":"integer","multipleOf":2})"),
              HasSubstr("unsupported keyword 'multipleOf' at /"));
}

TEST(JsonSchemaTest, NumberBoundsAreExactWithoutExponents) {
  ExpectTexts(R"({"type":"number","minimum":0})",
              {"0", "-0", "-0.0", "0.5", "12.25", "0.000"}, {"-0.5", "-1", "-0.001", "1e3"});
  ExpectTexts(R"({"type":"number","exclusiveMinimum":0,"maximum":1})",
              {"0.5", "1", "1.000", "0.0000000000000001"}, {"0", "0.0", "-0", "1.01", "2"});
  ExpectTexts(R"({"type":"number","minimum":-1,"exclusiveMaximum":2})",
              {"-1", "-1.0", "-0.5", "0", "1.999"}, {"-1.01", "-2", "2", "2.0"});
  // Bounds with fractions: the fraction compared digit by digit.
  ExpectTexts(R"({"type":"number","minimum":0.5})", {"0.5", "0.50", "0.51", "0.6", "1", "12.05"},
              {"0.49", "0.4999", "0", "0.05", "-0.5"});
  ExpectTexts(R"({"type":"number","exclusiveMinimum":0.25,"maximum":0.3})", {"0.26", "0.251", "0.3", "0.300"},
              {"0.25", "0.250", "0.2", "0.31", "0.3001", "1"});
  ExpectTexts(R"({"type":"number","minimum":-459.67,"exclusiveMaximum":-1.5})",
              {"-459.67", "-459.6", "-2", "-1.51", "-100"}, {"-459.671", "-460", "-1.5", "-1", "0"});
  ExpectTexts(R"({"type":"number","minimum":-0.5,"maximum":0.5})", {"-0.5", "0", "-0", "0.5", "-0.25"},
              {"-0.51", "0.51", "1", "-1"});
  EXPECT_THAT(Refusal(R"({"type":"number","minimum":1e-20})"),
              HasSubstr("unsupported keyword 'minimum' at / (a bound with more than 16 fraction digits"));
  // Bounds apply to numbers only.
  ExpectTexts(R"({"type":["number","string"],"maximum":0})", {"-3", "\"5\""}, {"5"});
}

TEST(JsonSchemaTest, EnumBesideOtherKeywordsKeepsTheValuesTheyAllow) {
  ExpectTexts(R"({"enum":["a","abc",5,-1,null],"maxLength":2,"minimum":0})", {"\"a\"", "5", "null"},
              {"\"abc\"", "-1"});
  ExpectTexts(R"({"enum":[1,3000000000,2.5,"x"],"format":"int32"})", {"1", "\"x\""}, {"3000000000", "2.5"});
  EXPECT_THAT(Refusal(R"({"enum":["a"],"pattern":"a"})"),
              HasSubstr("unsupported keyword 'pattern' at / (beside enum or const)"));
}

TEST(JsonSchemaTest, DraftSevenTuples) {
  ExpectTexts(R"({"type":"array","items":[{"type":"string"},{"type":"integer"}],"additionalItems":false})",
              {"[]", "[\"a\"]", "[\"a\",1]"}, {"[1]", "[\"a\",1,2]"});
  ExpectTexts(R"({"type":"array","items":[{"type":"string"}],"additionalItems":{"type":"null"}})",
              {"[\"a\",null,null]"}, {"[\"a\",1]"});
}

TEST(JsonSchemaTest, AdditionalPropertiesAsASchema) {
  ExpectTexts(R"({"type":"object","additionalProperties":{"type":"integer"}})",
              {"{}", R"({"a":1})", R"({"a":1, "b":2})", "{\"\":0,\"\xc3\xa9\":1,\"a\\\"b\":2}"},
              {R"({"a":"x"})", R"({"a":1,})", "[]", R"({"\u0061":1})"});
  // Other names than the declared ones, after them.
  ExpectTexts(R"({"type":"object","properties":{"name":{"type":"string"},"id":{"type":"null"}},
      "required":["name"],"additionalProperties":{"type":"boolean"}})",
              {R"({"name":"x"})", R"({"name":"x","n":true,"nam":false,"names":true,"i":true,"idx":false})",
               R"({"name":"x","id":null,"x":true})"},
              {R"({"name":"x","name":true})", R"({"name":"x","id":true})", R"({"name":"x","n":1})",
               R"({"n":true})", R"({"n":true,"name":"x"})"});
  ExpectTexts(R"({"type":"object","additionalProperties":{"type":"null"},"minProperties":1})",
              {R"({"a":null})", R"({"a":null,"b":null})"}, {"{}"});
  // A required name not declared takes the additionalProperties schema.
  ExpectTexts(R"({"required":["id"],"additionalProperties":{"type":"integer"}})",
              {R"({"id":1})", R"({"id":1,"x":2})"}, {R"({"id":"a"})", "{}"});
  // Under maxProperties, only the declared members are written.
  ExpectTexts(R"({"properties":{"a":{}},"additionalProperties":{"type":"null"},"maxProperties":1})",
              {"{}", R"({"a":1})"}, {R"({"a":1,"b":null})"});
}

TEST(JsonSchemaTest, PatternProperties) {
  ExpectTexts(R"({"type":"object","patternProperties":{"^[a-z]+$":{"type":"integer"}},"additionalProperties":false})",
              {"{}", R"({"ab":1,"c":2})"}, {R"({"Ab":1})", R"({"ab":"x"})", R"({"":1})"});
  // A declared name the pattern matches takes both schemas; members past the declared
  // ones are then not written.
  ExpectTexts(R"({"type":"object","properties":{"x1":{"type":"integer"},"y":{"type":"string"}},
      "patternProperties":{"\\d$":{"minimum":5}},"additionalProperties":false})",
              {R"({"x1":5})", R"({"y":"a"})", "{}"}, {R"({"x1":4})", R"({"y2":7})", R"({"y":5})"});
  // Several patterns: only the declared members.
  ExpectTexts(R"({"patternProperties":{"^a":{"type":"integer"},"^b":{"type":"string"}}})", {"{}"},
              {R"({"a":1})", R"({"b":"x"})"});
}

TEST(JsonSchemaTest, DependentRequired) {
  // c depends on d, which may be absent: c is not written; a required makes b required.
  ExpectTexts(R"({"type":"object","properties":{"a":{},"b":{},"c":{},"d":{}},"required":["a"],
      "dependentRequired":{"a":["b"],"c":["d"]}})",
              {R"({"a":1,"b":2})", R"({"a":1,"b":2,"d":4})"},
              {R"({"a":1})", R"({"a":1,"b":2,"c":3,"d":4})", R"({"a":1,"b":2,"c":3})"});
  ExpectTexts(R"({"dependencies":{"x":["y"]},"additionalProperties":{"type":"integer"}})",
              {"{}", R"({"y":1})", R"({"z":1,"xx":2})"}, {R"({"x":1})", R"({"x":1,"y":2})"});
  ExpectTexts(R"({"allOf":[{"properties":{"p":{},"q":{}},"dependentRequired":{"p":["q"]}},{"required":["p"]}]})",
              {R"({"p":1,"q":2})"}, {R"({"p":1})"});
  EXPECT_THAT(Refusal(R"({"type":"object","dependencies":{"a":{"required":["b"]}}})"),
              HasSubstr("unsupported keyword 'dependencies' at / (with a schema"));
}

TEST(JsonSchemaTest, LongStringsAreWrittenShorter) {
  ExpectTexts(R"({"type":"string","maxLength":100000})", {"\"" + std::string(1000, 'a') + "\""},
              {"\"" + std::string(1001, 'a') + "\""});
}

TEST(JsonSchemaTest, PropertyCountsWhereEveryObjectKeepsThem) {
  ExpectTexts(R"({"type":"object","properties":{"a":{},"b":{}},"required":["a"],"minProperties":1,"maxProperties":2})",
              {R"({"a":1})", R"({"a":1,"b":2})"}, {"{}"});
  ExpectTexts(R"({"type":"object","properties":{"a":{},"b":{}},"minProperties":1})",
              {R"({"a":1})", R"({"b":1})", R"({"a":1,"b":2})"}, {"{}"});
  ExpectTexts(R"({"type":"object","minProperties":1})", {R"({"x":1})", R"({"x":1,"y":[]})"}, {"{}"});
  EXPECT_THAT(Refusal(R"({"type":"object","properties":{"a":{},"b":{}},"minProperties":2})"),
              HasSubstr("unsupported keyword 'minProperties' at /"));
  EXPECT_THAT(Refusal(R"({"type":"object","properties":{"a":{},"b":{}},"maxProperties":1})"),
              HasSubstr("unsupported keyword 'maxProperties' at /"));
}

TEST(JsonSchemaTest, RefsRecursiveAndCompiledOnce) {
  const std::string tree = R"({"$defs":{"node":{"type":"object","properties":{
      "value":{"type":"integer"},
      "children":{"type":"array","items":{"$ref":"#/$defs/node"}}},
      "required":["value"],"additionalProperties":false}},
      "type":"object","properties":{"root":{"$ref":"#/$defs/node"},
                                    "other":{"$ref":"#/$defs/node"}}})";
  ExpectTexts(tree, {R"({"root":{"value":1,"children":[{"value":2,"children":[{"value":3}]}]}})"},
              {R"({"root":{"value":1,"children":[{"children":[]}]}})"});
  const std::string rules = Compile(tree)->Describe();
  EXPECT_EQ(std::count(rules.begin(), rules.end(), '\n'), Compile(tree)->rule_count());
  EXPECT_THAT(rules, HasSubstr("schema /$defs/node ::="));
  EXPECT_EQ(rules.find("schema /$defs/node ::="), rules.rfind("schema /$defs/node ::="));
  ExpectTexts(R"({"type":"array","items":{"$ref":"#"},"maxItems":2})", {"[]", "[[],[[]]]"},
              {"[[],[],[]]", "[1]"});
  ExpectTexts(R"({"definitions":{"a~b/c":{"type":"null"}},"$ref":"#/definitions/a~0b~1c"})",
              {"null"}, {"1"});
  ExpectTexts(R"({"$defs":{"s":{"type":"string"}},"$ref":"#/%24defs/s"})", {"\"x\""}, {"1"});
  EXPECT_THAT(Refusal(R"({"$defs":{"a":{"anyOf":[{"$ref":"#/$defs/b"},{"type":"null"}]},
                                   "b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"})"),
              HasSubstr("before any text through $ref"));
  EXPECT_THAT(Refusal(R"({"$ref":"#"})"), HasSubstr("schema at / contains itself before any text"));
  EXPECT_THAT(Refusal(R"({"anyOf":[{"type":"null"},{"$ref":"#"}]})"),
              HasSubstr("before any text through $ref at /anyOf/1"));
  EXPECT_THAT(Refusal(R"({"$ref":"#/$defs/missing"})"),
              HasSubstr("$ref '#/$defs/missing' at / resolves to no schema"));
}

TEST(JsonSchemaTest, ArraysWithBoundsAndPrefixItems) {
  ExpectTexts(R"({"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":3})",
              {"[1,2]", "[1, 2, 3]"}, {"[]", "[1]", "[1,2,3,4]", "[1,\"a\"]", "[1,2,]"});
  ExpectTexts(R"({"type":"array","minItems":12,"items":{"type":"null"}})",
              {"[" + std::string("null,null,null,null,null,null,null,null,null,null,null,null") + "]"},
              {"[null,null,null,null,null,null,null,null,null,null,null]"});
  ExpectTexts(R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false})",
              {"[]", "[\"a\"]", "[\"a\",1]"}, {"[1]", "[\"a\",1,2]"});
  ExpectTexts(R"({"type":"array","prefixItems":[{"type":"string"}],"items":{"type":"null"},"minItems":2})",
              {"[\"a\",null]", "[\"a\",null,null]"}, {"[\"a\"]", "[\"a\",\"b\"]"});
}

TEST(JsonSchemaTest, Patterns) {
  ExpectTexts(R"({"type":"string","pattern":"^[A-Z]{2}-\\d{3,4}$"})", {"\"AB-123\"", "\"XY-0000\""},
              {"\"ab-123\"", "\"AB-12\"", "\"AB-12345\"", "\"xAB-123\""});
  // Unanchored: any string containing a match.
  ExpectTexts(R"({"type":"string","pattern":"a.c"})", {"\"abc\"", "\"xxa-cyy\"", "\"a\\\"c\""},
              {"\"ac\"", "\"a\\nc\""});
  ExpectTexts(R"({"type":"string","pattern":"^(?:cat|dog)s?$|^x$"})",
              {"\"cat\"", "\"dogs\"", "\"x\""}, {"\"cats!\"", "\"xx\""});
  ExpectTexts(R"({"type":"string","pattern":"^[^a-z\\s]+$"})", {"\"AB\xc3\xa9\"", "\"\\\"\""},
              {"\"a\"", "\"A B\"", "\"\""});
  ExpectTexts(R"({"type":"string","pattern":"^\\u00e9\\x41\\t\\/$"})", {"\"\xc3\xa9" "A\\t/\""},
              {"\"\\u00e9A\\t/\""});
  ExpectTexts(R"({"type":"string","pattern":"^\\w+?@\\w+\\.com$","minLength":6})",
              {"\"me@x.com\""}, {"\"@x.com\""});
  for (const auto& [pattern, what] : std::vector<std::pair<std::string, std::string>>{
           {"^(?=a)a$", "lookaround"},
           {"^(a)\\1$", "back reference"},
           {"\\bword", "word boundary"},
           {"a^b", "anchor"},
           {"^(a$)", "anchor inside a group"},
           {"^(a*)*$", "can match the empty string"},
           {"\\p{L}", "property escape"},
           {"a{2", "not a quantifier"},
           {"[z-a]", "out of order"},
           {"(a", "unterminated group"},
           {"\\q", "escape"}}) {
    EXPECT_THAT(Refusal(json({{"type", "string"}, {"pattern", pattern}}).dump()),
                AllOf(HasSubstr("unsupported keyword 'pattern' at /"), HasSubstr(what)))
        << pattern;
  }
  EXPECT_THAT(Refusal(R"({"type":"string","pattern":"^a+$","maxLength":3})"),
              HasSubstr("unsupported keyword 'maxLength' at / (beside pattern"));
}

TEST(JsonSchemaTest, Formats) {
  ExpectTexts(R"({"type":"string","format":"date"})",
              {"\"2024-02-29\"", "\"2000-02-29\"", "\"1999-12-31\"", "\"0000-02-29\"", "\"2023-04-30\""},
              {"\"2023-02-29\"", "\"1900-02-29\"", "\"2023-04-31\"", "\"2023-13-01\"",
               "\"2023-00-10\"", "\"2023-1-01\"", "\"2023-01-00\""});
  ExpectTexts(R"({"type":"string","format":"time"})",
              {"\"23:59:59Z\"", "\"00:00:00.123456789+05:30\"", "\"12:30:00-08:00\"", "\"01:02:03z\""},
              {"\"12:30:00-0800\"", "\"01:02:03+05\"", "\"24:00:00Z\"", "\"12:60:00Z\"", "\"12:00:00\"", "\"12:00:00+24:00\"",
               "\"12:00:00.Z\"", "\"23:59:60Z\""});
  ExpectTexts(R"({"type":"string","format":"date-time"})",
              {"\"2024-02-29T12:00:00Z\"", "\"2024-01-01t00:00:00+01:00\""},
              {"\"2024-01-01 00:00:00Z\"", "\"2024-01-01\"", "\"2024-01-01T25:00:00Z\"", "\"2024-01-01TT00:00:00Z\""});
  ExpectTexts(R"({"type":"string","format":"uuid"})",
              {"\"123e4567-e89b-12d3-a456-426614174000\"",
               "\"URN:uuid:123E4567-E89B-12D3-A456-426614174000\""},
              {"\"123e4567e89b12d3a456426614174000\"", "\"123e4567-e89b-12d3-a456-42661417400g\""});
  ExpectTexts(R"({"type":"string","format":"email"})",
              {"\"a.b+c@example.com\"", "\"X_Y@Mail.Example.ORG\"", "\"a@b.c\""},
              {"\"a@b\"", "\"a@\"", "\"@b.c\"", "\"a b@c.d\"", "\"a..b@c.d\"", "\"a@-b.c\""});
  ExpectTexts(R"({"type":"string","format":"ipv4"})", {"\"0.0.0.0\"", "\"192.168.1.255\""},
              {"\"256.1.1.1\"", "\"01.1.1.1\"", "\"1.1.1\""});
  ExpectTexts(R"({"type":"string","format":"hostname"})", {"\"example.com\"", "\"a-b.c.d\"", "\"x\""},
              {"\"-a.com\"", "\"a_b.com\"", "\"a..b\"", "\"a.b.c.d\""});
  ExpectTexts(R"({"type":"string","format":"uri"})",
              {"\"https://example.com\"", "\"http://a.b:8080/p/a%20th?q=1&r=(2)#frag\"", "\"urn+x://h/\""},
              {"\"example.com\"", "\"/path\"", "\"http://a b\"", "\"http://a/%zz\"", "\"HTTP://a\""});
  ExpectTexts(R"({"type":"string","format":"uri-reference"})",
              {"\"https://example.com/x\"", "\"/a/b?c#d\"", "\"#top\""}, {"\"a b\"", "\"//\""});
  ExpectTexts(R"({"type":"string","format":"url"})", {"\"https://example.com/a?b\"", "\"ftp://x-y.io:21\""},
              {"\"mailto://a.com\"", "\"http://localhost\"", "\"http://a.b1\"", "\"http://a.bc?q\""});
  ExpectTexts(R"({"type":"string","format":"byte"})", {"\"\"", "\"QUJD\"", "\"QUI=\"", "\"QQ==\"", "\"a+/b\""},
              {"\"QUJ\"", "\"Q===\"", "\"QUJD\\nQUJD\""});
  // Formats of numbers: int32 bounds integers; float and double hold for every number.
  ExpectTexts(R"({"type":"integer","format":"int32"})", {"2147483647", "-2147483648", "0"},
              {"2147483648", "-2147483649"});
  ExpectTexts(R"({"type":"number","format":"int64"})", {"12"}, {"1.5"});
  ExpectTexts(R"({"type":["number","string"],"format":"double"})", {"1.5", "\"x\""}, {"null"});
  ExpectTexts(R"({"type":["integer","string"],"format":"date"})", {"7", "\"2024-01-01\""}, {"\"x\""});
  EXPECT_THAT(Refusal(R"({"type":"string","format":"phone"})"),
              HasSubstr("unsupported keyword 'format' at / (format 'phone'"));
  EXPECT_THAT(Refusal(R"({"type":"integer","format":"uint32"})"),
              HasSubstr("unsupported keyword 'format' at / (on a number"));
}

TEST(JsonSchemaTest, RefusalsNameTheKeywordAndItsPath) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"type":"object","properties":{"a":{"type":"object","patternProperties":{"\\bx":{}}}}})",
       "unsupported keyword 'pattern' at /properties/a/patternProperties/\\bx"},
      {R"({"type":"number","minimum":0.5,"multipleOf":0.5})", "unsupported keyword 'multipleOf' at /"},
      {R"({"not":{"enum":[null]}})", "unsupported keyword 'not' at /"},
      {R"({"if":{},"then":{}})", "unsupported keyword 'if' at /"},
      {R"({"type":"array","items":{"type":"array","uniqueItems":true}})",
       "unsupported keyword 'uniqueItems' at /items"},
      {R"({"$ref":"https://example.com/s.json"})", "unsupported keyword '$ref' at / (a remote reference"},
      {R"({"$ref":"#anchor"})", "unsupported keyword '$ref' at / (a plain-name fragment"},
      {R"({"anyOf":[{"type":"string","format":"iri"}]})", "unsupported keyword 'format' at /anyOf/0"},
      {R"({"$ref":"#/$defs/a","description":"d","pattern":"b","$defs":{"a":{"pattern":"a"}}})",
       "unsupported keyword 'pattern' at / (beside another pattern in allOf)"},
      {R"({"enum":[{}],"minProperties":3})", "unsupported keyword 'minProperties' at / (beside enum"},
      {R"({"properties":{"a/b":{"minProperties":2}}})", "unsupported keyword 'minProperties' at /properties/a~1b"},
      {R"({"type":"strng"})", "keyword 'type' at / must be one of"},
      {R"({"type":"array","maxItems":-1})", "keyword 'maxItems' at / must be a non-negative integer"},
      {R"({"required":"a"})", "keyword 'required' at / must be an array of distinct strings"},
      {R"({"properties":{"a":1}})", "schema at /properties/a is not an object or a boolean"},
  };
  for (const auto& [schema, message] : cases) EXPECT_THAT(Refusal(schema), HasSubstr(message)) << schema;
  // A path given to AddJsonSchema prefixes every pointer.
  GrammarBuilder b;
  absl::StatusOr<int> r = AddJsonSchema(
      b, json::parse(R"({"properties":{"a":{"if":{}}}})"), "/tools/0/function/parameters");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "unsupported keyword 'if' at /tools/0/function/parameters/properties/a");
}

TEST(JsonSchemaTest, LimitsRefuseAndNameThemselves) {
  JsonSchemaOptions small;
  small.max_schema_bytes = 100;
  EXPECT_THAT(Refusal(json({{"description", std::string(200, 'x')}}).dump(), small),
              HasSubstr("over max_schema_bytes (100)"));
  std::string deep = R"({"type":"null"})";
  for (int i = 0; i < 40; ++i) deep = R"({"type":"array","items":)" + deep + "}";
  EXPECT_THAT(Refusal(deep), HasSubstr("nests deeper than max_depth (32)"));
  EXPECT_THAT(Refusal(R"({"type":"array","maxItems":5000})"),
              HasSubstr("more than max_rules (4000)"));
  EXPECT_THAT(Refusal(R"({"type":"string","minLength":100000})"),
              HasSubstr("more than max_rules (4000)"));
  EXPECT_THAT(Refusal(R"({"type":"string","pattern":"^a{1,100000}$"})"),
              HasSubstr("more than max_rules (4000)"));
  JsonSchemaOptions few;
  few.max_enum_values = 3;
  EXPECT_THAT(Refusal(R"({"properties":{"a":{"enum":[1,2]},"b":{"enum":[3,4]}}})", few),
              HasSubstr("more than max_enum_values (3)"));
  std::string groups = std::string(40, '(') + "a" + std::string(40, ')');
  EXPECT_THAT(Refusal(json({{"pattern", groups}}).dump()), HasSubstr("max_depth (32)"));
  // Under the limits, the same shapes compile.
  Compile(R"({"type":"array","maxItems":1000})");
  Compile(R"({"type":"string","maxLength":2000})");
}

TEST(JsonSchemaTest, ManyOptionalPropertiesStayWithinTheMatchersStacks) {
  json props = json::object();
  for (int i = 0; i < 300; ++i) props["p" + std::to_string(i)] = {{"type", "integer"}};
  auto g = Compile(json({{"type", "object"}, {"properties", props}}).dump());
  ASSERT_TRUE(g);
  EXPECT_TRUE(Accepts(g, R"({"p0":1, "p150":2,"p299":3})"));
  EXPECT_FALSE(Accepts(g, R"({"p150":2,"p0":1})"));
  json values = json::array();
  for (int i = 0; i < 500; ++i) values.push_back("value-" + std::to_string(i));
  auto e = Compile(json({{"enum", values}}).dump());
  ASSERT_TRUE(e);
  EXPECT_TRUE(Accepts(e, "\"value-499\""));
  EXPECT_FALSE(Accepts(e, "\"value-500\""));
}

TEST(JsonSchemaTest, LongOneOfsCompareValuesNotPairs) {
  json values = json::array(), objects = json::array();
  for (int i = 0; i < 400; ++i) {
    values.push_back({{"const", "v" + std::to_string(i)}, {"description", "d"}});
    objects.push_back({{"type", "object"}, {"required", {"k" + std::to_string(i)}}});
  }
  auto g = Compile(json({{"oneOf", values}}).dump());
  ASSERT_TRUE(g);
  EXPECT_TRUE(Accepts(g, "\"v399\""));
  EXPECT_FALSE(Accepts(g, "\"v400\""));
  values.push_back({{"enum", {"x", "v7"}}});
  EXPECT_THAT(Refusal(json({{"oneOf", values}}).dump()),
              HasSubstr("unsupported keyword 'oneOf' at / (branch 400 repeats the value \"v7\""));
  EXPECT_THAT(Refusal(json({{"oneOf", objects}}).dump()),
              HasSubstr("unsupported keyword 'oneOf' at / (more than 128 branches"));
}

TEST(JsonSchemaTest, AnyJsonObjectAndSharedRules) {
  GrammarBuilder b;
  const int any = AddAnyJsonObject(b);
  ASSERT_TRUE(AddJsonSchema(b, json::parse(R"({"type":"string"})"), "/a").ok());
  const int rules = b.rule_count();
  ASSERT_TRUE(AddJsonSchema(b, json::parse(R"({"type":"object"})"), "/b").ok());
  EXPECT_LE(b.rule_count() - rules, 2);  // the whitespace, strings and values are shared
  auto g = b.Build(any);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(Accepts(*g, R"({"a":[1,{"b":null}],"c":"d"})"));
  EXPECT_FALSE(Accepts(*g, "[]"));
  EXPECT_FALSE(Accepts(*g, "1"));
}

TEST(JsonSchemaTest, SchemasGivenAsJsonConvert) {
  // A nlohmann::json (keys sorted) converts: the order is then the sorted one.
  const nlohmann::json sorted = nlohmann::json::parse(R"({"properties":{"b":{},"a":{}}})");
  absl::StatusOr<std::shared_ptr<const Grammar>> g = CompileJsonSchema(sorted);
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(Accepts(*g, R"({"a":1,"b":2})"));
  EXPECT_FALSE(Accepts(*g, R"({"b":2,"a":1})"));
}

}  // namespace
}  // namespace attnserve::grammar
