// The official `openai` SDK (npm, tests/openai/package.json) against a running
// attnserve_server's HTTP front: code written for OpenAI, with only baseURL and the key
// changed. Each command checks one behaviour and exits non-zero with the reason when it
// does not hold; tests/openai/sdk_test.sh starts the servers and runs them.
//
//   node sdk_check.mjs basic BASE MODEL GRPC_TEXT   models, chat and completions streamed
//                                                   and not; GRPC_TEXT: the file holding what
//                                                   gRPC Generate answered for the prompt
//   node sdk_check.mjs errors BASE MODEL            BadRequestError, NotFoundError
//   node sdk_check.mjs auth BASE KEY                AuthenticationError without or with a wrong key
//   node sdk_check.mjs conflict BASE SESSION        ConflictError: a turn on a busy session
//   node sdk_check.mjs ratelimit BASE               RateLimitError with retry-after (slots full)
//   node sdk_check.mjs disconnect BASE SESSION      an aborted stream frees its session
//   node sdk_check.mjs flood BASE N                 N concurrent streams: each a stream or a
//                                                   429/503 with retry-after; /health throughout
//   node sdk_check.mjs responses BASE MODEL BASE_B  stored responses continued on either of two
//                                                   replicas sharing a store, against a chat oracle
//   node sdk_check.mjs prefix BASE MODEL BASE_B BASE_C
//                                                   a chat resending its history reuses the
//                                                   kept state on either replica (cached_tokens)
//                                                   and equals a fresh server's full prefill and
//                                                   a conversation's turns; prints the tokens
//                                                   BASE and BASE_B prefilled
//   node sdk_check.mjs responses_tenants BASE MODEL KEY_A KEY_B
//                                                   another tenant's response and
//                                                   conversation are 404, and not listed
//   node sdk_check.mjs conversations BASE MODEL BASE_B
//                                                   conversations continued on either replica,
//                                                   listed, paged, forked, against a chat oracle
//   node sdk_check.mjs conversation_busy BASE CONV [ITEMS]
//                                                   409 while a response in CONV is held;
//                                                   with ITEMS: CONV has ITEMS items after it
//
// BASE is http://HOST:PORT (the SDK gets BASE/v1). Every client has maxRetries 0: the SDK
// would otherwise retry 409, 429 and 5xx, hiding the status under test.
import OpenAI from "openai";

const PROMPT = "In the beginning";
const [command, base, ...args] = process.argv.slice(2);

function fail(what) {
  console.error(`sdk_check ${command}: FAIL: ${what}`);
  process.exit(1);
}
function expect(cond, what) {
  if (!cond) fail(what);
}
function client(apiKey = "unused", extra = {}) {
  return new OpenAI({ baseURL: `${base}/v1`, apiKey, maxRetries: 0, timeout: 120_000, ...extra });
}
// The error `promise` rejects with; fails if it resolves.
async function errorOf(promise, what) {
  try {
    await promise;
  } catch (e) {
    return e;
  }
  fail(`${what}: succeeded, expected an error`);
}
function expectError(e, cls, status, what) {
  expect(e instanceof cls, `${what}: ${e?.constructor?.name} (${e?.status}: ${e?.message}), expected ${cls.name}`);
  expect(e.status === status, `${what}: status ${e.status}, expected ${status}`);
  expect(typeof e.error?.message === "string" && e.error.message.length > 0,
         `${what}: no error.message in the body (${JSON.stringify(e.error)})`);
  for (const field of ["type", "param", "code"]) {
    expect(field in e.error, `${what}: the error body has no "${field}" (${JSON.stringify(e.error)})`);
  }
}

// The chunks of a streamed chat or completion, checked for what the SDKs rely on: one id
// and `created` for the stream, choices of index 0, finish_reason stop|length exactly once
// and last among the choice chunks, then (include_usage) one usage chunk with no choices.
async function collect(stream, chat) {
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  expect(chunks.length >= 2, `only ${chunks.length} chunks`);
  const { id, created } = chunks[0];
  expect(typeof id === "string" && id.length > 0, "no stream id");
  expect(Number.isInteger(created) && created > 1.7e9, `created ${created} is not a unix time`);
  let text = "", finish = null, usage = null, timings = null;
  chunks.forEach((c, i) => {
    expect(c.id === id && c.created === created, `chunk ${i} has id ${c.id} created ${c.created}, the stream ${id} ${created}`);
    expect(c.object === (chat ? "chat.completion.chunk" : "text_completion"), `chunk ${i} object ${c.object}`);
    if (c.usage) {
      expect(c.choices.length === 0, `the usage chunk has ${c.choices.length} choices`);
      expect(usage === null && i === chunks.length - 1, "the usage chunk is not the last, or not the only one");
      usage = c.usage;
      timings = c.timings ?? null;
      return;
    }
    expect(c.choices.length === 1 && c.choices[0].index === 0, `chunk ${i}: choices ${JSON.stringify(c.choices)}`);
    expect(finish === null, `chunk ${i} after the finish_reason chunk`);
    const choice = c.choices[0];
    if (chat) {
      if (i === 0) {
        expect(choice.delta.role === "assistant" && choice.delta.content === "",
               `first delta ${JSON.stringify(choice.delta)}, expected {"role":"assistant","content":""}`);
      } else {
        expect(choice.delta.role === undefined, `chunk ${i} repeats the role`);
      }
      text += choice.delta.content ?? "";
    } else {
      text += choice.text ?? "";
    }
    if (choice.finish_reason != null) {
      expect(["stop", "length"].includes(choice.finish_reason), `finish_reason ${choice.finish_reason}`);
      finish = choice.finish_reason;
    }
  });
  expect(finish !== null, "no chunk carries a finish_reason");
  return { text, finish, usage, timings, id };
}

// attnserve's server-side `timings` of a turn that generated two tokens or more.
const goodTimings = (t) => t?.time_to_first_token_ms > 0 && t.total_ms >= t.time_to_first_token_ms &&
                           t.output_tokens_per_second > 0;

