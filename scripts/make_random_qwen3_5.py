#!/usr/bin/python3
"""Write a randomly initialised Qwen3.5 text model (qwen3_5 / qwen3_5_moe) in Hugging Face layout (numpy only).

Usage (from the repository root):
    scripts/make_random_qwen3_5.py --preset tiny --seed 0 --link-tokenizer --out tests/fixtures/tiny-qwen3_5/dense
    scripts/make_random_qwen3_5.py --preset tiny-moe --seed 0 --link-tokenizer --out tests/fixtures/tiny-qwen3_5/moe
    scripts/make_random_qwen3_5.py --preset qwen3.5-0.8b --out build/qwen3.5-0.8b-random  # ~1.6 GB
    scripts/make_random_qwen3_5.py --preset qwen3.5-0.8b --layers 4 --out DIR              # fewer layers

Presets:
  tiny          Qwen3_5ForConditionalGeneration (model_type qwen3_5): the multimodal folder
                layout, text parameters under `text_config` (model_type qwen3_5_text), tensors
                under `model.language_model.`, plus three small dummy tensors a text loader
                must skip (`model.visual.patch_embed.proj.weight`,
                `model.visual.blocks.0.norm1.weight`, `mtp.fc.weight`). Dense MLP, hidden 64,
                intermediate 96, 4 layers [L, L, L, F] given by layer_types; tied embeddings.
  tiny-moe      Qwen3_5MoeForCausalLM (model_type qwen3_5_moe_text): the text-only layout
                (`model.layers.`), no layer_types key (full_attention_interval 2 gives
                [L, F, L, F]), 8 experts, 2 per token, moe_intermediate_size 32, a shared
                expert of 48, untied lm_head.
  qwen3.5-0.8b  Qwen3.5-0.8B's shapes in the multimodal layout (vocab 248320, hidden 1024,
                24 layers [L, L, L, F] x 6, ...), random, for benchmarks; --layers N shortens it.
Both tiny presets: vocab 151936 (the real Qwen3 tokenizer of tests/fixtures/tiny-qwen3),
full attention 4 heads / 2 KV heads / head_dim 64 / partial_rotary_factor 0.25 (16 rotary
dims, mrope_section [4, 2, 2]), rope_theta 1e7; DeltaNet 2 key heads x 32, 4 value heads x 24
(key and value dims deliberately unequal), conv kernel 4; eos 151645.

Writes OUT/config.json, OUT/model.safetensors and the tokenizer files of --tokenizer-dir
(default tests/fixtures/tiny-qwen3): copied, or with --link-tokenizer relative symlinks.
Weights are bf16 except `linear_attn.A_log` and `linear_attn.dt_bias`, which are F32 as
in the real checkpoints (so a loader meets mixed dtypes).

Weights are deterministic, drawn as scripts/make_random_qwen3.py draws them (tensor NAME
from numpy.random.default_rng([seed, crc32(NAME)]), float32, row chunks, rounded to bf16);
NAME is the text-only name (`model.layers.…`), so both layouts of one preset hold the same
values. Scales, chosen so the tiny models decode non-degenerately (logits std several units,
varied greedy continuations) and the delta rule's state matters:
    embed_tokens, lm_head                              N(0, 1)
    q/k/v/gate/up_proj, in_proj_qkv/z/b, router,
      shared_expert_gate (fan_in F)                    N(0, 1/sqrt(F))
    in_proj_a                                          N(0, 0.5/sqrt(F))
    conv1d.weight [C, 1, K]                            N(0, 1/sqrt(K))
    o_proj, out_proj                                   N(0, 2/sqrt(F))
    down_proj (MLP, experts, shared expert)            N(0, 8/sqrt(F))
    input/post_attention_layernorm, q/k_norm, norm     0.1 * N(0, 1)  (zero-centred: the
                                                       model multiplies by 1 + w)
    linear_attn.norm.weight                            1 + 0.1 * N(0, 1)  (used as is)
    linear_attn.A_log (F32)                            log(uniform(0.1, 1.5))
    linear_attn.dt_bias (F32)                          uniform(0, 1)
so a decay exp(g) = exp(-exp(A_log) * softplus(a + dt_bias)) is mostly 0.2..0.95 per token.
"""
import argparse
import json
import os
import shutil
import struct
import sys
import zlib

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_random_qwen3 import CHUNK_ROWS, f32_to_bf16, tensor_chunks  # noqa: E402

TEXT_BASE = {  # Qwen3.5-0.8B's text parameters
    "model_type": "qwen3_5_text",
    "vocab_size": 248320,
    "hidden_size": 1024,
    "intermediate_size": 3584,
    "num_hidden_layers": 24,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "hidden_act": "silu",
    "attention_bias": False,
    "attention_dropout": 0.0,
    "attn_output_gate": True,
    "rms_norm_eps": 1e-06,
    "max_position_embeddings": 262144,
    "initializer_range": 0.02,
    "full_attention_interval": 4,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 16,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000000,
                        "partial_rotary_factor": 0.25, "mrope_section": [11, 11, 10],
                        "mrope_interleaved": True},
    "tie_word_embeddings": True,
    "use_cache": True,
    "bos_token_id": None,
    "eos_token_id": 248044,
    "torch_dtype": "bfloat16",
}

