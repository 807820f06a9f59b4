#!/usr/bin/python3
"""The oracle attnserve is held to for models trained elsewhere (tests/README.md, "tests/hf").

A small Llama written in plain PyTorch the way a researcher would (no transformers
library, Hugging Face's parameter names and its LlamaRotaryEmbedding / apply_rotary_pos_emb
/ repeat_kv / eager attention, RMSNorm, SwiGLU), plus the paper's Taylor attention of
order 2 written from its formula: key j weighs T_2(q_i . k_j / sqrt(d)) = 1 + x + x^2/2 for
query i, normalised by the causal row sum (the quadratic form, not a recurrent one). The
same classes are Hugging Face's Qwen2 and Qwen3 by config.json's model_type, as its
modeling_qwen2.py / modeling_qwen3.py differ from Llama's: Qwen2's q/k/v projections have
biases; Qwen3 puts an RMSNorm over each head's head_dim values of q and k before RoPE.

It trains a SentencePiece vocabulary with Debian's spm_train on the KJV text (`bible`),
trains five variants a few hundred steps each on that text, and writes each as the
directory Hugging Face's save_pretrained writes (config.json, safetensors by the small
writer below, tokenizer.model, tokenizer_config.json):

  gqa_tied         4 query heads, 2 KV heads, tied head (no lm_head.weight), softmax, BPE
  gqa_tied_bf16    the same weights rounded to bf16, stored as BF16
  mha              untied, 4 heads of head_dim 32 (hidden 64 != 4 x 32), softmax, BPE
  mha_sharded      the same weights as model.safetensors.index.json + 2 shards
  taylor2          taylor order 2 ("attention": {"module": "taylor", "order": 2}),
                   4 query heads, 2 KV heads, untied, prefill chunks of 8, unigram
  qwen2            model_type qwen2 (Qwen2Config's keys, sliding_window 4096 with
                   use_sliding_window false): q/k/v biases, 4 query heads on 2 KV heads,
                   untied, BPE
  qwen2_f16        the same weights rounded to fp16, every tensor stored as F16
                   (qwen2's reference also holds the logits of its weights rounded as
                   ggml's Q8_0 rounds them: logits_full_q8_0)
  qwen3            model_type qwen3 (Qwen3Config's keys): q_norm / k_norm, head_dim 32 on
                   hidden 64 (not 64 / 4), 4 query heads on 2 KV heads, tied, BPE

and, for each, what PyTorch computes (OUT/reference/NAME/): reference.json (the fixed
text, its ids from python3-sentencepiece with BOS, a greedy continuation of 40 tokens by
full recomputation: ids, pieces, text, top-1 margins) and reference.safetensors (fp32
logits for every position of the text, and of text + continuation). The bf16 and f16
directories' references are computed with the rounded weights in fp32 arithmetic. The
Qwen directories' reference.json also says how far the logits move without the family's
own part ("ablated": biases zeroed, q/k norms skipped).

Usage: /usr/bin/python3 make_reference.py OUT [--reuse] [--steps N] (--help for all)
Debian's python3-torch (1.13) and python3-sentencepiece; deterministic (seeds, one
thread): two runs write the same bytes.
"""
import argparse
import copy
import hashlib
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import time

import sentencepiece as spm
import torch
import torch.nn as nn
import torch.nn.functional as F

FIXED_TEXT = "In the beginning God created the heaven and the earth. Café ☕"
GREEDY_TOKENS = 40
KJV_BOOKS = "Gen1:1-Exo40:38"  # Genesis and Exodus: ~2,700 verses, ~350 KB
BOS_ID, EOS_ID = 1, 2  # spm_train's defaults, Llama's ids


# ---- the model ------------------------------------------------------------------------

class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):  # (B, T, hidden) -> same
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class LlamaRotaryEmbedding(nn.Module):
    """Hugging Face's default rope: inv_freq in fp32, angles = positions x inv_freq in
    fp32, cos/sin of cat(freqs, freqs)."""

    def __init__(self, head_dim, base):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float()
                                   / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x, position_ids):  # position_ids (B, T) -> cos, sin (B, T, D)
        inv_freq_expanded = self.inv_freq[None, :, None].float().expand(
            position_ids.shape[0], -1, 1)
        position_ids_expanded = position_ids[:, None, :].float()
        freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    # q (B, H, T, D), k (B, Hkv, T, D); cos, sin (B, T, D)
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


