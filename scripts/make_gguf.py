#!/usr/bin/python3
"""Write a Hugging Face Qwen3 / Qwen3-MoE folder as a GGUF file (llama.cpp's format), numpy only.

Usage (from the repository root):
    scripts/make_gguf.py --model HF_DIR --out FILE.gguf --type TYPE [--ref-out DIR]
    scripts/make_gguf.py --model HF_DIR --out FILE.gguf --type q4_k --ref-out DIR \\
        --ref-logits FILE.ref [--ref-ids 9707,11,1879] [--ref-greedy 16]
TYPE: f32 f16 bf16 q8_0 q4_0 q5_0 iq4_nl q4_k q5_k q6_k mix

Why: the server loads GGUF files on the CPU. Its tests need GGUF models whose every bit
is known, made from the random tiny models of scripts/make_random_qwen3.py, and its
benchmarks need quantized full-size models; neither may depend on llama.cpp's tools or
Python packages beyond numpy. The quantized block encoders and decoders
(scripts/gguf_blocks.py) are written from the format's definition (ggml's block layouts,
as model/weight_format.h restates them); scripts/gguf_crosscheck.py checks the decoders
against gguf-py's on any file.

The file is what llama.cpp's convert_hf_to_gguf.py writes for the same folder:
GGUF version 3, little-endian, tensor data aligned to 32 bytes (general.alignment = 32 is
also written out, a key convert leaves implicit); architecture "qwen3" or "qwen3moe";
the hyper-parameters under ARCH.*; the GPT-2 style BPE vocabulary (tokenizer.ggml.*),
the special token ids and the chat template. Tensors (ggml dims, row length first):
    token_embd, output_norm, output (untied heads only),
    blk.N.attn_norm, attn_q, attn_k, attn_v, attn_output, attn_q_norm, attn_k_norm, ffn_norm,
    blk.N.ffn_gate, ffn_up, ffn_down                          (dense layers)
    blk.N.ffn_gate_inp [hidden, experts],                      (sparse layers)
    blk.N.ffn_gate_exps / ffn_up_exps [hidden, moe_ff, experts], ffn_down_exps [moe_ff, hidden, experts]
Q and K are not permuted (Qwen's RoPE is the NeoX one; only llama's converter permutes).
1-D tensors (norms) and the MoE router (ffn_gate_inp) are always F32, as convert does.
A Qwen3-MoE model whose mlp_only_layers keep dense layers gets blk.N.ffn_{gate,up,down}
for them: our loader reads that, llama.cpp's qwen3moe (every layer sparse) cannot.

Tensor types (--type): every matrix in that type, except
    mix   our Q4_K_M-like recipe: token_embd, output, attn_v, ffn_down and ffn_down_exps
          Q6_K, every other matrix Q4_K (general.file_type says MOSTLY_Q4_K_M);
and a matrix whose row length is not a whole number of the type's blocks falls back to
Q8_0 (row length a multiple of 32), else F16, with a line printed.

Encoders (scale choice is simple, not llama-quantize's search; decoding is exact by
definition):
    Q8_0  d = max|x| / 127 rounded to f16, q = round(x / d)
    Q4_K  per sub-block of 32: min m = -min(x, 0), scale = (max - min) / 15; the eight
          scales and mins are 6-bit multiples of d = max(scale)/63, dmin = max(m)/63 (f16)
    Q5_K  as Q4_K with 31 levels
    Q6_K  per sub-block of 16: scale = max|x| / 31 as an int8 multiple of d = max/127
Decoders follow ggml's float32 arithmetic: Q8_0 d*q; Q4_K/Q5_K (d*sc)*q - (dmin*m), each
product rounded to float32; Q6_K (d*sc)*(q-32).

--ref-out DIR writes the weights the GGUF file holds, decoded, as a Hugging Face folder
(config.json, model.safetensors in F32 under HF names, tokenizer files) for
scripts/qwen3_ref.py. --ref-logits FILE (needs --ref-out) then runs qwen3_ref.py's float64
forward on that folder and writes FILE, little-endian:
    int32 n_prompt, int32 n_vocab, int32 n_greedy,
    int32 prompt[n_prompt], int32 greedy[n_greedy],     greedy: float64 greedy continuation
    float32 margin[n_greedy],                           top1 - top2 logit at each greedy step
    float32 logits[n_prompt][n_vocab]                   the float64 logits at every position

The safetensors files (one, or shards named by model.safetensors.index.json) are read
tensor by tensor through memory maps, and large matrices are encoded in row chunks, so a
model never sits in memory twice.
"""
import argparse
import json
import os
import shutil
import struct
import sys

