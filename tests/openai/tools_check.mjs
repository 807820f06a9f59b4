// Tool calls through the official `openai` SDK (tests/openai/package.json) against running
// attnserve_servers: code written for OpenAI, only baseURL changed. Every call's arguments
// parse as JSON and validate against its tool's schema with Ajv; exits non-zero with the
// reason when something does not hold. tests/openai/sdk_test.sh starts the servers.
//
//   node tools_check.mjs BASE MODEL BASE_B BASE_C
//     BASE and BASE_B: replicas sharing a store (chat states kept between calls);
//     BASE_C: a server that never saw the conversation (the full-prefill oracle).
//   - a tool loop: tool_choice "required" makes the model call, the results go back as
//     role "tool" messages on the other replica, and the model answers (tool_choice
//     "auto"); that call reuses the whole state the first kept (cached_tokens) and answers
//     as a full prefill does;
//   - a named function with parallel_tool_calls false, through the SDK's runTools;
//   - streamed tool calls through the SDK's stream helper (chat.completions.stream):
//     argument deltas accumulate to the unstreamed call's arguments;
//   - refusals naming the field: a schema keyword not served, an undeclared function, stop
//     strings under tool_choice "required";
//   - a call cut by max_tokens: "length" (incomplete on /v1/responses), no envelope as text;
//   - the Responses API: function_call output items, function_call_output inputs
//     continuing a response on the other replica (equal to the whole history sent at
//     once to BASE_C), responses.stream's function-call events;
//   - the same loop in a conversation: its items, and a fork at the call.
import OpenAI from "openai";
import Ajv from "ajv";

const [base, model, baseB, baseC] = process.argv.slice(2);

function fail(what) {
  console.error(`tools_check ${model}: FAIL: ${what}`);
  process.exit(1);
}
function expect(cond, what) {
  if (!cond) fail(what);
}
function client(url) {
  return new OpenAI({ baseURL: `${url}/v1`, apiKey: "unused", maxRetries: 0, timeout: 120_000 });
}

// Schemas that bound what the model writes (enums, bounded arrays): a small model's free
// strings would otherwise run to max_tokens.
const WEATHER = {
  type: "object",
  properties: {
    city: { type: "string", enum: ["Paris", "Tokyo", "Lima"] },
    celsius: { type: "boolean" },
    days: { type: "array", items: { type: "string", enum: ["mon", "tue", "wed"] }, minItems: 1, maxItems: 3 },
  },
  required: ["city", "celsius", "days"],
  additionalProperties: false,
};
const TIME = {
  type: "object",
  properties: { zone: { type: "string", enum: ["UTC", "CET"] }, hours: { type: "integer", enum: [12, 24] } },
  required: ["zone", "hours"],
  additionalProperties: false,
};
const TOOLS = [
  { type: "function", function: { name: "get_weather", description: "The weather in a city", parameters: WEATHER, strict: true } },
  { type: "function", function: { name: "get_time", description: "The time in a zone", parameters: TIME, strict: true } },
];
const ajv = new Ajv({ strict: true });
const validators = { get_weather: ajv.compile(WEATHER), get_time: ajv.compile(TIME) };
const QUESTION = [{ role: "user", content: "What is the weather in Paris, and the time?" }];

// The calls of `message` (a chat completion's), each valid: an id, a declared name, and
// arguments that parse and validate. Returns them.
function checkCalls(message, what) {
  const calls = message.tool_calls ?? [];
  expect(calls.length >= 1, `${what}: no tool_calls in ${JSON.stringify(message)}`);
  const ids = new Set();
  for (const call of calls) {
    expect(call.type === "function", `${what}: type ${call.type}`);
    expect(typeof call.id === "string" && call.id.startsWith("call_") && !ids.has(call.id), `${what}: id ${call.id}`);
    ids.add(call.id);
    const validate = validators[call.function.name];
    expect(validate !== undefined, `${what}: an undeclared function ${call.function.name}`);
    let args;
    try {
      args = JSON.parse(call.function.arguments);
    } catch (e) {
      fail(`${what}: arguments ${JSON.stringify(call.function.arguments)} are not JSON: ${e.message}`);
    }
    expect(validate(args), `${what}: ${call.function.arguments} against ${call.function.name}'s schema: ${ajv.errorsText(validate.errors)}`);
  }
  return calls;
}

