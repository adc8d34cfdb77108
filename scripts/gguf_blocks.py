#!/usr/bin/python3
"""GGUF's block types in numpy: the encoders and decoders scripts/make_gguf.py (and the
scripts that import it) write and read tensors with.

Written from the format's definition (ggml's block layouts, as model/weight_format.h
restates them); scripts/gguf_crosscheck.py checks the decoders against gguf-py's on any
file. Encoders take float32 [rows, cols] (cols a whole number of blocks) and return the
rows' blocks as uint8 [rows, row_bytes]; decoders take such bytes (any shape whose last
axis is whole blocks) and return float32 values, flat. The encoders choose scales simply
(max-abs / min-max), as model/weight_format.c's do: valid files, not llama-quantize's search.
"""
import numpy as np

F32 = np.float32

# ggml type ids, values per block, bytes per block
GGML = {"f32": (0, 1, 4), "f16": (1, 1, 2), "q4_0": (2, 32, 18), "q5_0": (6, 32, 22), "iq4_nl": (20, 32, 18),
        "q8_0": (8, 32, 34), "q4_k": (12, 256, 144),
        "q5_k": (13, 256, 176), "q6_k": (14, 256, 210), "bf16": (30, 1, 2)}
GGML_NAME = {v[0]: k for k, v in GGML.items()}


# ---------------------------------------------------------------- f16 / bf16 helpers

def f16(x):
    """float32 -> little-endian float16 (round to nearest even)."""
    return np.asarray(x, dtype=F32).astype("<f2")


def bf16_to_f32(u16):
    return (np.asarray(u16, dtype="<u2").astype(np.uint32) << 16).view(F32)


def f32_to_bf16(x):
    """float32 -> bf16 bits, round to nearest even (NaN kept a NaN)."""
    u = np.ascontiguousarray(x, dtype=F32).view(np.uint32)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")
    return np.where(np.isnan(x), np.uint16(0x7FC0), r).astype("<u2")


def safe_div(a, b):
    """a / b where b != 0, else 0 (float32)."""
    out = np.zeros(np.broadcast(a, b).shape, dtype=F32)
    np.divide(a, b, out=out, where=b != 0)
    return out


# ---------------------------------------------------------------- encoders
# Each takes float32 [rows, cols] (cols a multiple of the block) and returns uint8
# [rows, cols / block * block_bytes]: the rows' blocks in order, as in the file.

def encode_q8_0(x):
    rows = x.shape[0]
    b = x.reshape(-1, 32)
    d = f16(np.abs(b).max(axis=1) / F32(127))
    q = np.clip(np.rint(safe_div(b, d.astype(F32)[:, None])), -127, 127).astype(np.int8)
    out = np.empty((b.shape[0], 34), dtype=np.uint8)
    out[:, 0:2] = d.view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return out.reshape(rows, -1)


def encode_q45_0(x, half):
    """Q4_0 (half 8) / Q5_0 (half 16): d = max|x| / (half - 1) per 32, q = rint(x / d) + half
    in [0, 2 half - 1]; value l the low nibble of byte l, 16 + l the high one (Q5_0: the fifth
    bits as one little-endian uint32 before the nibbles)."""
    rows = x.shape[0]
    b = x.reshape(-1, 32)
    d = f16(np.abs(b).max(axis=1) / F32(half - 1))
    q = (np.clip(np.rint(safe_div(b, d.astype(F32)[:, None])), -half, half - 1) + half).astype(np.uint8)
    nib = (q[:, :16] & 15) | ((q[:, 16:] & 15) << 4)
    parts = [d.view(np.uint8).reshape(-1, 2)]
    if half == 16:
        bits = ((q >> 4) & 1).astype(np.uint32) << np.arange(32, dtype=np.uint32)
        parts.append(bits.sum(axis=1, dtype=np.uint32).astype("<u4").view(np.uint8).reshape(-1, 4))
    parts.append(nib.astype(np.uint8))
    return np.concatenate(parts, axis=1).reshape(rows, -1)


IQ4_NL_VALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113],
                         dtype=F32)  # the format's 16 levels


def encode_iq4_nl(x):
    """IQ4_NL: d = -(the value of largest magnitude) / 127 per 32, each value the code of its
    nearest level (model/weight_format.c's choice), packed as Q4_0's nibbles."""
    rows = x.shape[0]
    b = x.reshape(-1, 32)
    big = np.take_along_axis(b, np.abs(b).argmax(axis=1)[:, None], axis=1)[:, 0]
    d = f16(-big / F32(127))
    want = safe_div(b, d.astype(F32)[:, None])
    q = np.abs(want[:, :, None] - IQ4_NL_VALUES[None, None, :]).argmin(axis=2).astype(np.uint8)
    q[d.astype(F32) == 0] = 8
    nib = (q[:, :16] & 15) | ((q[:, 16:] & 15) << 4)
    return np.concatenate([d.view(np.uint8).reshape(-1, 2), nib], axis=1).reshape(rows, -1)