import numpy as np

# the block types (importers of this module use them through it too)
from gguf_blocks import F32, GGML, bf16_to_f32, decode, encode, f32_to_bf16  # noqa: F401

ALIGN = 32
GGUF_VERSION = 3
QUANT_VERSION = 2  # general.quantization_version: the K-quant layouts' current version

# general.file_type (llama.cpp's LlamaFileType) for each --type
FILE_TYPE = {"f32": 0, "f16": 1, "q4_0": 2, "q5_0": 8, "iq4_nl": 25, "q8_0": 7, "q4_k": 14, "q5_k": 16,
             "q6_k": 18, "bf16": 32, "mix": 15}
TYPES = sorted(FILE_TYPE)

# GGUF metadata value types
U8, I8, U16, I16, U32, I32, F32T, BOOL, STR, ARR, U64, I64, F64 = range(13)

TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED = 1, 3, 4, 5
SPECIAL_KEYS = {"bos": "bos_token_id", "eos": "eos_token_id", "unk": "unknown_token_id",
                "sep": "seperator_token_id", "pad": "padding_token_id", "cls": "cls_token_id",
                "mask": "mask_token_id"}  # "seperator" is the format's spelling
CHUNK_ROWS = 16384  # rows encoded at a time (bounds memory, not part of the output)


def die(msg):
    sys.exit(f"{os.path.basename(sys.argv[0])}: {msg}")  # this script's or an importer's name


# ---------------------------------------------------------------- safetensors input

class SafeTensors:
    """Tensors of model.safetensors or its shards (model.safetensors.index.json), memory-mapped."""

    def __init__(self, model_dir):
        index = os.path.join(model_dir, "model.safetensors.index.json")
        if os.path.exists(index):
            with open(index) as f:
                files = sorted(set(json.load(f)["weight_map"].values()))
        elif os.path.exists(os.path.join(model_dir, "model.safetensors")):
            files = ["model.safetensors"]
        else:
            die(f"{model_dir} has neither model.safetensors nor model.safetensors.index.json")
        self.where = {}
        for fn in files:
            path = os.path.join(model_dir, fn)
            with open(path, "rb") as f:
                n = struct.unpack("<Q", f.read(8))[0]
                header = json.loads(f.read(n))
            data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
            for name, t in header.items():
                if name != "__metadata__":
                    self.where[name] = (data, t)
        # sentence-transformers saves an embedding model's base (Qwen3Model) without the
        # "model." prefix; read it under the causal LM's names, as convert_hf_to_gguf.py does
        if "embed_tokens.weight" in self.where and "model.embed_tokens.weight" not in self.where:
            self.where.update({"model." + k: v for k, v in list(self.where.items())})

    def __contains__(self, name):
        return name in self.where

    def shape(self, name):
        return tuple(self.where[name][1]["shape"])

    def rows(self, name, r0, r1):
        """float32 rows [r0, r1) of a 1-D or 2-D tensor (a 1-D tensor is one row)."""
        data, t = self.where[name]
        shape = t["shape"]
        cols = shape[-1] if len(shape) > 1 else shape[0]
        if len(shape) == 1:
            r0, r1 = 0, 1
        size = {"BF16": 2, "F16": 2, "F32": 4}.get(t["dtype"])
        if size is None:
            die(f"tensor {name}: dtype {t['dtype']} is not supported (bf16, f16, f32 only)")
        a = t["data_offsets"][0] + r0 * cols * size
        raw = data[a:a + (r1 - r0) * cols * size]
        if t["dtype"] == "BF16":
            x = bf16_to_f32(raw.view("<u2"))
        elif t["dtype"] == "F16":
            x = raw.view("<f2").astype(F32)
        else:
            x = raw.view("<f4").astype(F32)
        return x.reshape(r1 - r0, cols)

    def dtype(self, name):
        return self.where[name][1]["dtype"]

    def raw(self, name):
        """The tensor's stored bytes (uint8, a view of the file), whatever its dtype."""
        data, t = self.where[name]
        a, b = t["data_offsets"]
        return data[a:b]

    def bf16_bits(self, name):
        """The tensor's bf16 bits when stored as bf16, else None (bf16 output copies them)."""
        data, t = self.where[name]
        if t["dtype"] != "BF16":
            return None
        a, b = t["data_offsets"]
        return data[a:b].view("<u2")


