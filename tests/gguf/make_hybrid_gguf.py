#!/usr/bin/python3
"""GGUF files of recurrent and hybrid architectures with random weights, written from
llama.cpp's loader (the source node-llama-cpp runs; hybrid_reference.py's docstring lists
the keys, tensor names, shapes and the computation each file means):

  - mamba2: every layer a Mamba-2 (SSD) mixer, no MLP; 2 SSM groups;
  - granitehybrid (Granite 4.0-H, dense): Mamba-2 layers and two GQA softmax attention
    layers without RoPE (rope.scaling.finetuned false), a SwiGLU MLP on every layer,
    the embedding / residual / logit / attention scales; head_count_kv per layer (0 on a
    Mamba-2 layer); and once (F32) with RoPE (finetuned true, as converted Bamba files
    are): llama.cpp's NORM RoPE, adjacent pairs;
  - lfm2: short-convolution layers and two GQA attention layers with per-head q/k
    RMSNorm and NEOX RoPE, a SwiGLU MLP on every layer, the final norm as
    token_embd_norm, the output tied to the embedding;
  - nemotron_h (Nemotron-H, dense): three kinds of layer, each one block behind its
    attn_norm: Mamba-2 (4 groups of 3 heads, inner size not 2d), GQA attention without
    RoPE, and a squared-ReLU MLP (up, down; no gate); feed_forward_length and
    head_count_kv per layer (both 0 on a Mamba-2 layer);
  - qwen35 (Qwen3.5 dense): Gated DeltaNet layers (2 key heads, 4 value heads of 32) and
    every third layer full attention with the gated q projection, q/k RMSNorm and
    interleaved M-RoPE on 16 of 64 dimensions, post_attention_norm before a SwiGLU MLP;
  - qwen35moe: the same layers with a MoE FFN (8 experts, top 2, softmax renormalised)
    and a sigmoid-gated shared expert;
  - qwen3next: qwen35moe's layers with the fused ssm_ba, value heads reading key heads
    h / (Hv / Hk), NEOX RoPE;
  - qwen3moe: GQA attention with q/k RMSNorm and NEOX RoPE, a MoE FFN;
  - lfm2moe: lfm2's layers, the first with a dense MLP, the rest a MoE FFN routed by
    sigmoid scores with the selection bias exp_probs_b;
  - granitehybrid with experts: granitehybrid's layers with a MoE FFN and an ungated
    shared expert;
  - llama with experts (Mixtral): GQA attention with NORM RoPE and a MoE FFN.

Each as F32 and as Q8_0 (the big matrices: projections, MLP, experts, embedding, output; norms,
convolution taps, A, D, biases, routers and the shared experts' gates stay F32 as
llama.cpp requires). Shapes are small
(d 256) and the vocabulary is a byte-level "gpt2" one: the 256 byte symbols, merges
learnt from texts.json, <|endoftext|> as BOS and EOS. Weights come from a seeded numpy
generator, scaled so that the final logits spread over several units and greedy decoding
has clear top-1 margins.

Usage: /usr/bin/python3 make_hybrid_gguf.py OUT_DIR [NAME...]
Writes OUT_DIR/NAME.gguf for each of FILES (or each NAME given, of FILES or NAMED_ONLY)
and prints one line per file.

       /usr/bin/python3 make_hybrid_gguf.py --bench OUT_DIR [NAME...]
Writes the benchmark's files (BENCH; tests/bench/hybrid_bench.sh) at a realistic shape:
granitehybrid, d 768, 12 layers of which every 4th (3, 7, 11) is grouped-query attention
(12 heads, 4 KV heads of 64) and the rest Mamba-2 (inner 1536, state 128, 24 heads, 1
group, conv 4), SwiGLU 1536 on every layer, 158M parameters; GPT-2's whole 50,257-token
vocabulary (make_quant_gguf.py's), a ChatML tokenizer.chat_template so the chat routes
serve it, the big matrices in Q8_0 (ggml_blocks' quantizer), and an output head that
favours whole-word tokens (favour_whole_words). A file that exists is kept.

       /usr/bin/python3 make_hybrid_gguf.py --chat OUT_DIR [NAME...]
Writes the chat files (CHAT; tests/openai/sdk_test.sh): granitehybrid and lfm2 at the
test shapes (F32) with a ChatML template and a byte vocabulary whose greedy answers are
ASCII letters and spaces, so a resent answer encodes back to the generated ids.
"""
import json
import os
import re
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_gguf  # noqa: E402
from make_gguf import (  # noqa: E402
    ALIGN, ARRAY, BOOL, F32, F32V, I32, Q4_K, Q8_0, STRING, TYPE_NAMES, U32, byte_symbols,
    gguf_kv, write_gguf)

HERE = os.path.dirname(os.path.abspath(__file__))
VOCAB = 320  # 256 bytes + 63 merges + <|endoftext|>
EMBD = 256

# name -> (architecture, type of the big matrices)
FILES = {
    "mamba2-f32": ("mamba2", F32),
    "mamba2-q8_0": ("mamba2", Q8_0),
    "granitehybrid-f32": ("granitehybrid", F32),
    "granitehybrid-q8_0": ("granitehybrid", Q8_0),
    "granitehybrid-rope-f32": ("granitehybrid-rope", F32),
    "lfm2-f32": ("lfm2", F32),
    "nemotron_h-f32": ("nemotron_h", F32),
    "nemotron_h-q8_0": ("nemotron_h", Q8_0),
    "lfm2-q8_0": ("lfm2", Q8_0),
    "qwen35-f32": ("qwen35", F32),
    "qwen35-q8_0": ("qwen35", Q8_0),
    "qwen3moe-f32": ("qwen3moe", F32),
    "qwen3moe-q8_0": ("qwen3moe", Q8_0),
    "qwen35moe-f32": ("qwen35moe", F32),
    "qwen35moe-q8_0": ("qwen35moe", Q8_0),
    "qwen3next-f32": ("qwen3next", F32),
    "qwen3next-q8_0": ("qwen3next", Q8_0),
    "lfm2moe-f32": ("lfm2moe", F32),
    "lfm2moe-q8_0": ("lfm2moe", Q8_0),
    "granitehybrid-moe-f32": ("granitehybrid-moe", F32),
    "granitehybrid-moe-q8_0": ("granitehybrid-moe", Q8_0),
    "llama-moe-f32": ("llama-moe", F32),
    "llama-moe-q8_0": ("llama-moe", Q8_0),
}
# Written only when named (hybrid_serve_test.sh): the big matrices in Q4_K (ggml_blocks'
# quantizer; every row here is whole 256-value blocks), which hybrid_reference.py reads
# dequantized but does not round as llama.cpp does (Q8_K activations).
NAMED_ONLY = {
    "granitehybrid-q4_k": ("granitehybrid", Q4_K),
    "lfm2-q4_k": ("lfm2", Q4_K),
}