function expectUsage(u, what) {
  expect(u && Number.isInteger(u.prompt_tokens) && u.prompt_tokens > 0, `${what}: prompt_tokens ${u?.prompt_tokens}`);
  expect(Number.isInteger(u.completion_tokens) && u.completion_tokens > 0, `${what}: completion_tokens ${u?.completion_tokens}`);
  expect(u.total_tokens === u.prompt_tokens + u.completion_tokens, `${what}: total_tokens ${u.total_tokens}`);
  expect(Number.isInteger(u.prompt_tokens_details?.cached_tokens),
         `${what}: no prompt_tokens_details.cached_tokens (${JSON.stringify(u)})`);
}

async function basic(model, grpcTextFile) {
  const fs = await import("node:fs");
  const grpcText = fs.readFileSync(grpcTextFile, "utf8");
  const openai = client();

  const list = await openai.models.list();
  const ids = list.data.map((m) => m.id);
  expect(ids.includes(model), `models.list: ${JSON.stringify(ids)} has no ${model}`);
  const listed = list.data.find((m) => m.id === model);
  expect(listed.object === "model" && typeof listed.owned_by === "string", `models.list entry ${JSON.stringify(listed)}`);
  const one = await openai.models.retrieve(model);
  expect(one.id === model && one.object === "model", `models.retrieve: ${JSON.stringify(one)}`);
  expect(typeof one.attention === "string" && Number.isInteger(one.state_bytes_per_session),
         `models.retrieve: no attention / state_bytes_per_session (${JSON.stringify(one)})`);
  console.log(`models: ${ids.join(", ")}; ${model}: ${one.attention}, ${one.state_bytes_per_session} state bytes per session`);

  // Completions: greedy text equals what gRPC Generate answered for the same prompt.
  const request = { model, prompt: PROMPT, max_tokens: 40, temperature: 0 };
  const completion = await openai.completions.create(request);
  expect(completion.object === "text_completion" && completion.choices.length === 1, `completion ${JSON.stringify(completion)}`);
  const ctext = completion.choices[0].text;
  expect(ctext === grpcText, `completion text ${JSON.stringify(ctext)} differs from gRPC's ${JSON.stringify(grpcText)}`);
  expect(["stop", "length"].includes(completion.choices[0].finish_reason), `completion finish_reason ${completion.choices[0].finish_reason}`);
  expectUsage(completion.usage, "completion usage");
  const cs = await collect(await openai.completions.create({ ...request, stream: true, stream_options: { include_usage: true } }), false);
  expect(cs.text === ctext, `streamed completion ${JSON.stringify(cs.text)} differs from the unstreamed ${JSON.stringify(ctext)}`);
  expect(cs.finish === completion.choices[0].finish_reason, `streamed finish ${cs.finish}, unstreamed ${completion.choices[0].finish_reason}`);
  expectUsage(cs.usage, "streamed completion usage");
  expect(cs.usage.completion_tokens === completion.usage.completion_tokens &&
         cs.usage.prompt_tokens === completion.usage.prompt_tokens, "streamed and unstreamed usage differ");
  console.log(`completions: ${completion.usage.completion_tokens} tokens, the same as gRPC, streamed and not: ${JSON.stringify(ctext)}`);

  // Chat, streamed and not: the same text; without include_usage no usage chunk.
  const chatRequest = { model, messages: [{ role: "user", content: PROMPT }], max_completion_tokens: 40, temperature: 0 };
  const chat = await openai.chat.completions.create(chatRequest);
  expect(chat.object === "chat.completion" && chat.choices.length === 1, `chat ${JSON.stringify(chat)}`);
  const message = chat.choices[0].message;
  expect(message.role === "assistant" && typeof message.content === "string" && message.content.length > 0,
         `chat message ${JSON.stringify(message)}`);
  expectUsage(chat.usage, "chat usage");
  // attnserve's server-side timings, beside usage.
  expect(goodTimings(chat.timings), `chat timings ${JSON.stringify(chat.timings)}`);
  const streamed = await collect(await openai.chat.completions.create({ ...chatRequest, stream: true }), true);
  expect(streamed.usage === null, "a usage chunk without stream_options.include_usage");
  expect(streamed.text === message.content, `streamed chat ${JSON.stringify(streamed.text)} differs from ${JSON.stringify(message.content)}`);
  const withUsage = await collect(await openai.chat.completions.create({ ...chatRequest, stream: true, stream_options: { include_usage: true } }), true);
  expect(withUsage.text === message.content, "streamed chat with usage differs");
  expectUsage(withUsage.usage, "streamed chat usage");
  expect(goodTimings(withUsage.timings), `the usage chunk's timings ${JSON.stringify(withUsage.timings)}`);
  expect(withUsage.usage.prompt_tokens === chat.usage.prompt_tokens, "streamed and unstreamed prompt_tokens differ");
  console.log(`chat: ${chat.usage.prompt_tokens} prompt tokens, ${chat.usage.completion_tokens} generated, the same streamed and not: ${JSON.stringify(message.content)}`);

  // max_tokens reached is "length"; a stop string is "stop" and cuts the text before it.
  const short = await openai.chat.completions.create({ ...chatRequest, max_completion_tokens: 3 });
  expect(short.choices[0].finish_reason === "length" && short.usage.completion_tokens === 3,
         `3 tokens: finish ${short.choices[0].finish_reason}, ${short.usage.completion_tokens} tokens`);
  const cut = ctext.slice(5, 7);
  if (cut.length === 2 && !cut.includes("\uFFFD")) {
    const stopped = await openai.completions.create({ ...request, stop: [cut] });
    expect(stopped.choices[0].finish_reason === "stop", `stop ${JSON.stringify(cut)}: finish ${stopped.choices[0].finish_reason}`);
    expect(!stopped.choices[0].text.includes(cut) && ctext.startsWith(stopped.choices[0].text),
           `stop ${JSON.stringify(cut)}: text ${JSON.stringify(stopped.choices[0].text)}`);
  }
  // Log probabilities: chat's per-token content list.
  const lp = await openai.chat.completions.create({ ...chatRequest, max_completion_tokens: 5, logprobs: true, top_logprobs: 3 });
  const content = lp.choices[0].logprobs?.content;
  expect(Array.isArray(content) && content.length === 5, `chat logprobs ${JSON.stringify(lp.choices[0].logprobs)}`);
  for (const t of content) {
    expect(t.logprob <= 0 && t.top_logprobs.length === 3, `logprob entry ${JSON.stringify(t)}`);
    expect(t.top_logprobs[0].logprob >= t.logprob - 1e-6, `the chosen token is more likely than the top alternative (greedy): ${JSON.stringify(t)}`);
  }
  console.log("basic: PASS");
}