async function toolLoop() {
  const a = client(base), b = client(baseB), fresh = client(baseC);
  const request = { model, tools: TOOLS, temperature: 0, max_tokens: 300, parallel_tool_calls: false };
  const first = await a.chat.completions.create({ ...request, messages: QUESTION, tool_choice: "required" });
  const choice = first.choices[0];
  expect(choice.finish_reason === "tool_calls", `finish_reason ${choice.finish_reason}: ${JSON.stringify(choice.message)}`);
  const calls = checkCalls(choice.message, "tool_choice required");
  console.log(`tools: required: ${calls.map((c) => `${c.function.name}(${c.function.arguments})`).join(" ")}; content ${JSON.stringify(choice.message.content)}`);
  // The results go back, on the other replica; the model answers.
  const history = [...QUESTION, choice.message];
  for (const call of calls) {
    history.push({ role: "tool", tool_call_id: call.id, content: JSON.stringify({ ok: true, name: call.function.name }) });
  }
  const answer = await b.chat.completions.create({ ...request, messages: history, max_tokens: 20 });
  const oracle = await fresh.chat.completions.create({ ...request, messages: history, max_tokens: 20 });
  const reply = answer.choices[0];
  expect(["stop", "length"].includes(reply.finish_reason), `the answer's finish_reason ${reply.finish_reason}: ${JSON.stringify(reply.message)}`);
  expect(typeof reply.message.content === "string" && reply.message.content.length > 0 && !reply.message.tool_calls,
         `the answer after the results: ${JSON.stringify(reply.message)}`);
  expect(reply.message.content === oracle.choices[0].message.content,
         `${JSON.stringify(reply.message.content)} != a full prefill's ${JSON.stringify(oracle.choices[0].message.content)}`);
  // The history up to the calls renders as what the model generated: the first call's
  // whole state is reused.
  const cached = answer.usage.prompt_tokens_details.cached_tokens;
  expect(cached === first.usage.prompt_tokens + first.usage.completion_tokens,
         `cached ${cached}; the call's turn ended at ${first.usage.prompt_tokens} + ${first.usage.completion_tokens}`);
  expect(answer.usage.prompt_tokens === oracle.usage.prompt_tokens, "prompt_tokens against the full prefill");
  console.log(`tools: the answer after the results (other replica) reused ${cached} of ${answer.usage.prompt_tokens} prompt tokens and equals a full prefill: ${JSON.stringify(reply.message.content)}`);
  return first;
}

async function namedRunTools() {
  const a = client(base);
  const invoked = [];
  const runner = a.chat.completions.runTools({
    model, messages: QUESTION, temperature: 0, max_tokens: 300,
    tool_choice: { type: "function", function: { name: "get_time" } },
    parallel_tool_calls: false,
    tools: [
      { type: "function", function: { name: "get_weather", parameters: WEATHER, parse: JSON.parse, function: () => fail("get_weather called") } },
      { type: "function", function: { name: "get_time", parameters: TIME, parse: JSON.parse,
        function: (args) => { invoked.push(args); return { time: "12:00" }; } } },
    ],
  });
  await runner.done();
  expect(invoked.length === 1 && validators.get_time(invoked[0]), `get_time invoked with ${JSON.stringify(invoked)}`);
  const assistant = runner.messages.find((m) => m.role === "assistant");
  const calls = checkCalls(assistant, "named get_time");
  expect(calls.length === 1 && calls[0].function.name === "get_time", `named, not parallel: ${JSON.stringify(calls)}`);
  const result = runner.messages.find((m) => m.role === "tool");
  expect(result?.tool_call_id === calls[0].id && result.content === JSON.stringify({ time: "12:00" }), `the tool message ${JSON.stringify(result)}`);
  console.log(`tools: runTools with a named function: get_time(${JSON.stringify(invoked[0])}), one call`);
}

async function streamed(unstreamed) {
  const a = client(base);
  const deltas = [], done = [];
  const stream = a.chat.completions.stream({
    model, messages: QUESTION, tools: TOOLS, tool_choice: "required", temperature: 0, max_tokens: 300, parallel_tool_calls: false,
  });
  stream.on("tool_calls.function.arguments.delta", (e) => deltas.push(e));
  stream.on("tool_calls.function.arguments.done", (e) => done.push(e));
  const final = await stream.finalChatCompletion();
  const choice = final.choices[0];
  expect(choice.finish_reason === "tool_calls", `streamed finish_reason ${choice.finish_reason}`);
  const calls = checkCalls(choice.message, "streamed");
  const want = unstreamed.choices[0].message.tool_calls;
  expect(calls.length === want.length, `streamed ${calls.length} calls, unstreamed ${want.length}`);
  calls.forEach((c, i) => {
    expect(c.function.name === want[i].function.name && c.function.arguments === want[i].function.arguments,
           `streamed call ${i} ${c.function.name}(${c.function.arguments}) != unstreamed ${want[i].function.name}(${want[i].function.arguments})`);
  });
  expect(deltas.length > calls.length, `only ${deltas.length} argument deltas for ${calls.length} calls`);
  // strict tools: the helper parses each call's arguments when it is done.
  expect(done.length === calls.length && done.every((e, i) => JSON.stringify(e.parsed_arguments) === JSON.stringify(JSON.parse(calls[i].function.arguments))),
         `arguments.done events ${JSON.stringify(done)}`);
  console.log(`tools: streamed: ${deltas.length} argument deltas accumulate to the unstreamed calls`);
}

