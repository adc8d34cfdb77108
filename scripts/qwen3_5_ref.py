#!/usr/bin/python3
"""Numpy reference forward pass of Qwen3.5 text models (qwen3_5 / qwen3_5_moe): a debugging oracle.

Hugging Face semantics, as restated in /work/notes/qwen3_5_spec.md: a hybrid of Gated
DeltaNet layers (linear attention: causal depthwise conv + SiLU, L2-normed q/k, the gated
delta rule, a gated per-head RMSNorm) and gated full-attention layers (q_proj also yields a
sigmoid output gate; q/k RMSNorm; RoPE on the first partial_rotary_factor of each head),
zero-centred (1 + w) RMSNorms, and a dense SwiGLU MLP or a MoE block (softmax router, top-k,
renormalised, plus a sigmoid-gated shared expert).

Both config layouts load: multimodal folders (Qwen3_5[Moe]ForConditionalGeneration, text
parameters under `text_config`, tensors under `model.language_model.`; the `model.visual.*`
and `mtp.*` tensors are skipped) and text-only ones (Qwen3_5[Moe]ForCausalLM, `model.`).
Weights (bf16/f16/f32 safetensors, mixed dtypes allowed) are upcast exactly; all math runs
in --dtype (float64 by default). No batching. forward() takes an optional state (per layer:
the DeltaNet conv inputs + recurrent matrix, or the attention layer's K/V) and returns the
new one, so a prompt may be run in pieces; greedy recomputes the whole sequence each step.

The delta rule has two forms, equal in exact arithmetic: `recurrent` (token by token) and
`chunked` (the WY/UT form over chunks of --chunk tokens, default 64; the default form).

Usage (MODEL is a HF-style folder with config.json + model.safetensors):
  scripts/qwen3_5_ref.py MODEL logits --ids 9707,11,1879 [--top 10] [--all-positions] [--out last.f32]
  scripts/qwen3_5_ref.py MODEL greedy --ids 9707,11,1879 -n 16
  scripts/qwen3_5_ref.py MODEL dump   --ids 9707,11,1879 [--out acts.npz]
  scripts/qwen3_5_ref.py MODEL selfcheck [--ids ...] [--split N]
  scripts/qwen3_5_ref.py MODEL golden --out DIR --prompts tests/fixtures/tiny-qwen3-golden/golden.json
Common options: --dtype float64|float32, --form chunked|recurrent, --chunk 64.
--ids takes comma/space separated ids, or @FILE holding the same (a JSON list works too).
`selfcheck` prints the max abs logit difference between the two delta-rule forms, and
between one pass and the same prompt run in two pieces (state carried across the split).
`golden` writes DIR/golden.json in tests/fixtures/tiny-qwen3-golden's format (same prompts,
16 greedy steps, float64), DIR/logits/<name>.f32 for the prompts of --logits-files, and
DIR/README.md with the measured float32-vs-float64 differences and the self-checks.
"""
import argparse
import json
import os
import struct
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qwen3_ref import (load_safetensors, mlp, parse_ids, print_logits, print_trace, rms_norm,  # noqa: E402
                       routed_experts, topk)


def silu(x):
    return x / (1 + np.exp(-x))


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def softplus(x):
    return np.logaddexp(0, x)


def norm1p(x, w, eps):
    """The model's zero-centred RMSNorm: x * rsqrt(mean(x^2) + eps) * (1 + w)."""
    return rms_norm(x, 1 + w, eps)


def l2norm(x, eps=1e-6):
    """x / sqrt(sum(x^2) + eps) over the last axis (eps inside the sqrt)."""
    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + eps)


def text_config(cfg):
    """(text parameters, tie_word_embeddings) of either config layout."""
    tc = cfg.get("text_config")
    if tc is None:
        return cfg, bool(cfg.get("tie_word_embeddings", False))
    # multimodal: the flag may be at the top level and/or in text_config; the top level
    # (the config of the whole ForConditionalGeneration model) wins where both are given
    tie = cfg.get("tie_word_embeddings", tc.get("tie_word_embeddings", False))
    if "tie_word_embeddings" in cfg and "tie_word_embeddings" in tc and \
            bool(cfg["tie_word_embeddings"]) != bool(tc["tie_word_embeddings"]):
        print("note: tie_word_embeddings differs between the top level and text_config; "
              "using the top level's", file=sys.stderr)
    return tc, bool(tie)