def repeat_kv(hidden_states, n_rep):
    """(B, Hkv, T, D) -> (B, Hkv * n_rep, T, D): query head h reads KV head h // n_rep."""
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(
        batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


def softmax_attention(query, key, value, scaling):
    """Hugging Face's eager attention. (B, H, T, D) x 3 -> (B, H, T, D)."""
    t = query.shape[2]
    attn_weights = torch.matmul(query, key.transpose(2, 3)) * scaling
    causal_mask = torch.full((t, t), float("-inf")).triu(1)
    attn_weights = attn_weights + causal_mask
    attn_weights = F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    return torch.matmul(attn_weights, value)


def taylor2_attention(query, key, value, scaling):
    """The paper's order-2 Taylor attention, quadratic form: A_ij = T_2(s_ij) with
    s_ij = q_i . k_j / sqrt(d) for j <= i, else 0; o_i = sum_j A_ij v_j / sum_j A_ij.
    (B, H, T, D) x 3 -> (B, H, T, D)."""
    t = query.shape[2]
    s = torch.matmul(query, key.transpose(2, 3)) * scaling
    a = 1 + s + s * s / 2  # T_2(s) = ((s + 1)^2 + 1) / 2 > 0
    a = a * torch.ones(t, t).tril()
    return torch.matmul(a, value) / a.sum(-1, keepdim=True)


def head_dim_of(cfg):
    """Hugging Face's getattr(config, "head_dim", hidden_size // num_attention_heads)."""
    return cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]


class LlamaAttention(nn.Module):
    """LlamaAttention, and by model_type the two Qwen attentions, which differ from it only
    in these (modeling_qwen2.py, modeling_qwen3.py):
      llama  q/k/v/o projections with bias = config.attention_bias
      qwen2  q/k/v projections always with bias, o_proj without
      qwen3  as llama, plus q_norm and k_norm: an RMSNorm (weight of head_dim, eps
             rms_norm_eps) over each head's head_dim values of q and of k, after the
             projection's view to heads and before RoPE."""

    def __init__(self, cfg):
        super().__init__()
        family = cfg.get("model_type", "llama")
        self.head_dim = head_dim_of(cfg)
        self.num_heads = cfg["num_attention_heads"]
        self.num_key_value_heads = cfg["num_key_value_heads"]
        self.num_key_value_groups = self.num_heads // self.num_key_value_heads
        self.scaling = self.head_dim ** -0.5
        self.module = cfg.get("attention", {"module": "softmax"})["module"]
        hidden = cfg["hidden_size"]
        bias = cfg.get("attention_bias", False)
        qkv_bias = True if family == "qwen2" else bias
        o_bias = False if family == "qwen2" else bias
        self.q_proj = nn.Linear(hidden, self.num_heads * self.head_dim, bias=qkv_bias)
        self.k_proj = nn.Linear(hidden, self.num_key_value_heads * self.head_dim, bias=qkv_bias)
        self.v_proj = nn.Linear(hidden, self.num_key_value_heads * self.head_dim, bias=qkv_bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, hidden, bias=o_bias)
        self.qk_norm = family == "qwen3"
        if self.qk_norm:
            self.q_norm = LlamaRMSNorm(self.head_dim, cfg["rms_norm_eps"])
            self.k_norm = LlamaRMSNorm(self.head_dim, cfg["rms_norm_eps"])

    def forward(self, hidden_states, cos, sin):  # (B, T, hidden) -> (B, T, hidden)
        b, t, _ = hidden_states.shape
        q = self.q_proj(hidden_states).view(b, t, -1, self.head_dim)  # (B, T, H, D)
        k = self.k_proj(hidden_states).view(b, t, -1, self.head_dim)  # (B, T, Hkv, D)
        if self.qk_norm:  # each (b, t, head) row of D values on its own
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        v = self.v_proj(hidden_states).view(b, t, -1, self.head_dim).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        k = repeat_kv(k, self.num_key_value_groups)
        v = repeat_kv(v, self.num_key_value_groups)
        attend = taylor2_attention if self.module == "taylor" else softmax_attention
        out = attend(q, k, v, self.scaling)  # (B, H, T, D)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class LlamaMLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        hidden, inter = cfg["hidden_size"], cfg["intermediate_size"]
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.self_attn = LlamaAttention(cfg)
        self.mlp = LlamaMLP(cfg)
        self.input_layernorm = LlamaRMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        self.post_attention_layernorm = LlamaRMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = nn.ModuleList(LlamaDecoderLayer(cfg)
                                    for _ in range(cfg["num_hidden_layers"]))
        self.norm = LlamaRMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        self.rotary_emb = LlamaRotaryEmbedding(head_dim_of(cfg), cfg["rope_theta"])

    def forward(self, input_ids):  # (B, T) -> (B, T, hidden)
        x = self.embed_tokens(input_ids)
        position_ids = torch.arange(input_ids.shape[1]).unsqueeze(0).expand(
            input_ids.shape[0], -1)
        cos, sin = self.rotary_emb(x, position_ids)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.norm(x)


class LlamaForCausalLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.model = LlamaModel(cfg)
        self.lm_head = nn.Linear(cfg["hidden_size"], cfg["vocab_size"], bias=False)
        if cfg["tie_word_embeddings"]:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module):  # Hugging Face's, initializer_range 0.02
        if isinstance(module, (nn.Linear, nn.Embedding)):
            module.weight.data.normal_(mean=0.0, std=0.02)
        # Hugging Face zeros the biases; these start at N(0, 0.5) so that the trained
        # model's q/k/v biases are far from zero (as in released Qwen2 checkpoints) and a
        # server that dropped them could not pass.
        if isinstance(module, nn.Linear) and module.bias is not None:
            module.bias.data.normal_(mean=0.0, std=0.5)

    def forward(self, input_ids):  # (B, T) -> logits (B, T, V) fp32
        return self.lm_head(self.model(input_ids)).float()

    def weights(self, tied):
        """The tensors save_pretrained writes: state_dict without the rope buffer and,
        when tied, without lm_head.weight."""
        sd = {k: v.detach().contiguous() for k, v in self.state_dict().items()}
        if tied:
            del sd["lm_head.weight"]
        return sd


# ---- safetensors ----------------------------------------------------------------------

DTYPES = {torch.float32: ("F32", 4), torch.bfloat16: ("BF16", 2), torch.float16: ("F16", 2)}


def tensor_bytes(t):
    if t.dtype == torch.bfloat16:  # numpy has no bf16: its bit pattern as int16
        t = t.view(torch.int16)
    assert sys.byteorder == "little"  # safetensors is little-endian
    return t.contiguous().numpy().tobytes()


