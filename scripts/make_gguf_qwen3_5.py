#!/usr/bin/python3
"""Write a Hugging Face Qwen3.5 folder (qwen3_5 / qwen3_5_moe) as a GGUF file for llama.cpp's
qwen35 / qwen35moe architectures, numpy only.

Usage (from the repository root):
    scripts/make_gguf_qwen3_5.py --model HF_DIR --out FILE.gguf [--type f32|f16|bf16|q8_0]
                                 [--ref-out DIR]

--ref-out writes the weights the file holds, decoded and with every transform below
undone, as a float32 Hugging Face folder (the source's layout and config): the model a
reader of the GGUF must compute, for scripts/qwen3_5_ref.py to make its golden.

Why: to run llama.cpp's own Qwen3.5 graph on our random tiny models and compare it with
scripts/qwen3_5_ref.py (scripts/qwen3_5_crosscheck.sh). The file format, tokenizer
metadata and writing are scripts/make_gguf.py's (imported); this script adds the
Qwen3.5 tensor plan and hyper-parameters, which follow what llama.cpp's
convert_hf_to_gguf.py (Qwen3_5TextModel / Qwen3_5MoeTextModel over Qwen3NextModel)
writes, re-derived from reading it and llama.cpp's src/models/qwen35*.cpp loaders:

  arch "qwen35" (dense) or "qwen35moe"; both layouts are read (text-only `model.*`,
  multimodal `model.language_model.*`; `model.visual.*` and `mtp.*` are dropped).
  Hyper-parameters under ARCH.*: the usual block_count, context_length, embedding_length,
  feed_forward_length, attention.head_count(_kv), attention.key_length/value_length
  (head_dim), attention.layer_norm_rms_epsilon, rope.freq_base,
  rope.dimension_count = int(head_dim * partial_rotary_factor),
  rope.dimension_sections = mrope_section padded to 4 (required by the loader),
  full_attention_interval, ssm.conv_kernel (K), ssm.state_size (linear_key_head_dim),
  ssm.group_count (linear_num_key_heads), ssm.time_step_rank (linear_num_value_heads),
  ssm.inner_size (linear_value_head_dim * linear_num_value_heads); MoE: expert_count,
  expert_used_count, expert_feed_forward_length, expert_shared_feed_forward_length.

  Tensors (ggml dims, row length first), with their transforms:
    token_embd, output_norm (+1), output (untied only)
    blk.N.attn_norm (+1)            input_layernorm
    blk.N.post_attention_norm (+1)  post_attention_layernorm (not ffn_norm as in qwen3)
    full attention: attn_q [hidden, 2*heads*head_dim] (q_proj as is: per head the query
      then the gate, the layout llama.cpp's graph views), attn_k, attn_v, attn_output,
      attn_q_norm (+1), attn_k_norm (+1)
    linear attention (* = value heads reordered, below):
      attn_qkv   in_proj_qkv (V rows*)      attn_gate  in_proj_z (rows*)
      ssm_beta   in_proj_b (rows*)          ssm_alpha  in_proj_a (rows*)
      ssm_a      -exp(A_log) (*), no ".weight" suffix
      ssm_dt.bias  dt_bias (*)
      ssm_conv1d [K, conv_dim]  conv1d.weight squeezed (V channels*), always F32
      ssm_norm   linear_attn.norm as is (no +1: it multiplies directly)
      ssm_out    out_proj (columns*)
    dense MLP: ffn_gate, ffn_up, ffn_down
    MoE: ffn_gate_inp (F32), ffn_{gate,up}_exps [hidden, moe_ff, E], ffn_down_exps,
      ffn_{gate,up,down}_shexp, ffn_gate_inp_shexp [hidden] (shared_expert_gate, F32)
  "+1": the model's zero-centred RMSNorm weights get 1 added (llama.cpp multiplies by w).
  Value-head reorder: when linear_num_value_heads Hv > linear_num_key_heads Hk, HF orders
  the value heads grouped by key head (v = g*r + j, r = Hv/Hk, key head g); llama.cpp wants
  them tiled (j*Hk + g, key head = v % Hk, what ggml's repeat broadcasts), so every
  per-value-head row/column/channel block is permuted that way.
  1-D tensors are F32; matrices the --type (a row length not a multiple of q8_0's 32
  falls back to f16).

Limits of llama.cpp, not of this writer: its qwen35 loader and graph assume
linear_key_head_dim == linear_value_head_dim (head_v_dim = ssm.state_size in the tensor
shapes and the recurrent state); a model with different dims (our tiny fixtures: 32 / 24)
is written faithfully but llama.cpp refuses it (wrong tensor shape). Layer types must be
periodic (full attention iff (i+1) % interval == 0): the file has full_attention_interval.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_gguf as mg  # noqa: E402
import qwen3_5_ref as ref  # noqa: E402  (config reading: the same as the reference's)

TYPES = ("f32", "f16", "bf16", "q8_0")


def check_config(cfg, tc):
    archs = {"Qwen3_5ForConditionalGeneration": "qwen35", "Qwen3_5ForCausalLM": "qwen35",
             "Qwen3_5MoeForConditionalGeneration": "qwen35moe", "Qwen3_5MoeForCausalLM": "qwen35moe"}
    arch = archs.get((cfg.get("architectures") or [None])[0])
    if arch is None:
        mg.die(f"architecture {cfg.get('architectures')!r} is not a Qwen3.5 one ({', '.join(archs)})")
    if tc.get("attention_bias"):
        mg.die("attention_bias is not supported")
    if not tc.get("attn_output_gate", True):
        mg.die("attn_output_gate false is not supported (llama.cpp's qwen35 always gates)")
    if arch == "qwen35moe" and not tc.get("norm_topk_prob", True):
        mg.die("norm_topk_prob false is not supported (llama.cpp renormalises the top-k)")
    rp = tc.get("rope_parameters") or tc.get("rope_scaling") or {}
    if rp.get("rope_type", rp.get("type", "default")) != "default":
        mg.die(f"rope_type {rp.get('rope_type', rp.get('type'))!r} is not supported")
    return arch


def rope(tc):
    """(theta, partial_rotary_factor, mrope_section padded to 4), read as the reference does."""
    theta, prf = ref.rope_params(tc)
    rp = tc.get("rope_parameters") or tc.get("rope_scaling") or {}
    sections = (list(rp.get("mrope_section", [11, 11, 10])) + [0, 0, 0, 0])[:4]
    return theta, prf, sections


def full_attention_interval(tc):
    """The layer types as llama.cpp's one key: full attention iff (i + 1) % interval == 0."""
    full = [t == "full_attention" for t in ref.layer_types(tc)]
    for k in range(1, len(full) + 2):  # len + 1: no full-attention layer
        if full == [(i + 1) % k == 0 for i in range(len(full))]:
            return k
    mg.die(f"layer_types {ref.layer_types(tc)} are not periodic: the GGUF has only "
           "full_attention_interval")


