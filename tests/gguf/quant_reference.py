#!/usr/bin/python3
"""A float64 numpy forward of the GGUF files make_quant_gguf.py writes (llama, qwen2,
qwen3), on the weights exactly as the file holds them (ggml_blocks.dequantize): what both
engines approximate, llama.cpp with 8-bit activations and an F16 KV cache, attnserve with
its own int8 activations. quant_check.py measures each engine's distance from it.

  llama:  x = embd[ids]; per layer x += Wo attn(rope(Wq h), rope(Wk h), Wv h) with
          h = rmsnorm(x) * attn_norm, then x += Wd (silu(Wg h) * Wu h) with h =
          rmsnorm(x) * ffn_norm; logits = output (rmsnorm(x) * output_norm) (the
          embedding when output is absent). RoPE on interleaved pairs (2i, 2i + 1): the
          file's q/k rows are in llama.cpp's order.
  qwen2:  as llama plus the q/k/v biases; RoPE on halves (i, i + d/2) (NEOX).
  qwen3:  as qwen2 without biases, q and k RMS-normed per head (q_norm, k_norm) before
          RoPE; head_dim is attention.key_length.

forward(path, ids) -> float64 logits (len(ids), vocab), every position.
"""
import struct

import numpy as np

import ggml_blocks as gb

SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def read_gguf(path):
    """-> (metadata {key: value}, tensors {name: (ggml type, shape outermost first, bytes)})."""
    with open(path, "rb") as f:
        data = f.read()
    at = 4

    def take(fmt):
        nonlocal at
        v = struct.unpack_from(fmt, data, at)
        at += struct.calcsize(fmt)
        return v

    def string():
        nonlocal at
        (n,) = take("<Q")
        s = data[at:at + n].decode("utf-8", errors="replace")
        at += n
        return s

    def value(kind):
        if kind == 8:
            return string()
        if kind == 9:
            element, count = take("<IQ")
            return [value(element) for _ in range(count)]
        return take(SCALAR[kind])[0]

    _, n_tensors, n_kv = take("<IQQ")
    meta = {}
    for _ in range(n_kv):
        key = string()
        (kind,) = take("<I")
        meta[key] = value(kind)
    infos = []
    for _ in range(n_tensors):
        name = string()
        (nd,) = take("<I")
        dims = take(f"<{nd}Q")
        kind, offset = take("<IQ")
        infos.append((name, kind, tuple(reversed(dims)), offset))
    align = meta.get("general.alignment", 32)
    base = at + (-at) % align
    tensors = {}
    for name, kind, shape, offset in infos:
        rows = int(np.prod(shape[:-1], dtype=np.int64))
        size = gb.row_bytes(kind, shape[-1]) * rows
        tensors[name] = (kind, shape, data[base + offset:base + offset + size])
    return meta, tensors


def weight(tensors, name):
    kind, shape, raw = tensors[name]
    packed = np.frombuffer(raw, np.uint8).reshape(-1, gb.row_bytes(kind, shape[-1]))
    return gb.dequantize(kind, packed, shape[-1]).astype(np.float64).reshape(shape)


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, positions, base, interleaved):
    """x (T, heads, d)."""
    d = x.shape[-1]
    inv = base ** (-np.arange(0, d, 2, dtype=np.float64) / d)  # (d/2,)
    angle = positions[:, None, None] * inv[None, None, :]     # (T, 1, d/2)
    cos, sin = np.cos(angle), np.sin(angle)
    if interleaved:
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = a * cos - b * sin
        out[..., 1::2] = a * sin + b * cos
        return out
    a, b = x[..., :d // 2], x[..., d // 2:]
    return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)


def forward(path, ids):
    meta, t = read_gguf(path)
    arch = meta["general.architecture"]
    p = lambda key: meta[f"{arch}.{key}"]
    heads, kv = p("attention.head_count"), p("attention.head_count_kv")
    hd = meta.get(f"{arch}.attention.key_length", p("embedding_length") // heads)
    eps, base = p("attention.layer_norm_rms_epsilon"), meta.get(f"{arch}.rope.freq_base", 10000.0)
    ids = np.asarray(ids)
    n = len(ids)
    pos = np.arange(n, dtype=np.float64)
    embd = weight(t, "token_embd.weight")
    x = embd[ids]
    mask = np.triu(np.full((n, n), -np.inf), 1)
    for i in range(p("block_count")):
        b = f"blk.{i}."
        h = rmsnorm(x, weight(t, b + "attn_norm.weight"), eps)
        q, k, v = (h @ weight(t, b + f"attn_{c}.weight").T for c in "qkv")
        if arch == "qwen2":
            q, k, v = (m + weight(t, b + f"attn_{c}.bias") for m, c in zip((q, k, v), "qkv"))
        q, k, v = q.reshape(n, heads, hd), k.reshape(n, kv, hd), v.reshape(n, kv, hd)
        if arch == "qwen3":
            q = rmsnorm(q, weight(t, b + "attn_q_norm.weight"), eps)
            k = rmsnorm(k, weight(t, b + "attn_k_norm.weight"), eps)
        q, k = rope(q, pos, base, arch == "llama"), rope(k, pos, base, arch == "llama")
        group = heads // kv
        k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
        scores = np.einsum("thd,shd->hts", q, k) / np.sqrt(hd) + mask
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        attn = np.einsum("hts,shd->thd", scores / scores.sum(axis=-1, keepdims=True), v)
        x = x + attn.reshape(n, heads * hd) @ weight(t, b + "attn_output.weight").T
        h = rmsnorm(x, weight(t, b + "ffn_norm.weight"), eps)
        g, u = h @ weight(t, b + "ffn_gate.weight").T, h @ weight(t, b + "ffn_up.weight").T
        x = x + (g / (1 + np.exp(-g)) * u) @ weight(t, b + "ffn_down.weight").T
    x = rmsnorm(x, weight(t, "output_norm.weight"), eps)
    head = weight(t, "output.weight") if "output.weight" in t else embd
    return x @ head.T
