#!/usr/bin/python3
"""The oracle for the recurrent and hybrid Hugging Face layouts (tests/README.md, "tests/hf").

Plain PyTorch forwards of Hugging Face's Mamba2ForCausalLM, GraniteMoeHybridForCausalLM
(dense: shared MLP, no experts) and Lfm2ForCausalLM, written here from the math of their
modelling files (modeling_mamba2.py, modeling_granitemoehybrid.py, modeling_lfm2.py; the
transformers library is not used), on small random-weight models saved as the
directories save_pretrained writes (config.json with the family's keys, model.safetensors
with its tensor names and layouts: conv1d weights (C, 1, K), A_log, D, the gated norm's
(I) weight, Granite's fused shared_mlp.input_linear, LFM2's operator_norm / ffn_norm /
feed_forward.w1 w3 w2 / conv.in_proj (B, C, x) / embedding_norm).

What the files' math says, and this forward computes (float64 throughout):
  Mamba-2 mixer  in_proj -> z | xBC | dt; xBC through the depthwise causal conv1d (bias)
                 and SiLU -> x | B | C; dt = softplus(dt + dt_bias); A = -exp(A_log);
                 per head h: S = exp(dt A) S + dt x B^T, y = S C + D x, computed as the
                 chunked quadratic form (chunks of the config's chunk size: the decay-masked
                 C B^T inside a chunk, the carried state across chunks); then
                 y * silu(z) through an RMSNorm over the whole inner width (Hugging Face's
                 MambaRMSNormGated / GraniteMoeHybridRMSNormGated), out_proj.
  Mamba2 block   x + mixer(RMSNorm(x)); final norm_f; lm_head (no MLP).
  Granite layer  x + m * mixer(RMSNorm(x)), then x + m * shared_mlp(RMSNorm(x)) with
                 m = residual_multiplier; shared_mlp: input_linear -> chunk(2) ->
                 silu(first) * second -> output_linear; attention scaled by
                 attention_multiplier, RoPE only for position_embedding_type "rope";
                 embeddings times embedding_multiplier; logits / logits_scaling.
  LFM2 layer     x + op(operator_norm(x)), then x + w2(silu(w1 h) * w3 h) with
                 h = ffn_norm(x); op: attention with per-head q/k RMSNorm before RoPE and
                 out_proj, or the short conv: in_proj -> B | C | x, C * conv(B * x);
                 embedding_norm last.
  Attention      Hugging Face's rotate-half RoPE (inv_freq = theta^(-2i/d)), grouped KV
                 heads repeated, causal softmax.

Directories (OUT/models/NAME; byte tokenizer: tokenizer_class AttnServeByteTokenizer,
vocab 320, BOS 256, EOS 257), each with OUT/reference/NAME/reference.json (the prompt's ids,
a greedy continuation of 40 tokens by full recomputation, top-1 margins) and
reference.safetensors (fp32 logits of the prompt and of prompt + continuation, and of the
latter with every matrix and the embedding rounded as ggml's Q8_0 rounds them:
logits_full_q8_0), the format make_reference.py writes:

  mamba2             2 Mamba-2 layers (8 heads of 16, state 16, conv 4 with bias), untied,
                     time_step_limit [0.0, Infinity] as Python's json writes it, chunk 16
  granitehybrid      mamba, attention, mamba, attention: GQA 4 query on 2 KV heads, no RoPE
                     (position_embedding_type "nope", as Granite 4.0-H), Granite's four
                     multipliers, conv bias, untied, num_local_experts 0
  granitehybrid_rope the same kinds with RoPE, mamba_conv_bias false (no conv1d.bias),
                     tied, the shared MLP stored as BF16 (input_linear split in 16 bits)
  lfm2               conv, attention, conv, attention: GQA 4 on 2, q/k layernorms,
                     conv_L_cache 3, tie_word_embeddings absent (Lfm2Config's default: tied),
                     the MLP width from intermediate_size by block_auto_adjust_ff_dim

Each model's seed is the first from its base whose greedy run leads by at least 0.02 at
every step (far above the 1e-4 the comparisons allow) and holds at least 8 distinct ids.

Usage: /usr/bin/python3 hybrid_reference.py OUT [--reuse]   (Debian's python3-torch)
"""
import argparse
import hashlib
import importlib.metadata
import json
import math
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="output directory (models/ and reference/ inside)")
    parser.add_argument("--reuse", action="store_true",
                        help="do nothing if OUT was written by this script (OUT/stamp.json)")
    return parser.parse_args()


