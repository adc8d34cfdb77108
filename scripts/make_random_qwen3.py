#!/usr/bin/python3
"""Write a randomly initialised Qwen3 model in Hugging Face layout (numpy only).

Usage (from the repository root):
    scripts/make_random_qwen3.py --preset qwen3-0.6b --out build/qwen3-0.6b-random  # 1.2 GB, ~15 s
    scripts/make_random_qwen3.py --preset qwen3-0.6b --layers 4 --out DIR             # fewer layers
    scripts/make_random_qwen3.py --preset tiny --seed 0 --out tests/fixtures/tiny-qwen3
    scripts/make_random_qwen3.py --preset tiny-moe --seed 0 --out tests/fixtures/tiny-qwen3-moe
    scripts/make_random_qwen3.py --preset qwen3-30b-a3b --out DIR  # ~61 GB, GPU machines only

It needs nothing but numpy and the tokenizer files of tests/fixtures/tiny-qwen3, so it
runs from a bare checkout: `make bench` (scripts/bench_cpu.sh), scripts/bench_cpu_decode.sh
and the GPU check (scripts/gpu_check.sh, on machines that reach no registry) all make their
model with it.

Presets `tiny-moe` and `qwen3-30b-a3b` are Qwen3MoeForCausalLM (model_type qwen3_moe):
HF tensor names, the router `mlp.gate.weight` [experts, hidden] and per-expert
`mlp.experts.E.{gate,up,down}_proj.weight`; layers in `mlp_only_layers` keep a dense MLP.
--layers N keeps a preset's shapes with N layers (num_hidden_layers, max_window_layers;
mlp_only_layers past N dropped).

Writes OUT/config.json, OUT/model.safetensors (bf16, HF Qwen3 tensor names, tied
embeddings so no lm_head.weight) and copies tokenizer.json + tokenizer_config.json
from --tokenizer-dir (default: tests/fixtures/tiny-qwen3 of this repository).

Weights are deterministic: tensor NAME is drawn from
numpy.random.default_rng([seed, crc32(NAME)]) as float32 standard normals (in row
chunks of CHUNK_ROWS), scaled, then rounded to bf16 (round-to-nearest-even).
Scales (standard deviations) are chosen so a tiny random model still has peaky, varied,
context-dependent greedy output (HF's 0.02 init gives near-uniform logits):
    embed_tokens                  N(0, 1)
    q/k/v/gate/up_proj (fan_in F) N(0, 1/sqrt(F))
    o_proj                        N(0, 2/sqrt(F))   residual branches are boosted so the
    down_proj                     N(0, 8/sqrt(F))   current token's own embedding does not
    *norm.weight                  1 + 0.1 * N(0, 1) dominate the residual (else greedy
                                                    decoding repeats one token forever)
Tensors are streamed to disk, so the 0.6B preset never holds all weights in memory.
"""
import argparse
import json
import os
import shutil
import struct
import zlib

import numpy as np

CHUNK_ROWS = 8192  # part of the weight definition: do not change

