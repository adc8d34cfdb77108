#!/usr/bin/python3
"""Numpy reference forward pass of Qwen3 (HF Qwen3ForCausalLM and Qwen3MoeForCausalLM semantics): a debugging oracle.

No KV cache, no batching: every call recomputes the whole sequence. Weights (bf16/f16/f32
safetensors) are upcast exactly; all math runs in --dtype (float64 by default).

Usage (MODEL is a HF-style folder with config.json + model.safetensors):
  scripts/qwen3_ref.py MODEL logits --ids 9707,11,1879 [--top 10] [--all-positions] [--out last.f32]
  scripts/qwen3_ref.py MODEL greedy --ids 9707,11,1879 -n 16
  scripts/qwen3_ref.py MODEL dump   --ids 9707,11,1879 [--out acts.npz]
  scripts/qwen3_ref.py MODEL embed  --ids 9707,11,1879,151643 [--pooling last|mean|cls] [--raw]
--ids takes comma/space separated ids, or @FILE holding the same (a JSON list works too).
`dump` names follow llama.cpp's graph callback names (attn_norm-0, Qcur_normed-0, Qcur-0 = after
RoPE, kqv_out-0, ffn_out-0, l_out-0, result_norm, ...), plus attn_out-N = o_proj output.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np


def load_safetensors(path):
    """{name: float32 array}; bf16 is widened by putting its 16 bits on top of a float32."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        raw = data[t["data_offsets"][0]:t["data_offsets"][1]]
        if t["dtype"] == "BF16":
            x = (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)
        elif t["dtype"] == "F16":
            x = raw.view("<f2").astype(np.float32)
        elif t["dtype"] == "F32":
            x = raw.view("<f4").astype(np.float32)
        else:
            raise ValueError(f"{name}: unsupported dtype {t['dtype']}")
        out[name] = x.reshape(t["shape"])
    return out


