#!/usr/bin/python3
"""ggml's block layouts in numpy, for the tests of packed GGUF weights (DESIGN §10):
a dequantizer, a quantizer and a generator of random but valid blocks for F32, F16, BF16,
Q8_0, Q4_0, Q4_K, Q5_K and Q6_K, written from llama.cpp's ggml/src/ggml-common.h (the
structs) and ggml-quants.c (dequantize_row_* and quantize_row_*_ref).

Arrays: a tensor of `rows` rows of `n` values is a uint8 array (rows, row_bytes(type, n));
row r holds n / block_values blocks of block_bytes bytes, little-endian.

  dequantize(type, packed, n) -> float32 (rows, n): ggml's dequantize_row_* bit for bit
      (float32 arithmetic in the C code's order, no fused multiply-add: d1 = d * sc, then
      d1 * q - m1; Q6_K (d * sc) * q).
  quantize(type, x) -> uint8 (rows, row_bytes): the algorithm of quantize_row_*_ref
      (Q4_K / Q5_K: make_qkx2_quants per 32 with 6-bit scales and mins; Q6_K:
      make_qx_quants per 16 with int8 scales; Q8_0 amax / 127 and roundf; Q4_0 max / -8).
      Sums are numpy's, not C's sequential float sums, so a rare rounding tie may differ
      from ggml's bytes; the values are valid blocks either way.
  random_blocks(type, rows, n, rng) -> uint8 (rows, row_bytes): every bit pattern the
      layout allows (all nibbles, fifth and high bits, 6-bit scales and mins, int8
      scales including -128) with finite f16 scales of both signs, zeros and subnormals.

Block layouts (bytes): Q8_0 [d f16][qs int8 x32]; Q4_0 [d][qs x16: element j in the low
nibble of byte j, element j+16 in its high nibble]; Q4_K [d][dmin][scales x12][qs x128];
Q5_K [d][dmin][scales x12][qh x32][qs x128]; Q6_K [ql x128][qh x64][scales int8 x16][d].
"""
import numpy as np

F32, F16, Q4_0, Q5_0, Q8_0, Q2_K, Q4_K, Q5_K, Q6_K, BF16 = 0, 1, 2, 6, 8, 10, 12, 13, 14, 30
NAMES = {F32: "F32", F16: "F16", Q4_0: "Q4_0", Q5_0: "Q5_0", Q8_0: "Q8_0", Q2_K: "Q2_K",
         Q4_K: "Q4_K", Q5_K: "Q5_K", Q6_K: "Q6_K", BF16: "BF16"}
BY_NAME = {v: k for k, v in NAMES.items()}
# ggml type id: (values per block, bytes per block). Q5_0 and Q2_K are here only so that
# files of types attnserve does not read can be written (random_blocks).
BLOCKS = {F32: (1, 4), F16: (1, 2), BF16: (1, 2), Q8_0: (32, 34), Q4_0: (32, 18),
          Q4_K: (256, 144), Q5_K: (256, 176), Q6_K: (256, 210), Q5_0: (32, 22), Q2_K: (256, 84)}
# The types this module computes with (the others only have random_blocks).
SUPPORTED = (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K)
GROUP_MAX_EPS = np.float32(1e-15)
f32 = np.float32


def row_bytes(kind, n):
    values, size = BLOCKS[kind]
    assert n % values == 0, f"{NAMES[kind]}: a row of {n} values is not whole blocks of {values}"
    return n // values * size


def _blocks(kind, packed, n):
    """(rows, row_bytes) -> (rows * blocks per row, block bytes)."""
    packed = np.ascontiguousarray(packed, dtype=np.uint8)
    assert packed.shape[-1] == row_bytes(kind, n), (packed.shape, NAMES[kind], n)
    return packed.reshape(-1, BLOCKS[kind][1])


def _half(b, at):
    """The f16 at byte `at` of each block, as float32 (exact)."""
    return b[:, at:at + 2].copy().view(np.float16)[:, 0].astype(f32)


def _scale_min_k4(scales):
    """ggml's get_scale_min_k4 for j = 0..7 over the 12 scale bytes of Q4_K / Q5_K blocks:
    bytes 0-3 hold scales 0-3 in their low 6 bits, bytes 4-7 mins 0-3 likewise; scales and
    mins 4-7 keep their low 4 bits in bytes 8-11 (scale low nibble, min high nibble) and
    their top 2 bits in the top 2 bits of bytes 0-3 (scales) and 4-7 (mins)."""
    q = scales.astype(np.uint8)
    sc = np.empty((q.shape[0], 8), np.uint8)
    mn = np.empty((q.shape[0], 8), np.uint8)
    sc[:, :4] = q[:, 0:4] & 63
    mn[:, :4] = q[:, 4:8] & 63
    sc[:, 4:] = (q[:, 8:12] & 0xF) | ((q[:, 0:4] >> 6) << 4)
    mn[:, 4:] = (q[:, 8:12] >> 4) | ((q[:, 4:8] >> 6) << 4)
    return sc, mn


