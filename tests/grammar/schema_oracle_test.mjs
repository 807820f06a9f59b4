// Ajv judges attnserve's JSON Schema grammars (server/grammar/json_schema.h), not us.
//
// Over a set of schemas (written ones: nesting, enums, anyOf, oneOf, recursive $ref,
// arrays with bounds, patterns, formats, optional properties, type lists; and ones drawn
// by a seeded generator), grammar_sample (a) samples documents by walking the matcher:
// every one must be UTF-8, parse with JSON.parse and validate with Ajv 2020-12 +
// ajv-formats; (b) gives its verdict on documents Ajv judges: the samples re-serialised
// (compact, 2-space and tab indented) and mutations of them (values replaced, properties
// dropped and added, arrays grown and shrunk, strings and numbers changed). Where the
// document is in our style (json_schema.h: whitespace as JSON.stringify writes it within
// our bound, numbers within our digit bounds and without exponents under numeric bounds,
// no lone surrogates, times as RFC 3339 writes them), our verdict must equal
// Ajv's; for the
// schemas marked inexact (additionalProperties left open: we write only the declared
// properties; no type: we write the types the keywords name), every document we accept
// must be valid.
//
// Usage: node schema_oracle_test.mjs --tool PATH_TO_grammar_sample [--seed N]
import { spawnSync } from "node:child_process";
import { createRequire } from "node:module";
import { dirname } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);
let Ajv2020, addFormats;
try {
  Ajv2020 = require(`${here}/node_modules/ajv/dist/2020.js`);
  addFormats = require(`${here}/node_modules/ajv-formats`);
} catch (e) {
  console.error(`${here}/node_modules has no ajv / ajv-formats: deploy/install.sh installs them (npm ci)\n${e.message}`);
  process.exit(1);
}

const args = process.argv.slice(2);
const arg = (name, fallback) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : fallback;
};
const tool = arg("--tool");
if (!tool) {
  console.error("usage: schema_oracle_test.mjs --tool PATH_TO_grammar_sample [--seed N]");
  process.exit(2);
}
const seed = Number(arg("--seed", "20261205"));

