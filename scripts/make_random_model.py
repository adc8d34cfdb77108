#!/usr/bin/env python3
"""A full-size random Qwen3 checkpoint for benchmarks and backend comparisons.

    python3 scripts/make_random_model.py OUT_DIR [--layers N] [--seed S]

Writes OUT_DIR/config.json (Qwen3-0.6B's shape), model.safetensors (bf16) and
copies the tokenizer of tests/fixtures/tiny-qwen3. Needs only numpy, so it
runs on the GPU machines, which cannot reach ../shared or any registry.

The weights are scaled as the tiny fixture's README describes, so that
activations stay O(1) through the layers and greedy decoding is not
degenerate: embeddings N(0, 1); q, k, v, gate, up N(0, 1/sqrt(fan_in));
o_proj 2/sqrt(fan_in); down_proj 8/sqrt(fan_in); norm weights 1 + 0.1 N(0, 1).
"""
import argparse
import json
import os
import shutil
import struct

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
TOKENIZER_DIR = os.path.join(HERE, "..", "tests", "fixtures", "tiny-qwen3")


def qwen3_06b_config(layers):
    return {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
        "vocab_size": 151936, "hidden_size": 1024, "intermediate_size": 3072,
        "num_hidden_layers": layers, "max_window_layers": layers,
        "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
        "max_position_embeddings": 40960, "rms_norm_eps": 1e-6, "rope_theta": 1000000,
        "rope_scaling": None, "attention_bias": False, "attention_dropout": 0.0,
        "hidden_act": "silu", "tie_word_embeddings": True, "use_sliding_window": False,
        "sliding_window": None, "bos_token_id": 151643, "eos_token_id": 151645,
        "torch_dtype": "bfloat16", "use_cache": True, "initializer_range": 0.02,
    }


def tensors(cfg):
    """(name, shape, scale): scale None is a norm vector, else the std."""
    H, I, D = cfg["hidden_size"], cfg["intermediate_size"], cfg["head_dim"]
    q, kv = cfg["num_attention_heads"] * D, cfg["num_key_value_heads"] * D
    out = [("model.embed_tokens.weight", (cfg["vocab_size"], H), 1.0)]
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        out += [
            (p + "input_layernorm.weight", (H,), None),
            (p + "post_attention_layernorm.weight", (H,), None),
            (p + "self_attn.q_norm.weight", (D,), None),
            (p + "self_attn.k_norm.weight", (D,), None),
            (p + "self_attn.q_proj.weight", (q, H), 1 / np.sqrt(H)),
            (p + "self_attn.k_proj.weight", (kv, H), 1 / np.sqrt(H)),
            (p + "self_attn.v_proj.weight", (kv, H), 1 / np.sqrt(H)),
            (p + "self_attn.o_proj.weight", (H, q), 2 / np.sqrt(q)),
            (p + "mlp.gate_proj.weight", (I, H), 1 / np.sqrt(H)),
            (p + "mlp.up_proj.weight", (I, H), 1 / np.sqrt(H)),
            (p + "mlp.down_proj.weight", (H, I), 8 / np.sqrt(I)),
        ]
    out.append(("model.norm.weight", (H,), None))
    return out


def bf16_bits(x):
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    cfg = qwen3_06b_config(a.layers)
    specs = tensors(cfg)
    header, offset = {"__metadata__": {"format": "pt", "generator": "nanovllm make_random_model.py"}}, 0
    for name, shape, _ in specs:
        size = 2 * int(np.prod(shape))
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    rng = np.random.default_rng(a.seed)
    with open(os.path.join(a.out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for name, shape, scale in specs:
            rows = shape[0]
            for r0 in range(0, rows, 16384):  # bounded memory for the embedding
                n = min(16384, rows - r0)
                z = rng.standard_normal((n,) + tuple(shape[1:]), dtype=np.float32)
                w = 1 + 0.1 * z if scale is None else z * np.float32(scale)
                f.write(bf16_bits(w).tobytes())
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(TOKENIZER_DIR, name), a.out)
    print(f"wrote a random Qwen3-0.6B-shaped model ({a.layers} layers, {offset / 1e9:.2f} GB) to {a.out}")


if __name__ == "__main__":
    main()