TINY_TEXT = {"vocab_size": 151936, "hidden_size": 64, "intermediate_size": 96,
             "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
             "head_dim": 64, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
             "linear_key_head_dim": 32, "linear_value_head_dim": 24, "eos_token_id": 151645,
             "rope_parameters": {"rope_type": "default", "rope_theta": 10000000,
                                 "partial_rotary_factor": 0.25, "mrope_section": [4, 2, 2],
                                 "mrope_interleaved": True}}

MOE_TEXT = {"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
            "shared_expert_intermediate_size": 48, "norm_topk_prob": True,
            "router_aux_loss_coef": 0.001, "output_router_logits": False}

PRESETS = {  # name -> (multimodal layout?, text parameters changed from TEXT_BASE)
    "tiny": (True, dict(TINY_TEXT, layer_types=["linear_attention"] * 3 + ["full_attention"])),
    "tiny-moe": (False, dict(TINY_TEXT, **MOE_TEXT, model_type="qwen3_5_moe_text",
                             full_attention_interval=2, tie_word_embeddings=False)),
    "qwen3.5-0.8b": (True, {"layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 6}),
}

VISION = {"model_type": "qwen3_5", "depth": 1, "hidden_size": 16, "in_channels": 3,
          "patch_size": 4, "temporal_patch_size": 2, "out_hidden_size": None}


def layer_types(c):
    if c.get("layer_types"):
        return c["layer_types"]
    n = c.get("full_attention_interval", 4)
    return ["full_attention" if (i + 1) % n == 0 else "linear_attention"
            for i in range(c["num_hidden_layers"])]


def mlp_specs(p, inter, H):
    return [(p + "gate_proj.weight", (inter, H), 1.0), (p + "up_proj.weight", (inter, H), 1.0),
            (p + "down_proj.weight", (H, inter), 8.0)]


def tensor_specs(c):
    """[(text-only name, shape, kind)] in file order. kind: 'embed', 'norm' (1 + 0.1 N),
    'znorm' (0.1 N), 'alog', 'dtbias' (F32) or a projection gain (std gain / sqrt(fan_in))."""
    H, D = c["hidden_size"], c["head_dim"]
    nq, nkv = c["num_attention_heads"], c["num_key_value_heads"]
    Hk, Hv = c["linear_num_key_heads"], c["linear_num_value_heads"]
    kd, vd = Hk * c["linear_key_head_dim"], Hv * c["linear_value_head_dim"]
    conv_dim, K = 2 * kd + vd, c["linear_conv_kernel_dim"]
    specs = [("model.embed_tokens.weight", (c["vocab_size"], H), "embed")]
    for i, kind in enumerate(layer_types(c)):
        p = f"model.layers.{i}."
        specs.append((p + "input_layernorm.weight", (H,), "znorm"))
        if kind == "full_attention":
            a = p + "self_attn."
            specs += [(a + "q_proj.weight", (nq * D * 2, H), 1.0),
                      (a + "k_proj.weight", (nkv * D, H), 1.0),
                      (a + "v_proj.weight", (nkv * D, H), 1.0),
                      (a + "o_proj.weight", (H, nq * D), 2.0),
                      (a + "q_norm.weight", (D,), "znorm"),
                      (a + "k_norm.weight", (D,), "znorm")]
        else:
            a = p + "linear_attn."
            specs += [(a + "in_proj_qkv.weight", (conv_dim, H), 1.0),
                      (a + "in_proj_z.weight", (vd, H), 1.0),
                      (a + "in_proj_b.weight", (Hv, H), 1.0),
                      (a + "in_proj_a.weight", (Hv, H), 0.5),
                      (a + "conv1d.weight", (conv_dim, 1, K), 1.0),
                      (a + "A_log", (Hv,), "alog"),
                      (a + "dt_bias", (Hv,), "dtbias"),
                      (a + "norm.weight", (c["linear_value_head_dim"],), "norm"),
                      (a + "out_proj.weight", (H, vd), 2.0)]
        specs.append((p + "post_attention_layernorm.weight", (H,), "znorm"))
        if c.get("num_experts"):
            E, MI = c["num_experts"], c["moe_intermediate_size"]
            specs.append((p + "mlp.gate.weight", (E, H), 1.0))
            for e in range(E):
                specs += mlp_specs(f"{p}mlp.experts.{e}.", MI, H)
            specs += mlp_specs(p + "mlp.shared_expert.", c["shared_expert_intermediate_size"], H)
            specs.append((p + "mlp.shared_expert_gate.weight", (1, H), 1.0))
        else:
            specs += mlp_specs(p + "mlp.", c["intermediate_size"], H)
    specs.append(("model.norm.weight", (H,), "znorm"))
    if not c["tie_word_embeddings"]:
        specs.append(("lm_head.weight", (c["vocab_size"], H), "embed"))
    return specs


DUMMY_SPECS = [  # multimodal layout only: tensors a text model must skip
    ("model.visual.patch_embed.proj.weight", (16, 3, 2, 4, 4), 1.0),
    ("model.visual.blocks.0.norm1.weight", (16,), "norm"),
    ("mtp.fc.weight", (64, 128), 1.0),
]

F32_KINDS = ("alog", "dtbias")


def chunks(name, shape, kind, seed):
    """Float32 row blocks of the tensor (make_random_qwen3.py's draw, plus this model's kinds)."""
    if kind not in ("znorm",) + F32_KINDS:
        yield from tensor_chunks(name, shape, kind, seed)
        return
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    rows = shape[0]
    cols = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    for r0 in range(0, rows, CHUNK_ROWS):
        n = min(CHUNK_ROWS, rows - r0)
        if kind == "znorm":
            yield np.float32(0.1) * rng.standard_normal((n, cols), dtype=np.float32)
        elif kind == "alog":
            yield np.log(rng.uniform(0.1, 1.5, (n, cols))).astype(np.float32)
        else:
            yield rng.uniform(0.0, 1.0, (n, cols)).astype(np.float32)


def write_safetensors(path, specs, seed, metadata, saved_name):
    """specs drawn under their own names, stored under saved_name(name); F32 for the
    A_log / dt_bias kinds, BF16 for the rest."""
    header, off = {"__metadata__": metadata}, 0
    for name, shape, kind in specs:
        f32 = kind in F32_KINDS
        nbytes = (4 if f32 else 2) * int(np.prod(shape))
        header[saved_name(name)] = {"dtype": "F32" if f32 else "BF16", "shape": list(shape),
                                    "data_offsets": [off, off + nbytes]}
        off += nbytes
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for name, shape, kind in specs:
            for w in chunks(name, shape, kind, seed):
                if kind in F32_KINDS:
                    f.write(w.astype("<f4").tobytes())
                else:
                    f.write(f32_to_bf16(w).astype("<u2").tobytes())


def make_config(preset, layers):
    multimodal, change = PRESETS[preset]
    tc = dict(TEXT_BASE, **change)
    if layers is not None:
        tc["num_hidden_layers"] = layers
        if "layer_types" in tc:
            tc["layer_types"] = tc["layer_types"][:layers]
    if not tc.get("layer_types"):
        tc.pop("layer_types", None)
    if not multimodal:
        arch = "Qwen3_5MoeForCausalLM" if tc.get("num_experts") else "Qwen3_5ForCausalLM"
        return dict({"architectures": [arch]}, **tc), tc
    moe = bool(tc.get("num_experts"))
    cfg = {"architectures": ["Qwen3_5MoeForConditionalGeneration" if moe else "Qwen3_5ForConditionalGeneration"],
           "model_type": "qwen3_5_moe" if moe else "qwen3_5",
           "text_config": tc,
           "vision_config": dict(VISION, out_hidden_size=tc["hidden_size"]),
           "image_token_id": 151655, "video_token_id": 151656,
           "vision_start_token_id": 151652, "vision_end_token_id": 151653,
           "tie_word_embeddings": tc["tie_word_embeddings"],
           "torch_dtype": "bfloat16", "transformers_version": "4.57.0.dev0"}
    return cfg, tc


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True, help="output model directory")
    ap.add_argument("--layers", type=int, help="number of layers (default: the preset's)")
    ap.add_argument("--tokenizer-dir", default=os.path.join(here, "..", "tests", "fixtures", "tiny-qwen3"),
                    help="folder holding tokenizer.json and tokenizer_config.json")
    ap.add_argument("--link-tokenizer", action="store_true",
                    help="symlink the tokenizer files (relative links) instead of copying them")
    a = ap.parse_args()
    if a.layers is not None and a.layers < 1:
        ap.error("--layers must be at least 1")
    cfg, tc = make_config(a.preset, a.layers)
    multimodal = "text_config" in cfg
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    meta = {"format": "pt", "generator": "make_random_qwen3_5.py", "preset": a.preset,
            "seed": str(a.seed)}
    specs = tensor_specs(tc)
    if multimodal:
        specs += DUMMY_SPECS
        saved = lambda n: "model.language_model." + n[len("model."):] \
            if n.startswith("model.") and not n.startswith("model.visual.") else n  # noqa: E731
    else:
        saved = lambda n: n  # noqa: E731
    write_safetensors(os.path.join(a.out, "model.safetensors"), specs, a.seed, meta, saved)
    for fn in ("tokenizer.json", "tokenizer_config.json", "LICENSE-tokenizer"):
        src, dst = os.path.join(a.tokenizer_dir, fn), os.path.join(a.out, fn)
        if not os.path.exists(src):
            continue
        if os.path.lexists(dst):
            if not a.link_tokenizer and os.path.samefile(src, dst):
                continue
            os.remove(dst)
        if a.link_tokenizer:
            os.symlink(os.path.relpath(os.path.abspath(src), os.path.abspath(a.out)), dst)
        else:
            shutil.copyfile(src, dst)
    layers = "" if a.layers is None else f", layers {a.layers}"
    print(f"wrote {a.preset} (seed {a.seed}{layers}) to {a.out}")


if __name__ == "__main__":
    main()