# ---------------------------------------------------------------- the model's plan

def load_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def is_moe_layer(c, i):
    return (c.get("num_experts", 0) > 0 and i not in c.get("mlp_only_layers", [])
            and (i + 1) % c.get("decoder_sparse_step", 1) == 0)


def check_config(c):
    arch = (c.get("architectures") or [None])[0]
    mt = c.get("model_type")
    if (mt, arch) not in (("qwen3", "Qwen3ForCausalLM"), ("qwen3_moe", "Qwen3MoeForCausalLM")):
        die(f"model_type {mt!r} / architecture {arch!r} is not supported: only qwen3 "
            "(Qwen3ForCausalLM) and qwen3_moe (Qwen3MoeForCausalLM)")
    if c.get("rope_scaling"):
        die(f"rope_scaling {c['rope_scaling']!r} is not supported (plain RoPE only)")
    if c.get("attention_bias"):
        die("attention_bias is not supported (Qwen3 has no attention biases)")
    if mt == "qwen3_moe":
        if not c.get("norm_topk_prob", False):
            die("norm_topk_prob false is not supported: llama.cpp's qwen3moe always renormalises "
                "the chosen experts' weights, and the format has no key to say otherwise")
        if c.get("shared_expert_intermediate_size"):
            die("shared experts are not supported (Qwen3-MoE has none)")
    return "qwen3moe" if mt == "qwen3_moe" else "qwen3"


def plan_tensors(c, st, qtype):
    """[(gguf name, ggml ne, type, [hf names])]; several HF names are experts stacked."""
    L = c["num_hidden_layers"]
    tied = c.get("tie_word_embeddings", False)
    plan = []

    def mat(gname, hfs, kind):
        for hf in hfs:
            if hf not in st:
                die(f"tensor {hf} is missing from the safetensors")
        shp = st.shape(hfs[0])
        if any(st.shape(h) != shp for h in hfs):
            die(f"{gname}: the experts' shapes differ")
        if len(shp) == 1:
            plan.append((gname, [shp[0]], "f32", hfs))
            return
        rows, cols = shp
        t = qtype
        if qtype == "mix":
            t = "q6_k" if kind in ("token_embd", "output", "attn_v", "ffn_down", "ffn_down_exps") else "q4_k"
        if kind == "ffn_gate_inp":
            t = "f32"  # the router stays F32, as convert_hf_to_gguf.py and llama-quantize keep it
        blk = GGML[t][1]
        if cols % blk:
            fb = "q8_0" if cols % 32 == 0 and t != "q8_0" else "f16"
            print(f"note: {gname}: {cols} values a row is not a whole number of {t} blocks; "
                  f"written as {fb}")
            t = fb
        ne = [cols, rows] + ([len(hfs)] if len(hfs) > 1 or kind.endswith("_exps") else [])
        plan.append((gname, ne, t, hfs))

    mat("token_embd.weight", ["model.embed_tokens.weight"], "token_embd")
    for i in range(L):
        p, g = f"model.layers.{i}.", f"blk.{i}."
        mat(g + "attn_norm.weight", [p + "input_layernorm.weight"], "norm")
        mat(g + "attn_q.weight", [p + "self_attn.q_proj.weight"], "attn_q")
        mat(g + "attn_k.weight", [p + "self_attn.k_proj.weight"], "attn_k")
        mat(g + "attn_v.weight", [p + "self_attn.v_proj.weight"], "attn_v")
        mat(g + "attn_output.weight", [p + "self_attn.o_proj.weight"], "attn_output")
        mat(g + "attn_q_norm.weight", [p + "self_attn.q_norm.weight"], "norm")
        mat(g + "attn_k_norm.weight", [p + "self_attn.k_norm.weight"], "norm")
        mat(g + "ffn_norm.weight", [p + "post_attention_layernorm.weight"], "norm")
        if is_moe_layer(c, i):
            E = c["num_experts"]
            mat(g + "ffn_gate_inp.weight", [p + "mlp.gate.weight"], "ffn_gate_inp")
            for w, gw in (("gate_proj", "ffn_gate_exps"), ("up_proj", "ffn_up_exps"),
                          ("down_proj", "ffn_down_exps")):
                mat(f"{g}{gw}.weight", [f"{p}mlp.experts.{e}.{w}.weight" for e in range(E)], gw)
        else:
            for w, gw in (("gate_proj", "ffn_gate"), ("up_proj", "ffn_up"), ("down_proj", "ffn_down")):
                mat(f"{g}{gw}.weight", [f"{p}mlp.{w}.weight"], gw)
    mat("output_norm.weight", ["model.norm.weight"], "norm")
    if not tied:
        mat("output.weight", ["lm_head.weight"], "output")
    return plan


