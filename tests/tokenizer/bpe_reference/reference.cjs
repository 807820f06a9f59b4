// The reference side of bpe_oracle_test.py: Hugging Face's tokenizers.js (a byte-level
// BPE we did not write) and gpt-3-encoder (GPT-2's own encoder.py ported, with the real
// encoder.json and vocab.bpe it ships). Reads one JSON request on stdin:
//   {"dir": D, "texts": [...], "gpt3_encoder": bool}
// where D holds tokenizer.json and tokenizer_config.json, and writes one JSON answer:
//   {"ids": [[...], ...]            tokenizers.js encode(text) (special tokens added),
//    "decoded": ["...", ...]        its decode(ids, skip_special_tokens) of those ids,
//    "gpt3_encoder": [[...], ...]}  gpt-3-encoder's encode(text), when asked.
// Also: `node reference.cjs --gpt2-files` prints the paths of encoder.json and vocab.bpe.
"use strict";
const fs = require("fs");
const path = require("path");

if (process.argv[2] === "--gpt2-files") {
  const dir = path.dirname(require.resolve("gpt-3-encoder"));
  console.log(JSON.stringify({ encoder: path.join(dir, "encoder.json"),
                               vocab: path.join(dir, "vocab.bpe") }));
  process.exit(0);
}

const { Tokenizer } = require("@huggingface/tokenizers");
const request = JSON.parse(fs.readFileSync(0, "utf-8"));
const read = (name) => JSON.parse(fs.readFileSync(path.join(request.dir, name), "utf-8"));
const tokenizer = new Tokenizer(read("tokenizer.json"), read("tokenizer_config.json"));
const answer = { ids: [], decoded: [] };
for (const text of request.texts) {
  const ids = tokenizer.encode(text).ids;
  answer.ids.push(ids);
  answer.decoded.push(ids.length === 0 ? "" : tokenizer.decode(ids, {
    skip_special_tokens: true, clean_up_tokenization_spaces: false }));
}
if (request.gpt3_encoder) {
  const gpt3 = require("gpt-3-encoder");
  answer.gpt3_encoder = request.texts.map((text) => gpt3.encode(text));
}
process.stdout.write(JSON.stringify(answer));
