#!/usr/bin/python3
"""Write a Hugging Face Qwen3 / Qwen3-MoE folder as Qwen's FP8 checkpoint layout, numpy only.

Usage (from the repository root):
    scripts/make_fp8_qwen3.py --model HF_DIR --out OUT_DIR [--scale-dtype bf16|f32]
    scripts/make_fp8_qwen3.py --model HF_DIR --out OUT_DIR --ref-out DIR \\
        --ref-logits FILE.ref [--ref-ids 9707,11,1879] [--ref-greedy 16]
    scripts/make_fp8_qwen3.py --e4m3-table FILE        # the 256 values of float8_e4m3fn

Why: the server loads Qwen's published FP8 checkpoints (Qwen/Qwen3-*-FP8). Its tests need
such folders whose every bit is known, made from the random tiny models of
scripts/make_random_qwen3.py, without torch or any package beyond numpy. The float8_e4m3fn
encoder and decoder here are written from the format's definition, as model/weight_format.h
restates it, not taken from a library; --e4m3-table writes the decoder's 256 values so the C
decoder can be compared with them.

The folder is laid out as Qwen's FP8 releases are (DeepSeek-V3's "fp8" format):
    config.json      the input's, plus
                     "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3",
                         "quant_method": "fp8", "weight_block_size": [128, 128]}
                     and, for Qwen3-MoE, "modules_to_not_convert": lm_head and each layer's
                     input_layernorm, mlp.gate (sparse layers), post_attention_layernorm, in
                     layer order, as a Qwen3-30B-A3B FP8 config.json quoted in public lists
                     them (a loader should accept the key and need not read it)
    model.safetensors
        every decoder-layer projection (self_attn.{q,k,v,o}_proj, mlp.{gate,up,down}_proj,
        mlp.experts.E.{gate,up,down}_proj) as dtype "F8_E4M3" [N, K], and beside it
        NAME.weight_scale_inv [ceil(N/128), ceil(K/128)] in --scale-dtype (BF16 by default,
        as Qwen's FP8 checkpoints are reported to store it; DeepSeek-V3's are F32):
            W[n, k] = e4m3(q[n, k]) * weight_scale_inv[n / 128][k / 128]
        edge tiles partial; everything else (embed_tokens, lm_head, norms, the MoE router
        mlp.gate) byte for byte the input's tensor. Tensors are ordered as the safetensors
        library writes them (wider dtypes first, then by name), so each is aligned.
    tokenizer files and every other file of the input folder but its safetensors, copied

Quantization, per 128x128 tile (partial at the edges) of the weight read as float32:
    scale = max|w| / 448 in float32 (1 for an all-zero tile), rounded to the scale dtype;
    q = e4m3(w / scale) with that rounded scale (float32 division), rounding to nearest even
    and saturating to +-448 (0x7e / 0xfe); never a NaN. This is model/weight_format.c's
    fp8_e4m3_from_float: subnormals are the multiples of 2^-9 below 2^-6.

--ref-out DIR writes the weights the FP8 folder holds, dequantized (e4m3(q) * scale, one
float32 product per value, as fp8_dequantize_rows), with every other tensor as the input's,
as an F32 Hugging Face folder for scripts/qwen3_ref.py; --ref-logits FILE (needs --ref-out)
then runs its float64 forward and writes FILE in make_gguf.py's .ref layout (see its
docstring): the prompt, the greedy continuation and its margins, the logits at every position.

Inputs may be bf16, f16 or f32 safetensors (one file or shards). The input is read through
memory maps and matrices are quantized in chunks of whole tile rows, so a model never sits
in memory whole.
"""
import argparse
import json
import os
import shutil
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_gguf import (CHUNK_ROWS, SafeTensors, add_ref_args, bf16_to_f32, check_config,  # noqa: E402
                       die, f32_to_bf16, finish_ref, is_moe_layer, load_json, RefWriter)