async function errors(model) {
  const openai = client();
  const chat = { model, messages: [{ role: "user", content: PROMPT }], max_tokens: 5 };
  for (const [what, request, param] of [
    ["n=2", { ...chat, n: 2 }, "n"],
    ["temperature -1", { ...chat, temperature: -1 }, "temperature"],
    ["top_p 2", { ...chat, top_p: 2 }, "top_p"],
    ["max_tokens -1", { ...chat, max_tokens: -1 }, "max_tokens"],
    ["no messages", { model, max_tokens: 5 }, "messages"],
    ["a message without content", { model, messages: [{ role: "user" }] }, "messages"],
    ["an unknown role", { model, messages: [{ role: "wizard", content: "x" }] }, "messages"],
  ]) {
    const e = await errorOf(openai.chat.completions.create(request), what);
    expectError(e, OpenAI.BadRequestError, 400, what);
    console.log(`${what}: 400 ${e.error.type} param=${e.error.param}: ${e.error.message}`);
    // param names the field (or a part of it: messages[0].content) when the HTTP edge
    // knows it; the message always does.
    expect(e.error.param === param || (e.error.param ?? "").startsWith(`${param}[`) ||
           (e.error.param === null && e.error.message.includes(param)),
           `${what}: param ${e.error.param} and a message not naming ${param}`);
  }
  const malformed = await fetch(`${base}/v1/chat/completions`, {
    method: "POST", headers: { "content-type": "application/json" }, body: "{not json",
  });
  expect(malformed.status === 400, `malformed JSON: ${malformed.status}`);
  const body = await malformed.json();
  expect(typeof body.error?.message === "string", `malformed JSON body ${JSON.stringify(body)}`);
  for (const [what, call] of [
    ["chat with an unknown model", () => openai.chat.completions.create({ ...chat, model: "no-such-model" })],
    ["completion with an unknown model", () => openai.completions.create({ model: "no-such-model", prompt: "x" })],
    ["retrieve an unknown model", () => openai.models.retrieve("no-such-model")],
  ]) {
    const e = await errorOf(call(), what);
    expectError(e, OpenAI.NotFoundError, 404, what);
    expect(e.error.message.includes("no-such-model"), `${what}: the message does not name the model: ${e.error.message}`);
    console.log(`${what}: 404 ${e.error.message}`);
  }
  console.log("errors: PASS");
}

async function auth(key) {
  // No key at all: the SDK will not send a request without one, so plain fetch.
  for (const [route, init] of [
    ["/v1/models", {}],
    ["/v1/chat/completions", { method: "POST", headers: { "content-type": "application/json" },
                               body: JSON.stringify({ messages: [{ role: "user", content: "x" }], max_tokens: 2 }) }],
  ]) {
    const r = await fetch(`${base}${route}`, init);
    const body = await r.json();
    expect(r.status === 401 && typeof body.error?.message === "string",
           `${route} without a key: ${r.status} ${JSON.stringify(body)}`);
    console.log(`${route} without a key: 401 ${body.error.message}`);
  }
  const wrong = client("wrongwrongwrongwrong1234");
  for (const [route, call] of [
    ["models.list", () => wrong.models.list()],
    ["chat", () => wrong.chat.completions.create({ messages: [{ role: "user", content: "x" }], max_tokens: 2 })],
  ]) {
    const e = await errorOf(call(), `${route} with a wrong key`);
    expectError(e, OpenAI.AuthenticationError, 401, `${route} with a wrong key`);
    console.log(`${route} with a wrong key: 401 ${e.error.message}`);
  }
  const openai = client(key);
  const list = await openai.models.list();
  expect(list.data.length > 0, "models.list with the key is empty");
  const chat = await openai.chat.completions.create({ messages: [{ role: "user", content: PROMPT }], max_tokens: 4, temperature: 0 });
  expect(chat.usage.completion_tokens === 4, `chat with the key: ${JSON.stringify(chat.usage)}`);
  // /health needs no key.
  const health = await fetch(`${base}/health`);
  expect(health.status === 200, `/health without a key: ${health.status}`);
  console.log("auth: PASS");
}

async function conflict(session) {
  const openai = client();
  const e = await errorOf(
    openai.chat.completions.create({ messages: [{ role: "user", content: "x" }], max_tokens: 2 },
                                   { headers: { "x-session-id": session } }),
    "a turn on a busy session");
  expectError(e, OpenAI.ConflictError, 409, "a turn on a busy session");
  console.log(`busy session: 409 ${e.error.message}`);
  const unknown = await errorOf(
    openai.chat.completions.create({ messages: [{ role: "user", content: "x" }], max_tokens: 2 },
                                   { headers: { "x-session-id": "no-such-session" } }),
    "a turn on an unknown session");
  expectError(unknown, OpenAI.NotFoundError, 404, "a turn on an unknown session");
  console.log("conflict: PASS");
}

async function ratelimit() {
  const openai = client();
  const e = await errorOf(
    openai.chat.completions.create({ messages: [{ role: "user", content: PROMPT }], max_tokens: 4, stream: true }),
    "a stream while every slot is taken");
  expectError(e, OpenAI.RateLimitError, 429, "a stream while every slot is taken");
  const retry = e.headers?.get?.("retry-after");
  expect(retry !== null && retry !== undefined && Number(retry) >= 1, `429 without a retry-after (${retry})`);
  const health = await fetch(`${base}/health`);
  expect(health.status === 200, `/health while every slot is taken: ${health.status}`);
  const models = await openai.models.list();
  expect(models.data.length > 0, "models.list while every slot is taken");
  console.log(`every slot taken: 429 retry-after ${retry}: ${e.error.message}; /health and /v1/models answer`);
  console.log("ratelimit: PASS");
}