def tensor_bytes(ne, t):
    _, blk, bpb = GGML[t]
    n = int(np.prod(ne))
    return n // blk * bpb


# ---------------------------------------------------------------- tokenizer

def looks_special(tok):
    """Added tokens that ought to be control tokens though not marked special (as convert)."""
    return ((tok.startswith("<|") and tok.endswith("|>")) or tok in ("<pad>", "<mask>", "<2mass>", "[@BOS@]")
            or (tok.startswith("<｜") and tok.endswith("｜>"))
            or (tok.startswith("<unused") and tok.endswith(">")))


def vocab_metadata(model_dir, c):
    """[(key, vtype, value, subtype)] of the tokenizer, in convert's order."""
    tj = load_json(os.path.join(model_dir, "tokenizer.json"))
    tcp = os.path.join(model_dir, "tokenizer_config.json")
    tc = load_json(tcp) if os.path.exists(tcp) else {}
    model = tj.get("model", {})
    if model.get("type") != "BPE":
        die(f"tokenizer.json model type {model.get('type')!r} is not supported (BPE only)")
    pp = tj.get("post_processor") or {}
    template_adds = {}  # "bos" / "eos" -> id: a TemplateProcessing's tokens around a single input
    for proc in pp.get("processors", [pp]) if pp else []:
        if proc.get("type") == "TemplateProcessing":
            single = proc.get("single") or []
            at = [i for i, p in enumerate(single) if "Sequence" in p]
            if len(at) != 1 or len(single) - 1 > 2 or at[0] > 1 or len(single) - at[0] - 1 > 1:
                die(f"tokenizer.json TemplateProcessing {single!r}: only one token before and/or after "
                    "the input is supported (add_bos_token / add_eos_token)")
            for i, piece in enumerate(single):
                if "SpecialToken" in piece:
                    tok = piece["SpecialToken"]["id"]
                    template_adds["bos" if i < at[0] else "eos"] = proc["special_tokens"][tok]["ids"][0]
        elif proc.get("type") not in ("ByteLevel", None):
            die(f"tokenizer.json post_processor {proc.get('type')!r} is not supported "
                "(ByteLevel, TemplateProcessing)")
    vocab = dict(model["vocab"])
    added = {}
    for a in tj.get("added_tokens", []):
        vocab[a["content"]] = a["id"]
        added[a["id"]] = a
    n_vocab = c.get("vocab_size", len(vocab))
    by_id = {}
    for tok, i in vocab.items():
        if i >= n_vocab:
            die(f"token {tok!r} has id {i}, not under vocab_size {n_vocab}")
        by_id[i] = tok
    tokens, types = [], []
    for i in range(n_vocab):
        tok = by_id.get(i)
        if tok is None:
            tokens.append(f"[PAD{i}]")
            types.append(TOKEN_UNUSED)
        elif i in added:
            tokens.append(tok)
            types.append(TOKEN_CONTROL if added[i].get("special") or looks_special(tok)
                         else TOKEN_USER_DEFINED)
        else:
            tokens.append(tok)
            types.append(TOKEN_NORMAL)

    merges = model.get("merges") or []
    if merges and not isinstance(merges[0], str):  # ["a", "b"] pairs: spaces inside as U+0120
        merges = [f"{a.replace(' ', chr(288))} {b.replace(' ', chr(288))}" for a, b in merges]

    # special ids: tokenizer_config.json's *_token (looked up among the added tokens) first,
    # then config.json's *_token_id; add_*_token flags from tokenizer_config.json
    ids, add = {}, {}
    for typ in SPECIAL_KEYS:
        if isinstance(tc.get(f"add_{typ}_token"), bool):
            add[typ] = tc[f"add_{typ}_token"]
        entry = tc.get(f"{typ}_token")
        content = entry.get("content") if isinstance(entry, dict) else entry
        if isinstance(content, str):
            tid = next((a["id"] for a in tj.get("added_tokens", []) if a["content"] == content), None)
            if isinstance(tid, int) and typ not in ids:
                ids[typ] = tid
    for typ in SPECIAL_KEYS:
        tid = c.get(f"{typ}_token_id")
        if isinstance(tid, int) and typ not in ids:
            ids[typ] = tid

    # The template's tokens are added (add_*_token); as convert's SpecialVocab does, a trailing
    # token other than the eos token becomes eos, the old eos staying an end token as eot
    # (Qwen3-Embedding: <|endoftext|> appended, <|im_end|> still ends a chat turn).
    eot = None
    for typ, tid in template_adds.items():
        if typ == "eos" and ids.get("eos", tid) != tid:
            eot = ids["eos"]
        elif ids.get(typ, tid) != tid:
            die(f"tokenizer.json's template adds token {tid} where the {typ} token is {ids[typ]}")
        ids[typ], add[typ] = tid, True

    kv = [("tokenizer.ggml.model", STR, "gpt2", None),
          ("tokenizer.ggml.pre", STR, "qwen2", None),
          ("tokenizer.ggml.tokens", ARR, tokens, STR),
          ("tokenizer.ggml.token_type", ARR, types, I32)]
    if merges:
        kv.append(("tokenizer.ggml.merges", ARR, merges, STR))
    for typ, tid in ids.items():
        kv.append((f"tokenizer.ggml.{SPECIAL_KEYS[typ]}", U32, tid, None))
    if eot is not None:
        kv.append(("tokenizer.ggml.eot_token_id", U32, eot, None))
    for typ, v in add.items():
        if typ in ("bos", "eos", "sep"):
            kv.append((f"tokenizer.ggml.add_{typ}_token", BOOL, v, None))
    if isinstance(tc.get("chat_template"), str) and tc["chat_template"]:
        kv.append(("tokenizer.chat_template", STR, tc["chat_template"], None))
    return kv