def _pack_scale_min_k4(ls, lm):
    """The inverse of _scale_min_k4: ls, lm (blocks, 8) of 6-bit values -> 12 bytes."""
    ls, lm = ls.astype(np.uint8), lm.astype(np.uint8)
    out = np.zeros((ls.shape[0], 12), np.uint8)
    out[:, 0:4] = ls[:, :4] | ((ls[:, 4:] >> 4) << 6)
    out[:, 4:8] = lm[:, :4] | ((lm[:, 4:] >> 4) << 6)
    out[:, 8:12] = (ls[:, 4:] & 0xF) | ((lm[:, 4:] & 0xF) << 4)
    return out


def _k4_values(qs):
    """Q4_K / Q5_K nibbles -> (blocks, 256) low 4 bits: the 128 bytes are 4 chunks of 32;
    chunk c's low nibbles are elements 64c..64c+31, its high nibbles 64c+32..64c+63."""
    q = qs.reshape(-1, 4, 32)
    return np.concatenate([q & 0xF, q >> 4], axis=2).reshape(-1, 256)


def _k4_fifth_bits(qh):
    """Q5_K's 32 qh bytes -> (blocks, 256) fifth bits: element 64c + l takes bit 2c of qh[l],
    element 64c + 32 + l bit 2c + 1."""
    bits = (qh[:, None, :] >> np.arange(8, dtype=np.uint8)[None, :, None]) & 1  # (b, 8, 32)
    return bits.reshape(-1, 256)


def dequantize(kind, packed, n):
    """packed (rows, row_bytes(kind, n)) -> float32 (rows, n), as ggml's dequantize_row_*."""
    rows = np.asarray(packed).shape[0]
    b = _blocks(kind, packed, n)
    if kind == F32:
        out = b.copy().view(f32)
    elif kind == F16:
        out = b.copy().view(np.float16).astype(f32)
    elif kind == BF16:
        out = (b.copy().view(np.uint16).astype(np.uint32) << 16).view(f32)
    elif kind == Q8_0:
        out = b[:, 2:].view(np.int8).astype(f32) * _half(b, 0)[:, None]
    elif kind == Q4_0:
        qs = b[:, 2:]
        q = np.concatenate([qs & 0xF, qs >> 4], axis=1).astype(np.int32) - 8
        out = q.astype(f32) * _half(b, 0)[:, None]
    elif kind in (Q4_K, Q5_K):
        d, dmin = _half(b, 0), _half(b, 2)
        sc, mn = _scale_min_k4(b[:, 4:16])
        d1 = (d[:, None] * sc.astype(f32)).repeat(32, axis=1)  # (blocks, 256), f32 products
        m1 = (dmin[:, None] * mn.astype(f32)).repeat(32, axis=1)
        if kind == Q4_K:
            q = _k4_values(b[:, 16:144])
        else:
            q = _k4_values(b[:, 48:176]) + 16 * _k4_fifth_bits(b[:, 16:48])
        out = (d1 * q.astype(f32)) - m1
    elif kind == Q6_K:
        ql, qh = b[:, 0:128].reshape(-1, 2, 64), b[:, 128:192].reshape(-1, 2, 32)
        sc, d = b[:, 192:208].view(np.int8), _half(b, 208)
        # Each half of 128: element 32k + l (k = 0..3) takes the low (k = 0, 1) or high
        # (k = 2, 3) nibble of ql[32 (k % 2) + l] and bits 2k, 2k+1 of qh[l].
        low = np.stack([ql[:, :, :32] & 0xF, ql[:, :, 32:] & 0xF, ql[:, :, :32] >> 4,
                        ql[:, :, 32:] >> 4], axis=2)                        # (b, 2, 4, 32)
        high = np.stack([(qh >> (2 * k)) & 3 for k in range(4)], axis=2)    # (b, 2, 4, 32)
        q = (low | (high << 4)).astype(np.int32).reshape(-1, 256) - 32
        ds = (d[:, None] * sc.astype(f32)).repeat(16, axis=1)  # element e: scale e // 16
        out = ds * q.astype(f32)
    else:
        raise ValueError(f"dequantize: {NAMES.get(kind, kind)} is not supported here")
    return out.astype(f32, copy=False).reshape(rows, n)