def pack_scales_k4(sc, m):
    """Eight 6-bit scales and mins [n, 8] -> 12 bytes [n, 12] (ggml's get_scale_min_k4 order):
    bytes 0-3: sc[0..3] | sc[4..7] >> 4 << 6; bytes 4-7: m[0..3] | m[4..7] >> 4 << 6;
    bytes 8-11: sc[4..7] & 15 | (m[4..7] & 15) << 4."""
    out = np.empty((sc.shape[0], 12), dtype=np.uint8)
    out[:, 0:4] = (sc[:, 0:4] & 63) | ((sc[:, 4:8] >> 4) << 6)
    out[:, 4:8] = (m[:, 0:4] & 63) | ((m[:, 4:8] >> 4) << 6)
    out[:, 8:12] = (sc[:, 4:8] & 15) | ((m[:, 4:8] & 15) << 4)
    return out


def unpack_scales_k4(s):
    """[n, 12] bytes -> (sc, m) each [n, 8] uint8."""
    sc = np.empty((s.shape[0], 8), dtype=np.uint8)
    m = np.empty((s.shape[0], 8), dtype=np.uint8)
    sc[:, 0:4] = s[:, 0:4] & 63
    m[:, 0:4] = s[:, 4:8] & 63
    sc[:, 4:8] = (s[:, 8:12] & 15) | ((s[:, 0:4] >> 6) << 4)
    m[:, 4:8] = (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)
    return sc, m


def quantize_k_asym(x, nmax):
    """Q4_K (nmax 15) / Q5_K (nmax 31) values: (d, dmin f16 [n], sc, m uint8 [n, 8], q [n, 8, 32])."""
    b = x.reshape(-1, 8, 32)
    lo = np.minimum(b.min(axis=2), F32(0))
    scale = (b.max(axis=2) - lo) / F32(nmax)
    mins = -lo
    d = f16(scale.max(axis=1) / F32(63))
    dmin = f16(mins.max(axis=1) / F32(63))
    df, dminf = d.astype(F32), dmin.astype(F32)
    sc = np.clip(np.rint(safe_div(scale, df[:, None])), 0, 63).astype(np.uint8)
    m = np.clip(np.rint(safe_div(mins, dminf[:, None])), 0, 63).astype(np.uint8)
    ds = df[:, None] * sc.astype(F32)  # the decoder's float32 products
    dm = dminf[:, None] * m.astype(F32)
    q = np.clip(np.rint(safe_div(b + dm[:, :, None], ds[:, :, None])), 0, nmax).astype(np.uint8)
    return d, dmin, sc, m, q


def encode_q45_k(x, nmax):
    """Q4_K (nmax 15, 144 bytes) / Q5_K (nmax 31, 176 bytes): d, dmin, the 12 scale bytes,
    Q5_K's fifth bits (bit j of qh[l]: sub-block j's value l), then the low nibbles, 64-value
    chunk c holding sub-block 2c in the low nibbles and 2c+1 in the high ones."""
    rows = x.shape[0]
    d, dmin, sc, m, q = quantize_k_asym(x, nmax)
    n = q.shape[0]
    out = np.empty((n, 144 if nmax == 15 else 176), dtype=np.uint8)
    out[:, 0:2] = d.view(np.uint8).reshape(n, 2)
    out[:, 2:4] = dmin.view(np.uint8).reshape(n, 2)
    out[:, 4:16] = pack_scales_k4(sc, m)
    if nmax == 31:
        hi = (q >> 4).astype(np.uint8)  # [n, 8, 32]
        out[:, 16:48] = (hi << np.arange(8, dtype=np.uint8)[None, :, None]).sum(axis=1, dtype=np.uint8)
    q = (q & 15).reshape(n, 4, 2, 32)
    out[:, -128:] = (q[:, :, 0, :] | (q[:, :, 1, :] << 4)).reshape(n, 128)
    return out.reshape(rows, -1)


def encode_q6_k(x):
    rows = x.shape[0]
    b = x.reshape(-1, 16, 16)
    n = b.shape[0]
    scale = np.abs(b).max(axis=2) / F32(31)  # [n, 16]
    d = f16(scale.max(axis=1) / F32(127))
    df = d.astype(F32)
    sc = np.clip(np.rint(safe_div(scale, df[:, None])), 0, 127).astype(np.int8)
    ds = df[:, None] * sc.astype(F32)
    q = (np.clip(np.rint(safe_div(b, ds[:, :, None])), -32, 31) + 32).astype(np.uint8)
    q = q.reshape(n, 2, 4, 32)  # value 128h + 32k + l
    lo, hi = q & 15, q >> 4
    out = np.empty((n, 210), dtype=np.uint8)
    ql = out[:, 0:128].reshape(n, 2, 2, 32)
    ql[:, :, 0, :] = lo[:, :, 0, :] | (lo[:, :, 2, :] << 4)
    ql[:, :, 1, :] = lo[:, :, 1, :] | (lo[:, :, 3, :] << 4)
    out[:, 128:192] = (hi[:, :, 0, :] | (hi[:, :, 1, :] << 2) | (hi[:, :, 2, :] << 4)
                       | (hi[:, :, 3, :] << 6)).reshape(n, 64)
    out[:, 192:208] = sc.view(np.uint8)
    out[:, 208:210] = d.view(np.uint8).reshape(n, 2)
    return out.reshape(rows, -1)


