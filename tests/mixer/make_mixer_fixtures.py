#!/usr/bin/python3
"""Inputs and outputs of server/mixer's kernels from the numpy reference
(tests/gguf/hybrid_reference.py: the blocks its forward uses, which
gguf_hybrid_reference_test checks against llama.cpp), for tests/mixer to compare with.

Cases (seeded random inputs, a non-zero state to start from, states in the kernels'
layouts: conv (channels, K-1), SSM (heads, P, N)):
  conv_silu: Mamba-2's conv (bias, SiLU), K 4;  conv_plain: K 3, no bias, no activation;
  short_conv: LFM2's gated short convolution, K 3;
  ssd_groups: 6 heads in 2 groups;  ssd_long: 1 group, 70 tokens (over several chunks),
  some tokens with a large dt (a state decayed to almost nothing);
  gated_norm: the gated grouped RMSNorm, 3 groups;
  mamba2_chain: a whole Mamba-2 mixer between its projections (hybrid_reference's
  mamba2_mix, the code its forward runs against llama.cpp) from the in_proj output
  z | xBC | dt, with the weights initialised as Mamba-2 does;
  gdn_tiled: the gated delta rule (hybrid_reference's l2_norm and gated_delta_rule), 6
  value heads on 2 key heads (value head h reads key head h mod 2), d_k 16 != d_v 8;
  gdn_grouped: the same with qwen3next's order (value head h reads key head h // 3),
  d_k 8 != d_v 16;  gdn_d64: d_k 64 (a size the AVX-512 step has a path for), d_v 32;
  gdn_long: 1 key head, 2 value heads of 32, 70 tokens (over several chunks), a token
  whose decay wipes the state, one in softplus's linear branch, a zero key;
  gdn_norm: the gated RMSNorm after it (norm per value head, then silu(z));
  gdn_chain: a whole Gated DeltaNet mixer between its projections (hybrid_reference's
  gdn_core: conv, delta rule, gated norm) from q | k | v, z, b and alpha.
GDN states are written in the kernels' layout (n_v, d_v, d_k), llama.cpp's, the
reference's (n_v, d_k, d_v) transposed per head.

Writes one line per array, "CASE.NAME COUNT V1 ... VCOUNT", values as float32 printed
exactly (%.9g); sizes as arrays too (CASE.dims).
Usage: /usr/bin/python3 make_mixer_fixtures.py OUT_FILE
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gguf"))
import hybrid_reference as ref  # noqa: E402


def f32(a):
    """Inputs are drawn as float32 so the kernels see exactly what the reference saw."""
    return np.asarray(a, np.float32).astype(np.float64)


def conv_case(rng, name, ch, k, t, bias, silu):
    x = f32(rng.standard_normal((t, ch)))
    w = f32(rng.uniform(-0.8, 0.8, (ch, k)))
    b = f32(rng.standard_normal(ch) * 0.2) if bias else None
    s0 = f32(rng.standard_normal((ch, k - 1)))
    y, s1 = ref.causal_conv1d(x, w, b, s0, silu)
    out = {"dims": [ch, k, t, int(bias), int(silu)], "x": x, "w": w, "state0": s0,
           "y": y, "state1": s1}
    if bias:
        out["bias"] = b
    return {f"{name}.{key}": v for key, v in out.items()}


def short_conv_case(rng, name, ch, k, t):
    bcx = f32(rng.standard_normal((t, 3 * ch)))
    w = f32(rng.uniform(-1, 1, (ch, k)))
    s0 = f32(rng.standard_normal((ch, k - 1)))
    y, s1 = ref.short_conv(bcx, w, s0)
    out = {"dims": [ch, k, t], "bcx": bcx, "w": w, "state0": s0, "y": y, "state1": s1}
    return {f"{name}.{key}": v for key, v in out.items()}


def ssd_case(rng, name, heads, p, groups, n, t, big_dt):
    x = f32(rng.standard_normal((t, heads * p)))
    b = f32(rng.standard_normal((t, groups * n)) * 0.5)
    c = f32(rng.standard_normal((t, groups * n)) * 0.5)
    dt_raw = f32(rng.normal(-2.0, 1.5, (t, heads)))
    if big_dt:
        dt_raw[t // 3] += 12.0  # exp(dt A) ~ 0 for every head at one token
        dt_raw[t // 2, 0] = 30.0  # softplus's linear branch
    dt_bias = f32(rng.normal(0.0, 0.5, heads))
    a = f32(-np.exp(rng.uniform(0.0, np.log(16.0), heads)))
    d = f32(1.0 + rng.standard_normal(heads) * 0.1)
    s0 = f32(rng.standard_normal((heads, p, n)) * 0.5)
    dt = ref.softplus(dt_raw + dt_bias)
    y, s1 = ref.ssd_scan(x.reshape(t, heads, p), dt, a, b.reshape(t, groups, n),
                         c.reshape(t, groups, n), d, s0)
    out = {"dims": [heads, p, groups, n, t], "x": x, "b": b, "c": c, "dt": dt_raw,
           "dt_bias": dt_bias, "a": a, "d": d, "state0": s0, "y": y.reshape(t, heads * p),
           "state1": s1}
    return {f"{name}.{key}": v for key, v in out.items()}


def norm_case(rng, name, t, inner, groups, eps):
    y = f32(rng.standard_normal((t, inner)))
    z = f32(rng.standard_normal((t, inner)) * 2.0)
    w = f32(1.0 + rng.standard_normal(inner) * 0.1)
    out = ref.gated_group_rms_norm(y, z, w, groups, eps)
    return {f"{name}.{key}": v for key, v in
            {"dims": [t, inner, groups], "eps": [eps], "y": y, "z": z, "w": w,
             "out": out}.items()}


def mamba2_case(rng, name, heads, p, groups, n, k, t):
    inner = heads * p
    conv_dim = inner + 2 * groups * n
    zxbcdt = f32(rng.standard_normal((t, 2 * inner + 2 * groups * n + heads)))
    conv_w = f32(rng.uniform(-1, 1, (conv_dim, k)) / np.sqrt(k) * 1.5)
    conv_b = f32(rng.standard_normal(conv_dim) * 0.1)
    dt0 = np.exp(rng.uniform(np.log(1e-3), np.log(1e-1), heads))
    dt_bias = f32(dt0 + np.log(-np.expm1(-dt0)))  # softplus^-1
    a = f32(-np.exp(rng.uniform(0.0, np.log(16.0), heads)))
    d = f32(1.0 + rng.standard_normal(heads) * 0.1)
    norm_w = f32(1.0 + rng.standard_normal(inner) * 0.1)
    conv0 = f32(rng.standard_normal((conv_dim, k - 1)))
    ssm0 = f32(rng.standard_normal((heads, p, n)) * 0.5)
    eps = 1e-5
    y, conv1, ssm1 = ref.mamba2_mix(zxbcdt, conv_w, conv_b, dt_bias, a, d, norm_w, groups, n,
                                    eps, conv0, ssm0)
    out = {"dims": [heads, p, groups, n, k, t], "eps": [eps], "zxbcdt": zxbcdt,
           "conv_w": conv_w, "conv_b": conv_b, "dt_bias": dt_bias, "a": a, "d": d,
           "norm_w": norm_w, "conv_state0": conv0, "ssm_state0": ssm0, "y": y,
           "conv_state1": conv1, "ssm_state1": ssm1}
    return {f"{name}.{key}": v for key, v in out.items()}


def gdn_inputs(rng, nk, nv, dk, dv, t):
    """Raw q, k (the conv output, before the L2 norm), v, b, alpha as a layer sees them,
    and the per-head parameters (A_log as Qwen3.5 initialises it, dt_bias)."""
    q = f32(rng.standard_normal((t, nk * dk)))
    k = f32(rng.standard_normal((t, nk * dk)))
    v = f32(rng.standard_normal((t, nv * dv)))
    b = f32(rng.standard_normal((t, nv)) * 1.5)
    alpha = f32(rng.normal(-1.0, 1.5, (t, nv)))
    dt_bias = f32(rng.normal(0.0, 0.5, nv))
    ssm_a = f32(-np.exp(rng.uniform(0.0, np.log(16.0), nv)))
    return q, k, v, b, alpha, dt_bias, ssm_a


def gdn_rule(q, k, v, b, alpha, dt_bias, ssm_a, nk, dk, dv, eps, s0, tiled):
    """The reference's delta rule from raw inputs; states in the reference's layout. Value
    head h reads key head h mod nk if tiled (qwen35 GGUFs), else h // (nv / nk)
    (qwen3next), as hybrid_reference.gdn_core's kv_map."""
    t, nv = b.shape
    qn = ref.l2_norm(q.reshape(t, nk, dk), eps)
    kn = ref.l2_norm(k.reshape(t, nk, dk), eps)
    of = np.arange(nv) % nk if tiled else np.arange(nv) // (nv // nk)
    g = ref.softplus(alpha + dt_bias) * ssm_a
    beta = 1.0 / (1.0 + np.exp(-b))
    o, s1 = ref.gated_delta_rule(qn[:, of] / np.sqrt(dk), kn[:, of], v.reshape(t, nv, dv), g,
                                 beta, s0)
    return o.reshape(t, nv * dv), s1


