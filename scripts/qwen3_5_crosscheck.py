#!/usr/bin/python3
"""Cross-check scripts/qwen3_5_ref.py (float64) against llama.cpp's own qwen35 / qwen35moe
graphs on the same random weights: logits at every position of the golden prompts.

Not part of the test suite: it needs a built llama.cpp and a small program linked to it
that prints the logits of every position of a token-id list:
    TOOL MODEL.gguf ID,ID,... OUT.f32 [threads]   -> float32 [positions][vocab]
(llama_context_default_params, n_ctx = n_batch = 8192, one sequence, every position's
logits; the one this was run with is 30 lines over llama.h's public API).

Usage (from the repository root):
    LD_LIBRARY_PATH=LLAMA/build/bin scripts/qwen3_5_crosscheck.py --tool TOOL [--work DIR]
        [--models dense,moe] [--threads 2] [--fixture-dims]

What it does, per model (dense: the `tiny` preset, multimodal layout, tied;
moe: `tiny-moe`, text-only, 8 experts top-2 + shared expert, untied):
 1. makes the model with scripts/make_random_qwen3_5.py (seed 3, as the fixtures) but
    with linear_value_head_dim = linear_key_head_dim (32): llama.cpp's qwen35 loader and
    graph take the value head dim to be ssm.state_size (= the key head dim), so the
    fixtures' 32 / 24 cannot load there ("blk.0.attn_qkv.weight has wrong shape; expected
    64, 256, got 64, 224"). --fixture-dims keeps 24 (to see that refusal).
 2. writes it as an F32 GGUF with scripts/make_gguf_qwen3_5.py;
 3. runs TOOL on each prompt of tests/fixtures/tiny-qwen3-golden/golden.json and
    qwen3_5_ref.py's float64 forward (chunked form) on the same ids;
 4. prints per prompt: positions, max |logit difference| over all positions and the whole
    vocabulary, the largest |logit| (for scale), and whether the argmax agrees at every
    position (positions whose float64 top-2 margin is under 1e-3 are counted apart as
    near-ties; a disagreement there is not one).
Exit status 1 when a prompt's max difference exceeds --tol (default 0.05).

Measured (llama.cpp of Aug 2026, CPU, 2 threads; the dk = dv = 32 variants; logits up to
~36..47 in magnitude), max |llama.cpp - reference| over every position and token:
    prompt   len001  len002  len007  len016  len031  len064  len255  len256  len257  len300
    dense    1.27e-3 1.32e-3 2.18e-3 1.99e-3 2.03e-3 1.52e-3 1.18e-3 1.32e-3 1.32e-3 1.32e-3
    moe      3.47e-3 4.74e-3 5.90e-3 1.74e-2 1.03e-2 7.16e-3 5.94e-3 7.55e-3 7.55e-3 7.55e-3
and the argmax agrees at every position of every prompt (moe len256..300: one near-tie
position, the same argmax anyway). Both sides implement the same model; the check is
sensitive: the dense GGUF written without the value-head reorder, or without the norms'
+1, gives max |diff| 49 and 39 on len007 (argmax 0 of 7 positions).
The gap is ~25x the reference's own float32-vs-float64 one (5e-5 dense, 1.6e-4 moe on
len001..len016) and not llama.cpp's F16 KV cache (an F32 cache gives the same numbers);
the source inside llama.cpp's float32 graph was not pinned down. About 1 min a model.
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_random_qwen3_5 as mr  # noqa: E402
import qwen3_5_ref as ref  # noqa: E402

PRESET = {"dense": "tiny", "moe": "tiny-moe"}


def make_model(kind, out, fixture_dims):
    text = mr.PRESETS[PRESET[kind]][1]
    if not fixture_dims:
        text["linear_value_head_dim"] = text["linear_key_head_dim"]
    argv = sys.argv
    sys.argv = ["make_random_qwen3_5.py", "--preset", PRESET[kind], "--seed", "3", "--out", out]
    try:
        mr.main()
    finally:
        sys.argv = argv


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tool", required=True, help="the logits-dumping program linked to llama.cpp")
    ap.add_argument("--work", default="build/qwen3_5_crosscheck", help="folder for models and dumps")
    ap.add_argument("--models", default="dense,moe")
    ap.add_argument("--prompts", default=os.path.join(HERE, "..", "tests", "fixtures",
                                                      "tiny-qwen3-golden", "golden.json"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tol", type=float, default=0.05)
    ap.add_argument("--fixture-dims", action="store_true",
                    help="keep the fixtures' value head dim 24 (llama.cpp refuses the model)")
    a = ap.parse_args()
    prompts = json.load(open(a.prompts))["prompts"]
    bad = False
    for kind in a.models.split(","):
        d = os.path.join(a.work, kind)
        gguf = d + ".gguf"
        make_model(kind, d, a.fixture_dims)
        subprocess.run([sys.executable, os.path.join(HERE, "make_gguf_qwen3_5.py"),
                        "--model", d, "--out", gguf, "--type", "f32"], check=True)
        m = ref.Qwen35(d, "float64", "chunked", 64)
        print(f"== {kind}: {gguf}")
        print(f"{'prompt':8s} {'pos':>4s} {'max|diff|':>10s} {'max|logit|':>10s} "
              f"{'argmax':>12s} near-ties")
        for p in prompts:
            ids = [int(t) for t in p["prompt_ids"]]
            dump = os.path.join(a.work, f"{kind}-{p['name']}.f32")
            r = subprocess.run([a.tool, gguf, ",".join(map(str, ids)), dump, str(a.threads)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            if r.returncode != 0:
                tail = [ln for ln in r.stderr.splitlines() if "error" in ln or "fail" in ln][-3:]
                print(f"{p['name']:8s} llama.cpp failed (exit {r.returncode}): " + " | ".join(tail))
                bad = True
                break
            R = m.forward(ids)[0]
            L = np.fromfile(dump, dtype="<f4").reshape(len(ids), -1).astype(np.float64)
            os.remove(dump)
            if L.shape != R.shape:
                sys.exit(f"{p['name']}: llama.cpp gave {L.shape}, the reference {R.shape}")
            diff = np.abs(L - R).max()
            top2 = np.sort(R, axis=1)[:, -2:]
            tie = (top2[:, 1] - top2[:, 0]) < 1e-3
            agree = L.argmax(1) == R.argmax(1)
            n_ok = int((agree | tie).sum())
            print(f"{p['name']:8s} {len(ids):4d} {diff:10.3g} {np.abs(R).max():10.3g} "
                  f"{n_ok:5d}/{len(ids):<4d} ok  {int(tie.sum())} "
                  f"({int((tie & ~agree).sum())} differ)")
            bad |= diff > a.tol or n_ok < len(ids)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
