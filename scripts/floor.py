#!/usr/bin/env python3
"""The physical floor of nano-vllm's bench.py workload on one GPU.

    python3 scripts/floor.py [MODEL_DIR] [--bandwidth GB/s] [--tflops T] [--json]
                             [--kv-cache-dtype bf16|fp8] [--fp8-weights]

Rebuilds the workload exactly as bench.py draws it (random.seed(0), 256
sequences, input and output lengths uniform in 100..1024) and counts what
decoding it must move and compute, for the model in MODEL_DIR (config.json)
or Qwen3-0.6B's shape:
  - KV bytes read: each output token attends over its whole context, every
    layer's K and V (bf16, or 1 byte with --kv-cache-dtype fp8);
  - weight bytes read: every decode step reads every weight matrix once
    (the embedding only as the lm_head when tied), and the scheduler runs
    all 256 sequences together, so there are max(output length) steps;
    in a MoE model (qwen3_moe) a step reads only the experts its B running
    sequences were routed to: E * (1 - (1 - k/E)^B) per sparse layer for
    uniform routing (random weights route about uniformly); an FP8
    checkpoint (config.json's quantization_config, or --fp8-weights) reads
    its layers' matrices at 1 byte a weight plus a float32 scale per 128 x
    128 tile, the router, embedding and lm_head in bf16;
  - FLOPs: 2 x the parameters a token goes through (attention, its k
    experts, the router), the lm_head for the tokens that need logits, and
    attention (QK and PV).
--per-token prints the bytes one single-sequence decode token reads (its
weights; the KV of its context is small next to them) instead.
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


def sparse_layers(cfg):
    """Hugging Face's rule: sparse unless in mlp_only_layers or off decoder_sparse_step."""
    if cfg.get("model_type") != "qwen3_moe":
        return []
    step, dense = cfg.get("decoder_sparse_step", 1), set(cfg.get("mlp_only_layers", []))
    return [l for l in range(cfg["num_hidden_layers"]) if l not in dense and (l + 1) % step == 0]


def shape(cfg):
    """Parameters: per layer outside the experts, per expert, and the counts."""
    H, L = cfg["hidden_size"], cfg["num_hidden_layers"]
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = cfg.get("head_dim") or H // nh
    attention = H * (nh + 2 * nkv) * D + nh * D * H
    sparse = len(sparse_layers(cfg))
    E, k = cfg.get("num_experts", 128), cfg.get("num_experts_per_tok", 8)
    expert = 3 * H * cfg.get("moe_intermediate_size", 768)
    fixed = L * attention + (L - sparse) * 3 * H * cfg["intermediate_size"] + sparse * E * H
    return {"H": H, "L": L, "nh": nh, "nkv": nkv, "D": D, "V": cfg["vocab_size"], "fixed": fixed,
            "sparse": sparse, "E": E, "k": k, "expert": expert}


FP8_BYTES = 1 + 4 / (128 * 128)  # a byte a weight, a float32 scale a tile


def weight_bytes_per_step(s, batch, fp8=False):
    """Weight bytes one decode step of `batch` sequences reads (lm_head included)."""
    experts = s["E"] * (1 - (1 - s["k"] / s["E"]) ** batch) if s["sparse"] else 0
    router = s["sparse"] * s["E"] * s["H"]
    layers = s["fixed"] - router + s["sparse"] * experts * s["expert"]
    return (FP8_BYTES if fp8 else 2) * layers + 2 * (router + s["V"] * s["H"])


def is_fp8(cfg):
    q = cfg.get("quantization_config") or {}
    return q.get("quant_method") == "fp8"


def floor(cfg, inputs, outputs, kv_bytes_per_elem=2, fp8=False):
    s = shape(cfg)
    L, nh, nkv, D = s["L"], s["nh"], s["nkv"], s["D"]
    active = s["fixed"] + s["sparse"] * s["k"] * s["expert"]  # through the layers, per token
    lm_head = s["V"] * s["H"]
    kv_per_token = 2 * L * nkv * D * kv_bytes_per_elem  # K and V
    contexts = sum(i * o + o * (o + 1) // 2 for i, o in zip(inputs, outputs))  # sum over tokens of context
    steps = max(outputs)
    kv_bytes = contexts * kv_per_token
    weight_bytes = sum(weight_bytes_per_step(s, sum(o > step for o in outputs), fp8) for step in range(steps))
    tokens = sum(inputs) + sum(outputs)
    logit_rows = len(inputs) + sum(outputs)
    prefill_ctx = sum(i * (i + 1) // 2 for i in inputs)
    flops = 2 * active * tokens + 2 * lm_head * logit_rows + \
        4 * L * nh * D * (contexts + prefill_ctx)
    return {"prompt_tokens": sum(inputs), "output_tokens": sum(outputs), "decode_steps": steps,
            "kv_bytes": kv_bytes, "weight_bytes": weight_bytes, "flops": flops,
            "bytes_per_single_token": weight_bytes_per_step(s, 1, fp8)}


def main():
    args = sys.argv[1:]
    cfg = QWEN3_06B
    bandwidth, tflops, as_json, per_token = 3.0e12, 989.0, False, False
    kv_elem, fp8 = 2, False
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
        elif a == "--per-token":
            per_token = True
        elif a == "--kv-cache-dtype":
            kv_elem = {"bf16": 2, "bfloat16": 2, "auto": 2, "fp8": 1, "fp8_e4m3": 1}[args[i + 1]]
            i += 1
        elif a == "--fp8-weights":
            fp8 = True
        else:
            cfg = json.load(open(f"{a}/config.json"))
        i += 1
    ins, outs = workload()
    f = floor(cfg, ins, outs, kv_elem, fp8 or is_fp8(cfg))
    f["bandwidth_GBps"] = bandwidth / 1e9
    f["memory_floor_s"] = (f["kv_bytes"] + f["weight_bytes"]) / bandwidth
    f["compute_floor_s"] = f["flops"] / (tflops * 1e12)
    f["floor_s"] = max(f["memory_floor_s"], f["compute_floor_s"])
    f["floor_output_tokens_per_s"] = f["output_tokens"] / f["floor_s"]
    f["single_stream_floor_tokens_per_s"] = bandwidth / f["bytes_per_single_token"]
    if per_token:
        print(f"{f['bytes_per_single_token'] / 1e9:.3f} GB of weights per single-sequence decode token "
              f"= {f['single_stream_floor_tokens_per_s']:,.0f} tokens/s at {bandwidth / 1e12:.2f} TB/s")
        return
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