def layer_types(c):
    """The per-layer mixer: the explicit list, else full attention every
    full_attention_interval-th layer (i + 1 divisible by it; default 4)."""
    if c.get("layer_types"):
        return list(c["layer_types"])
    n = c.get("full_attention_interval", 4)
    return ["full_attention" if (i + 1) % n == 0 else "linear_attention"
            for i in range(c["num_hidden_layers"])]


def rope_params(c):
    """(theta, partial_rotary_factor): rope_parameters, else the older top-level keys."""
    rp = c.get("rope_parameters") or c.get("rope_scaling") or {}
    theta = rp.get("rope_theta", c.get("rope_theta", 10000.0))
    prf = rp.get("partial_rotary_factor", c.get("partial_rotary_factor", 1.0))
    return float(theta), float(prf)


class Qwen35:
    def __init__(self, model_dir, dtype="float64", form="chunked", chunk=64):
        with open(os.path.join(model_dir, "config.json")) as f:
            self.cfg = json.load(f)
        self.c, tied = text_config(self.cfg)
        self.model_dir = model_dir
        self.dt = np.dtype(dtype)
        self.form, self.chunk = form, chunk
        w = load_safetensors(os.path.join(model_dir, "model.safetensors"))
        mm = "model.language_model.embed_tokens.weight" in w
        prefix = "model.language_model." if mm else "model."
        self.w = {}
        for k, v in w.items():
            if k.startswith(("model.visual.", "mtp.")):
                continue  # vision tower, multi-token prediction head: not the text model
            if k.startswith(prefix):
                self.w["model." + k[len(prefix):]] = v.astype(self.dt)
            elif k == "lm_head.weight":
                self.w[k] = v.astype(self.dt)
            else:
                print(f"note: ignoring tensor {k}", file=sys.stderr)
        self.lm_head = self.w["model.embed_tokens.weight" if tied else "lm_head.weight"]
        if tied and "lm_head.weight" in self.w:
            print("note: tied embeddings; ignoring lm_head.weight in the file", file=sys.stderr)
        self.types = layer_types(self.c)
        assert len(self.types) == self.c["num_hidden_layers"]
        self.theta, prf = rope_params(self.c)
        self.rot = int(self.c["head_dim"] * prf)

    # ---- full attention -------------------------------------------------------------
    def rope(self, x, pos):
        """NeoX RoPE on the first self.rot dims of each head of x [T, heads, D]."""
        R = self.rot
        if R == 0:
            return x
        inv = self.theta ** (-np.arange(0, R, 2, dtype=np.float64) / R)  # theta^(-2i/R)
        ang = pos.astype(np.float64)[:, None] * inv[None, :]
        cos = np.cos(np.concatenate([ang, ang], -1)).astype(self.dt)[:, None, :]
        sin = np.sin(np.concatenate([ang, ang], -1)).astype(self.dt)[:, None, :]
        r, rest = x[..., :R], x[..., R:]
        rh = np.concatenate([-r[..., R // 2:], r[..., :R // 2]], axis=-1)
        return np.concatenate([r * cos + rh * sin, rest], axis=-1)

    def attention(self, h, p, i, st, rec):
        """Gated full attention. st: None or (K, V) of the earlier positions [P, nkv, D]."""
        c, w, dt = self.c, self.w, self.dt
        T, D, eps = h.shape[0], c["head_dim"], c["rms_norm_eps"]
        nq, nkv = c["num_attention_heads"], c["num_key_value_heads"]
        qg = (h @ w[p + "self_attn.q_proj.weight"].T).reshape(T, nq, 2 * D)
        q, gate = qg[..., :D], qg[..., D:].reshape(T, nq * D)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).reshape(T, nkv, D)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(T, nkv, D)
        q = norm1p(q, w[p + "self_attn.q_norm.weight"], eps)
        k = norm1p(k, w[p + "self_attn.k_norm.weight"], eps)
        P = 0 if st is None else st[0].shape[0]
        pos = np.arange(P, P + T)
        q, k = self.rope(q, pos), self.rope(k, pos)
        rec(f"Qcur-{i}", q)
        rec(f"Kcur-{i}", k)
        rec(f"Vcur-{i}", v)
        if st is not None:
            k, v = np.concatenate([st[0], k]), np.concatenate([st[1], v])
        new = (k, v)
        group = nq // nkv  # query head h reads kv head h // group
        k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
        s = np.einsum("qhd,khd->hqk", q, k) * dt.type(1.0 / np.sqrt(D))
        s = s + np.triu(np.full((T, P + T), -np.inf, dtype=dt), k=P + 1)
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        s /= s.sum(axis=-1, keepdims=True)
        a = np.einsum("hqk,khd->qhd", s, v).reshape(T, nq * D)
        rec(f"kqv_out-{i}", a)
        a = a * sigmoid(gate)
        rec(f"kqv_gated-{i}", a)
        return a @ w[p + "self_attn.o_proj.weight"].T, new

    # ---- Gated DeltaNet ---------------------------------------------------------------
    def deltanet(self, h, p, i, st, rec):
        """Gated DeltaNet. st: None or (conv inputs [K-1, conv_dim], S [Hv, dk, dv])."""
        c, w, dt = self.c, self.w, self.dt
        T = h.shape[0]
        Hk, Hv = c["linear_num_key_heads"], c["linear_num_value_heads"]
        dk, dv = c["linear_key_head_dim"], c["linear_value_head_dim"]
        K = c["linear_conv_kernel_dim"]
        kd, vd = Hk * dk, Hv * dv
        mixed = h @ w[p + "linear_attn.in_proj_qkv.weight"].T  # [T, conv_dim]
        z = h @ w[p + "linear_attn.in_proj_z.weight"].T  # [T, value_dim]
        b = h @ w[p + "linear_attn.in_proj_b.weight"].T  # [T, Hv]
        a = h @ w[p + "linear_attn.in_proj_a.weight"].T  # [T, Hv]
        cw = w[p + "linear_attn.conv1d.weight"][:, 0, :]  # [conv_dim, K]
        prev = np.zeros((K - 1, mixed.shape[1]), dt) if st is None else st[0]
        xs = np.concatenate([prev, mixed])  # [K-1+T, conv_dim]
        conv = sum(cw[:, j] * xs[j:j + T] for j in range(K))
        conv = silu(conv)
        rec(f"conv_out-{i}", conv)
        q = l2norm(conv[:, :kd].reshape(T, Hk, dk)) * dt.type(1.0 / np.sqrt(dk))
        k = l2norm(conv[:, kd:2 * kd].reshape(T, Hk, dk))
        v = conv[:, 2 * kd:].reshape(T, Hv, dv)
        rep = Hv // Hk  # value head j reads key head j // rep
        q, k = np.repeat(q, rep, axis=1), np.repeat(k, rep, axis=1)
        beta = sigmoid(b)
        g = -np.exp(w[p + "linear_attn.A_log"]) * softplus(a + w[p + "linear_attn.dt_bias"])
        rec(f"beta-{i}", beta)
        rec(f"g-{i}", g)
        S = np.zeros((Hv, dk, dv), dt) if st is None else st[1].copy()
        # heads first: [Hv, T, d]
        q, k, v = q.transpose(1, 0, 2), k.transpose(1, 0, 2), v.transpose(1, 0, 2)
        beta, g = beta.T, g.T
        if self.form == "recurrent":
            o, S = delta_recurrent(q, k, v, beta, g, S)
        else:
            o, S = delta_chunked(q, k, v, beta, g, S, self.chunk)
        o = o.transpose(1, 0, 2)  # [T, Hv, dv]
        rec(f"delta_out-{i}", o)
        y = rms_norm(o, w[p + "linear_attn.norm.weight"], c["rms_norm_eps"])  # w as is, not 1+w
        y = (y * silu(z.reshape(T, Hv, dv))).reshape(T, vd)
        rec(f"delta_gated-{i}", y)
        return y @ w[p + "linear_attn.out_proj.weight"].T, (xs[xs.shape[0] - (K - 1):].copy(), S)

    # ---- MLP / MoE ------------------------------------------------------------------------
    def moe(self, h, p, i, rec):
        """Softmax router over all experts, top-k (ties: lower id), always renormalised; plus
        the shared expert scaled by sigmoid(shared_expert_gate(h))."""
        w = self.w
        out = routed_experts(h, w, p, self.c["num_experts_per_tok"], True, rec, i)
        shared = mlp(h, w, p + "mlp.shared_expert.")
        sg = sigmoid(h @ w[p + "mlp.shared_expert_gate.weight"].T)  # [T, 1]
        rec(f"ffn_moe_routed-{i}", out)
        rec(f"ffn_shexp-{i}", sg * shared)
        return out + sg * shared

    # ---- the model ---------------------------------------------------------------------------
    def forward(self, ids, state=None, last_only=False, trace=None, hidden=False):
        """Token ids -> (logits [T, vocab] (or [1, vocab] if last_only), new state).
        state: None for a new sequence, else what an earlier call returned (it is not
        modified). trace: dict to fill. hidden: final-normed hidden states, no lm_head."""
        c, w = self.c, self.w
        eps = c["rms_norm_eps"]
        rec = (lambda k, v: trace.__setitem__(k, v.copy())) if trace is not None else (lambda k, v: None)
        x = w["model.embed_tokens.weight"][np.asarray(ids)]
        rec("inp_embd", x)
        new_state = []
        for i, kind in enumerate(self.types):
            p = f"model.layers.{i}."
            st = None if state is None else state[i]
            h = norm1p(x, w[p + "input_layernorm.weight"], eps)
            rec(f"attn_norm-{i}", h)
            if kind == "full_attention":
                a, ns = self.attention(h, p, i, st, rec)
            elif kind == "linear_attention":
                a, ns = self.deltanet(h, p, i, st, rec)
            else:
                raise ValueError(f"layer {i}: unknown layer type {kind}")
            new_state.append(ns)
            rec(f"attn_out-{i}", a)
            x = x + a
            rec(f"ffn_inp-{i}", x)
            h = norm1p(x, w[p + "post_attention_layernorm.weight"], eps)
            rec(f"ffn_norm-{i}", h)
            m = self.moe(h, p, i, rec) if p + "mlp.gate.weight" in w else mlp(h, w, p + "mlp.")
            rec(f"ffn_out-{i}", m)
            x = x + m
            rec(f"l_out-{i}", x)
        if last_only:
            x = x[-1:]
        x = norm1p(x, w["model.norm.weight"], eps)
        rec("result_norm", x)
        if hidden:
            return x, new_state
        logits = x @ self.lm_head.T
        rec("result_output", logits)
        return logits, new_state

    def greedy(self, ids, n, carry=False):
        """n greedy tokens. Returns (tokens, top1-top2 margins). Each step recomputes the
        whole sequence, or with carry the prompt runs once and each new token runs alone
        on the carried state (the same values up to rounding, ~1e-13 in float64)."""
        ids, toks, margins, state, feed = list(ids), [], [], None, list(ids)
        for _ in range(n):
            if carry:
                l, state = self.forward(feed, state=state, last_only=True)
            else:
                l = self.forward(ids, last_only=True)[0]
            l = l[0]
            t1 = int(np.argmax(l))  # ties -> lowest id
            margins.append(float(l[t1] - np.max(np.delete(l, t1))))
            toks.append(t1)
            ids.append(t1)
            feed = [t1]
        return toks, margins


def delta_recurrent(q, k, v, beta, g, S):
    """The gated delta rule token by token. q, k [H, T, dk], v [H, T, dv], beta, g [H, T],
    S [H, dk, dv] (updated in place). Returns (o [H, T, dv], S)."""
    H, T, dv = v.shape
    o = np.zeros((H, T, dv), v.dtype)
    for t in range(T):
        S *= np.exp(g[:, t])[:, None, None]
        kv_mem = np.einsum("hk,hkv->hv", k[:, t], S)
        delta = beta[:, t, None] * (v[:, t] - kv_mem)
        S += k[:, t, :, None] * delta[:, None, :]
        o[:, t] = np.einsum("hk,hkv->hv", q[:, t], S)
    return o, S


def delta_chunked(q, k, v, beta, g, S, C):
    """The same rule in the chunked WY/UT form, C tokens per chunk (the last may be shorter)."""
    H, T, dv = v.shape
    o = np.zeros((H, T, dv), v.dtype)
    for t0 in range(0, T, C):
        sl = slice(t0, min(T, t0 + C))
        qc, kc, vc, bc = q[:, sl], k[:, sl], v[:, sl], beta[:, sl]
        n = qc.shape[1]
        G = np.cumsum(g[:, sl], axis=1)  # [H, n]
        diff = G[:, :, None] - G[:, None, :]  # G_i - G_j
        strict = np.tril(np.ones((n, n), bool), -1)
        incl = np.tril(np.ones((n, n), bool))
        # exponents only where j <= i (there G_i - G_j <= 0), so nothing overflows
        dec_s = np.where(strict, np.exp(np.where(strict, diff, 0)), 0)
        dec_i = np.where(incl, np.exp(np.where(incl, diff, 0)), 0)
        A = bc[:, :, None] * np.einsum("hid,hjd->hij", kc, kc) * dec_s
        IA = np.eye(n, dtype=v.dtype)[None] + A  # unit lower triangular
        eG = np.exp(G)
        U = np.linalg.solve(IA, bc[:, :, None] * vc)  # T (beta v)
        W = np.linalg.solve(IA, (bc * eG)[:, :, None] * kc)  # T (beta exp(G) k)
        Vn = U - W @ S  # [H, n, dv]
        qk = np.einsum("hid,hjd->hij", qc, kc) * dec_i
        o[:, sl] = (qc * eG[:, :, None]) @ S + qk @ Vn
        eL = np.exp(G[:, -1])
        kd = kc * np.exp(G[:, -1:] - G)[:, :, None]  # exp(G_last - G_i) k_i
        S = eL[:, None, None] * S + kd.transpose(0, 2, 1) @ Vn
    return o, S


# ---- checks and golden --------------------------------------------------------------------
def max_logit_diff(m1, m2, ids, block=64):
    """max |logits1 - logits2| over every position (the lm_head in row blocks)."""
    h1, h2 = m1.forward(ids, hidden=True)[0], m2.forward(ids, hidden=True)[0]
    return max_head_diff(m1, h1, m2, h2, block)


def max_head_diff(m1, h1, m2, h2, block=64):
    d = 0.0
    for r in range(0, h1.shape[0], block):
        l1 = h1[r:r + block] @ m1.lm_head.T
        l2 = h2[r:r + block] @ m2.lm_head.T
        d = max(d, float(np.max(np.abs(l1.astype(np.float64, copy=False) - l2))))
    return d


def split_diff(m, ids, split):
    """max abs logit diff between one pass and ids[:split] then ids[split:] with the state
    carried; also the diff when the second piece gets the attention layers' K/V but fresh
    (zero) DeltaNet states (how much the carried recurrent and conv state matters)."""
    full = m.forward(ids, hidden=True)[0]
    h1, st = m.forward(ids[:split], hidden=True)
    h2, _ = m.forward(ids[split:], state=st, hidden=True)
    kv_only = [s if t == "full_attention" else None for s, t in zip(st, m.types)]
    fresh, _ = m.forward(ids[split:], state=kv_only, hidden=True)
    carried = max_head_diff(m, np.concatenate([h1, h2]), m, full)
    return carried, max_head_diff(m, fresh, m, full[split:])


def default_check_ids(vocab, n=100, seed=1):
    return [int(x) for x in np.random.default_rng(seed).integers(0, vocab, n)]


def selfcheck(mc, mr, ids, split):
    """mc, mr: one model loaded with the chunked and with the recurrent form."""
    chunk = mc.chunk
    d = max_logit_diff(mc, mr, ids)
    print(f"recurrent vs chunked (chunk {chunk}), {len(ids)} tokens, all positions: "
          f"max abs logit diff {d:.3g}")
    res = {"recurrent_vs_chunked": d}
    for name, m in (("chunked", mc), ("recurrent", mr)):
        carried, fresh = split_diff(m, ids, split)
        print(f"split prefill at {split} ({name}): max abs logit diff vs one pass {carried:.3g} "
              f"(zero DeltaNet state carried instead: {fresh:.3g})")
        res[f"split_{name}"] = carried
        res["split_fresh"] = fresh
    return res


def golden(model_dir, out, prompts_file, steps, logits_files, chunk):
    t0 = time.time()
    with open(prompts_file) as f:
        src = json.load(f)
    os.makedirs(os.path.join(out, "logits"), exist_ok=True)
    m64 = Qwen35(model_dir, "float64", "chunked", chunk)
    m32 = Qwen35(model_dir, "float32", "chunked", chunk)
    vocab = m64.lm_head.shape[0]
    r6 = lambda xs: [round(float(x), 6) for x in xs]  # noqa: E731
    prompts, d32, npos, g_equal, g_total, min_pos_margin = [], 0.0, 0, 0, 0, np.inf
    lmin, lmax, stds = np.inf, -np.inf, []
    for sp in src["prompts"]:
        name, ids = sp["name"], list(sp["prompt_ids"])
        h64 = m64.forward(ids, hidden=True)[0]
        h32 = m32.forward(ids, hidden=True)[0]
        d32 = max(d32, max_head_diff(m64, h64, m32, h32))
        npos += len(ids)
        tk_ids, tk_vals = [], []
        for r in range(0, len(ids), 64):
            L = h64[r:r + 64] @ m64.lm_head.T
            lmin, lmax = min(lmin, float(L.min())), max(lmax, float(L.max()))
            stds.append(float(L.std()))
            for l in L:
                i5, v5 = topk(l, 5)
                tk_ids.append([int(x) for x in i5])
                tk_vals.append(r6(v5))
                min_pos_margin = min(min_pos_margin, float(v5[0] - v5[1]))
        last = h64[-1] @ m64.lm_head.T
        i20, v20 = topk(last, 20)
        toks, margins = m64.greedy(ids, steps, carry=True)
        toks32, _ = m32.greedy(ids, steps, carry=True)
        g_equal += sum(1 for a, b in zip(toks, toks32) if a == b)
        g_total += steps
        fn = f"logits/{name}.f32"
        if name in logits_files:
            last.astype("<f4").tofile(os.path.join(out, fn))
        prompts.append({"name": name, "note": sp.get("note", ""), "prompt_ids": ids,
                        "last_logits_top20": {"ids": [int(x) for x in i20], "values": r6(v20)},
                        "topk_per_position": {"k": 5, "ids": tk_ids, "values": tk_vals},
                        "greedy_ids": toks, "greedy_margins": r6(margins),
                        "last_logits_file": fn})
        print(f"{name}: greedy {toks} min margin {min(margins):.4f}", file=sys.stderr)
    g = {"model": os.path.relpath(os.path.abspath(model_dir), os.path.abspath(out)),
         "reference": "scripts/qwen3_5_ref.py, float64 math", "vocab_size": int(vocab),
         "greedy_steps": steps, "prompts": prompts}
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump(g, f, separators=(",", ":"))
        f.write("\n")
    ids = next(p["prompt_ids"] for p in src["prompts"] if p["name"] == "len300")
    chk = selfcheck(m64, Qwen35(model_dir, "float64", "recurrent", chunk), ids, 129)
    margins = [x for p in prompts for x in p["greedy_margins"]]
    distinct = np.mean([len(set(p["greedy_ids"])) for p in prompts])
    meas = {"d32": d32, "npos": npos, "g_equal": g_equal, "g_total": g_total,
            "min_margin": min(margins), "min_pos_margin": min_pos_margin,
            "lmin": lmin, "lmax": lmax, "std": float(np.mean(stds)), "distinct": distinct,
            "seconds": time.time() - t0, **chk}
    write_readme(out, m64, meas, logits_files)
    print(json.dumps(meas), file=sys.stderr)
    return meas


def safetensors_metadata(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n)).get("__metadata__", {})


def write_readme(out, m, s, logits_files):
    c = m.c
    moe = "num_experts" in c
    lay = "".join("F" if t == "full_attention" else "L" for t in m.types)
    name = os.path.basename(os.path.normpath(out))
    model = os.path.relpath(os.path.abspath(m.model_dir), os.path.abspath(out))
    arch = m.cfg["architectures"][0]
    import make_random_qwen3_5
    doc = make_random_qwen3_5.__doc__
    scales = doc[doc.index("    embed_tokens"):].rstrip()
    seed = safetensors_metadata(os.path.join(m.model_dir, "model.safetensors")).get("seed", "?")
    mlp_line = (f"MoE: {c['num_experts']} experts, {c['num_experts_per_tok']} per token, "
                f"moe_intermediate_size {c['moe_intermediate_size']}, shared expert "
                f"{c['shared_expert_intermediate_size']} (sigmoid-gated)" if moe else
                f"dense MLP, intermediate {c['intermediate_size']}")
    tol = 5e-3
    if s["min_margin"] >= 2 * tol:
        greedy_rule = (f"every margin is >= {s['min_margin']:.4f}, above 2x the tolerance, so a "
                       f"correct float32 implementation (recompute, or a KV cache plus carried "
                       f"recurrent and conv state) must reproduce all {s['g_total']} greedy tokens "
                       f"exactly.")
    else:
        greedy_rule = (f"equal up to the first step whose margin is < {2 * tol:g} (the smallest "
                       f"margin is {s['min_margin']:.4f}).")
    layout = ("text parameters under `text_config`, tensors under `model.language_model.`, "
              "plus dummy `model.visual.*` and `mtp.*` tensors a text loader must skip"
              if "text_config" in m.cfg else "text-only layout, tensors under `model.`")
    head = ("tied embeddings (no `lm_head.weight`)" if m.lm_head is m.w["model.embed_tokens.weight"]
            else "untied `lm_head.weight`")
    types_from = ("from `layer_types`" if c.get("layer_types") else
                  f"from full_attention_interval {c.get('full_attention_interval', 4)} (no `layer_types` key)")
    text = f"""# {name}: Qwen3.5 golden outputs (generated by `make fixtures`)

Reference outputs of `scripts/qwen3_5_ref.py` (numpy, Hugging Face Qwen3.5 semantics, the
delta rule in its chunked form, chunk {m.chunk}) for the random model in `{model}`,
**computed in float64** from its bf16/f32 weights (upcast exactly). Same files, fields and
prompts as `tests/fixtures/tiny-qwen3-golden/README.md` (the prompt ids are that folder's;
`reference` names this script). This folder, the model beside it and this README are
written by `make fixtures` (scripts/make_random_qwen3_5.py, then `qwen3_5_ref.py golden`)
and are not committed.

## The model (`{model}`)

- `{arch}`, `model_type` {m.cfg['model_type']}: {layout}.
- vocab {c['vocab_size']} (the real Qwen3 tokenizer of `tests/fixtures/tiny-qwen3`), hidden
  {c['hidden_size']}, rms_norm_eps {c['rms_norm_eps']}, {head}.
- {c['num_hidden_layers']} layers `{lay}` (L = Gated DeltaNet, F = gated full attention), {types_from}.
- {mlp_line}.
- Full attention: {c['num_attention_heads']} heads, {c['num_key_value_heads']} KV heads, head_dim
  {c['head_dim']}, RoPE theta {m.theta:g} on the first {m.rot} dims of each head.
- Gated DeltaNet: {c['linear_num_key_heads']} key heads x {c['linear_key_head_dim']}, {c['linear_num_value_heads']} value heads x {c['linear_value_head_dim']}, conv kernel {c['linear_conv_kernel_dim']}.

Weights bf16 except `linear_attn.A_log` and `linear_attn.dt_bias` (F32, as in the real
checkpoints), random with seed {seed}. The scales (scripts/make_random_qwen3_5.py):

{scales}

Logits are in [{s['lmin']:.1f}, {s['lmax']:.1f}] with std ~{s['std']:.1f}; greedy
continuations have {s['distinct']:.1f} distinct tokens per 16 on average.

## Files

- `golden.json`: the tiny-qwen3-golden format (model, reference, vocab_size,
  greedy_steps 16, prompts[]: name, note, prompt_ids, last_logits_top20,
  topk_per_position (k 5), greedy_ids, greedy_margins, last_logits_file).
  Greedy tokens were computed with the state carried from step to step (prompt once, then
  one token at a time), which equals recomputing the whole sequence each step (see the
  split-prefill check); EOS is not special.
- `logits/<name>.f32`: full last-position logits, raw little-endian float32, for
  {', '.join(sorted(logits_files))} only (the other prompts' `last_logits_file` names a
  file that is not written, as in tiny-qwen3-moe-golden).

## Measured

- float32 numpy (`--dtype float32`) against this float64 golden: max abs logit diff
  **{s['d32']:.2g}** over all {s['npos']} prompt positions (full vocab); greedy tokens
  {s['g_equal']}/{s['g_total']} equal.
- Smallest greedy margin (top1 - top2): **{s['min_margin']:.4f}**; smallest top1-top2 gap
  over the prompt positions: {s['min_pos_margin']:.4f}.
- Recurrent (token by token) vs chunked (chunk {m.chunk}) delta rule, float64, the 300-token
  prompt, all positions: max abs logit diff **{s['recurrent_vs_chunked']:.2g}**.
- Split prefill (len300 run as 129 + 171 tokens, the first piece's conv inputs, recurrent
  states and K/V carried into the second) against one pass: max abs logit diff
  {s['split_chunked']:.2g} (chunked), {s['split_recurrent']:.2g} (recurrent). Carrying only
  the attention K/V and starting the DeltaNet layers from zero conv and recurrent state
  instead moves logits by up to {s['split_fresh']:.1f}: the carried state matters.
- Generation of this folder: {s['seconds']:.1f} s (2 shared CPU cores).

## Tolerances for a float32 C implementation

- **Logit values**: `|c - golden| <= {tol:g}` for every compared value (last-position
  logits files, the top-20, every top-5 entry): ~{tol / max(s['d32'], 1e-12):.0f}x the float32-numpy
  difference above (larger than tiny-qwen3's 2e-3 because these logits are larger and the
  float32 error is ~{s['d32'] / 4.6e-5:.0f}x tiny-qwen3's). Over {tol / 10:g} is worth a look.
- **Top-k ids**: compare values at the golden ids, not id lists (the smallest top1-top2
  gap over prompt positions is {s['min_pos_margin']:.4f}).
- **Greedy ids**: {greedy_rule}
- bf16 activations: expect logit diffs of tenths; compare greedy tokens only up to the first
  step with margin < 0.1.

A wrong delta rule moves logits far more than these tolerances: see the last check above,
and `scripts/qwen3_5_ref.py MODEL selfcheck`.

## How it was made

    scripts/make_random_qwen3_5.py --preset {'tiny-moe' if moe else 'tiny'} --seed {seed} --link-tokenizer --out {os.path.normpath(m.model_dir)}
    scripts/qwen3_5_ref.py {os.path.normpath(m.model_dir)} golden --out {os.path.normpath(out)} \\
        --prompts tests/fixtures/tiny-qwen3-golden/golden.json
"""
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("cmd", choices=["logits", "greedy", "dump", "selfcheck", "golden"])
    ap.add_argument("--ids", type=parse_ids)
    ap.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    ap.add_argument("--form", default="chunked", choices=["chunked", "recurrent"],
                    help="the delta rule's form")
    ap.add_argument("--chunk", type=int, default=64, help="chunked form: tokens per chunk")
    ap.add_argument("--top", type=int, default=10, help="logits: top-k to print per position")
    ap.add_argument("--all-positions", action="store_true", help="logits: print every position")
    ap.add_argument("-n", type=int, default=16, help="greedy: tokens to generate; golden: greedy steps")
    ap.add_argument("--carry", action="store_true",
                    help="greedy: run each new token on the carried state, not a full recompute")
    ap.add_argument("--split", type=int, help="selfcheck: split point (default: about 2/5 of the prompt)")
    ap.add_argument("--prompts", default="tests/fixtures/tiny-qwen3-golden/golden.json",
                    help="golden: a golden.json whose prompts to use")
    ap.add_argument("--logits-files", default="len007,len031,len064,len300",
                    help="golden: prompts whose last-position logits get a .f32 file")
    ap.add_argument("--out", help="logits: raw little-endian f32 of the last position's logits; "
                                  "dump: .npz of all activations; golden: output folder")
    a = ap.parse_args()
    if a.cmd == "golden":
        if not a.out:
            ap.error("golden needs --out")
        golden(a.model, a.out, a.prompts, a.n, set(a.logits_files.split(",")), a.chunk)
        return
    if a.cmd == "selfcheck":
        vocab = text_config(json.load(open(os.path.join(a.model, "config.json"))))[0]["vocab_size"]
        ids = a.ids or default_check_ids(vocab, 150)
        split = a.split if a.split is not None else (2 * len(ids)) // 5
        selfcheck(Qwen35(a.model, a.dtype, "chunked", a.chunk),
                  Qwen35(a.model, a.dtype, "recurrent", a.chunk), ids, split)
        return
    if a.ids is None:
        ap.error(f"{a.cmd} needs --ids")
    m = Qwen35(a.model, a.dtype, a.form, a.chunk)
    if a.cmd == "logits":
        print_logits(m.forward(a.ids, last_only=not a.all_positions)[0], a.ids, a.top, a.out)
    elif a.cmd == "greedy":
        toks, margins = m.greedy(a.ids, a.n, a.carry)
        print("greedy_ids", json.dumps(toks))
        print("margins   ", json.dumps([round(x, 6) for x in margins]))
    else:
        tr = {}
        m.forward(a.ids, trace=tr)
        print_trace(tr, a.out, width=20)

if __name__ == "__main__":
    main()
