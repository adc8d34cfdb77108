#!/usr/bin/env python3
"""The physical floor of nano-vllm's bench.py workload on one GPU.

    python3 scripts/floor.py [MODEL_DIR] [--bandwidth GB/s] [--tflops T] [--json]

Rebuilds the workload exactly as bench.py draws it (random.seed(0), 256
sequences, input and output lengths uniform in 100..1024) and counts what
decoding it must move and compute, for the model in MODEL_DIR (config.json)
or Qwen3-0.6B's shape:
  - KV bytes read: each output token attends over its whole context, every
    layer's K and V (bf16);
  - weight bytes read: every decode step reads every weight matrix once
    (the embedding only as the lm_head when tied), and the scheduler runs
    all 256 sequences together, so there are max(output length) steps;
  - FLOPs: 2 x parameters per token through the layers, the lm_head for the
    tokens that need logits, and attention (QK and PV).
Dividing bytes by a bandwidth (the device's measured copy bandwidth, from
scripts/gpu_check.sh) and FLOPs by a peak gives the two floors; the larger
bounds the run, and output tokens over it is the best possible tokens/s.
"""
import json
import random
import sys

QWEN3_06B = {"hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28,
             "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
             "vocab_size": 151936, "tie_word_embeddings": True}


def workload(seed=0, num_seqs=256, lo=100, hi=1024):
    random.seed(seed)
    prompts = [[random.randint(0, 10000) for _ in range(random.randint(lo, hi))] for _ in range(num_seqs)]
    outputs = [random.randint(lo, hi) for _ in range(num_seqs)]
    return [len(p) for p in prompts], outputs


def floor(cfg, inputs, outputs):
    H, I, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = cfg.get("head_dim") or H // nh
    V = cfg["vocab_size"]
    layer_params = H * (nh + 2 * nkv) * D + nh * D * H + 3 * H * I
    lm_head = V * H
    kv_per_token = 2 * L * nkv * D * 2  # K and V, bf16
    contexts = sum(i * o + o * (o + 1) // 2 for i, o in zip(inputs, outputs))  # sum over tokens of context
    steps = max(outputs)
    kv_bytes = contexts * kv_per_token
    weight_bytes = steps * (L * layer_params + lm_head) * 2
    tokens = sum(inputs) + sum(outputs)
    logit_rows = len(inputs) + sum(outputs)
    prefill_ctx = sum(i * (i + 1) // 2 for i in inputs)
    flops = 2 * L * layer_params * tokens + 2 * lm_head * logit_rows + \
        4 * L * nh * D * (contexts + prefill_ctx)
    return {"prompt_tokens": sum(inputs), "output_tokens": sum(outputs), "decode_steps": steps,
            "kv_bytes": kv_bytes, "weight_bytes": weight_bytes, "flops": flops}


def main():
    args = sys.argv[1:]
    cfg = QWEN3_06B
    bandwidth, tflops, as_json = 3.0e12, 989.0, False
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--bandwidth":
            bandwidth = float(args[i + 1]) * 1e9
            i += 1
        elif a == "--tflops":
            tflops = float(args[i + 1])
            i += 1
        elif a == "--json":
            as_json = True
        else:
            cfg = json.load(open(f"{a}/config.json"))
        i += 1
    ins, outs = workload()
    f = floor(cfg, ins, outs)
    f["bandwidth_GBps"] = bandwidth / 1e9
    f["memory_floor_s"] = (f["kv_bytes"] + f["weight_bytes"]) / bandwidth
    f["compute_floor_s"] = f["flops"] / (tflops * 1e12)
    f["floor_s"] = max(f["memory_floor_s"], f["compute_floor_s"])
    f["floor_output_tokens_per_s"] = f["output_tokens"] / f["floor_s"]
    if as_json:
        print(json.dumps(f))
        return
    print(f"workload: {f['prompt_tokens']} prompt + {f['output_tokens']} output tokens, "
          f"{f['decode_steps']} decode steps")
    print(f"KV read {f['kv_bytes'] / 1e12:.2f} TB + weights {f['weight_bytes'] / 1e12:.2f} TB "
          f"at {bandwidth / 1e12:.2f} TB/s = {f['memory_floor_s']:.2f} s")
    print(f"{f['flops'] / 1e12:.0f} TFLOP at {tflops:.0f} TFLOP/s = {f['compute_floor_s']:.2f} s")
    print(f"floor {f['floor_s']:.2f} s = {f['floor_output_tokens_per_s']:,.0f} output tokens/s")


if __name__ == "__main__":
    main()