async function refusals() {
  const a = client(base);
  const refused = async (params, param, words) => {
    try {
      await a.chat.completions.create({ model, messages: QUESTION, max_tokens: 5, ...params });
    } catch (e) {
      expect(e instanceof OpenAI.BadRequestError, `${param}: ${e?.constructor?.name} ${e?.message}`);
      expect(e.param === param, `param ${e.param}, expected ${param} (${e.message})`);
      expect(e.message.includes(words), `${param}: ${e.message} does not say ${words}`);
      return;
    }
    fail(`${param}: answered 200`);
  };
  await refused({ tools: [{ type: "function", function: { name: "f", parameters: { type: "object", properties: { n: { type: "integer", multipleOf: 3 } } } } }] },
                "tools", "multipleOf");
  await refused({ tools: TOOLS, tool_choice: { type: "function", function: { name: "get_date" } } },
                "tool_choice.function.name", "names no function");
  await refused({ tools: TOOLS, tool_choice: "required", stop: ["}"] }, "stop", "would cut");
  console.log("tools: a schema keyword not served, an undeclared function and stop strings under " +
              "tool_choice required refused, naming the field");
}

// max_tokens ends the answer inside the call's envelope: "length" (the Responses API:
// incomplete, max_output_tokens), and the envelope's bytes are never text.
async function cutEnvelope() {
  const a = client(base);
  const params = { model, messages: QUESTION, tools: TOOLS, tool_choice: "required", max_tokens: 6 };
  const whole = await a.chat.completions.create(params);
  const choice = whole.choices[0];
  expect(choice.finish_reason === "length", `cut call: finish_reason ${choice.finish_reason}`);
  expect(!choice.message.content && !choice.message.tool_calls?.length,
         `cut call: message ${JSON.stringify(choice.message)}`);
  let streamedText = "", finish = null;
  for await (const chunk of await a.chat.completions.create({ ...params, stream: true })) {
    for (const c of chunk.choices) {
      streamedText += c.delta?.content ?? "";
      finish = c.finish_reason ?? finish;
    }
  }
  expect(finish === "length" && streamedText === "", `cut call streamed: ${finish} ${JSON.stringify(streamedText)}`);
  const response = await a.responses.create({
    model, input: QUESTION[0].content, max_output_tokens: 6, tool_choice: "required",
    tools: TOOLS.map((t) => ({ type: "function", ...t.function })),
  });
  expect(response.status === "incomplete" && response.incomplete_details?.reason === "max_output_tokens",
         `cut call: response ${response.status} ${JSON.stringify(response.incomplete_details)}`);
  expect(!JSON.stringify(response.output).includes("<tool"), `cut call: output ${JSON.stringify(response.output)}`);
  console.log("tools: a call cut by max_tokens ends \"length\" (incomplete on /v1/responses), its envelope never text");
}

// The Responses API's function calls: tool_choice "required" on BASE; the results as
// function_call_output items continuing it (previous_response_id) on BASE_B, whose answer
// equals BASE_C's for the whole history sent at once (the function_call items as the
// response gave them); responses.stream's events build the same calls.
async function responses() {
  const a = client(base), b = client(baseB), fresh = client(baseC);
  const tools = TOOLS.map((t) => ({ type: "function", ...t.function }));
  const request = { model, tools, temperature: 0, max_output_tokens: 300, parallel_tool_calls: false };
  const first = await a.responses.create({ ...request, input: QUESTION[0].content, tool_choice: "required" });
  expect(first.status === "completed", `responses: status ${first.status}`);
  const calls = first.output.filter((item) => item.type === "function_call");
  expect(calls.length === 1 && calls[0].status === "completed", `responses: output ${JSON.stringify(first.output)}`);
  checkCalls({ tool_calls: calls.map((c) => ({ id: c.call_id, type: "function", function: { name: c.name, arguments: c.arguments } })) },
             "responses function_call");
  const results = calls.map((c) => ({ type: "function_call_output", call_id: c.call_id, output: JSON.stringify({ ok: true }) }));
  const next = await b.responses.create({ ...request, max_output_tokens: 20, previous_response_id: first.id, input: results });
  const whole = await fresh.responses.create({
    ...request, max_output_tokens: 20, store: false,
    input: [{ role: "user", content: QUESTION[0].content }, ...first.output, ...results] });
  expect(next.output_text.length > 0 && next.output_text === whole.output_text,
         `responses: continued ${JSON.stringify(next.output_text)} != whole ${JSON.stringify(whole.output_text)}`);
  expect(next.usage.input_tokens_details.cached_tokens > 0, `responses: cached ${JSON.stringify(next.usage)}`);
  console.log(`tools: responses: ${calls[0].name}(${calls[0].arguments}); continued on the other replica with its output: ${JSON.stringify(next.output_text)}, equal to the whole history`);
  // Streamed: the events build the same call.
  const stream = a.responses.stream({ ...request, input: QUESTION[0].content, tool_choice: "required" });
  let deltas = 0, added = 0, done = null;
  stream.on("response.function_call_arguments.delta", () => ++deltas);
  stream.on("response.output_item.added", (e) => { if (e.item.type === "function_call") ++added; });
  stream.on("response.function_call_arguments.done", (e) => { done = e; });
  const final = await stream.finalResponse();
  const streamedCalls = final.output.filter((item) => item.type === "function_call");
  expect(added === 1 && deltas > 1 && done?.arguments === calls[0].arguments,
         `responses stream: ${added} items added, ${deltas} deltas, done ${JSON.stringify(done)}`);
  expect(streamedCalls.length === 1 && streamedCalls[0].name === calls[0].name && streamedCalls[0].arguments === calls[0].arguments,
         `responses stream: ${JSON.stringify(streamedCalls)}`);
  console.log(`tools: responses.stream: ${deltas} function_call_arguments deltas build the same call`);
}