class Tensors:
    """The GGUF's source tensors under virtual names, for make_gguf.write_gguf: a plain
    HF tensor (passed through, bf16 bits kept) or a float32 array made by a function."""

    def __init__(self, st):
        self.st, self.made, self.cache = st, {}, (None, None)

    def add(self, name, shape, fn):
        self.made[name] = (tuple(shape), fn)
        return name

    def __contains__(self, name):
        return name in self.made or name in self.st

    def shape(self, name):
        return self.made[name][0] if name in self.made else self.st.shape(name)

    def bf16_bits(self, name):
        return None if name in self.made else self.st.bf16_bits(name)

    def full(self, name):
        if self.cache[0] != name:
            x = np.ascontiguousarray(self.made[name][1](), dtype=mg.F32)
            assert x.shape == self.made[name][0], (name, x.shape)
            self.cache = (name, x)
        return self.cache[1]

    def rows(self, name, r0, r1):
        if name not in self.made:
            return self.st.rows(name, r0, r1)
        x = self.full(name)
        return x.reshape(1, -1) if x.ndim == 1 else x[r0:r1]


def plan_tensors(tc, tied, st, qtype, prefix):
    """[(gguf name, ne, type, [source names])] as make_gguf.write_gguf takes them."""
    T = Tensors(st)
    plan = []
    Hk, Hv = tc["linear_num_key_heads"], tc["linear_num_value_heads"]
    dk, dv = tc["linear_key_head_dim"], tc["linear_value_head_dim"]
    r = Hv // Hk
    if Hv % Hk:
        mg.die(f"linear_num_value_heads {Hv} is not a multiple of linear_num_key_heads {Hk}")
    key_dim = Hk * dk

    def full(hf):
        if hf not in st:
            mg.die(f"tensor {hf} is missing from the safetensors")
        x = st.rows(hf, 0, st.shape(hf)[0] if len(st.shape(hf)) > 1 else 1)
        return x.reshape(st.shape(hf))

    def tiled(x, axis, d):
        """Value heads (blocks of d along axis) from grouped (g*r + j) to tiled (j*Hk + g)."""
        x = np.moveaxis(x, axis, 0)
        s = x.shape
        x = x.reshape(Hk, r, d, *s[1:]).swapaxes(0, 1).reshape(s)
        return np.moveaxis(x, 0, axis)

    def add(gname, srcs, kind="mat"):
        shp = T.shape(srcs[0])
        if len(shp) == 1 or kind == "f32":
            t = "f32"
        else:
            t = qtype
            if t == "q8_0" and shp[-1] % 32:
                print(f"note: {gname}: {shp[-1]} values a row is not a whole number of q8_0 "
                      "blocks; written as f16")
                t = "f16"
        ne = list(reversed(shp)) + ([len(srcs)] if kind == "exps" else [])
        plan.append((gname, ne, t, srcs))

    def plain(gname, hf, kind="mat"):
        if hf not in st:
            mg.die(f"tensor {hf} is missing from the safetensors")
        add(gname, [hf], kind)

    def made(gname, hf, shape, fn, kind="mat"):
        add(gname, [T.add(gname, shape, lambda: fn(full(hf)))], kind)

    def norm1p(gname, hf):
        made(gname, hf, st.shape(hf) if hf in st else (0,), lambda x: x + 1)

    P = prefix
    plain("token_embd.weight", P + "embed_tokens.weight")
    types = ref.layer_types(tc)
    full_attention_interval(tc)  # dies when llama.cpp cannot say the layer types
    moe = bool(tc.get("num_experts"))
    for i in range(tc["num_hidden_layers"]):
        p, g = f"{P}layers.{i}.", f"blk.{i}."
        norm1p(g + "attn_norm.weight", p + "input_layernorm.weight")
        norm1p(g + "post_attention_norm.weight", p + "post_attention_layernorm.weight")
        if types[i] == "full_attention":
            a = p + "self_attn."
            plain(g + "attn_q.weight", a + "q_proj.weight")
            plain(g + "attn_k.weight", a + "k_proj.weight")
            plain(g + "attn_v.weight", a + "v_proj.weight")
            plain(g + "attn_output.weight", a + "o_proj.weight")
            norm1p(g + "attn_q_norm.weight", a + "q_norm.weight")
            norm1p(g + "attn_k_norm.weight", a + "k_norm.weight")
        else:
            a = p + "linear_attn."
            qkv = a + "in_proj_qkv.weight"
            made(g + "attn_qkv.weight", qkv, st.shape(qkv) if qkv in st else (0,),
                 lambda x: np.concatenate([x[:2 * key_dim], tiled(x[2 * key_dim:], 0, dv)]))
            for hf, gn, d in (("in_proj_z", "attn_gate", dv), ("in_proj_b", "ssm_beta", 1),
                              ("in_proj_a", "ssm_alpha", 1)):
                w = a + hf + ".weight"
                made(g + gn + ".weight", w, st.shape(w) if w in st else (0,),
                     lambda x, d=d: tiled(x, 0, d))
            made(g + "ssm_a", a + "A_log", (Hv,), lambda x: tiled(-np.exp(x.astype(np.float64)), 0, 1))
            made(g + "ssm_dt.bias", a + "dt_bias", (Hv,), lambda x: tiled(x, 0, 1))
            c1 = a + "conv1d.weight"
            conv_dim = 2 * key_dim + Hv * dv
            made(g + "ssm_conv1d.weight", c1, (conv_dim, tc["linear_conv_kernel_dim"]),
                 lambda x: np.concatenate([x.reshape(conv_dim, -1)[:2 * key_dim],
                                           tiled(x.reshape(conv_dim, -1)[2 * key_dim:], 0, dv)]),
                 kind="f32")
            plain(g + "ssm_norm.weight", a + "norm.weight")
            o = a + "out_proj.weight"
            made(g + "ssm_out.weight", o, st.shape(o) if o in st else (0,),
                 lambda x: tiled(x, 1, dv))
        m = p + "mlp."
        if moe:
            plain(g + "ffn_gate_inp.weight", m + "gate.weight", kind="f32")
            E = tc["num_experts"]
            for w, gw in (("gate_proj", "ffn_gate_exps"), ("up_proj", "ffn_up_exps"),
                          ("down_proj", "ffn_down_exps")):
                srcs = [f"{m}experts.{e}.{w}.weight" for e in range(E)]
                for s in srcs:
                    if s not in st:
                        mg.die(f"tensor {s} is missing from the safetensors")
                add(f"{g}{gw}.weight", srcs, kind="exps")
            for w, gw in (("gate_proj", "ffn_gate_shexp"), ("up_proj", "ffn_up_shexp"),
                          ("down_proj", "ffn_down_shexp")):
                plain(f"{g}{gw}.weight", f"{m}shared_expert.{w}.weight")
            sg = m + "shared_expert_gate.weight"
            made(g + "ffn_gate_inp_shexp.weight", sg, (tc["hidden_size"],), lambda x: x.reshape(-1))
        else:
            for w, gw in (("gate_proj", "ffn_gate"), ("up_proj", "ffn_up"), ("down_proj", "ffn_down")):
                plain(f"{g}{gw}.weight", f"{m}{w}.weight")
    norm1p("output_norm.weight", P + "norm.weight")
    if not tied:
        plain("output.weight", "lm_head.weight")
    return plan, T