// A stream aborted after its first content delta: the server cancels the turn and frees
// the session, so a next turn on it is accepted (409 meanwhile counts as not yet freed).
async function disconnect(session) {
  const openai = client();
  const controller = new AbortController();
  const stream = await openai.chat.completions.create(
    { messages: [{ role: "user", content: PROMPT }], max_tokens: 2000, temperature: 0, stream: true },
    { headers: { "x-session-id": session }, signal: controller.signal });
  let deltas = 0;
  try {
    for await (const chunk of stream) {
      if (chunk.choices[0]?.delta?.content) ++deltas;
      if (deltas === 2) {
        controller.abort();
        break;
      }
    }
  } catch (e) {
    expect(e instanceof OpenAI.APIUserAbortError || e.name === "AbortError", `the aborted stream: ${e}`);
  }
  expect(deltas === 2, `${deltas} deltas before the abort`);
  const aborted = Date.now();
  let refused = 0;
  for (;;) {
    try {
      const next = await openai.chat.completions.create(
        { messages: [{ role: "user", content: "x" }], max_tokens: 2 }, { headers: { "x-session-id": session } });
      expect(next.usage.completion_tokens === 2, `the next turn: ${JSON.stringify(next.usage)}`);
      break;
    } catch (e) {
      if (!(e instanceof OpenAI.ConflictError)) throw e;
      ++refused;
      expect(Date.now() - aborted < 30_000, "the session is still busy 30 s after its client went away");
      await new Promise((r) => setTimeout(r, 10));
    }
  }
  console.log(`disconnect: the session took a next turn ${Date.now() - aborted} ms after the abort (${refused} x 409 before)`);
  console.log("disconnect: PASS");
}

// N concurrent streams against fewer slots: each one is either a stream that ends with
// [DONE] or a 429/503 with retry-after, never left waiting; /health answers throughout.
async function flood(n) {
  const body = JSON.stringify({ messages: [{ role: "user", content: PROMPT }], max_tokens: 64, stream: true });
  let done = false, healthChecks = 0, healthWorst = 0;
  const healthLoop = (async () => {
    while (!done) {
      const t = Date.now();
      const h = await fetch(`${base}/health`, { signal: AbortSignal.timeout(30_000) })
        .catch((e) => fail(`/health during the flood (after ${healthChecks} answers): ${e}`));
      expect(h.status === 200, `/health during the flood: ${h.status}`);
      await h.text();
      healthWorst = Math.max(healthWorst, Date.now() - t);
      ++healthChecks;
      await new Promise((r) => setTimeout(r, 20));
    }
  })();
  const outcomes = await Promise.all(Array.from({ length: n }, async () => {
    let r;
    try {
      r = await fetch(`${base}/v1/chat/completions`, {
        method: "POST", headers: { "content-type": "application/json" }, body, signal: AbortSignal.timeout(300_000),
      });
    } catch (e) {
      // A connection over --http_max_connections_per_peer must send its request within
      // 0.25 s of its accept (the spare threads keep /health answerable) and is closed
      // otherwise: on a loaded machine 200 clients at once may be that slow. A closed
      // connection is that refusal; a request left waiting (the timeout) is not.
      if (e.name === "TimeoutError" || e.cause?.name === "TimeoutError") fail(`a request of the flood got no answer: ${e}`);
      return "closed";
    }
    const text = await r.text();
    if (r.status === 200) {
      expect(text.endsWith("data: [DONE]\n\n"), `a stream of the flood ended without [DONE]: ${JSON.stringify(text.slice(-200))}`);
      return "streamed";
    }
    expect(r.status === 429 || r.status === 503, `a request of the flood: ${r.status} ${text}`);
    expect(Number(r.headers.get("retry-after")) >= 1, `a ${r.status} without retry-after`);
    expect(typeof JSON.parse(text).error?.message === "string", `a ${r.status} body ${text}`);
    return String(r.status);
  }));
  done = true;
  await healthLoop;
  const count = (k) => outcomes.filter((o) => o === k).length;
  expect(count("streamed") > 0, "no stream of the flood was served");
  expect(count("429") + count("503") > 0, `all ${n} streams were admitted: the flood did not exceed the slots`);
  expect(count("closed") < n / 4, `${count("closed")} of ${n} connections closed unanswered`);
  console.log(`flood of ${n}: ${count("streamed")} streamed, ${count("429")} x 429, ${count("503")} x 503, ` +
              `${count("closed")} closed before their request arrived; ` +
              `/health answered ${healthChecks} times, slowest ${healthWorst} ms`);
  console.log("flood: PASS");
}