# ---- quantizing: quantize_row_*_ref ----------------------------------------------------

def _nearest_int(v):
    """ggml's nearest_int (adding 1.5 * 2^23 in float32): round half to even."""
    return np.rint(np.asarray(v, f32)).astype(np.int32)


def _roundf(v):
    """C's roundf: half away from zero."""
    t = np.trunc(v)
    return (t + np.where(np.abs(v - t) >= 0.5, np.sign(v), 0)).astype(np.int32)


def _to_f16(v):
    return np.asarray(v, f32).astype(np.float16)


def _make_qkx2_quants(x, w, nmax, rmin, rdelta, nstep):
    """x, w (m, n) -> scale (m,), the_min (m,) (>= 0: value = scale * L - the_min), L (m, n)."""
    xmin = np.minimum(x.min(axis=1), 0).astype(f32)
    xmax = x.max(axis=1)
    sum_w = w.sum(axis=1, dtype=f32)
    sum_x = (w * x).sum(axis=1, dtype=f32)
    flat = xmax == xmin
    span = np.where(flat, f32(1), xmax - xmin).astype(f32)
    iscale = f32(nmax) / span
    scale = f32(1) / iscale
    L = np.clip(_nearest_int(iscale[:, None] * (x - xmin[:, None])), 0, nmax)
    best = (w * np.square(scale[:, None] * L + xmin[:, None] - x)).sum(axis=1, dtype=f32)
    the_min = xmin.copy()
    for step in range(nstep + 1):
        iscale = (f32(rmin) + f32(rdelta) * f32(step) + f32(nmax)) / span
        la = np.clip(_nearest_int(iscale[:, None] * (x - xmin[:, None])), 0, nmax)
        lf = la.astype(f32)
        sum_l = (w * lf).sum(axis=1, dtype=f32)
        sum_l2 = (w * lf * lf).sum(axis=1, dtype=f32)
        sum_xl = (w * lf * x).sum(axis=1, dtype=f32)
        D = sum_w * sum_l2 - sum_l * sum_l
        with np.errstate(divide="ignore", invalid="ignore"):
            this_scale = (sum_w * sum_xl - sum_x * sum_l) / D
            this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D
            pos = this_min > 0
            this_scale = np.where(pos, sum_xl / sum_l2, this_scale).astype(f32)
            this_min = np.where(pos, f32(0), this_min).astype(f32)
            err = (w * np.square(this_scale[:, None] * lf + this_min[:, None] - x)).sum(axis=1, dtype=f32)
        better = (D > 0) & (err < best) & ~flat
        L = np.where(better[:, None], la, L)
        best = np.where(better, err, best)
        scale = np.where(better, this_scale, scale)
        the_min = np.where(better, this_min, the_min)
    L = np.where(flat[:, None], 0, L)
    scale = np.where(flat, f32(0), scale)
    return scale.astype(f32), (-the_min).astype(f32), L


def _quantize_k4(x, nmax, rmin, nstep):
    """Q4_K (nmax 15) / Q5_K (31) blocks x (b, 256) -> d, dmin (f16), scales (b, 12), L (b, 256)."""
    nb = x.shape[0]
    xs = x.reshape(nb * 8, 32)
    av_x = np.sqrt(np.square(xs).sum(axis=1, dtype=f32) / f32(32))
    w = av_x[:, None] + np.abs(xs)
    scales, mins, L = _make_qkx2_quants(xs, w, nmax, rmin, 0.1, nstep)
    scales, mins, L = scales.reshape(nb, 8), mins.reshape(nb, 8), L.reshape(nb, 8, 32)
    max_scale = np.maximum(scales.max(axis=1), 0)
    max_min = np.maximum(mins.max(axis=1), 0)
    with np.errstate(divide="ignore"):
        inv_scale = np.where(max_scale > 0, f32(63) / max_scale, f32(0)).astype(f32)
        inv_min = np.where(max_min > 0, f32(63) / max_min, f32(0)).astype(f32)
    ls = np.clip(_nearest_int(inv_scale[:, None] * scales), 0, 63)
    lm = np.clip(_nearest_int(inv_min[:, None] * mins), 0, 63)
    d16, dmin16 = _to_f16(max_scale / f32(63)), _to_f16(max_min / f32(63))
    packed = _pack_scale_min_k4(ls, lm)
    sc, mn = _scale_min_k4(packed)
    d = d16.astype(f32)[:, None] * sc.astype(f32)     # (b, 8)
    dm = dmin16.astype(f32)[:, None] * mn.astype(f32)
    with np.errstate(divide="ignore", invalid="ignore"):
        l2 = np.clip(_nearest_int((xs.reshape(nb, 8, 32) + dm[:, :, None]) / d[:, :, None]), 0, nmax)
    L = np.where((d != 0)[:, :, None], l2, L).reshape(nb, 256)  # ggml keeps L where d is 0
    return d16, dmin16, packed, L


