#!/usr/bin/python3
"""ggml's block types, three implementations held together bit for bit:

  1. ggml_blocks.py (ours, numpy) against llama.cpp's own numpy code, gguf-py's
     quants.py, taken from the llama.cpp source node-llama-cpp ships
     (tests/gguf/node_modules/node-llama-cpp/llama/gitRelease.bundle): random valid
     blocks of F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K and Q6_K (every nibble, fifth and high
     bit, 6-bit scale and min, int8 scale, f16 scales of both signs with zeros and
     subnormals) must dequantize to the same f32 bits; ggml_blocks.quantize of Gaussian
     rows must give gguf-py's bytes for Q8_0, Q4_0 and BF16 (the types gguf-py
     quantizes), and for the K types dequantize back within ggml's usual error;
  2. with DUMP (gguf_dequant_dump, the server's GGUF reader and weights::DequantizeRow):
     a GGUF file holding a tensor of random valid blocks of each type, read back through
     attnserve, must give ggml_blocks.dequantize's f32 bits exactly.

Usage: /usr/bin/python3 dequant_test.py [DUMP_BINARY]
"""
import os
import subprocess
import struct
import sys
import tempfile

import numpy as np

import ggml_blocks as gb
from make_quant_gguf import ALIGN, STRING, U32, gguf_kv, gguf_string

here = os.path.dirname(os.path.abspath(__file__))
BUNDLE = os.path.join(here, "node_modules", "node-llama-cpp", "llama", "gitRelease.bundle")
TYPES = (gb.F16, gb.BF16, gb.Q8_0, gb.Q4_0, gb.Q4_K, gb.Q5_K, gb.Q6_K)
# Root-mean-square error of quantize -> dequantize on N(0, 1) rows, as a share of the
# standard deviation: a little above what ggml's reference quantizers reach.
RMSE_LIMIT = {gb.F16: 1e-3, gb.BF16: 5e-3, gb.Q8_0: 0.01, gb.Q4_0: 0.12, gb.Q4_K: 0.1,
              gb.Q5_K: 0.05, gb.Q6_K: 0.025}
failures = []


def check(ok, what):
    print(f"dequant_test: {'ok  ' if ok else 'FAIL'} {what}")
    if not ok:
        failures.append(what)


def bits_equal(a, b):
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def gguf_py(tmp):
    """llama.cpp's gguf-py package, out of node-llama-cpp's copy of the llama.cpp source."""
    src = os.path.join(tmp, "llama.cpp")
    subprocess.run(["git", "clone", "-q", "--no-checkout", BUNDLE, src], check=True,
                   stderr=subprocess.DEVNULL)
    archive = subprocess.run(["git", "-C", src, "archive", "HEAD", "gguf-py/gguf"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", src], input=archive, check=True)
    sys.path.insert(0, os.path.join(src, "gguf-py"))
    from gguf import constants, quants
    return constants, quants


def against_gguf_py(constants, quants, rng):
    for kind in TYPES:
        name = gb.NAMES[kind]
        packed = gb.random_blocks(kind, 64, 1024, rng)
        ours = gb.dequantize(kind, packed, 1024)
        theirs = np.asarray(quants.dequantize(packed, constants.GGMLQuantizationType(kind)), np.float32)
        check(bits_equal(ours, theirs.reshape(ours.shape)) and np.isfinite(ours).all(),
              f"{name}: 64 rows of random blocks dequantize to gguf-py's f32 bits")
        x = rng.standard_normal((64, 1024), dtype=np.float32)
        q = gb.quantize(kind, x)
        rmse = float(np.sqrt(np.mean(np.square(gb.dequantize(kind, q, 1024) - x))))
        check(rmse < RMSE_LIMIT[kind], f"{name}: quantize then dequantize of N(0, 1) rows: rmse {rmse:.4f} "
                                       f"(limit {RMSE_LIMIT[kind]})")
        if kind in (gb.Q8_0, gb.Q4_0, gb.BF16):
            theirs_q = np.asarray(quants.quantize(x, constants.GGMLQuantizationType(kind))).reshape(q.shape)
            check(np.array_equal(theirs_q, q), f"{name}: quantize gives gguf-py's bytes")


def write_blocks_gguf(path, tensors):
    """tensors: [(name, ggml type, rows, n, packed bytes)]."""
    kvs = [gguf_kv("general.architecture", STRING, "llama"), gguf_kv("general.alignment", U32, ALIGN)]
    infos, blobs, offset = b"", [], 0
    for name, kind, rows, n, packed in tensors:
        infos += gguf_string(name) + struct.pack("<I", 2) + struct.pack("<QQ", n, rows)
        infos += struct.pack("<IQ", kind, offset)
        blob = packed.tobytes()
        blob += b"\0" * ((-len(blob)) % ALIGN)
        blobs.append(blob)
        offset += len(blob)
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kvs) + infos
    head += b"\0" * ((-len(head)) % ALIGN)
    with open(path, "wb") as f:
        f.write(head + b"".join(blobs))


def against_attnserve(dump, tmp, rng):
    tensors = []
    for kind in TYPES:
        rows, n = 48, 768
        tensors.append((f"random.{gb.NAMES[kind]}", kind, rows, n, gb.random_blocks(kind, rows, n, rng)))
        x = rng.standard_normal((16, 512), dtype=np.float32)
        tensors.append((f"quantized.{gb.NAMES[kind]}", kind, 16, 512, gb.quantize(kind, x)))
    path = os.path.join(tmp, "blocks.gguf")
    write_blocks_gguf(path, tensors)
    out = subprocess.run([dump, path] + [t[0] for t in tensors], capture_output=True)
    check(out.returncode == 0, f"gguf_dequant_dump reads {len(tensors)} tensors "
                               f"({out.stderr.decode(errors='replace').strip() or 'no message'})")
    if out.returncode != 0:
        return
    got = np.frombuffer(out.stdout, dtype=np.float32)
    at = 0
    for name, kind, rows, n, packed in tensors:
        want = gb.dequantize(kind, packed, n)
        mine = got[at:at + rows * n].reshape(-1, n) if at + rows * n <= got.size else np.empty((0, n), np.float32)
        at += rows * n
        same = bits_equal(mine, want)
        detail = ""
        if not same and mine.shape == want.shape:
            bad = np.argwhere(mine.view(np.uint32) != want.view(np.uint32))
            r, c = bad[0]
            detail = (f": {len(bad)} values differ, first row {r} column {c} (block {c // gb.BLOCKS[kind][0]}): "
                      f"attnserve {mine[r, c]!r}, ggml_blocks {want[r, c]!r}")
        check(same, f"{name}: attnserve's DequantizeRow gives ggml_blocks' f32 bits for {rows}x{n}{detail}")
    check(at * 4 == len(out.stdout), f"gguf_dequant_dump wrote {len(out.stdout)} bytes, expected {at * 4}")


def main():
    rng = np.random.default_rng(20261205)
    with tempfile.TemporaryDirectory() as tmp:
        constants, quants = gguf_py(tmp)
        against_gguf_py(constants, quants, rng)
        if len(sys.argv) > 1:
            against_attnserve(sys.argv[1], tmp, rng)
        else:
            print("dequant_test: no gguf_dequant_dump given: attnserve's DequantizeRow not compared")
    print(f"dequant_test: {len(failures)} failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