# ---------------------------------------------------------------- GGUF writing

def pack_str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


SCALAR = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32T: "<f",
          BOOL: "<?", U64: "<Q", I64: "<q", F64: "<d"}


def pack_kv(key, vt, val, sub):
    out = [pack_str(key), struct.pack("<I", vt)]
    if vt == STR:
        out.append(pack_str(val))
    elif vt == ARR:
        out.append(struct.pack("<IQ", sub, len(val)))
        if sub == STR:
            enc = [s.encode("utf-8") for s in val]
            lens = np.array([len(e) for e in enc], dtype="<u8").tobytes()
            out.extend(x for i, e in enumerate(enc) for x in (lens[8 * i:8 * i + 8], e))
        else:
            out.append(np.asarray(val, dtype=SCALAR[sub]).tobytes())
    else:
        out.append(struct.pack(SCALAR[vt], val))
    return b"".join(out)


def metadata(c, arch, name, qtype, model_dir):
    kv = [("general.architecture", STR, arch, None),
          ("general.type", STR, "model", None),
          ("general.name", STR, name, None),
          ("general.alignment", U32, ALIGN, None)]
    a = arch + "."
    kv += [(a + "block_count", U32, c["num_hidden_layers"], None),
           (a + "context_length", U32, c["max_position_embeddings"], None),
           (a + "embedding_length", U32, c["hidden_size"], None),
           (a + "feed_forward_length", U32, c["intermediate_size"], None),
           (a + "attention.head_count", U32, c["num_attention_heads"], None),
           (a + "attention.head_count_kv", U32, c["num_key_value_heads"], None),
           (a + "rope.freq_base", F32T, float(c["rope_theta"]), None),
           (a + "attention.layer_norm_rms_epsilon", F32T, float(c["rms_norm_eps"]), None)]
    if arch == "qwen3moe":
        kv += [(a + "expert_count", U32, c["num_experts"], None),
               (a + "expert_used_count", U32, c["num_experts_per_tok"], None)]
    kv += [(a + "attention.key_length", U32, c["head_dim"], None),
           (a + "attention.value_length", U32, c["head_dim"], None),
           ("general.file_type", U32, FILE_TYPE[qtype], None)]
    if arch == "qwen3moe":
        kv.append((a + "expert_feed_forward_length", U32, c["moe_intermediate_size"], None))
    kv.append(("general.quantization_version", U32, QUANT_VERSION, None))
    pooling = pooling_type(model_dir)
    if pooling is not None:
        kv.append((a + "pooling_type", U32, pooling, None))
    return kv + vocab_metadata(model_dir, c)


