// Structured outputs against a running attnserve_server's HTTP front, judged by oracles we
// did not write: Ajv (the JSON Schema validator most of the ecosystem uses) and the official
// openai SDK's parse helpers with zod. tests/openai/sdk_test.sh (the shipped byte model) and
// tests/gguf/gguf_test.sh (a SentencePiece and a byte-level BPE vocabulary) run it.
//
//   node structured_check.mjs ajv BASE MODEL...   every schema of SCHEMAS x prompts x seeds
//                                                 on each MODEL, through chat completions
//                                                 and completions (streamed and not): each
//                                                 answer that finished ("stop") parses and
//                                                 Ajv validates it; "length" ones are
//                                                 counted and must be few
//   node structured_check.mjs sdk BASE MODEL      chat.completions.parse with zodResponseFormat,
//                                                 responses.parse with zodTextFormat (stored,
//                                                 the format echoed), both streamed too, and
//                                                 refusals naming the keyword
//                                                 (BadRequestError, param)
//
// BASE is http://HOST:PORT. Sampling is random (temperature > 0) with fixed seeds.
import Ajv from "ajv";
import Ajv2020 from "ajv/dist/2020.js";
import OpenAI from "openai";
import { zodResponseFormat, zodTextFormat } from "openai/helpers/zod";
import { z } from "zod";

const [command, base, ...args] = process.argv.slice(2);

function fail(what) {
  console.error(`structured_check ${command}: FAIL: ${what}`);
  process.exit(1);
}
function expect(cond, what) {
  if (!cond) fail(what);
}

// Strings are bounded (maxLength) where a model trained on prose might otherwise write one
// to max_tokens: the grammar closes a string at its bound, so most answers finish.
const name = { type: "string", maxLength: 12 };
const SCHEMAS = {
  flat: {
    type: "object",
    properties: { name, age: { type: "integer" }, alive: { type: "boolean" } },
    required: ["name", "age", "alive"],
    additionalProperties: false,
  },
  nested: {
    type: "object",
    properties: {
      book: {
        type: "object",
        properties: {
          title: { type: "string", maxLength: 16 },
          chapter: { type: "integer" },
          verses: { type: "array", items: { type: "integer" }, minItems: 1, maxItems: 3 },
        },
        required: ["title", "chapter", "verses"],
        additionalProperties: false,
      },
      rating: { type: "number" },
    },
    required: ["book", "rating"],
    additionalProperties: false,
  },
  enums: {
    type: "object",
    properties: {
      tribe: { enum: ["Judah", "Levi", "Benjamin", "Dan"] },
      count: { type: "integer" },
      blessed: { enum: [true, false, null] },
      mood: { type: "string", enum: ["glad", "sore afraid"] },
    },
    required: ["tribe", "count", "blessed", "mood"],
    additionalProperties: false,
  },
  any_of: {
    type: "object",
    properties: {
      value: { anyOf: [{ type: "integer" }, { type: "string", maxLength: 8 }, { type: "null" }] },
      kind: { anyOf: [{ const: "a" }, { const: "b" }] },
    },
    required: ["value", "kind"],
    additionalProperties: false,
  },
  recursive: {
    $defs: {
      node: {
        type: "object",
        properties: {
          name: { type: "string", maxLength: 6 },
          children: { type: "array", items: { $ref: "#/$defs/node" }, maxItems: 2 },
        },
        required: ["name", "children"],
        additionalProperties: false,
      },
    },
    $ref: "#/$defs/node",
  },
  bounded_array: {
    type: "array",
    items: {
      type: "object",
      properties: { k: { enum: ["x", "y"] }, n: { type: "integer" } },
      required: ["k", "n"],
      additionalProperties: false,
    },
    minItems: 2,
    maxItems: 4,
  },
  optional_and_type_lists: {
    type: "object",
    properties: {
      id: { type: ["integer", "null"] },
      note: { type: ["string", "null"], maxLength: 10 },
      tags: { type: "array", items: { type: "string", maxLength: 5 }, maxItems: 2 },
    },
    required: ["id"],
    additionalProperties: false,
  },
};