// The Responses API on two replicas sharing one Redis: a stored response is a checkpoint
// of the session's state, so previous_response_id continues it on either replica (only
// the new input prefilled), two continuations of one response fork, and the greedy
// continuation equals a stateless chat completion that resends the whole history.
async function responses(model, baseB) {
  const a = client();
  const b = new OpenAI({ baseURL: `${baseB}/v1`, apiKey: "unused", maxRetries: 0, timeout: 120_000 });
  const greedy = { model, temperature: 0, max_output_tokens: 30 };
  const r1 = await a.responses.create({ ...greedy, input: PROMPT, instructions: "Speak as the scripture." });
  expect(r1.object === "response" && /^resp_[0-9a-f]{32}$/.test(r1.id), `response object ${JSON.stringify(r1)}`);
  expect(r1.status === "incomplete" && r1.incomplete_details?.reason === "max_output_tokens",
         `status ${r1.status} ${JSON.stringify(r1.incomplete_details)} after max_output_tokens`);
  expect(typeof r1.output_text === "string" && r1.output_text.length > 0, `no output_text: ${JSON.stringify(r1.output)}`);
  expect(r1.usage.output_tokens === 30 && r1.usage.input_tokens > 0 &&
         r1.usage.input_tokens_details.cached_tokens === 0, `first usage ${JSON.stringify(r1.usage)}`);
  expect(r1.previous_response_id === null && r1.store === true && r1.instructions === "Speak as the scripture.",
         `echoed fields ${JSON.stringify(r1)}`);

  // Retrieved from the other replica: the same object.
  const got = await b.responses.retrieve(r1.id);
  expect(JSON.stringify(got) === JSON.stringify(r1), `retrieve on B:\n${JSON.stringify(got)}\n!=\n${JSON.stringify(r1)}`);

  // Continued on B and on A: the same text (greedy), the history counted as cached.
  const next = { ...greedy, previous_response_id: r1.id, input: "And then?" };
  const onB = await b.responses.create(next);
  const onA = await a.responses.create(next);
  expect(onB.output_text === onA.output_text, `continuation on B ${JSON.stringify(onB.output_text)} != on A ${JSON.stringify(onA.output_text)}`);
  expect(onB.previous_response_id === r1.id, `previous_response_id ${onB.previous_response_id}`);
  const cached = onB.usage.input_tokens_details.cached_tokens;
  expect(cached > 0 && cached < onB.usage.input_tokens &&
         onB.usage.input_tokens - cached < r1.usage.input_tokens + 30,
         `continuation usage ${JSON.stringify(onB.usage)}: only the new input is prefilled`);

  // The stateless oracle: chat completions with the whole history resent.
  const chat = await a.chat.completions.create({
    model, temperature: 0, max_tokens: 30,
    messages: [{ role: "system", content: "Speak as the scripture." }, { role: "user", content: PROMPT },
               { role: "assistant", content: r1.output_text }, { role: "user", content: "And then?" }],
  });
  expect(chat.choices[0].message.content === onB.output_text,
         `the continuation ${JSON.stringify(onB.output_text)} != a chat resending the history ${JSON.stringify(chat.choices[0].message.content)}`);

  // A fork: another continuation of r1 sees neither onA nor onB; r1 is unchanged.
  const fork = await b.responses.create({ ...greedy, previous_response_id: r1.id, input: "Who spake?" });
  const forkChat = await b.chat.completions.create({
    model, temperature: 0, max_tokens: 30,
    messages: [{ role: "system", content: "Speak as the scripture." }, { role: "user", content: PROMPT },
               { role: "assistant", content: r1.output_text }, { role: "user", content: "Who spake?" }],
  });
  expect(fork.output_text === forkChat.choices[0].message.content,
         `the fork ${JSON.stringify(fork.output_text)} != its chat oracle ${JSON.stringify(forkChat.choices[0].message.content)}`);
  const again = await a.responses.create(next);
  expect(again.output_text === onA.output_text, `r1 changed after continuations: ${JSON.stringify(again.output_text)}`);
  // A chain of three: the second link continues from onB's state, on A.
  const third = await a.responses.create({ ...greedy, previous_response_id: onB.id, input: "Go on." });
  const thirdChat = await a.chat.completions.create({
    model, temperature: 0, max_tokens: 30,
    messages: [{ role: "system", content: "Speak as the scripture." }, { role: "user", content: PROMPT },
               { role: "assistant", content: r1.output_text }, { role: "user", content: "And then?" },
               { role: "assistant", content: onB.output_text }, { role: "user", content: "Go on." }],
  });
  expect(third.output_text === thirdChat.choices[0].message.content,
         `the third link ${JSON.stringify(third.output_text)} != its chat oracle ${JSON.stringify(thirdChat.choices[0].message.content)}`);
  console.log(`responses: r1 ${JSON.stringify(r1.output_text)}; continued on both replicas ${JSON.stringify(onB.output_text)} ` +
              `(${cached} of ${onB.usage.input_tokens} input tokens cached), equal to the chat oracle; a fork and a third link equal theirs`);

  // Streamed: the event sequence the SDKs parse, then the same response stored.
  const events = [];
  for await (const e of await a.responses.create({ ...next, stream: true })) events.push(e);
  const types = events.map((e) => e.type);
  const head = ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"];
  const tail = ["response.output_text.done", "response.content_part.done", "response.output_item.done"];
  expect(JSON.stringify(types.slice(0, 4)) === JSON.stringify(head), `first events ${types.slice(0, 4)}`);
  const last = types.length - 1;
  expect(JSON.stringify(types.slice(last - 3, last)) === JSON.stringify(tail) &&
         ["response.completed", "response.incomplete"].includes(types[last]), `last events ${types.slice(last - 3)}`);
  expect(types.slice(4, last - 3).every((t) => t === "response.output_text.delta") && last - 3 > 4,
         `the middle events are not all deltas: ${types}`);
  expect(events.every((e, i) => e.sequence_number === i), `sequence numbers ${events.map((e) => e.sequence_number)}`);
  const streamed = events.filter((e) => e.type === "response.output_text.delta").map((e) => e.delta).join("");
  const final = events[last].response;
  expect(streamed === onA.output_text && events[last - 3].text === streamed,
         `streamed ${JSON.stringify(streamed)} != ${JSON.stringify(onA.output_text)}`);
  expect((await b.responses.retrieve(final.id)).output_text === streamed, "the streamed response as stored on B");
  // The SDK's own accumulator (responses.stream) agrees.
  const sdkStream = b.responses.stream({ ...next });
  const finalResponse = await sdkStream.finalResponse();
  expect(finalResponse.output_text === streamed, `responses.stream: ${JSON.stringify(finalResponse.output_text)}`);
  console.log(`responses stream: ${events.length} events in order, deltas equal the stored text`);

  // store: false keeps nothing; delete removes from every replica; unknown ids are 404.
  const unstored = await a.responses.create({ ...greedy, input: PROMPT, store: false });
  expectError(await errorOf(b.responses.retrieve(unstored.id), "retrieve store:false"), OpenAI.NotFoundError, 404, "retrieve store:false");
  await b.responses.delete(fork.id);
  expectError(await errorOf(a.responses.retrieve(fork.id), "retrieve deleted"), OpenAI.NotFoundError, 404, "retrieve deleted");
  expectError(await errorOf(a.responses.create({ ...greedy, previous_response_id: fork.id, input: "x" }), "continue deleted"),
              OpenAI.NotFoundError, 404, "continue a deleted response");
  const never = "resp_" + "0".repeat(32);
  const e = await errorOf(a.responses.retrieve(never), "retrieve never");
  expectError(e, OpenAI.NotFoundError, 404, "retrieve an id that never existed");
  expectError(await errorOf(a.responses.create({ ...greedy, input: [{ role: "user", content: [{ type: "input_image" }] }] }), "image"),
              OpenAI.BadRequestError, 400, "an image input");
  expectError(await errorOf(a.responses.create({ ...greedy, previous_response_id: r1.id, model: "nope", input: "x" }), "model"),
              OpenAI.BadRequestError, 400, "another model than the previous response's");
  console.log("responses: PASS");
}

