// llama.cpp itself (node-llama-cpp's prebuilt binaries, pinned by package-lock.json) on
// the GGUF files make_gguf.py wrote: for each file, its tokenization of every text in
// TEXTS_JSON (with BOS first when the file asks for it, special-token text not parsed)
// and the tokens it generates greedily from PROMPT, with the probabilities of the top
// two at each step. Prints one JSON object {file: {tokenized: [[ids]...], greedy: [ids],
// margins: [p1 - p2...]}} on stdout.
// Usage: node llama_cpp_check.mjs TEXTS_JSON PROMPT GREEDY_TOKENS FILE.gguf...
import fs from "node:fs";
import path from "node:path";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

const [textsFile, prompt, greedyTokens, ...files] = process.argv.slice(2);
const texts = JSON.parse(fs.readFileSync(textsFile, "utf8"));
// The prebuilt CPU binary only: never build or download at test time.
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const out = {};
for (const file of files) {
  const model = await llama.loadModel({ modelPath: file });
  const bos = model.tokens.shouldPrependBosToken && model.tokens.bos !== null ? [model.tokens.bos] : [];
  const tokenized = texts.map((t) => bos.concat(Array.from(model.tokenize(t, false))));
  const context = await model.createContext({ contextSize: 512, batchSize: 512, threads: 1 });
  const sequence = context.getSequence();
  const promptTokens = bos.concat(Array.from(model.tokenize(prompt, false)));
  const greedy = [], margins = [];
  for await (const step of sequence.evaluateWithMetadata(promptTokens, { probabilities: true },
                                                         { temperature: 0 })) {
    greedy.push(step.token);
    const p = [...step.probabilities.values()].sort((a, b) => b - a);
    margins.push(p[0] - (p[1] ?? 0));
    if (greedy.length >= Number(greedyTokens)) break;
  }
  out[path.basename(file)] = { tokenized, prompt: promptTokens, greedy, margins };
  await context.dispose();
  await model.dispose();
}
console.log(JSON.stringify(out));
