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
0.1, and where free-running greedy decoding first diverges, with the CPU's
margin at that step (a divergence is expected only where it is small).
"""
import json
import sys

import numpy as np

MARGIN = 0.1


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


_hf_model = None


def hf_logits(model_dir, ids):
    """float32 logits of Qwen3ForCausalLM on the same weights (loaded once)."""
    global _hf_model
    import torch
    from transformers import AutoModelForCausalLM

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if _hf_model is None:
        try:
            model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        except TypeError:
            model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
        _hf_model = model.to(device).eval()
    with torch.no_grad():
        out = _hf_model(torch.tensor([ids], device=device)).logits[0]
    return out.float().cpu().numpy()


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
        if use_hf:
            try:
                hf = hf_logits(model_dir, c["ids"])
                r["rel_cpu_hf"] = rel(cpu, hf)
                r["rel_cuda_hf"] = rel(cuda, hf)
                r["argmax_cuda_hf"] = argmax_agreement(cuda, hf)
            except Exception as e:  # transformers missing or too old: say so, go on
                r["hf_error"] = f"{type(e).__name__}: {e}"[:300]
        # free-running greedy: first divergence and the CPU's margin there
        p = c["prompt_len"]
        cpu_m = margins(cpu[p - 1:])
        first = next((i for i, (a, b) in enumerate(zip(c["cpu_greedy"], c["cuda_greedy"])) if a != b), None)
        if first is None and len(c["cuda_greedy"]) != len(c["cpu_greedy"]):
            first = min(len(c["cuda_greedy"]), len(c["cpu_greedy"]))  # one side stopped short
        r["greedy_steps"] = len(c["cpu_greedy"])
        r["greedy_first_divergence"] = first
        if first is not None and first >= len(cpu_m):
            r["greedy_ok"] = False
        elif first is not None:
            r["cpu_margin_at_divergence"] = float(cpu_m[first])
            r["greedy_ok"] = bool(min(cpu_m[: first + 1]) < MARGIN)
        else:
            r["greedy_ok"] = True
        print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