def pooling_type(model_dir):
    """An embedding folder's pooling as convert_hf_to_gguf.py records it (1 mean, 2 cls,
    3 last): modules.json's Pooling module and its config.json; None without one."""
    path = os.path.join(model_dir, "modules.json")
    if not os.path.isfile(path):
        return None
    for mod in load_json(path):
        if mod.get("type", "").endswith("Pooling"):
            cfg = load_json(os.path.join(model_dir, mod.get("path", ""), "config.json"))
            for key, value in (("pooling_mode_mean_tokens", 1), ("pooling_mode_cls_token", 2),
                               ("pooling_mode_lasttoken", 3)):
                if cfg.get(key):
                    return value
            die(f"{path}: the Pooling module sets none of mean_tokens, cls_token, lasttoken")
    return None


def pad_to(f, align=ALIGN):
    n = -f.tell() % align
    if n:
        f.write(b"\0" * n)


def matrix_chunks(st, hfs, t):
    """Yield (encoded uint8 rows, rows decoded as float32 [rows, cols]) in file order."""
    for hf in hfs:
        shp = st.shape(hf)
        rows = shp[0] if len(shp) > 1 else 1
        if t == "bf16" and (bits := st.bf16_bits(hf)) is not None:
            raw = np.ascontiguousarray(bits).view(np.uint8)  # exact: no round trip
            yield raw, None
            continue
        for r0 in range(0, rows, CHUNK_ROWS):
            x = st.rows(hf, r0, min(rows, r0 + CHUNK_ROWS))
            if not np.all(np.isfinite(x)):
                die(f"tensor {hf} holds a NaN or an infinity")
            yield encode(x, t), x.shape


def write_gguf(path, kv, plan, st, ref):
    """Header, metadata, tensor infos, data; ref (or None): a RefWriter to feed decoded data."""
    infos = []
    off = 0
    for gname, ne, t, _ in plan:
        infos.append(pack_str(gname) + struct.pack("<I", len(ne))
                     + struct.pack(f"<{len(ne)}Q", *ne) + struct.pack("<IQ", GGML[t][0], off))
        off += tensor_bytes(ne, t)
        off += -off % ALIGN
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<IIQQ", 0x46554747, GGUF_VERSION, len(plan), len(kv)))  # "GGUF"
        for k in kv:
            f.write(pack_kv(*k))
        for i in infos:
            f.write(i)
        pad_to(f)
        base = f.tell()
        for gname, ne, t, hfs in plan:
            pad_to(f)
            start = f.tell()
            for raw, shape in matrix_chunks(st, hfs, t):
                f.write(raw.tobytes())
                if ref is not None:
                    ref.write(decode(raw, t))
            if f.tell() - start != tensor_bytes(ne, t):
                die(f"internal error: {gname} wrote {f.tell() - start} bytes")
        pad_to(f)
        assert f.tell() - base == off
    os.replace(tmp, path)


