// The hybrid benchmark's driver (tests/bench/hybrid_bench.sh starts the server and writes
// the GGUF file): a TURNS-turn chat on a hybrid model, each turn a user message of 40-60
// tokens and an answer of ANSWER greedy tokens, timed to the first token, four ways,
// interleaved turn by turn (the order rotates each turn):
//
//   chat          attnserve, the way a stateless client sends it: the whole history every
//                 turn through /v1/chat/completions (streamed; the prefix cache should
//                 leave only the new turn to prefill);
//   conversation  attnserve, /v1/conversations + /v1/responses with `conversation` (only
//                 the new user message is sent);
//   llama_fresh   llama.cpp (node-llama-cpp, THREADS threads) prefilling the same whole
//                 history (the chat's, ChatML, attnserve's answers) on a cleared sequence
//                 every turn: what its server does on a recurrent model when no
//                 checkpoint fits;
//   llama_reuse   llama.cpp keeping one sequence across turns and evaluating only the
//                 tokens after what it already holds (an upper bound for it: the answer
//                 re-tokenized plus the new user message; when the re-tokenized history
//                 is not an extension of what it holds it starts over, counted in `miss`).
//
// TTFT: attnserve from the request to the first content delta (client side, streamed);
// llama.cpp from evaluate() to the first generated token (tokenizing not counted).
// Each round starts its chat with a tag no other round shares, so no round reuses
// another's states. Prints one JSON line per (round, turn, engine), then one line with
// the model object of /v1/models.
//
// Usage: node hybrid_bench.mjs BASE MODEL GGUF_FILE TURNS ROUNDS ANSWER THREADS [ENGINES]
// (ENGINES: comma-separated subset of chat,conversation,llama_fresh,llama_reuse).
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const { getLlama, LlamaLogLevel } = await import(
  pathToFileURL(path.join(here, "../gguf/node_modules/node-llama-cpp/dist/index.js")).href);

const [base, model, file, turnsArg, roundsArg, answerArg, threadsArg, enginesArg] = process.argv.slice(2);
const turns = Number(turnsArg), rounds = Number(roundsArg), answer = Number(answerArg);
const threads = Number(threadsArg);
const engines = (enginesArg ?? "chat,conversation,llama_fresh,llama_reuse").split(",");

const WORDS = ("the river runs past an old mill where farmers bring grain every autumn and " +
  "children watch boats carry flour down to the market town beyond green hills while " +
  "merchants argue about prices weather roads bridges taxes horses and the coming winter")
  .split(" ");

// About 40-60 GPT-2 tokens of plain words (one token a word, most of them), varied by
// round and turn.
function userText(round, turn, tag) {
  const n = 40 + ((turn * 7 + round * 3) % 21);
  const words = [];
  for (let i = 0; i < n - 2; i++) words.push(WORDS[(i * 11 + turn * 5 + round * 13) % WORDS.length]);
  return (turn === 1 ? `${tag}: ` : "") + `Turn ${turn}. ` + words.join(" ") + "?";
}

// attnserve's ChatML (server/http/chat_template.cc RenderChatml), ending with the cue.
function chatml(messages) {
  return messages.map((m) => `<|im_start|>${m.role}\n${m.content}<|im_end|>\n`).join("") +
    "<|im_start|>assistant\n";
}

async function post(p, body) {
  const r = await fetch(`${base}${p}`, {
    method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  if (r.status !== 200) throw new Error(`${p}: ${r.status} ${await r.text()}`);
  return r;
}

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
  return { ttft, content, prompt_tokens: usage.prompt_tokens,
           cached_tokens: usage.prompt_tokens_details?.cached_tokens ?? 0,
           output_tokens: usage.completion_tokens };
}

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
  return { ttft, prompt_tokens: usage.input_tokens, cached_tokens: usage.input_tokens_details.cached_tokens,
           output_tokens: usage.output_tokens };
}

// llama.cpp: the first generated token after evaluating `ids` on `sequence` (appended to
// what it holds).
async function firstToken(sequence, ids) {
  const start = performance.now();
  for await (const token of sequence.evaluate(ids, { temperature: 0 })) {
    return { ttft: performance.now() - start, token };
  }
  throw new Error("llama.cpp generated nothing");
}

const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const lm = await llama.loadModel({ modelPath: file });
const bos = lm.tokens.shouldPrependBosToken && lm.tokens.bos !== null ? [lm.tokens.bos] : [];
const tokenize = (text) => bos.concat(Array.from(lm.tokenize(text, false)));
const contextSize = 8192;
const freshContext = await lm.createContext({ contextSize, batchSize: 512, threads });
const reuseContext = await lm.createContext({ contextSize, batchSize: 512, threads });
const fresh = freshContext.getSequence(), reuse = reuseContext.getSequence();

// Warm-up: the client's connection and JIT, and each llama.cpp context's first decode.
await chat([{ role: "user", content: "warm up" }], 2);
for (const s of [fresh, reuse]) { await firstToken(s, tokenize("warm up")); await s.clearHistory(); }

const out = (o) => console.log(JSON.stringify(o));
for (let round = 0; round < rounds; round++) {
  const tag = `Round ${round} ${Date.now()}`;
  const messages = [];
  const conv = engines.includes("conversation") ? (await (await post("/v1/conversations", {})).json()).id : null;
  await reuse.clearHistory();
  for (let turn = 1; turn <= turns; turn++) {
    const user = userText(round, turn, tag);
    messages.push({ role: "user", content: user });
    const history = tokenize(chatml(messages));
    let reply = null;
    // The order rotates each turn so that the machine's noise falls on every engine alike.
    const order = engines.map((_, i) => engines[(i + turn + round) % engines.length]);
    for (const engine of order) {
      if (engine === "chat") {
        const r = await chat(messages, answer);
        reply = r.content;
        out({ round, turn, engine, ttft_ms: r.ttft, prompt_tokens: r.prompt_tokens,
              cached_tokens: r.cached_tokens, output_tokens: r.output_tokens });
      } else if (engine === "conversation") {
        const r = await respond(conv, user, answer);
        out({ round, turn, engine, ttft_ms: r.ttft, prompt_tokens: r.prompt_tokens,
              cached_tokens: r.cached_tokens, output_tokens: r.output_tokens });
      } else if (engine === "llama_fresh") {
        await fresh.clearHistory();
        const r = await firstToken(fresh, history);
        out({ round, turn, engine, ttft_ms: r.ttft, prompt_tokens: history.length, cached_tokens: 0 });
      } else if (engine === "llama_reuse") {
        const held = Array.from(reuse.contextTokens);
        let miss = !(held.length <= history.length && held.every((t, i) => t === history[i]));
        if (miss) await reuse.clearHistory();
        const start = miss ? 0 : held.length;
        const r = await firstToken(reuse, history.slice(start));
        out({ round, turn, engine, ttft_ms: r.ttft, prompt_tokens: history.length, cached_tokens: start,
              miss: miss && held.length > 0 });
      }
    }
    if (reply === null) {  // no chat engine: a fixed answer keeps the history growing alike
      reply = Array.from({ length: answer }, (_, i) => WORDS[(i * 3 + turn) % WORDS.length]).join(" ");
    }
    messages.push({ role: "assistant", content: reply });
  }
  if (conv) await fetch(`${base}/v1/conversations/${conv}`, { method: "DELETE" });
}
await freshContext.dispose();
await reuseContext.dispose();
await lm.dispose();
const models = await (await fetch(`${base}/v1/models`)).json();
out({ model: models.data.find((m) => m.id === model) ?? models.data[0] });