def rms_norm(x, w, eps):
    """x * rsqrt(mean(x^2) + eps) * w over the last axis."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope_cos_sin(n_pos, head_dim, theta, dt):
    """HF/NeoX RoPE tables [n_pos, head_dim]: frequencies repeated over the two halves."""
    inv_freq = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    ang = np.arange(n_pos, dtype=np.float64)[:, None] * inv_freq[None, :]
    ang = np.concatenate([ang, ang], axis=-1)
    return np.cos(ang).astype(dt), np.sin(ang).astype(dt)


def mlp(h, w, p):
    """down(silu(gate(h)) * up(h)) with the projections under prefix p."""
    g = h @ w[p + "gate_proj.weight"].T
    u = h @ w[p + "up_proj.weight"].T
    return (g / (1 + np.exp(-g)) * u) @ w[p + "down_proj.weight"].T


def routed_experts(h, w, p, k, renormalise, rec, i):
    """Softmax over all experts' router logits, keep the top k (ties: the lower expert id;
    torch.topk leaves ties unspecified), renormalise them if asked, sum the chosen experts'
    MLPs weighted. rec(name, array) records activations for `dump`."""
    logits = h @ w[p + "mlp.gate.weight"].T  # [T, experts]
    rec(f"ffn_moe_logits-{i}", logits)
    prob = np.exp(logits - logits.max(axis=-1, keepdims=True))
    prob /= prob.sum(axis=-1, keepdims=True)
    top = np.argsort(-prob, axis=-1, kind="stable")[:, :k]
    weight = np.take_along_axis(prob, top, axis=-1)
    if renormalise:
        weight = weight / weight.sum(axis=-1, keepdims=True)
    rec(f"ffn_moe_topk-{i}", top.astype(np.float64))
    out = np.zeros_like(h)
    for t in range(h.shape[0]):
        for j in range(k):
            e = int(top[t, j])
            out[t] += weight[t, j] * mlp(h[t:t + 1], w, f"{p}mlp.experts.{e}.")[0]
    return out


def rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


class Qwen3:
    def __init__(self, model_dir, dtype="float64"):
        with open(os.path.join(model_dir, "config.json")) as f:
            self.cfg = json.load(f)
        self.dt = np.dtype(dtype)
        w = load_safetensors(os.path.join(model_dir, "model.safetensors"))
        # a sentence-transformers folder (Qwen3-Embedding) saves the base model without "model."
        self.w = {k if k.startswith(("model.", "lm_head.")) else "model." + k: v.astype(self.dt)
                  for k, v in w.items()}
        tied = self.cfg.get("tie_word_embeddings", False)  # HF ties lm_head to embed_tokens
        self.lm_head = self.w["model.embed_tokens.weight" if tied else "lm_head.weight"]
        if tied and "lm_head.weight" in self.w:
            print("note: tied embeddings; ignoring lm_head.weight in the file", file=sys.stderr)

    def forward(self, ids, last_only=False, trace=None, hidden=False):
        """Token ids -> logits [T, vocab] (or [1, vocab] if last_only). trace: dict to fill.
        hidden: the final-normed hidden states [T, hidden] instead (no lm_head)."""
        c, w, dt = self.cfg, self.w, self.dt
        T, D, eps = len(ids), c["head_dim"], c["rms_norm_eps"]
        nq, nkv = c["num_attention_heads"], c["num_key_value_heads"]
        group = nq // nkv  # query head h reads kv head h // group
        rec = (lambda k, v: trace.__setitem__(k, v.copy())) if trace is not None else (lambda k, v: None)

        x = w["model.embed_tokens.weight"][np.asarray(ids)]
        rec("inp_embd", x)
        cos, sin = rope_cos_sin(T, D, float(c["rope_theta"]), dt)
        cos, sin = cos[:, None, :], sin[:, None, :]  # broadcast over heads
        mask = np.triu(np.full((T, T), -np.inf, dtype=dt), k=1)
        scale = dt.type(1.0 / np.sqrt(D))

        for i in range(c["num_hidden_layers"]):
            p = f"model.layers.{i}."
            h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
            rec(f"attn_norm-{i}", h)
            q = (h @ w[p + "self_attn.q_proj.weight"].T).reshape(T, nq, D)
            k = (h @ w[p + "self_attn.k_proj.weight"].T).reshape(T, nkv, D)
            v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(T, nkv, D)
            q = rms_norm(q, w[p + "self_attn.q_norm.weight"], eps)  # per head, before RoPE
            k = rms_norm(k, w[p + "self_attn.k_norm.weight"], eps)
            rec(f"Qcur_normed-{i}", q)
            rec(f"Kcur_normed-{i}", k)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            rec(f"Qcur-{i}", q)
            rec(f"Kcur-{i}", k)
            rec(f"Vcur-{i}", v)
            k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
            s = np.einsum("qhd,khd->hqk", q, k) * scale + mask
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            s /= s.sum(axis=-1, keepdims=True)
            a = np.einsum("hqk,khd->qhd", s, v).reshape(T, nq * D)
            rec(f"kqv_out-{i}", a)
            a = a @ w[p + "self_attn.o_proj.weight"].T
            rec(f"attn_out-{i}", a)
            x = x + a
            rec(f"ffn_inp-{i}", x)
            h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
            rec(f"ffn_norm-{i}", h)
            if p + "mlp.gate.weight" in w:
                m = self.moe(h, p, i, rec)
            else:
                m = mlp(h, w, p + "mlp.")
            rec(f"ffn_out-{i}", m)
            x = x + m
            rec(f"l_out-{i}", x)

        if last_only:
            x = x[-1:]
        x = rms_norm(x, w["model.norm.weight"], eps)
        rec("result_norm", x)
        if hidden:
            return x
        logits = x @ self.lm_head.T
        rec("result_output", logits)
        return logits

    def moe(self, h, p, i, rec):
        """HF Qwen3MoeSparseMoeBlock: routed_experts, renormalised when norm_topk_prob."""
        c = self.cfg
        return routed_experts(h, self.w, p, c["num_experts_per_tok"], c.get("norm_topk_prob", False), rec, i)

    def embed(self, ids, pooling="last", normalize=True):
        """sentence-transformers' Pooling over the final-normed hidden states, then Normalize."""
        h = self.forward(ids, hidden=True)
        v = {"last": h[-1], "mean": h.mean(axis=0), "cls": h[0]}[pooling]
        return v / max(np.linalg.norm(v), 1e-12) if normalize else v

    def greedy(self, ids, n):
        """n greedy tokens, full recompute each step. Returns (tokens, top1-top2 margins)."""
        ids, toks, margins = list(ids), [], []
        for _ in range(n):
            l = self.forward(ids, last_only=True)[0]
            t1 = int(np.argmax(l))  # ties -> lowest id
            margins.append(float(l[t1] - np.max(np.delete(l, t1))))
            toks.append(t1)
            ids.append(t1)
        return toks, margins


