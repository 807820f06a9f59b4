#!/usr/bin/python3
"""The table of gguf_bench.sh: reads the runs' JSON in WORK (NAME.attnserve.R.json from
gguf_bench.py, NAME.llama.R.json from llama_cpp_bench.mjs, NAME.refused, taylor.txt,
bandwidth.json) and each file's tensor table, and prints markdown: medians over the runs,
each run's figure in brackets.

Usage: PYTHONPATH=tests/gguf gguf_bench_report.py WORK MODELS_DIR FILES SESSIONS TOKENS
"""
import glob
import json
import os
import statistics
import struct
import sys

import ggml_blocks as gb

# GGUF metadata value sizes (types 0-12 but 8 string and 9 array)
SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def tensor_table(path):
    """[(name, ggml type, bytes)] from a GGUF file's header."""
    with open(path, "rb") as f:
        head = f.read(64 << 20)  # the header (GPT-2's vocabulary is ~1.5 MB)
    at = 4

    def take(fmt):
        nonlocal at
        v = struct.unpack_from(fmt, head, at)
        at += struct.calcsize(fmt)
        return v

    def skip_value(kind):
        nonlocal at
        if kind == 8:
            (n,) = take("<Q")
            at += n
        elif kind == 9:
            element, count = take("<IQ")
            for _ in range(count):
                skip_value(element)
        else:
            at += SCALAR[kind]

    _, n_tensors, n_kv = take("<IQQ")
    for _ in range(n_kv):
        (n,) = take("<Q")
        at += n
        (kind,) = take("<I")
        skip_value(kind)
    out = []
    for _ in range(n_tensors):
        (n,) = take("<Q")
        name = head[at:at + n].decode()
        at += n
        (dims_n,) = take("<I")
        dims = take(f"<{dims_n}Q")
        kind, _ = take("<IQ")
        rows = 1
        for d in dims[1:]:
            rows *= d
        out.append((name, kind, gb.row_bytes(kind, dims[0]) * rows, dims))
    return out


def step_bytes(path):
    """Weight bytes one decode step reads: every tensor, but one row of the embedding."""
    total = 0
    for name, kind, size, dims in tensor_table(path):
        total += size if name != "token_embd.weight" else gb.row_bytes(kind, dims[0])
    return total


def decode_rate(run, n, tokens):
    d = run["decode"][str(n)]
    assert all(t == tokens for t in d["tokens"]), d["tokens"]
    return n * (tokens - 1) / ((max(d["last"]) - min(d["first"])) / 1000)


def step_ms(run, tokens):
    d = run["decode"]["1"]
    return (d["last"][0] - d["first"][0]) / (tokens - 1)


def cell(values, fmt):
    if not values:
        return "–"
    runs = ", ".join(fmt.format(v) for v in values)
    return f"{fmt.format(statistics.median(values))} ({runs})"


def main():
    work, models_dir, files, sessions, tokens = sys.argv[1:6]
    sessions = [int(s) for s in sessions.split(",")]
    tokens = int(tokens)
    with open(os.path.join(work, "bandwidth.json")) as f:
        bandwidth = json.load(f)["copy_gbs"]
    print(f"Copy bandwidth (numpy, 1 GiB, read + written, median of 5): {bandwidth:.1f} GB/s")
    print()
    head = ["file", "weights", "engine"] + [f"decode tokens/s, {n} session{'s' if n > 1 else ''}" for n in sessions]
    head += ["TTFT 512 tokens, ms", "peak RSS MB", "ms / step (1 session)", "weight GB/s, % of copy bandwidth"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    notes = []
    for name in files.split(","):
        path = os.path.join(models_dir, name + ".gguf")
        bytes_step = step_bytes(path)
        size = f"{os.path.getsize(path) / 1e6:.0f} MB file, {bytes_step / 1e6:.0f} MB / step"
        for engine in ("attnserve", "llama"):
            label = "attnserve" if engine == "attnserve" else "llama.cpp (1 thread)"
            runs = []
            for p in sorted(glob.glob(os.path.join(work, f"{name}.{engine}.*.json"))):
                with open(p) as f:
                    runs.append(json.load(f))
            refused = os.path.join(work, f"{name}.refused")
            if engine == "attnserve" and os.path.exists(refused):
                with open(refused) as f:
                    notes.append(f"{name}: attnserve refused it: {f.read().strip()}")
                print(f"| {name} | {size} | {label} | refused (below) |" + " |" * (len(head) - 4))
                continue
            rates = [[decode_rate(r, n, tokens) for r in runs] for n in sessions]
            ttft = [r["ttft_ms"] for r in runs]
            rss = [r["vmhwm_kb"] / 1024 for r in runs]
            steps = [step_ms(r, tokens) for r in runs]
            gbs = bytes_step / (statistics.median(steps) / 1000) / 1e9 if steps else 0
            row = [name, size, label] + [cell(v, "{:.1f}") for v in rates]
            row += [cell(ttft, "{:.0f}"), f"{max(rss):.0f}" if rss else "–", cell(steps, "{:.1f}"),
                    f"{gbs:.1f}, {100 * gbs / bandwidth:.0f}%" if steps else "–"]
            print("| " + " | ".join(row) + " |")
    taylor = os.path.join(work, "taylor.txt")
    if os.path.exists(taylor):
        with open(taylor) as f:
            notes.append(f"taylor on a GGUF model: {f.read().strip() or 'accepted'}")
    print()
    for n in notes:
        print("- " + n)


if __name__ == "__main__":
    main()
