#!/usr/bin/env python3
"""Compares logits dumped by `nanovllm generate --dump-logits` across backends
and with Hugging Face transformers (for scripts/gpu_check.sh).

    python3 scripts/compare_logits.py MODEL_DIR CASES.json [--hf]

CASES.json is a list of {"name", "ids", "prompt_len", "cpu_logits",
"cuda_logits", "cpu_greedy", "cuda_greedy"}: ids is the prompt followed by
the CPU's greedy continuation (teacher forcing, so every position's logits
line up), the logits files hold float32 [len(ids), vocab], and the greedy
lists are what each backend generated on its own from the prompt.

Prints one JSON line per case: relative errors ||a - b|| / ||b||, how often
the argmax agrees where the reference's top-1 / top-2 margin is at least
0.1 (reported, not judged), and the verdicts gpu_check.sh prints:

fidelity_ok: with --hf and transformers installed, the GPU's distance from
  transformers' float32 logits must be at or under transformers' own bf16
  distance from them (rel_cuda_hf <= rel_hfbf16_hf): a bf16 path is as
  faithful as the reference's own bf16 (on the H100 run: GPU 2.0-2.1%,
  transformers bf16 4.1-4.3%). None without transformers.
logits_ok: GPU vs CPU within rel_limit: transformers' bf16 distance from
  float32 where known, else REL_LIMIT_NO_HF. Both runners round to bf16
  (each ~2% from float32), so they may sit as far apart as bf16 is from
  float32, and a wrong kernel is much further.
greedy_ok: free-running greedy decoding GPU vs CPU may diverge only where
  bf16 noise can flip the choice: at the first divergence the CPU's logit
  for its own token may exceed its logit for the GPU's token by at most
  greedy_gap_limit = 4 sqrt(2) sigma, sigma = the per-logit noise there
  (the case's GPU-vs-CPU relative error, capped at rel_limit, times the rms
  of the CPU's logits at that step); the difference of two logits each off
  by sigma has standard deviation sqrt(2) sigma, so a correct GPU exceeds
  4 of them about once in 30000 divergences. A divergence at a clear gap is
  a FAIL however late it comes; no divergence is ok.
"""
import json
import math
import sys

import numpy as np

MARGIN = 0.1  # argmax agreement is counted where the reference's margin is at least this
REL_LIMIT_NO_HF = 4e-2  # transformers' bf16 vs float32 on the random 0.6B: 4.1-4.3% (H100, 2026-11-26)
GAP_SIGMAS = 4.0


def rel(a, b):
    return float(np.linalg.norm((a - b).ravel()) / max(np.linalg.norm(b.ravel()), 1e-30))


def margins(logits):
    top2 = np.partition(logits, -2, axis=-1)[:, -2:]
    return top2[:, 1] - top2[:, 0]


def argmax_agreement(a, ref):
    m = margins(ref)
    clear = m >= MARGIN
    same = np.argmax(a, axis=-1) == np.argmax(ref, axis=-1)
    return int(same[clear].sum()), int(clear.sum())


_hf_models = {}


def hf_logits(model_dir, ids, dtype_name):
    """Logits of Qwen3ForCausalLM on the same weights in float32 or bfloat16
    (each loaded once), as float32."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.float32 if dtype_name == "float32" else torch.bfloat16
    if dtype_name not in _hf_models:
        try:
            model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)
        except TypeError:
            model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=dtype)
        _hf_models[dtype_name] = model.to(device).eval()
    with torch.no_grad():
        out = _hf_models[dtype_name](torch.tensor([ids], device=device)).logits[0]
    return out.float().cpu().numpy()


def judge_greedy(r, c, cpu, cuda, rel_limit):
    """Free-running greedy: the first divergence, the CPU's margin and its
    gap to the GPU's token there, judged against the bf16 noise."""
    p = c["prompt_len"]
    cpu_g, cuda_g = c["cpu_greedy"], c["cuda_greedy"]
    first = next((i for i, (a, b) in enumerate(zip(cpu_g, cuda_g)) if a != b), None)
    r["greedy_steps"] = len(cpu_g)
    if first is None and len(cuda_g) != len(cpu_g):
        first = min(len(cuda_g), len(cpu_g))  # one side stopped short
        r["greedy_first_divergence"] = first
        r["greedy_ok"] = False
        r["greedy_why"] = "one side stopped short"
        return
    r["greedy_first_divergence"] = first
    if first is None:
        r["greedy_ok"] = True
        return
    pos = p - 1 + first  # the row whose argmax is greedy token `first`
    if pos >= cpu.shape[0]:
        r["greedy_ok"] = False
        r["greedy_why"] = "divergence past the dumped logits"
        return
    row, grow = cpu[pos].astype(np.float64), cuda[pos].astype(np.float64)
    cpu_tok, gpu_tok = int(cpu_g[first]), int(cuda_g[first])
    top2 = np.partition(row, -2)[-2:]
    r["cpu_margin_at_divergence"] = float(top2[1] - top2[0])
    r["cpu_gap_to_gpu_token"] = float(row[cpu_tok] - row[gpu_tok])
    r["gpu_gap_to_cpu_token"] = float(grow[gpu_tok] - grow[cpu_tok])
    sigma = min(r["rel_cuda_cpu"], rel_limit) * float(np.sqrt(np.mean(row * row)))
    r["greedy_gap_limit"] = GAP_SIGMAS * math.sqrt(2.0) * sigma
    r["greedy_ok"] = bool(r["cpu_gap_to_gpu_token"] <= r["greedy_gap_limit"])


def main():
    model_dir, cases_path = sys.argv[1], sys.argv[2]
    use_hf = "--hf" in sys.argv[3:]
    cases = json.load(open(cases_path))
    vocab = json.load(open(f"{model_dir}/config.json"))["vocab_size"]
    for c in cases:
        n = len(c["ids"])
        try:
            cpu = np.fromfile(c["cpu_logits"], dtype="<f4").reshape(n, vocab)
            cuda = np.fromfile(c["cuda_logits"], dtype="<f4").reshape(n, vocab)
        except (OSError, ValueError) as e:  # a backend failed: report it, go on
            print(json.dumps({"name": c["name"], "error": f"{type(e).__name__}: {e}"[:300]}), flush=True)
            continue
        r = {"name": c["name"], "positions": n, "rel_cuda_cpu": rel(cuda, cpu)}
        r["argmax_cuda_cpu"] = argmax_agreement(cuda, cpu)
        r["fidelity_ok"] = None
        rel_limit = REL_LIMIT_NO_HF
        if use_hf:
            try:
                hf = hf_logits(model_dir, c["ids"], "float32")
                r["rel_cpu_hf"] = rel(cpu, hf)
                r["rel_cuda_hf"] = rel(cuda, hf)
                r["argmax_cuda_hf"] = argmax_agreement(cuda, hf)
                hf16 = hf_logits(model_dir, c["ids"], "bfloat16")
                r["rel_hfbf16_hf"] = rel(hf16, hf)
                r["argmax_hfbf16_hf"] = argmax_agreement(hf16, hf)
                del hf16
                r["fidelity_ok"] = bool(r["rel_cuda_hf"] <= r["rel_hfbf16_hf"])
                rel_limit = r["rel_hfbf16_hf"]
            except Exception as e:  # transformers missing or too old: say so, go on
                r["hf_error"] = f"{type(e).__name__}: {e}"[:300]
        r["rel_limit"] = rel_limit
        r["logits_ok"] = bool(r["rel_cuda_cpu"] <= rel_limit)
        judge_greedy(r, c, cpu, cuda, rel_limit)
        print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