// mulberry32: a seeded RNG, so that a failure replays.
function rngOf(s) {
  let a = s >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const rng = rngOf(seed);
const pick = (list) => list[Math.floor(rng() * list.length)];
const chance = (p) => rng() < p;
const int = (lo, hi) => lo + Math.floor(rng() * (hi - lo + 1));

// --- the schemas ---

const closed = (properties, required = Object.keys(properties)) => ({
  type: "object", properties, required, additionalProperties: false,
});
const written = [
  { name: "flat", schema: closed({ name: { type: "string" }, age: { type: "integer" }, ok: { type: "boolean" } }) },
  { name: "optional properties", schema: closed({
      a: { type: "string", maxLength: 4 }, b: { type: "number" }, c: { type: "null" }, d: { type: "integer" },
    }, ["c"]) },
  { name: "nested", schema: closed({
      user: closed({ id: { type: "integer" }, tags: { type: "array", items: { type: "string" }, maxItems: 3 } }, ["id"]),
      meta: closed({ created: { type: "string", format: "date-time" }, version: { const: 2 } }),
    }, ["user"]) },
  { name: "enums", schema: closed({
      color: { enum: ["red", "green", "blue"] },
      mixed: { enum: [1, 2.5, "two", null, true, { k: [1, "a"] }, ["x"]] },
      level: { type: "integer", enum: [1, 2, 3, "4"] },
    }, ["color"]) },
  { name: "anyOf and type lists", schema: closed({
      id: { anyOf: [{ type: "integer" }, { type: "string", pattern: "^[a-f0-9]{4}$" }] },
      note: { type: ["string", "null"], maxLength: 3 },
      n: { type: ["integer", "boolean"] },
    }) },
  { name: "oneOf tagged union", schema: {
      oneOf: [
        closed({ kind: { const: "circle" }, r: { type: "number" } }),
        closed({ kind: { const: "rect" }, w: { type: "integer" }, h: { type: "integer" } }),
        { type: "array", items: { type: "boolean" }, maxItems: 2 },
      ] } },
  { name: "recursive $ref (tree)", schema: {
      $defs: { node: closed({ value: { type: "integer" },
                              children: { type: "array", items: { $ref: "#/$defs/node" }, maxItems: 3 } },
                            ["value"]) },
      $ref: "#/$defs/node" } },
  { name: "recursive # (nested lists)", schema: {
      anyOf: [{ type: "integer" }, { type: "array", items: { $ref: "#" }, maxItems: 3 }] } },
  { name: "definitions, linked list", schema: {
      definitions: { list: { anyOf: [{ type: "null" }, closed({ head: { type: "string", maxLength: 2 }, tail: { $ref: "#/definitions/list" } })] } },
      $ref: "#/definitions/list" } },
  { name: "arrays with bounds", schema: closed({
      two_to_four: { type: "array", items: { type: "integer" }, minItems: 2, maxItems: 4 },
      at_least_one: { type: "array", items: { enum: ["a", "b"] }, minItems: 1 },
      empty: { type: "array", maxItems: 0 },
      tuple: { type: "array", prefixItems: [{ type: "string" }, { type: "number" }], items: false, minItems: 1 },
      open_tuple: { type: "array", prefixItems: [{ type: "boolean" }], items: { type: "null" }, maxItems: 3 },
    }) },
  { name: "patterns", schema: closed({
      code: { type: "string", pattern: "^[A-Z]{2}-\\d{3,4}$" },
      slug: { type: "string", pattern: "^[a-z0-9]+(?:-[a-z0-9]+)*$" },
      contains: { type: "string", pattern: "ab\\d" },
      starts: { type: "string", pattern: "^(foo|bar)" },
      ends: { type: "string", pattern: "x$|^y" },
      classes: { type: "string", pattern: "^[^\\s\"\\\\]{2,5}\\.\\w?$" },
      unicode: { type: "string", pattern: "^\\u00e9[\\u0400-\\u04ff]+\\u{1F600}?$" },
    }) },
  { name: "formats", schema: closed({
      date: { type: "string", format: "date" },
      time: { type: "string", format: "time" },
      when: { type: "string", format: "date-time" },
      id: { type: "string", format: "uuid" },
    }),
    extra: [
      { date: "2024-02-29", time: "23:59:59.5+01:00", when: "2000-02-29T00:00:00Z", id: "123e4567-e89b-12d3-a456-426614174000" },
      { date: "1900-02-29", time: "12:00:00Z", when: "2000-02-29T00:00:00Z", id: "123e4567-e89b-12d3-a456-426614174000" },
      { date: "2023-04-31", time: "12:00:00Z", when: "2000-02-29T00:00:00Z", id: "123e4567-e89b-12d3-a456-426614174000" },
      { date: "2023-04-30", time: "12:00:00", when: "2000-02-29T00:00:00Z", id: "123e4567-e89b-12d3-a456-426614174000" },
      { date: "2023-04-30", time: "12:00:00z", when: "2000-02-29 00:00:00-0130", id: "URN:UUID:123E4567-E89B-12D3-A456-426614174000" },
      { date: "2023-04-30", time: "12:00:00z", when: "2000-02-29\t00:00:00+05", id: "123e4567-e89b-12d3-a456-42661417400" },
      { date: "2023-04-30", time: "12:00:00+24:00", when: "2000-02-30T00:00:00Z", id: "123e4567-e89b-12d3-a456-426614174000" },
    ] },
  { name: "formats: email, ipv4, numbers'", schema: closed({
      mail: { type: "string", format: "email" },
      ip: { type: "string", format: "ipv4" },
      i32: { type: "integer", format: "int32" },
      d: { type: "number", format: "double" },
    }), extra: [{ mail: "A.b+c@x-y.Example.org", ip: "255.255.255.255", i32: 2147483647, d: 1.5 },
      { mail: "a@b", ip: "256.0.0.1", i32: 2147483648, d: 1 }, { mail: "a..b@c.d", ip: "01.2.3.4", i32: -2147483649, d: -2 }] },
  { name: "formats we write a part of (inexact)", exact: false, schema: closed({
      uri: { type: "string", format: "uri" },
      ref: { type: "string", format: "uri-reference" },
      url: { type: "string", format: "url" },
      host: { type: "string", format: "hostname" },
      b64: { type: "string", format: "byte" },
    }), extra: [{ uri: "https://a.example/p?q#f", ref: "/a/b", url: "http://example.com:8080/x", host: "a-b.example.com", b64: "QUJD" },
      { uri: "example.com", ref: "a b", url: "http://localhost", host: "-x", b64: "QUJ" }] },
  { name: "string lengths", schema: closed({
      s: { type: "string", minLength: 2, maxLength: 4 }, t: { type: "string", minLength: 1 } }),
    extra: [{ s: "é😀", t: "x" }, { s: "😀", t: "x" }, { s: "ab\n\"", t: "\u2028" }, { s: "abcde", t: "x" }] },
  { name: "any value", schema: {} },
  { name: "any object", schema: { type: "object" } },
  { name: "closed empty object", schema: { type: "object", additionalProperties: false } },
  { name: "open properties (inexact)", exact: false, schema: {
      type: "object", properties: { a: { type: "integer" }, b: { type: "string" } }, required: ["a"] } },
  { name: "no type: keywords name it (inexact)", exact: false, schema: { properties: { a: { type: "null" } }, additionalProperties: false } },
  // Annotations and keywords no draft defines: ignored (Ajv in its non-strict mode).
  { name: "annotations ignored", lax: true, schema: {
      ...closed({ a: { type: "string", _format: "uri", readonly: true, example: "x" }, b: { type: "integer", "x-order": 2 } }, ["a"]),
      self: { href: "{id}" }, links: [{ rel: "self" }],
      "x-kubernetes-group-version-kind": [{ group: "", kind: "Pod" }] } },
  { name: "allOf merged", schema: { allOf: [
      closed({ a: { type: "integer", minimum: -5, maximum: 120 }, b: { type: ["string", "null"], maxLength: 4 } }, ["a"]),
      { properties: { b: { type: "string", minLength: 1 }, c: { type: "boolean" } }, required: ["b"] },
      { type: "object", maxProperties: 2 },
    ] } },
  { name: "allOf of arrays and enums", schema: closed({
      list: { allOf: [{ type: "array", items: { type: "integer" }, maxItems: 3 }, { prefixItems: [{ minimum: 0 }], minItems: 1 }] },
      pick: { allOf: [{ enum: ["a", "b", 1, null] }, { enum: ["b", 1, 2, null] }, { type: ["string", "integer"] }] },
      never: { allOf: [{ type: "string" }, { type: "null" }] },
      short: { enum: ["x", "xyz", 7, -3], maxLength: 2, minimum: 0 },
    }, ["list", "pick", "short"]) },
  { name: "$ref beside keywords", schema: {
      $defs: {
        base: closed({ id: { type: "integer", minimum: 1 }, name: { type: "string" } }, ["id"]),
        tags: { type: "array", items: { type: "string", maxLength: 3 } },
      },
      type: "object",
      properties: {
        item: { $ref: "#/$defs/base", required: ["name"] },
        tags: { $ref: "#/$defs/tags", maxItems: 2, minItems: 1 },
      },
      required: ["item"], additionalProperties: false } },
  { name: "recursive $ref beside keywords", schema: {
      $defs: { node: { type: "object", properties: {
        v: { type: "integer", minimum: 0, maximum: 9 },
        kids: { type: "array", items: { $ref: "#/$defs/node", required: ["v"] }, maxItems: 2 } }, additionalProperties: false } },
      $ref: "#/$defs/node", required: ["kids"] } },
  { name: "type beside anyOf and oneOf", schema: closed({
      either: { type: "object", properties: { a: { type: "integer" }, b: { type: "string" } }, additionalProperties: false,
                anyOf: [{ required: ["a"] }, { required: ["b"] }] },
      one: { type: ["string", "null"], oneOf: [{ type: "string", maxLength: 2 }, { type: ["null", "integer"] }, { type: "integer" }] },
      not: { type: "object", properties: { gone: { not: {} }, any: { not: false } }, additionalProperties: false },
    }) },
  { name: "integer bounds", schema: closed({
      age: { type: "integer", minimum: 0, maximum: 150 },
      delta: { type: "integer", minimum: -1000, maximum: 999 },
      odd: { type: "integer", exclusiveMinimum: 9, exclusiveMaximum: 101 },
      neg: { type: "integer", maximum: -1 },
      big: { type: "integer", minimum: 1234567 },
      frac: { type: "integer", minimum: 1.5, maximum: 30.5 },
    }), extra: [{ age: 0, delta: -1000, odd: 10, neg: -1, big: 1234567, frac: 2 }, { age: 150, delta: 999, odd: 100, neg: -99, big: 9999999, frac: 30 },
      { age: -1, delta: 1000, odd: 9, neg: 0, big: 1234566, frac: 1 }, { age: 151, delta: -1001, odd: 101, neg: 5, big: 1, frac: 31 }] },
  { name: "number bounds", schema: closed({
      ratio: { type: "number", minimum: 0, maximum: 1 },
      positive: { type: "number", exclusiveMinimum: 0 },
      temp: { type: "number", minimum: -40, exclusiveMaximum: 60 },
      price: { type: ["number", "null"], minimum: 0 },
      share: { type: "number", exclusiveMinimum: 0.25, maximum: 0.3 },
      kelvin: { type: "number", minimum: -459.67, exclusiveMaximum: -1.5 },
    }, ["ratio", "positive", "temp", "price"]), extra: [{ ratio: 1, positive: 0.001, temp: -40, price: 0 }, { ratio: 0.5, positive: 12, temp: 59.99, price: null },
      { ratio: 1.5, positive: 0, temp: 60, price: -1 }, { ratio: -0.1, positive: -2, temp: -40.5, price: 3.25 }] },
  { name: "additionalProperties as a schema", schema: closed({
      map: { type: "object", additionalProperties: { type: "integer", minimum: 0 } },
      named: { type: "object", properties: { id: { type: "integer" }, name: { type: "string", maxLength: 3 } }, required: ["id"],
               additionalProperties: { type: "boolean" } },
      nonEmpty: { type: "object", additionalProperties: { type: "null" }, minProperties: 1 },
    }), extra: [{ map: { "": 1, "é\"": 2, id: 3 }, named: { id: 1, ids: true, nam: false, "\u0000": true }, nonEmpty: { x: null } },
      { map: { a: -1 }, named: { id: 1, name: true }, nonEmpty: {} }, { map: {}, named: { id: 1, name: "abc", x: 1 }, nonEmpty: { a: 1 } }] },
  { name: "patternProperties", schema: closed({
      codes: { type: "object", patternProperties: { "^[A-Z]{2}$": { type: "string", maxLength: 2 } }, additionalProperties: false },
      both: { type: "object", properties: { x1: { type: "integer" }, y: { type: "string" } },
              patternProperties: { "\\d$": { minimum: 5 } }, additionalProperties: false },
    }), extra: [{ codes: { FR: "fr", DE: "" }, both: { x1: 5 } }, { codes: { fr: "x" }, both: { x1: 4 } }, { codes: { FR: "xyz" }, both: { y: "a" } }] },
  { name: "oneOf of required names, not of types, minProperties 1", schema: closed({
      shape: { type: "object", properties: { radius: { type: "number" }, width: { type: "number" }, height: { type: "number" }, unit: { enum: ["cm", "in"] } },
               additionalProperties: false,
               oneOf: [{ required: ["radius"] }, { required: ["width", "height"] }, { required: ["width"] }] },
      notNull: { not: { type: ["null", "object", "array"] }, type: ["string", "null", "boolean"] },
      some: { type: "object", properties: { a: { type: "integer" }, b: { type: "null" } }, minProperties: 1, additionalProperties: false },
      anyOne: { type: "object", minProperties: 1 },
    }), extra: [{ shape: { radius: 1, height: 2 }, notNull: "x", some: { b: null }, anyOne: { x: 1 } },
      { shape: { radius: 1, width: 2 }, notNull: null, some: {}, anyOne: {} }, { shape: { width: 1, height: 2 }, notNull: true, some: { a: 1 }, anyOne: { y: [] } }] },
  { name: "recursive additionalProperties merged", schema: {
      $defs: { r: { type: "object", additionalProperties: { minProperties: 1, anyOf: [{ type: "string", maxLength: 3 }, { $ref: "#/$defs/r" }] } } },
      $ref: "#/$defs/r" },
    extra: [{ a: "x", b: { c: "y" } }, { a: {} }, { a: { b: {} } }, { a: { b: { c: "long" } } }] },
  { name: "dependentRequired", schema: { type: "object",
      properties: { card: { type: "string", maxLength: 4 }, billing: { type: "string" }, cvv: { type: "integer" }, name: { type: "string" } },
      required: ["name"], dependentRequired: { card: ["billing"], name: ["cvv"] }, additionalProperties: { type: "null" } },
    // (card, whose billing may be absent, is never written: a document with both is valid
    // yet not ours, so none is given.)
    extra: [{ cvv: 1, name: "a" }, { card: "x", cvv: 1, name: "a" }, { name: "a" }, { cvv: 1, name: "a", zz: null }] },
  { name: "property counts", schema: { type: "object", properties: { a: { type: "integer" }, b: { type: "null" } },
      required: ["a"], minProperties: 1, maxProperties: 2, additionalProperties: false } },
];

// Random schemas from the subset, objects closed (so that our grammar is exact).
const patterns = ["^[a-z]{1,6}$", "^\\d{2}(-\\d{2})?$", "q", "^(?:ab|cd)+$", "z\\d$", "^[A-Z][a-z]*( [A-Z][a-z]*)*$", "^.{0,3}$"];
const formats = ["date", "time", "date-time", "uuid", "email", "ipv4"];
function gen(depth) {
  const kinds = ["string", "integer", "number", "boolean", "null", "enum", "const", "typelist", "integer", "number"];
  if (depth > 0) kinds.push("array", "array", "object", "object", "anyOf", "oneOf");
  switch (pick(kinds)) {
    case "string": {
      const s = { type: "string" };
      const r = rng();
      if (r < 0.25) s.pattern = pick(patterns);
      else if (r < 0.4) s.format = pick(formats);
      else if (r < 0.7) {
        s.minLength = int(0, 3);
        if (chance(0.7)) s.maxLength = s.minLength + int(0, 5);
      }
      return s;
    }
    case "enum": return { enum: Array.from({ length: int(1, 5) }, () => pick(["a", "bb", "a b", 0, 1, -2.5, true, null, "é", [1], { x: 1 }])).filter((v, i, a) => a.findIndex((w) => JSON.stringify(w) === JSON.stringify(v)) === i) };
    case "const": return { const: pick(["k", 7, false, null, { a: [1, { b: "c" }] }, []]) };
    case "typelist": return { type: pick([["string", "null"], ["integer", "boolean"], ["number", "string", "null"], ["array", "null"]]) };
    case "array": {
      const a = { type: "array", items: gen(depth - 1) };
      if (chance(0.6)) a.minItems = int(0, 3);
      if (chance(0.6)) a.maxItems = (a.minItems ?? 0) + int(0, 3);
      if (chance(0.2)) a.prefixItems = [gen(depth - 1)];
      return a;
    }
    case "object": {
      const properties = {};
      const names = ["id", "name", "x", "y", "value", "tags", "é"];
      for (let i = int(1, 4); i > 0; i--) properties[pick(names)] = gen(depth - 1);
      const required = Object.keys(properties).filter(() => chance(0.5));
      return { type: "object", properties, required, additionalProperties: false };
    }
    case "anyOf": return { anyOf: [gen(depth - 1), gen(depth - 1)] };
    case "oneOf": {
      const [a, b] = [pick(["string", "integer", "boolean"]), pick(["null", "array", "object"])];
      return { oneOf: [{ type: a }, b === "object" ? gen(0) && { type: "object", properties: { k: gen(depth - 1) }, additionalProperties: false } : { type: b }] };
    }
    case "integer": {
      const s = { type: "integer" };
      if (chance(0.6)) s.minimum = pick([0, 1, -7, 18, 100, -1000]);
      if (chance(0.5)) s[pick(["maximum", "exclusiveMaximum"])] = (s.minimum ?? -50) + int(1, 300);
      return s;
    }
    case "number": {
      const s = { type: "number" };
      const lo = pick([0, 1, -3, 10, 0.5, -0.25, 0.1, 2.75]);
      if (chance(0.6)) s[pick(["minimum", "exclusiveMinimum"])] = lo;
      if (chance(0.5)) s[pick(["maximum", "exclusiveMaximum"])] = Math.round((lo + pick([1, 5, 100, 12345, 0.5, 0.05])) * 100) / 100;
      return s;
    }
    default: return { type: pick(["string", "integer", "number", "boolean", "null"]) };
  }
}
const generated = Array.from({ length: 24 }, (_, i) => ({ name: `generated ${i}`, schema: gen(3) }));
// Only objects at the top make the mutations interesting; most generated schemas are.
const schemas = [...written, ...generated];

// --- Ajv ---

const ajv = new Ajv2020({ strict: true, strictTypes: false, strictTuples: false, strictRequired: false, allowUnionTypes: true, allowMatchingProperties: true, allErrors: false });
addFormats(ajv);
// Keywords no draft defines are errors in Ajv's strict mode: schemas marked lax go to an
// Ajv without it (which ignores them, as we do).
const laxAjv = new Ajv2020({ strict: false, allowUnionTypes: true, allErrors: false });
addFormats(laxAjv);
for (const s of schemas) s.validate = (s.lax ? laxAjv : ajv).compile(s.schema);
// Under numeric bounds we write numbers without an exponent (json_schema.h).
const boundsIn = (schema) => /"(exclusiveM|m)(in|ax)imum"/.test(JSON.stringify(schema));

// --- our style ---
const ourNumber = /^-?(0|[1-9]\d{0,15})(\.\d{1,16})?([eE][+-]?\d{1,2})?$/;
// Escaped surrogates come in pairs (a lone one is valid JSON; we never write it).
const loneSurrogate = /\\ud[89ab][0-9a-f]{2}(?!\\ud[c-f])|(?<!\\ud[89ab][0-9a-f]{2})\\ud[c-f][0-9a-f]{2}/i;
const ajvTime = /^(\d{4}-\d\d-\d\d[tT\s])?\d\d:\d\d:\d\d(\.\d+)?([zZ]|[+-]\d\d(:?\d\d)?)$/;
const rfcTime = /^(\d{4}-\d\d-\d\d[tT])?\d\d:\d\d:\d\d(\.\d+)?([zZ]|[+-]\d\d:\d\d)$/;
function inOurStyle(text, noExponent) {
  if (loneSurrogate.test(text)) return false;
  for (const line of text.split("\n").slice(1)) {
    if (/^[ \t]*/.exec(line)[0].length > 20) return false;
  }
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '"') {
      const start = i;
      for (i++; text[i] !== '"'; i++) if (text[i] === "\\") i++;
      // Times as RFC 3339 writes them (schema_pattern.h): not Ajv's other forms.
      const value = JSON.parse(text.slice(start, i + 1));
      if (ajvTime.test(value) && !rfcTime.test(value)) return false;
    } else if (c === "-" || (c >= "0" && c <= "9")) {
      const m = /^-?[0-9.eE+-]+/.exec(text.slice(i))[0];
      if (!ourNumber.test(m) || (noExponent && /[eE]/.test(m))) return false;
      i += m.length - 1;
    }
  }
  return true;
}