def _nibbles_k4(L):
    """(b, 256) values 0..15 -> the 128 qs bytes (see _k4_values)."""
    q = L.reshape(-1, 4, 2, 32).astype(np.uint8)
    return (q[:, :, 0, :] | (q[:, :, 1, :] << 4)).reshape(-1, 128)


def _make_qx_quants_rmse1(x, nmax):
    """make_qx_quants(n, nmax, x, L, rmse_type 1, no weights) over rows of x (m, n)."""
    idx = np.abs(x).argmax(axis=1)
    signed_max = x[np.arange(x.shape[0]), idx]
    zero = np.abs(signed_max) < GROUP_MAX_EPS
    safe_max = np.where(zero, f32(1), signed_max).astype(f32)
    w = x * x

    def attempt(iscale):
        l = np.clip(_nearest_int(iscale[:, None] * x), -nmax, nmax - 1)
        lf = l.astype(f32)
        return l, (w * x * lf).sum(axis=1, dtype=f32), (w * lf * lf).sum(axis=1, dtype=f32)

    L, sumlx, suml2 = attempt(f32(-nmax) / safe_max)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(suml2 != 0, sumlx / suml2, f32(0)).astype(f32)
    best = scale * sumlx
    for step in range(-9, 10):
        if step == 0:
            continue
        l, slx, sl2 = attempt(-(f32(nmax) + f32(0.1) * f32(step)) / safe_max)
        better = (sl2 > 0) & (slx * slx > best * sl2)
        L = np.where(better[:, None], l, L)
        with np.errstate(divide="ignore", invalid="ignore"):
            scale = np.where(better, slx / sl2, scale).astype(f32)
        best = np.where(better, scale * slx, best)
    L = np.where(zero[:, None], -nmax, L)  # ggml: L = 0, i.e. l = -nmax
    return np.where(zero, f32(0), scale).astype(f32), L + nmax


def _quantize_q6_k(x):
    nb = x.shape[0]
    xs = x.reshape(nb * 16, 16)
    scales, L = _make_qx_quants_rmse1(xs, 32)
    scales, L = scales.reshape(nb, 16), L.reshape(nb, 16, 16)
    idx = np.abs(scales).argmax(axis=1)
    max_scale = scales[np.arange(nb), idx]
    zero = np.abs(max_scale) < GROUP_MAX_EPS
    iscale = f32(-128) / np.where(zero, f32(1), max_scale).astype(f32)
    d16 = _to_f16(f32(1) / iscale)
    sc = np.minimum(127, _nearest_int(iscale[:, None] * scales)).astype(np.int8)
    d = d16.astype(f32)[:, None] * sc.astype(f32)
    with np.errstate(divide="ignore", invalid="ignore"):
        l2 = np.clip(_nearest_int(xs.reshape(nb, 16, 16) / d[:, :, None]), -32, 31) + 32
    L = np.where((d != 0)[:, :, None], l2, L).reshape(nb, 2, 4, 32).astype(np.uint8)
    ql = np.concatenate([(L[:, :, 0] & 0xF) | ((L[:, :, 2] & 0xF) << 4),
                         (L[:, :, 1] & 0xF) | ((L[:, :, 3] & 0xF) << 4)], axis=2).reshape(nb, 128)
    qh = ((L[:, :, 0] >> 4) | ((L[:, :, 1] >> 4) << 2) | ((L[:, :, 2] >> 4) << 4) |
          ((L[:, :, 3] >> 4) << 6)).reshape(nb, 64)
    out = np.concatenate([ql, qh, sc.view(np.uint8), d16.view(np.uint8).reshape(nb, 2)], axis=1)
    out[zero] = 0  # ggml: an all-zero block
    return out