class RefWriter:
    """model.safetensors in F32 under the HF names (shapes from st), data streamed in the
    order of names."""

    def __init__(self, path, names, st, generator="make_gguf.py --ref-out"):
        header, off = {"__metadata__": {"format": "pt", "generator": generator}}, 0
        for hf in names:
            shp = list(st.shape(hf))
            n = 4 * int(np.prod(shp))
            header[hf] = {"dtype": "F32", "shape": shp, "data_offsets": [off, off + n]}
            off += n
        hb = json.dumps(header, separators=(",", ":")).encode()
        hb += b" " * (-len(hb) % 8)
        self.f = open(path, "wb")
        self.f.write(struct.pack("<Q", len(hb)) + hb)

    def write(self, x):
        self.f.write(np.asarray(x, dtype="<f4").tobytes())

    def close(self):
        self.f.close()


def write_ref_logits(ref_dir, path, ids, n_greedy):
    """float64 reference of the decoded weights (scripts/qwen3_ref.py); layout in the docstring."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import qwen3_ref
    m = qwen3_ref.Qwen3(ref_dir, "float64")
    logits = m.forward(ids)
    toks, margins = m.greedy(ids, n_greedy)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<3i", len(ids), logits.shape[1], n_greedy))
        f.write(np.asarray(ids + toks, dtype="<i4").tobytes())
        f.write(np.asarray(margins, dtype="<f4").tobytes())
        f.write(np.ascontiguousarray(logits, dtype="<f4").tobytes())
    os.replace(path + ".tmp", path)
    return toks


def add_ref_args(ap):
    """--ref-out, --ref-logits, --ref-ids, --ref-greedy (shared with make_fp8_qwen3.py)."""
    ap.add_argument("--ref-out", help="folder for the decoded weights as an F32 HF model")
    ap.add_argument("--ref-logits", help="file for the float64 reference (needs --ref-out)")
    ap.add_argument("--ref-ids", default="9707,11,1879,0,40,1079,264,1467,13,151643,151644,872",
                    help="--ref-logits: the prompt's token ids")
    ap.add_argument("--ref-greedy", type=int, default=16, help="--ref-logits: greedy tokens")


def finish_ref(a, model_dir):
    """After a RefWriter has written a.ref_out/model.safetensors: the config and tokenizer
    files beside it, then a.ref_logits when asked for."""
    for fn in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        if os.path.exists(os.path.join(model_dir, fn)):
            shutil.copyfile(os.path.join(model_dir, fn), os.path.join(a.ref_out, fn))
    if a.ref_logits:
        ids = [int(t) for t in a.ref_ids.replace(",", " ").split()]
        toks = write_ref_logits(a.ref_out, a.ref_logits, ids, a.ref_greedy)
        print(f"wrote {a.ref_logits}: greedy {toks}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="Hugging Face Qwen3 / Qwen3-MoE folder")
    ap.add_argument("--out", required=True, help="GGUF file to write")
    ap.add_argument("--type", required=True, choices=TYPES, help="tensor type (see above)")
    ap.add_argument("--name", help="general.name (default: the model folder's name)")
    add_ref_args(ap)
    a = ap.parse_args()
    if a.ref_logits and not a.ref_out:
        ap.error("--ref-logits needs --ref-out")
    if sys.byteorder != "little":
        die("this writer assumes a little-endian machine")

    c = load_json(os.path.join(a.model, "config.json"))
    arch = check_config(c)
    for fn in ("tokenizer.json",):
        if not os.path.exists(os.path.join(a.model, fn)):
            die(f"{a.model} has no {fn}")
    st = SafeTensors(a.model)
    plan = plan_tensors(c, st, a.type)
    name = a.name or os.path.basename(os.path.normpath(a.model))
    kv = metadata(c, arch, name, a.type, a.model)

    ref = None
    if a.ref_out:
        os.makedirs(a.ref_out, exist_ok=True)
        ref = RefWriter(os.path.join(a.ref_out, "model.safetensors"),
                        [hf for *_, hfs in plan for hf in hfs], st)
    write_gguf(a.out, kv, plan, st, ref)
    counts = {}
    for _, _, t, _ in plan:
        counts[t] = counts.get(t, 0) + 1
    print(f"wrote {a.out}: {arch}, {len(plan)} tensors ("
          + ", ".join(f"{n} {t}" for t, n in sorted(counts.items())) + ")")
    if ref is not None:
        ref.close()
        finish_ref(a, a.model)


if __name__ == "__main__":
    main()