def metadata(tc, arch, name, qtype, model_dir):
    S, U, F, A, I = mg.STR, mg.U32, mg.F32T, mg.ARR, mg.I32
    theta, prf, sections = rope(tc)
    a = arch + "."
    kv = [("general.architecture", S, arch, None), ("general.type", S, "model", None),
          ("general.name", S, name, None), ("general.alignment", U, mg.ALIGN, None),
          (a + "block_count", U, tc["num_hidden_layers"], None),
          (a + "context_length", U, tc["max_position_embeddings"], None),
          (a + "embedding_length", U, tc["hidden_size"], None),
          (a + "feed_forward_length", U, tc["intermediate_size"], None),
          (a + "attention.head_count", U, tc["num_attention_heads"], None),
          (a + "attention.head_count_kv", U, tc["num_key_value_heads"], None),
          (a + "rope.dimension_sections", A, sections, I),
          (a + "rope.freq_base", F, float(theta), None),
          (a + "attention.layer_norm_rms_epsilon", F, float(tc["rms_norm_eps"]), None),
          (a + "attention.key_length", U, tc["head_dim"], None),
          (a + "attention.value_length", U, tc["head_dim"], None)]
    if arch == "qwen35moe":
        kv += [(a + "expert_count", U, tc["num_experts"], None),
               (a + "expert_used_count", U, tc["num_experts_per_tok"], None),
               (a + "expert_feed_forward_length", U, tc["moe_intermediate_size"], None),
               (a + "expert_shared_feed_forward_length", U, tc["shared_expert_intermediate_size"], None)]
    kv += [(a + "ssm.conv_kernel", U, tc["linear_conv_kernel_dim"], None),
           (a + "ssm.state_size", U, tc["linear_key_head_dim"], None),
           (a + "ssm.group_count", U, tc["linear_num_key_heads"], None),
           (a + "ssm.time_step_rank", U, tc["linear_num_value_heads"], None),
           (a + "ssm.inner_size", U, tc["linear_value_head_dim"] * tc["linear_num_value_heads"], None),
           (a + "full_attention_interval", U, full_attention_interval(tc), None),
           (a + "rope.dimension_count", U, int(tc["head_dim"] * prf), None),
           ("general.file_type", U, mg.FILE_TYPE[qtype], None),
           ("general.quantization_version", U, mg.QUANT_VERSION, None)]
    return kv + mg.vocab_metadata(model_dir, tc)