def quantize(kind, x):
    """x float32 (rows, n) -> uint8 (rows, row_bytes(kind, n)) (quantize_row_*_ref)."""
    x = np.ascontiguousarray(x, dtype=f32)
    rows, n = x.shape
    values, size = BLOCKS[kind]
    rb = row_bytes(kind, n)
    xb = x.reshape(-1, values)
    nb = xb.shape[0]
    if kind == F32:
        return xb.view(np.uint8).reshape(rows, rb)
    if kind == F16:
        return xb.astype(np.float16).view(np.uint8).reshape(rows, rb)
    if kind == BF16:  # round to nearest even, as ggml_compute_fp32_to_bf16 (finite values)
        u = xb.view(np.uint32).astype(np.uint64)
        u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
        return u.view(np.uint8).reshape(rows, rb)
    if kind == Q8_0:
        d = np.abs(xb).max(axis=1) / f32(127)
        with np.errstate(divide="ignore"):
            inv = np.where(d != 0, f32(1) / d, f32(0)).astype(f32)
        q = _roundf(xb * inv[:, None]).astype(np.int8)
        return np.concatenate([_to_f16(d).view(np.uint8).reshape(nb, 2), q.view(np.uint8)],
                              axis=1).reshape(rows, rb)
    if kind == Q4_0:
        idx = np.abs(xb).argmax(axis=1)
        d = xb[np.arange(nb), idx] / f32(-8)
        with np.errstate(divide="ignore"):
            inv = np.where(d != 0, f32(1) / d, f32(0)).astype(f32)
        q = np.minimum(15, np.trunc(xb * inv[:, None] + f32(8.5)).astype(np.int8)).astype(np.uint8)
        qs = q[:, :16] | (q[:, 16:] << 4)
        return np.concatenate([_to_f16(d).view(np.uint8).reshape(nb, 2), qs], axis=1).reshape(rows, rb)
    if kind in (Q4_K, Q5_K):
        nmax, rmin, nstep = (15, -1.0, 20) if kind == Q4_K else (31, -0.5, 15)
        d16, dmin16, scales, L = _quantize_k4(xb, nmax, rmin, nstep)
        head = [d16.view(np.uint8).reshape(nb, 2), dmin16.view(np.uint8).reshape(nb, 2), scales]
        if kind == Q4_K:
            return np.concatenate(head + [_nibbles_k4(L)], axis=1).reshape(rows, rb)
        fifth = (L >> 4).astype(np.uint8).reshape(nb, 8, 32)
        qh = np.zeros((nb, 32), np.uint8)
        for bit in range(8):
            qh |= fifth[:, bit, :] << bit
        return np.concatenate(head + [qh, _nibbles_k4(L & 0xF)], axis=1).reshape(rows, rb)
    if kind == Q6_K:
        return _quantize_q6_k(xb).reshape(rows, rb)
    raise ValueError(f"quantize: {NAMES.get(kind, kind)} is not supported here")


# ---- random valid blocks ---------------------------------------------------------------

def _random_f16(rng, count, lo=-12, hi=-2, signed=True):
    """Finite f16 scales: magnitudes 2^lo..2^hi, a few zeros and subnormals, both signs."""
    mag = np.exp2(rng.uniform(lo, hi, count)).astype(f32)
    pick = rng.random(count)
    mag = np.where(pick < 0.02, f32(0), mag)
    mag = np.where((pick >= 0.02) & (pick < 0.05),
                   rng.integers(1, 1024, count).astype(f32) * f32(2.0 ** -24), mag)
    if signed:
        mag = np.where(rng.random(count) < 0.15, -mag, mag)
    return mag.astype(np.float16).view(np.uint8).reshape(count, 2)


def random_blocks(kind, rows, n, rng):
    """uint8 (rows, row_bytes(kind, n)) of random valid blocks of `kind`."""
    rb = row_bytes(kind, n)
    nb = rows * rb // BLOCKS[kind][1]
    if kind == F32:
        return rng.normal(0, 1, (rows, n)).astype(f32).view(np.uint8)
    if kind == F16:
        return rng.normal(0, 1, (rows, n)).astype(np.float16).view(np.uint8)
    if kind == BF16:
        return quantize(BF16, rng.normal(0, 1, (rows, n)).astype(f32))
    b = rng.integers(0, 256, (nb, BLOCKS[kind][1]), dtype=np.uint8)
    if kind in (Q8_0, Q4_0, Q5_0):
        b[:, 0:2] = _random_f16(rng, nb)
    elif kind in (Q4_K, Q5_K):
        b[:, 0:2] = _random_f16(rng, nb)
        b[:, 2:4] = _random_f16(rng, nb)
    elif kind == Q6_K:
        b[:, 208:210] = _random_f16(rng, nb)
    elif kind == Q2_K:
        b[:, 80:82] = _random_f16(rng, nb)
        b[:, 82:84] = _random_f16(rng, nb)
    return b.reshape(rows, rb)