def stamp():
    """What makes an output this script's: its code, the writer it imports, torch's version
    (read without importing torch, so that a kept output costs no torch start-up)."""
    digest = hashlib.sha256()
    for file in ("hybrid_reference.py", "make_reference.py"):
        with open(os.path.join(HERE, file), "rb") as f:
            digest.update(f.read())
    return {"scripts_sha256": digest.hexdigest(), "torch": importlib.metadata.version("torch")}


if __name__ == "__main__":
    ARGS = parse_args()
    STAMP_PATH = os.path.join(os.path.abspath(ARGS.out), "stamp.json")
    if ARGS.reuse and os.path.exists(STAMP_PATH):
        with open(STAMP_PATH) as f:
            if json.load(f) == stamp():
                print(f"{os.path.abspath(ARGS.out)}: written by this script; kept")
                sys.exit(0)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, HERE)
from make_reference import q8_0_rounded, read_safetensors, write_safetensors  # noqa: E402

FIXED_TEXT = "In the beginning God created the heaven and the earth. Café ☕"
GREEDY_TOKENS = 40
VOCAB, BOS, EOS, PAD = 320, 256, 257, 258
MIN_MARGIN = 0.02
MIN_DISTINCT = 8  # ids in the greedy run: not a token repeated
DT = torch.float64


# ---- the pieces -----------------------------------------------------------------------

def rms_norm(x, weight, eps):
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def linear(x, w):
    return x @ w.t()


def causal_depthwise_conv(x, w, bias):
    """x (T, C), w (C, 1, K): each channel's causal convolution, taps oldest first (what
    nn.Conv1d(groups=C, padding=K-1) gives once cut to T outputs)."""
    t, k = x.shape[0], w.shape[-1]
    y = F.conv1d(x.t().unsqueeze(0), w, bias, padding=k - 1, groups=w.shape[0])
    return y[0, :, :t].t()


def ssd_chunked(x, dt, a, b, c, chunk):
    """The SSM of one sequence: x (T, H, P), dt (T, H) after softplus, a (H) negative,
    b and c (T, H, N) (each head's group). y_t = S_t c_t with S_t = exp(dt_t a) S_{t-1} +
    dt_t x_t b_t^T, computed chunk by chunk: inside a chunk the masked quadratic form,
    across chunks the state."""
    t, h, p = x.shape
    n = b.shape[-1]
    pad = (chunk - t % chunk) % chunk
    def padded(v):
        return torch.cat([v, v.new_zeros((pad,) + tuple(v.shape[1:]))]) if pad else v
    xs, la, b, c = padded(x * dt[..., None]), padded(dt * a), padded(b), padded(c)
    nc = (t + pad) // chunk
    xs = xs.view(nc, chunk, h, p)
    la = la.view(nc, chunk, h)
    b = b.view(nc, chunk, h, n)
    c = c.view(nc, chunk, h, n)
    cum = la.cumsum(dim=1)  # (nc, l, H): log decay from the chunk's start through token i
    causal = torch.tril(torch.ones(chunk, chunk, dtype=torch.bool))[None, :, :, None]
    diff = (cum[:, :, None, :] - cum[:, None, :, :]).masked_fill(~causal, -math.inf)
    scores = torch.einsum("zihn,zjhn->zijh", c, b) * diff.exp()
    y = torch.einsum("zijh,zjhp->zihp", scores, xs)
    state = x.new_zeros(h, p, n)
    for z in range(nc):
        y[z] += cum[z].exp()[..., None] * torch.einsum("ihn,hpn->ihp", c[z], state)
        to_end = (cum[z, -1:] - cum[z]).exp()  # (l, H)
        state = (cum[z, -1].exp()[:, None, None] * state +
                 torch.einsum("lh,lhp,lhn->hpn", to_end, xs[z], b[z]))
    return y.reshape(nc * chunk, h, p)[:t]