const PROMPTS = ["Answer in JSON.", "Who begat whom? Give the record as JSON."];
const SEEDS = [1, 2];

function client() {
  return new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0, timeout: 120_000 });
}

async function post(path, body) {
  const res = await fetch(`${base}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, text };
}

// The answer of a streamed request: its text and finish_reason, from the SSE events.
function readStream(text, chat) {
  let out = "", finish = null;
  for (const event of text.split("\n\n")) {
    if (!event.startsWith("data: ") || event === "data: [DONE]") continue;
    const chunk = JSON.parse(event.slice(6));
    for (const choice of chunk.choices) {
      out += (chat ? choice.delta?.content : choice.text) ?? "";
      if (choice.finish_reason) finish = choice.finish_reason;
    }
  }
  return { content: out, finish };
}

// One constrained answer: { content, finish }.
async function ask(model, route, format, prompt, seed, stream) {
  const chat = route === "chat";
  const body = {
    model, max_tokens: 400, temperature: seed % 2 ? 1.0 : 0.8, seed, response_format: format,
    ...(chat ? { messages: [{ role: "user", content: prompt }] } : { prompt: `${prompt}\n` }),
    ...(stream ? { stream: true } : {}),
  };
  const { status, text } = await post(chat ? "/v1/chat/completions" : "/v1/completions", body);
  expect(status === 200, `${model} ${route}: ${status} ${text.slice(0, 300)}`);
  if (stream) return readStream(text, chat);
  const choice = JSON.parse(text).choices[0];
  return { content: chat ? choice.message.content : choice.text, finish: choice.finish_reason };
}

async function ajvCommand(models) {
  const ajv = new Ajv2020({ strict: true, allErrors: true });
  const cases = [];
  for (const model of models) {
    for (const [label, schema] of Object.entries(SCHEMAS)) {
      const format = { type: "json_schema", json_schema: { name: label, schema, strict: true } };
      const validate = ajv.compile(schema);
      PROMPTS.forEach((prompt, p) => SEEDS.forEach((seed, s) => {
        // Chat and completions alternate; one case in four streams.
        const route = (p + s) % 2 ? "completions" : "chat";
        cases.push({ model, label, format, validate, prompt, seed, route, stream: (p + 2 * s) % 4 === 3 });
      }));
    }
    const object = ajv.compile({ type: "object" });
    SEEDS.forEach((seed) => cases.push({
      model, label: "json_object", format: { type: "json_object" }, validate: object,
      prompt: PROMPTS[0], seed, route: seed % 2 ? "chat" : "completions", stream: false,
    }));
  }
  const counts = {};
  // A few at once: the server batches their steps.
  let next = 0;
  async function worker() {
    while (next < cases.length) {
      const c = cases[next++];
      const { content, finish } = await ask(c.model, c.route, c.format, c.prompt, c.seed, c.stream);
      const where = `${c.model} ${c.label} ${c.route}${c.stream ? " (stream)" : ""} seed ${c.seed}`;
      const count = (counts[c.model] ??= { stop: 0, length: 0, bytes: 0, cut: [] });
      count.bytes += Buffer.byteLength(content);
      if (process.env.STRUCTURED_VERBOSE) console.log(`${where}: ${finish}: ${content}`);
      if (finish === "length") {
        count.length++;
        count.cut.push(c.label);
        continue;
      }
      expect(finish === "stop", `${where}: finish_reason ${finish}`);
      count.stop++;
      let value;
      try {
        value = JSON.parse(content);
      } catch (e) {
        fail(`${where}: finished but not JSON (${e.message}): ${JSON.stringify(content)}`);
      }
      expect(c.validate(value),
             `${where}: Ajv refuses ${JSON.stringify(content)}: ${JSON.stringify(c.validate.errors)}`);
    }
  }
  await Promise.all([worker(), worker(), worker(), worker()]);
  for (const model of models) {
    const { stop, length, bytes, cut } = counts[model];
    console.log(`ajv: ${model}: ${stop} of ${stop + length} answers finished and validate ` +
                `(${length} ended at max_tokens${length ? `: ${cut.join(", ")}` : ""}), ${bytes} bytes`);
    // Most answers must finish: a grammar that never lets a string or array close would
    // show here as answers ending at max_tokens.
    expect(stop >= 0.75 * (stop + length), `${model}: only ${stop} of ${stop + length} finished`);
  }
}

// What the zod helpers send: a schema whose every string is bounded, so the answer always
// finishes within max_tokens (the grammar's longest text is well under it).
const Record = z.object({
  tribe: z.enum(["Judah", "Levi", "Benjamin"]),
  elder: z.string().max(10),
  years: z.number().int(),
  faithful: z.boolean(),
  sons: z.array(z.object({ name: z.string().max(6), firstborn: z.boolean() })).max(2),
  note: z.string().max(8).nullable(),
});

async function sdkCommand(model) {
  const openai = client();
  // The zod helper's JSON Schema says draft-07 ($schema): Ajv's default draft.
  const sent = new Ajv({ strict: false }).compile(zodResponseFormat(Record, "record").json_schema.schema);
  for (const seed of [3, 4]) {
    const completion = await openai.chat.completions.parse({
      model, seed, temperature: 1.0, max_completion_tokens: 600,
      messages: [{ role: "user", content: "Give the record of the elder as JSON." }],
      response_format: zodResponseFormat(Record, "record"),
    });
    const message = completion.choices[0].message;
    expect(completion.choices[0].finish_reason === "stop",
           `chat.completions.parse: finish_reason ${completion.choices[0].finish_reason}`);
    expect(message.parsed !== null && typeof message.parsed === "object",
           `chat.completions.parse: nothing parsed from ${JSON.stringify(message.content)}`);
    // The SDK parsed it with zod; Ajv judges the same text by the JSON Schema the SDK sent.
    expect(sent(JSON.parse(message.content)),
           `Ajv refuses ${message.content}: ${JSON.stringify(sent.errors)}`);
    console.log(`chat.completions.parse (seed ${seed}): ${message.content}`);
  }

  // Streamed: the SDK accumulates the deltas and parses the whole.
  const chatStream = openai.chat.completions.stream({
    model, seed: 8, temperature: 1.0, max_completion_tokens: 600,
    messages: [{ role: "user", content: "Give the record of the elder as JSON." }],
    response_format: zodResponseFormat(Record, "record"),
  });
  let deltas = 0;
  chatStream.on("content.delta", () => deltas++);
  const streamed = (await chatStream.finalChatCompletion()).choices[0];
  expect(streamed.finish_reason === "stop" && streamed.message.parsed !== null &&
         sent(JSON.parse(streamed.message.content)),
         `chat.completions.stream: ${streamed.finish_reason} ${streamed.message.content}`);
  const responseStream = openai.responses.stream({
    model, temperature: 1.0, max_output_tokens: 600,
    input: "Give the record of the elder as JSON.",
    text: { format: zodTextFormat(Record, "record") },
  });
  const streamedResponse = await responseStream.finalResponse();
  expect(streamedResponse.status === "completed" && streamedResponse.output_parsed !== null &&
         sent(JSON.parse(streamedResponse.output_text)),
         `responses.stream: ${streamedResponse.status} ${streamedResponse.output_text}`);
  console.log(`streamed: chat.completions.stream in ${deltas} deltas, responses.stream: ` +
              `${streamedResponse.output_text.length} characters, both parsed`);

  const response = await openai.responses.parse({
    model, temperature: 1.0, max_output_tokens: 600,
    input: "Give the record of the elder as JSON.",
    text: { format: zodTextFormat(Record, "record") },
  });
  expect(response.status === "completed", `responses.parse: status ${response.status}`);
  expect(response.output_parsed !== null && sent(JSON.parse(response.output_text)),
         `responses.parse: output_parsed ${JSON.stringify(response.output_parsed)} of ` +
         `${response.output_text}: ${JSON.stringify(sent.errors)}`);
  expect(response.text?.format?.type === "json_schema" && response.text.format.name === "record",
         `responses.parse: text.format not echoed: ${JSON.stringify(response.text)}`);
  const stored = await openai.responses.retrieve(response.id);
  expect(JSON.stringify(stored.text) === JSON.stringify(response.text),
         `the stored response's text ${JSON.stringify(stored.text)} differs`);
  console.log(`responses.parse: ${response.output_text}`);

  // Continuing it with another format: the new turn follows the new schema.
  // (Every text of SCHEMAS.enums is under 600 bytes: bounded whitespace, enums, 16 digits.)
  const next = await openai.responses.create({
    model, temperature: 1.0, max_output_tokens: 600, previous_response_id: response.id,
    input: "Which tribe?",
    text: { format: { type: "json_schema", name: "tribe", schema: SCHEMAS.enums, strict: true } },
  });
  expect(next.status === "completed", `continued response: status ${next.status}`);
  const ajv = new Ajv2020({ strict: true });
  expect(ajv.validate(SCHEMAS.enums, JSON.parse(next.output_text)),
         `continued response: Ajv refuses ${next.output_text}: ${JSON.stringify(ajv.errors)}`);
  console.log(`previous_response_id with a new format: ${next.status}: ${next.output_text}`);

  // In a conversation: two constrained turns, the second continuing the first's state.
  const made = await post("/v1/conversations", {});
  expect(made.status === 200, `conversation: ${made.status} ${made.text}`);
  const conversation = JSON.parse(made.text).id;
  for (const input of ["Which tribe?", "And the next?"]) {
    const turn = await openai.responses.create({
      model, temperature: 1.0, max_output_tokens: 600, conversation, input,
      text: { format: { type: "json_schema", name: "tribe", schema: SCHEMAS.enums, strict: true } },
    });
    expect(turn.status === "completed", `conversation turn: status ${turn.status}`);
    expect(ajv.validate(SCHEMAS.enums, JSON.parse(turn.output_text)),
           `conversation turn: Ajv refuses ${turn.output_text}: ${JSON.stringify(ajv.errors)}`);
    console.log(`conversation ${conversation} turn "${input}": ${turn.output_text}`);
  }

  // Refusals: BadRequestError naming the field, the message naming the keyword and path.
  const refusals = [
    [() => openai.chat.completions.create({
       model, messages: [{ role: "user", content: "x" }], response_format: {
         type: "json_schema", json_schema: { name: "x", schema: {
           type: "object", properties: { a: { type: "integer", multipleOf: 3 } } } } } }),
     "response_format", ["multipleOf", "/properties/a"]],
    [() => openai.responses.create({
       model, input: "x", text: { format: { type: "json_schema", name: "x", schema: { type: "integer", multipleOf: 7 } } } }),
     "text.format", ["multipleOf"]],
    [() => openai.chat.completions.create({
       model, messages: [{ role: "user", content: "x" }],
       response_format: { type: "json_schema", json_schema: { name: "x", description: "d", schema: {} } } }),
     "response_format.json_schema.description", ["description"]],
  ];
  for (const [call, param, named] of refusals) {
    let error = null;
    try {
      await call();
    } catch (e) {
      error = e;
    }
    expect(error instanceof OpenAI.BadRequestError,
           `${param}: ${error?.constructor?.name} ${error?.status}, expected BadRequestError`);
    expect(error.error?.param === param, `${param}: param ${error.error?.param}`);
    for (const n of named) {
      expect(error.message.includes(n), `${param}: the message does not name ${n}: ${error.message}`);
    }
    console.log(`refused: ${error.status} ${error.error.message}`);
  }
}

if (command === "ajv") {
  expect(args.length > 0, "usage: ajv BASE MODEL...");
  await ajvCommand(args);
} else if (command === "sdk") {
  await sdkCommand(args[0]);
} else {
  fail(`unknown command ${command}`);
}
