#!/usr/bin/python3
"""What an fp8 (e4m3, scale 1) KV cache does to a model's logits, against a bf16 cache, on the CPU.

scripts/qwen3_ref.py's float64 forward with K (after RoPE) and V rounded where they would enter
the cache: to bf16 (the CUDA runner's default cache) or to e4m3 (--kv-cache-dtype fp8: round to
nearest even, saturating at +-448, as cuda/cuda_kv_fp8.h and fp8_e4m3_from_float). Everything else
stays float64, so the difference between the two runs is the cache's rounding alone: what the
CUDA runner's fp8-against-bf16 comparison (tests/test_cuda_kv_fp8.c) must expect, before the
GPU's own bf16 noise. Teacher-forced: each golden prompt followed by its golden greedy tokens.

Usage: scripts/kv_fp8_emulate.py [MODEL [GOLDEN]]
  (defaults: tests/fixtures/tiny-qwen3 and tests/fixtures/tiny-qwen3-golden/golden.json)
Prints per prompt: relative L2 of the fp8 logits against the bf16 ones (all positions, and the
worst position), the largest |logit difference|, and the positions whose argmax differs with
the bf16 top-1/top-2 margin; then the maxima over all prompts.
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qwen3_ref  # noqa: E402


def to_bf16(x):
    """float32 rounding to bf16, nearest even (half.h's f32_to_bf16), back as float64."""
    b = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16 << 16
    return b.astype(np.uint32).view(np.float32).astype(np.float64)


def e4m3_bytes(x):
    """float32 -> e4m3 bytes: cuda/cuda_kv_fp8.h's kv_fp8_from_float_bits, vectorised."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.int64)
    sign = (u >> 24) & 0x80
    a = u & 0x7FFFFFFF
    normal = (((a + 0x7FFFF + ((a >> 20) & 1)) >> 20) - (120 << 3)) & 0xFF
    e = a >> 23
    sig = np.where(e > 0, (a & 0x7FFFFF) | 0x800000, a)
    shift = np.minimum(141 - np.maximum(e, 1), 30)
    q = sig >> shift
    rem = sig & ((1 << shift) - 1)
    half = 1 << (shift - 1)
    sub = q + ((rem > half) | ((rem == half) & ((q & 1) == 1)))
    mag = np.where(a >= 0x43E00000, 0x7E, np.where(a >= 0x3C800000, normal, sub))
    return np.where(a > 0x7F800000, 0x7F, sign | mag).astype(np.uint8)


def e4m3_value(b):
    """e4m3 bytes -> float64 (no NaNs reach here)."""
    b = b.astype(np.int64)
    e, m = (b >> 3) & 15, b & 7
    mag = np.where(e == 0, m * 2.0**-9, (8 + m) * np.exp2(e - 10.0))
    return np.where(b & 0x80, -mag, mag)


class CachedQwen3(qwen3_ref.Qwen3):
    """qwen3_ref's forward with K and V rounded as a cache of `mode` would hold them."""

    def __init__(self, model_dir, mode):
        super().__init__(model_dir)
        self.mode = mode

    def forward(self, ids, **kw):
        # qwen3_ref.forward calls np.repeat once per layer, on (k, v) after RoPE, just before
        # attention reads them: the cache's rounding goes there
        plain = np.repeat
        mode = self.mode

        def cached(a, n, axis=None):
            if mode == "bf16":
                a = to_bf16(a)
            elif mode == "fp8":
                a = e4m3_value(e4m3_bytes(a))
            return plain(a, n, axis=axis)

        qwen3_ref.np.repeat = cached
        try:
            return super().forward(ids, **kw)
        finally:
            qwen3_ref.np.repeat = plain


def rel(a, b):
    return float(np.sqrt(((a - b) ** 2).sum() / (b**2).sum()))


def main():
    model = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/tiny-qwen3"
    golden = sys.argv[2] if len(sys.argv) > 2 else "tests/fixtures/tiny-qwen3-golden/golden.json"
    with open(golden) as f:
        prompts = json.load(f)["prompts"]
    bf, f8 = CachedQwen3(model, "bf16"), CachedQwen3(model, "fp8")
    worst_rel = worst_pos = worst_abs = worst_flip = 0.0
    for p in prompts:
        ids = p["prompt_ids"] + p["greedy_ids"][:-1]
        lb, lf = bf.forward(ids), f8.forward(ids)
        top2 = np.sort(lb, axis=-1)[:, -2:]
        margin = top2[:, 1] - top2[:, 0]
        flips = [(i, round(float(margin[i]), 3)) for i in range(len(ids)) if lb[i].argmax() != lf[i].argmax()]
        r, rp = rel(lf, lb), max(rel(lf[i], lb[i]) for i in range(len(ids)))
        d = float(np.abs(lf - lb).max())
        print(f"{p['name']}: {len(ids)} positions, fp8 vs bf16 cache: rel L2 {r:.3e} (worst position {rp:.3e}), "
              f"max |logit diff| {d:.3f}, argmax differs at (position, bf16 margin) {flips}")
        worst_rel, worst_pos, worst_abs = max(worst_rel, r), max(worst_pos, rp), max(worst_abs, d)
        worst_flip = max([worst_flip] + [m for _, m in flips])
    print(f"all prompts: rel L2 <= {worst_rel:.3e}, worst position {worst_pos:.3e}, max |logit diff| "
          f"{worst_abs:.3f}, largest bf16 margin at an argmax change {worst_flip:.3f}")


if __name__ == "__main__":
    main()