// Conversations on two replicas sharing one Redis: a conversation is a session kept in
// the store between turns. Each response in it continues from the last one's state on
// whichever replica gets it (only the new input prefilled), its items list the turns,
// a fork at an answer continues from that answer's state, and the greedy continuations
// equal stateless chat completions that resend the whole history.
async function conversations(model, baseB) {
  const a = client();
  const b = new OpenAI({ baseURL: `${baseB}/v1`, apiKey: "unused", maxRetries: 0, timeout: 120_000 });
  const greedy = { model, temperature: 0, max_output_tokens: 30 };
  const system = "Speak as the scripture.";
  const conv = await a.conversations.create({
    metadata: { title: "sdk" }, items: [{ type: "message", role: "system", content: system }] });
  expect(/^conv_[0-9a-f]{32}$/.test(conv.id) && conv.object === "conversation" && conv.metadata.title === "sdk",
         `conversation object ${JSON.stringify(conv)}`);
  expect(JSON.stringify(await b.conversations.retrieve(conv.id)) === JSON.stringify(conv), "retrieve on B");
  // attnserve's fields: no model before the first response, not a fork.
  expect(conv.model === null && conv.updated_at === conv.created_at && conv.forked_from === null,
         `a new conversation's model, updated_at, forked_from: ${JSON.stringify(conv)}`);

  const r1 = await a.responses.create({ ...greedy, conversation: conv.id, input: PROMPT });
  expect(r1.conversation?.id === conv.id, `r1.conversation ${JSON.stringify(r1.conversation)}`);
  expect(r1.usage.input_tokens_details.cached_tokens === 0 && r1.session?.position > 0 && r1.session?.state_bytes > 0,
         `r1 usage ${JSON.stringify(r1.usage)} session ${JSON.stringify(r1.session)}`);
  // attnserve's server-side timings, stored with the response.
  expect(goodTimings(r1.timings), `r1 timings ${JSON.stringify(r1.timings)}`);
  expect(JSON.stringify((await b.responses.retrieve(r1.id)).timings) === JSON.stringify(r1.timings),
         "r1's timings retrieved on B");
  const afterR1 = await b.conversations.retrieve(conv.id);
  expect(afterR1.model === model && afterR1.updated_at >= conv.created_at, `after r1: ${JSON.stringify(afterR1)}`);
  const r2 = await b.responses.create({ ...greedy, conversation: { id: conv.id }, input: "And then?" });
  const cached = r2.usage.input_tokens_details.cached_tokens;
  expect(cached === r1.session.position, `r2 cached ${cached} != r1's position ${r1.session.position}`);
  const oracle = async (messages) =>
    (await a.chat.completions.create({ model, temperature: 0, max_tokens: 30, messages })).choices[0].message.content;
  const history = [{ role: "system", content: system }, { role: "user", content: PROMPT },
                   { role: "assistant", content: r1.output_text }, { role: "user", content: "And then?" }];
  const r2Chat = await oracle(history);
  expect(r2.output_text === r2Chat, `the second turn ${JSON.stringify(r2.output_text)} != its chat oracle ${JSON.stringify(r2Chat)}`);

  // The items, listed on the other replica, page by page (the SDK follows `after`).
  const items = [];
  for await (const item of a.conversations.items.list(conv.id, { order: "asc", limit: 2 })) items.push(item);
  const shape = items.map((i) => `${i.role}:${i.content[0].text}`);
  const want = [`system:${system}`, `user:${PROMPT}`, `assistant:${r1.output_text}`, "user:And then?",
                `assistant:${r2.output_text}`];
  expect(JSON.stringify(shape) === JSON.stringify(want), `items ${JSON.stringify(shape)}`);
  expect(items[2].id === r1.output[0].id && items[2].response_id === r1.id, `the answer item ${JSON.stringify(items[2])}`);
  const newest = await b.conversations.items.list(conv.id, { limit: 1 });
  expect(newest.data.length === 1 && newest.data[0].id === items[4].id && newest.has_more === true,
         `newest item first: ${JSON.stringify(newest.data)}`);

  // A fork at the first answer continues from its state; the original is unchanged.
  const forkAnswer = await fetch(`${base}/v1/conversations/${conv.id}/fork`, {
    method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ item_id: items[2].id }) });
  const fork = await forkAnswer.json();
  expect(forkAnswer.status === 200 && /^conv_/.test(fork.id) && fork.id !== conv.id, `fork ${JSON.stringify(fork)}`);
  expect(fork.forked_from?.conversation_id === conv.id && fork.forked_from?.item_id === items[2].id &&
         fork.model === model, `the fork's source and model: ${JSON.stringify(fork)}`);
  expect(JSON.stringify((await b.conversations.retrieve(fork.id)).forked_from) === JSON.stringify(fork.forked_from),
         "the fork's source retrieved on B");
  const f1 = await b.responses.create({ ...greedy, conversation: fork.id, input: "Who spake?" });
  expect(f1.usage.input_tokens_details.cached_tokens === r1.session.position, `the fork's cached tokens ${JSON.stringify(f1.usage)}`);
  const f1Chat = await oracle(history.slice(0, 3).concat([{ role: "user", content: "Who spake?" }]));
  expect(f1.output_text === f1Chat, `the fork ${JSON.stringify(f1.output_text)} != its chat oracle ${JSON.stringify(f1Chat)}`);
  const forkItems = (await a.conversations.items.list(fork.id, { order: "asc" })).data;
  expect(forkItems.length === 5 && forkItems[4].content[0].text === f1.output_text, `fork items ${forkItems.length}`);
  const after = (await a.conversations.items.list(conv.id, { order: "asc" })).data;
  expect(JSON.stringify(after) === JSON.stringify(items), "the original conversation changed after its fork");
  // The third turn of the original still continues from r2's state.
  const r3 = await a.responses.create({ ...greedy, conversation: conv.id, input: "Go on." });
  const r3Chat = await oracle(history.concat([{ role: "assistant", content: r2.output_text }, { role: "user", content: "Go on." }]));
  expect(r3.output_text === r3Chat, `the third turn ${JSON.stringify(r3.output_text)} != its chat oracle`);

  // The caller's conversations, newest first (attnserve's GET /v1/conversations).
  const list = await (await fetch(`${baseB}/v1/conversations`)).json();
  const ids = list.data.map((c) => c.id);
  expect(ids.indexOf(fork.id) !== -1 && ids.indexOf(fork.id) < ids.indexOf(conv.id), `listed ${JSON.stringify(ids)}`);
  // Metadata updates; refusals name the field.
  const updated = await b.conversations.update(conv.id, { metadata: { title: "renamed" } });
  expect(updated.metadata.title === "renamed" && (await a.conversations.retrieve(conv.id)).metadata.title === "renamed",
         `update ${JSON.stringify(updated)}`);
  const both = await errorOf(a.responses.create({ ...greedy, conversation: conv.id, previous_response_id: r1.id, input: "x" }), "both");
  expectError(both, OpenAI.BadRequestError, 400, "conversation and previous_response_id");
  const other = await errorOf(a.responses.create({ ...greedy, model: "nope", conversation: conv.id, input: "x" }), "model");
  expectError(other, OpenAI.BadRequestError, 400, "another model than the conversation's");
  const badFork = await fetch(`${base}/v1/conversations/${conv.id}/fork`, {
    method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ item_id: items[1].id }) });
  expect(badFork.status === 400 && (await badFork.json()).error.param === "item_id", `fork at a user item: ${badFork.status}`);

  // Deleted on B: gone everywhere.
  const deleted = await b.conversations.delete(fork.id);
  expect(deleted.deleted === true && deleted.id === fork.id && deleted.object === "conversation.deleted", `delete ${JSON.stringify(deleted)}`);
  expectError(await errorOf(a.conversations.retrieve(fork.id), "retrieve deleted"), OpenAI.NotFoundError, 404, "a deleted conversation");
  const gone = await errorOf(a.responses.create({ ...greedy, conversation: fork.id, input: "x" }), "respond in deleted");
  expectError(gone, OpenAI.NotFoundError, 404, "a response in a deleted conversation");
  expect(gone.error.param === "conversation", `param ${gone.error.param}`);
  // Its responses went with it, on both replicas; its source's answers are the source's.
  expectError(await errorOf(b.responses.retrieve(f1.id), "a deleted conversation's response"),
              OpenAI.NotFoundError, 404, "a response of a deleted conversation");
  const orphan = await errorOf(a.responses.create({ ...greedy, previous_response_id: f1.id, input: "x" }), "continue deleted");
  expectError(orphan, OpenAI.NotFoundError, 404, "continuing a response of a deleted conversation");
  expect((await a.responses.retrieve(r1.id)).id === r1.id, "the source's answer went with its fork");
  await a.conversations.delete(conv.id);
  expectError(await errorOf(b.responses.retrieve(r1.id), "r1 after its conversation"), OpenAI.NotFoundError, 404,
              "a response of a deleted conversation");
  console.log(`conversations: 3 turns over both replicas (cached ${cached}, ${r1.session.state_bytes} state bytes), ` +
              `5 items paged, a fork equal to its oracle, the original unchanged; update, delete, 400s and 404s`);
  console.log("conversations: PASS");
}