BASE = {  # the real Qwen3-0.6B config.json
    "architectures": ["Qwen3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 1024,
    "initializer_range": 0.02,
    "intermediate_size": 3072,
    "max_position_embeddings": 40960,
    "max_window_layers": 28,
    "model_type": "qwen3",
    "num_attention_heads": 16,
    "num_hidden_layers": 28,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000,
    "sliding_window": None,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}

MOE = {  # what the real Qwen3-30B-A3B config.json adds to or changes in BASE
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
    "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": True,
    "output_router_logits": False, "router_aux_loss_coef": 0.001,
}

PRESETS = {
    "qwen3-0.6b": {},
    "tiny": {"hidden_size": 32, "intermediate_size": 96, "num_hidden_layers": 3,
             "max_window_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
             "head_dim": 128},
    # Qwen3-30B-A3B: 48 layers, 128 experts, 8 per token; ~61 GB in bf16 (GPU benchmarks only)
    "qwen3-30b-a3b": dict(MOE, hidden_size=2048, intermediate_size=6144, num_hidden_layers=48,
                          max_window_layers=48, num_attention_heads=32, num_key_value_heads=4,
                          num_experts=128, num_experts_per_tok=8, moe_intermediate_size=768,
                          tie_word_embeddings=False),
    # tiny MoE: 16 experts, 4 per token; layer 1 is a dense MLP (mlp_only_layers), lm_head untied
    "tiny-moe": dict(MOE, hidden_size=32, intermediate_size=96, num_hidden_layers=3,
                     max_window_layers=3, num_attention_heads=4, num_key_value_heads=2,
                     head_dim=128, num_experts=16, num_experts_per_tok=4,
                     moe_intermediate_size=48, mlp_only_layers=[1], tie_word_embeddings=False),
}


def is_moe_layer(c, i):
    """HF Qwen3MoeDecoderLayer: sparse unless listed in mlp_only_layers or off the sparse step."""
    return (c.get("num_experts", 0) > 0 and i not in c.get("mlp_only_layers", [])
            and (i + 1) % c.get("decoder_sparse_step", 1) == 0)


def tensor_specs(c):
    """[(name, shape, kind)] in file order; kind is 'embed', 'norm' or a projection gain."""
    H, I, D = c["hidden_size"], c["intermediate_size"], c["head_dim"]
    nq, nkv = c["num_attention_heads"], c["num_key_value_heads"]
    specs = [("model.embed_tokens.weight", (c["vocab_size"], H), "embed")]
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        specs += [
            (p + "input_layernorm.weight", (H,), "norm"),
            (p + "self_attn.q_proj.weight", (nq * D, H), 1.0),
            (p + "self_attn.k_proj.weight", (nkv * D, H), 1.0),
            (p + "self_attn.v_proj.weight", (nkv * D, H), 1.0),
            (p + "self_attn.o_proj.weight", (H, nq * D), 2.0),
            (p + "self_attn.q_norm.weight", (D,), "norm"),
            (p + "self_attn.k_norm.weight", (D,), "norm"),
            (p + "post_attention_layernorm.weight", (H,), "norm"),
        ]
        if is_moe_layer(c, i):
            E, MI = c["num_experts"], c["moe_intermediate_size"]
            specs.append((p + "mlp.gate.weight", (E, H), 1.0))  # the router
            for e in range(E):
                q = f"{p}mlp.experts.{e}."
                specs += [(q + "gate_proj.weight", (MI, H), 1.0),
                          (q + "up_proj.weight", (MI, H), 1.0),
                          (q + "down_proj.weight", (H, MI), 8.0)]
        else:
            specs += [
                (p + "mlp.gate_proj.weight", (I, H), 1.0),
                (p + "mlp.up_proj.weight", (I, H), 1.0),
                (p + "mlp.down_proj.weight", (H, I), 8.0),
            ]
    specs.append(("model.norm.weight", (H,), "norm"))
    if not c["tie_word_embeddings"]:
        specs.append(("lm_head.weight", (c["vocab_size"], H), "embed"))  # N(0,1), like a tied head
    return specs


def f32_to_bf16(x):
    """float32 array -> uint16 bf16 bits, round to nearest even (inputs are finite)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def tensor_chunks(name, shape, kind, seed):
    """Yield the tensor as float32 row blocks (deterministic in seed and name)."""
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    rows = shape[0]
    cols = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    for r0 in range(0, rows, CHUNK_ROWS):
        n = min(CHUNK_ROWS, rows - r0)
        z = rng.standard_normal((n, cols), dtype=np.float32)
        if kind == "embed":
            w = z
        elif kind == "norm":
            w = np.float32(1.0) + np.float32(0.1) * z
        else:  # projection [out, in]: std = gain / sqrt(fan_in)
            w = z * np.float32(kind / np.sqrt(cols))
        yield w


def write_safetensors(path, specs, seed, metadata):
    header, off = {"__metadata__": metadata}, 0
    for name, shape, _ in specs:
        nbytes = 2 * int(np.prod(shape))
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + nbytes]}
        off += nbytes
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)  # pad header to 8 bytes, as the reference writer does
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for name, shape, kind in specs:
            for w in tensor_chunks(name, shape, kind, seed):
                f.write(f32_to_bf16(w).astype("<u2").tobytes())


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True, help="output model directory")
    ap.add_argument("--layers", type=int, help="number of layers (default: the preset's)")
    ap.add_argument("--tokenizer-dir", default=os.path.join(here, "..", "tests", "fixtures", "tiny-qwen3"),
                    help="folder holding tokenizer.json and tokenizer_config.json")
    a = ap.parse_args()

    cfg = dict(BASE, **PRESETS[a.preset])
    if a.layers is not None:
        if a.layers < 1:
            ap.error("--layers must be at least 1")
        cfg["num_hidden_layers"] = cfg["max_window_layers"] = a.layers
        if "mlp_only_layers" in cfg:
            cfg["mlp_only_layers"] = [i for i in cfg["mlp_only_layers"] if i < a.layers]
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    meta = {"format": "pt", "generator": "make_random_qwen3.py", "preset": a.preset,
            "seed": str(a.seed)}
    write_safetensors(os.path.join(a.out, "model.safetensors"), tensor_specs(cfg), a.seed, meta)
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        src, dst = os.path.join(a.tokenizer_dir, fn), os.path.join(a.out, fn)
        if os.path.exists(dst) and os.path.samefile(src, dst):
            continue
        shutil.copyfile(src, dst)
    layers = "" if a.layers is None else f", layers {a.layers}"
    print(f"wrote {a.preset} (seed {a.seed}{layers}) to {a.out}")


if __name__ == "__main__":
    main()