F32 = np.float32
BLOCK = 128      # weight_block_size, both ways
E4M3_MAX = 448.0
QUANTIZATION_CONFIG = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                       "weight_block_size": [BLOCK, BLOCK]}
SCALE_DTYPES = {"bf16": "BF16", "f32": "F32"}
DTYPE_SIZE = {"F32": 4, "BF16": 2, "F16": 2, "F8_E4M3": 1}
assert CHUNK_ROWS % BLOCK == 0


# ---------------------------------------------------------------- float8_e4m3fn

def e4m3_decode(b):
    """uint8 bytes -> float32 values, exactly; NaN for 0x7f and 0xff.
    Bit 7 sign, bits 6-3 exponent e (bias 7), bits 2-0 mantissa m:
    e == 0: m * 2^-9 (subnormal); else (8 + m) * 2^(e - 10)."""
    b = np.asarray(b, dtype=np.uint8)
    e = ((b >> 3) & 15).astype(np.int32)
    m = (b & 7).astype(np.int32)
    mag = np.where(e == 0, np.ldexp(m.astype(F32), -9),
                   np.ldexp((8 + m).astype(F32), e - 10)).astype(F32)
    v = np.where(b & 0x80, -mag, mag).astype(F32)
    return np.where((b & 0x7F) == 0x7F, F32(np.nan), v).astype(F32)


def e4m3_encode(x):
    """float32 -> float8_e4m3fn bytes: round to nearest even, |x| >= 448 saturating to
    0x7e (sign kept), NaN -> 0x7f. The same steps as weight_format.c's fp8_e4m3_from_float."""
    x = np.asarray(x, dtype=F32)
    sign = np.where(np.signbit(x), np.uint8(0x80), np.uint8(0))
    a = np.abs(x)
    with np.errstate(invalid="ignore"):
        sub = a < F32(2.0 ** -6)
        big = a >= F32(E4M3_MAX)
    # subnormal: a multiple of 2^-9 (8 of them is 0x08, the first normal)
    q_sub = np.rint(np.ldexp(np.where(sub, a, F32(0)), 9))
    # normal: a = f * 2^e, f in [0.5, 1): 1.mmm * 2^(e - 1), mantissa rounded to even
    an = np.where(sub | big | np.isnan(a), F32(1), a)
    _, e = np.frexp(an)
    mant = np.rint(np.ldexp(an, 4 - e)).astype(np.int32) - 8
    carry = mant == 8
    mant = np.where(carry, 0, mant)
    e = np.where(carry, e + 1, e)
    q_norm = ((e - 1 + 7) << 3) | mant
    mag = np.where(sub, q_sub.astype(np.int32), q_norm)
    mag = np.where(big, 0x7E, mag)
    out = (mag.astype(np.uint8) | sign).astype(np.uint8)
    return np.where(np.isnan(x), np.uint8(0x7F), out).astype(np.uint8)


# ---------------------------------------------------------------- block quantization

