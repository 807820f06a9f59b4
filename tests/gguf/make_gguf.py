#!/usr/bin/python3
"""GGUF files for tests/gguf: llama.cpp's format written from the small Llamas that
tests/hf/make_reference.py trains (Hugging Face directories: config.json, safetensors,
SentencePiece tokenizer.model), the way llama.cpp's convert_hf_to_gguf writes them:

  - the llama architecture's metadata (llama.*, general.*), tensors under llama.cpp's
    names (token_embd, blk.N.attn_q, ..., output_norm, output; no output when tied),
    dimensions innermost first, data aligned to 32 bytes;
  - attn_q and attn_k rows permuted per head to llama.cpp's interleaved RoPE pairs;
  - tensor types F32, F16, BF16 or Q8_0 (blocks of 32: fp16 scale max|x|/127, int8
    round(x / scale)); norms stay F32 as llama.cpp keeps 1-D tensors;
  - the vocabulary as tokenizer.ggml.*: "llama" (the SentencePiece pieces, scores and
    types of tokenizer.model), or "gpt2" (the same pieces as a byte-level BPE
    vocabulary with merges: gpt2_vocab), split as GPT-2 ("gpt-2") or as Llama-3
    ("llama-bpe", with ignore_merges).

Usage: /usr/bin/python3 make_gguf.py REFERENCE_OUT OUT_DIR
Writes OUT_DIR/NAME.gguf for each of FILES and prints one line per file.
"""
import json
import os
import struct
import sys

import sentencepiece as spm
import torch

import ggml_blocks

ALIGN = 32
F32, F16, Q8_0, Q4_K, BF16 = 0, 1, 8, 12, 30
TYPE_NAMES = {F32: "F32", F16: "F16", Q8_0: "Q8_0", Q4_K: "Q4_K", BF16: "BF16"}

# name: (source model, tensor type, vocabulary)
FILES = {
    "gqa-llama-f32": ("gqa_tied", F32, "llama"),
    "gqa-llama-q8_0": ("gqa_tied", Q8_0, "llama"),
    "mha-llama-f16": ("mha", F16, "llama"),
    "mha-llama-bf16": ("mha", BF16, "llama"),
    "mha-gpt2-f32": ("mha", F32, "gpt2"),
    "gqa-gpt2-q8_0": ("gqa_tied", Q8_0, "gpt2"),
    "mha-llama3-f16": ("mha", F16, "llama-bpe"),
}

# The chat templates the files carry: attnserve recognises each by its markers
# (server/http/chat_template.h); the Llama 3 vocabulary's file is served as llama3.
LLAMA2_TEMPLATE = "{% for message in messages %}[INST] {{ message['content'] }} [/INST]{% endfor %}"
LLAMA3_TEMPLATE = ("{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
                   "'<|end_header_id|>\\n\\n' + message['content'] + '<|eot_id|>' }}{% endfor %}"
                   "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>"
                   "\\n\\n' }}{% endif %}")

# ---- reading the Hugging Face directory -------------------------------------------------

def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", (name, info["dtype"])
        begin, end = info["data_offsets"]
        buf = bytearray(data[8 + n + begin:8 + n + end])
        out[name] = torch.frombuffer(buf, dtype=torch.float32).reshape(info["shape"]).clone()
    return out


# ---- the GGUF writer --------------------------------------------------------------------

def gguf_string(s):
    b = s.encode("utf-8") if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


# GGUF value types
U32, I32, F32V, BOOL, STRING, ARRAY, U64 = 4, 5, 6, 7, 8, 9, 10


def gguf_value(kind, v):
    if kind == U32:
        return struct.pack("<I", v)
    if kind == I32:
        return struct.pack("<i", v)
    if kind == F32V:
        return struct.pack("<f", v)
    if kind == BOOL:
        return struct.pack("<B", 1 if v else 0)
    if kind == STRING:
        return gguf_string(v)
    raise ValueError(kind)


def gguf_kv(key, kind, v, element=None):
    out = gguf_string(key) + struct.pack("<I", kind)
    if kind == ARRAY:
        out += struct.pack("<IQ", element, len(v))
        out += b"".join(gguf_value(element, x) for x in v)
    else:
        out += gguf_value(kind, v)
    return out


def encode_tensor(t, kind):
    t = t.contiguous().to(torch.float32)
    if kind == F32:
        return t.numpy().tobytes()
    if kind == F16:
        return t.to(torch.float16).numpy().tobytes()
    if kind == BF16:
        return t.to(torch.bfloat16).view(torch.int16).numpy().tobytes()
    if kind == Q8_0:
        rows = t.reshape(-1, 32)  # blocks along the innermost dimension
        amax = rows.abs().max(dim=1).values
        d = amax / 127.0
        inv = torch.where(d > 0, 1.0 / d, torch.zeros_like(d))
        q = torch.round(rows * inv[:, None]).clamp(-127, 127).to(torch.int8)
        d16 = d.to(torch.float16)
        out = bytearray()
        for i in range(rows.shape[0]):
            out += d16[i:i + 1].numpy().tobytes() + q[i].numpy().tobytes()
        return bytes(out)
    if kind == Q4_K:  # ggml_blocks' quantize_row_q4_K_ref, rows of whole 256-value blocks
        return ggml_blocks.quantize(Q4_K, t.reshape(-1, t.shape[-1]).numpy()).tobytes()
    raise ValueError(kind)