def write_safetensors(path, tensors, metadata=None):
    """The layout the reference writer (huggingface/safetensors) produces: u64 LE header
    length N, N bytes of compact JSON {"__metadata__": {...}, name: {"dtype", "shape",
    "data_offsets": [begin, end)}} padded with spaces so the buffer starts 8-aligned, then
    the buffer: tensors by descending dtype alignment, then name."""
    order = sorted(tensors, key=lambda n: (-DTYPES[tensors[n].dtype][1], n))
    header, offset, blobs = {}, 0, []
    if metadata:
        header["__metadata__"] = metadata
    for name in order:
        t = tensors[name]
        data = tensor_bytes(t)
        assert len(data) == t.numel() * DTYPES[t.dtype][1]
        header[name] = {"dtype": DTYPES[t.dtype][0], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for data in blobs:
            f.write(data)
    return offset


def read_safetensors(path):
    """Reads back what write_safetensors wrote, checking what the reference reader checks:
    header at most 100 MB, offsets contiguous from 0, sizes = numel x dtype size, nothing
    after the last tensor."""
    names = {v[0]: (k, v[1]) for k, v in DTYPES.items()}
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    assert n <= 100 << 20 and (8 + n) % 8 == 0, n
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    buffer, end, out = data[8 + n:], 0, {}
    for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"]):
        dtype, size = names[info["dtype"]]
        begin, stop = info["data_offsets"]
        assert begin == end and stop - begin == math.prod(info["shape"]) * size, name
        raw = bytearray(buffer[begin:stop])
        t = torch.frombuffer(raw, dtype=torch.int16 if dtype == torch.bfloat16 else dtype)
        out[name] = (t.view(torch.bfloat16) if dtype == torch.bfloat16 else t).view(
            info["shape"])
        end = stop
    assert end == len(buffer), (end, len(buffer))
    return out


# ---- data -----------------------------------------------------------------------------

def kjv_verses(books):
    out = subprocess.run(["bible", "-f", books], check=True, capture_output=True,
                         text=True).stdout
    verses = []
    for line in out.splitlines():
        ref, _, text = line.partition(" ")  # "Ge1:1 In the beginning ..."
        if text.strip():
            verses.append(text.strip())
    return verses


def train_tokenizer(verses, work, model_type, vocab_size):
    corpus = os.path.join(work, "kjv.txt")
    with open(corpus, "w") as f:
        f.write("\n".join(verses) + "\n")
    prefix = f"spm_{model_type}"
    # Llama-2's settings: byte fallback, digits split, identity normaliser, whitespace kept.
    # Relative paths (the model records its training options) keep the bytes independent
    # of OUT.
    subprocess.run(["spm_train", "--input=kjv.txt", f"--model_prefix={prefix}",
                    f"--model_type={model_type}", f"--vocab_size={vocab_size}",
                    "--byte_fallback=true", "--split_digits=true",
                    "--normalization_rule_name=identity", "--remove_extra_whitespaces=false",
                    "--add_dummy_prefix=true", "--allow_whitespace_only_pieces=true",
                    "--character_coverage=1.0", "--num_threads=1", "--random_seed=1",
                    f"--unk_id=0", f"--bos_id={BOS_ID}", f"--eos_id={EOS_ID}", "--pad_id=-1",
                    "--minloglevel=2"], check=True, capture_output=True, cwd=work)
    return os.path.join(work, prefix + ".model")


# ---- training and the recorded outputs ------------------------------------------------

def train(model, stream, steps, seq, batch, seed, label, peak_lr):
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=peak_lr, betas=(0.9, 0.95),
                            weight_decay=0.1)
    warmup = 20
    t0, loss = time.time(), None
    for step in range(steps):
        lr = peak_lr * min(1.0, (step + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * step / steps))
        for group in opt.param_groups:
            group["lr"] = lr
        starts = torch.randint(0, len(stream) - seq, (batch,), generator=g)
        # [BOS] + seq tokens of running text: the model sees BOS at position 0 as it
        # will at a session's start.
        x = torch.stack([torch.cat([torch.tensor([BOS_ID]), stream[s:s + seq]])
                         for s in starts.tolist()])
        logits = model(x[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0 or step == steps - 1:
            print(f"  {label}: step {step:4d} loss {loss.item():.4f} "
                  f"({time.time() - t0:.1f} s)", flush=True)
    seconds = time.time() - t0
    return eval_loss(model, stream, seq), seconds


@torch.no_grad()
def eval_loss(model, stream, seq, windows=32):
    """Mean next-token loss over `windows` fixed windows spread over the text (the same
    for every variant with the same tokenizer)."""
    model.eval()
    starts = torch.linspace(0, len(stream) - seq - 1, windows).long().tolist()
    x = torch.stack([torch.cat([torch.tensor([BOS_ID]), stream[s:s + seq]]) for s in starts])
    logits = model(x[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
    model.train()
    return loss.item()


def piece_bytes(sp, i):
    """The bytes token i stands for inside a text: byte pieces their byte, control
    tokens nothing, others the piece with "▁" as a space."""
    if sp.is_byte(i):
        return bytes([int(sp.id_to_piece(i)[3:5], 16)])  # "<0xE2>"
    if sp.is_control(i) or sp.is_unknown(i):
        return b""
    return sp.id_to_piece(i).replace("\u2581", " ").encode()


@torch.no_grad()
def record(model, sp, out_dir, name, vocab_size):
    """Ids of FIXED_TEXT (BOS first), the greedy continuation by full recomputation, the
    logits of both."""
    model.eval()
    prompt = [BOS_ID] + sp.encode(FIXED_TEXT)
    ids, margins, stopped_at_eos = list(prompt), [], False
    for _ in range(GREEDY_TOKENS):
        last = model(torch.tensor([ids]))[0, -1]  # (V,)
        top = torch.topk(last, 2)
        margins.append(float(top.values[0] - top.values[1]))
        ids.append(int(top.indices[0]))
        if ids[-1] == EOS_ID:
            stopped_at_eos = True
            break
    continuation = ids[len(prompt):]
    logits_prompt = model(torch.tensor([prompt]))[0].contiguous()  # (T, V)
    logits_full = model(torch.tensor([ids]))[0].contiguous()  # (T + n, V)
    assert logits_prompt.shape == (len(prompt), vocab_size)
    os.makedirs(out_dir, exist_ok=True)
    write_safetensors(os.path.join(out_dir, "reference.safetensors"),
                      {"logits": logits_prompt, "logits_full": logits_full})
    full_text = sp.decode(ids[1:])
    prompt_text = sp.decode(prompt[1:])
    assert full_text.startswith(prompt_text)
    cont_bytes = b"".join(piece_bytes(sp, i) for i in continuation)
    if not any(sp.is_byte(i) for i in continuation):
        assert cont_bytes.decode() == full_text[len(prompt_text):]
    ref = {
        "model": name,
        "text": FIXED_TEXT,
        "ids": prompt,
        "pieces": [sp.id_to_piece(i) for i in prompt],
        "decoded": prompt_text,
        "greedy": {
            "max_tokens": GREEDY_TOKENS,
            "ids": continuation,
            "pieces": [sp.id_to_piece(i) for i in continuation],
            # The continuation's text as it follows the prompt (its leading "▁" is a
            # space here) and decoded alone (SentencePiece drops a leading space).
            "text": full_text[len(prompt_text):],
            "text_alone": sp.decode(continuation),
            # Its bytes as a stream carries them: each piece's bytes ("▁" a space, <0xNN>
            # that byte, control tokens none), valid UTF-8 or not.
            "bytes_hex": cont_bytes.hex(),
            "stopped_at_eos": stopped_at_eos,
            # top-1 minus top-2 logit at each greedy step: how far from a tie.
            "margins": [round(m, 6) for m in margins],
            "min_margin": round(min(margins), 6),
        },
        "logits": {"file": "reference.safetensors", "prompt": "logits",
                   "full": "logits_full", "dtype": "F32",
                   "shape_prompt": list(logits_prompt.shape),
                   "shape_full": list(logits_full.shape)},
    }
    return ref


def ref_model_ids(ref):
    return ref["ids"] + ref["greedy"]["ids"]


def q8_0_rounded(w):
    """A matrix (out, in) as ggml's Q8_0 holds it (quantize_row_q8_0_ref, then
    dequantize_row_q8_0), in fp32: each row in blocks of 32; per block d = max|x| / 127,
    stored as fp16; q = roundf(x * (1 / d)) (fp32 products, halves away from zero);
    the value q * fp16(d)."""
    x = w.float().reshape(-1, 32)
    d = x.abs().max(dim=1, keepdim=True).values / 127
    inv = torch.where(d > 0, 1 / d, torch.zeros_like(d))
    v = x * inv
    q = torch.sign(v) * torch.floor(v.abs() + 0.5)
    return (q * d.half().float()).reshape(w.shape)


@torch.no_grad()
def ablate(model, ids):
    """How far the logits move without what the Qwen family adds (q/k/v biases zeroed,
    or q/k norms skipped): a server that ignored it would be off by this much."""
    want = model(torch.tensor([ids]))[0]
    ablated = copy.deepcopy(model)
    for layer in ablated.model.layers:
        attn = layer.self_attn
        for proj in (attn.q_proj, attn.k_proj, attn.v_proj):
            if proj.bias is not None:
                proj.bias.zero_()
        attn.qk_norm = False
    what = "q_norm, k_norm" if model.model.layers[0].self_attn.qk_norm else "q/k/v biases"
    diff = (ablated(torch.tensor([ids]))[0] - want).abs().max().item()
    return {"without": what, "max_logit_diff": round(diff, 4)}


@torch.no_grad()
def record_q8_0(cfg, sd, ref, out_dir):
    """What the directory's model computes with every matrix and the embedding rounded to
    Q8_0 (a server's load-time quantization): logits of the text + continuation, added to
    reference.safetensors as logits_full_q8_0."""
    model = LlamaForCausalLM(cfg)
    model.load_state_dict({k: q8_0_rounded(t) if t.dim() == 2 else t for k, t in sd.items()})
    model.eval()
    logits = model(torch.tensor([ref_model_ids(ref)]))[0].contiguous()
    path = os.path.join(out_dir, "reference.safetensors")
    tensors = {k: t.contiguous() for k, t in read_safetensors(path).items()}
    tensors["logits_full_q8_0"] = logits
    write_safetensors(path, tensors)
    fp32 = tensors["logits_full"]
    return {"full": "logits_full_q8_0",
            "max_diff_from_fp32": round((logits - fp32).abs().max().item(), 4)}


def hf_config(name, v, vocab_size):
    if v.get("family", "llama") != "llama":
        return qwen_config(name, v, vocab_size)
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "attention": v["attention"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "head_dim": v["head_dim"],
        "hidden_act": "silu",
        "hidden_size": 64,
        "initializer_range": 0.02,
        "intermediate_size": 192,
        "max_position_embeddings": 2048,
        "mlp_bias": False,
        "model_type": "llama",
        "name": name,
        "num_attention_heads": v["heads"],
        "num_hidden_layers": 2,
        "num_key_value_heads": v["kv_heads"],
        "pretraining_tp": 1,
        "rms_norm_eps": v["eps"],
        "rope_scaling": None,
        "rope_theta": v["theta"],
        "tie_word_embeddings": v["tied"],
        "torch_dtype": "float32",
        "use_cache": True,
        "vocab_size": vocab_size,
    }
    return cfg


def qwen_config(name, v, vocab_size):
    """config.json as Qwen2Config / Qwen3Config's to_json_string writes it (keys sorted,
    defaults included) plus our "name": no "attention" object (softmax, as for any
    checkpoint from elsewhere); Qwen's sliding_window with use_sliding_window false (Qwen2
    as transformers 4.40 wrote it, a number; Qwen3 as 4.51 does, null). Qwen2Config has no
    head_dim nor attention_bias (head_dim is hidden_size / heads; q/k/v biases always)."""
    qwen3 = v["family"] == "qwen3"
    cfg = {
        "architectures": ["Qwen3ForCausalLM" if qwen3 else "Qwen2ForCausalLM"],
        "attention_dropout": 0.0,
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "hidden_act": "silu",
        "hidden_size": 64,
        "initializer_range": 0.02,
        "intermediate_size": 192,
        "max_position_embeddings": 2048,
        "max_window_layers": 2,
        "model_type": v["family"],
        "name": name,
        "num_attention_heads": v["heads"],
        "num_hidden_layers": 2,
        "num_key_value_heads": v["kv_heads"],
        "rms_norm_eps": v["eps"],
        "rope_theta": v["theta"],
        "sliding_window": None if qwen3 else 4096,
        "tie_word_embeddings": v["tied"],
        "torch_dtype": "float32",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": vocab_size,
    }
    if qwen3:
        cfg.update({"attention_bias": False, "head_dim": v["head_dim"], "rope_scaling": None})
    else:
        assert v["head_dim"] == cfg["hidden_size"] // v["heads"]
    return cfg


def write_dir(path, cfg, weights, tokenizer_model, shards=1):
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    meta = {"format": "pt"}
    if shards == 1:
        write_safetensors(os.path.join(path, "model.safetensors"), weights, meta)
    else:
        # Embedding and layer 0 in the first shard, the rest in the second.
        names = sorted(weights)
        first = [n for n in names if n.startswith(("model.embed_tokens.", "model.layers.0."))]
        parts = [first, [n for n in names if n not in first]]
        weight_map, total = {}, 0
        for i, part in enumerate(parts):
            file = f"model-{i + 1:05d}-of-{len(parts):05d}.safetensors"
            total += write_safetensors(os.path.join(path, file),
                                       {n: weights[n] for n in part}, meta)
            weight_map.update({n: file for n in part})
        with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f,
                      indent=2, sort_keys=True)
            f.write("\n")
    stored = {}
    for file in os.listdir(path):
        if file.endswith(".safetensors"):
            stored.update(read_safetensors(os.path.join(path, file)))
    assert sorted(stored) == sorted(weights), path
    for name, t in weights.items():
        assert stored[name].dtype == t.dtype and torch.equal(stored[name], t), name
    shutil.copyfile(tokenizer_model, os.path.join(path, "tokenizer.model"))
    with open(os.path.join(path, "tokenizer_config.json"), "w") as f:
        json.dump({"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>",
                   "clean_up_tokenization_spaces": False, "eos_token": "</s>",
                   "legacy": False, "model_max_length": 2048, "pad_token": None,
                   "sp_model_kwargs": {}, "tokenizer_class": "LlamaTokenizer",
                   "unk_token": "<unk>"}, f, indent=2, sort_keys=True)
        f.write("\n")


VARIANTS = [
    # name, attention, heads, kv_heads, head_dim, tied, eps, theta, tokenizer
    dict(name="gqa_tied", attention={"module": "softmax"}, heads=4, kv_heads=2,
         head_dim=16, tied=True, eps=1e-5, theta=10000.0, tokenizer="bpe", seed=21),
    dict(name="mha", attention={"module": "softmax"}, heads=4, kv_heads=4, head_dim=32,
         tied=False, eps=1e-6, theta=500000.0, tokenizer="bpe", seed=22),
    dict(name="taylor2", attention={"module": "taylor", "order": 2, "chunk_size": 8},
         heads=4, kv_heads=2, head_dim=16, tied=False, eps=1e-5, theta=10000.0,
         tokenizer="unigram", seed=23),
    # Qwen2: q/k/v biases; 4 query heads on 2 KV heads of hidden / heads = 16; untied.
    dict(name="qwen2", family="qwen2", heads=4, kv_heads=2, head_dim=16, tied=False,
         eps=1e-6, theta=1000000.0, tokenizer="bpe", seed=24),
    # Qwen3: per-head q/k RMSNorm; 4 on 2 KV heads of head_dim 32 != hidden / heads; tied.
    dict(name="qwen3", family="qwen3", heads=4, kv_heads=2, head_dim=32, tied=True,
         eps=1e-6, theta=1000000.0, tokenizer="bpe", seed=25),
]
VOCAB = {"bpe": 768, "unigram": 640}
QUANTIZED = "qwen2"  # its reference also has the logits of its Q8_0-rounded weights
# The seeds were picked among a few so that every greedy continuation's top-1 logit leads
# the runner-up by at least 0.01 at every step: a thousand times the float error the
# comparisons allow, so that equal continuations test the model and not rounding luck.


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="output directory (models/ and reference/ inside)")
    parser.add_argument("--steps", type=int, default=300, help="training steps per variant")
    parser.add_argument("--seq", type=int, default=128, help="training sequence length")
    parser.add_argument("--batch", type=int, default=8, help="sequences per step")
    parser.add_argument("--lr", type=float, default=3e-3, help="AdamW's peak learning rate")
    parser.add_argument("--only", default="", help="comma-separated variants (default all)")
    parser.add_argument("--reuse", action="store_true",
                        help="do nothing if OUT was written by this script with these "
                             "arguments (OUT/stamp.json)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    out = os.path.abspath(args.out)
    stamp_path = os.path.join(out, "stamp.json")
    with open(os.path.abspath(__file__), "rb") as f:
        stamp = {"script_sha256": hashlib.sha256(f.read()).hexdigest(), "torch": torch.__version__,
                 "args": {k: v for k, v in vars(args).items() if k not in ("out", "reuse")}}
    if args.reuse and os.path.exists(stamp_path):
        with open(stamp_path) as f:
            if json.load(f) == stamp:
                print(f"{out}: written by this script with these arguments; kept")
                return 0
    if os.path.exists(stamp_path):
        os.remove(stamp_path)
    for sub in ("models", "reference", "work"):
        shutil.rmtree(os.path.join(out, sub), ignore_errors=True)
    work = os.path.join(out, "work")
    os.makedirs(work, exist_ok=True)

    t0 = time.time()
    verses = kjv_verses(KJV_BOOKS)
    tokenizers = {}
    for kind in sorted({v["tokenizer"] for v in VARIANTS}):
        path = train_tokenizer(verses, work, kind, VOCAB[kind])
        sp = spm.SentencePieceProcessor(model_file=path)
        assert sp.bos_id() == BOS_ID and sp.eos_id() == EOS_ID
        assert sp.get_piece_size() == VOCAB[kind], sp.get_piece_size()
        # Running text with single spaces between verses, as SentencePiece sees "a b".
        stream = torch.tensor(sp.encode(" ".join(verses)), dtype=torch.long)
        tokenizers[kind] = (path, sp, stream)
        print(f"spm_train {kind} vocab {VOCAB[kind]}: {len(verses)} verses, "
              f"{len(stream)} tokens ({time.time() - t0:.1f} s)", flush=True)

    summary = {}
    for v in VARIANTS:
        if args.only and v["name"] not in args.only.split(","):
            continue
        path, sp, stream = tokenizers[v["tokenizer"]]
        vocab = VOCAB[v["tokenizer"]]
        name = v["name"]
        cfg = hf_config("hf-" + name.replace("_", "-"), v, vocab)
        torch.manual_seed(v["seed"])
        model = LlamaForCausalLM(cfg)
        loss, seconds = train(model, stream, args.steps, args.seq, args.batch, v["seed"], name,
                              args.lr)
        weights = model.weights(v["tied"])
        dirs = [(name, cfg, weights, 1)]
        if name == "gqa_tied":
            bf16 = {k: t.to(torch.bfloat16) for k, t in weights.items()}
            bcfg = dict(cfg, name=cfg["name"] + "-bf16", torch_dtype="bfloat16")
            dirs.append((name + "_bf16", bcfg, bf16, 1))
        if name == "mha":
            dirs.append((name + "_sharded", dict(cfg, name=cfg["name"] + "-sharded"),
                         weights, 2))
        if name == "qwen2":  # every tensor F16, as save_pretrained of a float16 model
            f16 = {k: t.to(torch.float16) for k, t in weights.items()}
            dirs.append((name + "_f16", dict(cfg, name=cfg["name"] + "-f16",
                                             torch_dtype="float16"), f16, 1))
        for dir_name, dcfg, dweights, shards in dirs:
            write_dir(os.path.join(out, "models", dir_name), dcfg, dweights, path, shards)
            # The oracle runs the weights as stored (bf16 rounded, computed in fp32).
            ref_model = LlamaForCausalLM(dcfg)
            sd = {k: t.float() for k, t in dweights.items()}
            if v["tied"]:
                sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
            ref_model.load_state_dict(sd)
            ref = record(ref_model, sp, os.path.join(out, "reference", dir_name),
                         dcfg["name"], vocab)
            if v.get("family", "llama") != "llama":
                ref["ablated"] = ablate(ref_model, ref_model_ids(ref))
            if dir_name == QUANTIZED:
                ref["q8_0"] = record_q8_0(dcfg, sd, ref, os.path.join(out, "reference", dir_name))
            ref["eval_loss"] = round(loss, 4)  # the trained fp32 weights
            ref["train_steps"] = args.steps
            with open(os.path.join(out, "reference", dir_name, "reference.json"), "w") as f:
                json.dump(ref, f, indent=1, ensure_ascii=False)
                f.write("\n")
            summary[dir_name] = (loss, seconds, ref["greedy"]["text"],
                                 ref["greedy"]["min_margin"])
    print("\nvariant          eval loss  train s  min margin  greedy text")
    for k, (loss, seconds, text, margin) in summary.items():
        print(f"{k:16s} {loss:10.4f} {seconds:8.1f} {margin:11.4f}  {text!r}")
    print(f"total {time.time() - t0:.1f} s; models in {out}/models, "
          f"references in {out}/reference")
    with open(stamp_path, "w") as f:
        json.dump(stamp, f, indent=1)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