class Decoded:
    """make_gguf.write_gguf's ref: each tensor's decoded values, by GGUF name."""

    def __init__(self, plan):
        self.todo = [(g, int(np.prod(ne)), list(reversed(ne))) for g, ne, _, _ in plan]
        self.parts, self.out = [], {}

    def write(self, x):
        self.parts.append(np.asarray(x, dtype=mg.F32).reshape(-1))
        g, n, shape = self.todo[0]
        if sum(p.size for p in self.parts) == n:
            self.out[g] = np.concatenate(self.parts).reshape(shape)
            self.parts = []
            self.todo.pop(0)


def undo_plan(tc, tied, got, prefix):
    """{HF name: float32 array}: the decoded GGUF tensors with plan_tensors' transforms undone."""
    Hk, Hv = tc["linear_num_key_heads"], tc["linear_num_value_heads"]
    dv, key_dim, r = tc["linear_value_head_dim"], tc["linear_num_key_heads"] * tc["linear_key_head_dim"], \
        tc["linear_num_value_heads"] // tc["linear_num_key_heads"]

    def grouped(x, axis, d):
        """The inverse of plan_tensors' tiled(): value heads back from j*Hk + g to g*r + j."""
        x = np.moveaxis(x, axis, 0)
        s = x.shape
        x = x.reshape(r, Hk, d, *s[1:]).swapaxes(0, 1).reshape(s)
        return np.moveaxis(x, 0, axis)

    out, P = {}, prefix
    out[P + "embed_tokens.weight"] = got["token_embd.weight"]
    out[P + "norm.weight"] = got["output_norm.weight"] - 1
    if not tied:
        out["lm_head.weight"] = got["output.weight"]
    types = ref.layer_types(tc)
    for i in range(tc["num_hidden_layers"]):
        p, g = f"{P}layers.{i}.", f"blk.{i}."
        out[p + "input_layernorm.weight"] = got[g + "attn_norm.weight"] - 1
        out[p + "post_attention_layernorm.weight"] = got[g + "post_attention_norm.weight"] - 1
        if types[i] == "full_attention":
            a = p + "self_attn."
            for hf, gn in (("q_proj", "attn_q"), ("k_proj", "attn_k"), ("v_proj", "attn_v"),
                           ("o_proj", "attn_output")):
                out[a + hf + ".weight"] = got[g + gn + ".weight"]
            out[a + "q_norm.weight"] = got[g + "attn_q_norm.weight"] - 1
            out[a + "k_norm.weight"] = got[g + "attn_k_norm.weight"] - 1
        else:
            a = p + "linear_attn."
            x = got[g + "attn_qkv.weight"]
            out[a + "in_proj_qkv.weight"] = np.concatenate([x[:2 * key_dim], grouped(x[2 * key_dim:], 0, dv)])
            out[a + "in_proj_z.weight"] = grouped(got[g + "attn_gate.weight"], 0, dv)
            out[a + "in_proj_b.weight"] = grouped(got[g + "ssm_beta.weight"], 0, 1)
            out[a + "in_proj_a.weight"] = grouped(got[g + "ssm_alpha.weight"], 0, 1)
            out[a + "A_log"] = np.log(-grouped(got[g + "ssm_a"], 0, 1).astype(np.float64)).astype(mg.F32)
            out[a + "dt_bias"] = grouped(got[g + "ssm_dt.bias"], 0, 1)
            c = got[g + "ssm_conv1d.weight"]
            c = np.concatenate([c[:2 * key_dim], grouped(c[2 * key_dim:], 0, dv)])
            out[a + "conv1d.weight"] = c.reshape(c.shape[0], 1, c.shape[1])
            out[a + "norm.weight"] = got[g + "ssm_norm.weight"]
            out[a + "out_proj.weight"] = grouped(got[g + "ssm_out.weight"], 1, dv)
        m = p + "mlp."
        if tc.get("num_experts"):
            out[m + "gate.weight"] = got[g + "ffn_gate_inp.weight"]
            for w in ("gate", "up", "down"):
                exps = got[f"{g}ffn_{w}_exps.weight"]
                for e in range(exps.shape[0]):
                    out[f"{m}experts.{e}.{w}_proj.weight"] = exps[e]
                out[f"{m}shared_expert.{w}_proj.weight"] = got[f"{g}ffn_{w}_shexp.weight"]
            out[m + "shared_expert_gate.weight"] = got[g + "ffn_gate_inp_shexp.weight"].reshape(1, -1)
        else:
            for w in ("gate", "up", "down"):
                out[f"{m}{w}_proj.weight"] = got[f"{g}ffn_{w}.weight"]
    return out