def write_gguf(path, kvs, tensors):
    """kvs: list of encoded pairs; tensors: list of (name, tensor (outermost first), type)."""
    infos, blobs, offset = b"", [], 0
    for name, t, kind in tensors:
        blob = encode_tensor(t, kind)
        dims = list(reversed(t.shape))
        infos += gguf_string(name) + struct.pack("<I", len(dims))
        infos += b"".join(struct.pack("<Q", d) for d in dims)
        infos += struct.pack("<IQ", kind, offset)
        pad = (-len(blob)) % ALIGN
        blobs.append(blob + b"\0" * pad)
        offset += len(blob) + pad
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kvs) + infos
    head += b"\0" * ((-len(head)) % ALIGN)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(head)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


# ---- vocabularies -----------------------------------------------------------------------

def llama_vocab(model_dir):
    sp = spm.SentencePieceProcessor(model_file=os.path.join(model_dir, "tokenizer.model"))
    tokens, scores, types = [], [], []
    for i in range(sp.get_piece_size()):
        tokens.append(sp.id_to_piece(i))
        scores.append(sp.get_score(i))
        types.append(2 if sp.is_unknown(i) else 3 if sp.is_control(i) else
                     6 if sp.is_byte(i) else 5 if sp.is_unused(i) else 1)
    return [
        gguf_kv("tokenizer.ggml.model", STRING, "llama"),
        gguf_kv("tokenizer.ggml.tokens", ARRAY, tokens, STRING),
        gguf_kv("tokenizer.ggml.scores", ARRAY, scores, F32V),
        gguf_kv("tokenizer.ggml.token_type", ARRAY, types, I32),
        gguf_kv("tokenizer.ggml.bos_token_id", U32, sp.bos_id()),
        gguf_kv("tokenizer.ggml.eos_token_id", U32, sp.eos_id()),
        gguf_kv("tokenizer.ggml.unknown_token_id", U32, sp.unk_id()),
        gguf_kv("tokenizer.ggml.add_bos_token", BOOL, True),
        gguf_kv("tokenizer.ggml.add_eos_token", BOOL, False),
    ]


