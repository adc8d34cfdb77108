#!/usr/bin/python3
"""Write a randomly initialised Qwen3 model in Hugging Face layout (numpy only).

Usage (from the repository root):
    scripts/make_random_qwen3.py --preset qwen3-0.6b --out build/qwen3-0.6b-random  # 1.2 GB, ~15 s
    scripts/make_random_qwen3.py --preset qwen3-0.6b --layers 4 --out DIR             # fewer layers
    scripts/make_random_qwen3.py --preset tiny --seed 0 --out tests/fixtures/tiny-qwen3
    scripts/make_random_qwen3.py --preset tiny-moe --seed 0 --out tests/fixtures/tiny-qwen3-moe
    scripts/make_random_qwen3.py --preset qwen3-30b-a3b --out DIR  # ~61 GB, GPU machines only
    scripts/make_random_qwen3.py --preset tiny-embedding --seed 0 --out tests/fixtures/tiny-qwen3-embedding
    scripts/make_random_qwen3.py --preset qwen3-0.6b-embedding --out DIR  # Qwen3-Embedding-0.6B's shape
    scripts/make_random_qwen3.py --preset tiny-gguf --seed 0 --out DIR      # GGUF fixtures' source
    scripts/make_random_qwen3.py --preset tiny-gguf-moe --seed 0 --out DIR  # (see scripts/make_gguf.py)

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

Presets `tiny-embedding` and `qwen3-0.6b-embedding` lay the same weights as `tiny` and
`qwen3-0.6b` (drawn under the same names, so the tensors are identical) out as
Qwen3-Embedding-0.6B's folder is: the base model saved by sentence-transformers, its
tensor names without the `model.` prefix (`embed_tokens.weight`, `layers.N....`,
`norm.weight`), modules.json (Transformer, Pooling in 1_Pooling, Normalize),
1_Pooling/config.json with pooling_mode_lasttoken, and a tokenizer.json whose
post_processor is the TemplateProcessing that appends <|endoftext|> to every input.

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
    # GGUF fixtures (scripts/make_gguf.py): every matrix's row length a multiple of 256, as
    # the K-quants need; tied embeddings
    "tiny-gguf": {"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
                  "max_window_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
                  "head_dim": 128},
    # its MoE twin: layer 0 dense (mlp_only_layers), layer 1 8 experts, 2 per token; lm_head untied
    "tiny-gguf-moe": dict(MOE, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                          max_window_layers=2, num_attention_heads=2, num_key_value_heads=1,
                          head_dim=128, num_experts=8, num_experts_per_tok=2,
                          moe_intermediate_size=256, mlp_only_layers=[0], tie_word_embeddings=False),
}


# name -> (base preset, what Qwen3-Embedding-0.6B's config.json changes in it)
EMBEDDING_PRESETS = {
    "tiny-embedding": "tiny",
    "qwen3-0.6b-embedding": "qwen3-0.6b",
}
EMBEDDING_CONFIG = {"bos_token_id": 151643, "eos_token_id": 151643, "max_position_embeddings": 32768}

MODULES = [  # sentence-transformers' modules.json of Qwen3-Embedding
    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
    {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
]

ENDOFTEXT = 151643
TEMPLATE_PROCESSING = {  # appends <|endoftext|>, as Qwen3-Embedding's tokenizer.json does
    "type": "TemplateProcessing",
    "single": [{"Sequence": {"id": "A", "type_id": 0}},
               {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}],
    "pair": [{"Sequence": {"id": "A", "type_id": 0}},
             {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}},
             {"Sequence": {"id": "B", "type_id": 1}},
             {"SpecialToken": {"id": "<|endoftext|>", "type_id": 1}}],
    "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [ENDOFTEXT],
                                         "tokens": ["<|endoftext|>"]}},
}


def write_embedding_files(out, cfg, tokenizer_dir):
    """modules.json, 1_Pooling/config.json, and the tokenizer with its post_processor."""
    with open(os.path.join(out, "modules.json"), "w") as f:
        json.dump(MODULES, f, indent=2)
        f.write("\n")
    os.makedirs(os.path.join(out, "1_Pooling"), exist_ok=True)
    pooling = {"word_embedding_dimension": cfg["hidden_size"], "pooling_mode_cls_token": False,
               "pooling_mode_mean_tokens": False, "pooling_mode_max_tokens": False,
               "pooling_mode_mean_sqrt_len_tokens": False, "pooling_mode_weightedmean_tokens": False,
               "pooling_mode_lasttoken": True, "include_prompt": True}
    with open(os.path.join(out, "1_Pooling", "config.json"), "w") as f:
        json.dump(pooling, f, indent=2)
        f.write("\n")
    with open(os.path.join(tokenizer_dir, "tokenizer.json"), encoding="utf-8") as f:
        tok = json.load(f)
    tok["post_processor"] = TEMPLATE_PROCESSING
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, indent=2, ensure_ascii=False)
        f.write("\n")


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


def write_safetensors(path, specs, seed, metadata, saved_name=lambda name: name):
    """saved_name: the name a tensor is stored under (it is drawn under its own)."""
    header, off = {"__metadata__": metadata}, 0
    for name, shape, _ in specs:
        name = saved_name(name)
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
    ap.add_argument("--preset", choices=sorted(PRESETS) + sorted(EMBEDDING_PRESETS), default="tiny")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True, help="output model directory")
    ap.add_argument("--layers", type=int, help="number of layers (default: the preset's)")
    ap.add_argument("--tokenizer-dir", default=os.path.join(here, "..", "tests", "fixtures", "tiny-qwen3"),
                    help="folder holding tokenizer.json and tokenizer_config.json")
    a = ap.parse_args()

    embedding = a.preset in EMBEDDING_PRESETS
    cfg = dict(BASE, **PRESETS[EMBEDDING_PRESETS.get(a.preset, a.preset)])
    if embedding:
        cfg.update(EMBEDDING_CONFIG)
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
    strip = (lambda n: n[len("model."):] if n.startswith("model.") else n) if embedding else (lambda n: n)
    write_safetensors(os.path.join(a.out, "model.safetensors"), tensor_specs(cfg), a.seed, meta, strip)
    if embedding:
        write_embedding_files(a.out, cfg, a.tokenizer_dir)
    for fn in ("tokenizer_config.json",) if embedding else ("tokenizer.json", "tokenizer_config.json"):
        src, dst = os.path.join(a.tokenizer_dir, fn), os.path.join(a.out, fn)
        if os.path.exists(dst) and os.path.samefile(src, dst):
            continue
        shutil.copyfile(src, dst)
    layers = "" if a.layers is None else f", layers {a.layers}"
    print(f"wrote {a.preset} (seed {a.seed}{layers}) to {a.out}")


if __name__ == "__main__":
    main()
