// llama.cpp itself (node-llama-cpp's prebuilt binaries) on the recurrent, hybrid and
// mixture-of-experts GGUF files make_hybrid_gguf.py wrote: for each file, the prompt's ids
// (BOS first), the tokens it generates greedily with the top-1 probability margin of each
// step, and then, on a fresh sequence fed prompt + generated tokens in one evaluation, the
// full logits after every position (llama.cpp's raw logits, one row of n_vocab per
// position).
// With STATE_DIR, that sequence's state (llama_state_seq_save_file: its recurrent rows,
// Mamba-2 / short-conv / Gated DeltaNet, and KV cells) is saved to STATE_DIR/FILE.state.
// Prints one JSON object {file: {prompt, greedy, margins, logits: [[...]...]}} on stdout.
// Usage: [STATE_DIR=DIR] node hybrid_llama_cpp.mjs PROMPT GREEDY_TOKENS FILE.gguf...
import path from "node:path";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

const [prompt, greedyTokens, ...files] = process.argv.slice(2);
// The prebuilt CPU binary only: never build or download at test time.
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const out = {};
for (const file of files) {
  const model = await llama.loadModel({ modelPath: file });
  const bos = model.tokens.shouldPrependBosToken && model.tokens.bos !== null ? [model.tokens.bos] : [];
  const promptTokens = bos.concat(Array.from(model.tokenize(prompt, false)));
  let context = await model.createContext({ contextSize: 512, batchSize: 512, threads: 1, flashAttention: false });
  let sequence = context.getSequence();
  const greedy = [], margins = [];
  for await (const step of sequence.evaluateWithMetadata(promptTokens, { probabilities: true },
                                                         { temperature: 0 })) {
    greedy.push(step.token);
    const p = [...step.probabilities.values()].sort((a, b) => b - a);
    margins.push(p[0] - (p[1] ?? 0));
    if (greedy.length >= Number(greedyTokens)) break;
  }
  await context.dispose();

  // Teacher-forced: the logits after each of prompt + greedy (all but the last token).
  context = await model.createContext({ contextSize: 512, batchSize: 512, threads: 1, flashAttention: false });
  sequence = context.getSequence();
  const fed = promptTokens.concat(greedy.slice(0, -1));
  const results = await sequence.controlledEvaluate(
    fed.map((t) => [t, { generateNext: { logits: true } }]));
  const logits = results.map((r) => {
    const row = new Array(r.next.logits.size);
    for (const [token, value] of r.next.logits) row[token] = value;
    return row;
  });
  if (process.env.STATE_DIR) {
    await sequence.saveStateToFile(path.join(process.env.STATE_DIR, path.basename(file) + ".state"));
  }
  out[path.basename(file)] = { prompt: promptTokens, greedy, margins, logits };
  await context.dispose();
  await model.dispose();
}
console.log(JSON.stringify(out));