def byte_symbols():
    """GPT-2's bytes_to_unicode: every byte as a printable character."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, n = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + n)
            n += 1
    return chars


def gpt2_vocab(model_dir, pre="gpt-2"):
    """The same vocabulary, ids and all, as a byte-level BPE one (so the trained model still
    reads sensible ids): control pieces stay control tokens, the 256 byte-fallback pieces
    become the byte-level alphabet, every other piece its bytes spelt in that alphabet
    ("▁" as a space), and each piece of two or more symbols gets the merges that build
    it from two shorter tokens, ranked by the piece's id (how Hugging Face converts a
    SentencePiece BPE vocabulary to merges)."""
    sp = spm.SentencePieceProcessor(model_file=os.path.join(model_dir, "tokenizer.model"))
    sym = byte_symbols()
    tokens, types = [], []
    for i in range(sp.get_piece_size()):
        piece = sp.id_to_piece(i)
        if sp.is_byte(i):
            tokens.append(sym[int(piece[3:5], 16)])
            types.append(1)
        elif sp.is_control(i) or sp.is_unknown(i):
            tokens.append(piece)
            types.append(3)
        else:
            tokens.append("".join(sym[b] for b in piece.replace("\u2581", " ").encode("utf-8")))
            types.append(1)
    # A one-character piece spells the same bytes as its byte-fallback piece: the byte
    # keeps them, the piece's id becomes an unused token.
    seen = set()
    for i in sorted(range(len(tokens)), key=lambda i: (not sp.is_byte(i), i)):
        if tokens[i] in seen:
            tokens[i], types[i] = f"<unused{i}>", 5
        seen.add(tokens[i])
    ids = {t: i for i, t in enumerate(tokens)}
    merges = []
    for i, t in enumerate(tokens):
        if types[i] != 1 or len(t) < 2:
            continue
        splits = [(ids[t[:k]], t[:k], t[k:]) for k in range(1, len(t))
                  if t[:k] in ids and t[k:] in ids and types[ids[t[:k]]] == 1 and types[ids[t[k:]]] == 1]
        merges += [f"{a} {b}" for _, a, b in sorted(splits)]
    return [
        gguf_kv("tokenizer.ggml.model", STRING, "gpt2"),
        gguf_kv("tokenizer.ggml.pre", STRING, pre),
        gguf_kv("tokenizer.ggml.tokens", ARRAY, tokens, STRING),
        gguf_kv("tokenizer.ggml.token_type", ARRAY, types, I32),
        gguf_kv("tokenizer.ggml.merges", ARRAY, merges, STRING),
        gguf_kv("tokenizer.ggml.bos_token_id", U32, sp.bos_id()),
        gguf_kv("tokenizer.ggml.eos_token_id", U32, sp.eos_id()),
        gguf_kv("tokenizer.ggml.add_bos_token", BOOL, True),
    ]


# ---- the model --------------------------------------------------------------------------

def interleave_rope_rows(w, heads):
    """Hugging Face's rotate-half rows -> llama.cpp's interleaved pairs, per head (what
    convert_hf_to_gguf's permute does)."""
    rows, cols = w.shape
    d = rows // heads
    return w.reshape(heads, 2, d // 2, cols).transpose(1, 2).reshape(rows, cols)


def convert(model_dir, kind, vocab, out_path):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    w = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    head_dim = cfg.get("head_dim", cfg["hidden_size"] // heads)
    name = os.path.basename(out_path)[:-len(".gguf")]
    if vocab == "llama":
        vocab_kvs = llama_vocab(model_dir)
    elif vocab == "gpt2":
        vocab_kvs = gpt2_vocab(model_dir)
    else:  # Llama-3's split and ignore_merges over the same byte-level vocabulary
        vocab_kvs = gpt2_vocab(model_dir, pre=vocab)
    vocab_size = cfg["vocab_size"]
    kvs = [
        gguf_kv("general.architecture", STRING, "llama"),
        gguf_kv("general.name", STRING, name),
        gguf_kv("general.alignment", U32, ALIGN),
        gguf_kv("llama.context_length", U32, cfg["max_position_embeddings"]),
        gguf_kv("llama.embedding_length", U32, cfg["hidden_size"]),
        gguf_kv("llama.block_count", U32, cfg["num_hidden_layers"]),
        gguf_kv("llama.feed_forward_length", U32, cfg["intermediate_size"]),
        gguf_kv("llama.attention.head_count", U32, heads),
        gguf_kv("llama.attention.head_count_kv", U32, kv_heads),
        gguf_kv("llama.attention.key_length", U32, head_dim),
        gguf_kv("llama.attention.value_length", U32, head_dim),
        gguf_kv("llama.rope.dimension_count", U32, head_dim),
        gguf_kv("llama.rope.freq_base", F32V, float(cfg["rope_theta"])),
        gguf_kv("llama.attention.layer_norm_rms_epsilon", F32V, float(cfg["rms_norm_eps"])),
        gguf_kv("llama.vocab_size", U32, vocab_size),
        gguf_kv("general.file_type", U32, {F32: 0, F16: 1, Q8_0: 7, BF16: 32}[kind]),
        gguf_kv("tokenizer.chat_template", STRING,
                LLAMA3_TEMPLATE if vocab == "llama-bpe" else LLAMA2_TEMPLATE),
    ] + vocab_kvs
    tensors = [("token_embd.weight", w["model.embed_tokens.weight"], kind)]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        b = f"blk.{i}."
        tensors += [
            (b + "attn_norm.weight", w[p + "input_layernorm.weight"], F32),
            (b + "attn_q.weight", interleave_rope_rows(w[p + "self_attn.q_proj.weight"], heads), kind),
            (b + "attn_k.weight", interleave_rope_rows(w[p + "self_attn.k_proj.weight"], kv_heads), kind),
            (b + "attn_v.weight", w[p + "self_attn.v_proj.weight"], kind),
            (b + "attn_output.weight", w[p + "self_attn.o_proj.weight"], kind),
            (b + "ffn_norm.weight", w[p + "post_attention_layernorm.weight"], F32),
            (b + "ffn_gate.weight", w[p + "mlp.gate_proj.weight"], kind),
            (b + "ffn_up.weight", w[p + "mlp.up_proj.weight"], kind),
            (b + "ffn_down.weight", w[p + "mlp.down_proj.weight"], kind),
        ]
    tensors.append(("output_norm.weight", w["model.norm.weight"], F32))
    if "lm_head.weight" in w and not cfg.get("tie_word_embeddings", False):
        tensors.append(("output.weight", w["lm_head.weight"], kind))
    write_gguf(out_path, kvs, tensors)
    return os.path.getsize(out_path)


def main():
    reference, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    for name, (source, kind, vocab) in FILES.items():
        path = os.path.join(out, name + ".gguf")
        size = convert(os.path.join(reference, "models", source), kind, vocab, path)
        print(f"make_gguf: {name}.gguf: {source} weights, {TYPE_NAMES[kind]}, {vocab} vocabulary, "
              f"{size} bytes")


if __name__ == "__main__":
    main()