// While a response in CONVERSATION streams (held by the test), another is refused with
// 409 on this replica; after it ends, ITEMS items are listed.
async function conversationBusy(conv, items) {
  const openai = client();
  if (items === undefined) {
    const e = await errorOf(openai.responses.create({ conversation: conv, input: "x", max_output_tokens: 2 }), "busy");
    expectError(e, OpenAI.ConflictError, 409, "a second response in a conversation");
    expect(e.headers?.get("retry-after") === "1", `the busy 409's retry-after: ${e.headers?.get("retry-after")}`);
    console.log(`conversation busy: 409 (retry-after 1) ${e.error.message}`);
  } else {
    const listed = (await openai.conversations.items.list(conv, { order: "asc" })).data;
    expect(listed.length === Number(items) && listed[listed.length - 1].role === "assistant",
           `after the held response: ${listed.length} items`);
    console.log(`conversation busy: the held response ended and is item ${listed.length}`);
  }
}

// Tenants own their responses: another tenant's id answers exactly like one that never
// existed.
async function responsesTenants(model, keyA, keyB) {
  const a = client(keyA), b = client(keyB);
  const r = await a.responses.create({ model, input: PROMPT, max_output_tokens: 5, temperature: 0 });
  expect((await a.responses.retrieve(r.id)).id === r.id, "the owner cannot retrieve its response");
  const never = "resp_" + "f".repeat(32);
  const theirs = await errorOf(b.responses.retrieve(r.id), "another tenant's");
  const none = await errorOf(b.responses.retrieve(never), "never");
  expectError(theirs, OpenAI.NotFoundError, 404, "another tenant's response");
  expect(theirs.error.message === none.error.message.replace(never, r.id),
         `another tenant's: ${JSON.stringify(theirs.error.message)}; never existed: ${JSON.stringify(none.error.message)}`);
  expectError(await errorOf(b.responses.create({ model, input: "x", previous_response_id: r.id }), "continue theirs"),
              OpenAI.NotFoundError, 404, "continuing another tenant's response");
  expectError(await errorOf(b.responses.delete(r.id), "delete theirs"), OpenAI.NotFoundError, 404, "deleting another tenant's response");
  expect((await a.responses.retrieve(r.id)).id === r.id, "the response survived another tenant's delete");
  // And their conversations.
  const conv = await a.conversations.create({ metadata: { title: "mine" } });
  const theirConv = await errorOf(b.conversations.retrieve(conv.id), "another tenant's conversation");
  expectError(theirConv, OpenAI.NotFoundError, 404, "another tenant's conversation");
  expectError(await errorOf(b.responses.create({ model, input: "x", conversation: conv.id }), "respond in theirs"),
              OpenAI.NotFoundError, 404, "a response in another tenant's conversation");
  expectError(await errorOf(b.conversations.delete(conv.id), "delete theirs"), OpenAI.NotFoundError, 404, "deleting another tenant's conversation");
  const listB = await (await fetch(`${base}/v1/conversations`, { headers: { authorization: `Bearer ${keyB}` } })).json();
  expect(!listB.data.some((c) => c.id === conv.id), "another tenant's conversation listed");
  const listA = await (await fetch(`${base}/v1/conversations`, { headers: { authorization: `Bearer ${keyA}` } })).json();
  expect(listA.data.some((c) => c.id === conv.id), "the owner's conversation not listed");
  console.log("responses tenants: PASS");
}


