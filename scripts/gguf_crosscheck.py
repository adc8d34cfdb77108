#!/usr/bin/python3
"""Decode every tensor of GGUF files with scripts/make_gguf.py's decoders and with gguf-py's.

Usage:
    scripts/gguf_crosscheck.py FILE.gguf [FILE.gguf ...] [--gguf-py DIR] [--kv]

Why: make_gguf.py's block decoders are written from the format's definition; this checks
them, outside the test suite, against llama.cpp's own Python package on any file, ours
or one made by llama.cpp's llama-quantize. Expected: bit-exact (max |diff| 0) for every
type both sides know. It also checks that the values of F32 tensors agree and, with --kv,
prints the file's metadata as gguf-py reads it (arrays abridged).
Needs gguf-py (default /work/scratch/llama.cpp/gguf-py; gguf-py itself needs numpy only
for reading). Exit status 1 when any tensor differs.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_gguf  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--gguf-py", default="/work/scratch/llama.cpp/gguf-py")
    ap.add_argument("--kv", action="store_true", help="print the metadata too")
    a = ap.parse_args()
    sys.path.insert(0, a.gguf_py)
    try:
        import gguf
    except ImportError as e:
        sys.exit(f"gguf_crosscheck.py: cannot import gguf-py from {a.gguf_py}: {e}")

    bad = False
    for path in a.files:
        r = gguf.GGUFReader(path)
        print(f"{path}: {len(r.tensors)} tensors, {len(r.fields)} metadata keys")
        if a.kv:
            for k, f in r.fields.items():
                if k.startswith("GGUF."):
                    continue
                v = f.contents()
                if isinstance(v, list):
                    v = f"[{len(v)} items] {v[:4]}..."
                elif isinstance(v, str) and len(v) > 60:
                    v = repr(v[:60]) + "..."
                print(f"  {k} = {v}")
        stats = {}  # type -> [tensors, values, max |diff|, skipped]
        for t in r.tensors:
            tname = t.tensor_type.name.lower()
            s = stats.setdefault(tname, [0, 0, 0.0, 0])
            if tname not in make_gguf.GGML:
                s[3] += 1
                continue
            raw = np.asarray(t.data)
            ref = np.asarray(gguf.quants.dequantize(raw, t.tensor_type), dtype=np.float32).reshape(-1)
            mine = make_gguf.decode(raw.view(np.uint8), tname)
            if mine.shape != ref.shape:
                print(f"  {t.name}: {mine.size} values decoded, gguf-py {ref.size}")
                bad = True
                continue
            diff = float(np.max(np.abs(mine.astype(np.float64) - ref.astype(np.float64)))) if ref.size else 0.0
            same_nan = np.array_equal(np.isnan(mine), np.isnan(ref))
            if not same_nan or diff != 0 or not np.isfinite(diff):
                print(f"  {t.name} ({tname}): max |diff| {diff}, NaNs agree: {same_nan}")
                bad = bad or not same_nan or diff != 0
            s[0] += 1
            s[1] += ref.size
            s[2] = max(s[2], diff)
        for tname, (n, vals, diff, skipped) in sorted(stats.items()):
            extra = f", {skipped} not decoded here" if skipped else ""
            print(f"  {tname:5s} {n:3d} tensors {vals:10d} values  max |diff| {diff:g}{extra}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