def encode(x, t):
    """float32 [rows, cols] -> the bytes of type t, uint8 [rows, row_bytes]."""
    if t == "f32":
        return np.ascontiguousarray(x, dtype="<f4").view(np.uint8)
    if t == "f16":
        return f16(x).view(np.uint8)
    if t == "bf16":
        return f32_to_bf16(x).view(np.uint8)
    return {"q8_0": encode_q8_0, "q6_k": encode_q6_k,
            "q4_k": lambda v: encode_q45_k(v, 15),
            "q5_k": lambda v: encode_q45_k(v, 31),
            "q4_0": lambda v: encode_q45_0(v, 8),
            "q5_0": lambda v: encode_q45_0(v, 16),
            "iq4_nl": encode_iq4_nl}[t](np.ascontiguousarray(x, dtype=F32))


# ---------------------------------------------------------------- decoders
# bytes of type t (any shape whose last axis is whole blocks) -> float32 values, flat.

def le_f16(raw):
    return np.ascontiguousarray(raw).view("<f2").astype(F32).reshape(-1)


def decode(raw, t):
    raw = np.ascontiguousarray(raw, dtype=np.uint8)
    if t == "f32":
        return raw.view("<f4").astype(F32).reshape(-1)
    if t == "f16":
        return raw.view("<f2").astype(F32).reshape(-1)
    if t == "bf16":
        return bf16_to_f32(raw.view("<u2")).reshape(-1)
    bpb = GGML[t][2]
    b = raw.reshape(-1, bpb)
    n = b.shape[0]
    if t == "q8_0":
        d = le_f16(b[:, 0:2])
        return (d[:, None] * b[:, 2:].view(np.int8).astype(F32)).reshape(-1)
    if t == "iq4_nl":
        d = le_f16(b[:, 0:2])
        q = np.concatenate([b[:, 2:] & 15, b[:, 2:] >> 4], axis=1)
        return (d[:, None] * IQ4_NL_VALUES[q]).reshape(-1)
    if t in ("q4_0", "q5_0"):
        d = le_f16(b[:, 0:2])
        qs = b[:, 2:] if t == "q4_0" else b[:, 6:]
        q = np.concatenate([qs & 15, qs >> 4], axis=1).astype(np.int16)
        if t == "q5_0":
            qh = np.ascontiguousarray(b[:, 2:6]).view("<u4").reshape(-1, 1)
            q |= (((qh >> np.arange(32, dtype=np.uint32)) & 1) << 4).astype(np.int16)
        return (d[:, None] * (q - (8 if t == "q4_0" else 16)).astype(F32)).reshape(-1)
    if t in ("q4_k", "q5_k"):
        d, dmin = le_f16(b[:, 0:2]), le_f16(b[:, 2:4])
        sc, m = unpack_scales_k4(b[:, 4:16])
        qs = b[:, 16:] if t == "q4_k" else b[:, 48:]
        qs = qs.reshape(n, 4, 1, 32)
        q = np.concatenate([qs & 15, qs >> 4], axis=2).reshape(n, 8, 32)
        if t == "q5_k":
            qh = b[:, 16:48]  # bit j of qh[l]: fifth bit of sub-block j, value l
            q = q | (((qh[:, None, :] >> np.arange(8, dtype=np.uint8)[None, :, None]) & 1) << 4)
        d1 = d[:, None] * sc.astype(F32)  # float32 products, as ggml's d * sc
        m1 = dmin[:, None] * m.astype(F32)
        return (d1[:, :, None] * q.astype(F32) - m1[:, :, None]).reshape(-1)
    if t == "q6_k":
        ql = b[:, 0:128].reshape(n, 2, 2, 32)
        qh = b[:, 128:192].reshape(n, 2, 1, 32)
        sc = b[:, 192:208].view(np.int8).astype(F32)  # [n, 16]
        d = le_f16(b[:, 208:210])
        lo = np.stack([ql[:, :, 0] & 15, ql[:, :, 1] & 15, ql[:, :, 0] >> 4, ql[:, :, 1] >> 4], axis=2)
        hi = (qh >> np.array([0, 2, 4, 6], dtype=np.uint8)[None, None, :, None]) & 3
        q = ((lo | (hi << 4)).astype(np.int16) - 32).astype(F32).reshape(n, 16, 16)
        return ((d[:, None] * sc)[:, :, None] * q).reshape(-1)
    raise ValueError(t)
