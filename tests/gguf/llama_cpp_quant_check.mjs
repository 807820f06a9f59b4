// llama.cpp itself (node-llama-cpp's prebuilt CPU binaries, one thread) on the quantized
// GGUF files make_quant_gguf.py wrote: for each file, the prompt's ids (BOS first when the
// file asks for it) and GREEDY_TOKENS tokens continued greedily, with llama.cpp's raw
// logits of the top 5 at each step (controlledEvaluate's logits, before sampling), so that
// each step's top-1 margin (logit of the first minus that of the second) is known.
// Prints one JSON object {file: {prompt: [ids], greedy: [ids], margins: [l1 - l2...],
// top: [[[id, logit]...5]...], types: {ggml type: tensors}}} on stdout; a file llama.cpp
// cannot load is {error: message}.
// Usage: node llama_cpp_quant_check.mjs PROMPT GREEDY_TOKENS FILE.gguf...
import path from "node:path";
import { getLlama, LlamaLogLevel, readGgufFileInfo } from "node-llama-cpp";

const [prompt, greedyTokens, ...files] = process.argv.slice(2);
// The prebuilt CPU binary only: never build or download at test time.
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const next = { token: true, logits: { filter: { tokens: [], includeTop: 5 } }, options: { temperature: 0 } };
const out = {};
for (const file of files) {
  const name = path.basename(file);
  let model;
  try {
    model = await llama.loadModel({ modelPath: file });
  } catch (e) {
    out[name] = { error: String(e.message ?? e) };
    continue;
  }
  const info = await readGgufFileInfo(file, { readTensorInfo: true });
  const types = {};
  for (const t of info.fullTensorInfo ?? []) types[t.ggmlType] = (types[t.ggmlType] ?? 0) + 1;
  const bos = model.tokens.shouldPrependBosToken && model.tokens.bos !== null ? [model.tokens.bos] : [];
  // KV_CACHE_TYPE=q8_0: llama.cpp's quantized KV cache (--cache-type-k/v q8_0; a
  // quantized V cache needs its flash attention).
  const kv = process.env.KV_CACHE_TYPE
    ? { experimentalKvCacheKeyType: process.env.KV_CACHE_TYPE.toUpperCase(),
        experimentalKvCacheValueType: process.env.KV_CACHE_TYPE.toUpperCase(),
        flashAttention: true }
    : {};
  const context = await model.createContext({ contextSize: 512, batchSize: 512, threads: 1, ...kv });
  const sequence = context.getSequence();
  const promptTokens = bos.concat(Array.from(model.tokenize(prompt, false)));
  const greedy = [], margins = [], top = [];
  let input = promptTokens.map((t, i) => (i === promptTokens.length - 1 ? [t, { generateNext: next }] : t));
  while (greedy.length < Number(greedyTokens)) {
    const results = await sequence.controlledEvaluate(input);
    const result = results[results.length - 1].next;
    const logits = [...result.logits.entries()].sort((a, b) => b[1] - a[1]);
    greedy.push(result.token);
    margins.push(logits[0][1] - logits[1][1]);
    top.push(logits.slice(0, 5));
    input = [[result.token, { generateNext: next }]];
  }
  out[name] = { prompt: promptTokens, greedy, margins, top, types };
  await context.dispose();
  await model.dispose();
}
console.log(JSON.stringify(out));