def mamba2_mixer(hn, w, pre, cfg):
    """hn (T, hidden) -> (T, hidden); cfg: inner, heads, head_dim, groups, state, chunk, eps."""
    inner, heads, hd = cfg["inner"], cfg["heads"], cfg["head_dim"]
    g, n = cfg["groups"], cfg["state"]
    conv_dim = inner + 2 * g * n
    proj = linear(hn, w[pre + "in_proj.weight"])
    z, xbc, dt = proj.split([inner, conv_dim, heads], dim=-1)
    xbc = F.silu(causal_depthwise_conv(xbc, w[pre + "conv1d.weight"],
                                       w.get(pre + "conv1d.bias")))
    x, b, c = xbc.split([inner, g * n, g * n], dim=-1)
    dt = F.softplus(dt + w[pre + "dt_bias"])
    a = -torch.exp(w[pre + "A_log"])
    t = hn.shape[0]
    per_group = heads // g
    b = b.view(t, g, n).repeat_interleave(per_group, dim=1)
    c = c.view(t, g, n).repeat_interleave(per_group, dim=1)
    x = x.view(t, heads, hd)
    y = ssd_chunked(x, dt, a, b, c, cfg["chunk"]) + w[pre + "D"][:, None] * x
    y = y.reshape(t, inner) * F.silu(z)
    y = rms_norm(y, w[pre + "norm.weight"], cfg["eps"])  # over the whole inner width
    return linear(y, w[pre + "out_proj.weight"])