def kernel_state(s):
    """(n_v, d_k, d_v) -> the kernels' (n_v, d_v, d_k)."""
    return np.ascontiguousarray(np.asarray(s).transpose(0, 2, 1))


def gdn_case(rng, name, nk, nv, dk, dv, t, extremes, tiled=True):
    q, k, v, b, alpha, dt_bias, ssm_a = gdn_inputs(rng, nk, nv, dk, dv, t)
    if extremes:
        alpha[t // 3] += 12.0  # exp(g) ~ 0 for every head at one token
        alpha[t // 2, 0] = 30.0 - dt_bias[0]  # softplus's linear branch
        k[t // 4] = 0.0  # a zero key: l2_norm's eps, no update but the decay
    s0 = f32(rng.standard_normal((nv, dk, dv)) * 0.5)
    eps = 1e-6
    o, s1 = gdn_rule(q, k, v, b, alpha, dt_bias, ssm_a, nk, dk, dv, eps, s0, tiled)
    out = {"dims": [nk, nv, dk, dv, t], "tiled": [int(tiled)], "eps": [eps], "q": q, "k": k,
           "v": v, "b": b, "alpha": alpha, "dt_bias": dt_bias, "ssm_a": ssm_a, "state0": kernel_state(s0),
           "o": o, "state1": kernel_state(s1)}
    return {f"{name}.{key}": v for key, v in out.items()}


def gdn_norm_case(rng, name, t, heads, dv, eps):
    o = f32(rng.standard_normal((t, heads * dv)) * 0.3)
    z = f32(rng.standard_normal((t, heads * dv)) * 2.0)
    w = f32(1.0 + rng.standard_normal(dv) * 0.1)
    out = ref.rms_norm(o.reshape(t, heads, dv), w, eps) * ref.silu(z.reshape(t, heads, dv))
    return {f"{name}.{key}": v for key, v in
            {"dims": [t, heads, dv], "eps": [eps], "o": o, "z": z, "w": w,
             "out": out.reshape(t, heads * dv)}.items()}


def gdn_chain_case(rng, name, nk, nv, dk, dv, kernel, t):
    channels = 2 * nk * dk + nv * dv
    qkv = f32(rng.standard_normal((t, channels)))
    z = f32(rng.standard_normal((t, nv * dv)))
    b = f32(rng.standard_normal((t, nv)))
    alpha = f32(rng.standard_normal((t, nv)))
    conv_w = f32(rng.uniform(-1, 1, (channels, kernel)) / np.sqrt(kernel) * 1.5)
    dt_bias = f32(np.ones(nv) + rng.standard_normal(nv) * 0.1)
    ssm_a = f32(-np.exp(np.log(rng.uniform(1.0, 16.0, nv))))
    norm_w = f32(1.0 + rng.standard_normal(dv) * 0.1)
    conv0 = f32(rng.standard_normal((channels, kernel - 1)))
    s0 = f32(rng.standard_normal((nv, dk, dv)) * 0.3)
    eps = 1e-6
    y, conv1, s1 = ref.gdn_core(qkv, z, b, alpha, conv_w, dt_bias, ssm_a, norm_w, nk, eps,
                                conv0, s0, kv_map="tile")
    out = {"dims": [nk, nv, dk, dv, kernel, t], "eps": [eps], "qkv": qkv, "z": z, "b": b,
           "alpha": alpha, "conv_w": conv_w, "dt_bias": dt_bias, "ssm_a": ssm_a,
           "norm_w": norm_w, "conv_state0": conv0, "state0": kernel_state(s0), "y": y,
           "conv_state1": conv1, "state1": kernel_state(s1)}
    return {f"{name}.{key}": v for key, v in out.items()}


def main():
    rng = np.random.default_rng(2026)
    arrays = {}
    arrays.update(conv_case(rng, "conv_silu", 40, 4, 13, bias=True, silu=True))
    arrays.update(conv_case(rng, "conv_plain", 17, 3, 5, bias=False, silu=False))
    arrays.update(short_conv_case(rng, "short_conv", 24, 3, 9))
    arrays.update(ssd_case(rng, "ssd_groups", 6, 8, 2, 16, 37, big_dt=False))
    arrays.update(ssd_case(rng, "ssd_long", 4, 16, 1, 32, 70, big_dt=True))
    arrays.update(norm_case(rng, "gated_norm", 5, 48, 3, 1e-5))
    arrays.update(mamba2_case(rng, "mamba2_chain", 4, 16, 2, 16, 4, 21))
    arrays.update(gdn_case(rng, "gdn_tiled", 2, 6, 16, 8, 37, extremes=False))
    arrays.update(gdn_case(rng, "gdn_long", 1, 2, 32, 32, 70, extremes=True))
    arrays.update(gdn_norm_case(rng, "gdn_norm", 5, 3, 16, 1e-6))
    arrays.update(gdn_chain_case(rng, "gdn_chain", 2, 4, 16, 16, 4, 23))
    arrays.update(gdn_case(rng, "gdn_grouped", 2, 6, 8, 16, 29, extremes=False, tiled=False))
    arrays.update(gdn_case(rng, "gdn_d64", 2, 4, 64, 32, 24, extremes=False))
    tmp = sys.argv[1] + ".tmp"
    with open(tmp, "w") as f:
        for name, v in arrays.items():
            flat = np.asarray(v, np.float64).reshape(-1)
            f.write(f"{name} {flat.size} " + " ".join("%.9g" % np.float32(e) for e in flat) + "\n")
    os.replace(tmp, sys.argv[1])
    print(f"make_mixer_fixtures: {len(arrays)} arrays in {sys.argv[1]}")


if __name__ == "__main__":
    main()
