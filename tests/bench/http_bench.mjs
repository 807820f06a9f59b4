// The HTTP front's benchmark driver (tests/bench/http_bench.sh starts the server):
//
//   node http_bench.mjs ttft BASE MODEL SIZES REPS   time to first token of a chat whose
//       history is SIZES (comma-separated, in tokens of the byte model) long: once as a
//       history nobody kept (the whole prompt prefilled), once resent with one more
//       exchange after the answer (the kept state reused: only the new message
//       prefilled), and as a conversation (/v1/conversations): its first response holds
//       the history, the second ("Go on.") continues from the stored state; its TTFT is
//       timed. One JSON line per size: the medians of REPS.
//   node http_bench.mjs sse BASE MODEL STREAMS TURNS MAX_TOKENS
//       STREAMS concurrent clients, each TURNS completions of MAX_TOKENS tokens one after
//       the other (greedy, ignore_eos, the prompt `attnserve_client bench` sends), read
//       as server-sent events; one JSON line: completion tokens / wall seconds, like
//       `attnserve_client bench`.
//
// Plain fetch and a minimal SSE reader: the client's own cost stays small beside the
// server's (both share the machine).
const [command, base, model, ...args] = process.argv.slice(2);

const WORDS = ("and the lord said unto moses in the beginning god created heaven earth " +
  "was without form void darkness upon face of deep spirit moved waters light").split(" ");

// `n` bytes of words, starting with a tag no other history shares.
function text(n, tag) {
  let out = `${tag} `, i = 0;
  while (out.length < n) out += WORDS[(i++ * 7 + tag.length) % WORDS.length] + " ";
  return out.slice(0, n);
}

async function post(path, body) {
  const r = await fetch(`${base}${path}`, {
    method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  if (r.status !== 200) throw new Error(`${path}: ${r.status} ${await r.text()}`);
  return r;
}

// The JSON of each server-sent event's `data:` line in `response`'s body, as it arrives
// (the chat stream's closing `[DONE]` is not JSON and is skipped).
async function* events(response) {
  let buffer = "";
  const decoder = new TextDecoder();
  for await (const bytes of response.body) {
    buffer += decoder.decode(bytes, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = event.split("\n").find((l) => l.startsWith("data: "));
      if (data && data !== "data: [DONE]") yield JSON.parse(data.slice(6));
    }
  }
}

// One streamed chat completion: TTFT (to the first content byte), the text and usage.
async function chat(messages, maxTokens) {
  const start = performance.now();
  const r = await post("/v1/chat/completions", { model, messages, max_tokens: maxTokens, temperature: 0,
                                                 ignore_eos: true, stream: true,
                                                 stream_options: { include_usage: true } });
  let ttft = null, content = "", usage = null;
  for await (const chunk of events(r)) {
    if (chunk.error) throw new Error(`chat: ${JSON.stringify(chunk.error)}`);
    if (chunk.usage) usage = chunk.usage;
    const delta = chunk.choices?.[0]?.delta?.content;
    if (delta) {
      if (ttft === null) ttft = performance.now() - start;
      content += delta;
    }
  }
  return { ttft, content, usage };
}

// A turn in conversation `conv`, streamed: TTFT (to the first text delta) and the final
// response's usage.
async function respond(conv, input, maxTokens) {
  const start = performance.now();
  const r = await post("/v1/responses", { model, conversation: conv, input, temperature: 0,
                                          max_output_tokens: maxTokens, stream: true });
  let ttft = null, usage = null;
  for await (const e of events(r)) {
    if (e.type === "error") throw new Error(`respond: ${JSON.stringify(e)}`);
    if (e.type === "response.output_text.delta" && ttft === null) ttft = performance.now() - start;
    if (e.response?.usage) usage = e.response.usage;
  }
  return { ttft, usage };
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function ttft(sizes, reps) {
  for (const size of sizes) {
    const cold = [], warm = [], conversation = [];
    let coldPrompt = 0, warmPrompt = 0, warmCached = 0, convCached = 0;
    for (let rep = 0; rep < reps; rep++) {
      // The plain template adds "User: " and "\nAssistant: " around the message.
      const user = { role: "user", content: text(size - 20, `h${size}r${rep}t${Date.now()}`) };
      const first = await chat([user], 16);
      cold.push(first.ttft);
      coldPrompt = first.usage.prompt_tokens;
      if (first.usage.prompt_tokens_details.cached_tokens !== 0) throw new Error("a cold history hit");
      const again = await chat([user, { role: "assistant", content: first.content },
                                { role: "user", content: "Go on." }], 16);
      warm.push(again.ttft);
      warmPrompt = again.usage.prompt_tokens;
      warmCached = again.usage.prompt_tokens_details.cached_tokens;
      const conv = await (await post("/v1/conversations", {})).json();
      await respond(conv.id, user.content, 16);
      const next = await respond(conv.id, "Go on.", 16);
      conversation.push(next.ttft);
      convCached = next.usage.input_tokens_details.cached_tokens;
      await fetch(`${base}/v1/conversations/${conv.id}`, { method: "DELETE" });
    }
    console.log(JSON.stringify({ size, cold_prompt_tokens: coldPrompt, cold_ttft_ms: median(cold),
                                 warm_prompt_tokens: warmPrompt, warm_cached_tokens: warmCached,
                                 warm_ttft_ms: median(warm), conversation_cached_tokens: convCached,
                                 conversation_ttft_ms: median(conversation), cold_runs: cold,
                                 warm_runs: warm, conversation_runs: conversation }));
  }
}

async function sse(streams, turns, maxTokens) {
  const start = performance.now();
  let tokens = 0, errors = 0;
  await Promise.all(Array.from({ length: streams }, async () => {
    for (let t = 0; t < turns; t++) {
      const r = await fetch(`${base}/v1/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model, prompt: "Once upon a time", max_tokens: maxTokens, temperature: 0,
                               ignore_eos: true, stream: true, stream_options: { include_usage: true } }),
      });
      if (r.status !== 200) { errors++; await r.text(); continue; }
      const body = await r.text();  // read as it streams; counted from the usage event
      const usage = body.split("\n\n").filter((e) => e.startsWith("data: {") && e.includes('"usage":{'))
        .map((e) => JSON.parse(e.slice(6)).usage).pop();
      if (!usage) { errors++; continue; }
      tokens += usage.completion_tokens;
    }
  }));
  const seconds = (performance.now() - start) / 1000;
  console.log(JSON.stringify({ streams, turns, max_tokens: maxTokens, tokens, seconds,
                               tokens_per_s: tokens / seconds, errors }));
}

// One small request first: the client's own start-up (connection, JIT) is not the
// server's time.
async function warmUp() {
  await chat([{ role: "user", content: "warm up" }], 2).catch(() => {});
}

const commands = {
  ttft: async () => { await warmUp(); await ttft(args[0].split(",").map(Number), Number(args[1] ?? 3)); },
  sse: async () => { await warmUp(); await sse(Number(args[0]), Number(args[1]), Number(args[2])); },
};
if (!(command in commands) || !base || !model) {
  console.error("usage: node http_bench.mjs ttft|sse BASE MODEL ARGS...");
  process.exit(2);
}
commands[command]().catch((e) => { console.error(`http_bench ${command}: ${e.stack ?? e}`); process.exit(1); });
