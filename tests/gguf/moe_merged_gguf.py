#!/usr/bin/python3
"""The MoE files of make_hybrid_gguf.py with each layer's ffn_gate_exps and ffn_up_exps
fused into one ffn_gate_up_exps {d, 2 F, E} (numpy (E, 2 F, d): each expert's gate rows,
then its up rows), as llama.cpp's converter writes them with --fuse-gate-up-exps and its
loader reads them (llama-model.cpp create_tensor_gate_up_exps; build_moe_ffn splits the
product at F). The same weights otherwise: attnserve must serve NAME-merged exactly as
NAME (qwen35_serve_test.sh).

Usage: /usr/bin/python3 moe_merged_gguf.py OUT_DIR NAME...  (NAME of make_hybrid_gguf's
FILES, with experts) -> OUT_DIR/NAME-merged.gguf
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_hybrid_gguf  # noqa: E402


def merged(tensors):
    by_name = {name: (t, kind) for name, t, kind in tensors}
    out = []
    for name, t, kind in tensors:
        if name.endswith(".ffn_up_exps.weight"):
            continue  # went into the gate's place
        if name.endswith(".ffn_gate_exps.weight"):
            up, up_kind = by_name[name.replace("ffn_gate_exps", "ffn_up_exps")]
            assert up_kind == kind
            out.append((name.replace("ffn_gate_exps", "ffn_gate_up_exps"), torch.cat([t, up], dim=1),
                        kind))
            continue
        out.append((name, t, kind))
    return out


def main():
    make_hybrid_gguf.write_variants("moe_merged_gguf", "merged",
                                    lambda arch, name, tensors: merged(tensors), sys.argv[1:])


if __name__ == "__main__":
    main()