// A chat client that resends its whole history: the second call, on the other replica,
// finds the state the first kept (cached_tokens) and prefills only the new message; its
// text equals a server that never saw the conversation (BASE_C: its own memory store)
// prefilling it all, and a conversation of the same messages (one session carried from
// turn to turn) answers each turn the same. A history that differs where the kept state
// ends is not reused. The last line counts the prompt tokens each replica had to prefill
// (prompt less cached, every call on BASE and BASE_B): what their
// attnserve_prompt_tokens_total must have grown by.
async function prefix(model, baseB, baseC) {
  const a = client();
  const b = new OpenAI({ baseURL: `${baseB}/v1`, apiKey: "unused", maxRetries: 0, timeout: 120_000 });
  const fresh = new OpenAI({ baseURL: `${baseC}/v1`, apiKey: "unused", maxRetries: 0, timeout: 120_000 });
  const prefilled = { A: 0, B: 0 };
  const count = (openai, usage) => {
    prefilled[openai === a ? "A" : "B"] += (usage.prompt_tokens ?? usage.input_tokens) -
      (usage.prompt_tokens_details ?? usage.input_tokens_details).cached_tokens;
  };
  const ask = async (openai, messages) => {
    const answer = await openai.chat.completions.create({ model, messages, temperature: 0, max_tokens: 30 });
    if (openai !== fresh) count(openai, answer.usage);
    return answer;
  };
  const history = [{ role: "user", content: PROMPT }];
  const first = await ask(a, history);
  expect(first.usage.prompt_tokens_details.cached_tokens === 0, `first call cached ${JSON.stringify(first.usage)}`);
  let previousCached = 0;
  for (const [turn, question] of ["And then?", "Who spake?", "Go on."].entries()) {
    const openai = turn % 2 === 0 ? b : a;  // alternate replicas
    const last = turn === 0 ? first : history.lastAnswer;
    history.push({ role: "assistant", content: last.choices[0].message.content }, { role: "user", content: question });
    const kept = await ask(openai, history);
    const oracle = await ask(fresh, history);
    const cached = kept.usage.prompt_tokens_details.cached_tokens;
    expect(cached > previousCached && cached < kept.usage.prompt_tokens,
           `turn ${turn + 2}: cached ${cached} of ${kept.usage.prompt_tokens} (previous ${previousCached})`);
    // The whole of the last call's state, at whatever token it ended (no block alignment).
    expect(cached === last.usage.prompt_tokens + last.usage.completion_tokens,
           `turn ${turn + 2}: cached ${cached}, the last call ended at ${last.usage.prompt_tokens} + ${last.usage.completion_tokens}`);
    expect(kept.usage.prompt_tokens === oracle.usage.prompt_tokens,
           `turn ${turn + 2}: prompt_tokens ${kept.usage.prompt_tokens} != the fresh server's ${oracle.usage.prompt_tokens}`);
    expect(kept.choices[0].message.content === oracle.choices[0].message.content,
           `turn ${turn + 2}: ${JSON.stringify(kept.choices[0].message.content)} != prefilled whole ${JSON.stringify(oracle.choices[0].message.content)}`);
    console.log(`prefix: turn ${turn + 2} on ${openai === a ? "A" : "B"}: ${cached} of ${kept.usage.prompt_tokens} prompt tokens cached; the text equals a full prefill`);
    previousCached = cached;
    history.lastAnswer = kept;
  }
  // An edited history: the last assistant message changed, so only an earlier state fits.
  const edited = history.slice(0, -2).concat([{ role: "assistant", content: "Not what was said." }, { role: "user", content: "Go on." }]);
  const kept = await ask(b, edited);
  const oracle = await ask(fresh, edited);
  const cached = kept.usage.prompt_tokens_details.cached_tokens;
  expect(cached < previousCached, `an edited history reused ${cached} tokens (the unedited ${previousCached})`);
  expect(kept.choices[0].message.content === oracle.choices[0].message.content, "the edited history's text");
  console.log(`prefix: an edited history reused ${cached} tokens (an earlier turn's state) and equals a full prefill`);

  // The same messages as a conversation, its turns alternating replicas: each answer is
  // the resending chat's.
  const conv = await a.conversations.create({});
  const answers = history.filter((m) => m.role === "assistant").map((m) => m.content)
    .concat([history.lastAnswer.choices[0].message.content]);
  const questions = history.filter((m) => m.role === "user").map((m) => m.content);
  for (const [turn, input] of questions.entries()) {
    const openai = turn % 2 === 0 ? a : b;
    const r = await openai.responses.create({ model, conversation: conv.id, input, temperature: 0, max_output_tokens: 30 });
    count(openai, r.usage);
    expect(r.output_text === answers[turn],
           `conversation turn ${turn + 1}: ${JSON.stringify(r.output_text)} != the chat's ${JSON.stringify(answers[turn])}`);
  }
  await a.conversations.delete(conv.id);
  console.log(`prefix: a conversation of the same ${questions.length} messages answers each as the chat did`);
  console.log("prefix: PASS");
  console.log(`prefilled A ${prefilled.A} B ${prefilled.B}`);
}

const commands = {
  basic: () => basic(args[0], args[1]),
  errors: () => errors(args[0]),
  auth: () => auth(args[0]),
  conflict: () => conflict(args[0]),
  ratelimit: () => ratelimit(),
  disconnect: () => disconnect(args[0]),
  flood: () => flood(Number(args[0])),
  responses: () => responses(args[0], args[1]),
  responses_tenants: () => responsesTenants(args[0], args[1], args[2]),
  prefix: () => prefix(args[0], args[1], args[2]),
  conversations: () => conversations(args[0], args[1]),
  conversation_busy: () => conversationBusy(args[0], args[1]),
};
if (!(command in commands) || !base) {
  console.error("usage: node sdk_check.mjs basic|errors|auth|conflict|ratelimit|disconnect|flood|responses|responses_tenants|prefix|conversations|conversation_busy BASE [ARGS]");
  process.exit(2);
}
commands[command]().catch((e) => fail(e?.stack ?? String(e)));