def topk(l, k):
    """Top-k (ids, values) of a 1-D array, by value descending then id ascending."""
    idx = np.argpartition(-l, k)[:k] if k < l.shape[0] else np.arange(l.shape[0])
    idx = idx[np.lexsort((idx, -l[idx]))]
    return idx, l[idx]


def print_logits(L, ids, top, out=None):
    """The `logits` command's output: each row's top ids (rows are the last
    L.shape[0] positions of ids), and the last row as raw f32 into out."""
    first = len(ids) - L.shape[0]
    for j, l in enumerate(L):
        best, vals = topk(l, top)
        print(f"pos {first + j} (token {ids[first + j]}): " +
              " ".join(f"{i}:{v:.6f}" for i, v in zip(best, vals)))
    if out:
        L[-1].astype("<f4").tofile(out)


def print_trace(tr, out=None, width=18):
    """The `dump` command's output: each recorded activation's shape, rms and
    first values, and all of them into an .npz."""
    for k, v in tr.items():
        last = v[-1].ravel()
        print(f"{k:{width}s} {str(v.shape):16s} rms={np.sqrt(np.mean(v * v)):.6g} "
              f"last[:4]={np.array2string(last[:4], precision=6)}")
    if out:
        np.savez(out, **tr)


def parse_ids(s):
    if s.startswith("@"):
        with open(s[1:]) as f:
            s = f.read()
    return [int(t) for t in s.replace("[", " ").replace("]", " ").replace(",", " ").split()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("cmd", choices=["logits", "greedy", "dump", "embed"])
    ap.add_argument("--ids", required=True, type=parse_ids)
    ap.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    ap.add_argument("--top", type=int, default=10, help="logits: top-k to print per position")
    ap.add_argument("--all-positions", action="store_true", help="logits: print every position")
    ap.add_argument("-n", type=int, default=16, help="greedy: tokens to generate")
    ap.add_argument("--pooling", default="last", choices=["last", "mean", "cls"], help="embed: pooling")
    ap.add_argument("--raw", action="store_true", help="embed: no L2 normalisation")
    ap.add_argument("--out", help="logits: raw little-endian f32 of the last position's logits; "
                                  "dump: .npz of all activations")
    a = ap.parse_args()
    m = Qwen3(a.model, a.dtype)

    if a.cmd == "logits":
        print_logits(m.forward(a.ids, last_only=not a.all_positions), a.ids, a.top, a.out)
    elif a.cmd == "embed":
        print(json.dumps([float(x) for x in m.embed(a.ids, a.pooling, not a.raw)]))
    elif a.cmd == "greedy":
        toks, margins = m.greedy(a.ids, a.n)
        print("greedy_ids", json.dumps(toks))
        print("margins   ", json.dumps([round(x, 6) for x in margins]))
    else:
        tr = {}
        m.forward(a.ids, trace=tr)
        print_trace(tr, a.out)

if __name__ == "__main__":
    main()