// --- mutations ---
const replacements = [0, 1, -7, 2.5, -0.5, 0.25, 0.3, 0.2501, -459.67, 150, 1000, -1000, "x", "", "abc", true, false, null, [], {}, [1], { a: 1 }];
const strings = ["", "a", "ab", "abc", "AB-123", "Ab Cd", "foo", "xbarx", "ab1", "q", "z1", "12-34", "é", "red",
  "2024-02-29", "2023-02-29", "2024-13-01", "12:30:00Z", "12:30:00", "24:00:00Z", "12:30:00.5-08:00",
  "2024-01-01T12:00:00+01:00", "2024-01-01 12:00:00Z", "2024-01-01T12:00:00",
  "123e4567-e89b-12d3-a456-426614174000", "urn:uuid:123e4567-e89b-12d3-a456-426614174000",
  "123e4567-e89b-12d3-a456-42661417400", "abcd", "ab12", "ffff", "a@b.co", "a@b", "x.y@z-z.org", "10.0.0.1",
  "1.2.3.256", "https://example.com/a?b#c", "example.com", "QUJD", "QUI="];
function paths(v, at = [], out = []) {
  out.push(at);
  if (Array.isArray(v)) v.forEach((x, i) => paths(x, [...at, i], out));
  else if (v && typeof v === "object") for (const k of Object.keys(v)) paths(v[k], [...at, k], out);
  return out;
}
const getAt = (v, p) => p.reduce((x, k) => x[k], v);
function setAt(root, p, value) {
  if (p.length === 0) return value;
  getAt(root, p.slice(0, -1))[p[p.length - 1]] = value;
  return root;
}
function mutate(value) {
  const v = structuredClone(value);
  const all = paths(v);
  const of = (test) => all.filter((p) => test(getAt(v, p)));
  const objects = of((x) => x && typeof x === "object" && !Array.isArray(x));
  const arrays = of(Array.isArray);
  const texts = of((x) => typeof x === "string");
  const numbers = of((x) => typeof x === "number");
  const ops = ["replace"];
  if (objects.length) ops.push("drop", "add");
  if (arrays.length) ops.push("grow", "shrink");
  if (texts.length) ops.push("string", "string");
  if (numbers.length) ops.push("number");
  switch (pick(ops)) {
    case "replace": return setAt(v, pick(all), structuredClone(pick(replacements)));
    case "drop": {
      const o = getAt(v, pick(objects));
      const keys = Object.keys(o);
      if (keys.length) delete o[pick(keys)];
      return v;
    }
    // A name no schema declares: a declared one appended would leave the declared order,
    // which only our style keeps.
    case "add": getAt(v, pick(objects)).zz = structuredClone(pick(replacements)); return v;
    case "grow": {
      const a = getAt(v, pick(arrays));
      a.push(a.length && chance(0.7) ? structuredClone(a[a.length - 1]) : structuredClone(pick(replacements)));
      return v;
    }
    case "shrink": getAt(v, pick(arrays)).pop(); return v;
    case "string": {
      const p = pick(texts);
      const s = getAt(v, p);
      return setAt(v, p, pick([s + "x", [...s].slice(0, -1).join(""), pick(strings), pick(strings)]));
    }
    default: {
      const p = pick(numbers);
      const n = getAt(v, p);
      return setAt(v, p, pick([n + 1, n - 1, n + 0.5, n - 0.001, -n, 0, Math.round(n / 3), n * 10]));
    }
  }
}