def tile_view(x, fill=0):
    """[rows, cols] -> zero-padded [ceil(rows/128), 128, ceil(cols/128), 128] copy."""
    r, c = x.shape
    nr, nc = -(-r // BLOCK), -(-c // BLOCK)
    p = np.full((nr * BLOCK, nc * BLOCK), fill, dtype=x.dtype)
    p[:r, :c] = x
    return p.reshape(nr, BLOCK, nc, BLOCK)


def scale_expand(s, rows, cols):
    """[ceil(rows/128), ceil(cols/128)] -> [rows, cols], each tile's scale on its values."""
    return np.repeat(np.repeat(s, BLOCK, axis=0), BLOCK, axis=1)[:rows, :cols]


def quantize_block(w, scale_dtype):
    """float32 [rows, cols] (rows a multiple of 128 unless the last chunk) ->
    (q uint8 [rows, cols], scale bytes in scale_dtype [tiles_r, tiles_c], scale as float32,
    dequantized float32 [rows, cols])."""
    rows, cols = w.shape
    amax = np.abs(tile_view(w)).max(axis=(1, 3))
    scale = amax / F32(E4M3_MAX)
    scale = np.where(amax > 0, scale, F32(1)).astype(F32)
    if scale_dtype == "BF16":
        bits = f32_to_bf16(scale)
        scale = bf16_to_f32(bits).reshape(scale.shape)
        raw = bits.view(np.uint8)
    else:
        raw = np.ascontiguousarray(scale, dtype="<f4").view(np.uint8)
    if not np.all(np.isfinite(scale) & (scale > 0)):
        die("internal error: a scale is not a positive finite number")
    s = scale_expand(scale, rows, cols)
    q = e4m3_encode(w / s)
    deq = e4m3_decode(q) * s  # one float32 product per value, as fp8_dequantize_rows
    return q, raw.reshape(scale.shape[0], -1), scale, deq


# ---------------------------------------------------------------- the plan

def quantized_names(c, st):
    """The HF names of the matrices to store as F8_E4M3: every decoder-layer projection."""
    names = []
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        names += [p + f"self_attn.{w}_proj.weight" for w in "qkvo"]
        if is_moe_layer(c, i):
            names += [f"{p}mlp.experts.{e}.{w}_proj.weight" for e in range(c["num_experts"])
                      for w in ("gate", "up", "down")]
        else:
            names += [f"{p}mlp.{w}_proj.weight" for w in ("gate", "up", "down")]
    for n in names:
        if n not in st:
            die(f"tensor {n} is missing from the safetensors")
        if len(st.shape(n)) != 2:
            die(f"tensor {n} is not a matrix: shape {list(st.shape(n))}")
    return names


def modules_to_not_convert(c):
    """Qwen3-MoE FP8 configs' list: lm_head, then per layer the norms and the router."""
    out = ["lm_head"]
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out.append(p + "input_layernorm")
        if is_moe_layer(c, i):
            out.append(p + "mlp.gate")
        out.append(p + "post_attention_layernorm")
    return out


def output_tensors(st, quant, scale_dtype):
    """[(name, dtype, shape, source)] in the safetensors library's order (dtype width
    descending, then name): source ("copy", hf) or ("q", hf) / ("scale", hf)."""
    out = []
    for name in st.where:
        shp = list(st.shape(name))
        if name in quant:
            out.append((name, "F8_E4M3", shp, ("q", name)))
            out.append((name + "_scale_inv", scale_dtype,
                        [-(-shp[0] // BLOCK), -(-shp[1] // BLOCK)], ("scale", name)))
        else:
            dt = st.dtype(name)
            if dt not in DTYPE_SIZE:
                die(f"tensor {name}: dtype {dt} is not supported (bf16, f16, f32 only)")
            out.append((name, dt, shp, ("copy", name)))
    out.sort(key=lambda t: (-DTYPE_SIZE[t[1]], t[0]))
    return out


# ---------------------------------------------------------------- writing

def matrix_chunks(st, hf, scale_dtype):
    """quantize_block over a matrix in chunks of whole tile rows, in row order."""
    rows = st.shape(hf)[0]
    for r0 in range(0, rows, CHUNK_ROWS):
        w = st.rows(hf, r0, min(rows, r0 + CHUNK_ROWS))
        if not np.all(np.isfinite(w)):
            die(f"tensor {hf} holds a NaN or an infinity")
        yield quantize_block(w, scale_dtype)


def write_fp8(path, tensors, st, scale_dtype):
    """model.safetensors. A matrix is quantized twice, once for its scales and once for its
    bytes (the two are far apart in the file), so no matrix is held longer than a chunk."""
    header, off = {"__metadata__": {"format": "pt", "generator": "make_fp8_qwen3.py"}}, 0
    for name, dt, shp, _ in tensors:
        n = DTYPE_SIZE[dt] * int(np.prod(shp))
        header[name] = {"dtype": dt, "shape": shp, "data_offsets": [off, off + n]}
        off += n
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb)
        base = f.tell()
        for name, dt, shp, (kind, hf) in tensors:
            start = f.tell()
            if kind == "copy":
                f.write(np.ascontiguousarray(st.raw(hf)).tobytes())
            else:
                for q, s, _, _ in matrix_chunks(st, hf, scale_dtype):
                    f.write((q if kind == "q" else s).tobytes())
            a, b = header[name]["data_offsets"]
            if f.tell() - start != b - a:
                die(f"internal error: {name} wrote {f.tell() - start} bytes, not {b - a}")
        assert f.tell() - base == off
    os.replace(tmp, path)


def write_ref(ref, st, quant, scale_dtype):
    """The RefWriter's data, in st's order: quantized matrices dequantized, the rest as read."""
    for hf in st.where:
        if hf in quant:
            for _, _, _, deq in matrix_chunks(st, hf, scale_dtype):
                ref.write(deq)
        else:
            shp = st.shape(hf)
            ref.write(st.rows(hf, 0, shp[0] if len(shp) > 1 else 1))


def write_e4m3_table(path):
    """The 256 float32 values of the bytes 0x00..0xff, little-endian, NaN at 0x7f and 0xff."""
    t = e4m3_decode(np.arange(256, dtype=np.uint8))
    with open(path + ".tmp", "wb") as f:
        f.write(t.astype("<f4").tobytes())
    os.replace(path + ".tmp", path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", help="Hugging Face Qwen3 / Qwen3-MoE folder (bf16/f16/f32)")
    ap.add_argument("--out", help="folder to write the FP8 checkpoint to")
    ap.add_argument("--scale-dtype", choices=sorted(SCALE_DTYPES), default="bf16",
                    help="dtype of weight_scale_inv (default bf16, as Qwen's checkpoints)")
    ap.add_argument("--e4m3-table", help="file for the 256 float32 values of float8_e4m3fn")
    add_ref_args(ap)
    a = ap.parse_args()
    if a.ref_logits and not a.ref_out:
        ap.error("--ref-logits needs --ref-out")
    if bool(a.model) != bool(a.out):
        ap.error("--model and --out go together")
    if not a.model and not a.e4m3_table:
        ap.error("nothing to do: give --model and --out, or --e4m3-table")
    if sys.byteorder != "little":
        die("this writer assumes a little-endian machine")

    if a.e4m3_table:
        write_e4m3_table(a.e4m3_table)
        print(f"wrote {a.e4m3_table}: the 256 values of float8_e4m3fn")
    if not a.model:
        return

    c = load_json(os.path.join(a.model, "config.json"))
    check_config(c)
    if "quantization_config" in c:
        die(f"{a.model} is already quantized ({c['quantization_config'].get('quant_method')!r})")
    st = SafeTensors(a.model)
    quant = set(quantized_names(c, st))
    scale_dtype = SCALE_DTYPES[a.scale_dtype]
    tensors = output_tensors(st, quant, scale_dtype)

    if os.path.abspath(a.out) == os.path.abspath(a.model):
        die("--out must not be the --model folder")
    os.makedirs(a.out, exist_ok=True)
    write_fp8(os.path.join(a.out, "model.safetensors"), tensors, st, scale_dtype)

    qc = dict(QUANTIZATION_CONFIG)
    if c.get("model_type") == "qwen3_moe":
        qc["modules_to_not_convert"] = modules_to_not_convert(c)
    c["quantization_config"] = dict(sorted(qc.items()))
    with open(os.path.join(a.out, "config.json"), "w", encoding="utf-8") as f:
        json.dump(c, f, indent=2, ensure_ascii=False)
        f.write("\n")
    for fn in sorted(os.listdir(a.model)):
        src = os.path.join(a.model, fn)
        if (fn == "config.json" or fn.startswith("model.safetensors") or fn.endswith(".safetensors")
                or not os.path.isfile(src)):
            continue
        shutil.copyfile(src, os.path.join(a.out, fn))
    print(f"wrote {a.out}: {len(quant)} F8_E4M3 matrices with {scale_dtype} weight_scale_inv, "
          f"{len(tensors) - 2 * len(quant)} tensors copied")
    if a.ref_out:
        os.makedirs(a.ref_out, exist_ok=True)
        ref = RefWriter(os.path.join(a.ref_out, "model.safetensors"), list(st.where), st,
                        generator="make_fp8_qwen3.py --ref-out")
        write_ref(ref, st, quant, scale_dtype)
        ref.close()
        finish_ref(a, a.model)


if __name__ == "__main__":
    main()
