// llama.cpp's side of tests/bench/gguf_bench.sh (node-llama-cpp's prebuilt CPU binaries,
// THREADS threads): on FILE, after a short warm-up,
//   - decode at each session count in SESSIONS: that many sequences of one context, each
//     fed the same PROMPT_IDS and continued greedily for TOKENS tokens, all at once
//     (node-llama-cpp puts every sequence's next token into one llama_decode); the
//     timestamps of every token;
//   - time to first token: LONG_IDS evaluated on a fresh sequence, until its first token;
// then this process's peak resident memory (VmHWM). Prints one JSON object on stdout:
// {decode: {N: {first: [ms per session], last: [ms per session], tokens: [per session]}},
//  ttft_ms, vmhwm_kb, load_ms}. Times are milliseconds from the start of each run.
// Usage: node llama_cpp_bench.mjs FILE THREADS TOKENS SESSIONS(1,8) PROMPT_IDS LONG_IDS
// (ids as comma-separated lists).
import fs from "node:fs";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

const [file, threadsArg, tokensArg, sessionsArg, promptArg, longArg] = process.argv.slice(2);
const threads = Number(threadsArg), tokens = Number(tokensArg);
const sessions = sessionsArg.split(",").map(Number);
const prompt = promptArg.split(",").map(Number), long = longArg.split(",").map(Number);
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const t0 = performance.now();
const model = await llama.loadModel({ modelPath: file });
const loadMs = performance.now() - t0;

async function greedy(sequence, ids, n, start, times) {
  let count = 0;
  for await (const token of sequence.evaluate(ids, { temperature: 0 })) {
    times.push(performance.now() - start);
    if (++count >= n) break;
  }
  return count;
}

const decode = {};
for (const n of sessions) {
  const context = await model.createContext({
    contextSize: n * (prompt.length + tokens + 16), sequences: n, batchSize: 512, threads });
  const seqs = Array.from({ length: n }, () => context.getSequence());
  // Warm-up: one sequence, a few tokens, then cleared.
  await greedy(seqs[0], prompt, 4, performance.now(), []);
  await seqs[0].clearHistory();
  const start = performance.now();
  const times = seqs.map(() => []);
  const counts = await Promise.all(seqs.map((s, i) => greedy(s, prompt, tokens, start, times[i])));
  decode[n] = { first: times.map((t) => t[0]), last: times.map((t) => t[t.length - 1]), tokens: counts };
  await context.dispose();
}

const context = await model.createContext({ contextSize: long.length + 64, batchSize: 512, threads });
const sequence = context.getSequence();
await greedy(sequence, prompt, 2, performance.now(), []);  // warm-up
await sequence.clearHistory();
const times = [];
await greedy(sequence, long, 1, performance.now(), times);
await context.dispose();
await model.dispose();

const status = fs.readFileSync("/proc/self/status", "utf8");
const vmhwm = Number(/VmHWM:\s+(\d+)/.exec(status)[1]);
console.log(JSON.stringify({ decode, ttft_ms: times[0], vmhwm_kb: vmhwm, load_ms: loadMs }));