// --- run ---
function runTool(jobs) {
  const input = jobs.map((j) => JSON.stringify(j)).join("\n") + "\n";
  const r = spawnSync(tool, [], { input, maxBuffer: 1 << 28 });
  if (r.status !== 0) {
    console.error(`grammar_sample exited ${r.status}: ${r.stderr}`);
    process.exit(1);
  }
  return r.stdout.toString().trim().split("\n").map((l) => JSON.parse(l));
}
const hex = (text) => Buffer.from(text, "utf8").toString("hex");
const utf8 = new TextDecoder("utf-8", { fatal: true });

const failures = [];
const fail = (s, what) => { if (failures.length < 30) failures.push(`${s.name}: ${what}\n  schema ${JSON.stringify(s.schema)}`); else failures.push(""); };
const samplesPerSchema = 40;
const sampled = runTool(schemas.map((s, i) => ({ schema: s.schema, samples: samplesPerSchema, seed: seed + i, max_bytes: 400 })));
let sampleCount = 0;
schemas.forEach((s, i) => {
  const r = sampled[i];
  if (r.error) return fail(s, `did not compile: ${r.error}`);
  s.values = [];
  for (const h of r.samples) {
    sampleCount++;
    let text, value;
    try { text = utf8.decode(Buffer.from(h, "hex")); } catch { fail(s, `sample is not UTF-8: ${h}`); continue; }
    try { value = JSON.parse(text); } catch (e) { fail(s, `sample does not parse (${e.message}): ${JSON.stringify(text)}`); continue; }
    if (!s.validate(value)) { fail(s, `Ajv refuses sample ${JSON.stringify(text)}: ${ajv.errorsText(s.validate.errors)}`); continue; }
    s.values.push(value);
  }
});