def rope(x, theta):
    """x (T, heads, d), rotate-half pairs (i, i + d/2)."""
    t, d = x.shape[0], x.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=DT) / d))
    angles = torch.arange(t, dtype=DT)[:, None] * inv_freq[None, :]
    emb = torch.cat([angles, angles], dim=-1)[:, None, :]
    half = torch.cat([-x[..., d // 2:], x[..., :d // 2]], dim=-1)
    return x * emb.cos() + half * emb.sin()


def attention(hn, w, pre, cfg, o_name, qk_norm):
    t = hn.shape[0]
    h, kv, d = cfg["heads"], cfg["kv_heads"], cfg["head_dim"]
    q = linear(hn, w[pre + "q_proj.weight"]).view(t, h, d)
    k = linear(hn, w[pre + "k_proj.weight"]).view(t, kv, d)
    v = linear(hn, w[pre + "v_proj.weight"]).view(t, kv, d)
    if qk_norm:
        q = rms_norm(q, w[pre + "q_layernorm.weight"], cfg["eps"])
        k = rms_norm(k, w[pre + "k_layernorm.weight"], cfg["eps"])
    if cfg["rope"]:
        q, k = rope(q, cfg["theta"]), rope(k, cfg["theta"])
    k = k.repeat_interleave(h // kv, dim=1)
    v = v.repeat_interleave(h // kv, dim=1)
    scores = torch.einsum("ihd,jhd->hij", q, k) * cfg["scaling"]
    mask = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
    probs = scores.masked_fill(mask, -math.inf).softmax(dim=-1)
    o = torch.einsum("hij,jhd->ihd", probs, v).reshape(t, h * d)
    return linear(o, w[pre + o_name])


def short_conv(hn, w, pre):
    bcx = linear(hn, w[pre + "in_proj.weight"])
    b, c, x = bcx.chunk(3, dim=-1)
    return linear(c * causal_depthwise_conv(b * x, w[pre + "conv.weight"], None),
                  w[pre + "out_proj.weight"])


# ---- the three families ---------------------------------------------------------------

def head(x, w, tied, embed_name):
    return linear(x, w[embed_name] if tied else w["lm_head.weight"])


def mamba2_forward(ids, w, hf):
    c = mixer_sizes(hf, "")
    x = w["backbone.embeddings.weight"][ids]
    for i in range(hf["num_hidden_layers"]):
        pre = f"backbone.layers.{i}."
        x = x + mamba2_mixer(rms_norm(x, w[pre + "norm.weight"], c["eps"]), w, pre + "mixer.", c)
    x = rms_norm(x, w["backbone.norm_f.weight"], c["eps"])
    return head(x, w, hf["tie_word_embeddings"], "backbone.embeddings.weight")


def granite_forward(ids, w, hf):
    c = mixer_sizes(hf, "mamba_")
    eps, m = hf["rms_norm_eps"], hf["residual_multiplier"]
    att = dict(heads=hf["num_attention_heads"], kv_heads=hf["num_key_value_heads"],
               head_dim=hf["hidden_size"] // hf["num_attention_heads"], eps=eps,
               rope=hf["position_embedding_type"] == "rope", theta=hf["rope_theta"],
               scaling=hf["attention_multiplier"])
    x = w["model.embed_tokens.weight"][ids] * hf["embedding_multiplier"]
    for i, kind in enumerate(hf["layer_types"]):
        pre = f"model.layers.{i}."
        hn = rms_norm(x, w[pre + "input_layernorm.weight"], eps)
        if kind == "mamba":
            out = mamba2_mixer(hn, w, pre + "mamba.", c)
        else:
            out = attention(hn, w, pre + "self_attn.", att, "o_proj.weight", qk_norm=False)
        x = x + out * m
        hn = rms_norm(x, w[pre + "post_attention_layernorm.weight"], eps)
        gate, up = linear(hn, w[pre + "shared_mlp.input_linear.weight"]).chunk(2, dim=-1)
        x = x + linear(F.silu(gate) * up, w[pre + "shared_mlp.output_linear.weight"]) * m
    x = rms_norm(x, w["model.norm.weight"], eps)
    return head(x, w, hf["tie_word_embeddings"], "model.embed_tokens.weight") / \
        hf["logits_scaling"]


def lfm2_forward(ids, w, hf):
    eps = hf["norm_eps"]
    d = hf["hidden_size"] // hf["num_attention_heads"]
    att = dict(heads=hf["num_attention_heads"], kv_heads=hf["num_key_value_heads"], head_dim=d,
               eps=eps, rope=True, theta=hf["rope_theta"], scaling=d ** -0.5)
    x = w["model.embed_tokens.weight"][ids]
    for i, kind in enumerate(hf["layer_types"]):
        pre = f"model.layers.{i}."
        hn = rms_norm(x, w[pre + "operator_norm.weight"], eps)
        if kind == "conv":
            x = x + short_conv(hn, w, pre + "conv.")
        else:
            x = x + attention(hn, w, pre + "self_attn.", att, "out_proj.weight", qk_norm=True)
        hn = rms_norm(x, w[pre + "ffn_norm.weight"], eps)
        f = pre + "feed_forward."
        x = x + linear(F.silu(linear(hn, w[f + "w1.weight"])) * linear(hn, w[f + "w3.weight"]),
                       w[f + "w2.weight"])
    x = rms_norm(x, w["model.embedding_norm.weight"], eps)
    return head(x, w, hf.get("tie_word_embeddings", True), "model.embed_tokens.weight")


def mixer_sizes(hf, p):
    inner = int(hf[p + "expand"] * hf["hidden_size"])
    heads = hf[p + "n_heads"] if p else hf["num_heads"]
    return dict(inner=inner, heads=heads, head_dim=inner // heads,
                groups=hf[p + "n_groups"] if p else hf["n_groups"],
                state=hf[p + "d_state"] if p else hf["state_size"],
                chunk=hf[p + "chunk_size"] if p else hf["chunk_size"],
                eps=hf["rms_norm_eps"] if p else hf["layer_norm_epsilon"])


def lfm2_mlp_width(hf):
    """Lfm2MLP's width: 2/3 of intermediate_size, times the multiplier, rounded up."""
    width = int(2 * hf["intermediate_size"] / 3)
    width = int(hf["block_ffn_dim_multiplier"] * width)
    mult = hf["block_multiple_of"]
    return mult * ((width + mult - 1) // mult)


# ---- random weights -------------------------------------------------------------------

def common_config(name, arch, model_type):
    return {"architectures": [arch], "model_type": model_type, "name": name,
            "vocab_size": VOCAB, "hidden_size": 64, "bos_token_id": BOS, "eos_token_id": EOS,
            "pad_token_id": PAD, "torch_dtype": "float32", "transformers_version": "4.57.0",
            "use_cache": True, "tokenizer_class": "AttnServeByteTokenizer"}


def configs():
    mamba2 = dict(common_config("hf-mamba2", "Mamba2ForCausalLM", "mamba2"),
                  num_hidden_layers=2, num_heads=8, head_dim=16, expand=2, state_size=16,
                  n_groups=1, conv_kernel=4, use_conv_bias=True, use_bias=False,
                  hidden_act="silu", layer_norm_epsilon=1e-5, chunk_size=16, rms_norm=True,
                  residual_in_fp32=True, time_step_rank=4, time_step_min=0.001,
                  time_step_max=0.1, time_step_floor=1e-4,
                  time_step_limit=[0.0, float("inf")], tie_word_embeddings=False,
                  initializer_range=0.1, rescale_prenorm_residual=False)
    granite = dict(common_config("hf-granitehybrid", "GraniteMoeHybridForCausalLM",
                                 "granitemoehybrid"),
                   num_hidden_layers=4, layer_types=["mamba", "attention", "mamba", "attention"],
                   num_attention_heads=4, num_key_value_heads=2, intermediate_size=512,
                   shared_intermediate_size=96, num_local_experts=0, num_experts_per_tok=0,
                   hidden_act="silu", rms_norm_eps=1e-5, max_position_embeddings=4096,
                   rope_theta=10000.0, rope_scaling=None, position_embedding_type="nope",
                   attention_bias=False, attention_dropout=0.0, embedding_multiplier=12.0,
                   residual_multiplier=0.22, attention_multiplier=0.0078125,
                   logits_scaling=4.0, mamba_n_heads=8, mamba_d_head=16, mamba_n_groups=1,
                   mamba_d_state=16, mamba_d_conv=4, mamba_expand=2, mamba_chunk_size=16,
                   mamba_conv_bias=True, mamba_proj_bias=False, tie_word_embeddings=False,
                   output_router_logits=False, router_aux_loss_coef=0.01,
                   initializer_range=0.1)
    granite_rope = dict(granite, name="hf-granitehybrid-rope", position_embedding_type="rope",
                        mamba_conv_bias=False, tie_word_embeddings=True,
                        attention_multiplier=0.25, mamba_d_head="auto",
                        embedding_multiplier=0.5, residual_multiplier=1.5, logits_scaling=0.5)
    lfm2 = dict(common_config("hf-lfm2", "Lfm2ForCausalLM", "lfm2"),
                num_hidden_layers=4, layer_types=["conv", "full_attention", "conv",
                                                  "full_attention"],
                num_attention_heads=4, num_key_value_heads=2, intermediate_size=192,
                block_auto_adjust_ff_dim=True, block_ffn_dim_multiplier=1.0,
                block_multiple_of=64, conv_L_cache=3, conv_bias=False, norm_eps=1e-5,
                rope_theta=1000000.0, max_position_embeddings=128000,
                initializer_range=0.02)
    # tie_word_embeddings is left out: save_pretrained omits what equals the default (true)
    return [("mamba2", mamba2, 11), ("granitehybrid", granite, 21),
            ("granitehybrid_rope", granite_rope, 31), ("lfm2", lfm2, 41)]


def random_weights(name, hf, gen):
    """Hugging Face's tensor names and shapes for `hf`, drawn at scales that give
    logits a spread of several units."""
    w = {}
    dim = hf["hidden_size"]

    def mat(name_, rows, cols, scale=1.0):
        w[name_] = torch.randn(rows, cols, generator=gen) * (scale / math.sqrt(cols))

    def gain(name_, size):
        w[name_] = 1.0 + 0.1 * torch.randn(size, generator=gen)

    def mamba(pre, p):
        c = mixer_sizes(hf, p)
        inner, heads, g, n = c["inner"], c["heads"], c["groups"], c["state"]
        conv_dim = inner + 2 * g * n
        k = hf[p + "d_conv"] if p else hf["conv_kernel"]
        mat(pre + "in_proj.weight", inner + conv_dim + heads, dim)
        w[pre + "conv1d.weight"] = torch.randn(conv_dim, 1, k, generator=gen) / math.sqrt(k)
        if hf["mamba_conv_bias"] if p else hf["use_conv_bias"]:
            w[pre + "conv1d.bias"] = 0.1 * torch.randn(conv_dim, generator=gen)
        dt = torch.exp(torch.rand(heads, generator=gen) * (math.log(0.5) - math.log(0.01)) +
                       math.log(0.01))
        w[pre + "dt_bias"] = dt + torch.log(-torch.expm1(-dt))  # softplus^-1
        w[pre + "A_log"] = torch.log(1 + 15 * torch.rand(heads, generator=gen))
        w[pre + "D"] = 1.0 + 0.1 * torch.randn(heads, generator=gen)
        gain(pre + "norm.weight", inner)
        mat(pre + "out_proj.weight", dim, inner)

    def attn(pre, o_name, qk_norm):
        h, kv = hf["num_attention_heads"], hf["num_key_value_heads"]
        d = dim // h
        mat(pre + "q_proj.weight", h * d, dim)
        mat(pre + "k_proj.weight", kv * d, dim)
        mat(pre + "v_proj.weight", kv * d, dim)
        mat(pre + o_name, dim, h * d)
        if qk_norm:
            gain(pre + "q_layernorm.weight", d)
            gain(pre + "k_layernorm.weight", d)

    mt = hf["model_type"]
    embed = "backbone.embeddings.weight" if mt == "mamba2" else "model.embed_tokens.weight"
    w[embed] = torch.randn(VOCAB, dim, generator=gen)
    if mt == "mamba2":
        for i in range(hf["num_hidden_layers"]):
            pre = f"backbone.layers.{i}."
            gain(pre + "norm.weight", dim)
            mamba(pre + "mixer.", "")
        gain("backbone.norm_f.weight", dim)
    elif mt == "granitemoehybrid":
        hidden = hf["shared_intermediate_size"]
        for i, kind in enumerate(hf["layer_types"]):
            pre = f"model.layers.{i}."
            gain(pre + "input_layernorm.weight", dim)
            if kind == "mamba":
                mamba(pre + "mamba.", "mamba_")
            else:
                attn(pre + "self_attn.", "o_proj.weight", False)
            gain(pre + "post_attention_layernorm.weight", dim)
            mat(pre + "shared_mlp.input_linear.weight", 2 * hidden, dim)
            mat(pre + "shared_mlp.output_linear.weight", dim, hidden)
        gain("model.norm.weight", dim)
    else:
        hidden = lfm2_mlp_width(hf)
        for i, kind in enumerate(hf["layer_types"]):
            pre = f"model.layers.{i}."
            gain(pre + "operator_norm.weight", dim)
            if kind == "conv":
                k = hf["conv_L_cache"]
                mat(pre + "conv.in_proj.weight", 3 * dim, dim)
                w[pre + "conv.conv.weight"] = torch.randn(dim, 1, k, generator=gen) / math.sqrt(k)
                mat(pre + "conv.out_proj.weight", dim, dim)
            else:
                attn(pre + "self_attn.", "out_proj.weight", True)
            gain(pre + "ffn_norm.weight", dim)
            mat(pre + "feed_forward.w1.weight", hidden, dim)
            mat(pre + "feed_forward.w3.weight", hidden, dim)
            mat(pre + "feed_forward.w2.weight", dim, hidden)
        gain("model.embedding_norm.weight", dim)
    if not hf.get("tie_word_embeddings", mt == "lfm2"):
        mat("lm_head.weight", VOCAB, dim, scale=3.0)
    else:
        # The head reads it: small enough that the residual is not just the last token's
        # embedding (which a tied head would predict again and again).
        w[embed] *= 0.3
    return w


FORWARD = {"mamba2": mamba2_forward, "granitemoehybrid": granite_forward, "lfm2": lfm2_forward}


# ---- the record -----------------------------------------------------------------------

@torch.no_grad()
def record(name, hf, weights, out_dir):
    """Ids of FIXED_TEXT (its bytes: the byte tokenizer adds no BOS), the greedy
    continuation by full recomputation, the logits of both."""
    w = {k: t.to(DT) for k, t in weights.items()}
    forward = FORWARD[hf["model_type"]]
    prompt = list(FIXED_TEXT.encode())
    ids, margins, stopped_at_eos = list(prompt), [], False
    for _ in range(GREEDY_TOKENS):
        last = forward(torch.tensor(ids), w, hf)[-1]
        top = torch.topk(last, 2)
        margins.append(float(top.values[0] - top.values[1]))
        ids.append(int(top.indices[0]))
        if ids[-1] == EOS:
            stopped_at_eos = True
            break
    full = forward(torch.tensor(ids), w, hf).float().contiguous()
    logits_prompt = full[:len(prompt)].contiguous()
    # Every matrix and the embedding (the 2-D tensors) rounded as ggml's Q8_0 rounds them:
    # what LoadOptions::quantize = "q8_0" serves.
    rounded = {k: (q8_0_rounded(t) if t.dim() == 2 else t.float()).to(DT)
               for k, t in weights.items()}
    full_q8_0 = forward(torch.tensor(ids), rounded, hf).float().contiguous()
    continuation = ids[len(prompt):]
    cont_bytes = bytes(i for i in continuation if i < 256)
    ref = {
        "model": hf["name"],
        "text": FIXED_TEXT,
        "ids": prompt,
        "pieces": [str(i) for i in prompt],
        "greedy": {
            "max_tokens": GREEDY_TOKENS,
            "ids": continuation,
            "pieces": [str(i) for i in continuation],
            "bytes_hex": cont_bytes.hex(),
            "stopped_at_eos": stopped_at_eos,
            "margins": [round(m, 6) for m in margins],
            "min_margin": round(min(margins), 6),
        },
        "logits": {"file": "reference.safetensors", "prompt": "logits", "full": "logits_full",
                   "full_q8_0": "logits_full_q8_0",
                   "dtype": "F32", "shape_prompt": list(logits_prompt.shape),
                   "shape_full": list(full.shape),
                   "range": round(float(full.max() - full.min()), 4)},
    }
    os.makedirs(out_dir, exist_ok=True)
    write_safetensors(os.path.join(out_dir, "reference.safetensors"),
                      {"logits": logits_prompt, "logits_full": full,
                       "logits_full_q8_0": full_q8_0})
    with open(os.path.join(out_dir, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1, ensure_ascii=False)
        f.write("\n")
    return ref


def write_dir(path, hf, weights):
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(hf, f, indent=2, sort_keys=True)  # float("inf") as Infinity, as Python does
        f.write("\n")
    write_safetensors(os.path.join(path, "model.safetensors"), weights, {"format": "pt"})
    stored = read_safetensors(os.path.join(path, "model.safetensors"))
    assert sorted(stored) == sorted(weights), path
    for k, t in weights.items():
        assert stored[k].dtype == t.dtype and torch.equal(stored[k], t), k


def main():
    torch.set_num_threads(1)
    out = os.path.abspath(ARGS.out)
    if os.path.exists(STAMP_PATH):
        os.remove(STAMP_PATH)
    for sub in ("models", "reference"):
        shutil.rmtree(os.path.join(out, sub), ignore_errors=True)
    for name, hf, seed in configs():
        for attempt in range(50):
            gen = torch.Generator().manual_seed(seed + attempt)
            weights = random_weights(name, hf, gen)
            if hf["model_type"] == "lfm2":
                assert weights["model.layers.0.feed_forward.w1.weight"].shape[0] == 128
            if name == "granitehybrid_rope":  # the shared MLP in 16 bits, as stored
                for k in weights:
                    if ".shared_mlp." in k:
                        weights[k] = weights[k].to(torch.bfloat16)
            ref = record(name, hf, weights, os.path.join(out, "reference", name))
            if (ref["greedy"]["min_margin"] >= MIN_MARGIN and
                    len(set(ref["greedy"]["ids"])) >= MIN_DISTINCT):
                break
        else:
            raise SystemExit(f"{name}: no seed in 50 gives margins >= {MIN_MARGIN} and "
                             f"{MIN_DISTINCT} distinct greedy ids")
        write_dir(os.path.join(out, "models", name), hf, weights)
        g = ref["greedy"]
        print(f"{name:20s} seed {seed + attempt}: logits range {ref['logits']['range']}, "
              f"min margin {g['min_margin']}, greedy {len(g['ids'])} ids "
              f"{bytes.fromhex(g['bytes_hex'])!r}")
    with open(STAMP_PATH, "w") as f:
        json.dump(stamp(), f, indent=1)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