// The same tool loop in a conversation (the Conversations API through the SDK): the call
// on BASE, its result on BASE_B; the answer equals the previous_response_id loop's (the
// same prompt and seed), the conversation's items are the user's message, the call, its
// output and the answer, each of a response carrying its response_id, and a fork at the
// call continues from its state as the conversation did.
async function conversationLoop() {
  const a = client(base), b = client(baseB);
  const tools = TOOLS.map((t) => ({ type: "function", ...t.function }));
  const request = { model, tools, temperature: 0, max_output_tokens: 300, parallel_tool_calls: false };
  const conversation = await a.conversations.create({ metadata: { check: "tools" } });
  const first = await a.responses.create({ ...request, conversation: conversation.id,
                                           input: QUESTION[0].content, tool_choice: "required" });
  const calls = first.output.filter((item) => item.type === "function_call");
  expect(first.status === "completed" && calls.length === 1,
         `conversation: status ${first.status}, output ${JSON.stringify(first.output)}`);
  const results = calls.map((c) => ({ type: "function_call_output", call_id: c.call_id, output: JSON.stringify({ ok: true }) }));
  const next = await b.responses.create({ ...request, max_output_tokens: 20, conversation: conversation.id, input: results });
  const alone = await b.responses.create({ ...request, max_output_tokens: 20, previous_response_id: first.id, input: results });
  expect(next.output_text.length > 0 && next.output_text === alone.output_text,
         `conversation: answered ${JSON.stringify(next.output_text)}, previous_response_id ${JSON.stringify(alone.output_text)}`);
  expect(next.usage.input_tokens_details.cached_tokens > 0, `conversation: cached ${JSON.stringify(next.usage)}`);
  const items = [];
  for await (const item of a.conversations.items.list(conversation.id, { order: "asc" })) items.push(item);
  const shape = items.map((i) => i.type === "message" ? `message:${i.role}` : i.type);
  expect(JSON.stringify(shape) === JSON.stringify(["message:user", "function_call", "function_call_output", "message:assistant"]),
         `conversation: items ${JSON.stringify(items)}`);
  expect(items[1].call_id === calls[0].call_id && items[1].arguments === calls[0].arguments &&
         items[1].response_id === first.id && items[2].call_id === calls[0].call_id &&
         items[3].response_id === next.id,
         `conversation: items ${JSON.stringify(items)}`);
  // A fork at the call continues from the call's state, as the conversation did.
  const forkUrl = `${base}/v1/conversations/${conversation.id}/fork`;
  const forked = await (await fetch(forkUrl, { method: "POST", headers: { "content-type": "application/json" },
                                               body: JSON.stringify({ item_id: items[1].id }) })).json();
  expect(typeof forked.id === "string", `conversation fork: ${JSON.stringify(forked)}`);
  const again = await a.responses.create({ ...request, max_output_tokens: 20, conversation: forked.id, input: results });
  expect(again.output_text === next.output_text,
         `conversation fork: ${JSON.stringify(again.output_text)} != ${JSON.stringify(next.output_text)}`);
  await a.conversations.delete(forked.id);
  await a.conversations.delete(conversation.id);
  console.log(`tools: a conversation: ${calls[0].name}(${calls[0].arguments}) on one replica, its output on ` +
              `the other: ${JSON.stringify(next.output_text)} as by previous_response_id; items ${shape.join(", ")}; ` +
              `a fork at the call answers the same`);
}

const first = await toolLoop();
await namedRunTools();
await streamed(first);
await refusals();
await cutEnvelope();
await responses();
await conversationLoop();