// Documents to judge: samples re-serialised, their mutations, the written extras.
let compared = 0, outOfStyle = 0, validCompared = 0, invalidCompared = 0;
const checkJobs = schemas.map((s) => {
  const docs = [];
  for (const v of [...(s.values ?? []), ...(s.extra ?? [])]) {
    // JavaScript puts keys like "9" first in an object: the members leave our order.
    if (/"(0|[1-9]\d*)":/.test(JSON.stringify(v))) {
      outOfStyle++;
      continue;
    }
    docs.push(JSON.stringify(v), JSON.stringify(v, null, 2), JSON.stringify(v, null, "\t"));
    for (let k = 0; k < 6; k++) docs.push(JSON.stringify(mutate(v), null, chance(0.3) ? 2 : 0));
  }
  const noExponent = boundsIn(s.schema);
  s.docs = [...new Set(docs)].filter((d) => {
    if (inOurStyle(d, noExponent)) return true;
    outOfStyle++;
    return false;
  });
  return { schema: s.schema, samples: 0, check: s.docs.map(hex) };
});
const checked = runTool(checkJobs);
schemas.forEach((s, i) => {
  if (checked[i].error) return;
  s.docs.forEach((d, k) => {
    const ajvSays = s.validate(JSON.parse(d));
    const weSay = checked[i].check[k];
    compared++;
    if (ajvSays) validCompared++; else invalidCompared++;
    if (weSay && !ajvSays) fail(s, `we accept what Ajv refuses: ${d}\n  Ajv: ${ajv.errorsText(s.validate.errors)}`);
    if (!weSay && ajvSays && s.exact !== false) fail(s, `we refuse what Ajv accepts: ${d}`);
  });
});

console.log(`grammar_schema_oracle: ${schemas.length} schemas (${written.length} written, ${generated.length} generated, seed ${seed}); ` +
  `${sampleCount} sampled documents valid under Ajv; ${compared} verdicts compared with Ajv's ` +
  `(${validCompared} valid, ${invalidCompared} invalid; ${outOfStyle} documents out of our style skipped)`);
if (failures.length) {
  console.error(failures.filter(Boolean).join("\n"));
  console.log(`0 passed, ${failures.length} failed`);
  process.exit(1);
}
console.log(`${sampleCount + compared} passed, 0 failed`);