class Shapes:
    """What make_gguf.RefWriter asks of its source: each tensor's shape."""

    def __init__(self, tensors):
        self.tensors = tensors

    def shape(self, name):
        return self.tensors[name].shape


def write_ref_folder(out_dir, tensors, model_dir):
    """tensors as float32 model.safetensors, with the source's config and tokenizer files."""
    os.makedirs(out_dir, exist_ok=True)
    w = mg.RefWriter(os.path.join(out_dir, "model.safetensors"), list(tensors), Shapes(tensors),
                     generator="make_gguf_qwen3_5.py --ref-out")
    for x in tensors.values():
        w.write(x)
    w.close()
    mg.finish_ref(argparse.Namespace(ref_out=out_dir, ref_logits=None), model_dir)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="Hugging Face Qwen3.5 folder")
    ap.add_argument("--out", required=True, help="GGUF file to write")
    ap.add_argument("--type", default="f32", choices=TYPES, help="matrices' type (default f32)")
    ap.add_argument("--name", help="general.name (default: the model folder's name)")
    ap.add_argument("--ref-out", help="folder for the decoded weights as a float32 HF model")
    a = ap.parse_args()
    if sys.byteorder != "little":
        mg.die("this writer assumes a little-endian machine")
    cfg = mg.load_json(os.path.join(a.model, "config.json"))
    tc, tied = ref.text_config(cfg)
    arch = check_config(cfg, tc)
    if not os.path.exists(os.path.join(a.model, "tokenizer.json")):
        mg.die(f"{a.model} has no tokenizer.json")
    st = mg.SafeTensors(a.model)
    prefix = "model.language_model." if "model.language_model.embed_tokens.weight" in st else "model."
    plan, T = plan_tensors(tc, tied, st, a.type, prefix)
    name = a.name or os.path.basename(os.path.normpath(a.model))
    kv = metadata(tc, arch, name, a.type, a.model)
    decoded = Decoded(plan) if a.ref_out else None
    mg.write_gguf(a.out, kv, plan, T, decoded)
    if decoded:
        write_ref_folder(a.ref_out, undo_plan(tc, tied, decoded.out, prefix), a.model)
    counts = {}
    for _, _, t, _ in plan:
        counts[t] = counts.get(t, 0) + 1
    dk, dv = tc["linear_key_head_dim"], tc["linear_value_head_dim"]
    print(f"wrote {a.out}: {arch}, {len(plan)} tensors ("
          + ", ".join(f"{n} {t}" for t, n in sorted(counts.items())) + ")"
          + (f"; note: linear key/value head dims {dk}/{dv} differ, which llama.cpp's "
             "qwen35 loader does not accept" if dk != dv else ""))


if __name__ == "__main__":
    main()
