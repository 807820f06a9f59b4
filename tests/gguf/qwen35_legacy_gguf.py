#!/usr/bin/python3
"""qwen3next files of make_hybrid_gguf.py in the legacy layout of the first Qwen3-Next
conversions: each Gated DeltaNet layer's attn_qkv and attn_gate as one ssm_in
{d, 2 n_k d_k + 2 n_v d_v} (numpy rows: per key head g, [q_g (d_k) | k_g (d_k) | v of its
r = n_v / n_k value heads (r d_v) | z of the same (r d_v)]), which llama.cpp's qwen3next
graph still reads (build_qkvz's legacy path). The same weights otherwise: attnserve must
serve NAME-legacy exactly as NAME (qwen35_serve_test.sh).

Usage: /usr/bin/python3 qwen35_legacy_gguf.py OUT_DIR NAME...  (qwen3next files of
make_hybrid_gguf's FILES) -> OUT_DIR/NAME-legacy.gguf
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_hybrid_gguf  # noqa: E402


def legacy(tensors, gdn):
    nk, nv, dk = gdn["k_heads"], gdn["v_heads"], gdn["state"]
    r, dv = nv // nk, gdn["state"]
    by_name = {name: (t, kind) for name, t, kind in tensors}
    out = []
    for name, t, kind in tensors:
        if name.endswith(".attn_gate.weight"):
            continue  # went into ssm_in
        if name.endswith(".attn_qkv.weight"):
            z, _ = by_name[name.replace("attn_qkv", "attn_gate")]
            q, k, v = t[:nk * dk], t[nk * dk:2 * nk * dk], t[2 * nk * dk:]
            rows = []
            for g in range(nk):
                rows += [q[g * dk:(g + 1) * dk], k[g * dk:(g + 1) * dk],
                         v[g * r * dv:(g + 1) * r * dv], z[g * r * dv:(g + 1) * r * dv]]
            out.append((name.replace("attn_qkv", "ssm_in"), torch.cat(rows), kind))
            continue
        out.append((name, t, kind))
    return out


def to_legacy(arch, name, tensors):
    assert arch == "qwen3next", name
    return legacy(tensors, make_hybrid_gguf.QWEN35_SHAPE["gdn"])


def main():
    make_hybrid_gguf.write_variants("qwen35_legacy_gguf", "legacy", to_legacy, sys.argv[1:])


if __name__ == "__main__":
    main()