# ---- the vocabulary ---------------------------------------------------------------------

def gpt2_vocab():
    """Byte-level BPE: the 256 byte symbols in GPT-2's alphabet, then 63 merges learnt
    greedily (most frequent pair first, ties by the pair's text) from the words of
    texts.json as GPT-2's pre-tokenizer splits them, then <|endoftext|>."""
    sym = byte_symbols()
    with open(os.path.join(HERE, "texts.json")) as f:
        text = " ".join(json.load(f))
    words = re.findall(r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+", text)
    seqs = [[sym[b] for b in w.encode("utf-8")] for w in words]
    tokens = [sym[b] for b in range(256)]
    merges = []
    while len(tokens) < VOCAB - 1:
        counts = {}
        for s in seqs:
            for a, b in zip(s, s[1:]):
                counts[(a, b)] = counts.get((a, b), 0) + 1
        (a, b), _ = max(counts.items(), key=lambda kv: (kv[1], kv[0][0] + kv[0][1]))
        merges.append(f"{a} {b}")
        tokens.append(a + b)
        for s in seqs:
            i = 0
            while i < len(s) - 1:
                if s[i] == a and s[i + 1] == b:
                    s[i:i + 2] = [a + b]
                i += 1
    tokens.append("<|endoftext|>")
    types = [1] * (VOCAB - 1) + [3]
    eos = VOCAB - 1
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


# ---- random weights ---------------------------------------------------------------------

class Weights:
    """Seeded random tensors, numpy shapes outermost first (GGUF dims are the reverse)."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.tensors = []

    def add(self, name, value, kind=F32):
        self.tensors.append((name, torch.from_numpy(np.ascontiguousarray(value, np.float32)), kind))

    def normal(self, shape, std):
        return self.rng.standard_normal(shape) * std

    def uniform(self, shape, lo, hi):
        return self.rng.uniform(lo, hi, shape)

    def linear(self, name, out_dim, in_dim, kind, gain=1.0):
        """A projection out_dim x in_dim (GGUF {in_dim, out_dim}), std gain / sqrt(in_dim)."""
        self.add(name, self.normal((out_dim, in_dim), gain / np.sqrt(in_dim)), kind)

    def norm(self, name, shape):
        self.add(name, 1.0 + self.normal(shape, 0.1))


def mamba2_layer(w, b, d, ssm, kind):
    """One Mamba-2 mixer: in_proj -> z | xBC | dt, the conv over xBC, dt bias, A, D, the
    grouped norm, out_proj. Initialised as the reference implementation does: A_log
    uniform in [log 1, log 16], dt = softplus(dt_raw + dt_bias) around [1e-3, 1e-1]."""
    inner, n, heads = ssm["inner"], ssm["state"], ssm["heads"]
    groups, k = ssm["groups"], ssm["conv"]
    conv_dim = inner + 2 * groups * n
    w.linear(b + "ssm_in.weight", 2 * inner + 2 * groups * n + heads, d, kind)
    w.add(b + "ssm_conv1d.weight", w.uniform((conv_dim, k), -1 / np.sqrt(k), 1 / np.sqrt(k)) * 1.5)
    w.add(b + "ssm_conv1d.bias", w.normal((conv_dim,), 0.1))
    dt = np.exp(w.uniform((heads,), np.log(1e-3), np.log(1e-1)))
    w.add(b + "ssm_dt.bias", dt + np.log(-np.expm1(-dt)))  # softplus^-1(dt)
    w.add(b + "ssm_a", -np.exp(w.uniform((heads, 1), 0.0, np.log(16.0))))
    w.add(b + "ssm_d", 1.0 + w.normal((heads, 1), 0.1))
    w.norm(b + "ssm_norm.weight", (groups, inner // groups))
    w.linear(b + "ssm_out.weight", d, inner, kind)


def attention_layer(w, b, d, heads, kv_heads, head_dim, kind, qk_norm):
    w.linear(b + "attn_q.weight", heads * head_dim, d, kind, gain=2.0)
    w.linear(b + "attn_k.weight", kv_heads * head_dim, d, kind, gain=2.0)
    w.linear(b + "attn_v.weight", kv_heads * head_dim, d, kind)
    if qk_norm:
        w.norm(b + "attn_q_norm.weight", (head_dim,))
        w.norm(b + "attn_k_norm.weight", (head_dim,))
    w.linear(b + "attn_output.weight", d, heads * head_dim, kind)


def mlp(w, b, d, ff, kind):
    w.norm(b + "ffn_norm.weight", (d,))
    w.linear(b + "ffn_gate.weight", ff, d, kind)
    w.linear(b + "ffn_up.weight", ff, d, kind)
    w.linear(b + "ffn_down.weight", d, ff, kind)


def common_kvs(arch, name, kind, layers, embd=EMBD, vocab=VOCAB, context=4096, eps=1e-5):
    return [
        gguf_kv("general.architecture", STRING, arch),
        gguf_kv("general.name", STRING, name),
        gguf_kv("general.alignment", U32, ALIGN),
        gguf_kv("general.file_type", U32, {F32: 0, Q8_0: 7, Q4_K: 14}[kind]),
        gguf_kv(f"{arch}.context_length", U32, context),
        gguf_kv(f"{arch}.embedding_length", U32, embd),
        gguf_kv(f"{arch}.block_count", U32, layers),
        gguf_kv(f"{arch}.vocab_size", U32, vocab),
        gguf_kv(f"{arch}.attention.layer_norm_rms_epsilon", F32V, eps),
    ]


def ssm_kvs(arch, ssm):
    return [
        gguf_kv(f"{arch}.ssm.conv_kernel", U32, ssm["conv"]),
        gguf_kv(f"{arch}.ssm.inner_size", U32, ssm["inner"]),
        gguf_kv(f"{arch}.ssm.state_size", U32, ssm["state"]),
        gguf_kv(f"{arch}.ssm.time_step_rank", U32, ssm["heads"]),
        gguf_kv(f"{arch}.ssm.group_count", U32, ssm["groups"]),
    ]


def make_mamba2(name, kind, seed=31):
    layers, ssm = 4, dict(inner=2 * EMBD, state=32, heads=8, groups=2, conv=4)
    kvs = common_kvs("mamba2", name, kind, layers) + ssm_kvs("mamba2", ssm) + [
        gguf_kv("mamba2.feed_forward_length", U32, 0),
        gguf_kv("mamba2.attention.head_count", U32, 0),
    ]
    w = Weights(seed)
    w.add("token_embd.weight", w.normal((VOCAB, EMBD), 1.0), kind)
    for i in range(layers):
        w.norm(f"blk.{i}.attn_norm.weight", (EMBD,))
        mamba2_layer(w, f"blk.{i}.", EMBD, ssm, kind)
    w.norm("output_norm.weight", (EMBD,))
    w.linear("output.weight", VOCAB, EMBD, kind, gain=5.0)
    return kvs, w.tensors


GRANITE_ATTN = (1, 4)
# The test files' shape (d EMBD, 6 layers, attention at GRANITE_ATTN), and the benchmark's.
GRANITE_TEST = dict(embd=EMBD, vocab=VOCAB, context=4096, layers=6, attn=GRANITE_ATTN, heads=8,
                    kv_heads=2, head_dim=32, ff=512,
                    ssm=dict(inner=2 * EMBD, state=32, heads=16, groups=1, conv=4))
GRANITE_BENCH = dict(embd=768, vocab=50257, context=8192, layers=12, attn=(3, 7, 11), heads=12,
                     kv_heads=4, head_dim=64, ff=1536,
                     ssm=dict(inner=1536, state=128, heads=24, groups=1, conv=4))


def make_granitehybrid(name, kind, seed=32, rope=False, shape=GRANITE_TEST):
    layers, heads, kv_heads, head_dim, ff = (shape[k] for k in ("layers", "heads", "kv_heads",
                                                                 "head_dim", "ff"))
    embd, vocab, attn, ssm = shape["embd"], shape["vocab"], shape["attn"], shape["ssm"]
    arch = "granitehybrid"
    kvs = common_kvs(arch, name, kind, layers, embd, vocab, shape["context"]) + ssm_kvs(arch, ssm) + [
        gguf_kv(f"{arch}.feed_forward_length", U32, ff),
        gguf_kv(f"{arch}.attention.head_count", U32, heads),
        gguf_kv(f"{arch}.attention.head_count_kv", ARRAY,
                [kv_heads if i in attn else 0 for i in range(layers)], I32),
        gguf_kv(f"{arch}.rope.scaling.finetuned", BOOL, rope),
        gguf_kv(f"{arch}.rope.freq_base", F32V, 10000.0),
        gguf_kv(f"{arch}.embedding_scale", F32V, 8.0),
        gguf_kv(f"{arch}.residual_scale", F32V, 0.5),
        gguf_kv(f"{arch}.logit_scale", F32V, 2.0),
        gguf_kv(f"{arch}.attention.scale", F32V, 0.125),
    ]
    w = Weights(seed)
    w.add("token_embd.weight", w.normal((vocab, embd), 1.0 / 8.0), kind)
    for i in range(layers):
        b = f"blk.{i}."
        w.norm(b + "attn_norm.weight", (embd,))
        if i in attn:
            attention_layer(w, b, embd, heads, kv_heads, head_dim, kind, qk_norm=False)
        else:
            mamba2_layer(w, b, embd, ssm, kind)
        mlp(w, b, embd, ff, kind)
    w.norm("output_norm.weight", (embd,))
    w.linear("output.weight", vocab, embd, kind, gain=10.0)
    return kvs, w.tensors


LFM2_ATTN = (2, 4)


def make_lfm2(name, kind, seed=33, vocab=VOCAB):
    layers, heads, kv_heads, head_dim, ff, l_cache = 6, 8, 2, 32, 512, 3
    arch = "lfm2"
    kvs = common_kvs(arch, name, kind, layers, vocab=vocab) + [
        gguf_kv(f"{arch}.feed_forward_length", U32, ff),
        gguf_kv(f"{arch}.attention.head_count", U32, heads),
        gguf_kv(f"{arch}.attention.head_count_kv", ARRAY,
                [kv_heads if i in LFM2_ATTN else 0 for i in range(layers)], I32),
        gguf_kv(f"{arch}.rope.freq_base", F32V, 1000000.0),
        gguf_kv(f"{arch}.shortconv.l_cache", U32, l_cache),
    ]
    w = Weights(seed)
    # No output.weight: llama.cpp falls back to the embedding (LFM2 ties them), so the
    # embedding is scaled for the logits and the layers see its RMS norm.
    w.add("token_embd.weight", w.normal((vocab, EMBD), 0.3), kind)
    for i in range(layers):
        b = f"blk.{i}."
        w.norm(b + "attn_norm.weight", (EMBD,))
        if i in LFM2_ATTN:
            attention_layer(w, b, EMBD, heads, kv_heads, head_dim, kind, qk_norm=True)
        else:
            w.add(b + "shortconv.conv.weight", w.uniform((EMBD, l_cache), -1.0, 1.0))
            w.linear(b + "shortconv.in_proj.weight", 3 * EMBD, EMBD, kind, gain=1.5)
            w.linear(b + "shortconv.out_proj.weight", EMBD, EMBD, kind)
        mlp(w, b, EMBD, ff, kind)
    w.norm("token_embd_norm.weight", (EMBD,))
    return kvs, w.tensors


NEMOTRON_PATTERN = "M-M*-M-"  # M Mamba-2, * attention, - MLP (its hybrid_override_pattern)


def make_nemotron_h(name, kind, seed=34):
    layers, heads, kv_heads, head_dim, ff = len(NEMOTRON_PATTERN), 8, 2, 32, 768
    ssm = dict(inner=384, state=32, heads=12, groups=4, conv=4)
    arch = "nemotron_h"
    kvs = common_kvs(arch, name, kind, layers) + ssm_kvs(arch, ssm) + [
        gguf_kv(f"{arch}.attention.layer_norm_epsilon", F32V, 1e-5),
        gguf_kv(f"{arch}.feed_forward_length", ARRAY,
                [ff if c == "-" else 0 for c in NEMOTRON_PATTERN], I32),
        gguf_kv(f"{arch}.attention.head_count", U32, heads),
        gguf_kv(f"{arch}.attention.head_count_kv", ARRAY,
                [kv_heads if c == "*" else 0 for c in NEMOTRON_PATTERN], I32),
        gguf_kv(f"{arch}.attention.key_length", U32, head_dim),
        gguf_kv(f"{arch}.attention.value_length", U32, head_dim),
    ]
    w = Weights(seed)
    w.add("token_embd.weight", w.normal((VOCAB, EMBD), 1.0), kind)
    for i, c in enumerate(NEMOTRON_PATTERN):
        b = f"blk.{i}."
        w.norm(b + "attn_norm.weight", (EMBD,))
        if c == "M":
            mamba2_layer(w, b, EMBD, ssm, kind)
        elif c == "*":
            attention_layer(w, b, EMBD, heads, kv_heads, head_dim, kind, qk_norm=False)
        else:
            w.linear(b + "ffn_up.weight", ff, EMBD, kind, gain=2.0)
            w.linear(b + "ffn_down.weight", EMBD, ff, kind, gain=0.5)
    w.norm("output_norm.weight", (EMBD,))
    w.linear("output.weight", VOCAB, EMBD, kind, gain=5.0)
    return kvs, w.tensors


# ---- Gated DeltaNet hybrids and mixtures of experts ---------------------------------------

def gdn_layer(w, b, d, gdn, kind, fused_ba):
    """One Gated DeltaNet mixer (qwen35 / qwen35moe: ssm_beta and ssm_alpha; qwen3next: the
    fused ssm_ba, per key head [b (r rows) | a (r rows)], r = Hv / Hk). A = -ssm_a drawn
    in [0.05, 2] and dt_bias around 0, so the heads keep memories of different lengths."""
    hk, hv, dk = gdn["k_heads"], gdn["v_heads"], gdn["state"]
    conv_dim = 2 * hk * dk + hv * dk
    w.linear(b + "attn_qkv.weight", conv_dim, d, kind)
    w.linear(b + "attn_gate.weight", hv * dk, d, kind)
    if fused_ba:
        w.linear(b + "ssm_ba.weight", 2 * hv, d, kind)
    else:
        w.linear(b + "ssm_beta.weight", hv, d, kind)
        w.linear(b + "ssm_alpha.weight", hv, d, kind)
    k = gdn["conv"]
    w.add(b + "ssm_conv1d.weight", w.uniform((conv_dim, k), -1 / np.sqrt(k), 1 / np.sqrt(k)) * 1.5)
    w.add(b + "ssm_dt.bias", w.normal((hv,), 0.5))
    w.add(b + "ssm_a", -np.exp(w.uniform((hv,), np.log(0.05), np.log(2.0))))
    w.norm(b + "ssm_norm.weight", (dk,))
    w.linear(b + "ssm_out.weight", d, hv * dk, kind)


def gated_attention_layer(w, b, d, heads, kv_heads, head_dim, kind):
    """Qwen3.5 / Qwen3-Next full attention: attn_q {d, 2 H hd} laid out per head as
    [q (hd rows) | gate (hd rows)], attn_k, attn_v, per-head q/k RMSNorm, attn_output."""
    w.linear(b + "attn_q.weight", heads * 2 * head_dim, d, kind, gain=2.0)
    w.linear(b + "attn_k.weight", kv_heads * head_dim, d, kind, gain=2.0)
    w.linear(b + "attn_v.weight", kv_heads * head_dim, d, kind)
    w.norm(b + "attn_q_norm.weight", (head_dim,))
    w.norm(b + "attn_k_norm.weight", (head_dim,))
    w.linear(b + "attn_output.weight", d, heads * head_dim, kind)


def moe(w, b, d, moe_shape, kind, shared=None, bias=False):
    """A mixture of experts: the router ffn_gate_inp {d, E} (F32), experts as 3-D tensors
    ffn_gate_exps / ffn_up_exps {d, ff, E} and ffn_down_exps {ff, d, E} (numpy (E, ff, d)
    and (E, d, ff)); shared = "gated" (ffn_*_shexp and the F32 gate vector
    ffn_gate_inp_shexp {d}) or "plain" (ungated, Granite); bias: exp_probs_b.bias {E}
    (LFM2-MoE's selection bias)."""
    e, ff = moe_shape["experts"], moe_shape["ff"]
    w.add(b + "ffn_gate_inp.weight", w.normal((e, d), 1.5 / np.sqrt(d)))
    w.add(b + "ffn_gate_exps.weight", w.normal((e, ff, d), 1.0 / np.sqrt(d)), kind)
    w.add(b + "ffn_up_exps.weight", w.normal((e, ff, d), 1.0 / np.sqrt(d)), kind)
    w.add(b + "ffn_down_exps.weight", w.normal((e, d, ff), 1.0 / np.sqrt(ff)), kind)
    if bias:
        w.add(b + "exp_probs_b.bias", w.normal((e,), 0.3))
    if shared:
        sff = moe_shape["shared_ff"]
        if shared == "gated":
            w.add(b + "ffn_gate_inp_shexp.weight", w.normal((d,), 1.0 / np.sqrt(d)))
        w.linear(b + "ffn_gate_shexp.weight", sff, d, kind)
        w.linear(b + "ffn_up_shexp.weight", sff, d, kind)
        w.linear(b + "ffn_down_shexp.weight", d, sff, kind)


def moe_kvs(arch, moe_shape, shared=True):
    kvs = [gguf_kv(f"{arch}.expert_count", U32, moe_shape["experts"]),
           gguf_kv(f"{arch}.expert_used_count", U32, moe_shape["used"]),
           gguf_kv(f"{arch}.expert_feed_forward_length", U32, moe_shape["ff"])]
    if shared and "shared_ff" in moe_shape:
        kvs.append(gguf_kv(f"{arch}.expert_shared_feed_forward_length", U32, moe_shape["shared_ff"]))
    return kvs


# qwen35 / qwen35moe / qwen3next test shape: d EMBD, 6 layers, every 3rd full attention
# (layers 2 and 5: full_attention_interval 3), 6 query heads on 2 KV heads of 64
# (key_length 64, H hd 384 != d), RoPE on 16 of the 64 dimensions (base 1e4); Gated
# DeltaNet with 2 key heads and 4 value heads of 32 (Hv != Hk: the tiling is seen), conv
# 4. rope.dimension_sections [1, 2, 2, 0] (qwen35, qwen35moe): interleaved M-RoPE then
# leaves pair 3 of the 8 unrotated for text (sector 3 is a "t" sector beyond 3 x 1),
# which tells it from NEOX and from plain M-RoPE; real files ([11, 11, 10, 0] over 32
# pairs) rotate every pair, as NEOX does.
QWEN35_SHAPE = dict(layers=6, interval=3, heads=6, kv_heads=2, head_dim=64, rope_dims=16,
                    sections=[1, 2, 2, 0], ff=512,
                    gdn=dict(k_heads=2, v_heads=4, state=32, conv=4))
MOE_SHAPE = dict(experts=8, used=2, ff=128, shared_ff=256)


def make_qwen35(name, kind, seed=35, arch="qwen35", shape=QWEN35_SHAPE):
    """qwen35 (dense FFN), qwen35moe (MoE with a sigmoid-gated shared expert) and qwen3next
    (the same MoE; fused ssm_ba; NEOX RoPE instead of interleaved M-RoPE; value head h
    reads key head h / (Hv / Hk))."""
    layers, heads, kv_heads, hd = (shape[k] for k in ("layers", "heads", "kv_heads", "head_dim"))
    gdn, ff = shape["gdn"], shape["ff"]
    kvs = common_kvs(arch, name, kind, layers, eps=1e-6) + [
        gguf_kv(f"{arch}.feed_forward_length", U32, ff),
        gguf_kv(f"{arch}.attention.head_count", U32, heads),
        gguf_kv(f"{arch}.attention.head_count_kv", U32, kv_heads),
        gguf_kv(f"{arch}.attention.key_length", U32, hd),
        gguf_kv(f"{arch}.attention.value_length", U32, hd),
        gguf_kv(f"{arch}.rope.dimension_count", U32, shape["rope_dims"]),
        gguf_kv(f"{arch}.rope.freq_base", F32V, 10000.0),
        gguf_kv(f"{arch}.full_attention_interval", U32, shape["interval"]),
        gguf_kv(f"{arch}.ssm.conv_kernel", U32, gdn["conv"]),
        gguf_kv(f"{arch}.ssm.state_size", U32, gdn["state"]),
        gguf_kv(f"{arch}.ssm.group_count", U32, gdn["k_heads"]),
        gguf_kv(f"{arch}.ssm.time_step_rank", U32, gdn["v_heads"]),
        gguf_kv(f"{arch}.ssm.inner_size", U32, gdn["v_heads"] * gdn["state"]),
    ]
    if arch != "qwen3next":
        kvs.append(gguf_kv(f"{arch}.rope.dimension_sections", ARRAY, shape["sections"], I32))
    if arch != "qwen35":
        kvs += moe_kvs(arch, MOE_SHAPE)
    w = Weights(seed)
    w.add("token_embd.weight", w.normal((VOCAB, EMBD), 1.0), kind)
    for i in range(layers):
        b = f"blk.{i}."
        w.norm(b + "attn_norm.weight", (EMBD,))
        if (i + 1) % shape["interval"] == 0:
            gated_attention_layer(w, b, EMBD, heads, kv_heads, hd, kind)
        else:
            gdn_layer(w, b, EMBD, gdn, kind, fused_ba=arch == "qwen3next")
        w.norm(b + "post_attention_norm.weight", (EMBD,))
        if arch == "qwen35":
            w.linear(b + "ffn_gate.weight", ff, EMBD, kind)
            w.linear(b + "ffn_up.weight", ff, EMBD, kind)
            w.linear(b + "ffn_down.weight", EMBD, ff, kind)
        else:
            moe(w, b, EMBD, MOE_SHAPE, kind, shared="gated")
    w.norm("output_norm.weight", (EMBD,))
    w.linear("output.weight", VOCAB, EMBD, kind, gain=5.0)
    return kvs, w.tensors


def make_qwen3moe(name, kind, seed=36):
    """qwen3moe (Qwen3-30B-A3B's layout): 4 layers of GQA attention (4 heads on 2 KV heads
    of 64, key_length 64, per-head q/k RMSNorm, NEOX RoPE over the whole head) and a MoE
    FFN behind ffn_norm (softmax over E, top-k, renormalised; no shared expert)."""
    arch, layers, heads, kv_heads, hd = "qwen3moe", 4, 4, 2, 64
    kvs = common_kvs(arch, name, kind, layers) + [
        gguf_kv(f"{arch}.feed_forward_length", U32, 512),
        gguf_kv(f"{arch}.attention.head_count", U32, heads),
        gguf_kv(f"{arch}.attention.head_count_kv", U32, kv_heads),
        gguf_kv(f"{arch}.attention.key_length", U32, hd),
        gguf_kv(f"{arch}.attention.value_length", U32, hd),
        gguf_kv(f"{arch}.rope.freq_base", F32V, 1000000.0),
    ] + moe_kvs(arch, MOE_SHAPE, shared=False)
    w = Weights(seed)
    w.add("token_embd.weight", w.normal((VOCAB, EMBD), 1.0), kind)
    for i in range(layers):
        b = f"blk.{i}."
        w.norm(b + "attn_norm.weight", (EMBD,))
        attention_layer(w, b, EMBD, heads, kv_heads, hd, kind, qk_norm=True)
        w.norm(b + "ffn_norm.weight", (EMBD,))
        moe(w, b, EMBD, MOE_SHAPE, kind)
    w.norm("output_norm.weight", (EMBD,))
    w.linear("output.weight", VOCAB, EMBD, kind, gain=5.0)
    return kvs, w.tensors


def make_lfm2moe(name, kind, seed=48):
    """lfm2moe (LFM2-8B-A1B's layout): make_lfm2's layers, the first
    (leading_dense_block_count 1) with a dense SwiGLU MLP, the rest with a MoE FFN routed
    by sigmoid scores plus the selection bias exp_probs_b (expert_gating_func 2); output
    tied."""
    layers, heads, kv_heads, head_dim, ff, l_cache = 6, 8, 2, 32, 512, 3
    arch = "lfm2moe"
    kvs = common_kvs(arch, name, kind, layers) + [
        gguf_kv(f"{arch}.feed_forward_length", U32, ff),
        gguf_kv(f"{arch}.attention.head_count", U32, heads),
        gguf_kv(f"{arch}.attention.head_count_kv", ARRAY,
                [kv_heads if i in LFM2_ATTN else 0 for i in range(layers)], I32),
        gguf_kv(f"{arch}.rope.freq_base", F32V, 1000000.0),
        gguf_kv(f"{arch}.shortconv.l_cache", U32, l_cache),
        gguf_kv(f"{arch}.leading_dense_block_count", U32, 1),
        gguf_kv(f"{arch}.expert_gating_func", U32, 2),
    ] + moe_kvs(arch, MOE_SHAPE, shared=False)
    w = Weights(seed)
    w.add("token_embd.weight", w.normal((VOCAB, EMBD), 0.3), kind)
    for i in range(layers):
        b = f"blk.{i}."
        w.norm(b + "attn_norm.weight", (EMBD,))
        if i in LFM2_ATTN:
            attention_layer(w, b, EMBD, heads, kv_heads, head_dim, kind, qk_norm=True)
        else:
            w.add(b + "shortconv.conv.weight", w.uniform((EMBD, l_cache), -1.0, 1.0))
            w.linear(b + "shortconv.in_proj.weight", 3 * EMBD, EMBD, kind, gain=1.5)
            w.linear(b + "shortconv.out_proj.weight", EMBD, EMBD, kind)
        if i == 0:
            mlp(w, b, EMBD, ff, kind)
        else:
            w.norm(b + "ffn_norm.weight", (EMBD,))
            moe(w, b, EMBD, MOE_SHAPE, kind, bias=True)
    w.norm("token_embd_norm.weight", (EMBD,))
    return kvs, w.tensors


def make_granitehybrid_moe(name, kind, seed=38, shape=GRANITE_TEST):
    """granitehybrid with experts (Granite-4.0-H-Tiny's layout): make_granitehybrid's
    layers with a MoE FFN (softmax, top-k, renormalised; the experts' size is
    feed_forward_length) and an ungated shared expert (expert_shared_feed_forward_length)."""
    layers, heads, kv_heads, head_dim = (shape[k] for k in ("layers", "heads", "kv_heads", "head_dim"))
    embd, vocab, attn, ssm = shape["embd"], shape["vocab"], shape["attn"], shape["ssm"]
    arch = "granitehybrid"
    kvs = common_kvs(arch, name, kind, layers, embd, vocab, shape["context"]) + ssm_kvs(arch, ssm) + [
        gguf_kv(f"{arch}.feed_forward_length", U32, MOE_SHAPE["ff"]),
        gguf_kv(f"{arch}.attention.head_count", U32, heads),
        gguf_kv(f"{arch}.attention.head_count_kv", ARRAY,
                [kv_heads if i in attn else 0 for i in range(layers)], I32),
        gguf_kv(f"{arch}.rope.scaling.finetuned", BOOL, False),
        gguf_kv(f"{arch}.rope.freq_base", F32V, 10000.0),
        gguf_kv(f"{arch}.embedding_scale", F32V, 8.0),
        gguf_kv(f"{arch}.residual_scale", F32V, 0.5),
        gguf_kv(f"{arch}.logit_scale", F32V, 2.0),
        gguf_kv(f"{arch}.attention.scale", F32V, 0.125),
        gguf_kv(f"{arch}.expert_count", U32, MOE_SHAPE["experts"]),
        gguf_kv(f"{arch}.expert_used_count", U32, MOE_SHAPE["used"]),
        gguf_kv(f"{arch}.expert_shared_feed_forward_length", U32, MOE_SHAPE["shared_ff"]),
    ]
    w = Weights(seed)
    w.add("token_embd.weight", w.normal((vocab, embd), 1.0 / 8.0), kind)
    for i in range(layers):
        b = f"blk.{i}."
        w.norm(b + "attn_norm.weight", (embd,))
        if i in attn:
            attention_layer(w, b, embd, heads, kv_heads, head_dim, kind, qk_norm=False)
        else:
            mamba2_layer(w, b, embd, ssm, kind)
        w.norm(b + "ffn_norm.weight", (embd,))
        moe(w, b, embd, MOE_SHAPE, kind, shared="plain")
    w.norm("output_norm.weight", (embd,))
    w.linear("output.weight", vocab, embd, kind, gain=10.0)
    return kvs, w.tensors


def make_llama_moe(name, kind, seed=57):
    """llama with experts (Mixtral's layout): 4 layers of GQA attention (8 heads on 2 KV
    heads of 32, NORM RoPE: adjacent pairs) and a MoE FFN behind ffn_norm (softmax,
    top 2 of 8, renormalised; the experts' size is feed_forward_length)."""
    arch, layers, heads, kv_heads, hd = "llama", 4, 8, 2, 32
    kvs = common_kvs(arch, name, kind, layers) + [
        gguf_kv(f"{arch}.feed_forward_length", U32, MOE_SHAPE["ff"]),
        gguf_kv(f"{arch}.attention.head_count", U32, heads),
        gguf_kv(f"{arch}.attention.head_count_kv", U32, kv_heads),
        gguf_kv(f"{arch}.rope.dimension_count", U32, hd),
        gguf_kv(f"{arch}.rope.freq_base", F32V, 10000.0),
        gguf_kv(f"{arch}.expert_count", U32, MOE_SHAPE["experts"]),
        gguf_kv(f"{arch}.expert_used_count", U32, MOE_SHAPE["used"]),
    ]
    w = Weights(seed)
    w.add("token_embd.weight", w.normal((VOCAB, EMBD), 1.0), kind)
    for i in range(layers):
        b = f"blk.{i}."
        w.norm(b + "attn_norm.weight", (EMBD,))
        # q and k at gain 1: at attention_layer's 2 (and no q/k norm) the scores are so
        # sharp that single F16 roundings of the KV cache move the logits by ~1e-3 of
        # their spread
        w.linear(b + "attn_q.weight", heads * hd, EMBD, kind)
        w.linear(b + "attn_k.weight", kv_heads * hd, EMBD, kind)
        w.linear(b + "attn_v.weight", kv_heads * hd, EMBD, kind)
        w.linear(b + "attn_output.weight", EMBD, heads * hd, kind)
        w.norm(b + "ffn_norm.weight", (EMBD,))
        moe(w, b, EMBD, MOE_SHAPE, kind)
    w.norm("output_norm.weight", (EMBD,))
    w.linear("output.weight", VOCAB, EMBD, kind, gain=5.0)
    return kvs, w.tensors


MAKERS = {"nemotron_h": make_nemotron_h, "mamba2": make_mamba2, "granitehybrid": make_granitehybrid,
          "granitehybrid-rope": lambda name, kind: make_granitehybrid(name, kind, rope=True),
          "lfm2": make_lfm2, "qwen35": make_qwen35,
          "qwen35moe": lambda name, kind: make_qwen35(name, kind, seed=54, arch="qwen35moe"),
          "qwen3next": lambda name, kind: make_qwen35(name, kind, seed=41, arch="qwen3next"),
          "qwen3moe": make_qwen3moe, "lfm2moe": make_lfm2moe,
          "granitehybrid-moe": make_granitehybrid_moe, "llama-moe": make_llama_moe}


# The benchmark's files (--bench): name -> (architecture, type, shape).
BENCH = {"granitehybrid-bench-q8_0": ("granitehybrid", Q8_0, GRANITE_BENCH)}
BENCH_CHAT_TEMPLATE = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
                       "{{ message['content'] }}<|im_end|>\n{% endfor %}"
                       "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def encode_q8_0_fast(encode):
    """make_gguf's tensor encoder with Q8_0 through ggml_blocks' vectorised quantizer (the
    same blocks; make_gguf's loops over them in Python, minutes at 158M parameters)."""
    import ggml_blocks

    def encoded(t, kind):
        if kind == Q8_0:
            x = t.contiguous().to(torch.float32).numpy()
            return ggml_blocks.quantize(ggml_blocks.Q8_0, x.reshape(-1, x.shape[-1])).tobytes()
        return encode(t, kind)
    return encoded


def favour_whole_words(tensors, gpt2_dir):
    """Scales output.weight's rows of every token that is not a whole word (a space, then
    ASCII letters: GPT-2's "Ġword") by 0.25, so that greedy answers are mostly runs of
    whole words. A random head picks random tokens, and a random token sequence rarely
    encodes back to itself (" wor" then "ding" reads back as " wording"), so a chat
    client resending the answer as text would never match the ids the model generated (a
    trained model's answers mostly do); whole words after whole words always do."""
    with open(os.path.join(gpt2_dir, "encoder.json"), encoding="utf-8") as f:
        encoder = json.load(f)
    word = re.compile(r"^\u0120[A-Za-z]+$")
    scale = torch.full((len(encoder),), 0.25)
    for token, i in encoder.items():
        if word.match(token):
            scale[i] = 1.0
    for name, t, _ in tensors:
        if name == "output.weight":
            t.mul_(scale[:, None])


def main_bench(out, names):
    import make_quant_gguf
    os.makedirs(out, exist_ok=True)
    make_gguf.encode_tensor = encode_q8_0_fast(make_gguf.encode_tensor)
    for name in names or list(BENCH):
        arch, kind, shape = BENCH[name]
        path = os.path.join(out, name + ".gguf")
        if os.path.exists(path):
            print(f"make_hybrid_gguf: {name}.gguf: kept ({os.path.getsize(path)} bytes)")
            continue
        kvs, tensors = make_granitehybrid(name, kind, shape=shape)
        favour_whole_words(tensors, make_quant_gguf.GPT2_DIR)
        vocab = make_quant_gguf.gpt2_vocab(shape["vocab"])
        kvs += [gguf_kv("tokenizer.chat_template", STRING, BENCH_CHAT_TEMPLATE)]
        write_gguf(path, kvs + vocab, tensors)
        params = sum(t.numel() for _, t, _ in tensors)
        print(f"make_hybrid_gguf: {name}.gguf: {arch}, {TYPE_NAMES[kind]}, {len(tensors)} tensors, "
              f"{params / 1e6:.1f}M parameters, {os.path.getsize(path)} bytes", flush=True)


# The chat files (--chat; tests/openai/sdk_test.sh): the test shapes with a ChatML
# template and a vocabulary of bytes, so that an answer a client resends as text encodes
# back to the ids the model generated (the prefix cache keeps states by ids). Their merge
# list is two pairs of bytes no text of the tests holds (a gpt2 vocabulary needs merges,
# attnserve at least 259 tokens), and
# the output head scales every row but ASCII letters' and the space's by 0.1 (for lfm2,
# the tied embedding's), so greedy answers are runs of letters: bytes that are not UTF-8
# alone would not read back as themselves.
CHAT_VOCAB = 259  # 256 bytes, the two merges, <|endoftext|>
CHAT_SHAPE = dict(GRANITE_TEST, vocab=CHAT_VOCAB)


def make_lfm2_chat(name):
    """make_lfm2's file with sharper attention (q/k norm gains x2, attn_output x3): as
    drawn, its short convolutions decide the answer and the history before the last
    message hardly changes it, so a state carried wrongly across turns would go unseen."""
    kvs, tensors = make_lfm2(name, F32, vocab=CHAT_VOCAB)
    for n, t, _ in tensors:
        if n.endswith(("attn_q_norm.weight", "attn_k_norm.weight")):
            t.mul_(2.0)
        elif n.endswith("attn_output.weight"):
            t.mul_(3.0)
    return kvs, tensors


CHAT = {"granitehybrid-chat-f32": lambda name: make_granitehybrid(name, F32, shape=CHAT_SHAPE),
        "lfm2-chat-f32": make_lfm2_chat}


def byte_vocab():
    sym = byte_symbols()
    merges = [(sym[1], sym[2]), (sym[3], sym[4])]
    tokens = [sym[b] for b in range(256)] + [a + b for a, b in merges] + ["<|endoftext|>"]
    eos = CHAT_VOCAB - 1
    return [
        gguf_kv("tokenizer.ggml.model", STRING, "gpt2"),
        gguf_kv("tokenizer.ggml.pre", STRING, "gpt-2"),
        gguf_kv("tokenizer.ggml.tokens", ARRAY, tokens, STRING),
        gguf_kv("tokenizer.ggml.token_type", ARRAY, [1] * (CHAT_VOCAB - 1) + [3], I32),
        gguf_kv("tokenizer.ggml.merges", ARRAY, [f"{a} {b}" for a, b in merges], STRING),
        gguf_kv("tokenizer.ggml.bos_token_id", U32, eos),
        gguf_kv("tokenizer.ggml.eos_token_id", U32, eos),
        gguf_kv("tokenizer.ggml.add_bos_token", BOOL, True),
        gguf_kv("tokenizer.chat_template", STRING, BENCH_CHAT_TEMPLATE),
    ]


def favour_letters(tensors):
    """Scales the head's rows (output.weight, or the tied token_embd.weight) of every token
    but the bytes of ASCII letters and the space by 0.1."""
    keep = [b for b in range(256) if chr(b).isascii() and (chr(b).isalpha() or b == 32)]
    head = "output.weight" if any(n == "output.weight" for n, _, _ in tensors) else "token_embd.weight"
    scale = torch.full((CHAT_VOCAB,), 0.1)
    scale[keep] = 1.0
    for name, t, _ in tensors:
        if name == head:
            t.mul_(scale[:, None])


def main_chat(out, names):
    os.makedirs(out, exist_ok=True)
    for name in names or list(CHAT):
        kvs, tensors = CHAT[name](name)
        favour_letters(tensors)
        path = os.path.join(out, name + ".gguf")
        write_gguf(path, kvs + byte_vocab(), tensors)
        print(f"make_hybrid_gguf: {name}.gguf: {len(tensors)} tensors, {os.path.getsize(path)} bytes")


def write_variants(tool, suffix, transform, argv):
    """For the companion writers of other layouts of the same weights (moe_merged_gguf.py,
    qwen35_legacy_gguf.py): argv is OUT_DIR NAME...; each FILES name is made as here, its
    tensors passed through transform(arch, name, tensors), and written as
    OUT_DIR/NAME-SUFFIX.gguf."""
    out = argv[0]
    os.makedirs(out, exist_ok=True)
    vocab = gpt2_vocab()
    for name in argv[1:]:
        arch, kind = FILES[name]
        kvs, tensors = MAKERS[arch](name, kind)
        tensors = transform(arch, name, tensors)
        file = f"{name}-{suffix}.gguf"
        path = os.path.join(out, file)
        write_gguf(path, kvs + vocab, tensors)
        print(f"{tool}: {file}: {arch}, {TYPE_NAMES[kind]}, {len(tensors)} tensors, "
              f"{os.path.getsize(path)} bytes")


def main():
    if sys.argv[1] == "--bench":
        return main_bench(sys.argv[2], sys.argv[3:])
    if sys.argv[1] == "--chat":
        return main_chat(sys.argv[2], sys.argv[3:])
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    vocab = gpt2_vocab()
    names = sys.argv[2:] or list(FILES)
    for name in names:
        arch, kind = {**FILES, **NAMED_ONLY}[name]
        kvs, tensors = MAKERS[arch](name, kind)
        path = os.path.join(out, name + ".gguf")
        write_gguf(path, kvs + vocab, tensors)
        print(f"make_hybrid_gguf: {name}.gguf: {arch}, {TYPE_NAMES[kind]}, "
              f"{len(tensors)} tensors, {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
